//! EC2's networking side as the provider sees it: subnets and security groups (what machines are
//! placed in). The cluster's VPC, gateways and route tables join them with the cluster actuator.

use async_trait::async_trait;

use super::error::CloudError;
use crate::api::{Filter, Tags};

/// A subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subnet {
    /// `subnet-…`.
    pub id: String,
    /// Its VPC.
    pub vpc_id: String,
    /// Its availability zone.
    pub zone: String,
    /// Its IPv4 range.
    pub cidr_block: String,
    /// Instances launched in it get a public address by default.
    pub map_public_ip_on_launch: bool,
    /// Its tags.
    pub tags: Tags,
}

/// A security group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecurityGroup {
    /// `sg-…`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its VPC.
    pub vpc_id: String,
    /// Its tags.
    pub tags: Tags,
}

/// EC2 networking. Every method is one or a few API calls, each taking a permit of the region's
/// budget ([`crate::throttle`]).
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Network: Send + Sync {
    /// The subnets matching every filter (`subnet-id`, `vpc-id`, `tag:<key>`, …).
    async fn subnets(&self, filters: &[Filter]) -> Result<Vec<Subnet>, CloudError>;

    /// The security groups matching every filter (`group-id`, `vpc-id`, `tag:<key>`, …).
    async fn security_groups(&self, filters: &[Filter]) -> Result<Vec<SecurityGroup>, CloudError>;
}
