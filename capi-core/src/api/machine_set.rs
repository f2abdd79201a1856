//! `MachineSet`: keeps a number of identical machines.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::machine::MachineTemplateSpec;
use super::{Deprecated, MachineSetV1Beta1Status, StatusVersion, validation};

/// The desired state of a set of identical machines.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineSet",
    plural = "machinesets",
    namespaced,
    status = "MachineSetStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "ms",
    category = "cluster-api",
    doc = "MachineSet is the Schema for the machinesets API: a number of identical machines.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
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
pub struct MachineSetSpec {
    /// The name of the `Cluster` the machines belong to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,

    /// How many machines to keep. Upstream defaults it to 1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,

    /// Which machines belong to the set; must match the template's labels.
    #[schemars(schema_with = "validation::label_selector")]
    pub selector: LabelSelector,

    /// The machines to create.
    pub template: MachineTemplateSpec,

    /// How surplus machines are chosen for deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineSetDeletionSpec>,

    /// How the machines are named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming: Option<MachineNaming>,
}

/// How the machines of a set are named.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineNaming {
    /// A template of the name: `{{ .machineSet.name }}`, `{{ .cluster.name }}` and
    /// `{{ .random }}` (five lowercase characters) are filled in; the default is
    /// `{{ .machineSet.name }}-{{ .random }}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub template: Option<String>,
}

pub(crate) fn keyed_by_version(schema: &mut schemars::Schema) {
    validation::list_map(schema, &["version"]);
}

/// Deletion options of a `MachineSet` or `MachineDeployment`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineSetDeletionSpec {
    /// The order in which surplus machines are deleted; `Random` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<MachineSetDeletionOrder>,
}

/// Which machines go first when a set scales down (after those marked with the
/// `cluster.x-k8s.io/delete-machine` annotation and unhealthy ones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MachineSetDeletionOrder {
    /// Any machine.
    #[default]
    Random,
    /// The most recently created machines.
    Newest,
    /// The least recently created machines.
    Oldest,
}

/// The observed state of a `MachineSet` (also the shape of a `MachineDeployment`'s counts).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineSetStatus {
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

    /// Machines whose spec matches the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,

    /// The latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_generation: Option<i64>,

    /// Current state of each aspect of the set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,

    /// The Kubernetes versions the machines run, and how many run each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), transform = keyed_by_version)]
    pub versions: Vec<StatusVersion>,

    /// Fields of the `v1beta1` status, kept for clients of the old version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecated<MachineSetV1Beta1Status>>,
}
