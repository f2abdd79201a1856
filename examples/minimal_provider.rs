//! A vendor's minimal infrastructure provider: a machine kind, a (toy) cloud client behind a narrow
//! trait, and an `Actuator`. Everything else — finalizers, owner lookup, pause, waiting for
//! bootstrap data, status, conditions, events, backoff, metrics, health, leader election — comes
//! from the SDK's `Manager`, and the binary's flags, logging and standalone mode from
//! `capi-provider`.
//!
//! Run against a cluster with the core CRDs and `ToyMachine`'s CRD installed:
//! `cargo run -p capi-examples --example minimal_provider`.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use capi_core::api::{MachineAddress, MachineAddressType::Hostname};
use capi_core::infra::{InfraMachine, InfraMachineStatus};
use capi_core::{Actuator, ActuatorError, InstanceState, MachineInstance, MachineScope};
use capi_core::{IdempotencyKey, UpdateOutcome};
use capi_provider::{ManagerArgs, ProviderManager};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The provider's machine kind.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(group = "infrastructure.toy.example", version = "v1alpha1")]
#[kube(kind = "ToyMachine", namespaced, status = "InfraMachineStatus")]
#[serde(rename_all = "camelCase")]
pub struct ToyMachineSpec {
    #[serde(rename = "providerID", default)]
    provider_id: Option<String>,
    size: String,
}

impl InfraMachine for ToyMachine {
    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }
    fn infra_status(&self) -> Option<&InfraMachineStatus> {
        self.status.as_ref()
    }
}

/// The narrow client trait the actuator needs (a real provider wraps its cloud SDK here).
#[async_trait]
trait ToyCompute: Send + Sync {
    async fn find_by_tag(&self, tag: &str) -> Result<Option<usize>, String>;
    async fn create(&self, tag: &str, size: &str) -> Result<usize, String>;
    async fn delete(&self, id: usize) -> Result<(), String>;
}

/// A toy cloud: instance `id` is position `id` in a list of tags.
#[derive(Default)]
struct ToyCloud(Mutex<Vec<Option<String>>>);

#[async_trait]
impl ToyCompute for ToyCloud {
    async fn find_by_tag(&self, tag: &str) -> Result<Option<usize>, String> {
        let tags = self.0.lock().map_err(|e| e.to_string())?;
        Ok(tags.iter().position(|t| t.as_deref() == Some(tag)))
    }
    async fn create(&self, tag: &str, _size: &str) -> Result<usize, String> {
        let mut tags = self.0.lock().map_err(|e| e.to_string())?;
        tags.push(Some(tag.to_string()));
        Ok(tags.len() - 1)
    }
    async fn delete(&self, id: usize) -> Result<(), String> {
        let mut tags = self.0.lock().map_err(|e| e.to_string())?;
        tags.get_mut(id).map(Option::take);
        Ok(())
    }
}

struct ToyActuator(Arc<dyn ToyCompute>);
type Outcome<T> = Result<T, ActuatorError>;
type Scope = MachineScope<ToyMachine>;

fn cloud_error(message: String) -> ActuatorError {
    ActuatorError::transient_message("ToyCloudError", message)
}

fn instance(id: usize) -> MachineInstance {
    let address = format!("toy-{id}");
    let addresses = vec![MachineAddress {
        type_: Hostname,
        address,
    }];
    let provider_id = format!("toy:///{id}");
    MachineInstance::new(provider_id, addresses, InstanceState::Running)
}

impl ToyActuator {
    /// The instance created under this idempotency key, if any.
    async fn find(&self, key: &IdempotencyKey) -> Outcome<Option<usize>> {
        self.0.find_by_tag(key.as_str()).await.map_err(cloud_error)
    }
}

#[async_trait]
impl Actuator<ToyMachine> for ToyActuator {
    async fn exists(&self, scope: &Scope) -> Outcome<Option<MachineInstance>> {
        Ok(self.find(&scope.idempotency_key).await?.map(instance))
    }
    async fn create(&self, scope: &Scope) -> Outcome<MachineInstance> {
        let (key, size) = (&scope.idempotency_key, &scope.infra_machine.spec.size);
        if size.is_empty() {
            let message = "spec.size is empty; set it to the instance size";
            return Err(ActuatorError::invalid_configuration("SizeMissing", message));
        }
        // A retry after a lost response finds the first instance instead of making a second.
        let id = match self.find(key).await? {
            Some(id) => Ok(id),
            None => self.0.create(key.as_str(), size).await,
        };
        let id = id.map_err(cloud_error)?;
        Ok(instance(id))
    }
    async fn update(&self, _: &Scope, found: &MachineInstance) -> Outcome<UpdateOutcome> {
        let instance = found.clone();
        Ok(UpdateOutcome {
            instance,
            immutable_changes: vec![],
        })
    }
    async fn delete(&self, scope: &Scope) -> Outcome<()> {
        if let Some(id) = self.find(&scope.idempotency_key).await? {
            self.0.delete(id).await.map_err(cloud_error)?;
        }
        Ok(())
    }
}

/// The toy provider's manager: the flags every manager shares (`--help`), nothing of its own.
#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    manager: ManagerArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let actuator = Arc::new(ToyActuator(Arc::new(ToyCloud::default())));
    ProviderManager::new("toy", args.manager)
        .run(|manager| {
            manager.add_machine_reconciler::<ToyMachine>(actuator);
        })
        .await?;
    Ok(())
}
