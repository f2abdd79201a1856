//! The in-memory provider's kinds, group `infrastructure.capi-rs.dev` (distinct from every
//! upstream provider's group, so that both can be installed side by side).

use capi_core::api::ApiEndpoint;
use capi_core::api::TemplateMetadata;
use capi_core::infra::{
    InfraCluster, InfraClusterStatus, InfraMachine, InfraMachinePool, InfraMachinePoolStatus,
    InfraMachineStatus, InfraMachineTemplate, MachineTemplateStatus, PoolRollout,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the in-memory provider's kinds.
pub const GROUP: &str = "infrastructure.capi-rs.dev";
/// Its version, recorded in the CRDs' contract label.
pub const VERSION: &str = "v1alpha1";

/// A machine of the simulated cloud.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "InMemoryMachine",
    plural = "inmemorymachines",
    namespaced,
    status = "InMemoryMachineStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "InMemoryMachine is an instance of the simulated cloud.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(name = "Provider ID", type_ = "string", json_path = ".spec.providerID"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.instanceState"),
    printcolumn(name = "Zone", type_ = "string", json_path = ".status.failureDomain"),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachineSpec {
    /// The instance's provider ID, `inmemory:///<id>`; set by the controller.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,

    /// The instance size: `small`, `medium` or `large` in the default cloud. Immutable.
    #[serde(default = "default_flavor")]
    #[schemars(length(min = 1, max = 63))]
    pub flavor: String,
}

fn default_flavor() -> String {
    "small".to_string()
}

/// The observed state of an `InMemoryMachine`: the contract's fields and the simulated cloud's
/// own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachineStatus {
    /// `initialization`, `addresses`, `failureDomain`, `conditions` (infrastructure provider
    /// contract).
    #[serde(flatten)]
    pub contract: InfraMachineStatus,
    /// The instance's ID in the simulated cloud.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "instanceID"
    )]
    #[schemars(length(max = 256))]
    pub instance_id: Option<String>,
    /// The simulated cloud's state of the instance: `Building`, `Active`, `Deleting`, `Error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub instance_state: Option<String>,
    /// The flavor the instance runs with in the simulated cloud (a `spec.flavor` that differs
    /// cannot be applied in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub flavor: Option<String>,
}

impl InfraMachine for InMemoryMachine {
    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }

    fn infra_status(&self) -> Option<&InfraMachineStatus> {
        self.status.as_ref().map(|s| &s.contract)
    }
}

/// A template for `InMemoryMachine`s, used by `MachineSet`s and `MachineDeployment`s.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "InMemoryMachineTemplate",
    plural = "inmemorymachinetemplates",
    namespaced,
    status = "MachineTemplateStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "InMemoryMachineTemplate stamps out InMemoryMachines.",
    printcolumn(
        name = "Flavor",
        type_ = "string",
        json_path = ".spec.template.spec.flavor"
    ),
    printcolumn(name = "CPU", type_ = "string", json_path = ".status.capacity.cpu"),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.capacity.memory"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachineTemplateSpec {
    /// The machines to create.
    pub template: InMemoryMachineTemplateResource,
}

/// `InMemoryMachineTemplate.spec.template`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachineTemplateResource {
    /// The spec of each machine.
    pub spec: InMemoryMachineSpec,
}

impl InfraMachineTemplate for InMemoryMachineTemplate {
    fn template_status(&self) -> Option<&MachineTemplateStatus> {
        self.status.as_ref()
    }
}

/// The cluster-wide infrastructure of the simulated cloud: a load balancer as the API endpoint.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "InMemoryCluster",
    plural = "inmemoryclusters",
    namespaced,
    status = "InMemoryClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "InMemoryCluster is the cluster infrastructure of the simulated cloud.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(
        name = "Load Balancer",
        type_ = "string",
        json_path = ".status.loadBalancerID"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryClusterSpec {
    /// The API endpoint; set by the controller from the load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,

    /// The failure domains to offer; `zone-a`, `zone-b`, `zone-c` when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10), inner(length(min = 1, max = 63)))]
    pub failure_domains: Vec<String>,
}

/// The observed state of an `InMemoryCluster`: the contract's fields and the simulated cloud's
/// own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryClusterStatus {
    /// `initialization`, `failureDomains`, `conditions` (infrastructure provider contract).
    #[serde(flatten)]
    pub contract: InfraClusterStatus,
    /// The API server load balancer's ID in the simulated cloud.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "loadBalancerID"
    )]
    #[schemars(length(max = 256))]
    pub load_balancer_id: Option<String>,
}

impl InfraCluster for InMemoryCluster {
    fn control_plane_endpoint(&self) -> Option<&ApiEndpoint> {
        self.spec.control_plane_endpoint.as_ref()
    }

    fn infra_status(&self) -> Option<&InfraClusterStatus> {
        self.status.as_ref().map(|s| &s.contract)
    }
}

/// A template for `InMemoryCluster`s, used by a `ClusterClass`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "InMemoryClusterTemplate",
    plural = "inmemoryclustertemplates",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "InMemoryClusterTemplate stamps out InMemoryClusters for a ClusterClass.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryClusterTemplateSpec {
    /// The clusters to create.
    pub template: InMemoryClusterTemplateResource,
}

/// `InMemoryClusterTemplate.spec.template`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryClusterTemplateResource {
    /// Labels and annotations for the clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The spec of each cluster.
    pub spec: InMemoryClusterSpec,
}

/// A pool of machines kept by a scale set of the simulated cloud, for a `MachinePool`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "InMemoryMachinePool",
    plural = "inmemorymachinepools",
    namespaced,
    status = "InMemoryMachinePoolStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "InMemoryMachinePool is a scale set of the simulated cloud running a MachinePool's machines.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(name = "Flavor", type_ = "string", json_path = ".spec.flavor"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachinePoolSpec {
    /// The scale set's provider ID, `inmemory:///scalesets/<id>`; set by the controller.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,

    /// The provider IDs of the pool's instances; set by the controller.
    #[serde(
        rename = "providerIDList",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 10000), inner(length(min = 1, max = 512)))]
    pub provider_id_list: Vec<String>,

    /// The instance size: `small`, `medium` or `large` in the default cloud. A change rolls the
    /// pool's instances.
    #[serde(default = "default_flavor")]
    #[schemars(length(min = 1, max = 63))]
    pub flavor: String,

    /// The failure domains the instances are spread over, in turn; none when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10), inner(length(min = 1, max = 63)))]
    pub failure_domains: Vec<String>,

    /// How instances are replaced when the flavor, the Kubernetes version or the bootstrap
    /// configuration changes; one new instance at a time, none missing, when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<InMemoryPoolStrategy>,
}

/// `InMemoryMachinePool.spec.strategy`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryPoolStrategy {
    /// Instances beyond the pool's size while new ones start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1000))]
    pub max_surge: Option<u32>,
    /// Instances below the pool's size that may be missing or not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1000))]
    pub max_unavailable: Option<u32>,
}

/// The observed state of an `InMemoryMachinePool`: the contract's fields and the simulated
/// cloud's own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InMemoryMachinePoolStatus {
    /// `initialization`, `ready`, `replicas`, `infrastructureMachineKind`, `conditions`
    /// (infrastructure machine pool contract).
    #[serde(flatten)]
    pub contract: InfraMachinePoolStatus,
    /// The scale set's ID in the simulated cloud.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "scaleSetID"
    )]
    #[schemars(length(max = 256))]
    pub scale_set_id: Option<String>,
    /// The revision of the model the scale set launches new instances from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub model_revision: Option<String>,
}

impl InfraMachinePool for InMemoryMachinePool {
    type Machine = InMemoryMachine;

    fn machine_for(&self, instance: &capi_core::PoolInstance) -> InMemoryMachine {
        InMemoryMachine::new(
            "",
            InMemoryMachineSpec {
                provider_id: Some(instance.provider_id.clone()),
                flavor: self.spec.flavor.clone(),
            },
        )
    }

    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }

    fn provider_id_list(&self) -> &[String] {
        &self.spec.provider_id_list
    }

    fn pool_status(&self) -> Option<&InfraMachinePoolStatus> {
        self.status.as_ref().map(|s| &s.contract)
    }

    fn rollout(&self) -> PoolRollout {
        let defaults = PoolRollout::default();
        let strategy = self.spec.strategy.clone().unwrap_or_default();
        PoolRollout {
            max_surge: strategy.max_surge.unwrap_or(defaults.max_surge),
            max_unavailable: strategy.max_unavailable.unwrap_or(defaults.max_unavailable),
        }
    }

    /// The flavor alone makes an instance: failure domains place new instances and the strategy
    /// paces rollouts, and changing them rolls nothing.
    fn model(&self) -> serde_json::Value {
        serde_json::json!({ "flavor": self.spec.flavor })
    }
}

/// The rules of the pool reconciler for `InMemoryMachinePool` (whose machines are
/// `InMemoryMachine`s), beside [`capi_actuator::rbac::provider`]'s for the other kinds.
pub fn pool_rbac() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    capi_actuator::rbac::infra_machine_pool(GROUP, "inmemorymachinepools", "inmemorymachines")
}

/// The provider's CRDs, with the contract label `cluster.x-k8s.io/v1beta2: v1alpha1`.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    [
        InMemoryCluster::crd(),
        InMemoryClusterTemplate::crd(),
        InMemoryMachine::crd(),
        InMemoryMachineTemplate::crd(),
        InMemoryMachinePool::crd(),
    ]
    .into_iter()
    .map(|crd| capi_core::crd::with_contract_version(crd, VERSION))
    .collect()
}
