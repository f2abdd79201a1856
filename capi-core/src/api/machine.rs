//! `Machine`: one node of a workload cluster, and the template shape shared by
//! `MachineSet`/`MachineDeployment`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::reference::{ContractVersionedObjectReference, MachineNodeReference};
use super::{Deprecated, FailureV1Beta1Status, validation};

/// The desired state of one machine.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Machine",
    plural = "machines",
    namespaced,
    status = "MachineStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "ma",
    category = "cluster-api",
    doc = "Machine is the Schema for the machines API: one node of a workload cluster.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(
        name = "Node Name",
        type_ = "string",
        json_path = ".status.nodeRef.name"
    ),
    printcolumn(
        name = "Provider ID",
        type_ = "string",
        json_path = ".spec.providerID",
        priority = 10
    ),
    printcolumn(
        name = "Failure domain",
        type_ = "string",
        json_path = ".spec.failureDomain"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(
        name = "Up-to-date",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"UpToDate\")].status"
    ),
    printcolumn(
        name = "Internal-IP",
        type_ = "string",
        json_path = ".status.addresses[?(@.type==\"InternalIP\")].address",
        priority = 10
    ),
    printcolumn(
        name = "External-IP",
        type_ = "string",
        json_path = ".status.addresses[?(@.type==\"ExternalIP\")].address",
        priority = 10
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
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version")
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// The name of the `Cluster` this machine belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,

    /// How the machine gets its bootstrap data.
    pub bootstrap: Bootstrap,

    /// The infrastructure provider's machine object (for example an `OpenStackMachine`).
    pub infrastructure_ref: ContractVersionedObjectReference,

    /// The Kubernetes version of the node, e.g. `v1.30.2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256), pattern(validation::KUBERNETES_VERSION))]
    pub version: Option<String>,

    /// The cloud's identifier of the instance; must equal the `Node`'s `spec.providerID`.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,

    /// The failure domain to place the machine in; one of the `Cluster`'s `status.failureDomains`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,

    /// Seconds the machine must be ready before it counts as available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: Option<i32>,

    /// Timeouts of the deletion steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeletionSpec>,

    /// Conditions that must hold, besides the infrastructure, bootstrap and node, for the
    /// machine to be `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 32), transform = validation::keyed_by_condition_type)]
    pub readiness_gates: Vec<MachineReadinessGate>,

    /// Taints for the machine's node. Stored; put on the node only by upstream Cluster API with
    /// its `MachineTaintPropagation` feature gate (off by default there too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 64), transform = validation::keyed_by_key_and_effect)]
    pub taints: Vec<MachineTaint>,
}

/// Where a machine's bootstrap data comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    /// The bootstrap provider's config object (for example a `KubeadmConfig`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_ref: Option<ContractVersionedObjectReference>,

    /// The Secret holding the bootstrap data (key `value`), set by the bootstrap provider or by
    /// the user. The machine stays `Pending` until it is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub data_secret_name: Option<String>,
}

/// Timeouts of the deletion steps of a machine, in seconds; 0 means no limit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineDeletionSpec {
    /// How long to drain the node before deleting the machine anyway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_drain_timeout_seconds: Option<i32>,

    /// How long to wait for volumes to detach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_volume_detach_timeout_seconds: Option<i32>,

    /// How long to retry deleting the `Node` (default 10 s upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_deletion_timeout_seconds: Option<i32>,
}

/// A condition of the infrastructure or bootstrap object that must hold before the machine counts
/// as `Ready` (upstream `MachineReadinessGate`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineReadinessGate {
    /// The condition type on the Machine that gates readiness.
    #[schemars(length(min = 1, max = 316), pattern(validation::CONDITION_TYPE))]
    pub condition_type: String,

    /// Whether the gate holds when the condition is `True` (`Positive`, the default) or `False`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polarity: Option<ConditionPolarity>,
}

/// The polarity of a readiness gate's condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionPolarity {
    /// The gate holds when the condition is `True`.
    #[default]
    Positive,
    /// The gate holds when the condition is `False`.
    Negative,
}

/// A taint a Machine puts on its Node (upstream `MachineTaint`; propagated only with upstream's
/// `MachineTaintPropagation` feature gate).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTaint {
    /// The taint key.
    #[schemars(length(min = 1, max = 317), pattern(validation::TAINT_KEY))]
    pub key: String,

    /// The taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(validation::TAINT_VALUE))]
    pub value: Option<String>,

    /// What the taint does to pods that do not tolerate it.
    pub effect: TaintEffect,

    /// When the taint is put on the Node: `Always` (kept in sync) or `OnInitialization` (once).
    pub propagation: TaintPropagation,
}

/// The effect of a taint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    /// New pods that do not tolerate it are not scheduled.
    #[default]
    NoSchedule,
    /// The scheduler avoids the node for pods that do not tolerate it.
    PreferNoSchedule,
    /// Pods that do not tolerate it are evicted.
    NoExecute,
}

/// When a Machine's taint is put on its Node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaintPropagation {
    /// Kept on the Node for the Machine's lifetime.
    #[default]
    Always,
    /// Put on the Node once, when it joins.
    OnInitialization,
}

/// The observed state of one machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineStatus {
    /// Provisioning milestones; each flips to `true` once and stays there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<MachineInitializationStatus>,

    /// The workload cluster's node that runs on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<MachineNodeReference>,

    /// Addresses of the instance, copied from the infrastructure machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub addresses: Vec<MachineAddress>,

    /// The failure domain the instance runs in, as the infrastructure machine reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,

    /// When the phase last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,

    // Boxed, as `deletion` and `deprecated` are: mostly unset, and a Machine is held once per
    // machine in the controllers' cache; inline, these ~400 bytes take a Machine (896 bytes)
    // from the allocator's 896-byte class to its 1.5-KiB one.
    /// What the node reports about its system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<Box<NodeSystemInfo>>,

    /// The lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachinePhase>,

    /// When the node's certificates expire, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_expiry_date: Option<Time>,

    /// Progress of the deletion steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<Box<MachineDeletionStatus>>,

    /// The latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_generation: Option<i64>,

    /// Current state of each aspect of the machine (`Ready`, `InfrastructureReady`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,

    /// Fields of the `v1beta1` status, kept for clients of the old version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Box<Deprecated<FailureV1Beta1Status>>>,
}

/// What a node reports about its system (`corev1.NodeSystemInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSystemInfo {
    /// The machine ID.
    #[serde(rename = "machineID")]
    pub machine_id: String,
    /// The system UUID.
    #[serde(rename = "systemUUID")]
    pub system_uuid: String,
    /// The boot ID.
    #[serde(rename = "bootID")]
    pub boot_id: String,
    /// The kernel version.
    pub kernel_version: String,
    /// The OS image.
    pub os_image: String,
    /// The container runtime and its version.
    pub container_runtime_version: String,
    /// The kubelet version.
    pub kubelet_version: String,
    /// The kube-proxy version (deprecated by Kubernetes).
    pub kube_proxy_version: String,
    /// The operating system.
    pub operating_system: String,
    /// The architecture.
    pub architecture: String,
    /// Swap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<NodeSwapStatus>,
}

/// A node's swap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSwapStatus {
    /// Swap capacity, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
}

/// `Machine.status.initialization`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineInitializationStatus {
    /// The infrastructure provider reported the instance as provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,

    /// The bootstrap provider created the bootstrap data Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_data_secret_created: Option<bool>,
}

/// When the deletion steps of a machine started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeletionStatus {
    /// When draining the node started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_drain_start_time: Option<Time>,

    /// When waiting for volumes to detach started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_node_volume_detach_start_time: Option<Time>,

    /// When waiting for pre-drain hooks started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_pre_drain_hook_start_time: Option<Time>,

    /// When waiting for pre-terminate hooks started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_pre_terminate_hook_start_time: Option<Time>,
}

/// One address of a machine.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct MachineAddress {
    /// The kind of address.
    #[serde(rename = "type")]
    pub type_: MachineAddressType,

    /// The address itself.
    #[schemars(length(min = 1, max = 256))]
    pub address: String,
}

/// The kind of a [`MachineAddress`], as for `Node` addresses.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum MachineAddressType {
    /// The host name.
    Hostname,
    /// An IP address reachable from outside the cluster.
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    /// An IP address reachable within the cluster.
    #[serde(rename = "InternalIP")]
    InternalIp,
    /// A DNS name reachable from outside the cluster.
    #[serde(rename = "ExternalDNS")]
    ExternalDns,
    /// A DNS name reachable within the cluster.
    #[serde(rename = "InternalDNS")]
    InternalDns,
}

/// The lifecycle phase of a `Machine`, as upstream defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MachinePhase {
    /// Created; waiting for bootstrap data or infrastructure.
    Pending,
    /// Bootstrap data is ready; the infrastructure is being provisioned.
    Provisioning,
    /// The infrastructure exists; waiting for the node to register.
    Provisioned,
    /// The node registered and is in the cluster.
    Running,
    /// The machine is being updated in place.
    Updating,
    /// Deletion is in progress.
    Deleting,
    /// Everything belonging to the machine is gone; the object is about to disappear.
    Deleted,
    /// A terminal problem needs a user.
    Failed,
    /// The controller cannot tell.
    Unknown,
}

/// Labels and annotations of the objects a template stamps out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels copied onto every created object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Annotations copied onto every created object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The machines a `MachineSet` or `MachineDeployment` creates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplateSpec {
    /// Labels and annotations of each machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minProperties" = 1))]
    pub metadata: Option<TemplateMetadata>,

    /// The spec of each machine.
    pub spec: MachineSpec,
}

impl Machine {
    /// The phase recorded in status, if any.
    pub fn phase(&self) -> Option<MachinePhase> {
        self.status.as_ref().and_then(|s| s.phase)
    }

    /// Whether this machine carries the control-plane label.
    pub fn is_control_plane(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(crate::labels::MACHINE_CONTROL_PLANE))
    }
}
