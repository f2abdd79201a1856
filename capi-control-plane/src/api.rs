//! `KubeadmControlPlane` and `KubeadmControlPlaneTemplate`, group `controlplane.cluster.x-k8s.io`,
//! version `v1beta2`: every field of upstream Cluster API v1.14's schema, with its types, bounds,
//! list markers, printer columns and scale subresource.
//!
//! Upstream checks some rules in its admission webhook rather than in the schema; here they are
//! CEL rules of the CRD, so that a management cluster without webhooks refuses the same objects
//! with the same field paths: `replicas` at least 1 and odd (etcd is stacked: an even count
//! buys no extra failure tolerance), `rollout.strategy.rollingUpdate.maxSurge` 0 or 1, `maxSurge:
//! 0` only with 3 replicas or more, and a `machineNaming.template` that contains `{{ .random }}`.
//! What upstream's webhook defaults (`replicas: 1`) is a schema default; an unset
//! `rollout.strategy` means `RollingUpdate` with `maxSurge: 1`, as upstream defaults it.

use capi_bootstrap::api::KubeadmConfigSpec;
use capi_core::api::{
    ContractVersionedObjectReference, MachineDeletionSpec, MachineReadinessGate, MachineTaint,
    StatusVersion, TemplateMetadata, V1Beta1Condition, validation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

/// The finalizer the controller puts on every `KubeadmControlPlane`.
pub const KUBEADM_CONTROL_PLANE_FINALIZER: &str = "kubeadm.controlplane.cluster.x-k8s.io";

/// The desired state of a cluster's control plane.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "KubeadmControlPlane",
    plural = "kubeadmcontrolplanes",
    namespaced,
    status = "KubeadmControlPlaneStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "kcp",
    category = "cluster-api",
    doc = "KubeadmControlPlane is the Schema for the KubeadmControlPlane API: the control plane machines of a cluster, kubeadm init and join, etcd membership included.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        description = "Cluster"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status",
        description = "Cluster pass all availability checks"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "The desired number of machines"
    ),
    printcolumn(
        name = "Current",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "The number of machines"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "The number of machines with Ready condition true"
    ),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableReplicas",
        description = "The number of machines with Available condition true"
    ),
    printcolumn(
        name = "Up-to-date",
        type_ = "integer",
        json_path = ".status.upToDateReplicas",
        description = "The number of machines with UpToDate condition true"
    ),
    printcolumn(
        name = "Paused",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Paused\")].status",
        description = "Reconciliation paused",
        priority = 10
    ),
    printcolumn(
        name = "Initialized",
        type_ = "boolean",
        json_path = ".status.initialization.controlPlaneInitialized",
        description = "This denotes whether or not the control plane can accept requests"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time duration since creation of KubeadmControlPlane"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".spec.version",
        description = "Kubernetes version associated with this control plane"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = control_plane_rules)]
pub struct KubeadmControlPlaneSpec {
    /// How many control-plane machines (default 1). Odd: etcd runs on them, and an even count
    /// tolerates no more failures than one fewer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("default" = 1))]
    pub replicas: Option<i32>,

    /// The Kubernetes version of the control plane, e.g. `v1.34.1`.
    #[schemars(length(min = 1, max = 256), pattern(validation::KUBERNETES_VERSION))]
    pub version: String,

    /// The machines: their metadata, infrastructure template, deletion timeouts, readiness gates
    /// and taints.
    pub machine_template: KubeadmControlPlaneMachineTemplate,

    /// How each machine bootstraps (the same type as `KubeadmConfig.spec`); the controller
    /// writes `initConfiguration` for the first machine and `joinConfiguration` for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeadm_config_spec: Option<KubeadmConfigSpec>,

    /// When and how machines are replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<KubeadmControlPlaneRolloutSpec>,

    /// How machines a MachineHealthCheck marks unhealthy are remediated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<KubeadmControlPlaneRemediationSpec>,

    /// How the machines are named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming: Option<MachineNamingSpec>,
}

/// The rules upstream's admission webhook checks across fields, as CEL rules of the spec.
fn control_plane_rules(schema: &mut Schema) {
    // Only stacked etcd is modelled (`etcd.external` is not yet part of the bootstrap types), so
    // every control plane runs etcd on its machines.
    validation::add_rule(
        schema,
        "!has(self.replicas) || self.replicas % 2 == 1",
        "replicas cannot be an even number when etcd is stacked",
    );
    let max_surge = "self.rollout.strategy.rollingUpdate.maxSurge";
    validation::add_rule(
        schema,
        &format!(
            "!has(self.rollout) || !has(self.rollout.strategy) || !has(self.rollout.strategy.rollingUpdate) \
             || !has({max_surge}) || (type({max_surge}) == int ? {max_surge} != 0 : {max_surge} != '0') \
             || (has(self.replicas) && self.replicas >= 3)"
        ),
        "rollout.strategy.rollingUpdate.maxSurge 0 needs at least 3 replicas: replacing a machine without a surge takes one away first",
    );
}

/// `spec.machineTemplate`: the control-plane machines the controller creates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneMachineTemplate {
    /// Labels and annotations of each machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minProperties" = 1))]
    pub metadata: Option<TemplateMetadata>,

    /// The spec of each machine.
    pub spec: KubeadmControlPlaneMachineTemplateSpec,
}

/// `spec.machineTemplate.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneMachineTemplateSpec {
    /// The infrastructure machine template each machine's infrastructure is cloned from.
    pub infrastructure_ref: ContractVersionedObjectReference,

    /// Conditions that must hold, besides the usual ones, before a machine counts as ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 32), transform = validation::keyed_by_condition_type)]
    pub readiness_gates: Vec<MachineReadinessGate>,

    /// Timeouts of the deletion steps of each machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minProperties" = 1))]
    pub deletion: Option<MachineDeletionSpec>,

    /// Taints each machine puts on its node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 64), transform = validation::keyed_by_key_and_effect)]
    pub taints: Vec<MachineTaint>,
}

/// `spec.rollout`: when machines are replaced, and how.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmControlPlaneRolloutSpec {
    /// Replace machines before something expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<KubeadmControlPlaneRolloutBefore>,

    /// Replace every machine created before this time (RFC 3339), once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation::rfc3339_time")]
    pub after: Option<Time>,

    /// The strategy; `RollingUpdate` with `maxSurge: 1` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<KubeadmControlPlaneRolloutStrategy>,
}

/// `spec.rollout.before`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmControlPlaneRolloutBefore {
    /// Replace a machine whose certificates expire within this many days (at least 7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 7))]
    pub certificates_expiry_days: Option<i32>,
}

/// `spec.rollout.strategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmControlPlaneRolloutStrategy {
    /// The strategy: `RollingUpdate`, the only one.
    #[serde(rename = "type")]
    pub type_: KubeadmControlPlaneRolloutStrategyType,

    /// Parameters of `RollingUpdate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<KubeadmControlPlaneRollingUpdate>,
}

/// The rollout strategies of a control plane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum KubeadmControlPlaneRolloutStrategyType {
    /// Replace machines one at a time.
    #[default]
    RollingUpdate,
}

/// `spec.rollout.strategy.rollingUpdate`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1), transform = max_surge_zero_or_one)]
pub struct KubeadmControlPlaneRollingUpdate {
    /// How many machines above `replicas` a rollout may create: 1 (the default: a new machine
    /// joins before an old one goes) or 0 (an old machine goes first; needs 3 replicas or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string")]
    pub max_surge: Option<IntOrString>,
}

fn max_surge_zero_or_one(schema: &mut Schema) {
    validation::add_rule(
        schema,
        "!has(self.maxSurge) || (type(self.maxSurge) == int ? self.maxSurge in [0, 1] : self.maxSurge in ['0', '1'])",
        "maxSurge must be 0 or 1",
    );
}

/// An `intstr.IntOrString` as upstream declares it.
fn int_or_string(_: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": true,
        "nullable": true,
    })
}

/// `spec.remediation`: how unhealthy control-plane machines are replaced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmControlPlaneRemediationSpec {
    /// How often remediation is retried for a machine that replaced a remediated one and turned
    /// unhealthy too (unset: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retry: Option<i32>,

    /// How long to wait before the next retry (unset: at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub retry_period_seconds: Option<i32>,

    /// How long a replacement must stay healthy before a new failure counts as a new problem
    /// rather than a retry (unset: 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_healthy_period_seconds: Option<i32>,
}

/// `spec.machineNaming`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1), transform = naming_has_random)]
pub struct MachineNamingSpec {
    /// A Go template for machine names; must contain `{{ .random }}`, may use
    /// `{{ .cluster.name }}` and `{{ .kubeadmControlPlane.name }}` (default
    /// `{{ .kubeadmControlPlane.name }}-{{ .random }}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub template: Option<String>,
}

fn naming_has_random(schema: &mut Schema) {
    validation::add_rule(
        schema,
        "!has(self.template) || self.template.contains('{{ .random }}')",
        "template must contain {{ .random }}, so that two machines never get the same name",
    );
}

/// The observed state of a control plane.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmControlPlaneStatus {
    /// `Available`, `Initialized`, `CertificatesAvailable`, `EtcdClusterHealthy`,
    /// `ControlPlaneComponentsHealthy`, `MachinesReady`, `MachinesUpToDate`, `RollingOut`,
    /// `ScalingUp`, `ScalingDown`, `Remediating`, `Deleting`, `Paused`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,

    /// Milestones of provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<KubeadmControlPlaneInitializationStatus>,

    /// The label selector of the machines, in query-parameter form (the scale subresource's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub selector: Option<String>,

    /// How many machines exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// How many machines are `Ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// How many machines are `Available`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,

    /// How many machines are `UpToDate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,

    /// The Kubernetes versions the machines run, oldest first, with how many run each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), transform = keyed_by_version)]
    pub versions: Vec<StatusVersion>,

    /// The oldest version the machines run (deprecated upstream in favour of `versions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub version: Option<String>,

    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_generation: Option<i64>,

    /// The last remediation this control plane made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_remediation: Option<LastRemediationStatus>,

    /// Fields of the `v1beta1` status, kept for clients of the old version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<KubeadmControlPlaneDeprecatedStatus>,
}

fn keyed_by_version(schema: &mut Schema) {
    validation::list_map(schema, &["version"]);
}

/// `status.initialization`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmControlPlaneInitializationStatus {
    /// The control plane accepts requests: the first machine ran `kubeadm init` and its API
    /// server answers. Never goes back to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
}

/// `status.lastRemediation`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastRemediationStatus {
    /// The machine that was remediated.
    #[schemars(length(min = 1, max = 253))]
    pub machine: String,

    /// When.
    pub time: Time,

    /// How many retries of remediation the machine's slot has seen.
    #[schemars(range(min = 0))]
    pub retry_count: i32,
}

/// `status.deprecated`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneDeprecatedStatus {
    /// The `v1beta1` fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<KubeadmControlPlaneV1Beta1Status>,
}

/// The status fields of `v1beta1`, for its clients.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneV1Beta1Status {
    /// Conditions in the `v1beta1` shape.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,

    /// A terminal failure's reason (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,

    /// A terminal failure's message (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub failure_message: Option<String>,

    /// Machines with the desired spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,

    /// Machines ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Machines not available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
}

/// The control plane a ClusterClass stamps out: a `KubeadmControlPlane` without what the
/// topology fills in (`replicas`, `version`, the infrastructure template, readiness gates).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "KubeadmControlPlaneTemplate",
    plural = "kubeadmcontrolplanetemplates",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "KubeadmControlPlaneTemplate is the Schema for the kubeadmcontrolplanetemplates API: a control plane for a ClusterClass.",
    printcolumn(
        name = "ClusterClass",
        type_ = "string",
        json_path = ".metadata.ownerReferences[?(@.kind==\"ClusterClass\")].name",
        description = "Name of the ClusterClass owning this template"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time duration since creation of KubeadmControlPlaneTemplate"
    )
)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateSpec {
    /// What each control plane made from this template looks like.
    pub template: KubeadmControlPlaneTemplateResource,
}
capi_core::absent_spec_is_default!(KubeadmControlPlaneTemplateSpec);

/// `KubeadmControlPlaneTemplate.spec.template`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmControlPlaneTemplateResource {
    /// Labels and annotations of each control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minProperties" = 1))]
    pub metadata: Option<TemplateMetadata>,

    /// The control plane's spec, without what the topology fills in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<KubeadmControlPlaneTemplateResourceSpec>,
}

/// `KubeadmControlPlaneTemplate.spec.template.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmControlPlaneTemplateResourceSpec {
    /// The machines, without their infrastructure template and readiness gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_template: Option<KubeadmControlPlaneTemplateMachineTemplate>,

    /// How each machine bootstraps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeadm_config_spec: Option<KubeadmConfigSpec>,

    /// When and how machines are replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<KubeadmControlPlaneRolloutSpec>,

    /// How unhealthy machines are remediated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<KubeadmControlPlaneRemediationSpec>,

    /// How the machines are named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming: Option<MachineNamingSpec>,
}

/// `KubeadmControlPlaneTemplate.spec.template.spec.machineTemplate`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmControlPlaneTemplateMachineTemplate {
    /// Labels and annotations of each machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minProperties" = 1))]
    pub metadata: Option<TemplateMetadata>,

    /// Deletion timeouts and taints of each machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<KubeadmControlPlaneTemplateMachineTemplateSpec>,
}

/// `KubeadmControlPlaneTemplate.spec.template.spec.machineTemplate.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmControlPlaneTemplateMachineTemplateSpec {
    /// Timeouts of the deletion steps of each machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minProperties" = 1))]
    pub deletion: Option<MachineDeletionSpec>,

    /// Taints each machine puts on its node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 64), transform = validation::keyed_by_key_and_effect)]
    pub taints: Vec<MachineTaint>,
}

/// The CRDs of the control-plane kinds, labelled with the contract version they implement
/// (`cluster.x-k8s.io/v1beta2: v1beta2`).
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    [
        KubeadmControlPlane::crd(),
        capi_core::crd::with_optional_spec(KubeadmControlPlaneTemplate::crd()),
    ]
    .into_iter()
    .map(|crd| capi_core::crd::as_upstream(capi_core::crd::with_contract_version(crd, "v1beta2")))
    .collect()
}
