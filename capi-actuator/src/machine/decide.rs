//! The decision of one reconcile of an infrastructure machine, given what was observed.
//!
//! [`decide`] talks to the cloud (through the actuator) but never to the API server: it returns a
//! [`Plan`] that [`super::record`] writes. That keeps every branch of the loop testable with a mock
//! actuator and no API server, and makes the order of writes explicit (provider ID first).

use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{Cluster, Machine, MachineAddress};
use capi_core::condition::{self, ConditionStatus};
use capi_core::infra::{InfraCluster, InfraMachine};
use capi_core::{
    Actuator, ActuatorError, BootstrapData, IdempotencyKey, InstanceState, MachineInstance,
    MachineScope, ProviderStatus, labels,
};
use kube::ResourceExt;

use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::reasons;

/// The finalizer the loop puts on infrastructure machines before creating anything.
pub const INFRA_MACHINE_FINALIZER: &str = "infrastructure.cluster.x-k8s.io/machine";

pub(crate) use crate::bootstrap_data::BootstrapLookup;

/// Everything observed for one reconcile.
#[derive(Debug)]
pub(crate) struct Snapshot<M, C> {
    pub(crate) infra: Arc<M>,
    /// The UID of the owning `Machine`, from the owner reference.
    pub(crate) owner_uid: Option<String>,
    pub(crate) machine: Option<Arc<Machine>>,
    pub(crate) cluster: Option<Arc<Cluster>>,
    /// The provider's cluster object of the machine's cluster.
    pub(crate) infra_cluster: Option<Arc<C>>,
    pub(crate) bootstrap: BootstrapLookup,
    /// The generation at which an invalid configuration was last reported, if any.
    pub(crate) invalid_at_generation: Option<i64>,
}

/// What a machine reconcile records besides conditions.
#[derive(Debug, Default)]
pub(crate) struct MachineRecord {
    /// Record `spec.providerID` (first, before anything else).
    pub(crate) provider_id: Option<String>,
    pub(crate) addresses: Option<Vec<MachineAddress>>,
    pub(crate) failure_domain: Option<String>,
    pub(crate) provider_status: ProviderStatus,
    pub(crate) provisioned: bool,
    /// Record the idempotency key on the object (with the finalizer, before anything is
    /// created), where none is.
    pub(crate) idempotency_key: Option<IdempotencyKey>,
}

/// What one machine reconcile decided.
pub(crate) type Plan = capi_runtime::plan::Plan<MachineRecord>;

/// `plan` with what the cloud reported about the instance recorded.
fn with_instance(mut plan: Plan, instance: MachineInstance, policy_poll: Duration) -> Plan {
    plan.record.provider_id = Some(instance.provider_id.clone());
    plan.record.addresses = Some(instance.addresses);
    plan.record.failure_domain = instance.failure_domain;
    plan.record.provider_status = instance.provider_status;
    // The provider's own conditions first: `Ready` is the loop's, set below.
    for wanted in instance.conditions {
        if wanted.type_ != condition::READY {
            plan.provider_condition(wanted);
        }
    }
    match instance.state {
        InstanceState::Provisioning => plan.not_ready(
            reasons::INSTANCE_PROVISIONING,
            format!("instance {} is being provisioned", instance.provider_id),
            Next::Requeue(policy_poll),
        ),
        InstanceState::Running => {
            plan.record.provisioned = true;
            plan.condition(
                condition::READY,
                ConditionStatus::True,
                reasons::INSTANCE_RUNNING,
                "",
            );
            plan.next = Next::Resync;
            plan
        }
        InstanceState::Failed { reason, message } => {
            plan.event(
                true,
                reasons::INSTANCE_FAILED,
                format!("instance {}: {message}", instance.provider_id),
            );
            // Condition reasons are cleaned when set; an empty one says only that it failed.
            let reason = if reason.trim().is_empty() {
                reasons::INSTANCE_FAILED.to_string()
            } else {
                reason
            };
            plan.not_ready(&reason, message, Next::Resync)
        }
    }
}

/// What one reconcile of an infrastructure machine decided, as [`decide_once`] reports it.
#[derive(Debug)]
pub struct Decision {
    /// The conditions the loop would set, in order (a later one of the same type wins).
    pub conditions: Vec<condition::DesiredCondition>,
    /// The provider ID the loop would record in `spec.providerID`.
    pub provider_id: Option<String>,
    /// Whether the loop would record the machine as provisioned.
    pub provisioned: bool,
    /// Whether this pass only adds the loop's finalizer (nothing is created before it is stored).
    pub adds_finalizer: bool,
    /// The reasons of the events the loop would publish.
    pub events: Vec<&'static str>,
}

/// The objects one reconcile of an infrastructure machine reads, for [`decide_once`].
#[derive(Debug)]
pub struct Observed<M, C> {
    /// The provider's machine object.
    pub infra_machine: M,
    /// The provider's cluster object of the machine's cluster (`None`: not there, or gone).
    pub infra_cluster: Option<C>,
    /// The owner `Machine`.
    pub machine: Machine,
    /// The machine's `Cluster`.
    pub cluster: Cluster,
    /// The decoded bootstrap data (`None`: the Machine names no data Secret yet).
    pub bootstrap: Option<BootstrapData>,
}

/// Takes the decision one reconcile would take for `observed`: the same branch, the same calls to
/// `actuator`, but nothing is read from or written to an API server. For unit tests of an
/// actuator through the loop and for benchmarks of the decision itself.
///
/// ```no_run
/// use capi_actuator::machine::{Observed, decide_once};
/// use capi_core::api::{Cluster, Machine};
/// use capi_core::Actuator;
/// use capi_core::infra::{InfraCluster, InfraMachine};
///
/// async fn check<M: InfraMachine, C: InfraCluster>(
///     actuator: &impl Actuator<M, C>,
///     infra_machine: M,
///     infra_cluster: C,
///     machine: Machine,
///     cluster: Cluster,
/// ) {
///     let infra_cluster = Some(infra_cluster);
///     let observed =
///         Observed { infra_machine, infra_cluster, machine, cluster, bootstrap: None };
///     let decision = decide_once(actuator, observed).await;
///     assert!(decision.provider_id.is_none()); // nothing is created without bootstrap data
/// }
/// ```
pub async fn decide_once<M, C, A>(actuator: &A, observed: Observed<M, C>) -> Decision
where
    M: InfraMachine,
    C: InfraCluster,
    A: Actuator<M, C> + ?Sized,
{
    let Observed {
        infra_machine,
        infra_cluster,
        machine,
        cluster,
        bootstrap,
    } = observed;
    let snapshot = Snapshot {
        infra: Arc::new(infra_machine),
        owner_uid: machine.metadata.uid.clone(),
        machine: Some(Arc::new(machine)),
        cluster: Some(Arc::new(cluster)),
        infra_cluster: infra_cluster.map(Arc::new),
        bootstrap: bootstrap.map_or(BootstrapLookup::NotSet, BootstrapLookup::Ready),
        invalid_at_generation: None,
    };
    let plan = decide(actuator, snapshot, Duration::from_secs(5)).await;
    Decision {
        adds_finalizer: plan.finalizer == FinalizerChange::Add,
        events: plan.events.iter().map(|e| e.reason).collect(),
        provider_id: plan.record.provider_id,
        provisioned: plan.record.provisioned,
        conditions: plan.conditions,
    }
}

/// Decides one reconcile. Calls the actuator as the contract allows and nothing else.
pub(crate) async fn decide<M, C, A>(actuator: &A, snapshot: Snapshot<M, C>, poll: Duration) -> Plan
where
    M: InfraMachine,
    C: InfraCluster,
    A: Actuator<M, C> + ?Sized,
{
    let infra = Arc::clone(&snapshot.infra);
    let generation = infra.meta().generation;
    let mut plan = Plan::new(generation);
    let of_a_pool = infra.labels().contains_key(labels::MACHINE_POOL_NAME)
        && infra
            .owner_references()
            .iter()
            .any(|r| r.kind.ends_with("MachinePool") && r.api_version == M::api_version(&()));
    if of_a_pool {
        // A machine standing for an instance of a pool (labelled with the pool's name and owned
        // by a pool of its own group): the pool loop makes, records and removes it
        // (`crate::pool`); nothing is created for it here, and nothing written.
        return plan;
    }

    let paused = labels::has_paused_annotation(infra.meta())
        || snapshot.cluster.as_ref().is_some_and(|c| c.is_paused());
    if plan.paused(paused) {
        return plan;
    }

    let has_finalizer = infra
        .finalizers()
        .iter()
        .any(|f| f == INFRA_MACHINE_FINALIZER);
    if infra.meta().deletion_timestamp.is_some() {
        return decide_deletion(actuator, snapshot, plan, has_finalizer).await;
    }

    let Some(machine) = snapshot.machine.clone() else {
        let next = if snapshot.owner_uid.is_some() {
            Next::Requeue(poll)
        } else {
            Next::AwaitChange
        };
        return plan.not_ready(
            reasons::WAITING_FOR_OWNER,
            "waiting for a Machine to own this object",
            next,
        );
    };
    let Some(cluster) = snapshot.cluster.clone() else {
        return plan.not_ready(
            reasons::WAITING_FOR_CLUSTER,
            format!("waiting for Cluster {:?}", machine.spec.cluster_name),
            Next::Requeue(poll),
        );
    };
    if !has_finalizer {
        // Persisted before anything is created, so that a deletion can never skip the cloud.
        // Only the finalizer: the pass its write triggers writes the status, once, with all it
        // finds (a `Paused`-only status now would be a write for nothing).
        // The idempotency key with it: recorded before any instance exists, it names the
        // instance for good, whatever UID a move gives the Machine later. Whatever the
        // annotation held before (copied from a template or another object) is replaced: no
        // instance can have been created under it by this object yet.
        let Ok(key) = IdempotencyKey::for_machine(&machine) else {
            return plan.not_ready(
                reasons::WAITING_FOR_OWNER,
                "the owning Machine has no UID yet",
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
        if let Some(other) = cluster
            .spec
            .infrastructure_ref
            .as_ref()
            .filter(|r| r.kind != C::kind(&()) || r.api_group != C::group(&()))
        {
            return plan.not_ready(
                reasons::INVALID_CONFIGURATION,
                format!(
                    "Cluster {:?} names {} {:?} (group {:?}) as its infrastructure, not a {}: \
                     this machine cannot belong to it",
                    machine.spec.cluster_name,
                    other.kind,
                    other.name,
                    other.api_group,
                    C::kind(&())
                ),
                Next::AwaitChange,
            );
        }
        return plan.not_ready(
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            format!(
                "waiting for the {} of Cluster {:?}",
                C::kind(&()),
                machine.spec.cluster_name
            ),
            Next::Requeue(poll),
        );
    };
    if snapshot.invalid_at_generation.is_some() && snapshot.invalid_at_generation == generation {
        // Already reported at this generation, recently: the condition stays as it is, and the
        // cloud is asked again when the memo expires (RetryPolicy::invalid_retry).
        plan.conditions.clear();
        plan.next = Next::InvalidConfiguration;
        return plan;
    }
    let idempotency_key = match IdempotencyKey::recorded(infra.meta()) {
        Ok(Some(key)) => key,
        // An object from before keys were recorded gets its key now: the one its instance was
        // created under, derived from the same Machine.
        Ok(None) => {
            let Ok(key) = IdempotencyKey::for_machine(&machine) else {
                return plan.not_ready(
                    reasons::WAITING_FOR_OWNER,
                    "the owning Machine has no UID yet",
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

    let recorded_provider_id = infra.provider_id().map(str::to_string);
    let bootstrap = match snapshot.bootstrap {
        BootstrapLookup::Ready(data) => Some(data),
        // An instance that exists needs no bootstrap data.
        _ if recorded_provider_id.is_some() => None,
        BootstrapLookup::NotSet => {
            return plan.not_ready(
                reasons::WAITING_FOR_BOOTSTRAP_DATA,
                "waiting for the bootstrap provider to set spec.bootstrap.dataSecretName on the Machine",
                Next::AwaitChange,
            );
        }
        BootstrapLookup::SecretMissing(name) => {
            return plan.not_ready(
                reasons::WAITING_FOR_BOOTSTRAP_DATA,
                format!("waiting for bootstrap Secret {name:?}"),
                Next::Requeue(poll),
            );
        }
        BootstrapLookup::Invalid(message) => {
            return plan.not_ready(reasons::BOOTSTRAP_DATA_INVALID, message, Next::AwaitChange);
        }
    };
    let scope = MachineScope {
        cluster,
        infra_cluster: Some(infra_cluster),
        machine,
        infra_machine: infra,
        idempotency_key,
    };

    match actuator.exists(&scope).await {
        Err(error) => plan.actuator_error(error),
        Ok(Some(found)) => match actuator.update(&scope, found).await {
            Err(error) => plan.actuator_error(error),
            Ok(outcome) => {
                if outcome.immutable_changes.is_empty() {
                    plan.condition(
                        condition::UP_TO_DATE,
                        ConditionStatus::True,
                        reasons::UP_TO_DATE,
                        "",
                    );
                } else {
                    let fields: Vec<String> = outcome
                        .immutable_changes
                        .iter()
                        .map(|c| format!("{} ({} → {})", c.field, c.current, c.desired))
                        .collect();
                    let message = format!(
                        "immutable fields differ from the instance: {}; replace the machine to apply them",
                        fields.join(", ")
                    );
                    plan.condition(
                        condition::UP_TO_DATE,
                        ConditionStatus::False,
                        reasons::IMMUTABLE_FIELDS_CHANGED,
                        message,
                    );
                }
                with_instance(plan, outcome.instance, poll)
            }
        },
        Ok(None) if recorded_provider_id.is_some() => {
            // Never answered with a second instance: the machine must be replaced, not repaired.
            let id = recorded_provider_id.unwrap_or_default();
            plan.event(
                true,
                reasons::INSTANCE_NOT_FOUND,
                format!("instance {id} no longer exists in the cloud"),
            );
            plan.not_ready(
                reasons::INSTANCE_NOT_FOUND,
                format!(
                    "instance {id} no longer exists in the cloud; delete the Machine to replace it"
                ),
                Next::Resync,
            )
        }
        Ok(None) => match bootstrap {
            None => plan.not_ready(
                reasons::WAITING_FOR_BOOTSTRAP_DATA,
                "waiting for bootstrap data before creating the instance",
                Next::AwaitChange,
            ),
            Some(bootstrap) => create(actuator, &scope, &bootstrap, plan, poll).await,
        },
    }
}

/// Creates the instance: `exists` found none and the bootstrap data is there.
async fn create<M, C, A>(
    actuator: &A,
    scope: &MachineScope<M, C>,
    bootstrap: &BootstrapData,
    mut plan: Plan,
    poll: Duration,
) -> Plan
where
    M: Send + Sync + 'static,
    C: Send + Sync + 'static,
    A: Actuator<M, C> + ?Sized,
{
    match actuator.create(scope, bootstrap).await {
        Err(error) => plan.actuator_error(error),
        Ok(instance) => {
            plan.event(
                false,
                reasons::INSTANCE_CREATED,
                format!("created instance {}", instance.provider_id),
            );
            // Made from this spec just now: up to date by construction (said now, not by
            // another status write on the next pass).
            plan.condition(
                condition::UP_TO_DATE,
                ConditionStatus::True,
                reasons::UP_TO_DATE,
                "",
            );
            with_instance(plan, instance, poll)
        }
    }
}

async fn decide_deletion<M, C, A>(
    actuator: &A,
    snapshot: Snapshot<M, C>,
    mut plan: Plan,
    has_finalizer: bool,
) -> Plan
where
    M: InfraMachine,
    C: InfraCluster,
    A: Actuator<M, C> + ?Sized,
{
    if !has_finalizer {
        return plan;
    }
    // Creation needs an owner, whose UID is the idempotency key unless one is recorded: no
    // owner, nothing was created.
    let recorded = match IdempotencyKey::recorded(snapshot.infra.meta()) {
        Ok(recorded) => recorded,
        // Deleting under another key could leave the instance behind: the finalizer stays
        // until the annotation holds a key again.
        Err(malformed) => {
            return plan.deletion_error(ActuatorError::invalid_configuration(
                reasons::INVALID_IDEMPOTENCY_KEY,
                malformed.to_string(),
            ));
        }
    };
    let Some(idempotency_key) = recorded.or_else(|| {
        snapshot
            .owner_uid
            .as_deref()
            .and_then(IdempotencyKey::from_owner_uid)
    }) else {
        plan.finalizer = FinalizerChange::Remove;
        return plan;
    };
    // The owners may already be gone; the actuator then sees empty stand-ins (documented on
    // `MachineScope`), and must delete by provider ID or idempotency key.
    let machine = snapshot.machine.unwrap_or_else(|| {
        let mut stand_in = Machine::default();
        stand_in.metadata.uid = snapshot.owner_uid.clone();
        Arc::new(stand_in)
    });
    let cluster = snapshot.cluster.unwrap_or_default();
    // Without its provider's cluster object (already gone), `delete` is called all the same: a
    // provider that needs it says so (`MachineScope::infra_cluster`), one that does not deletes.
    let scope = MachineScope {
        cluster,
        infra_cluster: snapshot.infra_cluster,
        machine,
        infra_machine: snapshot.infra,
        idempotency_key,
    };
    match actuator.delete(&scope).await {
        Ok(()) => {
            plan.finalizer = FinalizerChange::Remove;
            plan.event(
                false,
                reasons::INSTANCE_DELETED,
                "deleted the instance and everything it owned",
            );
            plan
        }
        Err(error) => plan.deletion_error(error),
    }
}
