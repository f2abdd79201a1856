//! `Cluster`: the root object of a workload cluster.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::reference::ContractVersionedObjectReference;
use super::topology::Topology;
use super::{Deprecated, FailureV1Beta1Status, MachineReadinessGate, validation};

/// The desired state of a workload cluster.
///
/// Manifest example (the upstream quick-start shape applies unchanged):
///
/// ```yaml
/// apiVersion: cluster.x-k8s.io/v1beta2
/// kind: Cluster
/// metadata: {name: demo, namespace: default}
/// spec:
///   clusterNetwork:
///     pods: {cidrBlocks: ["192.168.0.0/16"]}
///     services: {cidrBlocks: ["10.128.0.0/12"]}
///     serviceDomain: cluster.local
///   infrastructureRef: {apiGroup: infrastructure.example.io, kind: ExampleCluster, name: demo}
/// ```
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Cluster",
    plural = "clusters",
    namespaced,
    status = "ClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "cl",
    category = "cluster-api",
    doc = "Cluster is the Schema for the clusters API: a workload cluster managed by Cluster API.",
    printcolumn(
        name = "ClusterClass",
        type_ = "string",
        json_path = ".spec.topology.classRef.name"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(
        name = "CP Desired",
        type_ = "integer",
        json_path = ".status.controlPlane.desiredReplicas"
    ),
    printcolumn(
        name = "CP Current",
        type_ = "integer",
        json_path = ".status.controlPlane.replicas",
        priority = 10
    ),
    printcolumn(
        name = "CP Ready",
        type_ = "integer",
        json_path = ".status.controlPlane.readyReplicas",
        priority = 10
    ),
    printcolumn(
        name = "CP Available",
        type_ = "integer",
        json_path = ".status.controlPlane.availableReplicas"
    ),
    printcolumn(
        name = "CP Up-to-date",
        type_ = "integer",
        json_path = ".status.controlPlane.upToDateReplicas"
    ),
    printcolumn(
        name = "W Desired",
        type_ = "integer",
        json_path = ".status.workers.desiredReplicas"
    ),
    printcolumn(
        name = "W Current",
        type_ = "integer",
        json_path = ".status.workers.replicas",
        priority = 10
    ),
    printcolumn(
        name = "W Ready",
        type_ = "integer",
        json_path = ".status.workers.readyReplicas",
        priority = 10
    ),
    printcolumn(
        name = "W Available",
        type_ = "integer",
        json_path = ".status.workers.availableReplicas"
    ),
    printcolumn(
        name = "W Up-to-date",
        type_ = "integer",
        json_path = ".status.workers.upToDateReplicas"
    ),
    printcolumn(
        name = "Paused",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Paused\")].status",
        priority = 10
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".spec.topology.version"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ClusterSpec {
    /// Stops every controller from reconciling this cluster and the objects that belong to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,

    /// The cluster's network configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_network: Option<ClusterNetwork>,

    /// The endpoint of the control plane. Set by the infrastructure provider when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,

    /// The control plane provider's object (for example a `KubeadmControlPlane`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_ref: Option<ContractVersionedObjectReference>,

    /// The infrastructure provider's cluster object (for example an `OpenStackCluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractVersionedObjectReference>,

    /// The cluster's shape through a ClusterClass. Stored as upstream does; this workspace's
    /// core controllers do not act on it (see [`Topology`] and the `TopologyReconciled`
    /// condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,

    /// Conditions, besides the standard ones, that must hold for the cluster to be `Available`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 32), transform = validation::keyed_by_condition_type)]
    pub availability_gates: Vec<ClusterAvailabilityGate>,
}

/// A condition that must hold for a cluster to be `Available` (the shape of a machine's
/// readiness gate).
pub type ClusterAvailabilityGate = MachineReadinessGate;

/// Network ranges and ports of a workload cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ClusterNetwork {
    /// The port the API server binds to. Defaults to 6443 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub api_server_port: Option<i32>,

    /// Service IP ranges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<NetworkRanges>,

    /// Pod IP ranges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NetworkRanges>,

    /// The DNS domain of services, `cluster.local` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_domain: Option<String>,
}

/// A list of CIDR blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRanges {
    /// CIDR blocks such as `10.96.0.0/12` or `fd00::/108`; at most 100.
    #[schemars(
        length(min = 1, max = 100),
        inner(length(min = 1, max = 43), pattern(validation::CIDR))
    )]
    pub cidr_blocks: Vec<String>,
}

/// A host and port at which an API server can be reached.
///
/// Both fields are omitted on the wire while unset (empty host, port 0), as upstream does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ApiEndpoint {
    /// The host name or IP address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1, max = 512))]
    pub host: String,

    /// The TCP port.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

impl ApiEndpoint {
    /// Whether neither host nor port is set.
    pub fn is_zero(&self) -> bool {
        self.host.is_empty() && self.port == 0
    }

    /// Whether both host and port are set: the endpoint can be dialled.
    pub fn is_valid(&self) -> bool {
        !self.host.is_empty() && self.port > 0
    }
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

/// The observed state of a workload cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ClusterStatus {
    /// Provisioning milestones; each flips to `true` once and stays there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ClusterInitializationStatus>,

    /// Replica counts of the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ReplicaSummary>,

    /// Replica counts of all worker machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<ReplicaSummary>,

    /// Failure domains reported by the infrastructure provider, sorted by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), transform = keyed_by_name)]
    pub failure_domains: Vec<FailureDomain>,

    /// The lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClusterPhase>,

    /// The latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_generation: Option<i64>,

    /// Current state of each aspect of the cluster (`Available`, `InfrastructureReady`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,

    /// Fields of the `v1beta1` status, kept for clients of the old version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecated<FailureV1Beta1Status>>,
}

fn keyed_by_name(schema: &mut schemars::Schema) {
    validation::list_map(schema, &["name"]);
}

/// `Cluster.status.initialization`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ClusterInitializationStatus {
    /// The infrastructure provider reported the cluster infrastructure as provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,

    /// The control plane accepts requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
}

/// Replica counts of a group of machines (`status.controlPlane`, `status.workers`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSummary {
    /// Machines the owners ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// Machines that exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Machines whose `Ready` condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Machines whose `Available` condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Machines whose spec matches their owner's template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    /// The Kubernetes versions the machines run, and how many run each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 32))]
    pub versions: Vec<StatusVersion>,
    /// The versions a topology upgrade goes through (written by a topology controller).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 32))]
    pub upgrade_plan: Vec<UpgradeStep>,
}

/// One Kubernetes version and how many machines run it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusVersion {
    /// The version.
    #[schemars(length(min = 1, max = 256))]
    pub version: String,
    /// How many machines run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub replicas: Option<i32>,
}

/// One step of a planned upgrade.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStep {
    /// The version of this step.
    #[schemars(length(min = 1, max = 256))]
    pub version: String,
}

/// A failure domain (availability zone, fault domain …) machines can be spread over.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    /// The failure domain's name, as machines refer to it in `spec.failureDomain`.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,

    /// Whether control-plane machines may be placed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,

    /// Free-form provider attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

/// The lifecycle phase of a `Cluster`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ClusterPhase {
    /// Created; nothing provisioned yet.
    Pending,
    /// Infrastructure or control plane are being provisioned.
    Provisioning,
    /// Infrastructure is provisioned and the control plane is reachable.
    Provisioned,
    /// Deletion is in progress.
    Deleting,
    /// A terminal problem needs a user.
    Failed,
    /// The controller cannot tell.
    Unknown,
}

impl Cluster {
    /// Whether `spec.paused` is set or the object carries the `cluster.x-k8s.io/paused`
    /// annotation: controllers must then leave the cluster and its objects alone.
    pub fn is_paused(&self) -> bool {
        self.spec.paused.unwrap_or(false) || crate::labels::has_paused_annotation(&self.metadata)
    }

    /// Whether the infrastructure provider reported the cluster infrastructure as provisioned.
    pub fn infrastructure_provisioned(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.infrastructure_provisioned)
            .unwrap_or(false)
    }
}
