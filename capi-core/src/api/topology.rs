//! `Cluster.spec.topology`: a cluster described through a ClusterClass, as upstream's v1beta2.
//!
//! This workspace stores a topology field for field, so that a manifest written for upstream
//! keeps it, but its core controllers have no topology (ClusterClass) controller: a Cluster with a
//! topology reports that in its `TopologyReconciled` condition. Run upstream Cluster API's core
//! manager for ClusterClass clusters; a provider built with this SDK works under it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    MachineDeletionSpec, MachineHealthCheckChecks, MachineHealthCheckRemediation,
    MachineHealthCheckRemediationTemplateReference, MachineHealthCheckRemediationTriggerIf,
    MachineReadinessGate, MachineSetDeletionOrder, MachineTaint, RollingUpdate,
    RolloutStrategyType, TemplateMetadata, validation,
};

/// The cluster's shape through a ClusterClass.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    /// The ClusterClass.
    pub class_ref: ClusterClassRef,
    /// The Kubernetes version of the cluster.
    #[schemars(length(min = 1, max = 256))]
    pub version: String,
    /// The control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneTopology>,
    /// The worker pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkersTopology>,
    /// Values of the ClusterClass's variables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 1000), transform = keyed_by_name)]
    pub variables: Vec<ClusterVariable>,
}

fn keyed_by_name(schema: &mut schemars::Schema) {
    validation::list_map(schema, &["name"]);
}

/// A reference to a ClusterClass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClassRef {
    /// The ClusterClass's name.
    #[schemars(length(min = 1, max = 253), pattern(validation::DNS_SUBDOMAIN))]
    pub name: String,
    /// Its namespace; the Cluster's when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(validation::DNS_LABEL))]
    pub namespace: Option<String>,
}

/// The control plane of a topology.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ControlPlaneTopology {
    /// Labels and annotations of the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minProperties" = 1))]
    pub metadata: Option<TemplateMetadata>,
    /// How many control-plane machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// When machines are rolled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutAfter>,
    /// The health check of the control-plane machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<TopologyHealthCheck<MachineHealthCheckRemediation>>,
    /// Deletion timeouts of its machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeletionSpec>,
    /// Readiness gates of its machines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 32), transform = validation::keyed_by_condition_type)]
    pub readiness_gates: Vec<MachineReadinessGate>,
    /// Taints of its machines' nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 64), transform = validation::keyed_by_key_and_effect)]
    pub taints: Vec<MachineTaint>,
    /// Overrides of the cluster's variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<VariableOverrides>,
}

/// `rollout` of a topology's control plane.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct RolloutAfter {
    /// Roll every machine once after this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation::rfc3339_time")]
    pub after: Option<Time>,
}

/// The health check of a topology's machines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TopologyHealthCheck<R> {
    /// Whether the health check is created (by default when the class defines one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// What makes a machine unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<MachineHealthCheckChecks>,
    /// When and how unhealthy machines are remediated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<R>,
}

/// Remediation of a topology's MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TopologyDeploymentRemediation {
    /// How many machines may be remediated at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string")]
    pub max_in_flight: Option<IntOrString>,
    /// Remediate only while the number of unhealthy machines satisfies this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_if: Option<MachineHealthCheckRemediationTriggerIf>,
    /// An external remediation template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<MachineHealthCheckRemediationTemplateReference>,
}

fn int_or_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-int-or-string": true})
}

/// Deletion settings of a topology's MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TopologyDeploymentDeletion {
    /// Which machines go first when scaling down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<MachineSetDeletionOrder>,
    /// How long to drain a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_drain_timeout_seconds: Option<i32>,
    /// How long to wait for volumes to detach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_volume_detach_timeout_seconds: Option<i32>,
    /// How long to retry deleting a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_deletion_timeout_seconds: Option<i32>,
}

/// The worker pools of a topology.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct WorkersTopology {
    /// MachineDeployments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 2000), transform = keyed_by_name)]
    pub machine_deployments: Vec<MachineDeploymentTopology>,
    /// MachinePools (not served by this workspace; stored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 2000), transform = keyed_by_name)]
    pub machine_pools: Vec<MachinePoolTopology>,
}

/// A MachineDeployment of a topology.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentTopology {
    /// Labels and annotations of the MachineDeployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minProperties" = 1))]
    pub metadata: Option<TemplateMetadata>,
    /// The worker class of the ClusterClass.
    #[schemars(length(min = 1, max = 256))]
    pub class: String,
    /// The pool's name, unique in the topology.
    #[schemars(length(min = 1, max = 63), pattern(validation::DNS_SUBDOMAIN))]
    pub name: String,
    /// The failure domain of its machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    /// How many machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The health check of its machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<TopologyHealthCheck<TopologyDeploymentRemediation>>,
    /// Deletion settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<TopologyDeploymentDeletion>,
    /// Seconds a new machine must be ready to count as available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: Option<i32>,
    /// Readiness gates of its machines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 32), transform = validation::keyed_by_condition_type)]
    pub readiness_gates: Vec<MachineReadinessGate>,
    /// How machines are rolled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<DeploymentTopologyRollout>,
    /// Taints of its machines' nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 64), transform = validation::keyed_by_key_and_effect)]
    pub taints: Vec<MachineTaint>,
    /// Overrides of the cluster's variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<VariableOverrides>,
}

/// `rollout` of a topology's MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct DeploymentTopologyRollout {
    /// Roll every machine once after this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation::rfc3339_time")]
    pub after: Option<Time>,
    /// The strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<DeploymentTopologyRolloutStrategy>,
}

/// The rollout strategy of a topology's MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct DeploymentTopologyRolloutStrategy {
    /// `RollingUpdate` or `OnDelete`.
    #[serde(rename = "type")]
    pub type_: RolloutStrategyType,
    /// Parameters of `RollingUpdate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdate>,
}

/// A MachinePool of a topology (stored; this workspace serves no MachinePools).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolTopology {
    /// Labels and annotations of the MachinePool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minProperties" = 1))]
    pub metadata: Option<TemplateMetadata>,
    /// The pool class of the ClusterClass.
    #[schemars(length(min = 1, max = 256))]
    pub class: String,
    /// The pool's name, unique in the topology.
    #[schemars(length(min = 1, max = 63), pattern(validation::DNS_SUBDOMAIN))]
    pub name: String,
    /// The failure domains of its machines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), inner(length(min = 1, max = 256)))]
    pub failure_domains: Vec<String>,
    /// Deletion timeouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeletionSpec>,
    /// Seconds a new machine must be ready to count as available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: Option<i32>,
    /// How many machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Taints of its machines' nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 64), transform = validation::keyed_by_key_and_effect)]
    pub taints: Vec<MachineTaint>,
    /// Overrides of the cluster's variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<VariableOverrides>,
}

/// Overrides of the cluster's variables for one part of the topology.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct VariableOverrides {
    /// The overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 1000), transform = keyed_by_name)]
    pub overrides: Vec<ClusterVariable>,
}

/// A value of a ClusterClass variable.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterVariable {
    /// The variable's name.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Its value: any JSON.
    #[schemars(schema_with = "any_json")]
    pub value: serde_json::Value,
}

fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}
