//! The provider's view of AWS: narrow traits per service ([`Compute`], [`Network`],
//! [`LoadBalancing`], [`Secrets`], [`Scaling`]; `mockall` mocks with feature `mock`), their adapters on the official SDK
//! ([`sdk`], feature `sdk`), and what an AWS error answer means ([`error`]).
//!
//! The traits hold what the actuators need and nothing else, in the provider's own types, so
//! that every branch of an actuator can be unit-tested with mocks — including what the local
//! AWS stand-in (moto) cannot show: a replayed `ClientToken`, an instance not yet visible after
//! its creation, throttling.

pub mod compute;
pub mod error;
pub mod load_balancing;
pub mod network;
pub mod scaling;
#[cfg(feature = "sdk")]
pub mod sdk;
pub mod secrets;

use std::sync::Arc;

use capi_provider::support::redact::Redaction;

#[cfg(any(test, feature = "mock"))]
pub use compute::MockCompute;
pub use compute::{Compute, Image, Instance, InstanceTypeInfo, RunInstance};
pub use error::{CloudError, ErrorClass};
#[cfg(any(test, feature = "mock"))]
pub use load_balancing::MockLoadBalancing;
pub use load_balancing::{
    CreateLoadBalancer, CreateTargetGroup, Listener, LoadBalancer, LoadBalancing, TargetGroup,
};
#[cfg(any(test, feature = "mock"))]
pub use network::MockNetwork;
pub use network::{
    Address, InternetGateway, NatGateway, Network, NetworkInterface, Permission, PermissionSource,
    Route, RouteTable, RouteTarget, SecurityGroup, Subnet, Vpc,
};
#[cfg(any(test, feature = "mock"))]
pub use scaling::MockScaling;
pub use scaling::{
    CreateGroup, CreateLaunchTemplate, Group, GroupInstance, GroupSize, GroupUpdate,
    LaunchTemplate, Scaling,
};
#[cfg(any(test, feature = "mock"))]
pub use secrets::MockSecrets;
pub use secrets::{Secrets, StoredSecret};

/// The log targets of the AWS SDK whose TRACE events print signed requests and bodies (user
/// data, session tokens) and whose DEBUG events print the request's identity (the access key
/// ID): a manager drops both whatever `RUST_LOG` says
/// (`capi_provider::ProviderManager::body_log_targets`).
pub const SDK_LOG_TARGETS: &[&str] = &[
    "aws_sigv4",
    "aws_smithy_runtime",
    "aws_smithy_runtime_api",
    "aws_smithy_http_client",
    "aws_smithy_http",
    "aws_sdk_autoscaling",
    "aws_sdk_ec2",
    "aws_sdk_elasticloadbalancingv2",
    "aws_sdk_secretsmanager",
    "aws_sdk_sts",
    "aws_config",
    "aws_runtime",
    "hyper",
    "hyper_util",
];

/// The clients of one region and one set of credentials, and what of their errors must be
/// blanked before a user sees them.
#[derive(Clone)]
pub struct Clients {
    /// EC2 instances, images, instance types.
    pub compute: Arc<dyn Compute>,
    /// EC2 networking.
    pub network: Arc<dyn Network>,
    /// ELBv2.
    pub load_balancing: Arc<dyn LoadBalancing>,
    /// Secrets Manager (bootstrap data).
    pub secrets: Arc<dyn Secrets>,
    /// Auto Scaling groups and launch templates (machine pools).
    pub scaling: Arc<dyn Scaling>,
    /// The credentials' secret values, blanked from every cloud message shown to a user.
    pub redaction: Redaction,
}

impl Clients {
    /// The actuator's answer to a cloud error (see [`CloudError::into_actuator_error`]),
    /// sanitised with these clients' redaction.
    pub fn error(&self, error: CloudError) -> capi_core::ActuatorError {
        error.into_actuator_error(&self.redaction)
    }
}

#[cfg(feature = "sdk")]
impl Clients {
    /// Clients on the SDK for one region's EC2, ELBv2, Secrets Manager and Auto Scaling
    /// configurations, under `budget`.
    pub fn from_sdk(
        ec2: aws_sdk_ec2::Config,
        elb: aws_sdk_elasticloadbalancingv2::Config,
        secrets: aws_sdk_secretsmanager::Config,
        autoscaling: aws_sdk_autoscaling::Config,
        budget: crate::throttle::RegionBudget,
        redaction: Redaction,
    ) -> Self {
        let ec2_client = aws_sdk_ec2::Client::from_conf(ec2);
        let scaling = sdk::AutoScaling::new(
            aws_sdk_autoscaling::Client::from_conf(autoscaling),
            ec2_client.clone(),
            budget.clone(),
        );
        let ec2 = sdk::Ec2::new(ec2_client, budget.clone());
        Self {
            scaling: Arc::new(scaling),
            compute: Arc::new(ec2.clone()),
            network: Arc::new(ec2),
            load_balancing: Arc::new(sdk::Elb::new(
                aws_sdk_elasticloadbalancingv2::Client::from_conf(elb),
                budget.clone(),
            )),
            secrets: Arc::new(sdk::SecretsManager::new(
                aws_sdk_secretsmanager::Client::from_conf(secrets),
                budget,
            )),
            redaction,
        }
    }
}
