//! ELBv2 as the provider sees it: the API server target group's members. The load balancer,
//! its target group and listener join them with the cluster actuator.

use async_trait::async_trait;

use super::error::CloudError;

/// ELBv2. Every method is one API call taking a permit of the region's budget
/// ([`crate::throttle`]).
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait LoadBalancing: Send + Sync {
    /// The instances registered in a target group (in any health state).
    async fn registered_instances(&self, target_group_arn: &str)
    -> Result<Vec<String>, CloudError>;

    /// Registers an instance (which must be running) in a target group on `port`; registering a
    /// registered instance succeeds.
    async fn register_instance(
        &self,
        target_group_arn: &str,
        instance_id: &str,
        port: u16,
    ) -> Result<(), CloudError>;

    /// Deregisters an instance from a target group; deregistering an unregistered one succeeds.
    async fn deregister_instance(
        &self,
        target_group_arn: &str,
        instance_id: &str,
        port: u16,
    ) -> Result<(), CloudError>;
}
