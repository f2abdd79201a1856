//! The `AzureMachine` actuator: one VM per Machine, exactly once, never waiting on ARM.
//!
//! - **Exactly once by name.** The VM is the `AzureMachine`'s name, its NIC `<vm>-nic`, its OS
//!   disk `<vm>_OSDisk` ([`crate::naming`]): every PUT is a create-or-update of that name, so a
//!   PUT replayed after a lost answer, a failed status write or a restart is the same VM, and a
//!   second one cannot exist. The lookup is a GET of that name — no listing, no tags to trust.
//! - **Read once per reconcile.** `exists` reads the VM, its NIC and public IP; `update`
//!   converges from that [`VmRecord`] and reads none of them again.
//! - **Operations recorded, not awaited.** The VM's PUT returns at once; its operation is
//!   recorded in `status.longRunningOperationStates` and read once per reconcile — by whichever
//!   manager runs it — until it ends ([`crate::operations`]), or until the VM, read after it,
//!   says its provisioning ended: Running is never reported with the VM's operation still
//!   recorded. A VM whose provisioning failed is PUT again on the next reconcile (without
//!   `customData`: ARM keeps what it was created with); an operation that vanished or outlived
//!   its deadline is dropped and the VM read again.
//! - The NIC is made first (in the API server's backend pool for a control-plane machine); the
//!   VM references it with `deleteOption: Delete`, as it does its disks. **Deletion** deletes the
//!   VM, then whatever of the NIC, the public IP and the disks ARM left behind, each checked
//!   by name: no leaked NIC or disk.
//!
//! The provider ID is `azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachines/<name>`,
//! what the Azure cloud provider gives the node.

mod body;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::api::{MachineAddress, MachineAddressType};
use capi_core::condition::{ConditionStatus, DesiredCondition};
use capi_core::{
    Actuator, ActuatorError, BootstrapData, Found, ImmutableChange, InstanceState, MachineInstance,
    MachineScope, ProviderStatus, UpdateOutcome,
};
use kube::ResourceExt;
use serde::Serialize;
use serde_json::Value;

use crate::api::{AzureCluster, AzureMachine, LongRunningOperation, OperationType, VmState};
use crate::arm::{ResourceId, ResourceType};
use crate::cluster::Ctx as ClusterCtx;
use crate::connector::Connector;
use crate::naming::MachineNaming;
use crate::operations::Operations;
use crate::resource::{
    Foreign, Removal, Step, Wanted, converge, ensure, provisioning_state, remove,
};

pub use body::{
    ADMIN_USER, MAX_CUSTOM_DATA, REFERENCE_GALLERY, REFERENCE_IMAGE, image_reference, ssh_key,
};
pub(crate) use body::{custom_data, existing_ssh_key};

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

/// The resource a provider ID (`azure:///subscriptions/…`) names, if it names one the provider
/// knows.
pub fn resource_of(provider_id: &str) -> Option<ResourceId> {
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .and_then(|path| ResourceId::parse(path).ok())
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

/// Reconciles `AzureMachine`s in the `AzureCluster` of their scope, through a [`Connector`].
/// It keeps nothing between calls: what `exists` read reaches `update` as a [`VmRecord`].
pub struct AzureMachineActuator {
    connector: Arc<dyn Connector>,
}

/// What ARM answered about a machine's VM in one reconcile: the VM, its NIC and public IP (the
/// addresses reported), and the machine's recorded operations as they stand after the VM was
/// read. [`AzureMachineActuator`]'s `exists` makes it and its `update` converges from it,
/// without reading any of them again.
#[derive(Clone, Debug)]
pub struct VmRecord {
    vm: Value,
    nic: Option<Value>,
    public_ip: Option<Value>,
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
    /// An actuator using `connector` for ARM clients.
    pub fn new(connector: Arc<dyn Connector>) -> Self {
        Self { connector }
    }

    /// The reconcile's context: the scope's `AzureCluster` and the ARM client of its identity.
    async fn context(
        &self,
        scope: &MachineScope<AzureMachine, AzureCluster>,
    ) -> Result<Ctx, ActuatorError> {
        let infra = &scope.infra_machine;
        let cluster_name = scope.cluster_name()?;
        let infra_cluster = Arc::clone(scope.infra_cluster()?);
        let arm = self.connector.connect(&infra_cluster).await?;
        let control_plane = scope.is_control_plane();
        let port = crate::cluster::api_server_port(&scope.cluster);
        let zone = infra
            .spec
            .failure_domain
            .clone()
            .or_else(|| scope.machine.spec.failure_domain.clone())
            .filter(|z| !z.is_empty());
        Ok(Ctx {
            cluster: ClusterCtx::new(arm, infra_cluster, &cluster_name, port),
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

    /// Reads the machine's VM — after polling the operations recorded in status, so that what
    /// the VM says is the later word — and, when it is the cluster's, its NIC and public IP.
    /// `None` when no VM of the machine's name exists. Never writes.
    async fn find(ctx: &Ctx) -> Result<Option<VmRecord>, ActuatorError> {
        let arm = ctx.cluster.arm.as_ref();
        let mut operations = Operations::resume(arm, &ctx.recorded()).await;
        let vm_id = ctx.vm_id();
        let Some(vm) = arm
            .get(&vm_id)
            .await
            .map_err(|e| e.into_actuator("reading the virtual machine"))?
        else {
            return Ok(None);
        };
        Self::ours(ctx, &vm)?;
        operations.settle(&vm_id, &provisioning_state(&vm));
        let nic = arm
            .get(&ctx.nic_id())
            .await
            .map_err(|e| e.into_actuator("reading the network interface"))?;
        let public_ip = if ctx.infra.spec.allocate_public_ip {
            arm.get(&ctx.public_ip_id())
                .await
                .map_err(|e| e.into_actuator("reading the public IP address"))?
        } else {
            None
        };
        Ok(Some(VmRecord {
            vm,
            nic,
            public_ip,
            operations,
        }))
    }

    /// What the loop records of `record`'s VM: its state, the addresses of its NIC and public
    /// IP, and the operations still under way.
    fn report(ctx: &Ctx, record: &VmRecord) -> Result<MachineInstance, ActuatorError> {
        let VmRecord {
            vm,
            nic,
            public_ip,
            operations,
        } = record;
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
        if let Some(address) = public_ip
            .as_ref()
            .and_then(|pip| pip["properties"]["ipAddress"].as_str())
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

    /// PUTs the VM and records its operation: with `custom_data` to create it; with `None` to
    /// put it again after a failure (`existing`, as ARM answered it), when ARM keeps the
    /// `customData` it was created with (which cannot change), and the VM keeps its SSH key.
    async fn put_vm(
        ctx: &Ctx,
        custom_data: Option<String>,
        existing: Option<&Value>,
        operations: &mut Operations,
    ) -> Result<Value, ActuatorError> {
        let body = ctx.vm_body(custom_data, existing)?;
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

    /// Makes what the VM needs first: its public IP (if asked for), then its NIC. Returns their
    /// bodies, NIC first, once both are ready; `RequeueAfter` while ARM is making either.
    async fn prerequisites(
        ctx: &Ctx,
        operations: &mut Operations,
    ) -> Result<(Value, Option<Value>), ActuatorError> {
        let arm = ctx.cluster.arm.as_ref();
        let naming = &ctx.cluster.naming;
        let mut public_ip = None;
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
            match step {
                Step::Ready(body) => public_ip = Some(body),
                Step::Waiting(message) => {
                    return Err(ActuatorError::requeue_after(
                        operations.recheck(),
                        "WaitingForPublicIP",
                        message,
                    ));
                }
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
            Step::Ready(nic) => Ok((nic, public_ip)),
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
impl Actuator<AzureMachine, AzureCluster> for AzureMachineActuator {
    type Instance = VmRecord;

    async fn exists(
        &self,
        scope: &MachineScope<AzureMachine, AzureCluster>,
    ) -> Result<Option<Found<VmRecord>>, ActuatorError> {
        let ctx = self.context(scope).await?;
        let Some(record) = Self::find(&ctx).await? else {
            return Ok(None);
        };
        let reported = Self::report(&ctx, &record)?;
        Ok(Some(Found::with(reported, record)))
    }

    async fn create(
        &self,
        scope: &MachineScope<AzureMachine, AzureCluster>,
        bootstrap: &BootstrapData,
    ) -> Result<MachineInstance, ActuatorError> {
        // Bootstrap data Azure would refuse is said before any request.
        let custom_data = custom_data(bootstrap)?;
        let ctx = self.context(scope).await?;
        let mut operations = Operations::resume(ctx.cluster.arm.as_ref(), &ctx.recorded()).await;
        let (nic, public_ip) = Self::prerequisites(&ctx, &mut operations).await?;
        let vm = Self::put_vm(&ctx, Some(custom_data), None, &mut operations).await?;
        Self::report(
            &ctx,
            &VmRecord {
                vm,
                nic: Some(nic),
                public_ip,
                operations,
            },
        )
    }

    async fn update(
        &self,
        scope: &MachineScope<AzureMachine, AzureCluster>,
        found: Found<VmRecord>,
    ) -> Result<UpdateOutcome, ActuatorError> {
        let ctx = self.context(scope).await?;
        let mut record = found.instance;
        let state = provisioning_state(&record.vm);
        let put_under_way = record
            .operations
            .in_flight(&ctx.vm_id(), OperationType::Put);
        if state.failed() && !put_under_way {
            // ARM recovers a VM whose provisioning failed by PUTting it again.
            let (nic, public_ip) = Self::prerequisites(&ctx, &mut record.operations).await?;
            let existing = record.vm.clone();
            record.vm = Self::put_vm(&ctx, None, Some(&existing), &mut record.operations).await?;
            record.nic = Some(nic);
            record.public_ip = public_ip;
        } else if state.succeeded() {
            // A control-plane NIC missing from the backend pool (or otherwise drifted) is put
            // right, from the NIC `exists` read.
            let step = converge(
                ctx.cluster.arm.as_ref(),
                &mut record.operations,
                &ctx.cluster.naming,
                Wanted {
                    id: &ctx.nic_id(),
                    body: &ctx.nic_body(),
                    foreign: Foreign::Refuse,
                    what: "network interface",
                },
                record.nic.as_ref(),
            )
            .await?;
            if let Step::Ready(body) = step {
                record.nic = Some(body);
            }
        }
        Ok(UpdateOutcome {
            instance: Self::report(&ctx, &record)?,
            immutable_changes: immutable_changes(&ctx, &record.vm),
        })
    }

    async fn delete(
        &self,
        scope: &MachineScope<AzureMachine, AzureCluster>,
    ) -> Result<(), ActuatorError> {
        let ctx = self.context(scope).await?;
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
