//! The `AzureMachine` actuator: one VM per Machine, exactly once, never waiting on ARM.
//!
//! - **Exactly once by name.** The VM is the `AzureMachine`'s name, its NIC `<vm>-nic`, its OS
//!   disk `<vm>_OSDisk` ([`crate::naming`]): every PUT is a create-or-update of that name, so a
//!   PUT replayed after a lost answer, a failed status write or a restart is the same VM, and a
//!   second one cannot exist. The lookup is a GET of that name — no listing, no tags to trust.
//! - **Operations recorded, not awaited.** The VM's PUT returns at once; its operation is
//!   recorded in `status.longRunningOperationStates` and read once per reconcile — by whichever
//!   manager runs it — until it ends ([`crate::operations`]). A VM whose provisioning failed
//!   is PUT again on the next reconcile; an operation that vanished or outlived its deadline is
//!   dropped and the VM read again.
//! - The NIC is made first (in the API server's backend pool for a control-plane machine); the
//!   VM references it with `deleteOption: Delete`, as it does its disks. **Deletion** deletes the
//!   VM, then whatever of the NIC, the public IP and the disks ARM left behind, each checked
//!   by name: no leaked NIC or disk.
//!
//! The provider ID is `azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachines/<name>`,
//! what the Azure cloud provider gives the node.

mod body;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use capi_core::api::{MachineAddress, MachineAddressType};
use capi_core::condition::{ConditionStatus, DesiredCondition};
use capi_core::{
    Actuator, ActuatorError, ImmutableChange, InstanceState, MachineInstance, MachineScope,
    ProviderStatus, UpdateOutcome,
};
use kube::ResourceExt;
use serde::Serialize;
use serde_json::Value;

use crate::api::{AzureMachine, LongRunningOperation, OperationType, VmState};
use crate::arm::{ResourceId, ResourceType};
use crate::cluster::Ctx as ClusterCtx;
use crate::connector::Connector;
use crate::lookup::ClusterLookup;
use crate::naming::MachineNaming;
use crate::operations::Operations;
use crate::resource::{Foreign, Removal, Step, ensure, provisioning_state, remove};

pub use body::{
    ADMIN_USER, MAX_CUSTOM_DATA, REFERENCE_GALLERY, REFERENCE_IMAGE, image_reference, ssh_key,
};

/// The provider ID prefix.
pub const PROVIDER_ID_PREFIX: &str = "azure://";

/// How soon a deletion looks again.
const DELETE_POLL: Duration = Duration::from_secs(5);

/// The provider ID of the VM `id`, as the Azure cloud provider sets it on the node: the
/// resource group in lower case (CAPZ does the same, so that the Machine finds its Node).
pub fn provider_id(id: &ResourceId) -> String {
    let mut lowered = id.clone();
    lowered.resource_group = id.resource_group.to_lowercase();
    format!("{PROVIDER_ID_PREFIX}{lowered}")
}

/// One reconcile of one machine.
pub(crate) struct Ctx {
    pub(crate) cluster: ClusterCtx,
    pub(crate) infra: Arc<AzureMachine>,
    pub(crate) names: MachineNaming,
    pub(crate) key: String,
    pub(crate) control_plane: bool,
    pub(crate) zone: Option<String>,
    pub(crate) version: Option<String>,
}

impl Ctx {
    fn id(&self, kind: ResourceType, name: &str) -> ResourceId {
        ResourceId::new(
            &self.cluster.subscription,
            &self.cluster.resource_group,
            kind,
            name,
        )
    }

    pub(crate) fn vm_id(&self) -> ResourceId {
        self.id(ResourceType::VirtualMachine, &self.names.vm)
    }

    pub(crate) fn nic_id(&self) -> ResourceId {
        self.id(ResourceType::NetworkInterface, &self.names.nic())
    }

    pub(crate) fn public_ip_id(&self) -> ResourceId {
        self.id(ResourceType::PublicIpAddress, &self.names.public_ip())
    }

    fn disk_ids(&self) -> Vec<ResourceId> {
        std::iter::once(self.names.os_disk())
            .chain(
                self.infra
                    .spec
                    .data_disks
                    .iter()
                    .map(|d| self.names.data_disk(&d.name_suffix)),
            )
            .map(|name| self.id(ResourceType::Disk, &name))
            .collect()
    }

    fn recorded(&self) -> Vec<LongRunningOperation> {
        self.infra
            .status
            .as_ref()
            .map(|s| s.long_running_operation_states.clone())
            .unwrap_or_default()
    }
}

/// Reconciles `AzureMachine`s through a [`Connector`] and a way to find their `AzureCluster`.
pub struct AzureMachineActuator {
    connector: Arc<dyn Connector>,
    clusters: Arc<dyn ClusterLookup>,
    /// What `exists` found, by idempotency key, for the `create` or `update` that follows it in
    /// the same reconcile (the operations are read and the VM and NIC fetched once).
    found: Mutex<std::collections::HashMap<String, Observed>>,
}

/// What `exists` saw of a machine.
struct Observed {
    vm: Option<Value>,
    nic: Option<Value>,
    operations: Operations,
}

/// What the provider reports in `AzureMachine.status` beyond the contract.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MachineStatus {
    vm_state: Option<VmState>,
    long_running_operation_states: Vec<LongRunningOperation>,
}

fn vm_state(state: &str) -> Option<VmState> {
    Some(match state.to_ascii_lowercase().as_str() {
        "creating" => VmState::Creating,
        "updating" => VmState::Updating,
        "succeeded" => VmState::Succeeded,
        "failed" => VmState::Failed,
        "canceled" => VmState::Canceled,
        "deleting" => VmState::Deleting,
        "migrating" => VmState::Migrating,
        _ => return None,
    })
}

impl AzureMachineActuator {
    /// An actuator using `connector` for ARM clients and `clusters` to find `AzureCluster`s.
    pub fn new(connector: Arc<dyn Connector>, clusters: Arc<dyn ClusterLookup>) -> Self {
        Self {
            connector,
            clusters,
            found: Mutex::default(),
        }
    }

    async fn context(&self, scope: &MachineScope<AzureMachine>) -> Result<Ctx, ActuatorError> {
        let infra = &scope.infra_machine;
        let namespace = infra.namespace().unwrap_or_default();
        let cluster_name = scope.cluster_name()?;
        let cluster = self
            .clusters
            .azure_cluster(
                &namespace,
                &cluster_name,
                crate::lookup::infrastructure_name(&scope.cluster),
            )
            .await?;
        let arm = self.connector.connect(&cluster).await?;
        let control_plane = scope.is_control_plane();
        let port = crate::cluster::api_server_port(&scope.cluster);
        let zone = infra
            .spec
            .failure_domain
            .clone()
            .or_else(|| scope.machine.spec.failure_domain.clone())
            .filter(|z| !z.is_empty());
        Ok(Ctx {
            cluster: ClusterCtx::new(arm, Arc::new(cluster), &cluster_name, port),
            names: MachineNaming {
                vm: infra.name_any(),
            },
            infra: Arc::clone(infra),
            key: scope.idempotency_key.as_str().to_string(),
            control_plane,
            zone,
            version: scope.machine.spec.version.clone(),
        })
    }

    /// The machine's NIC, if it exists.
    async fn nic(ctx: &Ctx) -> Result<Option<Value>, ActuatorError> {
        ctx.cluster
            .arm
            .get(&ctx.nic_id())
            .await
            .map_err(|e| e.into_actuator("reading the network interface"))
    }

    /// What `exists` saw of the machine in this reconcile, else what ARM says now.
    async fn observed(&self, ctx: &Ctx) -> Observed {
        let stashed = self
            .found
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&ctx.key);
        match stashed {
            Some(observed) => observed,
            None => Observed {
                vm: None,
                nic: None,
                operations: Operations::resume(ctx.cluster.arm.as_ref(), &ctx.recorded()).await,
            },
        }
    }

    /// What the loop records of `vm`, whose NIC is `nic`.
    async fn report(
        ctx: &Ctx,
        vm: &Value,
        nic: Option<&Value>,
        operations: &Operations,
    ) -> Result<MachineInstance, ActuatorError> {
        let state = provisioning_state(vm);
        let id = ctx.vm_id();
        let failure = operations.failure_message();
        let (loop_state, condition) = match state.0.to_ascii_lowercase().as_str() {
            "succeeded" => (
                InstanceState::Running,
                DesiredCondition::new("VMRunning", ConditionStatus::True, "VMRunning"),
            ),
            "deleting" => (
                InstanceState::Failed {
                    reason: "VMDeleting".into(),
                    message: format!(
                        "virtual machine {} is being deleted outside Cluster API; delete the \
                         Machine to replace it",
                        id.name
                    ),
                },
                DesiredCondition::new("VMRunning", ConditionStatus::False, "VMDeleting"),
            ),
            "failed" | "canceled" => (
                InstanceState::Provisioning,
                DesiredCondition::new("VMRunning", ConditionStatus::False, "VMProvisionFailed")
                    .message(failure.clone().unwrap_or_else(|| {
                        format!("the last operation on virtual machine {} did not complete; putting it again", id.name)
                    })),
            ),
            other => (
                InstanceState::Provisioning,
                DesiredCondition::new("VMRunning", ConditionStatus::False, "Creating")
                    .message(format!("virtual machine {} is {other}", id.name)),
            ),
        };
        let mut addresses = vec![MachineAddress {
            type_: MachineAddressType::InternalDns,
            address: ctx.names.vm.clone(),
        }];
        if let Some(nic) = nic {
            for conf in nic["properties"]["ipConfigurations"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if let Some(address) = conf["properties"]["privateIPAddress"].as_str() {
                    addresses.push(MachineAddress {
                        type_: MachineAddressType::InternalIp,
                        address: address.to_string(),
                    });
                }
            }
        }
        if ctx.infra.spec.allocate_public_ip
            && let Some(pip) = ctx
                .cluster
                .arm
                .get(&ctx.public_ip_id())
                .await
                .map_err(|e| e.into_actuator("reading the public IP address"))?
            && let Some(address) = pip["properties"]["ipAddress"].as_str()
        {
            addresses.push(MachineAddress {
                type_: MachineAddressType::ExternalIp,
                address: address.to_string(),
            });
        }
        let status = ProviderStatus::from_typed(&MachineStatus {
            vm_state: vm_state(&state.0),
            long_running_operation_states: operations.to_record(),
        })
        .map_err(|e| ActuatorError::transient("ProviderStatusInvalid", e))?;
        let mut reported = MachineInstance::new(provider_id(&id), addresses, loop_state)
            .with_provider_status(status);
        reported.conditions.push(condition);
        if let Some(zone) = vm["zones"][0].as_str() {
            reported = reported.in_failure_domain(zone);
        }
        Ok(reported)
    }

    /// Refuses a VM of the machine's name that is not the cluster's: never reported, changed
    /// or deleted as this machine's.
    fn ours(ctx: &Ctx, vm: &Value) -> Result<(), ActuatorError> {
        if ctx.cluster.naming.owns(&vm["tags"]) {
            return Ok(());
        }
        Err(ActuatorError::transient_message(
            "VMNotOwned",
            format!(
                "a virtual machine named {} exists in resource group {} and is not cluster \
                 {}/{}'s; it is never taken over — delete or rename it",
                ctx.names.vm,
                ctx.cluster.resource_group,
                ctx.cluster.naming.namespace,
                ctx.cluster.naming.name
            ),
        ))
    }

    /// The bootstrap data as `customData`, within Azure's limit.
    fn custom_data(scope: &MachineScope<AzureMachine>) -> Result<String, ActuatorError> {
        let Some(bootstrap) = &scope.bootstrap_data else {
            return Err(ActuatorError::transient_message(
                "WaitingForBootstrapData",
                "no bootstrap data to create the virtual machine with yet",
            ));
        };
        let data = bootstrap.expose();
        if data.len() > MAX_CUSTOM_DATA {
            return Err(ActuatorError::invalid_configuration(
                "BootstrapDataTooLarge",
                format!(
                    "the bootstrap data is {} bytes; Azure's customData takes at most {MAX_CUSTOM_DATA}",
                    data.len()
                ),
            ));
        }
        Ok(base64::engine::general_purpose::STANDARD.encode(data))
    }

    /// PUTs the VM with `custom_data` (create, or again after a failure) and records its
    /// operation.
    async fn put_vm(
        ctx: &Ctx,
        custom_data: String,
        operations: &mut Operations,
    ) -> Result<Value, ActuatorError> {
        let body = ctx.vm_body(Some(custom_data))?;
        let id = ctx.vm_id();
        let accepted = ctx
            .cluster
            .arm
            .put(&id, &body)
            .await
            .map_err(|e| e.into_actuator(&format!("creating virtual machine {}", id.name)))?;
        if let Some(operation) = &accepted.operation {
            operations.record(&id, OperationType::Put, operation);
        }
        tracing::info!(vm = %id.name, key = %ctx.key, "virtual machine accepted by ARM");
        Ok(accepted.body)
    }

    /// Makes what the VM needs first: its public IP (if asked for) and its NIC, whose body it
    /// returns.
    async fn prerequisites(ctx: &Ctx, operations: &mut Operations) -> Result<Value, ActuatorError> {
        let arm = ctx.cluster.arm.as_ref();
        let naming = &ctx.cluster.naming;
        if ctx.infra.spec.allocate_public_ip {
            let step = ensure(
                arm,
                operations,
                naming,
                Foreign::Refuse,
                &ctx.public_ip_id(),
                &ctx.machine_public_ip_body(),
                "public IP address",
            )
            .await?;
            if let Step::Waiting(message) = step {
                return Err(ActuatorError::requeue_after(
                    operations.recheck(),
                    "WaitingForPublicIP",
                    message,
                ));
            }
        }
        let step = ensure(
            arm,
            operations,
            naming,
            Foreign::Refuse,
            &ctx.nic_id(),
            &ctx.nic_body(),
            "network interface",
        )
        .await?;
        match step {
            Step::Ready(nic) => Ok(nic),
            Step::Waiting(message) => Err(ActuatorError::requeue_after(
                operations.recheck(),
                "WaitingForNetworkInterface",
                message,
            )),
        }
    }
}

fn immutable_changes(ctx: &Ctx, vm: &Value) -> Vec<ImmutableChange> {
    let mut changes = Vec::new();
    let current = vm["properties"]["hardwareProfile"]["vmSize"]
        .as_str()
        .unwrap_or_default();
    if !current.eq_ignore_ascii_case(&ctx.infra.spec.vm_size) {
        changes.push(ImmutableChange {
            field: "spec.vmSize".into(),
            current: current.to_string(),
            desired: ctx.infra.spec.vm_size.clone(),
        });
    }
    if let Ok(wanted) = image_reference(ctx.infra.spec.image.as_ref(), ctx.version.as_deref()) {
        let wanted = serde_json::to_value(&wanted).unwrap_or(Value::Null);
        let have = &vm["properties"]["storageProfile"]["imageReference"];
        if !crate::resource::contains(have, &wanted) {
            changes.push(ImmutableChange {
                field: "spec.image".into(),
                current: have.to_string(),
                desired: wanted.to_string(),
            });
        }
    }
    changes
}

#[async_trait]
impl Actuator<AzureMachine> for AzureMachineActuator {
    async fn exists(
        &self,
        scope: &MachineScope<AzureMachine>,
    ) -> Result<Option<MachineInstance>, ActuatorError> {
        let ctx = self.context(scope).await?;
        let operations = Operations::resume(ctx.cluster.arm.as_ref(), &ctx.recorded()).await;
        let vm = ctx
            .cluster
            .arm
            .get(&ctx.vm_id())
            .await
            .map_err(|e| e.into_actuator("reading the virtual machine"))?;
        let (reported, nic) = match &vm {
            None => (None, None),
            Some(vm) => {
                Self::ours(&ctx, vm)?;
                let nic = Self::nic(&ctx).await?;
                (
                    Some(Self::report(&ctx, vm, nic.as_ref(), &operations).await?),
                    nic,
                )
            }
        };
        self.found
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                ctx.key.clone(),
                Observed {
                    vm,
                    nic,
                    operations,
                },
            );
        Ok(reported)
    }

    async fn create(
        &self,
        scope: &MachineScope<AzureMachine>,
    ) -> Result<MachineInstance, ActuatorError> {
        // No bootstrap data, nothing to do: said before any request.
        let custom_data = Self::custom_data(scope)?;
        let ctx = self.context(scope).await?;
        let mut operations = self.observed(&ctx).await.operations;
        let nic = Self::prerequisites(&ctx, &mut operations).await?;
        let vm = Self::put_vm(&ctx, custom_data, &mut operations).await?;
        Self::report(&ctx, &vm, Some(&nic), &operations).await
    }

    async fn update(
        &self,
        scope: &MachineScope<AzureMachine>,
        _: &MachineInstance,
    ) -> Result<UpdateOutcome, ActuatorError> {
        let ctx = self.context(scope).await?;
        let Observed {
            vm,
            mut nic,
            mut operations,
        } = self.observed(&ctx).await;
        let mut vm = match vm {
            Some(vm) => vm,
            None => ctx
                .cluster
                .arm
                .get(&ctx.vm_id())
                .await
                .map_err(|e| e.into_actuator("reading the virtual machine"))?
                .ok_or_else(|| {
                    ActuatorError::transient_message(
                        "VMNotFound",
                        "the virtual machine vanished between the lookup and the update",
                    )
                })?,
        };
        let state = provisioning_state(&vm);
        if state.failed() && !operations.in_flight(&ctx.vm_id(), OperationType::Put) {
            // ARM recovers a VM whose provisioning failed by PUTting it again.
            let custom_data = Self::custom_data(scope)?;
            nic = Some(Self::prerequisites(&ctx, &mut operations).await?);
            vm = Self::put_vm(&ctx, custom_data, &mut operations).await?;
        } else if state.succeeded() {
            // A control-plane NIC missing from the backend pool (or otherwise drifted) is
            // put right.
            let step = ensure(
                ctx.cluster.arm.as_ref(),
                &mut operations,
                &ctx.cluster.naming,
                Foreign::Refuse,
                &ctx.nic_id(),
                &ctx.nic_body(),
                "network interface",
            )
            .await?;
            if let Step::Ready(body) = step {
                nic = Some(body);
            }
        }
        if nic.is_none() {
            nic = Self::nic(&ctx).await?;
        }
        let immutable_changes = immutable_changes(&ctx, &vm);
        Ok(UpdateOutcome {
            instance: Self::report(&ctx, &vm, nic.as_ref(), &operations).await?,
            immutable_changes,
        })
    }

    async fn delete(&self, scope: &MachineScope<AzureMachine>) -> Result<(), ActuatorError> {
        let ctx = self.context(scope).await?;
        self.found
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&ctx.key);
        let arm = ctx.cluster.arm.as_ref();
        let deleting = |what: &str| {
            ActuatorError::requeue_after(
                DELETE_POLL,
                "Deleting",
                format!("waiting for {what} to be deleted"),
            )
        };
        // The VM first; what it leaves behind once it is gone. Only what is the cluster's: a
        // VM of the machine's name that is another's is left alone, and so are its disks.
        let naming = &ctx.cluster.naming;
        let vm = ctx.vm_id();
        let found = arm
            .get(&vm)
            .await
            .map_err(|e| e.into_actuator("reading the virtual machine"))?;
        let foreign = found.as_ref().is_some_and(|v| !naming.owns(&v["tags"]));
        if foreign {
            tracing::warn!(vm = %vm.name, "a virtual machine of this name is not the cluster's; left alone");
        } else {
            match remove(arm, Some(naming), &vm)
                .await
                .map_err(|e| e.into_actuator("deleting the virtual machine"))?
            {
                Removal::Gone => {}
                Removal::Deleting => {
                    return Err(deleting(&format!("virtual machine {}", vm.name)));
                }
                Removal::Refused(error) => {
                    return Err(error.into_actuator("deleting the virtual machine"));
                }
            }
        }
        let mut left = Vec::new();
        let mut others = vec![(ctx.nic_id(), Some(naming))];
        if ctx.infra.spec.allocate_public_ip {
            others.push((ctx.public_ip_id(), Some(naming)));
        }
        // Disks by name: an OS disk made from the image carries no tags of its own.
        if !foreign {
            others.extend(ctx.disk_ids().into_iter().map(|id| (id, None)));
        }
        for (id, owner) in others {
            match remove(arm, owner, &id).await {
                Ok(Removal::Gone) => {}
                Ok(Removal::Deleting) => left.push(format!("{} (being deleted)", id.name)),
                Ok(Removal::Refused(error)) => left.push(format!("{} ({error})", id.name)),
                Err(error) if matches!(error.class(), crate::arm::ErrorClass::Throttled(_)) => {
                    return Err(error.into_actuator(&format!("deleting {}", id.name)));
                }
                Err(error) => left.push(format!("{} ({error})", id.name)),
            }
        }
        if left.is_empty() {
            tracing::info!(vm = %vm.name, "virtual machine, network interface and disks deleted");
            return Ok(());
        }
        Err(ActuatorError::requeue_after(
            DELETE_POLL,
            "Deleting",
            format!("still deleting: {}", left.join("; ")),
        ))
    }
}

#[cfg(test)]
mod tests;
