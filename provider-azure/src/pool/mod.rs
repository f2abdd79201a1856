//! The `AzureMachinePool` actuator: one virtual machine scale set in Flexible orchestration per
//! `MachinePool`, exactly once, and only the VMs the pool loop names ever leave it.
//!
//! - **One scale set, by name.** The scale set is named after the pool's idempotency key
//!   (`capi-<MachinePool UID>`): every PUT is a create-or-update of that name, so a PUT replayed
//!   after a lost answer, a failed status write or a restart is the same scale set. One found
//!   is the pool's only if it carries the cluster's ownership tags and the key ([`POOL_TAG`]).
//! - **Only named VMs leave.** A VM leaves through the scale set's `delete` action naming it,
//!   which lowers the capacity with it, and only once the loop names it (after its `Machine`
//!   was drained). The capacity is never lowered by a PUT — Azure would pick the VMs — and is
//!   raised only once the model is the current one.
//! - **Rollouts.** The model carries the revision twice: as a tag of the scale set, and in the
//!   model's `userData`, which each VM keeps as it was when the VM was made. A VM's revision is
//!   read from its `userData` once and then kept in `status.instanceRevisions`. The bootstrap
//!   data goes in the model's `customData`; when it changes within a revision (a rotated join
//!   token) the model is put again, which reaches new VMs and rolls none.
//! - **Operations recorded, not awaited** (as for an `AzureMachine`): the scale set's PUT and a
//!   removal are recorded in `status.longRunningOperationStates` and read once per reconcile; no
//!   other request is sent to the scale set while one is under way.
//! - **Zones.** A new scale set spreads its VMs over the zones the `MachinePool`'s
//!   `spec.failureDomains` names (regional when it names none). A scale set's zones are chosen
//!   when it is made and kept: a change of the failure domains afterwards is reported
//!   ([`FAILURE_DOMAINS_APPLIED`] `False`), not applied — a new pool takes it.
//! - **Deletion.** The scale set is deleted with its VMs; VMs of it that outlive it (made by a
//!   PUT another party sent) are deleted one by one; `Ok` once none is left.
//!
//! The scale set's provider ID is `azure:///<its resource ID>`, a VM's that of an `AzureMachine`
//! ([`crate::machine::provider_id`]).

mod body;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use capi_core::api::{MachineAddress, MachineAddressType};
use capi_core::condition::{ConditionStatus, DesiredCondition};
use capi_core::{
    ActuatorError, BootstrapData, Found, InstanceState, ModelRevision, PoolActuator, PoolInstance,
    PoolScope, ProviderStatus, ScaleSetReport,
};
use kube::ResourceExt;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::api::{
    AzureCluster, AzureMachinePool, InstanceRevision, LongRunningOperation, OperationType,
};
use crate::arm::{ResourceId, ResourceType};
use crate::cluster::Ctx as ClusterCtx;
use crate::connector::Connector;
use crate::machine::{custom_data, provider_id, resource_of};
use crate::operations::Operations;
use crate::resource::{Removal, provisioning_state, remove};

/// The tag naming the pool's idempotency key on its scale set.
pub const POOL_TAG: &str = "capi-rs.dev_machine-pool";
/// The tag naming the revision of the scale set's model.
pub const REVISION_TAG: &str = "capi-rs.dev_model-revision";
/// The tag naming a digest of the bootstrap data in the scale set's model.
pub const DATA_DIGEST_TAG: &str = "capi-rs.dev_bootstrap-digest";
/// The key of the revision in the `userData` (JSON) of the model and of each VM.
pub const REVISION_KEY: &str = "capi-rs.dev/model-revision";

/// The provider's condition on the pool: whether the scale set's last operation succeeded
/// (`False` with ARM's reason when it failed; the next reconcile puts it again).
pub const SCALE_SET_PROVISIONED: &str = "ScaleSetProvisioned";

/// The provider's condition on the pool: whether the scale set's zones are the `MachinePool`'s
/// failure domains (`False`, `ZonesImmutable`, when they were changed after it was made).
pub const FAILURE_DOMAINS_APPLIED: &str = "FailureDomainsApplied";

/// How soon a scale set being changed or deleted is looked at again.
const POLL: Duration = Duration::from_secs(5);

/// Reconciles `AzureMachinePool`s in the `AzureCluster` of their scope, through a
/// [`Connector`]. It reads nothing from the API server but what the connector reads.
pub struct AzurePoolActuator {
    connector: Arc<dyn Connector>,
}

/// What ARM answered about a pool's scale set in one reconcile, for `update` to converge from
/// without reading it again.
#[derive(Clone, Debug)]
pub struct ScaleSetRecord {
    /// The scale set.
    pub scale_set: Value,
    /// Its VMs, as listed.
    pub vms: Vec<Value>,
    /// The revision each VM was made from, by VM name (those whose `userData` says).
    pub revisions: BTreeMap<String, String>,
    operations: Operations,
}

/// One call for one pool.
pub(crate) struct PoolCtx {
    pub(crate) cluster: ClusterCtx,
    pub(crate) pool: Arc<AzureMachinePool>,
    pub(crate) key: String,
    pub(crate) version: Option<String>,
    /// The zones a new scale set spreads its VMs over: the `MachinePool`'s failure domains.
    pub(crate) zones: Vec<String>,
}

impl PoolCtx {
    fn id(&self, kind: ResourceType, name: &str) -> ResourceId {
        ResourceId::new(
            &self.cluster.subscription,
            &self.cluster.resource_group,
            kind,
            name,
        )
    }

    fn scale_set_id(&self) -> ResourceId {
        self.id(ResourceType::VirtualMachineScaleSet, &self.key)
    }

    fn vm_id(&self, name: &str) -> ResourceId {
        self.id(ResourceType::VirtualMachine, name)
    }

    fn group_id(&self) -> ResourceId {
        ResourceId::resource_group(&self.cluster.subscription, &self.cluster.resource_group)
    }

    fn recorded(&self) -> Vec<LongRunningOperation> {
        self.pool
            .status
            .as_ref()
            .map(|s| s.long_running_operation_states.clone())
            .unwrap_or_default()
    }

    /// Whether `tags` mark a scale set as this pool's.
    fn owns(&self, tags: &Value) -> bool {
        self.cluster.naming.owns(tags) && tags[POOL_TAG].as_str() == Some(self.key.as_str())
    }

    /// Refuses a recorded `spec.providerID` that names another scale set than `id` (the
    /// cluster's resource group or subscription changed, or the ID was written by hand): a
    /// second scale set would be made while the first one, and its nodes, were left.
    fn check_provider_id(&self, id: &ResourceId) -> Result<(), ActuatorError> {
        let Some(recorded) = self.pool.spec.provider_id.as_deref() else {
            return Ok(());
        };
        let named = resource_of(recorded);
        if named.as_ref().is_some_and(|named| named.same(id)) {
            return Ok(());
        }
        Err(ActuatorError::invalid_configuration(
            "ProviderIDMismatch",
            format!(
                "spec.providerID {recorded:?} is not this pool's scale set {id}: the \
                 AzureCluster's subscription or resource group changed, or the ID was set by \
                 hand; restore them, or delete the scale set it names and clear spec.providerID"
            ),
        ))
    }

    /// The OData filter selecting the scale set's VMs.
    fn members_filter(&self) -> String {
        format!("'virtualMachineScaleSet/id' eq '{}'", self.scale_set_id())
    }
}

/// What the provider reports in `AzureMachinePool.status` beyond the contract.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PoolStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    model_revision: Option<String>,
    instance_revisions: Vec<InstanceRevision>,
    long_running_operation_states: Vec<LongRunningOperation>,
}

/// A digest of bootstrap data, short enough for a tag value.
fn data_digest(bootstrap: &BootstrapData) -> String {
    Sha256::digest(bootstrap.expose())
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The revision a VM's (or a model's) base64 `userData` names.
pub fn revision_in_user_data(user_data: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(user_data.trim())
        .ok()?;
    let document: Value = serde_json::from_slice(&bytes).ok()?;
    document[REVISION_KEY]
        .as_str()
        .filter(|r| !r.is_empty() && r.len() <= 63)
        .map(str::to_string)
}

/// The `userData` naming `revision`.
fn user_data(revision: &ModelRevision) -> String {
    base64::engine::general_purpose::STANDARD
        .encode(json!({ REVISION_KEY: revision.as_str() }).to_string())
}

/// The zones of `scale_set` as ARM answered it, sorted (none: regional).
fn zones_of(scale_set: &Value) -> Vec<String> {
    let mut zones: Vec<String> = scale_set["zones"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|z| z.as_str().map(str::to_string))
        .collect();
    zones.sort();
    zones
}

/// [`FAILURE_DOMAINS_APPLIED`]: whether `scale_set`'s zones are the pool's failure domains.
fn zones_condition(ctx: &PoolCtx, scale_set: &Value) -> DesiredCondition {
    let mut wanted = ctx.zones.clone();
    wanted.sort();
    wanted.dedup();
    let have = zones_of(scale_set);
    if wanted == have {
        return DesiredCondition::new(FAILURE_DOMAINS_APPLIED, ConditionStatus::True, "Applied");
    }
    let shown = |zones: &[String]| {
        if zones.is_empty() {
            "none (regional)".to_string()
        } else {
            zones.join(", ")
        }
    };
    DesiredCondition::new(
        FAILURE_DOMAINS_APPLIED,
        ConditionStatus::False,
        "ZonesImmutable",
    )
    .message(format!(
        "the scale set's zones are {} and the MachinePool's failure domains {}: a scale set's \
         zones are chosen when it is made; restore spec.failureDomains, or replace the \
         MachinePool to move its VMs",
        shown(&have),
        shown(&wanted)
    ))
}

fn capacity_of(scale_set: &Value) -> u32 {
    scale_set["sku"]["capacity"]
        .as_u64()
        .and_then(|c| u32::try_from(c).ok())
        .unwrap_or(0)
}

fn is_deleting(vm: &Value) -> bool {
    provisioning_state(vm).0.eq_ignore_ascii_case("Deleting")
}

impl AzurePoolActuator {
    /// An actuator using `connector` for ARM clients.
    pub fn new(connector: Arc<dyn Connector>) -> Self {
        Self { connector }
    }

    /// The call's context; `check` refuses a spec the scale set cannot be made from (deletion
    /// does not check: a pool made with a wrong spec must still go).
    async fn context(
        &self,
        scope: &PoolScope<AzureMachinePool, AzureCluster>,
        check: bool,
    ) -> Result<PoolCtx, ActuatorError> {
        let pool = &scope.infra_pool;
        let infra_cluster = scope.infra_cluster.clone().ok_or_else(|| {
            ActuatorError::requeue_after(
                Duration::from_secs(60),
                "WaitingForClusterInfrastructure",
                format!(
                    "the AzureCluster of pool {} does not exist, and its scale set is reached \
                     through it: recreate the AzureCluster, or delete the scale set by hand and \
                     remove the finalizer",
                    pool.name_any()
                ),
            )
        })?;
        if let Some(location) = pool.spec.location.as_deref()
            && check
            && !location.eq_ignore_ascii_case(&infra_cluster.spec.location)
        {
            return Err(ActuatorError::invalid_configuration(
                "LocationMismatch",
                format!(
                    "spec.location {location:?} is not the AzureCluster's {:?}: a scale set \
                     lives in its cluster's network; unset spec.location or make it the same",
                    infra_cluster.spec.location
                ),
            ));
        }
        let cluster_name = Some(scope.machine_pool.spec.cluster_name.clone())
            .filter(|n| !n.is_empty())
            .or_else(|| capi_core::labels::cluster_name(&pool.metadata).map(str::to_string))
            .unwrap_or_else(|| scope.cluster.name_any());
        let arm = self.connector.connect(&infra_cluster).await?;
        let port = crate::cluster::api_server_port(&scope.cluster);
        Ok(PoolCtx {
            cluster: ClusterCtx::new(arm, infra_cluster, &cluster_name, port),
            pool: Arc::clone(pool),
            key: scope.idempotency_key.as_str().to_string(),
            version: scope.machine_pool.spec.template.spec.version.clone(),
            zones: scope.machine_pool.spec.failure_domains.clone(),
        })
    }

    /// Reads the pool's scale set — after `operations`, those recorded in status, were polled
    /// — and its VMs, learning the revision of those not yet known. `None` when no scale set of
    /// the pool's name exists. Never writes.
    async fn find(
        ctx: &PoolCtx,
        mut operations: Operations,
    ) -> Result<Option<ScaleSetRecord>, ActuatorError> {
        let arm = ctx.cluster.arm.as_ref();
        let id = ctx.scale_set_id();
        let Some(scale_set) = arm
            .get(&id)
            .await
            .map_err(|e| e.into_actuator("reading the scale set"))?
        else {
            return Ok(None);
        };
        if !ctx.owns(&scale_set["tags"]) {
            return Err(ActuatorError::invalid_configuration(
                "ScaleSetNotOwned",
                format!(
                    "scale set {} in resource group {} does not carry cluster {}/{}'s ownership \
                     tags and this pool's key: it is not this pool's and is left untouched",
                    id.name,
                    ctx.cluster.resource_group,
                    ctx.cluster.naming.namespace,
                    ctx.cluster.naming.name
                ),
            ));
        }
        operations.settle(&id, &provisioning_state(&scale_set));
        let vms = arm
            .list(
                &ctx.group_id(),
                ResourceType::VirtualMachine,
                Some(ctx.members_filter()),
            )
            .await
            .map_err(|e| e.into_actuator("listing the scale set's virtual machines"))?;
        let known: BTreeMap<&str, &str> = ctx
            .pool
            .status
            .iter()
            .flat_map(|s| &s.instance_revisions)
            .map(|r| (r.name.as_str(), r.revision.as_str()))
            .collect();
        let mut revisions = BTreeMap::new();
        for vm in &vms {
            let Some(name) = vm["name"].as_str() else {
                continue;
            };
            if let Some(revision) = known.get(name) {
                revisions.insert(name.to_string(), (*revision).to_string());
                continue;
            }
            if is_deleting(vm) {
                continue;
            }
            let vm_id = ctx.vm_id(name);
            let expanded = arm
                .get_expanded(&vm_id, "userData")
                .await
                .map_err(|e| e.into_actuator("reading a virtual machine's userData"))?;
            if let Some(revision) = expanded
                .as_ref()
                .and_then(|v| v["properties"]["userData"].as_str())
                .and_then(revision_in_user_data)
            {
                revisions.insert(name.to_string(), revision);
            }
        }
        Ok(Some(ScaleSetRecord {
            scale_set,
            vms,
            revisions,
            operations,
        }))
    }

    /// What the loop records of `record`; `revision` when the model is known to be of it.
    fn report(
        ctx: &PoolCtx,
        record: &ScaleSetRecord,
        revision: Option<&ModelRevision>,
    ) -> Result<ScaleSetReport, ActuatorError> {
        let id = ctx.scale_set_id();
        let model_revision = revision.map(|r| r.as_str().to_string()).or_else(|| {
            record.scale_set["tags"][REVISION_TAG]
                .as_str()
                .filter(|r| r.len() <= 63)
                .map(str::to_string)
        });
        let mut instance_revisions = Vec::new();
        let mut reported = ScaleSetReport::new(
            format!("{}{id}", crate::machine::PROVIDER_ID_PREFIX),
            capacity_of(&record.scale_set),
        );
        for vm in &record.vms {
            let Some(name) = vm["name"].as_str() else {
                continue;
            };
            let vm_id = ctx.vm_id(name);
            let state = provisioning_state(vm);
            let loop_state = match state.0.to_ascii_lowercase().as_str() {
                "succeeded" => InstanceState::Running,
                "failed" | "canceled" => InstanceState::Failed {
                    reason: "VMProvisionFailed".into(),
                    message: format!(
                        "virtual machine {name} of scale set {} failed to provision; delete its \
                         Machine to replace it",
                        id.name
                    ),
                },
                _ => InstanceState::Provisioning,
            };
            let mut instance = PoolInstance::new(provider_id(&vm_id), name, loop_state);
            if let Some(revision) = record.revisions.get(name) {
                instance = instance.from_revision(ModelRevision::new(revision.clone()));
                instance_revisions.push(InstanceRevision {
                    name: name.to_string(),
                    revision: revision.clone(),
                });
            }
            if let Some(computer) = vm["properties"]["osProfile"]["computerName"].as_str() {
                instance = instance.with_addresses(vec![MachineAddress {
                    type_: MachineAddressType::InternalDns,
                    address: computer.to_string(),
                }]);
            }
            if let Some(zone) = vm["zones"][0].as_str() {
                instance = instance.in_failure_domain(zone);
            }
            if is_deleting(vm) {
                instance = instance.terminating();
            }
            reported = reported.with_instance(instance);
        }
        let state = provisioning_state(&record.scale_set);
        let failure = record.operations.failure_message();
        let condition = if state.failed() || failure.is_some() {
            DesiredCondition::new(
                SCALE_SET_PROVISIONED,
                ConditionStatus::False,
                "ProvisioningFailed",
            )
            .message(failure.unwrap_or_else(|| {
                format!(
                    "the last operation on scale set {} did not complete",
                    id.name
                )
            }))
        } else if state.succeeded() {
            DesiredCondition::new(SCALE_SET_PROVISIONED, ConditionStatus::True, "Provisioned")
        } else {
            DesiredCondition::new(
                SCALE_SET_PROVISIONED,
                ConditionStatus::False,
                "Provisioning",
            )
            .message(format!("scale set {} is {}", id.name, state.0))
        };
        let status = ProviderStatus::from_typed(&PoolStatus {
            model_revision,
            instance_revisions,
            long_running_operation_states: record.operations.to_record(),
        })
        .map_err(|e| ActuatorError::transient("ProviderStatusInvalid", e))?;
        Ok(reported
            .with_provider_status(status)
            .with_condition(condition)
            .with_condition(zones_condition(ctx, &record.scale_set)))
    }

    /// PUTs the scale set at `capacity` with the model of `revision` and `bootstrap`, and
    /// records its operation; over `existing`, only while it is as it was read (its etag).
    async fn put(
        ctx: &PoolCtx,
        capacity: u32,
        revision: &ModelRevision,
        bootstrap: &BootstrapData,
        existing: Option<&Value>,
        operations: &mut Operations,
    ) -> Result<Value, ActuatorError> {
        let custom_data = custom_data(bootstrap)?;
        let body = ctx.scale_set_body(
            capacity,
            revision,
            &data_digest(bootstrap),
            custom_data,
            existing,
        )?;
        let id = ctx.scale_set_id();
        // An existing scale set is put only as it was read (its etag): a capacity raised since
        // by an autoscaler, or a removal since, is never undone by this PUT.
        let etag = existing.and_then(|e| e["etag"].as_str());
        let arm = &ctx.cluster.arm;
        let accepted = match etag {
            Some(etag) => arm.put_if_match(&id, &body, etag).await,
            None => arm.put(&id, &body).await,
        }
        .map_err(|e| e.into_actuator(&format!("putting scale set {}", id.name)))?;
        if let Some(operation) = &accepted.operation {
            operations.record(&id, OperationType::Put, operation);
        }
        tracing::info!(scale_set = %id.name, capacity, revision = %revision, "scale set accepted by ARM");
        Ok(accepted.body)
    }
}

#[async_trait]
impl PoolActuator<AzureMachinePool, AzureCluster> for AzurePoolActuator {
    /// The scale set, its VMs and their revisions as ARM answered them.
    type ScaleSet = ScaleSetRecord;

    async fn exists(
        &self,
        scope: &PoolScope<AzureMachinePool, AzureCluster>,
    ) -> Result<Option<Found<ScaleSetRecord, ScaleSetReport>>, ActuatorError> {
        let ctx = self.context(scope, true).await?;
        ctx.check_provider_id(&ctx.scale_set_id())?;
        let operations = Operations::resume(ctx.cluster.arm.as_ref(), &ctx.recorded()).await;
        let Some(record) = Self::find(&ctx, operations).await? else {
            return Ok(None);
        };
        let reported = Self::report(&ctx, &record, None)?;
        Ok(Some(Found::with(reported, record)))
    }

    async fn create(
        &self,
        scope: &PoolScope<AzureMachinePool, AzureCluster>,
        bootstrap: &BootstrapData,
    ) -> Result<ScaleSetReport, ActuatorError> {
        // Bootstrap data Azure would refuse is said before any request.
        custom_data(bootstrap)?;
        let ctx = self.context(scope, true).await?;
        ctx.check_provider_id(&ctx.scale_set_id())?;
        // The recorded operations are polled once, for the lookup and for the PUT after it.
        let mut operations = Operations::resume(ctx.cluster.arm.as_ref(), &ctx.recorded()).await;
        if let Some(record) = Self::find(&ctx, operations.clone()).await? {
            return Self::report(&ctx, &record, None);
        }
        let capacity = scope.size.capacity.unwrap_or_else(|| {
            scope
                .machine_pool
                .spec
                .replicas
                .and_then(|r| u32::try_from(r).ok())
                .unwrap_or(1)
        });
        let scale_set = Self::put(
            &ctx,
            capacity,
            &scope.revision,
            bootstrap,
            None,
            &mut operations,
        )
        .await?;
        Self::report(
            &ctx,
            &ScaleSetRecord {
                scale_set,
                vms: Vec::new(),
                revisions: BTreeMap::new(),
                operations,
            },
            Some(&scope.revision),
        )
    }

    async fn update(
        &self,
        scope: &PoolScope<AzureMachinePool, AzureCluster>,
        found: Found<ScaleSetRecord, ScaleSetReport>,
        bootstrap: Option<BootstrapData>,
    ) -> Result<ScaleSetReport, ActuatorError> {
        let ctx = self.context(scope, true).await?;
        let mut record = found.instance;
        let id = ctx.scale_set_id();
        let busy = record.operations.in_flight(&id, OperationType::Put)
            || record.operations.in_flight(&id, OperationType::Delete)
            || provisioning_state(&record.scale_set).in_progress()
            || record.vms.iter().any(is_deleting);
        if busy {
            // ARM refuses a second operation on a scale set while one runs, and a PUT while
            // VMs are still leaving could count them and make new ones: looked at again once
            // it ends (also when its record was lost, by the VMs' own state).
            return Self::report(&ctx, &record, None);
        }
        // The named VMs first, in one removal that lowers the capacity with them.
        let leaving: Vec<String> = scope
            .size
            .remove
            .iter()
            .filter_map(|p| resource_of(p))
            .filter(|vm| vm.kind == ResourceType::VirtualMachine)
            .filter(|vm| {
                record.vms.iter().any(|v| {
                    v["name"]
                        .as_str()
                        .is_some_and(|n| n.eq_ignore_ascii_case(&vm.name))
                        && !is_deleting(v)
                })
            })
            .map(|vm| vm.name)
            .collect();
        if !leaving.is_empty() {
            let pending = ctx
                .cluster
                .arm
                .post(&id, "delete", &json!({ "instanceIds": leaving }))
                .await
                .map_err(|e| {
                    let what = format!("removing VMs from scale set {}", id.name);
                    if matches!(e.class(), crate::arm::ErrorClass::Invalid) {
                        // A VM named may have gone between the listing and the removal, which
                        // ARM refuses as a whole: listed again and retried, never frozen.
                        ActuatorError::transient_message("RemovalRefused", format!("{what}: {e}"))
                    } else {
                        e.into_actuator(&what)
                    }
                })?;
            if let Some(operation) = &pending {
                record
                    .operations
                    .record(&id, OperationType::Delete, operation);
            }
            tracing::info!(scale_set = %id.name, vms = ?leaving, "removing virtual machines");
            for vm in record.vms.iter_mut() {
                let named = vm["name"]
                    .as_str()
                    .is_some_and(|n| leaving.iter().any(|l| l.eq_ignore_ascii_case(n)));
                if let Some(properties) = vm
                    .get_mut("properties")
                    .and_then(Value::as_object_mut)
                    .filter(|_| named)
                {
                    properties.insert("provisioningState".into(), json!("Deleting"));
                }
            }
            let capacity = capacity_of(&record.scale_set)
                .saturating_sub(u32::try_from(leaving.len()).unwrap_or(u32::MAX));
            if let Some(sku) = record
                .scale_set
                .get_mut("sku")
                .and_then(Value::as_object_mut)
            {
                sku.insert("capacity".into(), json!(capacity));
            }
            return Self::report(&ctx, &record, None);
        }
        // The model and the capacity: put again when either differs. Without bootstrap data
        // (its Secret being replaced) nothing is put: the model would lose its customData.
        let Some(bootstrap) = bootstrap else {
            return Self::report(&ctx, &record, None);
        };
        let current = capacity_of(&record.scale_set);
        // Never lower by a PUT (Azure would pick the VMs): a smaller size waits for the loop to
        // name the VMs that go.
        let capacity = scope.size.capacity.map_or(current, |c| c.max(current));
        let tags = &record.scale_set["tags"];
        let stale = tags[REVISION_TAG].as_str() != Some(scope.revision.as_str())
            || tags[DATA_DIGEST_TAG].as_str() != Some(data_digest(&bootstrap).as_str())
            || !crate::resource::contains(
                tags,
                &json!(ctx.scale_set_tags(&scope.revision, &data_digest(&bootstrap))),
            )
            || provisioning_state(&record.scale_set).failed();
        if capacity != current || stale {
            let existing = record.scale_set.clone();
            record.scale_set = Self::put(
                &ctx,
                capacity,
                &scope.revision,
                &bootstrap,
                Some(&existing),
                &mut record.operations,
            )
            .await?;
            return Self::report(&ctx, &record, Some(&scope.revision));
        }
        Self::report(&ctx, &record, Some(&scope.revision))
    }

    async fn delete(
        &self,
        scope: &PoolScope<AzureMachinePool, AzureCluster>,
    ) -> Result<(), ActuatorError> {
        let ctx = self.context(scope, false).await?;
        let arm = ctx.cluster.arm.as_ref();
        let id = ctx.scale_set_id();
        let found = arm
            .get(&id)
            .await
            .map_err(|e| e.into_actuator("reading the scale set"))?;
        if let Some(scale_set) = &found {
            if !ctx.owns(&scale_set["tags"]) {
                tracing::warn!(scale_set = %id.name, "a scale set of this name is not the pool's; left alone");
                return Ok(());
            }
            return match remove(arm, Some(&ctx.cluster.naming), &id)
                .await
                .map_err(|e| e.into_actuator("deleting the scale set"))?
            {
                Removal::Refused(error) => Err(error.into_actuator("deleting the scale set")),
                Removal::Gone | Removal::Deleting => Err(ActuatorError::requeue_after(
                    POLL,
                    "DeletingScaleSet",
                    format!(
                        "waiting for scale set {} and its VMs to be deleted",
                        id.name
                    ),
                )),
            };
        }
        // The scale set is gone: VMs it left behind go one by one, with their NICs and disks.
        let left = arm
            .list(
                &ctx.group_id(),
                ResourceType::VirtualMachine,
                Some(ctx.members_filter()),
            )
            .await
            .map_err(|e| e.into_actuator("listing the scale set's virtual machines"))?;
        if left.is_empty() {
            tracing::info!(scale_set = %id.name, "scale set and its virtual machines deleted");
            return Ok(());
        }
        for vm in &left {
            let Some(name) = vm["name"].as_str() else {
                continue;
            };
            let vm_id = ctx.vm_id(name);
            if let Removal::Refused(error) = remove(arm, None, &vm_id)
                .await
                .map_err(|e| e.into_actuator("deleting a virtual machine"))?
            {
                return Err(error.into_actuator(&format!("deleting virtual machine {name}")));
            }
        }
        Err(ActuatorError::requeue_after(
            POLL,
            "DeletingVirtualMachines",
            format!(
                "waiting for {} virtual machines of scale set {} to be deleted",
                left.len(),
                id.name
            ),
        ))
    }
}

#[cfg(test)]
mod tests;
