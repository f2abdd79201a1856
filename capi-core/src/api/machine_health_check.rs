//! `MachineHealthCheck`: finds unhealthy machines and has them remediated.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ConditionsV1Beta1Status, Deprecated, validation};
use crate::condition::ConditionStatus;

/// The desired health checks over a selection of machines.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineHealthCheck",
    plural = "machinehealthchecks",
    namespaced,
    status = "MachineHealthCheckStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "mhc",
    category = "cluster-api",
    doc = "MachineHealthCheck is the Schema for the machinehealthchecks API: health checks and remediation for machines.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.expectedMachines"
    ),
    printcolumn(
        name = "Healthy",
        type_ = "integer",
        json_path = ".status.currentHealthy"
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
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckSpec {
    /// The name of the `Cluster` the machines belong to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,

    /// Which machines are checked.
    #[schemars(schema_with = "validation::label_selector")]
    pub selector: LabelSelector,

    /// What makes a machine unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<MachineHealthCheckChecks>,

    /// When and how unhealthy machines are remediated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<MachineHealthCheckRemediation>,
}

/// `MachineHealthCheck.spec.checks`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineHealthCheckChecks {
    /// Seconds a machine may take to get a node before it is unhealthy; 0 disables the check.
    /// Upstream default: 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_startup_timeout_seconds: Option<i32>,

    /// Node conditions that make a machine unhealthy once they have held for their timeout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100))]
    pub unhealthy_node_conditions: Vec<UnhealthyNodeCondition>,

    /// Machine conditions that make a machine unhealthy once they have held for their timeout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100))]
    pub unhealthy_machine_conditions: Vec<UnhealthyMachineCondition>,
}

/// A node condition that, held for `timeoutSeconds`, makes a machine unhealthy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyNodeCondition {
    /// The node condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1))]
    pub type_: String,

    /// The status that is unhealthy (`True`, `False`, `Unknown`; a node condition's status is
    /// a free string to Kubernetes).
    #[schemars(length(min = 1))]
    pub status: String,

    /// How long the condition must hold.
    #[schemars(range(min = 0))]
    pub timeout_seconds: i32,
}

/// A machine condition that, held for `timeoutSeconds`, makes a machine unhealthy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyMachineCondition {
    /// The machine condition type; not one the health check sets or summarises itself (`Ready`,
    /// `Available`, `HealthCheckSucceeded`, `OwnerRemediated`, `ExternallyRemediated`).
    #[serde(rename = "type")]
    #[schemars(
        length(min = 1, max = 316),
        pattern(validation::CONDITION_TYPE),
        transform = validation::not_a_health_check_condition
    )]
    pub type_: String,

    /// The status that is unhealthy.
    pub status: ConditionStatus,

    /// How long the condition must hold.
    #[schemars(range(min = 0))]
    pub timeout_seconds: i32,
}

/// `MachineHealthCheck.spec.remediation`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineHealthCheckRemediation {
    /// Remediation is allowed only while the number of unhealthy machines satisfies this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_if: Option<MachineHealthCheckRemediationTriggerIf>,

    /// An external remediation template; without it, the owner replaces unhealthy machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<MachineHealthCheckRemediationTemplateReference>,
}

/// `MachineHealthCheck.spec.remediation.triggerIf`; at most one of the two is honoured, the range
/// taking precedence as upstream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineHealthCheckRemediationTriggerIf {
    /// Remediate only while at most this many (or this percentage of) machines are unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation::int_or_percent")]
    pub unhealthy_less_than_or_equal_to: Option<IntOrString>,

    /// Remediate only while the number of unhealthy machines is within `[min-max]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), pattern(validation::UNHEALTHY_RANGE))]
    pub unhealthy_in_range: Option<String>,
}

/// A reference to an external remediation template.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckRemediationTemplateReference {
    /// The template's kind.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$")
    )]
    pub kind: String,
    /// The template's name.
    #[schemars(length(min = 1, max = 253), pattern(validation::DNS_SUBDOMAIN))]
    pub name: String,
    /// The template's API version, e.g. `remediation.example.io/v1alpha1`.
    #[schemars(length(min = 1, max = 317), pattern(validation::API_VERSION))]
    pub api_version: String,
}

/// The observed state of a `MachineHealthCheck`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachineHealthCheckStatus {
    /// Machines selected by the check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub expected_machines: Option<i32>,

    /// Selected machines that are healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub current_healthy: Option<i32>,

    /// How many more remediations are allowed now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub remediations_allowed: Option<i32>,

    /// The latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_generation: Option<i64>,

    /// Names of the selected machines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10000), inner(length(min = 1, max = 253)))]
    pub targets: Vec<String>,

    /// Current state of each aspect of the check (`RemediationAllowed`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,

    /// Fields of the `v1beta1` status, kept for clients of the old version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecated<ConditionsV1Beta1Status>>,
}
