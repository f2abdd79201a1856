//! Auto Scaling groups and the EC2 launch templates they launch from, as the pool actuator sees
//! them ([`crate::pool`]).

use async_trait::async_trait;

use super::error::CloudError;
use crate::api::{MetadataOptions, SpotMarketOptions, Tags, Volume};

/// The scaling processes the provider keeps suspended on every group it makes: each would
/// terminate instances nobody chose (rebalancing zones, replacing an unhealthy instance before
/// its node was drained). The pool loop replaces a failed instance itself, after draining it.
pub const SUSPENDED_PROCESSES: [&str; 2] = ["AZRebalance", "ReplaceUnhealthy"];

/// An Auto Scaling group: what the pool actuator reads of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Group {
    /// Its name, unique in the region.
    pub name: String,
    /// Its ARN.
    pub arn: String,
    /// How many instances it keeps.
    pub desired: u32,
    /// Its lower bound.
    pub min: u32,
    /// Its upper bound.
    pub max: u32,
    /// The launch template it launches new instances from.
    pub launch_template_id: Option<String>,
    /// Its subnets.
    pub subnet_ids: Vec<String>,
    /// Its tags.
    pub tags: Tags,
    /// The scaling processes suspended on it.
    pub suspended: Vec<String>,
    /// Its instances, in any lifecycle state.
    pub instances: Vec<GroupInstance>,
    /// The group itself is being deleted.
    pub deleting: bool,
    /// Auto Scaling replaces spot instances at an elevated risk of interruption ahead of time.
    pub capacity_rebalance: bool,
}

/// An instance of a group, as the group reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupInstance {
    /// `i-…`.
    pub id: String,
    /// Its availability zone.
    pub zone: Option<String>,
    /// Auto Scaling's lifecycle state (`Pending`, `InService`, `Terminating`, `Standby`, …).
    pub lifecycle: String,
    /// Auto Scaling's health status says `Unhealthy`.
    pub unhealthy: bool,
    /// The launch template Auto Scaling launched it from (moto says the group's current one).
    pub launch_template_id: Option<String>,
}

impl GroupInstance {
    /// Whether the group is taking it out: terminating, terminated, detaching or detached.
    pub fn is_leaving(&self) -> bool {
        ["Terminat", "Detach"]
            .iter()
            .any(|state| self.lifecycle.starts_with(state))
    }
}

/// One `CreateAutoScalingGroup` call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateGroup {
    /// The group's name.
    pub name: String,
    /// The launch template (its default version).
    pub launch_template_id: String,
    /// Lower bound, upper bound and desired capacity.
    pub size: GroupSize,
    /// The subnets its instances launch in.
    pub subnet_ids: Vec<String>,
    /// Tags on the group, each also put on every instance it launches.
    pub tags: Tags,
    /// Replace spot instances at an elevated risk of interruption ahead of time.
    pub capacity_rebalance: bool,
}

/// A group's bounds and desired capacity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupSize {
    /// Lower bound.
    pub min: u32,
    /// Upper bound.
    pub max: u32,
    /// Desired capacity; `None` leaves it as it is (an autoscaler sets it).
    pub desired: Option<u32>,
}

/// One `UpdateAutoScalingGroup` call: what is `None` is left as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupUpdate {
    /// New bounds and desired capacity.
    pub size: Option<GroupSize>,
    /// A new launch template (its default version) for instances launched from now on.
    pub launch_template_id: Option<String>,
    /// New subnets for instances launched from now on.
    pub subnet_ids: Option<Vec<String>>,
    /// Capacity rebalancing on or off.
    pub capacity_rebalance: Option<bool>,
}

/// An EC2 launch template.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchTemplate {
    /// `lt-…`.
    pub id: String,
    /// Its name, unique in the region.
    pub name: String,
    /// Its tags.
    pub tags: Tags,
}

/// One `CreateLaunchTemplate` call: a template of one version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateLaunchTemplate {
    /// Its name.
    pub name: String,
    /// The AMI.
    pub image_id: String,
    /// The instance type.
    pub instance_type: String,
    /// Security groups of the instances' network interface.
    pub security_group_ids: Vec<String>,
    /// User data, base64-encoded as EC2 takes it.
    pub user_data: String,
    /// An SSH key pair.
    pub key_name: Option<String>,
    /// An IAM instance profile (by name).
    pub iam_instance_profile: Option<String>,
    /// The root volume, on this device.
    pub root_volume: Option<(String, Volume)>,
    /// Launch spot instances.
    pub spot: Option<SpotMarketOptions>,
    /// The instances' metadata service.
    pub metadata_options: MetadataOptions,
    /// Tags on every instance and volume launched from it.
    pub instance_tags: Tags,
    /// Tags on the template itself.
    pub tags: Tags,
}

/// Auto Scaling groups and launch templates of one region. Every method is one or a few API
/// calls, each taking a permit of the region's budget ([`crate::throttle`]).
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Scaling: Send + Sync {
    /// The group of this name, if there is one.
    async fn group(&self, name: &str) -> Result<Option<Group>, CloudError>;

    /// Creates a group. An error with code `AlreadyExists` when the name is taken.
    async fn create_group(&self, request: &CreateGroup) -> Result<(), CloudError>;

    /// Changes a group's size or launch template.
    async fn update_group(&self, name: &str, update: &GroupUpdate) -> Result<(), CloudError>;

    /// Adds or replaces `tags` on a group, each also put on every instance it launches from now
    /// on.
    async fn tag_group(&self, name: &str, tags: &Tags) -> Result<(), CloudError>;

    /// Suspends `processes` on a group (suspending a suspended one is no error).
    async fn suspend_processes(&self, name: &str, processes: &[String]) -> Result<(), CloudError>;

    /// Terminates an instance of a group and lowers the group's desired capacity by one, so
    /// that it is not replaced.
    async fn terminate_instance(&self, instance_id: &str) -> Result<(), CloudError>;

    /// Deletes a group with every instance it still holds (`Ok` when there is none). The pool
    /// actuator deletes only a group at a capacity of zero, holding no instance or only
    /// instances on standby.
    async fn delete_group(&self, name: &str) -> Result<(), CloudError>;

    /// The launch templates tagged `key` = `value` (all pages).
    async fn launch_templates(
        &self,
        key: &str,
        value: &str,
    ) -> Result<Vec<LaunchTemplate>, CloudError>;

    /// Creates a launch template. An error with code
    /// `InvalidLaunchTemplateName.AlreadyExistsException` when the name is taken.
    async fn create_launch_template(
        &self,
        request: &CreateLaunchTemplate,
    ) -> Result<LaunchTemplate, CloudError>;

    /// Adds or replaces `tags` on a launch template.
    async fn tag_launch_template(&self, id: &str, tags: &Tags) -> Result<(), CloudError>;

    /// Deletes a launch template (`Ok` when there is none).
    async fn delete_launch_template(&self, id: &str) -> Result<(), CloudError>;
}
