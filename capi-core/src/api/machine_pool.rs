//! `MachinePool`: a group of machines a cloud's own scaling service runs (an Auto Scaling group,
//! a virtual machine scale set), with one infrastructure object for the whole group.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::machine::MachineTemplateSpec;
use super::machine_set::keyed_by_version;
use super::{Deprecated, MachinePoolV1Beta1Status, StatusVersion, validation};

/// The desired state of a pool of machines run by the cloud's scaling service.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachinePool",
    plural = "machinepools",
    namespaced,
    status = "MachinePoolStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "mp",
    category = "cluster-api",
    doc = "MachinePool is the Schema for the machinepools API: machines a cloud's scaling service runs.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas"
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
pub struct MachinePoolSpec {
    /// The name of the `Cluster` the pool belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,

    /// How many machines the pool should run. Upstream defaults it to 1 when unset (and leaves it
    /// unset when an autoscaler manages it, `cluster.x-k8s.io/replicas-managed-by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// The machines of the pool: their bootstrap configuration (one for the whole pool), their
    /// infrastructure (the provider's pool object) and their Kubernetes version.
    pub template: MachineTemplateSpec,

    /// The provider IDs of the pool's instances, as the infrastructure provider reports them in
    /// its pool object's `spec.providerIDList`; each must equal the `spec.providerID` of the
    /// instance's Node.
    #[serde(
        rename = "providerIDList",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 10000), inner(length(min = 1, max = 512)))]
    pub provider_id_list: Vec<String>,

    /// The failure domains the pool's instances may be placed in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 256)))]
    pub failure_domains: Vec<String>,
}

/// The observed state of a `MachinePool`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachinePoolStatus {
    /// Current state of each aspect of the pool (`Available`, `BootstrapConfigReady`,
    /// `InfrastructureReady`, `MachinesReady`, `MachinesUpToDate`, `ScalingUp`, `ScalingDown`,
    /// `Remediating`, `Deleting`, `Paused`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,

    /// Provisioning milestones (part of the Cluster API contract; never unset once set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<MachinePoolInitializationStatus>,

    /// The Nodes of the pool's instances, matched by provider ID.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "node_references")]
    pub node_refs: Vec<ObjectReference>,

    /// Instances the infrastructure provider last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Instances whose Node is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Instances whose Node has been ready for the template's `minReadySeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,

    /// Instances running the pool's current template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,

    /// The Kubernetes versions the instances run, and how many run each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), transform = keyed_by_version)]
    pub versions: Vec<StatusVersion>,

    /// The lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachinePoolPhase>,

    /// The latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_generation: Option<i64>,

    /// Fields of the `v1beta1` status, kept for clients of the old version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecated<MachinePoolV1Beta1Status>>,
}

/// `status.initialization` of a `MachinePool`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachinePoolInitializationStatus {
    /// The infrastructure provider reported the pool's infrastructure as provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,

    /// The bootstrap provider reported the pool's bootstrap data Secret as created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_data_secret_created: Option<bool>,
}

/// The lifecycle phase of a `MachinePool`, as upstream defines it. Informational: controllers
/// decide from the pool's fields, never from its phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MachinePoolPhase {
    /// Created; waiting for bootstrap data or infrastructure.
    Pending,
    /// The infrastructure is being created or updated.
    Provisioning,
    /// The infrastructure exists; waiting for the Nodes.
    Provisioned,
    /// Every instance is a ready Node.
    Running,
    /// The infrastructure is adding instances.
    ScalingUp,
    /// The infrastructure is removing instances.
    ScalingDown,
    /// An autoscaler is changing the size of the pool.
    Scaling,
    /// Deletion is in progress.
    Deleting,
    /// A terminal problem needs a user (kept for objects converted from `v1beta1`).
    Failed,
    /// The controller cannot tell.
    Unknown,
}

impl MachinePool {
    /// The phase recorded in status, if any.
    pub fn phase(&self) -> Option<MachinePoolPhase> {
        self.status.as_ref().and_then(|s| s.phase)
    }

    /// `spec.replicas`, or upstream's default of 1 when unset.
    pub fn desired_replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }
}

/// `status.nodeRefs`: at most 10 000 Node references, each atomic for server-side apply, as
/// upstream declares them.
fn node_references(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut item = ObjectReference::json_schema(generator);
    item.insert("x-kubernetes-map-type".into(), "atomic".into());
    schemars::json_schema!({
        "type": "array",
        "maxItems": 10000,
        "items": item,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_upstreams_wire_names() {
        let json = serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachinePool",
            "metadata": {"name": "pool", "namespace": "default"},
            "spec": {
                "clusterName": "c",
                "replicas": 3,
                "providerIDList": ["aws:///us-east-1a/i-1"],
                "failureDomains": ["us-east-1a"],
                "template": {"spec": {
                    "clusterName": "c",
                    "bootstrap": {"dataSecretName": "pool-bootstrap"},
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "AWSMachinePool",
                        "name": "pool"
                    }
                }}
            },
            "status": {
                "initialization": {"infrastructureProvisioned": true, "bootstrapDataSecretCreated": true},
                "nodeRefs": [{"kind": "Node", "name": "ip-10-0-0-1", "uid": "u"}],
                "replicas": 1,
                "phase": "ScalingUp",
                "deprecated": {"v1beta1": {"unavailableReplicas": 2}}
            }
        });
        let pool: MachinePool = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(pool.spec.provider_id_list, ["aws:///us-east-1a/i-1"]);
        assert_eq!(pool.phase(), Some(MachinePoolPhase::ScalingUp));
        assert_eq!(pool.desired_replicas(), 3);
        assert_eq!(serde_json::to_value(&pool).unwrap(), json);
    }

    #[test]
    fn unset_replicas_are_upstreams_default_of_one() {
        assert_eq!(MachinePool::default().desired_replicas(), 1);
    }
}
