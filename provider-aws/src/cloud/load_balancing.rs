//! ELBv2 as the provider sees it: the API server's network load balancer, its target group and
//! listener, and the target group's members.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::error::CloudError;
use crate::api::{LoadBalancerScheme, Tags};

/// A load balancer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadBalancer {
    /// Its ARN.
    pub arn: String,
    /// Its name.
    pub name: String,
    /// Its DNS name: the cluster's endpoint.
    pub dns_name: String,
    /// `provisioning`, `active`, `active_impaired`, `failed`.
    pub state: String,
    /// Its VPC.
    pub vpc_id: String,
    /// `network`, `application`, `gateway`.
    pub kind: String,
}

/// What a network load balancer is made with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateLoadBalancer {
    /// Its name (unique in the region and account).
    pub name: String,
    /// Internet-facing or internal.
    pub scheme: LoadBalancerScheme,
    /// One subnet per zone it serves.
    pub subnet_ids: Vec<String>,
    /// Its security groups.
    pub security_group_ids: Vec<String>,
    /// Its tags.
    pub tags: Tags,
}

/// A target group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetGroup {
    /// Its ARN.
    pub arn: String,
    /// Its name.
    pub name: String,
    /// The port targets are reached on.
    pub port: u16,
    /// Its VPC.
    pub vpc_id: String,
}

/// What a TCP target group of instances is made with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateTargetGroup {
    /// Its name (unique in the region and account).
    pub name: String,
    /// Its VPC.
    pub vpc_id: String,
    /// The port targets are reached and health-checked on.
    pub port: u16,
    /// Keep clients' addresses.
    pub preserve_client_ip: bool,
    /// Its tags.
    pub tags: Tags,
}

/// A listener.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listener {
    /// Its ARN.
    pub arn: String,
    /// Its port.
    pub port: u16,
    /// The target groups it forwards to.
    pub target_group_arns: Vec<String>,
}

/// ELBv2. Every method is one or a few API calls, each taking a permit of the region's budget
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

    /// Every load balancer of the region (all pages).
    async fn load_balancers(&self) -> Result<Vec<LoadBalancer>, CloudError>;

    /// The load balancers named `name` (ELBv2 allows one; a stand-in may make more).
    async fn load_balancers_named(&self, name: &str) -> Result<Vec<LoadBalancer>, CloudError>;

    /// The tags of these load balancers or target groups, by ARN.
    async fn tags(&self, arns: &[String]) -> Result<BTreeMap<String, Tags>, CloudError>;

    /// Creates a network load balancer, tagged at creation.
    async fn create_load_balancer(
        &self,
        request: &CreateLoadBalancer,
    ) -> Result<LoadBalancer, CloudError>;

    /// Turns cross-zone load balancing on or off.
    async fn set_cross_zone(&self, arn: &str, enabled: bool) -> Result<(), CloudError>;

    /// Deletes a load balancer (gone already: success).
    async fn delete_load_balancer(&self, arn: &str) -> Result<(), CloudError>;

    /// The target groups named `name`.
    async fn target_groups_named(&self, name: &str) -> Result<Vec<TargetGroup>, CloudError>;

    /// Creates a TCP target group of instances, tagged at creation.
    async fn create_target_group(
        &self,
        request: &CreateTargetGroup,
    ) -> Result<TargetGroup, CloudError>;

    /// Deletes a target group (gone already: success).
    async fn delete_target_group(&self, arn: &str) -> Result<(), CloudError>;

    /// A load balancer's listeners.
    async fn listeners(&self, load_balancer_arn: &str) -> Result<Vec<Listener>, CloudError>;

    /// Adds a TCP listener on `port` forwarding to a target group.
    async fn create_listener(
        &self,
        load_balancer_arn: &str,
        port: u16,
        target_group_arn: &str,
    ) -> Result<Listener, CloudError>;
}
