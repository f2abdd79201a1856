//! The simulated cloud's API, behind the same kind of narrow traits a real provider puts its cloud
//! client behind: [`Compute`] for instances, [`ScaleSets`] for groups of instances the cloud
//! keeps at a size, [`LoadBalancers`] for API-server endpoints, [`EtcdClusters`] for the etcd
//! members control-plane instances run.
//!
//! [`SimulatedCloud`] implements them in memory, with configurable latency, failure injection and
//! quota, and an inspection API for tests; [`CloudServer`] serves it over HTTP and
//! [`RemoteCloud`] reaches it there.

pub mod boot;
#[cfg(feature = "real-etcd")]
mod etcd_processes;
mod remote;
mod server;
mod simulated;

use async_trait::async_trait;

pub use boot::{EtcdCa, UserData};
pub use remote::RemoteCloud;
pub use server::{CloudServer, Inspection};
pub(crate) use simulated::lock;
pub use simulated::{CloudConfig, Faults, MAX_LIST_LAG, SimulatedCloud};

#[cfg(feature = "real-etcd")]
pub use etcd_processes::EtcdProcesses;

/// A cluster's key in the simulated cloud: `<namespace>.<name>` (a namespace has no dots, so the
/// key is unambiguous). Instances are tagged with it ([`InstanceRequest::cluster`]) and etcd
/// clusters named by it.
pub fn cluster_key(namespace: &str, cluster: &str) -> String {
    format!("{namespace}.{cluster}")
}

/// A control-plane instance's etcd member starting or stopping with its instance, as
/// [`SimulatedCloud::observe_etcd_members`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberEvent {
    /// The instance started running: kubeadm starts (or joins) its etcd member.
    Booted {
        /// The etcd cluster ([`InstanceRequest::etcd_cluster`]).
        cluster: String,
        /// The instance, whose ID names the member (as the node's name does).
        instance: String,
        /// The etcd CA the instance's user data installs, for the member's TLS.
        etcd_ca: Option<EtcdCa>,
    },
    /// The instance is gone: its member process stops, its membership stays until removed.
    Gone {
        /// The etcd cluster.
        cluster: String,
        /// The instance.
        instance: String,
    },
}

/// The lifecycle state of a simulated instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum InstanceStatus {
    /// Booting.
    Building,
    /// Running.
    Active,
    /// Being deleted.
    Deleting,
    /// The cloud failed to build it.
    Error,
}

/// An instance as the cloud reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Instance {
    /// The cloud's identifier.
    pub id: String,
    /// The idempotency tag it was created with.
    pub tag: String,
    /// The flavor (size).
    pub flavor: String,
    /// The failure domain it runs in.
    pub zone: Option<String>,
    /// Its private address.
    pub address: String,
    /// Its state.
    pub status: InstanceStatus,
    /// It runs a control plane: kubeadm's static pods and a stacked etcd member.
    #[serde(default)]
    pub control_plane: bool,
    /// The cluster it was created for ([`InstanceRequest::cluster`]), by which
    /// [`Compute::cluster_instances`] lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The scale set that launched it, if one did ([`ScaleSets`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_set: Option<String>,
    /// The revision of the scale set's model it was launched from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

/// An instance size, as the cloud describes it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Flavor {
    /// Its name, as machines ask for it.
    pub name: String,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Memory, in MiB.
    pub memory_mib: u64,
    /// Root disk, in GiB.
    pub disk_gib: u64,
    /// The CPU architecture, as the cloud names it (`x86_64`, `aarch64`).
    pub architecture: String,
}

impl Flavor {
    /// An `x86_64` flavor.
    pub fn new(name: &str, vcpus: u32, memory_mib: u64, disk_gib: u64) -> Self {
        Self {
            name: name.to_string(),
            vcpus,
            memory_mib,
            disk_gib,
            architecture: "x86_64".to_string(),
        }
    }
}

/// What to create.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InstanceRequest {
    /// The idempotency tag (the loop's idempotency key).
    pub tag: String,
    /// The flavor.
    pub flavor: String,
    /// The failure domain.
    pub zone: Option<String>,
    /// The size of the user data, in bytes.
    pub user_data_len: usize,
    /// The user data the instance boots with, when the caller hands it over: a control-plane
    /// instance's stacked etcd member serves TLS with the etcd CA found in it (see
    /// [`boot::etcd_ca`]). Kept only to boot the instance; never reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<UserData>,
    /// The etcd cluster this instance joins as a member once it runs (control-plane instances:
    /// `<namespace>.<cluster>`), as kubeadm's stacked etcd does on a real node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_cluster: Option<String>,
    /// The cluster the instance belongs to ([`cluster_key`]), a tag the cloud lists it by
    /// ([`Compute::cluster_instances`]), as a real provider tags its instances with their
    /// cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Makes the create idempotent: another create with the same token, while the instance it
    /// made exists, answers with that instance instead of making one (EC2's `ClientToken`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token: Option<String>,
}

/// One member of a simulated etcd cluster.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EtcdMember {
    /// The member's identifier.
    pub id: u64,
    /// Its name: the instance's ID (which is also its node's name).
    pub name: String,
    /// Whether its instance runs.
    pub healthy: bool,
}

/// A simulated etcd cluster: its members and its leader.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EtcdCluster {
    /// The members, by identifier.
    pub members: Vec<EtcdMember>,
    /// The leader, when a healthy quorum elects one.
    pub leader: Option<u64>,
}

/// A load balancer fronting a cluster's API servers.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadBalancer {
    /// The cloud's identifier.
    pub id: String,
    /// The idempotency tag it was created with.
    pub tag: String,
    /// Its address.
    pub address: String,
    /// Its port.
    pub port: i32,
    /// Whether it is still being created.
    pub provisioning: bool,
}

/// An error of the simulated cloud API.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "error", rename_all = "camelCase")]
pub enum CloudError {
    /// An injected failure (HTTP 500 in a real cloud).
    #[error("simulated cloud: injected failure in {method}")]
    Injected {
        /// The method that failed.
        method: String,
    },
    /// The instance quota is used up.
    #[error("simulated cloud: quota of {limit} instances exceeded")]
    QuotaExceeded {
        /// The quota.
        limit: usize,
    },
    /// The flavor does not exist.
    #[error("simulated cloud: unknown flavor {flavor:?}")]
    UnknownFlavor {
        /// The flavor asked for.
        flavor: String,
    },
    /// The etcd member does not exist, or cannot lead (it is not healthy).
    #[error("simulated cloud: etcd member {id} of {cluster} {reason}")]
    EtcdMember {
        /// The etcd cluster.
        cluster: String,
        /// The member.
        id: u64,
        /// What is wrong.
        reason: String,
    },
    /// The cloud process could not be reached or answered nonsense (remote mode).
    #[error("simulated cloud unreachable: {reason}")]
    Unreachable {
        /// Why.
        reason: String,
    },
}

impl CloudError {
    /// Whether trying the same call again may succeed: an injected fault (a 5xx) or an
    /// unreachable cloud, not a refusal.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Injected { .. } | Self::Unreachable { .. })
    }
}

/// Instances.
#[async_trait]
pub trait Compute: Send + Sync {
    /// Creates an instance. Not idempotent by itself: like most clouds, two calls create two
    /// instances; callers look up the tag first.
    async fn create_instance(&self, request: InstanceRequest) -> Result<Instance, CloudError>;
    /// The instance with this ID.
    async fn get_instance(&self, id: &str) -> Result<Option<Instance>, CloudError>;
    /// The instances carrying this tag.
    async fn find_instances(&self, tag: &str) -> Result<Vec<Instance>, CloudError>;
    /// Every instance created for `cluster` ([`InstanceRequest::cluster`]), in one call: what a
    /// resync of many machines reads instead of one call per instance. Like
    /// [`find_instances`](Self::find_instances), a list: it may lag behind creates.
    async fn cluster_instances(&self, cluster: &str) -> Result<Vec<Instance>, CloudError>;
    /// Starts deleting the instance; deleting a missing instance is not an error.
    async fn delete_instance(&self, id: &str) -> Result<(), CloudError>;
    /// The flavor of this name, if it exists.
    async fn get_flavor(&self, name: &str) -> Result<Option<Flavor>, CloudError>;
}

/// The etcd clusters that control-plane instances form ([`InstanceRequest::etcd_cluster`]):
/// a member joins when its instance starts running and stays — unhealthy once its instance is
/// gone — until it is removed, as on a real cloud.
#[async_trait]
pub trait EtcdClusters: Send + Sync {
    /// The members and leader of `cluster` (empty when no member ever joined).
    async fn etcd_cluster(&self, cluster: &str) -> Result<EtcdCluster, CloudError>;
    /// Makes the healthy member `id` the leader.
    async fn move_etcd_leader(&self, cluster: &str, id: u64) -> Result<(), CloudError>;
    /// Removes member `id`; a missing member is not an error.
    async fn remove_etcd_member(&self, cluster: &str, id: u64) -> Result<(), CloudError>;
}

/// Load balancers.
#[async_trait]
pub trait LoadBalancers: Send + Sync {
    /// Creates a load balancer (not idempotent by itself).
    async fn create_load_balancer(&self, tag: &str) -> Result<LoadBalancer, CloudError>;
    /// The load balancers carrying this tag.
    async fn find_load_balancers(&self, tag: &str) -> Result<Vec<LoadBalancer>, CloudError>;
    /// Deletes a load balancer; deleting a missing one is not an error.
    async fn delete_load_balancer(&self, id: &str) -> Result<(), CloudError>;
}

/// What a scale set launches its instances from: its model.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScaleSetModel {
    /// The flavor of its instances.
    pub flavor: String,
    /// The revision the caller gives the model; each instance reports the one it was launched
    /// from.
    pub revision: String,
    /// The size of the user data its instances boot with, in bytes (the data itself stays with
    /// the caller, as for instances that run no etcd member).
    pub user_data_len: usize,
}

/// What scale set to create.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScaleSetRequest {
    /// The idempotency tag (the loop's idempotency key).
    pub tag: String,
    /// The cluster its instances belong to ([`cluster_key`]).
    pub cluster: String,
    /// The failure domains its instances are spread over, in turn (none: no zone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// How many instances it keeps.
    pub capacity: u32,
    /// What it launches them from.
    pub model: ScaleSetModel,
    /// Makes the create idempotent, as for instances ([`InstanceRequest::client_token`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token: Option<String>,
}

/// A scale set as the cloud reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScaleSet {
    /// The cloud's identifier.
    pub id: String,
    /// The idempotency tag it was created with.
    pub tag: String,
    /// The cluster its instances belong to.
    pub cluster: String,
    /// How many instances it keeps (removals lower it).
    pub capacity: u32,
    /// What it launches new instances from.
    pub model: ScaleSetModel,
    /// Being deleted, with all its instances.
    pub deleting: bool,
    /// Its instances, whatever their state.
    pub instances: Vec<Instance>,
}

/// Groups of instances the cloud keeps at a size, launching each from the group's current model
/// (an Auto Scaling group, a virtual machine scale set): an instance that vanishes is replaced.
/// The cloud removes one only when asked to by name, or when the group's capacity drops below
/// its count (then the newest), which a careful caller never lets happen.
#[async_trait]
pub trait ScaleSets: Send + Sync {
    /// Creates a scale set (not idempotent by itself, unless a client token is given).
    async fn create_scale_set(&self, request: ScaleSetRequest) -> Result<ScaleSet, CloudError>;
    /// The scale set with this ID.
    async fn get_scale_set(&self, id: &str) -> Result<Option<ScaleSet>, CloudError>;
    /// The scale sets carrying this tag; like every list, it may lag behind creates.
    async fn find_scale_sets(&self, tag: &str) -> Result<Vec<ScaleSet>, CloudError>;
    /// Sets the model new instances are launched from (the running ones keep theirs).
    async fn set_scale_set_model(&self, id: &str, model: ScaleSetModel) -> Result<(), CloudError>;
    /// Sets the number of instances the scale set keeps. Below its count, the cloud terminates
    /// instances of its own choosing (the newest first).
    async fn set_scale_set_capacity(&self, id: &str, capacity: u32) -> Result<(), CloudError>;
    /// Terminates these instances of the scale set, lowering its capacity by one for each that
    /// was in it and not already leaving; instances that are not are ignored.
    async fn remove_scale_set_instances(
        &self,
        id: &str,
        instances: &[String],
    ) -> Result<(), CloudError>;
    /// Starts deleting the scale set and all its instances; a missing one is not an error.
    async fn delete_scale_set(&self, id: &str) -> Result<(), CloudError>;
}
