//! A complete infrastructure provider for a toy cloud: cluster, machine and machine template
//! kinds with their CRDs and RBAC, the three actuators, and (in `toy_provider.rs`) the manager
//! binary. Everything else — finalizers, owners, pause, bootstrap data, status, conditions,
//! events, backoff, metrics, health, leader election — comes from the SDK.

use std::sync::Arc;

use async_trait::async_trait;
use capi_core::api::{ApiEndpoint, MachineAddress, MachineAddressType};
use capi_core::crd;
use capi_core::infra::{
    InfraCluster, InfraClusterStatus, InfraMachine, InfraMachineStatus, InfraMachineTemplate,
    MachineTemplateStatus,
};
use capi_core::{
    Actuator, ActuatorError, BootstrapData, ClusterActuator, ClusterInfrastructure, ClusterScope,
    Found, InstanceState, MachineCapacity, MachineInstance, MachineScope, MachineTemplateActuator,
    TemplateScope, UpdateOutcome,
};
use capi_provider::support::rbac;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the toy kinds.
pub const GROUP: &str = "infrastructure.toy.example";
const PREFIX: &str = "toy:///";

/// The cluster infrastructure: a load balancer in front of the API servers.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(kind = "ToyCluster", group = "infrastructure.toy.example")]
#[kube(version = "v1alpha1", namespaced, status = "InfraClusterStatus")]
#[serde(rename_all = "camelCase")]
pub struct ToyClusterSpec {
    /// The API endpoint; set by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
}

/// A machine of the toy cloud.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(kind = "ToyMachine", group = "infrastructure.toy.example")]
#[kube(version = "v1alpha1", namespaced, status = "InfraMachineStatus")]
pub struct ToyMachineSpec {
    /// `toy:///<id>`; set by the controller.
    #[serde(rename = "providerID", default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The instance size: `small` or `large`.
    pub size: String,
}

/// `ToyMachine`s for MachineSets, MachineDeployments and control planes.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(kind = "ToyMachineTemplate", group = "infrastructure.toy.example")]
#[kube(version = "v1alpha1", namespaced, status = "MachineTemplateStatus")]
pub struct ToyMachineTemplateSpec {
    /// What each machine gets.
    pub template: ToyMachineTemplateResource,
}

/// `ToyMachineTemplate.spec.template`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ToyMachineTemplateResource {
    /// The spec of each machine.
    pub spec: ToyMachineSpec,
}

impl InfraCluster for ToyCluster {
    fn control_plane_endpoint(&self) -> Option<&ApiEndpoint> {
        self.spec.control_plane_endpoint.as_ref()
    }
    fn infra_status(&self) -> Option<&InfraClusterStatus> {
        self.status.as_ref()
    }
}

impl InfraMachine for ToyMachine {
    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }
    fn infra_status(&self) -> Option<&InfraMachineStatus> {
        self.status.as_ref()
    }
}

impl InfraMachineTemplate for ToyMachineTemplate {
    fn template_status(&self) -> Option<&MachineTemplateStatus> {
        self.status.as_ref()
    }
}

/// The CRDs, with the contract label.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let crds = [
        ToyCluster::crd(),
        ToyMachine::crd(),
        ToyMachineTemplate::crd(),
    ];
    crds.into_iter()
        .map(|crd| crd::with_contract_version(crd, "v1alpha1"))
        .collect()
}

/// What the manager may do: exactly what its three reconcilers use.
pub fn rbac() -> Vec<PolicyRule> {
    rbac::provider(GROUP, "toymachines", "toyclusters", "toymachinetemplates")
}

/// The toy cloud's API, as narrow as the actuators need (a real provider wraps its SDK here).
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait ToyApi: Send + Sync {
    /// The resource carrying `tag`.
    async fn find(&self, tag: &str) -> Result<Option<String>, String>;
    /// Whether resource `id` exists.
    async fn get(&self, id: &str) -> Result<bool, String>;
    /// Creates a resource of `kind` (`small`, `large` or `lb`) carrying `tag`.
    async fn create(&self, tag: &str, kind: &str) -> Result<String, String>;
    /// Deletes resource `id`; a missing one is no error.
    async fn delete(&self, id: &str) -> Result<(), String>;
}

/// The actuators of all three kinds, over one [`ToyApi`].
pub struct Toy(pub Arc<dyn ToyApi>);

/// What every machine call is handed.
type Scope = MachineScope<ToyMachine, ToyCluster>;

/// A failure of the toy cloud: retried with backoff by the loop.
fn cloud_error(message: String) -> ActuatorError {
    ActuatorError::transient_message("ToyCloudError", message)
}

/// The CPUs of an instance size; an unknown size is a configuration the user must fix.
fn cpus(size: &str) -> Result<u64, ActuatorError> {
    match size {
        "small" => Ok(1),
        "large" => Ok(4),
        other => Err(ActuatorError::invalid_configuration(
            "UnknownSize",
            format!("spec.size {other:?} is not small or large"),
        )),
    }
}

/// The load balancer of a cluster is tagged with the `ToyCluster`'s namespace and name: always at
/// hand, and kept by `clusterctl move` (UIDs are new on the target management cluster).
fn load_balancer_tag(scope: &ClusterScope<ToyCluster>) -> String {
    let infra = &scope.infra_cluster;
    format!(
        "lb-{}.{}",
        infra.namespace().unwrap_or_default(),
        infra.name_any()
    )
}

/// What the loop records of instance `id`.
fn instance(id: &str) -> MachineInstance {
    let address = MachineAddress {
        type_: MachineAddressType::Hostname,
        address: id.to_string(),
    };
    MachineInstance::new(
        format!("{PREFIX}{id}"),
        vec![address],
        InstanceState::Running,
    )
}

#[async_trait]
impl Actuator<ToyMachine, ToyCluster> for Toy {
    /// The toy cloud tells nothing beyond what the loop records.
    type Instance = ();

    async fn exists(&self, scope: &Scope) -> Result<Option<Found<()>>, ActuatorError> {
        let recorded = scope.infra_machine.provider_id();
        // By provider ID once recorded, else by the idempotency key `create` tags it with.
        let id = match recorded.and_then(|p| p.strip_prefix(PREFIX)) {
            Some(id) => {
                let exists = self.0.get(id).await.map_err(cloud_error)?;
                exists.then(|| id.to_string())
            }
            None => {
                let key = scope.idempotency_key.as_str();
                self.0.find(key).await.map_err(cloud_error)?
            }
        };
        Ok(id.map(|id| Found::new(instance(&id))))
    }

    async fn create(
        &self,
        scope: &Scope,
        _bootstrap: &BootstrapData,
    ) -> Result<MachineInstance, ActuatorError> {
        let size = &scope.infra_machine.spec.size;
        cpus(size)?;
        // A retry after a lost response or a crash finds the first instance.
        let key = scope.idempotency_key.as_str();
        let id = match self.0.find(key).await.map_err(cloud_error)? {
            Some(id) => id,
            None => self.0.create(key, size).await.map_err(cloud_error)?,
        };
        Ok(instance(&id))
    }

    async fn update(
        &self,
        _scope: &Scope,
        found: Found<()>,
    ) -> Result<UpdateOutcome, ActuatorError> {
        // Nothing of a toy instance can change.
        Ok(UpdateOutcome {
            instance: found.reported,
            immutable_changes: Vec::new(),
        })
    }

    async fn delete(&self, scope: &Scope) -> Result<(), ActuatorError> {
        while let Some(found) = self.exists(scope).await? {
            let id = found.reported.provider_id.trim_start_matches(PREFIX);
            self.0.delete(id).await.map_err(cloud_error)?;
        }
        Ok(())
    }
}

#[async_trait]
impl ClusterActuator<ToyCluster> for Toy {
    async fn reconcile(
        &self,
        scope: &ClusterScope<ToyCluster>,
    ) -> Result<ClusterInfrastructure, ActuatorError> {
        let tag = load_balancer_tag(scope);
        let id = match self.0.find(&tag).await.map_err(cloud_error)? {
            Some(id) => id,
            None => self.0.create(&tag, "lb").await.map_err(cloud_error)?,
        };
        let endpoint = ApiEndpoint {
            host: format!("{id}.toy.example"),
            port: 6443,
        };
        Ok(ClusterInfrastructure {
            control_plane_endpoint: Some(endpoint),
            provisioned: true,
            ..ClusterInfrastructure::default()
        })
    }

    async fn delete(&self, scope: &ClusterScope<ToyCluster>) -> Result<(), ActuatorError> {
        let tag = load_balancer_tag(scope);
        while let Some(id) = self.0.find(&tag).await.map_err(cloud_error)? {
            self.0.delete(&id).await.map_err(cloud_error)?;
        }
        Ok(())
    }
}

#[async_trait]
impl MachineTemplateActuator<ToyMachineTemplate, ToyCluster> for Toy {
    async fn capacity(
        &self,
        scope: &TemplateScope<ToyMachineTemplate, ToyCluster>,
    ) -> Result<MachineCapacity, ActuatorError> {
        let cpus = cpus(&scope.template.spec.template.spec.size)?;
        let capacity = MachineCapacity::default()
            .cpus(cpus)
            .memory_mib(cpus * 2048)
            .operating_system("linux");
        Ok(capacity)
    }
}

#[cfg(test)]
mod tests;
