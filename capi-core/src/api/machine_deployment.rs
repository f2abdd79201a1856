//! `MachineDeployment`: declarative rollouts of machines through `MachineSet`s.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::machine::MachineTemplateSpec;
use super::machine_set::{MachineNaming, MachineSetDeletionSpec, keyed_by_version};
use super::{Deprecated, MachineDeploymentV1Beta1Status, StatusVersion, validation};

/// The desired state of a rolling group of machines.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineDeployment",
    plural = "machinedeployments",
    namespaced,
    status = "MachineDeploymentStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "md",
    category = "cluster-api",
    doc = "MachineDeployment is the Schema for the machinedeployments API: machines rolled out through MachineSets.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Current", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableReplicas"
    ),
    printcolumn(
        name = "Up-to-date",
        type_ = "integer",
        json_path = ".status.upToDateReplicas"
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
        json_path = ".spec.template.spec.version"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentSpec {
    /// The name of the `Cluster` the machines belong to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,

    /// How many machines to keep. Upstream defaults it to 1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,

    /// How changes to the template are rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<MachineDeploymentRollout>,

    /// Which machines belong to the deployment; must match the template's labels.
    #[schemars(schema_with = "validation::label_selector")]
    pub selector: LabelSelector,

    /// The machines to create.
    pub template: MachineTemplateSpec,

    /// How surplus machines are chosen for deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineSetDeletionSpec>,

    /// How unhealthy machines are remediated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<MachineDeploymentRemediation>,

    /// How the machines are named (passed on to the deployment's MachineSets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming: Option<MachineNaming>,

    /// Stops rollouts while set; scaling still happens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

/// `MachineDeployment.spec.rollout`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineDeploymentRollout {
    /// Roll every machine once after this time (RFC 3339), even without a template change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation::rfc3339_time")]
    pub after: Option<Time>,

    /// The rollout strategy; `RollingUpdate` with `maxSurge: 1, maxUnavailable: 0` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MachineDeploymentRolloutStrategy>,
}

/// `MachineDeployment.spec.rollout.strategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineDeploymentRolloutStrategy {
    /// The strategy.
    #[serde(rename = "type")]
    pub type_: RolloutStrategyType,

    /// Parameters of `RollingUpdate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdate>,
}

/// How machines are replaced when the template changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RolloutStrategyType {
    /// Replace machines progressively within `maxSurge`/`maxUnavailable`.
    #[default]
    RollingUpdate,
    /// Replace a machine only when a user deletes it.
    OnDelete,
}

/// Parameters of a rolling update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct RollingUpdate {
    /// Machines that may exist above `replicas` during the rollout: a count or a percentage of
    /// `replicas`, rounded up. Upstream default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation::int_or_percent")]
    pub max_surge: Option<IntOrString>,

    /// Machines that may be unavailable during the rollout: a count or a percentage of
    /// `replicas`, rounded down. Upstream default: 0. Must not be 0 when `maxSurge` is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation::int_or_percent")]
    pub max_unavailable: Option<IntOrString>,
}

/// `MachineDeployment.spec.remediation`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineDeploymentRemediation {
    /// How many machines may be remediated at once: a count or a percentage of `replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation::int_or_percent")]
    pub max_in_flight: Option<IntOrString>,
}

/// The observed state of a `MachineDeployment`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineDeploymentStatus {
    /// The selector in string form, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub selector: Option<String>,

    /// Machines that exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Machines whose `Ready` condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Machines whose `Available` condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,

    /// Machines whose spec matches the current template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,

    /// The lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachineDeploymentPhase>,

    /// The latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_generation: Option<i64>,

    /// Current state of each aspect of the deployment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,

    /// The Kubernetes versions the machines run, and how many run each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), transform = keyed_by_version)]
    pub versions: Vec<StatusVersion>,

    /// Fields of the `v1beta1` status, kept for clients of the old version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecated<MachineDeploymentV1Beta1Status>>,
}

/// The lifecycle phase of a `MachineDeployment`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MachineDeploymentPhase {
    /// Fewer machines exist than desired.
    ScalingUp,
    /// More machines exist than desired.
    ScalingDown,
    /// The desired number of machines exists.
    Running,
    /// A terminal problem needs a user.
    Failed,
    /// The controller cannot tell.
    Unknown,
}
