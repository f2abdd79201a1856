//! Status fields of the `v1beta1` API versions, kept under `status.deprecated.v1beta1` of the
//! `v1beta2` kinds as upstream keeps them, so that tools still reading them find them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A condition in the `v1beta1` shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct V1Beta1Condition {
    /// The condition type.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 256))]
    pub type_: String,

    /// `True`, `False` or `Unknown`.
    pub status: String,

    /// `Error`, `Warning` or `Info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub severity: Option<String>,

    /// When the status last changed.
    pub last_transition_time: Time,

    /// Why, in CamelCase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub reason: Option<String>,

    /// Why, for humans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub message: Option<String>,
}

/// `status.deprecated` of a `v1beta2` kind: its `v1beta1` status fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Deprecated<T> {
    /// The `v1beta1` fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<T>,
}

/// The `v1beta1` status fields of a Cluster or a Machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureV1Beta1Status {
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
}

/// The `v1beta1` status fields of a kind that kept only its conditions (MachineHealthCheck).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConditionsV1Beta1Status {
    /// Conditions in the `v1beta1` shape.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
}

/// The `v1beta1` status fields of a MachineSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetV1Beta1Status {
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
    /// Machines whose labels match the template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fully_labeled_replicas: Option<i32>,
    /// Machines ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Machines available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
}

/// The `v1beta1` status fields of a MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentV1Beta1Status {
    /// Conditions in the `v1beta1` shape.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<V1Beta1Condition>,
    /// Machines with the desired template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// Machines ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Machines available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Machines not available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
}

/// The `v1beta1` status fields of a MachinePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolV1Beta1Status {
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
    /// Instances whose Node is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Instances available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Instances still needed for the pool's full capacity: running but not available yet, or
    /// not created yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
}
