//! The phases of a MachineSet pass, in the order [`super::reconcile_once`] runs them. A phase that
//! returns `Break` ends the pass with what comes next; `Continue` goes on to the next one.

use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;

use capi_core::api::{Cluster, Machine, MachineSet, MachineSetStatus};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use futures::{StreamExt, stream};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::creation::{complete_machine, create_machine};
use super::deletion_priority::{MachineFacts, select_for_deletion};
use super::{MACHINE_SET_FINALIZER, Scope};
use crate::machine::status::{HEALTH_CHECK_SUCCEEDED, OWNER_REMEDIATED};
use crate::{ownership, replicas, selector, synced};
use capi_runtime::ReconcileError;
use capi_runtime::plan::{EventNote, FinalizerChange, Next};
use capi_runtime::reasons;
use capi_runtime::write;

/// A deleted set: its machines deleted, then its finalizer dropped once none is left.
pub(super) async fn reconcile_delete(scope: &Scope<'_>) -> Result<Next, ReconcileError> {
    let (set, deps) = (scope.set, scope.deps());
    if !set.finalizers().iter().any(|f| f == MACHINE_SET_FINALIZER) {
        return Ok(Next::AwaitChange);
    }
    // The machines from the cache (each pass of a deletion reads no more than that: a list of
    // thousands of machines per pass is most of a manager's memory at scale); each one gone
    // brings the set back here.
    let Some(store) = synced(&deps.machines) else {
        return Ok(Next::Requeue(deps.settings.poll));
    };
    let owned: Vec<Arc<Machine>> = store
        .state()
        .into_iter()
        .filter(|m| {
            m.namespace().as_deref() == Some(scope.namespace.as_str())
                && ownership::is_controlled_by(&m.metadata, &scope.uid)
        })
        .collect();
    if owned.is_empty() {
        // The cache may not show yet a machine created just before the deletion: the finalizer
        // goes only once the API server, read fresh (metadata only), has none either.
        let selector = format!("{}={}", labels::MACHINE_SET_NAME, set.name_any());
        if ownership::controlled_machine_left(&scope.machines, &selector, &scope.uid).await? {
            return Ok(Next::Requeue(deps.settings.poll));
        }
        deps.expectations.forget(&scope.uid);
        write::change_finalizer(
            &scope.sets,
            set,
            FinalizerChange::Remove,
            MACHINE_SET_FINALIZER,
        )
        .await?;
        return Ok(Next::AwaitChange);
    }
    for machine in owned
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
    {
        write::delete(&scope.machines, &machine.name_any()).await?;
    }
    Ok(Next::Requeue(deps.settings.poll))
}

/// The finalizer, before anything else: a set that creates machines is never deleted without
/// deleting them.
pub(super) async fn ensure_finalizer(
    scope: &Scope<'_>,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let set = scope.set;
    if set.finalizers().iter().any(|f| f == MACHINE_SET_FINALIZER) {
        return Ok(Continue(()));
    }
    write::change_finalizer(
        &scope.sets,
        set,
        FinalizerChange::Add,
        MACHINE_SET_FINALIZER,
    )
    .await?;
    Ok(Break(Next::AwaitChange))
}

/// A selector that does not match the template's labels is recorded as a condition, and nothing
/// is created from it.
pub(super) async fn check_selector(
    scope: &mut Scope<'_>,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let set = scope.set;
    let mismatch = selector::template_mismatch(
        "MachineSet",
        &set.spec.selector,
        set.spec.template.metadata.as_ref().map(|m| &m.labels),
    );
    if selector::record_mismatch(
        &mut scope.status.conditions,
        mismatch,
        set.metadata.generation,
    ) {
        patch_status(scope).await?;
        return Ok(Break(Next::AwaitChange));
    }
    Ok(Continue(()))
}

/// The set's Cluster (from the cache, else read fresh); without it the set waits.
pub(super) async fn find_cluster(
    scope: &Scope<'_>,
) -> Result<ControlFlow<Next, Arc<Cluster>>, ReconcileError> {
    let deps = scope.deps();
    let name = &scope.set.spec.cluster_name;
    let client = &scope.context.client;
    let poll = deps.settings.poll;
    Ok(crate::cache::cluster_or_wait(&deps.clusters, client, name, &scope.namespace, poll).await?)
}

/// `Paused` recorded; a paused set (or one of a paused cluster) changes nothing else.
pub(super) async fn honour_pause(
    scope: &mut Scope<'_>,
    cluster: &Cluster,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let set = scope.set;
    let paused = cluster.is_paused() || labels::has_paused_annotation(&set.metadata);
    set_paused(&mut scope.status, set, paused);
    if paused {
        patch_status(scope).await?;
        return Ok(Break(Next::AwaitChange));
    }
    Ok(Continue(()))
}

/// An absent `spec.replicas` is defaulted and written back (see [`replicas`]); malformed
/// autoscaler annotations are recorded on `ScalingUp` and stop the pass.
pub(super) async fn default_replicas(
    scope: &mut Scope<'_>,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let set = scope.set;
    let current = set.status.as_ref().and_then(|s| s.replicas);
    match replicas::defaulted(set.spec.replicas, set.annotations(), current) {
        Ok(Some(replicas)) => {
            replicas::write(&scope.sets, set, replicas).await?;
            Ok(Break(Next::AwaitChange))
        }
        Ok(None) => {
            scope.status.conditions.retain(|c| {
                !(c.type_ == condition::SCALING_UP && c.reason == reasons::INVALID_SPEC)
            });
            Ok(Continue(()))
        }
        Err(message) => {
            condition::set(
                &mut scope.status.conditions,
                DesiredCondition::new(
                    condition::SCALING_UP,
                    ConditionStatus::False,
                    reasons::INVALID_SPEC,
                )
                .message(message)
                .observed_generation(set.metadata.generation),
            );
            patch_status(scope).await?;
            Ok(Break(Next::AwaitChange))
        }
    }
}

/// Reads (writes nothing) the set's machines and the orphans it would adopt from a synced cache
/// into the scope; an unsynced cache ends the pass, never counted from.
pub(super) fn observe_machines(scope: &mut Scope<'_>) -> ControlFlow<Next> {
    let (set, deps) = (scope.set, scope.deps());
    let Some(store) = synced(&deps.machines) else {
        return Break(Next::Requeue(deps.settings.poll));
    };
    scope.candidates = store
        .state()
        .into_iter()
        .filter(|m| m.namespace().as_deref() == Some(scope.namespace.as_str()))
        .filter(|m| {
            ownership::is_controlled_by(&m.metadata, &scope.uid)
                || (ownership::controller_of(&m.metadata).is_none()
                    && m.metadata.deletion_timestamp.is_none()
                    && m.spec.cluster_name == set.spec.cluster_name
                    && selector::matches(&set.spec.selector, m.metadata.labels.as_ref()))
        })
        .collect();
    Continue(())
}

/// Orphans adopted; the watch brings them back owned, and the pass ends until it does.
pub(super) async fn adopt_orphans(scope: &Scope<'_>) -> Result<ControlFlow<Next>, ReconcileError> {
    let set = scope.set;
    let mut adopted = false;
    for orphan in scope
        .candidates
        .iter()
        .filter(|m| !ownership::is_controlled_by(&m.metadata, &scope.uid))
    {
        if let Some(owner) = set.controller_owner_ref(&()) {
            let mut owners = orphan.owner_references().to_vec();
            owners.push(owner);
            let patch = json!({"metadata": {
                "ownerReferences": owners,
                "labels": {labels::MACHINE_SET_NAME: set.name_any()},
                "resourceVersion": orphan.resource_version(),
            }});
            write::patch(&scope.machines, &orphan.name_any(), patch).await?;
            adopted = true;
        }
    }
    Ok(if adopted {
        Break(Next::AwaitChange)
    } else {
        Continue(())
    })
}

/// Nothing is counted until the cache shows this controller's own previous creates and deletes;
/// then the active machines (those not being deleted) and those leaving are noted.
pub(super) fn await_expectations(scope: &mut Scope<'_>) -> ControlFlow<Next> {
    let deps = scope.deps();
    let candidates = &scope.candidates;
    let present = |name: &str| {
        candidates
            .iter()
            .any(|m| m.name_any() == name && m.metadata.deletion_timestamp.is_none())
    };
    if !deps.expectations.satisfied(&scope.uid, present) {
        // The machine watch triggers the next pass as soon as the cache catches up.
        return Break(Next::Requeue(deps.settings.poll));
    }
    scope.active = candidates
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();
    // A machine on its way out still holds its slot (and its instance) until it is gone, as
    // upstream counts it: never more instances than replicas, and an OnDelete deployment has time
    // to shrink the old set before a user-deleted machine would be replaced from it.
    scope.leaving = candidates
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_some())
        .count();
    Continue(())
}

/// Machines a health check marked: deleted (each recorded as expected), and replaced by
/// [`scale`]; until they are gone they count as leaving.
pub(super) async fn remediate(scope: &mut Scope<'_>) -> Result<(), ReconcileError> {
    let deps = scope.deps();
    let remediate: Vec<String> = scope
        .active
        .iter()
        .filter(|m| remediation_requested(m))
        .map(|m| m.name_any())
        .collect();
    for name in &remediate {
        deps.expectations.deleted(&scope.uid, name);
        write::delete(&scope.machines, name).await?;
        scope.events.push(note(
            reasons::MACHINE_DELETED,
            format!("deleted machine {name} for remediation"),
        ));
    }
    scope.active.retain(|m| !remediate.contains(&m.name_any()));
    scope.leaving += remediate.len();
    Ok(())
}

/// Active machines not provisioned yet get the bootstrap config and infrastructure machine they
/// lack.
pub(super) async fn complete_machines(scope: &Scope<'_>) -> Result<(), ReconcileError> {
    for machine in &scope.active {
        complete_machine(scope.set, machine, &scope.namespace, scope.deps()).await?;
    }
    Ok(())
}

/// The missing machines created (unless creation is disabled), or the surplus deleted by
/// priority. Returns what comes next once status is written: a resync when nothing changed and
/// nothing is leaving. A failed create publishes the events of those that succeeded and fails the
/// pass without writing status.
pub(super) async fn scale(
    scope: &mut Scope<'_>,
    cluster: &Cluster,
) -> Result<Next, ReconcileError> {
    let (set, deps) = (scope.set, scope.deps());
    let desired = usize::try_from(set.spec.replicas.unwrap_or(1)).unwrap_or(0);
    let active = scope.active.len();
    let creation_disabled = set
        .annotations()
        .get(labels::DISABLE_MACHINE_CREATE)
        .is_some_and(|v| v == "true");
    // An old set of an OnDelete rollout creates nothing: its deployment shrinks it to what is left.
    let missing = if creation_disabled {
        0
    } else {
        desired.saturating_sub(active + scope.leaving)
    };
    if missing > 0 {
        let created = stream::iter(0..missing)
            .map(|_| create_machine(set, cluster, &scope.namespace, scope.context))
            .buffer_unordered(deps.settings.machine_set_parallelism.max(1))
            .collect::<Vec<_>>()
            .await;
        let mut failure = None;
        for result in created {
            match result {
                Ok(name) => scope.events.push(note(
                    reasons::MACHINE_CREATED,
                    format!("created machine {name}"),
                )),
                Err(error) => failure = Some(error),
            }
        }
        if let Some(error) = failure {
            write::publish(&scope.context.recorder, set, &scope.events).await;
            return Err(error);
        }
    } else if active > desired {
        let facts: Vec<MachineFacts> = scope.active.iter().map(|m| machine_facts(m)).collect();
        let order = set
            .spec
            .deletion
            .as_ref()
            .and_then(|d| d.order)
            .unwrap_or_default();
        for name in select_for_deletion(&facts, active - desired, order) {
            deps.expectations.deleted(&scope.uid, &name);
            write::delete(&scope.machines, &name).await?;
            scope.events.push(note(
                reasons::MACHINE_DELETED,
                format!("deleted machine {name}"),
            ));
        }
    } else if scope.leaving == 0 {
        return Ok(Next::Resync);
    }
    Ok(Next::AwaitChange)
}

/// Writes the status computed so far, if it changed (the pass ends after it).
async fn patch_status(scope: &Scope<'_>) -> Result<(), kube::Error> {
    let set = scope.set;
    write::patch_status_if_changed(
        &scope.sets,
        &set.name_any(),
        set.status.as_ref(),
        &scope.status,
    )
    .await
}

fn note(reason: &'static str, text: String) -> EventNote {
    EventNote {
        warning: false,
        reason,
        note: text,
    }
}

fn set_paused(status: &mut MachineSetStatus, set: &MachineSet, value: bool) {
    let (state, reason) = if value {
        (ConditionStatus::True, reasons::PAUSED)
    } else {
        (ConditionStatus::False, reasons::NOT_PAUSED)
    };
    condition::set(
        &mut status.conditions,
        DesiredCondition::new(condition::PAUSED, state, reason)
            .observed_generation(set.metadata.generation),
    );
}

/// Marked by a health check for its owner to replace (`OwnerRemediated=False`).
fn remediation_requested(machine: &Machine) -> bool {
    machine.status.as_ref().is_some_and(|s| {
        condition::status(&s.conditions, OWNER_REMEDIATED) == Some(ConditionStatus::False)
    })
}

fn machine_facts(machine: &Machine) -> MachineFacts {
    let annotated = machine.annotations().contains_key(labels::DELETE_MACHINE);
    let unhealthy = remediation_requested(machine)
        || machine.status.as_ref().is_none_or(|s| {
            s.node_ref.is_none()
                || condition::status(&s.conditions, HEALTH_CHECK_SUCCEEDED)
                    == Some(ConditionStatus::False)
        });
    MachineFacts {
        name: machine.name_any(),
        created: machine
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second()),
        marked_for_deletion: annotated || machine.metadata.deletion_timestamp.is_some(),
        unhealthy,
    }
}
