//! The simulated cloud's API, behind the same kind of narrow traits a real provider puts its cloud
//! client behind: [`Compute`] for instances, [`LoadBalancers`] for API-server endpoints,
//! [`EtcdClusters`] for the etcd members control-plane instances run.
//!
//! [`SimulatedCloud`] implements both in memory, with configurable latency, failure injection and
//! quota, and an inspection API for tests.

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
