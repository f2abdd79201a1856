//! The phases of a MachineHealthCheck pass, in the order [`super::reconcile_once`] runs them. A
//! phase that returns `Break` ends the pass with what comes next.

use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{Cluster, Machine};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use serde_json::json;

use super::Scope;
use super::verdict::{
    MachineObservation, NodeObservation, ObservedCondition, Remediation, Verdict, assess,
    node_startup_since, remediation_allowed,
};
use crate::machine::status::{HEALTH_CHECK_SUCCEEDED, OWNER_REMEDIATED};
use crate::workload::CachedNode;
use crate::{selector, synced};
use capi_runtime::ReconcileError;
use capi_runtime::plan::{EventNote, Next};
use capi_runtime::reasons;
use capi_runtime::write;

/// The check's Cluster (from the cache, else read fresh); without it the check waits.
pub(super) async fn find_cluster(
    scope: &Scope<'_>,
) -> Result<ControlFlow<Next, Arc<Cluster>>, ReconcileError> {
    let deps = scope.deps();
    let name = &scope.check.spec.cluster_name;
    let client = &scope.context.client;
    let poll = deps.settings.poll;
    Ok(crate::cache::cluster_or_wait(&deps.clusters, client, name, &scope.namespace, poll).await?)
}

/// `Paused` recorded; a paused check (or one of a paused cluster) writes it and judges nothing.
pub(super) async fn honour_pause(
    scope: &mut Scope<'_>,
    cluster: &Cluster,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let check = scope.check;
    let paused = cluster.is_paused() || labels::has_paused_annotation(&check.metadata);
    condition::set(
        &mut scope.status.conditions,
        reasons::paused_condition(paused, check.metadata.generation),
    );
    if paused {
        write::patch_status_if_changed(
            &scope.api,
            &check.name_any(),
            check.status.as_ref(),
            &scope.status,
        )
        .await?;
        return Ok(Break(Next::AwaitChange));
    }
    Ok(Continue(()))
}

/// Reads (writes nothing) the machines the selector matches from a synced cache into the scope,
/// by name; an unsynced cache ends the pass.
pub(super) fn observe_targets(scope: &mut Scope<'_>) -> ControlFlow<Next> {
    let (check, deps) = (scope.check, scope.deps());
    let Some(store) = synced(&deps.machines) else {
        return Break(Next::Requeue(deps.settings.poll));
    };
    let namespace = scope.namespace.as_str();
    scope.targets = store
        .state()
        .into_iter()
        .filter(|m| {
            m.namespace().as_deref() == Some(namespace)
                && m.spec.cluster_name == check.spec.cluster_name
                && m.metadata.deletion_timestamp.is_none()
                && selector::matches(&check.spec.selector, m.metadata.labels.as_ref())
        })
        .collect();
    scope.targets.sort_by_key(|m| m.name_any());
    Continue(())
}

/// A verdict per target, in order (`None`: its node cannot be seen now), and the soonest time a
/// pending verdict is due noted in the scope. Reads only.
pub(super) async fn assess_targets(
    scope: &mut Scope<'_>,
    cluster: &Cluster,
) -> Vec<Option<Verdict>> {
    let (check, deps) = (scope.check, scope.deps());
    let workload = deps
        .workloads
        .get(&scope.namespace, &check.spec.cluster_name)
        .await
        .ok()
        .filter(|w| w.synced());
    let now = jiff::Timestamp::now().as_second();
    let mut recheck: Option<Duration> = None;
    let mut verdicts = Vec::new();
    // As upstream, no machine is judged while its cluster's infrastructure is not ready, nor any
    // but a control-plane machine while its cluster's control plane is not initialized (workers
    // cannot join before; a Cluster change brings the check back).
    let cluster_conditions = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let infrastructure_ready =
        condition::is_true(cluster_conditions, condition::INFRASTRUCTURE_READY);
    let control_plane_initialized =
        condition::is_true(cluster_conditions, condition::CONTROL_PLANE_INITIALIZED);
    let cluster_conditions = observed(cluster_conditions);
    for machine in &scope.targets {
        if !infrastructure_ready || !(control_plane_initialized || machine.is_control_plane()) {
            verdicts.push(Some(Verdict::Pending { recheck: None }));
            continue;
        }
        let node = match machine.status.as_ref().and_then(|s| s.node_ref.as_ref()) {
            None => NodeObservation::NotRegistered,
            Some(reference) => match &workload {
                // Nodes cannot be seen: no verdict on them now.
                None => {
                    recheck = Some(deps.settings.poll);
                    verdicts.push(None);
                    continue;
                }
                Some(workload) => match workload.node(&reference.name) {
                    Some(node) => NodeObservation::Present(node_conditions(&node)),
                    None => NodeObservation::Missing,
                },
            },
        };
        let observation = observation(machine, &cluster_conditions, node, now);
        let verdict = assess(check.spec.checks.as_ref(), &observation, now);
        if let Verdict::Pending {
            recheck: Some(after),
        } = &verdict
        {
            recheck = Some(recheck.map_or(*after, |r| r.min(*after)));
        }
        verdicts.push(Some(verdict));
    }
    scope.recheck = recheck;
    verdicts
}

/// What the verdicts allow: whether unhealthy machines may be handed to their owners
/// (`spec.remediation.triggerIf`), recorded as `RemediationAllowed`.
pub(super) struct Allowance {
    /// Unhealthy machines are marked for their owners.
    pub(super) allowed: bool,
    /// `triggerIf` holds remediation back.
    restricted: bool,
    /// It held it back at the last pass already.
    was_restricted: bool,
    unhealthy_found: bool,
    /// How many more machines may be remediated.
    pub(super) remaining: i32,
    pub(super) total: i32,
    pub(super) healthy: i32,
}

/// Counts the verdicts and decides (and records, in `RemediationAllowed`) whether remediation is
/// allowed.
pub(super) fn allow_remediation(scope: &mut Scope<'_>, verdicts: &[Option<Verdict>]) -> Allowance {
    let check = scope.check;
    let unhealthy_found = verdicts
        .iter()
        .any(|v| matches!(v, Some(Verdict::Unhealthy { .. })));
    let total = i32::try_from(scope.targets.len()).unwrap_or(i32::MAX);
    let healthy = i32::try_from(
        verdicts
            .iter()
            .filter(|v| matches!(v, Some(Verdict::Healthy)))
            .count(),
    )
    .unwrap_or(i32::MAX);
    // As upstream, every machine not counted healthy (pending, unhealthy, not seen) counts
    // against `triggerIf`.
    let unhealthy = total - healthy;
    let trigger = check
        .spec
        .remediation
        .as_ref()
        .and_then(|r| r.trigger_if.as_ref());
    let remediation = remediation_allowed(trigger, total, unhealthy);
    let was_restricted = condition::get(&scope.status.conditions, condition::REMEDIATION_ALLOWED)
        .is_some_and(|c| {
            c.status == ConditionStatus::False.as_str() && c.reason == reasons::TOO_MANY_UNHEALTHY
        });
    let remaining = remediation.as_ref().map_or(0, |r| r.remaining);
    let restricted = matches!(remediation, Ok(Remediation { allowed: false, .. }));
    let allowed = match remediation {
        Ok(Remediation { allowed: true, .. }) => {
            scope.set(
                condition::REMEDIATION_ALLOWED,
                ConditionStatus::True,
                reasons::REMEDIATION_ALLOWED,
                String::new(),
            );
            true
        }
        Ok(Remediation { allowed: false, .. }) => {
            scope.set(
                condition::REMEDIATION_ALLOWED,
                ConditionStatus::False,
                reasons::TOO_MANY_UNHEALTHY,
                format!(
                    "{unhealthy} of {total} machines are not healthy; remediation is stopped by spec.remediation.triggerIf"
                ),
            );
            false
        }
        Err(message) => {
            scope.set(
                condition::REMEDIATION_ALLOWED,
                ConditionStatus::False,
                reasons::INVALID_SPEC,
                message,
            );
            false
        }
    };
    Allowance {
        allowed,
        restricted,
        was_restricted,
        unhealthy_found,
        remaining,
        total,
        healthy,
    }
}

/// What marking the machines did.
pub(super) struct Marking<'s> {
    /// The first write that met a newer version of its machine (the others went on).
    pub(super) conflict: Option<kube::Error>,
    /// A write that failed otherwise (the pass stopped there).
    pub(super) failure: Option<kube::Error>,
    /// The machines this pass handed to their owners, and why.
    marked: Vec<(&'s Arc<Machine>, String)>,
    /// How many machines turned unhealthy at this pass.
    newly_unhealthy: usize,
}

/// Each verdict written on its machine (`HealthCheckSucceeded`, and `OwnerRemediated=False` for
/// an unhealthy one while remediation is allowed and its owner is not already acting), guarded by
/// the version read.
pub(super) async fn mark_machines<'s>(
    scope: &'s Scope<'_>,
    verdicts: &[Option<Verdict>],
    allowed: bool,
) -> Marking<'s> {
    // A machine whose condition write meets a newer version (its own controller wrote it
    // meanwhile) does not stop the pass: with many machines changing, stopping at the first
    // conflict would leave the rest unassessed, pass after pass.
    let mut conflict = None;
    let mut failure = None;
    let mut marked = Vec::new();
    let mut newly_unhealthy = 0_usize;
    for (machine, verdict) in scope.targets.iter().zip(verdicts) {
        let Some(verdict) = verdict else { continue };
        let mut conditions = machine
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let machine_generation = machine.metadata.generation;
        // Marked unhealthy by this pass (a new verdict, or one the owner is newly told to act on).
        let mut marked_now = None;
        let mut turned_unhealthy = false;
        let changed = match verdict {
            // Not marked either way (its earlier verdict, if any, stays).
            Verdict::Pending { .. } => false,
            Verdict::Healthy => {
                let generation = verdict_generation(
                    &conditions,
                    ConditionStatus::True,
                    reasons::HEALTHY,
                    "",
                    machine_generation,
                );
                let mut changed = condition::set(
                    &mut conditions,
                    DesiredCondition::new(
                        HEALTH_CHECK_SUCCEEDED,
                        ConditionStatus::True,
                        reasons::HEALTHY,
                    )
                    .observed_generation(generation),
                );
                changed |= condition::remove(&mut conditions, OWNER_REMEDIATED);
                changed
            }
            Verdict::Unhealthy { reason, message } => {
                let newly = condition::get(&conditions, HEALTH_CHECK_SUCCEEDED).is_none_or(|c| {
                    c.status != ConditionStatus::False.as_str() || c.reason != *reason
                });
                turned_unhealthy = newly;
                let generation = verdict_generation(
                    &conditions,
                    ConditionStatus::False,
                    reason,
                    message,
                    machine_generation,
                );
                let mut changed = condition::set(
                    &mut conditions,
                    DesiredCondition::new(HEALTH_CHECK_SUCCEEDED, ConditionStatus::False, *reason)
                        .message(message.clone())
                        .observed_generation(generation),
                );
                // The owner says in `OwnerRemediated` what it does about the machine (deferred,
                // refused, deleting): once it is False, it is the owner's to write.
                let owner_acting = condition::status(&conditions, OWNER_REMEDIATED)
                    == Some(ConditionStatus::False);
                if allowed && !owner_acting {
                    changed |= condition::set(
                        &mut conditions,
                        DesiredCondition::new(
                            OWNER_REMEDIATED,
                            ConditionStatus::False,
                            reasons::WAITING_FOR_REMEDIATION,
                        )
                        .message("waiting for the owner to replace the machine")
                        .observed_generation(machine_generation),
                    );
                }
                if allowed && changed {
                    marked_now = Some(format!("{reason}: {message}"));
                }
                changed
            }
        };
        if changed {
            match write::patch_status_guarded(
                &scope.machines_api,
                machine.as_ref(),
                json!({"conditions": conditions}),
            )
            .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(refusal)) if refusal.is_conflict() => {
                    conflict.get_or_insert(kube::Error::Api(refusal));
                    continue;
                }
                // Any other failure ends the pass, after the events of what was written.
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
            newly_unhealthy += usize::from(turned_unhealthy);
            if let Some(why) = marked_now {
                marked.push((machine, why));
            }
        }
    }
    Marking {
        conflict,
        failure,
        marked,
        newly_unhealthy,
    }
}

// Upstream's events, each recorded when it happens rather than at every pass (upstream records
// them at each pass and lets its recorder fold the repeats): `MachineMarkedUnhealthy` on each
// machine handed to its owner for remediation (only while remediation is allowed),
// `RemediationRestricted` on the check when `triggerIf` holds back unhealthy machines — as the
// restriction starts, and again whenever another machine turns unhealthy under it.

/// `MachineMarkedUnhealthy` on each machine this pass handed to its owner.
pub(super) async fn publish_marked(scope: &Scope<'_>, marking: &Marking<'_>) {
    for (machine, why) in &marking.marked {
        let note = EventNote {
            warning: false,
            reason: reasons::MACHINE_MARKED_UNHEALTHY,
            note: format!(
                "machine {} has been marked as unhealthy by MachineHealthCheck {}: {why}",
                machine.name_any(),
                scope.check.name_any()
            ),
        };
        write::publish(&scope.context.recorder, machine.as_ref(), &[note]).await;
    }
}

/// `RemediationRestricted` on the check as the restriction starts, and whenever another machine
/// turns unhealthy under it.
pub(super) async fn publish_restriction(
    scope: &Scope<'_>,
    allowance: &Allowance,
    marking: &Marking<'_>,
) {
    if allowance.restricted
        && allowance.unhealthy_found
        && (!allowance.was_restricted || marking.newly_unhealthy > 0)
    {
        let message = condition::get(&scope.status.conditions, condition::REMEDIATION_ALLOWED)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        let note = EventNote {
            warning: true,
            reason: reasons::REMEDIATION_RESTRICTED,
            note: message,
        };
        write::publish(&scope.context.recorder, scope.check, &[note]).await;
    }
}

fn observed(conditions: &[Condition]) -> Vec<ObservedCondition> {
    conditions
        .iter()
        .map(|c| ObservedCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            since: c.last_transition_time.0.as_second(),
        })
        .collect()
}

/// What the health check judges `machine` by: its conditions, its node, and when its node
/// startup timeout started ([`node_startup_since`], from its creation — `now` if unknown — and
/// its cluster's and its own readiness).
pub(super) fn observation(
    machine: &Machine,
    cluster_conditions: &[ObservedCondition],
    node: NodeObservation,
    now: i64,
) -> MachineObservation {
    let conditions = observed(
        machine
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default(),
    );
    let created = machine
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0.as_second());
    MachineObservation {
        node_startup_since: node_startup_since(created, cluster_conditions, &conditions),
        node,
        conditions,
    }
}

fn node_conditions(node: &CachedNode) -> Vec<ObservedCondition> {
    node.conditions
        .iter()
        .map(|c| ObservedCondition {
            type_: c.type_.to_string(),
            status: c.status.to_string(),
            since: c.since.unwrap_or(0),
        })
        .collect()
}

/// The generation `HealthCheckSucceeded` is stamped with: a verdict that has not changed keeps
/// the generation it was given. A machine's health does not follow its spec, and restamping the
/// verdict on every spec write (the bootstrap data's name, the provider ID) would be a status
/// write per spec change, each racing the Machine controller's own.
pub(super) fn verdict_generation(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    status: ConditionStatus,
    reason: &str,
    message: &str,
    machine_generation: Option<i64>,
) -> Option<i64> {
    match condition::get(conditions, HEALTH_CHECK_SUCCEEDED) {
        Some(c) if c.status == status.as_str() && c.reason == reason && c.message == message => {
            c.observed_generation
        }
        _ => machine_generation,
    }
}
