//! What the AWS provider's integration tests share: SDK clients for the `moto_server` that
//! `cargo xtask test` starts (its URL in `CAPI_RS_MOTO_ENDPOINT`), each test in an AWS account of
//! its own — moto keeps its state per account (`x-moto-account-id`), so tests running side by side
//! never see each other's resources, and nothing is ever reset.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

pub mod census;
pub mod endpoint;
pub mod proxy;
pub mod world;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_ec2::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_ec2::config::{
    BehaviorVersion, ConfigBag, Credentials, Intercept, Region, RuntimeComponents,
};
use aws_sdk_ec2::error::BoxError;

pub use endpoint::{REGION, endpoint};

/// Puts every request in one moto account.
#[derive(Debug)]
struct Account(String);

impl Intercept for Account {
    fn name(&self) -> &'static str {
        "moto-account"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        context
            .request_mut()
            .headers_mut()
            .insert("x-moto-account-id", self.0.clone());
        Ok(())
    }
}

/// A 12-digit account ID no other test of this run uses.
pub fn fresh_account() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let seed = u64::try_from(nanos % 1_000_000_000).unwrap_or(0) * 1000
        + u64::from(std::process::id() % 1000)
        + NEXT.fetch_add(1, Ordering::Relaxed) * 1_000_000_000_000 / 7;
    format!("{:012}", seed % 1_000_000_000_000)
}

/// EC2 and ELBv2 clients for moto, in `account`, without retries (moto answers what it does
/// not implement with a 500, which a retry would only repeat).
pub struct Moto {
    pub account: String,
    pub ec2: aws_sdk_ec2::Client,
    pub elb: aws_sdk_elasticloadbalancingv2::Client,
    pub secrets: aws_sdk_secretsmanager::Client,
    pub autoscaling: aws_sdk_autoscaling::Client,
    /// The configurations of all four, for the provider's own clients.
    pub ec2_config: aws_sdk_ec2::Config,
    pub elb_config: aws_sdk_elasticloadbalancingv2::Config,
    pub secrets_config: aws_sdk_secretsmanager::Config,
    pub autoscaling_config: aws_sdk_autoscaling::Config,
}

impl Moto {
    /// Clients in a fresh account.
    pub fn new() -> Self {
        Self::in_account(&fresh_account())
    }

    /// Clients in `account`.
    pub fn in_account(account: &str) -> Self {
        Self::at(&endpoint(), account)
    }

    /// Clients in `account` of the moto at `endpoint` (a proxy in front of it, say).
    pub fn at(endpoint: &str, account: &str) -> Self {
        let credentials = Credentials::new("moto", "moto", None, None, "moto");
        let ec2 = aws_sdk_ec2::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(endpoint)
            .credentials_provider(credentials.clone())
            .retry_config(aws_sdk_ec2::config::retry::RetryConfig::disabled())
            .interceptor(Account(account.to_string()))
            .build();
        let elb = aws_sdk_elasticloadbalancingv2::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(endpoint)
            .credentials_provider(credentials)
            .retry_config(aws_sdk_elasticloadbalancingv2::config::retry::RetryConfig::disabled())
            .interceptor(Account(account.to_string()))
            .build();
        let secrets = aws_sdk_secretsmanager::Config::builder()
            .behavior_version(aws_sdk_secretsmanager::config::BehaviorVersion::latest())
            .region(aws_sdk_secretsmanager::config::Region::new(REGION))
            .endpoint_url(endpoint)
            .credentials_provider(aws_sdk_secretsmanager::config::Credentials::new(
                "moto", "moto", None, None, "moto",
            ))
            .retry_config(aws_sdk_secretsmanager::config::retry::RetryConfig::disabled())
            .interceptor(Account(account.to_string()))
            .build();
        let autoscaling = aws_sdk_autoscaling::Config::builder()
            .behavior_version(aws_sdk_autoscaling::config::BehaviorVersion::latest())
            .region(aws_sdk_autoscaling::config::Region::new(REGION))
            .endpoint_url(endpoint)
            .credentials_provider(aws_sdk_autoscaling::config::Credentials::new(
                "moto", "moto", None, None, "moto",
            ))
            .retry_config(aws_sdk_autoscaling::config::retry::RetryConfig::disabled())
            .interceptor(Account(account.to_string()))
            .build();
        Self {
            account: account.to_string(),
            autoscaling: aws_sdk_autoscaling::Client::from_conf(autoscaling.clone()),
            autoscaling_config: autoscaling,
            secrets: aws_sdk_secretsmanager::Client::from_conf(secrets.clone()),
            secrets_config: secrets,
            ec2: aws_sdk_ec2::Client::from_conf(ec2.clone()),
            elb: aws_sdk_elasticloadbalancingv2::Client::from_conf(elb.clone()),
            ec2_config: ec2,
            elb_config: elb,
        }
    }

    /// Some AMI moto offers.
    pub async fn any_image(&self) -> String {
        let images = self
            .ec2
            .describe_images()
            .owners("amazon")
            .send()
            .await
            .unwrap();
        images
            .images()
            .iter()
            .find_map(|i| i.image_id().map(str::to_string))
            .expect("moto offers AMIs")
    }

    /// A VPC with one subnet in each of two zones; returns the VPC and subnet IDs.
    pub async fn network(&self) -> (String, Vec<String>) {
        let vpc = self
            .ec2
            .create_vpc()
            .cidr_block("10.0.0.0/16")
            .send()
            .await
            .unwrap();
        let vpc = vpc.vpc().and_then(|v| v.vpc_id()).unwrap().to_string();
        let mut subnets = Vec::new();
        for (zone, cidr) in [("us-east-1a", "10.0.0.0/24"), ("us-east-1b", "10.0.1.0/24")] {
            let subnet = self
                .ec2
                .create_subnet()
                .vpc_id(&vpc)
                .availability_zone(zone)
                .cidr_block(cidr)
                .send()
                .await
                .unwrap();
            subnets.push(
                subnet
                    .subnet()
                    .and_then(|s| s.subnet_id())
                    .unwrap()
                    .to_string(),
            );
        }
        (vpc, subnets)
    }
}

/// The provider's clients on this moto account, under a budget of their own.
pub fn provider_clients(moto: &Moto) -> provider_aws::cloud::Clients {
    provider_aws::cloud::Clients::from_sdk(
        moto.ec2_config.clone(),
        moto.elb_config.clone(),
        moto.secrets_config.clone(),
        moto.autoscaling_config.clone(),
        provider_aws::throttle::RegionBudget::new(50.0, 100),
        capi_provider::support::redact::Redaction::default(),
    )
}

/// A [`provider_aws::connector::Connector`] handing out fixed clients.
pub struct FixedConnector(pub provider_aws::cloud::Clients);

#[async_trait::async_trait]
impl provider_aws::connector::Connector for FixedConnector {
    async fn connect(
        &self,
        _: &provider_aws::api::AWSCluster,
    ) -> Result<provider_aws::cloud::Clients, capi_core::ActuatorError> {
        Ok(self.0.clone())
    }
}
