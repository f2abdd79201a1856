//! The infrastructure provider contract (v1beta2): what every provider's machine and cluster kinds
//! carry, so that the generic loop can read and record them for any provider.
//!
//! A provider's CRD embeds [`InfraMachineStatus`] (or [`InfraClusterStatus`],
//! [`InfraMachinePoolStatus`]) as its status and implements [`InfraMachine`] (or [`InfraCluster`],
//! [`InfraMachinePool`]). The loop writes only the contract's fields —
//! `spec.providerID`, `status.initialization.provisioned`, `status.addresses`,
//! `status.failureDomain`, `status.failureDomains`, `spec.controlPlaneEndpoint`,
//! `status.conditions` — and the provider's own status fields its actuator reports
//! ([`crate::ProviderStatus`]), with change-only merge patches, so other fields are never
//! touched.

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::api::validation;
use crate::api::{ApiEndpoint, FailureDomain, MachineAddress};

/// `status.initialization` of an infrastructure object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraInitialization {
    /// The infrastructure is fully provisioned. Set once, never unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// The contract's status of an infrastructure machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraMachineStatus {
    /// Provisioning milestones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<InfraInitialization>,

    /// The instance's addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub addresses: Vec<MachineAddress>,

    /// The failure domain the instance landed in, when the cloud says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,

    /// `Ready` and the provider's other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,
}

impl InfraMachineStatus {
    /// Whether `initialization.provisioned` is true.
    pub fn provisioned(&self) -> bool {
        self.initialization
            .as_ref()
            .and_then(|i| i.provisioned)
            .unwrap_or(false)
    }
}

/// The contract's status of an infrastructure cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraClusterStatus {
    /// Provisioning milestones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<InfraInitialization>,

    /// Where machines can be placed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub failure_domains: Vec<FailureDomain>,

    /// `Ready` and the provider's other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,
}

impl InfraClusterStatus {
    /// Whether `initialization.provisioned` is true.
    pub fn provisioned(&self) -> bool {
        self.initialization
            .as_ref()
            .and_then(|i| i.provisioned)
            .unwrap_or(false)
    }
}

/// A provider's machine kind, as the generic loop sees it.
///
/// Infrastructure kinds are namespaced, like the `Machine` that owns them.
pub trait InfraMachine:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// `spec.providerID`, once recorded.
    fn provider_id(&self) -> Option<&str>;

    /// The contract part of `status`, if there is a status.
    fn infra_status(&self) -> Option<&InfraMachineStatus>;
}

/// A provider's cluster kind, as the generic loop sees it.
///
/// Infrastructure kinds are namespaced, like the `Cluster` that owns them.
pub trait InfraCluster:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// `spec.controlPlaneEndpoint`, if set.
    fn control_plane_endpoint(&self) -> Option<&ApiEndpoint>;

    /// The contract part of `status`, if there is a status.
    fn infra_status(&self) -> Option<&InfraClusterStatus>;
}

/// The contract's status of an infrastructure machine pool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraMachinePoolStatus {
    /// Provisioning milestones: `provisioned` once the scale set exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<InfraInitialization>,

    /// The same as `initialization.provisioned`, under the name of the `v1beta1` contract: upstream
    /// Cluster API v1.14's MachinePool controller reads a pool's readiness from this field alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,

    /// How many instances the scale set has (the length of `spec.providerIDList`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// The kind of the infrastructure machine made for each instance (the provider's machine
    /// kind), so that the `MachinePool` controller makes a `Machine` for each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub infrastructure_machine_kind: Option<String>,

    /// `Ready` and the provider's other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,
}

impl InfraMachinePoolStatus {
    /// Whether `initialization.provisioned` is true.
    pub fn provisioned(&self) -> bool {
        self.initialization
            .as_ref()
            .and_then(|i| i.provisioned)
            .unwrap_or(false)
    }
}

/// How far a pool's rollout may go beyond and below its size while it replaces outdated
/// instances (see [`crate::ModelRevision`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolRollout {
    /// Instances beyond the pool's size while new ones start (the loop takes 1 when both limits
    /// are 0, which would let nothing progress).
    pub max_surge: u32,
    /// Instances below the pool's size that may be missing or not ready.
    pub max_unavailable: u32,
}

impl Default for PoolRollout {
    /// One new instance at a time, none missing: a pool never has fewer ready nodes than asked.
    fn default() -> Self {
        Self {
            max_surge: 1,
            max_unavailable: 0,
        }
    }
}

/// A provider's machine pool kind (for example `AWSMachinePool`), as the pool loop sees it.
///
/// Its CRD carries `spec.providerID` and `spec.providerIDList` (at most 10 000 items of 1 to 512
/// characters) and [`InfraMachinePoolStatus`] as its status; the loop writes only those, and the
/// provider's own status fields its actuator reports.
///
/// For each instance the loop makes one object of the provider's machine kind
/// ([`Self::Machine`], as [`Self::machine_for`] describes the instance), so that the
/// `MachinePool` controller makes a `Machine` for it ("MachinePool Machines"): the machine is
/// drained before its instance leaves, and health checks and the cluster autoscaler see each
/// node. The machine reconciler leaves these objects to the pool loop. The machine kind must be of
/// the pool kind's group and version: upstream's `MachinePool` controller lists a pool's machines
/// there (the loop reports any other as an invalid configuration).
pub trait InfraMachinePool:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The provider's machine kind, one object of which stands for each instance of the pool.
    type Machine: InfraMachine;

    /// The machine object of `instance` of this pool: its spec as the provider's machine kind
    /// describes such an instance, with `spec.providerID` set to the instance's. The loop sets
    /// its metadata (name, namespace, labels, owner, finalizer) and its status.
    fn machine_for(&self, instance: &crate::PoolInstance) -> Self::Machine;

    /// `spec.providerID`: the scale set's identifier, once recorded.
    fn provider_id(&self) -> Option<&str>;

    /// `spec.providerIDList`: the provider IDs of the pool's instances, as last recorded.
    fn provider_id_list(&self) -> &[String];

    /// The contract part of `status`, if there is a status.
    fn pool_status(&self) -> Option<&InfraMachinePoolStatus>;

    /// How the pool replaces outdated instances; [`PoolRollout::default`] unless the provider's
    /// spec says otherwise.
    fn rollout(&self) -> PoolRollout {
        PoolRollout::default()
    }

    /// What the pool's instances are made from, which the loop digests into the model's
    /// revision ([`crate::ModelRevision`]): by default the whole `spec` but the contract's
    /// `providerID` and `providerIDList`. A provider whose pool spec holds fields that make no
    /// instance (sizes, rollout limits) leaves them out, so that changing them rolls nothing.
    fn model(&self) -> serde_json::Value {
        let mut spec = serde_json::to_value(self)
            .ok()
            .and_then(|object| object.get("spec").cloned())
            .unwrap_or_default();
        if let serde_json::Value::Object(fields) = &mut spec {
            fields.remove("providerID");
            fields.remove("providerIDList");
        }
        spec
    }
}

/// The CPU architecture of a machine's node, as the kubelet reports it (`GOARCH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// x86-64 (a cloud's `x86_64`).
    Amd64,
    /// 64-bit ARM (a cloud's `aarch64`).
    Arm64,
    /// IBM Z.
    S390x,
    /// 64-bit little-endian POWER.
    Ppc64le,
}

impl Architecture {
    /// The Kubernetes name of a cloud's architecture name: `x86_64`/`amd64`, `aarch64`/`arm64`,
    /// `s390x`, `ppc64le`/`ppc64el` (case-insensitive); `None` for anything else.
    pub fn from_cloud_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "x86_64" | "amd64" | "x86-64" => Some(Self::Amd64),
            "aarch64" | "arm64" => Some(Self::Arm64),
            "s390x" => Some(Self::S390x),
            "ppc64le" | "ppc64el" => Some(Self::Ppc64le),
            _ => None,
        }
    }
}

/// What a machine template's nodes will report about themselves: `status.nodeInfo`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// The CPU architecture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<Architecture>,
    /// The operating system, as the kubelet reports it: `linux` or `windows`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub operating_system: Option<String>,
}

impl NodeInfo {
    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.architecture.is_none() && self.operating_system.is_none()
    }
}

/// The status of an infrastructure machine template (contract: optional, read by the cluster
/// autoscaler to scale a node group from zero).
///
/// The SDK writes it from the provider's [`MachineTemplateActuator`](crate::MachineTemplateActuator):
/// `capacity` and `nodeInfo` as the cloud describes the template's instance type, and `Ready`
/// saying whether that description could be read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplateStatus {
    /// The resources of a machine made from this template, by resource name (`cpu`, `memory`,
    /// `ephemeral-storage`, `nvidia.com/gpu`, ...), as a node's `status.capacity`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub capacity: BTreeMap<String, Quantity>,
    /// Architecture and operating system of a machine made from this template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeInfo>,
    /// `Ready`: whether the cloud's description of the template could be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,
}

/// A provider's machine template kind, as the template reconciler sees it.
///
/// Its CRD carries a status subresource with [`MachineTemplateStatus`] as its status.
pub trait InfraMachineTemplate:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// `status`, if there is one.
    fn template_status(&self) -> Option<&MachineTemplateStatus>;
}
