//! EC2's compute side as the provider sees it: instances, images and instance types.

use async_trait::async_trait;

use super::error::CloudError;
use crate::api::{Filter, InstanceState, MetadataOptions, SpotMarketOptions, Tags, Volume};

/// An EC2 instance: what the actuators read of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Instance {
    /// `i-…`.
    pub id: String,
    /// EC2's state of it (`None` for a state this provider does not know).
    pub state: Option<InstanceState>,
    /// Why it is in that state, when EC2 says (`Server.SpotInstanceTermination: …`).
    pub state_reason: Option<String>,
    /// Its availability zone.
    pub zone: Option<String>,
    /// Its subnet.
    pub subnet_id: Option<String>,
    /// The security groups of its primary network interface.
    pub security_group_ids: Vec<String>,
    /// `m6i.large`.
    pub instance_type: String,
    /// Its AMI.
    pub image_id: Option<String>,
    /// Its SSH key pair.
    pub key_name: Option<String>,
    /// Its private address.
    pub private_ip: Option<String>,
    /// Its public address.
    pub public_ip: Option<String>,
    /// Its private DNS name.
    pub private_dns: Option<String>,
    /// Its public DNS name.
    pub public_dns: Option<String>,
    /// Its tags.
    pub tags: Tags,
    /// A spot instance.
    pub spot: bool,
    /// When it was launched, in seconds since the Unix epoch; orders two instances found for one
    /// key.
    pub launch_time: Option<i64>,
}

impl Instance {
    /// Whether EC2 has terminated it (or is terminating it): it will never run again.
    pub fn is_gone(&self) -> bool {
        matches!(
            self.state,
            Some(InstanceState::Terminated | InstanceState::ShuttingDown)
        )
    }
}

/// One `RunInstances` call for exactly one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunInstance {
    /// EC2's idempotency token: a replay within its window answers with the instance the first
    /// call made instead of making another.
    pub client_token: String,
    /// The AMI.
    pub image_id: String,
    /// The instance type.
    pub instance_type: String,
    /// The subnet.
    pub subnet_id: String,
    /// Security groups of its network interface.
    pub security_group_ids: Vec<String>,
    /// Give it a public address (`None`: the subnet decides).
    pub public_ip: Option<bool>,
    /// User data, base64-encoded as EC2 takes it.
    pub user_data: String,
    /// An SSH key pair.
    pub key_name: Option<String>,
    /// An IAM instance profile (by name).
    pub iam_instance_profile: Option<String>,
    /// The root volume, on the AMI's root device unless it names its own.
    pub root_volume: Option<(String, Volume)>,
    /// Run it as a spot instance.
    pub spot: Option<SpotMarketOptions>,
    /// Its instance metadata service.
    pub metadata_options: MetadataOptions,
    /// Tags on the instance, its volumes and its network interface, set at creation (so that it
    /// can be found by them from its first moment).
    pub tags: Tags,
}

/// An AMI.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// `ami-…`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// When it was made (RFC 3339, so that the newest sorts last).
    pub creation_date: String,
    /// Its root device (`/dev/sda1`), where a root volume goes.
    pub root_device_name: Option<String>,
    /// `x86_64`, `arm64`.
    pub architecture: Option<String>,
}

/// What an instance type offers (the machine template's capacity).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceTypeInfo {
    /// Its name.
    pub name: String,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Architectures it runs (`x86_64`, `arm64`).
    pub architectures: Vec<String>,
    /// Local instance storage in GB, if it has any.
    pub instance_storage_gb: Option<u64>,
}

/// EC2 instances, images and instance types. Every method is one or a few API calls, each taking
/// a permit of the region's budget ([`crate::throttle`]).
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Compute: Send + Sync {
    /// The instances of these IDs EC2 knows (an unknown ID is left out, never an error).
    async fn instances_by_id(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError>;

    /// The instances matching every filter (all pages).
    async fn instances(&self, filters: &[Filter]) -> Result<Vec<Instance>, CloudError>;

    /// Launches one instance, or — for a `client_token` EC2 has seen — answers with the instance
    /// that token launched.
    async fn run_instance(&self, request: &RunInstance) -> Result<Instance, CloudError>;

    /// Terminates an instance (idempotent in EC2: terminating a terminated instance succeeds).
    async fn terminate_instance(&self, id: &str) -> Result<(), CloudError>;

    /// Adds or replaces `tags` on a resource.
    async fn create_tags(&self, resource_id: &str, tags: &Tags) -> Result<(), CloudError>;

    /// Replaces the security groups of an instance's primary network interface.
    async fn set_security_groups(
        &self,
        instance_id: &str,
        group_ids: &[String],
    ) -> Result<(), CloudError>;

    /// Available AMIs owned by any of `owners` and matching every filter.
    async fn images(&self, owners: &[String], filters: &[Filter])
    -> Result<Vec<Image>, CloudError>;

    /// An instance type, if the region offers it.
    async fn instance_type(&self, name: &str) -> Result<Option<InstanceTypeInfo>, CloudError>;
}
