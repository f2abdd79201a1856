//! The AWS infrastructure provider: EC2 instances, VPC networking and an ELBv2 API-server load
//! balancer, on the official AWS SDK, tested against `moto_server` on loopback.
//!
//! - [`api`]: `AWSCluster`, `AWSClusterTemplate`, `AWSMachine`, `AWSMachineTemplate` (group
//!   `infrastructure.capi-rs.dev`, CAPA's field names, CAPA's webhook checks as CEL rules) and
//!   their CRDs;
//! - [`cloud`]: EC2 and ELBv2 behind narrow traits (`mockall` mocks with feature `mock`), their
//!   SDK adapters (feature `sdk`) and what an AWS error answer means for a reconcile
//!   ([`cloud::error`]);
//! - [`throttle`]: one budget of calls per region shared by every reconcile;
//! - [`credentials`] and [`connector`]: from an `AWSCluster`'s `identityRef` (a Secret of static
//!   credentials, or the manager's own) to clients shared between reconciles;
//! - [`naming`]: the names and tags of everything the provider makes, by which it finds it again;
//! - [`cluster`]: the [`ClusterActuator`](capi_core::ClusterActuator) (VPC → subnets → gateways →
//!   route tables → security groups → network load balancer, and back);
//! - [`machine`]: the [`Actuator`](capi_core::Actuator) — exactly one instance per Machine;
//! - [`pool`]: the [`PoolActuator`](capi_core::PoolActuator) — one Auto Scaling group per
//!   MachinePool, whose instances leave only when the pool loop names them;
//! - [`template`]: machine template capacity from the instance type.
//!
//! The actuators read nothing from the API server but an `identityRef` Secret: every call finds
//! its `AWSCluster` in its scope, read by the loop from the manager's own watch.
//!
//! The `aws-manager` binary (package `provider-aws-bin`) runs them in a `Manager`.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! use std::sync::Arc;
//! use provider_aws::cluster::AwsClusterActuator;
//! use provider_aws::connector::SecretConnector;
//! use provider_aws::machine::AwsMachineActuator;
//!
//! let connector = Arc::new(SecretConnector::new(client));
//! let clusters = AwsClusterActuator::new(connector.clone());
//! let machines = Arc::new(AwsMachineActuator::new(connector));
//! // Hand them to capi_actuator's Manager (add_cluster_reconciler, add_machine_reconciler and
//! // add_machine_template_reconciler: `machines` serves both).
//! # }
//! ```
//!
//! The AWS SDK crates (`aws-sdk-ec2`, `aws-sdk-elasticloadbalancingv2`, `aws-config`) are behind
//! the default feature `sdk`, so that the API types and CRDs build without them
//! (`default-features = false`, as `xtask` and `capictl` depend on this crate); without it the
//! actuators exist over the traits, with no production [`connector`].

pub mod api;
pub mod cloud;
pub mod cluster;
pub mod connector;
pub mod credentials;
pub mod machine;
pub mod naming;
pub mod pool;
pub mod template;
pub mod throttle;
