//! The decision of one reconcile of an infrastructure machine pool, given what was observed.
//!
//! [`decide`] talks to the cloud (through the actuator) but never to the API server: it returns a
//! [`Plan`] that [`super::record`] writes — the pool's contract fields, and the machines that
//! stand for its instances.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{Cluster, Machine, MachinePool};
use capi_core::condition::{self, ConditionStatus};
use capi_core::infra::{InfraCluster, InfraMachinePool};
use capi_core::{
    ActuatorError, IdempotencyKey, InstanceState, PoolActuator, PoolScope, PoolSize,
    ScaleSetReport, labels,
};
use kube::ResourceExt;

use super::members::{self, MemberPlan};
use super::rollout;
use crate::bootstrap_data::BootstrapLookup;
use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::reasons;

/// The finalizer the loop puts on infrastructure machine pools before creating anything.
pub const INFRA_MACHINE_POOL_FINALIZER: &str = "infrastructure.cluster.x-k8s.io/machine-pool";

/// The condition saying whether the scale set holds as many running instances as the pool asks
/// for (reasons `ScalingUp`, `ScalingDown`, `InstanceProvisioning`, `InstanceFailed`).
pub const SCALE_SET_REPLICAS: &str = "ScaleSetReplicas";

/// The condition saying whether every instance is of the pool's current model (reason
/// `RollingOut` while they are being replaced).
pub const SCALE_SET_MODEL: &str = "ScaleSetModel";

/// Everything observed for one pool reconcile.
pub(crate) struct Snapshot<P: InfraMachinePool, C> {
    pub(crate) infra: Arc<P>,
    /// The UID of the owning `MachinePool`, from the owner reference.
    pub(crate) owner_uid: Option<String>,
    pub(crate) machine_pool: Option<Arc<MachinePool>>,
    pub(crate) cluster: Option<Arc<Cluster>>,
    pub(crate) infra_cluster: Option<Arc<C>>,
    pub(crate) bootstrap: BootstrapLookup,
    /// The machines standing for the pool's instances, by name.
    pub(crate) members: Vec<Arc<P::Machine>>,
    /// The `Machine` of each member, by the member's name.
    pub(crate) machines: BTreeMap<String, Arc<Machine>>,
    /// The `Machine`s of the pool whose machine is gone, by name.
    pub(crate) stray_machines: Vec<String>,
    /// When the snapshot was taken.
    pub(crate) now: jiff::Timestamp,
    /// The generation at which an invalid configuration was last reported, if any.
    pub(crate) invalid_at_generation: Option<i64>,
}

/// What a pool reconcile records besides conditions.
#[derive(Debug)]
pub(crate) struct PoolRecord<M> {
    /// The scale set as last reported: `spec.providerID`, provisioned, and the provider's
    /// status fields.
    pub(crate) report: Option<ScaleSetReport>,
    /// `spec.providerIDList` (and `status.replicas`, its length), sorted.
    pub(crate) provider_ids: Vec<String>,
    /// Record the idempotency key on the pool (with the finalizer, before anything is created),
    /// where none is.
    pub(crate) idempotency_key: Option<IdempotencyKey>,
    /// What happens to the machines standing for the instances.
    pub(crate) members: MemberPlan<M>,
}

impl<M> Default for PoolRecord<M> {
    fn default() -> Self {
        Self {
            report: None,
            provider_ids: Vec::new(),
            idempotency_key: None,
            members: MemberPlan::default(),
        }
    }
}

/// What one pool reconcile decided.
pub(crate) type Plan<M> = capi_runtime::plan::Plan<PoolRecord<M>>;

/// Decides one pool reconcile. Calls the actuator as the contract allows and nothing else.
pub(crate) async fn decide<P, C, A>(
    actuator: &A,
    snapshot: Snapshot<P, C>,
    poll: Duration,
) -> Plan<P::Machine>
where
    P: InfraMachinePool,
    C: InfraCluster,
    A: PoolActuator<P, C> + ?Sized,
{
    let infra = Arc::clone(&snapshot.infra);
    let generation = infra.meta().generation;
    let mut plan = Plan::new(generation);

    let paused = labels::has_paused_annotation(infra.meta())
        || snapshot.cluster.as_ref().is_some_and(|c| c.is_paused());
    if plan.paused(paused) {
        return plan;
    }
    let has_finalizer = infra
        .finalizers()
        .iter()
        .any(|f| f == INFRA_MACHINE_POOL_FINALIZER);
    if infra.meta().deletion_timestamp.is_some() {
        return decide_deletion(actuator, snapshot, plan, has_finalizer, poll).await;
    }

    let Some(pool) = snapshot.machine_pool.clone() else {
        let next = if snapshot.owner_uid.is_some() {
            Next::Requeue(poll)
        } else {
            Next::AwaitChange
        };
        return plan.not_ready(
            reasons::WAITING_FOR_OWNER,
            "waiting for a MachinePool to own this object",
            next,
        );
    };
    let Some(cluster) = snapshot.cluster.clone() else {
        return plan.not_ready(
            reasons::WAITING_FOR_CLUSTER,
            format!("waiting for Cluster {:?}", pool.spec.cluster_name),
            Next::Requeue(poll),
        );
    };
    if !has_finalizer {
        // Persisted before anything is created, with the key that names the scale set for
        // good (see the machine loop: the same reasons).
        let Ok(key) = IdempotencyKey::for_machine_pool(&pool) else {
            return plan.not_ready(
                reasons::WAITING_FOR_OWNER,
                "the owning MachinePool has no UID yet",
                Next::Requeue(poll),
            );
        };
        plan.finalizer = FinalizerChange::Add;
        plan.record.idempotency_key = Some(key);
        plan.conditions.clear();
        return plan;
    }
    if !cluster.infrastructure_provisioned() {
        return plan.not_ready(
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            "waiting for the cluster infrastructure to be provisioned",
            Next::AwaitChange,
        );
    }
    let Some(infra_cluster) = snapshot.infra_cluster.clone() else {
        return plan.not_ready(
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            format!(
                "waiting for the {} of Cluster {:?}",
                C::kind(&()),
                pool.spec.cluster_name
            ),
            Next::Requeue(poll),
        );
    };
    if snapshot.invalid_at_generation.is_some() && snapshot.invalid_at_generation == generation {
        plan.conditions.clear();
        plan.next = Next::InvalidConfiguration;
        return plan;
    }
    let idempotency_key = match IdempotencyKey::recorded(infra.meta()) {
        Ok(Some(key)) => key,
        Ok(None) => {
            let Ok(key) = IdempotencyKey::for_machine_pool(&pool) else {
                return plan.not_ready(
                    reasons::WAITING_FOR_OWNER,
                    "the owning MachinePool has no UID yet",
                    Next::Requeue(poll),
                );
            };
            plan.record.idempotency_key = Some(key.clone());
            key
        }
        Err(malformed) => {
            return plan.actuator_error(ActuatorError::invalid_configuration(
                reasons::INVALID_IDEMPOTENCY_KEY,
                malformed.to_string(),
            ));
        }
    };

    let Ok(desired) = u32::try_from(pool.desired_replicas()) else {
        return plan.actuator_error(ActuatorError::invalid_configuration(
            reasons::INVALID_SPEC,
            format!(
                "MachinePool {:?} asks for {} replicas; set spec.replicas to 0 or more",
                pool.name_any(),
                pool.desired_replicas()
            ),
        ));
    };
    let member_kind = <P::Machine as kube::Resource>::api_version(&());
    if member_kind != P::api_version(&()) {
        // Upstream's MachinePool controller lists the machines of a pool in the pool's own
        // group and version: any other would never get their Machines.
        return plan.actuator_error(ActuatorError::invalid_configuration(
            reasons::INVALID_SPEC,
            format!(
                "the machines of {} are {} objects, which upstream's MachinePool controller \
                 does not list: a provider's machine kind must be of its pool kind's group and \
                 version ({})",
                P::kind(&()),
                member_kind,
                P::api_version(&())
            ),
        ));
    }
    let revision = super::revision::of(infra.as_ref(), &pool);
    let autoscaled = labels::replicas_managed_externally(&pool.metadata);
    let (bootstrap, waiting_for_bootstrap) = match snapshot.bootstrap {
        BootstrapLookup::Ready(data) => (Some(data), None),
        BootstrapLookup::NotSet => (
            None,
            Some((
                reasons::WAITING_FOR_BOOTSTRAP_DATA,
                "waiting for the bootstrap provider to set spec.template.spec.bootstrap.\
                 dataSecretName on the MachinePool"
                    .to_string(),
            )),
        ),
        BootstrapLookup::SecretMissing(name) => (
            None,
            Some((
                reasons::WAITING_FOR_BOOTSTRAP_DATA,
                format!("waiting for bootstrap Secret {name:?}"),
            )),
        ),
        BootstrapLookup::Invalid(message) => {
            (None, Some((reasons::BOOTSTRAP_DATA_INVALID, message)))
        }
    };
    let mut scope = PoolScope {
        cluster,
        infra_cluster: Some(infra_cluster),
        machine_pool: pool,
        infra_pool: Arc::clone(&infra),
        idempotency_key,
        size: PoolSize::default(),
        revision,
    };
    let observed = members::Observed {
        members: &snapshot.members,
        machines: &snapshot.machines,
        strays: &snapshot.stray_machines,
        now: snapshot.now,
    };

    let found = match actuator.exists(&scope).await {
        Ok(found) => found,
        Err(error) => return plan.actuator_error(error),
    };
    let mut release = Vec::new();
    let mut seen_before = std::collections::BTreeSet::new();
    let model_waits = bootstrap.is_none();
    let report = match found {
        None => {
            let Some(bootstrap) = bootstrap else {
                let (reason, message) = waiting_for_bootstrap.unwrap_or_default();
                return plan.not_ready(reason, message, Next::Requeue(poll));
            };
            // A new scale set starts at the pool's size, also when an autoscaler sets it later.
            scope.size.capacity = Some(desired);
            match actuator.create(&scope, &bootstrap).await {
                Err(error) => return plan.actuator_error(error),
                Ok(report) => {
                    plan.event(
                        false,
                        reasons::SCALE_SET_CREATED,
                        format!("created scale set {}", report.provider_id),
                    );
                    report
                }
            }
        }
        Some(found) => {
            // While the model cannot change (no bootstrap data), nothing is rolled: a surge
            // would launch the old model again.
            let view = members::view(&observed, &found.reported, &scope.revision, !model_waits);
            scope.size.remove = members::removable(&observed, &found.reported);
            let step = rollout::step(
                (!autoscaled).then_some(desired),
                infra.rollout(),
                &view,
                found.reported.capacity,
                scope.size.remove.len(),
            );
            scope.size.capacity = step.capacity;
            release = step.release;
            seen_before = found
                .reported
                .provider_ids()
                .into_iter()
                .map(str::to_string)
                .collect();
            let seen = found.reported.clone();
            match actuator.update(&scope, found, bootstrap).await {
                Ok(report) => report,
                Err(error) => {
                    // What exists saw is recorded: a failed update must not leave the provider
                    // ID list stale.
                    record_scale_set(&mut plan, &scope, &observed, &seen, &seen_before, &release);
                    plan.record.report = Some(seen);
                    return plan.actuator_error(error);
                }
            }
        }
    };

    record_scale_set(
        &mut plan,
        &scope,
        &observed,
        &report,
        &seen_before,
        &release,
    );
    for wanted in &report.conditions {
        if wanted.type_ != condition::READY {
            plan.provider_condition(wanted.clone());
        }
    }
    // `Ready` says the scale set exists and answers: a pool that is scaling or rolling is not an
    // unready one (upstream mirrors `Ready` into the MachinePool's `InfrastructureReady`).
    plan.condition(
        condition::READY,
        ConditionStatus::True,
        reasons::SCALE_SET_READY,
        "",
    );
    let progress = progress(&report, &scope, desired, autoscaled);
    let mut settled = progress
        .iter()
        .all(|(_, status, _, _)| *status == ConditionStatus::True)
        && !plan.record.members.waiting;
    for (type_, status, reason, message) in progress {
        plan.condition(type_, status, reason, message);
    }
    if let Some((reason, message)) = waiting_for_bootstrap.filter(|_| model_waits) {
        // The size and removals are done; the model waits for the data.
        plan.condition(SCALE_SET_MODEL, ConditionStatus::False, reason, message);
        settled = false;
    }
    // Until the instances settle the pool is looked at again: a list recorded once and never
    // again is upstream's "stuck in ScalingUp".
    plan.next = if settled {
        Next::Resync
    } else {
        Next::Requeue(poll)
    };
    plan.record.report = Some(report);
    plan
}

/// Records what the scale set holds: the provider ID list (the instances, and the machines of
/// instances not listed but not released either — a listing that lags must not make upstream
/// delete their nodes), and what happens to the machines of the instances.
fn record_scale_set<P: InfraMachinePool, C>(
    plan: &mut Plan<P::Machine>,
    scope: &PoolScope<P, C>,
    observed: &members::Observed<'_, P::Machine>,
    report: &ScaleSetReport,
    seen_before: &std::collections::BTreeSet<String>,
    release: &[String],
) {
    plan.record.members = members::plan(scope, observed, report, seen_before, release);
    plan.record.provider_ids = members::provider_ids(observed, report, &plan.record.members);
    if !plan.record.members.delete_machines.is_empty() {
        plan.event(
            false,
            reasons::MACHINE_DELETED,
            format!(
                "deleting Machines {}: their nodes are drained, then their instances leave the \
                 scale set",
                plan.record.members.delete_machines.join(", ")
            ),
        );
    }
}

/// The pool's progress conditions: [`SCALE_SET_REPLICAS`] (as many running instances as asked)
/// and [`SCALE_SET_MODEL`] (every instance of the current model; always true for a pool whose
/// size an autoscaler sets, which the loop does not roll).
fn progress<P, C>(
    report: &ScaleSetReport,
    scope: &PoolScope<P, C>,
    desired: u32,
    autoscaled: bool,
) -> [(&'static str, ConditionStatus, &'static str, String); 2] {
    let staying = report.instances.iter().filter(|i| !i.leaving);
    let count = u32::try_from(staying.count()).unwrap_or(u32::MAX);
    let leaving = report.instances.iter().filter(|i| i.leaving).count();
    let target = if autoscaled { report.capacity } else { desired };
    let failed: Vec<&str> = report
        .instances
        .iter()
        .filter(|i| matches!(i.state, InstanceState::Failed { .. }))
        .map(|i| i.provider_id.as_str())
        .collect();
    let provisioning = report
        .instances
        .iter()
        .filter(|i| i.state == InstanceState::Provisioning)
        .count();
    let replicas = if !failed.is_empty() {
        (
            ConditionStatus::False,
            reasons::INSTANCE_FAILED,
            format!("instances {} failed; they are replaced", failed.join(", ")),
        )
    } else if count < target {
        (
            ConditionStatus::False,
            reasons::SCALING_UP,
            format!("{count} of {target} instances"),
        )
    } else if count > target || leaving > 0 {
        (
            ConditionStatus::False,
            reasons::SCALING_DOWN,
            format!("{count} instances and {leaving} leaving, {target} asked for"),
        )
    } else if report.capacity > count {
        (
            ConditionStatus::False,
            reasons::SCALING_UP,
            format!(
                "the cloud is launching {} more instances (capacity {})",
                report.capacity - count,
                report.capacity
            ),
        )
    } else if provisioning > 0 {
        (
            ConditionStatus::False,
            reasons::INSTANCE_PROVISIONING,
            format!("{provisioning} of {count} instances are being provisioned"),
        )
    } else {
        (
            ConditionStatus::True,
            reasons::SCALE_SET_READY,
            String::new(),
        )
    };
    let outdated = report
        .instances
        .iter()
        .filter(|i| !i.leaving && !i.is_up_to_date(&scope.revision))
        .count();
    let model = if outdated == 0 || autoscaled {
        (ConditionStatus::True, reasons::UP_TO_DATE, String::new())
    } else {
        (
            ConditionStatus::False,
            reasons::ROLLING_OUT,
            format!(
                "{outdated} of {count} instances are not of the current model {}",
                scope.revision
            ),
        )
    };
    [
        (SCALE_SET_REPLICAS, replicas.0, replicas.1, replicas.2),
        (SCALE_SET_MODEL, model.0, model.1, model.2),
    ]
}

async fn decide_deletion<P, C, A>(
    actuator: &A,
    snapshot: Snapshot<P, C>,
    mut plan: Plan<P::Machine>,
    has_finalizer: bool,
    poll: Duration,
) -> Plan<P::Machine>
where
    P: InfraMachinePool,
    C: InfraCluster,
    A: PoolActuator<P, C> + ?Sized,
{
    if !has_finalizer {
        return plan;
    }
    let recorded = match IdempotencyKey::recorded(snapshot.infra.meta()) {
        Ok(recorded) => recorded,
        Err(malformed) => {
            return plan.deletion_error(ActuatorError::invalid_configuration(
                reasons::INVALID_IDEMPOTENCY_KEY,
                malformed.to_string(),
            ));
        }
    };
    let key = recorded.or_else(|| {
        snapshot
            .owner_uid
            .as_deref()
            .and_then(IdempotencyKey::from_owner_uid)
    });
    if let Some(idempotency_key) = key {
        let machine_pool = snapshot.machine_pool.clone().unwrap_or_else(|| {
            let mut stand_in = MachinePool::default();
            stand_in.metadata.uid = snapshot.owner_uid.clone();
            stand_in.spec.cluster_name = labels::cluster_name(snapshot.infra.meta())
                .unwrap_or_default()
                .to_string();
            Arc::new(stand_in)
        });
        let revision = super::revision::of(snapshot.infra.as_ref(), &machine_pool);
        let scope = PoolScope {
            cluster: snapshot.cluster.clone().unwrap_or_default(),
            infra_cluster: snapshot.infra_cluster.clone(),
            machine_pool,
            infra_pool: Arc::clone(&snapshot.infra),
            idempotency_key,
            size: PoolSize::default(),
            revision,
        };
        if let Err(error) = actuator.delete(&scope).await {
            return plan.deletion_error(error);
        }
        plan.event(
            false,
            reasons::SCALE_SET_DELETED,
            "deleted the scale set, its instances and everything it owned",
        );
    }
    // No key: no owner ever, so nothing was created. Either way the instances are gone: the
    // machines standing for them go too, and no longer wait for the loop — none is made again,
    // and no Machine is left waiting on one.
    plan.record.members = members::release_all(&snapshot.members, &snapshot.machines);
    if snapshot.members.is_empty() {
        plan.finalizer = FinalizerChange::Remove;
    } else {
        // The pool's finalizer goes once the API server lists no machine of it (the list is
        // read from the API server during deletion): one made by the pass before, not in the
        // watch yet, would otherwise keep its finalizer with nobody left to remove it.
        plan.next = Next::Requeue(poll);
    }
    plan
}
