//! The machines that stand for a pool's instances ("MachinePool Machines"): one object of the
//! provider's machine kind per instance, owned by the pool and labelled with its names, for which
//! the `MachinePool` controller makes a `Machine`.
//!
//! Their lifecycle, in an order that strands no `Machine` and drains every node:
//! - an instance without a machine gets one, with the loop's finalizer, as long as the pool is
//!   not being deleted (a machine made for an instance of a pool being deleted would wait for
//!   ever);
//! - the loop releases an instance the cloud lists only through its `Machine` (the `Machine`
//!   controller drains the node, then deletes the machine); the instance leaves the scale set
//!   once its machine is being deleted, and the machine's finalizer goes once the instance is
//!   gone;
//! - a machine whose instance the scale set no longer lists (the cloud replaced it) is marked
//!   `Ready=False` with reason `InstanceNotFound`, stays in the provider ID list, and its
//!   `Machine` is deleted only once the instance has been missing for [`MISSING_GRACE`]: a
//!   listing that lags deletes nothing; such a machine that no `Machine` owns is deleted
//!   directly;
//! - a `Machine` of the pool whose machine is gone is deleted;
//! - when the scale set is deleted, every machine and `Machine` of the pool goes with it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use capi_core::api::Machine;
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::infra::{InfraInitialization, InfraMachine, InfraMachinePool, InfraMachineStatus};
use capi_core::{InstanceState, ModelRevision, PoolInstance, PoolScope, ScaleSetReport, labels};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use super::rollout;
use capi_runtime::reasons;

/// The finalizer the loop puts on each machine standing for an instance: the instance leaves the
/// scale set before the machine disappears.
pub const POOL_MACHINE_FINALIZER: &str = "infrastructure.cluster.x-k8s.io/pool-machine";

/// What happens to the machines standing for a pool's instances.
#[derive(Debug)]
pub(crate) struct MemberPlan<M> {
    /// Machines to create, one per instance that has none.
    pub(crate) create: Vec<M>,
    /// Machines whose status changes: name and new status.
    pub(crate) status: Vec<(String, InfraMachineStatus)>,
    /// `Machine`s to delete (their nodes are drained first), by name.
    pub(crate) delete_machines: Vec<String>,
    /// Machines to delete directly (no `Machine` owns them), by name.
    pub(crate) delete_members: Vec<String>,
    /// Machines whose finalizer goes (their instance is gone).
    pub(crate) release_finalizer: Vec<Arc<M>>,
    /// Something is waiting out [`MISSING_GRACE`]: the pool must be looked at again soon.
    pub(crate) waiting: bool,
}

impl<M> Default for MemberPlan<M> {
    fn default() -> Self {
        Self {
            create: Vec::new(),
            status: Vec::new(),
            delete_machines: Vec::new(),
            delete_members: Vec::new(),
            release_finalizer: Vec::new(),
            waiting: false,
        }
    }
}

/// The pool's machines and their `Machine`s, as one reconcile observed them.
pub(crate) struct Observed<'a, M> {
    /// The machines standing for the pool's instances.
    pub(crate) members: &'a [Arc<M>],
    /// The `Machine` of each member, by the member's name.
    pub(crate) machines: &'a BTreeMap<String, Arc<Machine>>,
    /// The pool's `Machine`s whose machine is gone (made for a machine being deleted), by name.
    pub(crate) strays: &'a [String],
    /// When it was observed.
    pub(crate) now: jiff::Timestamp,
}

/// How long an instance must be missing from the scale set's listings before its `Machine` is
/// deleted: longer than a cloud's listings lag behind (five seconds for the simulated cloud, a
/// few for EC2's).
pub const MISSING_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

fn by_provider_id<M: InfraMachine>(members: &[Arc<M>]) -> BTreeMap<&str, &Arc<M>> {
    members
        .iter()
        .filter_map(|m| m.provider_id().map(|id| (id, m)))
        .collect()
}

fn deleting<K: Resource>(object: &K) -> bool {
    object.meta().deletion_timestamp.is_some()
}

fn has_finalizer<K: Resource>(object: &K) -> bool {
    object
        .meta()
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == POOL_MACHINE_FINALIZER))
}

/// The instances of `report` as the rollout arithmetic sees them.
/// `rolling`: whether the pool rolls to `revision` now (not while the model cannot change, when
/// its bootstrap data is away: every instance then counts as up to date).
pub(crate) fn view<M: InfraMachine>(
    observed: &Observed<'_, M>,
    report: &ScaleSetReport,
    revision: &ModelRevision,
    rolling: bool,
) -> Vec<rollout::Member> {
    let members = by_provider_id(observed.members);
    let machines = observed.machines;
    report
        .instances
        .iter()
        .map(|instance| {
            let member = members.get(instance.provider_id.as_str());
            let machine = member.and_then(|m| machines.get(&m.name_any()));
            rollout::Member {
                provider_id: instance.provider_id.clone(),
                name: instance.name.clone(),
                up_to_date: !rolling || instance.is_up_to_date(revision),
                ready: machine.is_some_and(|m| {
                    m.status
                        .as_ref()
                        .is_some_and(|s| condition::is_true(&s.conditions, condition::READY))
                }),
                failed: matches!(instance.state, InstanceState::Failed { .. }),
                marked: machine
                    .is_some_and(|m| m.annotations().contains_key(labels::DELETE_MACHINE)),
                has_machine: machine.is_some(),
                releasing: member.is_some_and(|m| deleting(m.as_ref()))
                    || machine.is_some_and(|m| deleting(m.as_ref())),
                terminating: instance.leaving,
            }
        })
        .collect()
}

/// The provider IDs of the instances that may leave the scale set now: those `report` lists, not
/// already leaving, whose machine is being deleted while the loop's finalizer holds it, and whose
/// `Machine` is gone or being deleted (its node drained or draining) — a machine deleted
/// directly, its `Machine` alive, holds its instance until the `Machine` goes.
pub(crate) fn removable<M: InfraMachine>(
    observed: &Observed<'_, M>,
    report: &ScaleSetReport,
) -> BTreeSet<String> {
    let present: BTreeSet<&str> = report
        .instances
        .iter()
        .filter(|i| !i.leaving)
        .map(|i| i.provider_id.as_str())
        .collect();
    observed
        .members
        .iter()
        .filter(|m| deleting(m.as_ref()) && has_finalizer(m.as_ref()))
        .filter(|m| {
            observed
                .machines
                .get(&m.name_any())
                .is_none_or(|machine| deleting(machine.as_ref()))
        })
        .filter_map(|m| m.provider_id())
        .filter(|id| present.contains(id))
        .map(str::to_string)
        .collect()
}

/// The plan for the machines of the pool of `scope`, whose scale set `report` describes, with
/// the instances of `release` (provider IDs) chosen to leave.
///
/// `seen_before` holds the provider IDs the scale set listed before this reconcile's `update`: a
/// deleting machine's instance that was listed then and is not now has left, and its finalizer
/// goes; one that was not listed at all may be hidden by a lagging listing, and its finalizer
/// goes only once the machine has been deleting for [`MISSING_GRACE`].
pub(crate) fn plan<P: InfraMachinePool, C>(
    scope: &PoolScope<P, C>,
    observed: &Observed<'_, P::Machine>,
    report: &ScaleSetReport,
    seen_before: &BTreeSet<String>,
    release: &[String],
) -> MemberPlan<P::Machine> {
    let members = observed.members;
    let machines = observed.machines;
    let mut plan = MemberPlan::default();
    let by_id = by_provider_id(members);
    let names: BTreeSet<String> = members.iter().map(|m| m.name_any()).collect();
    let mut made = BTreeSet::new();
    for instance in &report.instances {
        match by_id.get(instance.provider_id.as_str()) {
            Some(member) => {
                let current = member.infra_status().cloned().unwrap_or_default();
                let desired = status_of(&current, instance, member.meta().generation);
                if desired != current && !deleting(member.as_ref()) {
                    plan.status.push((member.name_any(), desired));
                }
            }
            None => {
                let name = member_name(&scope.infra_pool.name_any(), &instance.name);
                // Two instances whose names differ only in what a name cannot hold, or an
                // object of that name made by someone else: no second machine is made.
                if names.contains(&name) || !made.insert(name.clone()) {
                    continue;
                }
                if let Some(member) = new_member(scope, instance, name) {
                    plan.create.push(member);
                }
            }
        }
    }
    let present: BTreeSet<&str> = report.provider_ids().into_iter().collect();
    let grace = jiff::SignedDuration::try_from(MISSING_GRACE).unwrap_or_default();
    for member in members {
        let name = member.name_any();
        let instance_there = member.provider_id().is_some_and(|id| present.contains(id));
        if instance_there {
            // A machine deleted directly while its `Machine` lives: the `Machine` goes first,
            // so that the node is drained before the instance leaves.
            if deleting(member.as_ref())
                && let Some(machine) = machines.get(&name).filter(|m| !deleting(m.as_ref()))
            {
                plan.delete_machines.push(machine.name_any());
            }
            continue;
        }
        if deleting(member.as_ref()) {
            if has_finalizer(member.as_ref()) {
                let left = member
                    .provider_id()
                    .is_some_and(|id| seen_before.contains(id));
                let deleting_for = member
                    .meta()
                    .deletion_timestamp
                    .as_ref()
                    .map(|t| observed.now.duration_since(t.0))
                    .unwrap_or_default();
                if left || deleting_for >= grace {
                    plan.release_finalizer.push(Arc::clone(member));
                } else {
                    plan.waiting = true;
                }
            }
            continue;
        }
        let current = member.infra_status().cloned().unwrap_or_default();
        let missing_since = condition::get(&current.conditions, condition::READY)
            .filter(|c| c.reason == reasons::INSTANCE_NOT_FOUND)
            .map(|c| c.last_transition_time.0);
        if let Some(since) = missing_since {
            if observed.now.duration_since(since) >= grace {
                release_one(&mut plan, &name, machines);
            } else {
                plan.waiting = true;
            }
        } else {
            plan.waiting = true;
            // Stamped now, whatever `Ready` said before: the grace counts from the first miss.
            let mut desired = current.clone();
            desired.conditions.retain(|c| c.type_ != condition::READY);
            condition::set(
                &mut desired.conditions,
                DesiredCondition::new(
                    condition::READY,
                    ConditionStatus::False,
                    reasons::INSTANCE_NOT_FOUND,
                )
                .message(format!(
                    "instance {} is no longer in the scale set; its Machine is deleted if it \
                     does not come back",
                    member.provider_id().unwrap_or_default()
                ))
                .observed_generation(member.meta().generation),
            );
            plan.status.push((name, desired));
        }
    }
    // Released instances the cloud still lists: through their `Machine`s only (the rollout
    // arithmetic chooses none without one), so that every node is drained.
    for provider_id in release {
        let machine = by_id
            .get(provider_id.as_str())
            .and_then(|member| machines.get(&member.name_any()));
        if let Some(machine) = machine.filter(|m| !deleting(m.as_ref())) {
            plan.delete_machines.push(machine.name_any());
        }
    }
    plan.delete_machines.extend(observed.strays.iter().cloned());
    plan
}

/// The pool's `spec.providerIDList`, sorted: the instances of `report`, and those of machines
/// that stay (not being deleted, not deleted by `plan`) although the listing misses them — a
/// listing that lags must not make the `MachinePool` controller delete their nodes; a missing
/// instance leaves the list when its machine goes.
pub(crate) fn provider_ids<M: InfraMachine>(
    observed: &Observed<'_, M>,
    report: &ScaleSetReport,
    plan: &MemberPlan<M>,
) -> Vec<String> {
    let mut ids: BTreeSet<String> = report
        .provider_ids()
        .into_iter()
        .map(str::to_string)
        .collect();
    for member in observed.members {
        let name = member.name_any();
        let staying = !deleting(member.as_ref())
            && !plan.delete_members.contains(&name)
            && !observed.machines.get(&name).is_some_and(|m| {
                deleting(m.as_ref()) || plan.delete_machines.contains(&m.name_any())
            });
        if let Some(id) = member.provider_id().filter(|_| staying) {
            ids.insert(id.to_string());
        }
    }
    ids.into_iter().collect()
}

/// Deletes the `Machine` of member `name`, whose instance is gone, or the member itself when no
/// `Machine` owns it.
fn release_one<M>(plan: &mut MemberPlan<M>, name: &str, machines: &BTreeMap<String, Arc<Machine>>) {
    match machines.get(name) {
        Some(machine) if !deleting(machine.as_ref()) => {
            plan.delete_machines.push(machine.name_any());
        }
        Some(_) => {}
        None => plan.delete_members.push(name.to_string()),
    }
}

/// Every machine of a pool whose scale set is gone: its `Machine` and itself deleted, its
/// finalizer released — no `Machine` is left waiting for an instance that no longer exists.
pub(crate) fn release_all<M: InfraMachine>(
    members: &[Arc<M>],
    machines: &BTreeMap<String, Arc<Machine>>,
) -> MemberPlan<M> {
    let mut plan = MemberPlan::default();
    for machine in machines.values().filter(|m| !deleting(m.as_ref())) {
        plan.delete_machines.push(machine.name_any());
    }
    for member in members {
        if has_finalizer(member.as_ref()) {
            plan.release_finalizer.push(Arc::clone(member));
        }
        if !deleting(member.as_ref()) {
            plan.delete_members.push(member.name_any());
        }
    }
    plan
}

/// The status of the machine of `instance`: provisioned once it runs, its addresses and failure
/// domain, and `Ready` from its state. Timestamps of unchanged conditions are kept.
fn status_of(
    current: &InfraMachineStatus,
    instance: &PoolInstance,
    generation: Option<i64>,
) -> InfraMachineStatus {
    let mut desired = current.clone();
    desired.addresses = instance.addresses.clone();
    if instance.failure_domain.is_some() {
        desired.failure_domain = instance.failure_domain.clone();
    }
    let ready = match &instance.state {
        InstanceState::Running => {
            desired.initialization = Some(InfraInitialization {
                provisioned: Some(true),
            });
            DesiredCondition::new(
                condition::READY,
                ConditionStatus::True,
                reasons::INSTANCE_RUNNING,
            )
        }
        InstanceState::Provisioning => DesiredCondition::new(
            condition::READY,
            ConditionStatus::False,
            reasons::INSTANCE_PROVISIONING,
        )
        .message(format!(
            "instance {} is being provisioned",
            instance.provider_id
        )),
        InstanceState::Failed { reason, message } => {
            let reason = if reason.trim().is_empty() {
                reasons::INSTANCE_FAILED
            } else {
                reason.as_str()
            };
            DesiredCondition::new(condition::READY, ConditionStatus::False, reason)
                .message(message.clone())
        }
    };
    condition::set(
        &mut desired.conditions,
        ready.observed_generation(generation),
    );
    desired
}

/// The name of the machine of instance `instance` of pool `pool`: `<pool>-<instance>`,
/// lowercased, every character but letters and digits replaced by `-`; a name longer than 253
/// characters is cut and ends in a digest of the whole, so that two instances never share one.
pub(crate) fn member_name(pool: &str, instance: &str) -> String {
    use sha2::{Digest, Sha256};
    let cleaned: String = instance
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() { c } else { '-' }
        })
        .collect();
    let name = format!("{pool}-{}", cleaned.trim_matches('-'));
    if name.len() <= 253 {
        return name;
    }
    let digest: String = Sha256::digest(name.as_bytes())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}-{digest}", name[..240].trim_end_matches(['-', '.']))
}

/// The machine of `instance`, as the provider describes it, with the loop's metadata: `name`,
/// the pool's namespace, the pool and cluster name labels upstream's `MachinePool` controller
/// finds it by, the pool as owner, the loop's finalizer, and the instance's provider ID. `None`
/// when the provider's object cannot carry them (it does not serialise as an object).
fn new_member<P: InfraMachinePool, C>(
    scope: &PoolScope<P, C>,
    instance: &PoolInstance,
    name: String,
) -> Option<P::Machine> {
    let pool = &scope.infra_pool;
    let described = pool.machine_for(instance);
    let mut object = serde_json::to_value(&described).ok()?;
    let fields = object.as_object_mut()?;
    let spec = fields
        .entry("spec")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()?;
    spec.insert(
        "providerID".into(),
        serde_json::Value::String(instance.provider_id.clone()),
    );
    let mut member: P::Machine = serde_json::from_value(object).ok()?;
    let cluster_name = scope.machine_pool.spec.cluster_name.clone();
    let meta = member.meta_mut();
    meta.name = Some(name);
    meta.namespace = pool.namespace();
    meta.labels.get_or_insert_with(Default::default).extend([
        (
            labels::MACHINE_POOL_NAME.to_string(),
            labels::label_value(&scope.machine_pool.name_any()).into_owned(),
        ),
        (labels::CLUSTER_NAME.to_string(), cluster_name),
    ]);
    meta.owner_references = Some(vec![OwnerReference {
        api_version: P::api_version(&()).into_owned(),
        kind: P::kind(&()).into_owned(),
        name: pool.name_any(),
        uid: pool.uid().unwrap_or_default(),
        ..OwnerReference::default()
    }]);
    meta.finalizers = Some(vec![POOL_MACHINE_FINALIZER.to_string()]);
    Some(member)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_are_object_names() {
        assert_eq!(member_name("workers", "i-0abc"), "workers-i-0abc");
        assert_eq!(member_name("workers", "Pool_VM_3"), "workers-pool-vm-3");
        assert_eq!(member_name("workers", "x/"), "workers-x");
        assert_eq!(member_name("workers", "vm.1"), "workers-vm-1");
        let long = member_name(&"p".repeat(250), "instance-1");
        assert!(long.len() <= 253);
        assert_ne!(long, member_name(&"p".repeat(250), "instance-2"));
    }
}
