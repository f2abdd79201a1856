//! A complete infrastructure provider for a toy cloud: cluster, machine and machine template
//! kinds with their CRDs and RBAC, the three actuators, and (in `toy_provider.rs`) the manager
//! binary. Everything else — finalizers, owners, pause, bootstrap data, status, conditions,
//! events, backoff, metrics, health, leader election — comes from the SDK.

use std::sync::Arc;

use async_trait::async_trait;
use capi_actuator::rbac;
use capi_core::api::{ApiEndpoint, MachineAddress, MachineAddressType};
use capi_core::infra::*;
use capi_core::*;
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
    let crds = [ToyCluster::crd(), ToyMachine::crd()].into_iter();
    let crds = crds.chain([ToyMachineTemplate::crd()]);
    crds.map(|crd| crd::with_contract_version(crd, "v1alpha1"))
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

type Outcome<T> = Result<T, ActuatorError>;
type Scope = MachineScope<ToyMachine>;

fn cloud(message: String) -> ActuatorError {
    ActuatorError::transient_message("ToyCloudError", message)
}

fn cpus(size: &str) -> Outcome<u64> {
    let message = format!("spec.size {size:?} is not small or large");
    let known = [("small", 1), ("large", 4)]
        .into_iter()
        .find(|(s, _)| *s == size);
    let unknown = || ActuatorError::invalid_configuration("UnknownSize", message);
    known.map(|(_, n)| n).ok_or_else(unknown)
}

/// The load balancer of a cluster is tagged with its UID.
fn lb_tag(scope: &ClusterScope<ToyCluster>) -> String {
    format!("lb-{}", scope.cluster.uid().unwrap_or_default())
}

fn instance(id: &str) -> MachineInstance {
    let (type_, address) = (MachineAddressType::Hostname, id.to_string());
    let addresses = vec![MachineAddress { type_, address }];
    MachineInstance::new(format!("{PREFIX}{id}"), addresses, InstanceState::Running)
}

#[async_trait]
impl Actuator<ToyMachine> for Toy {
    async fn exists(&self, scope: &Scope) -> Outcome<Option<MachineInstance>> {
        let key = scope.idempotency_key.as_str();
        let recorded = scope.infra_machine.provider_id();
        // By provider ID once recorded, else by the idempotency key create tags the instance with.
        let id = match recorded.and_then(|p| p.strip_prefix(PREFIX)) {
            Some(id) => self.0.get(id).await.map_err(cloud)?.then(|| id.to_string()),
            None => self.0.find(key).await.map_err(cloud)?,
        };
        Ok(id.as_deref().map(instance))
    }
    async fn create(&self, scope: &Scope) -> Outcome<MachineInstance> {
        let size = &scope.infra_machine.spec.size;
        cpus(size)?;
        // A retry after a lost response or a crash finds the first instance.
        let key = scope.idempotency_key.as_str();
        let id = match self.0.find(key).await.map_err(cloud)? {
            Some(id) => id,
            None => self.0.create(key, size).await.map_err(cloud)?,
        };
        Ok(instance(&id))
    }
    async fn update(&self, _: &Scope, i: &MachineInstance) -> Outcome<UpdateOutcome> {
        let (instance, immutable_changes) = (i.clone(), vec![]); // nothing is mutable
        Ok(UpdateOutcome {
            instance,
            immutable_changes,
        })
    }
    async fn delete(&self, scope: &Scope) -> Outcome<()> {
        while let Some(found) = self.exists(scope).await? {
            let id = found.provider_id.trim_start_matches(PREFIX);
            self.0.delete(id).await.map_err(cloud)?;
        }
        Ok(())
    }
}

#[async_trait]
impl ClusterActuator<ToyCluster> for Toy {
    async fn reconcile(&self, scope: &ClusterScope<ToyCluster>) -> Outcome<ClusterInfrastructure> {
        let tag = lb_tag(scope);
        let id = match self.0.find(&tag).await.map_err(cloud)? {
            Some(id) => id,
            None => self.0.create(&tag, "lb").await.map_err(cloud)?,
        };
        let host = format!("{id}.toy.example");
        Ok(ClusterInfrastructure {
            control_plane_endpoint: Some(ApiEndpoint { host, port: 6443 }),
            provisioned: true,
            ..ClusterInfrastructure::default()
        })
    }
    async fn delete(&self, scope: &ClusterScope<ToyCluster>) -> Outcome<()> {
        while let Some(id) = self.0.find(&lb_tag(scope)).await.map_err(cloud)? {
            self.0.delete(&id).await.map_err(cloud)?;
        }
        Ok(())
    }
}

#[async_trait]
impl MachineTemplateActuator<ToyMachineTemplate> for Toy {
    async fn capacity(&self, t: &TemplateScope<ToyMachineTemplate>) -> Outcome<MachineCapacity> {
        let n = cpus(&t.template.spec.template.spec.size)?;
        let capacity = MachineCapacity::default().cpus(n).memory_mib(n * 2048);
        Ok(capacity.operating_system("linux"))
    }
}

#[cfg(test)]
mod tests;
