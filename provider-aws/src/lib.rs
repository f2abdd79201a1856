//! The AWS infrastructure provider: EC2 instances, VPC networking and an ELBv2 API-server load
//! balancer, tested against `moto_server` on loopback.
//!
//! **Under construction** (issue 24). What exists: the API ([`api`]: `AWSCluster`,
//! `AWSClusterTemplate`, `AWSMachine`, `AWSMachineTemplate`, their CRDs), the names and tags of
//! everything the provider will create ([`naming`]), and what AWS's error answers mean for a
//! reconcile and what of them the user may see ([`cloud::error`]), and the per-region budget of
//! calls every reconcile shares ([`throttle`]). What does not yet: the actuators, the cloud
//! clients, the manager binary — nothing here creates anything in AWS.
//!
//! The AWS SDK crates (`aws-sdk-ec2`, `aws-sdk-elasticloadbalancingv2`, `aws-config`) are behind
//! the default feature `sdk`, so that the API types and CRDs build without them
//! (`default-features = false`, as `xtask` and `capictl` depend on this crate).

pub mod api;
pub mod cloud;
pub mod cluster;
pub mod connector;
pub mod credentials;
pub mod lookup;
pub mod machine;
pub mod naming;
pub mod template;
pub mod throttle;
