//! The MachineHealthCheck controller: judges every machine its selector matches with
//! [`health::assess`](crate::machine_health_check::verdict::assess), stops when too many are unhealthy
//! ([`health::remediation_allowed`](crate::machine_health_check::verdict::remediation_allowed), condition
//! `RemediationAllowed=False`), and otherwise marks unhealthy machines `OwnerRemediated=False` so
//! that their MachineSet replaces them.
//!
//! Machine conditions are written with a guarded patch (the resource version that was read), as
//! the Machine controller writes the same list. `status.remediationsAllowed` counts the machines
//! this pass allowed to be remediated.

pub mod verdict;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use capi_core::api::{Cluster, Machine, MachineHealthCheck, MachineHealthCheckStatus};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use serde_json::json;

use self::verdict::{
    MachineObservation, NodeObservation, ObservedCondition, Remediation, Verdict, assess,
    node_startup_since, remediation_allowed,
};
use crate::machine::status::{HEALTH_CHECK_SUCCEEDED, OWNER_REMEDIATED};
use crate::workload::{CachedNode, WorkloadClusters};
use crate::{CoreSettings, cache, cluster_cache, find_cluster, of_cluster, selector, synced};
use capi_actuator::plan::{EventNote, Next};
use capi_actuator::reasons;
use capi_actuator::write;
use capi_actuator::{Context, ReconcileError, Reconciler, back_off, drain};

/// What the MachineHealthCheck controller works with besides the client.
pub(crate) struct HealthCheckController {
    workloads: Arc<WorkloadClusters>,
    machines: OnceLock<Store<Machine>>,
    clusters: OnceLock<Store<Cluster>>,
    settings: CoreSettings,
}

impl HealthCheckController {
    pub(crate) fn new(workloads: Arc<WorkloadClusters>, settings: CoreSettings) -> Self {
        Self {
            workloads,
            machines: OnceLock::new(),
            clusters: OnceLock::new(),
            settings,
        }
    }
}

/// Runs until `shutdown` completes; in-flight reconciles finish first.
pub(crate) async fn run(
    reconciler: Reconciler<MachineHealthCheck, HealthCheckController>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, checks) = reconciler.trigger();
    let (machines, machine_changes) = cache(reconciler.informer::<Machine>());
    let _ = reconciler.state().machines.set(machines);
    let (clusters, cluster_changes) = cluster_cache(reconciler.informer::<Cluster>());
    let _ = reconciler.state().clusters.set(clusters);
    let by_cluster = checks.clone();
    let concurrency = reconciler.concurrency();
    let by_machine = checks.clone();
    let context = reconciler.into_context(|deps, _, _| deps);
    let results = Controller::for_stream(trigger, checks)
        .trigger_backoff(capi_actuator::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .watches_stream(machine_changes, move |machine| {
            let namespace = machine.namespace();
            by_machine
                .state()
                .into_iter()
                .filter(|c| {
                    c.namespace() == namespace
                        && c.spec.cluster_name == machine.spec.cluster_name
                        && selector::matches(&c.spec.selector, machine.metadata.labels.as_ref())
                })
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect::<Vec<_>>()
        })
        // A Cluster changed (paused, deleted): its health checks look again.
        .watches_stream(
            cluster_changes,
            of_cluster(by_cluster, |c: &MachineHealthCheck| &c.spec.cluster_name),
        )
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_check,
            back_off::<MachineHealthCheck, HealthCheckController>,
            context,
        );
    drain(results).await;
}

#[tracing::instrument(skip_all, fields(namespace = %check.namespace().unwrap_or_default(), name = %check.name_any()))]
async fn reconcile_check(
    check: Arc<MachineHealthCheck>,
    context: Arc<Context<HealthCheckController>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(check.as_ref(), reconcile_once(&check, &context))
        .await
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

async fn reconcile_once(
    check: &MachineHealthCheck,
    context: &Context<HealthCheckController>,
) -> Result<Next, ReconcileError> {
    let deps = &context.state;
    let namespace = check.namespace().unwrap_or_default();
    let api: Api<MachineHealthCheck> = Api::namespaced(context.client.clone(), &namespace);
    let machines_api: Api<Machine> = Api::namespaced(context.client.clone(), &namespace);
    let generation = check.metadata.generation;
    let mut status = check.status.clone().unwrap_or_default();
    let set = |status: &mut MachineHealthCheckStatus,
               type_: &str,
               state,
               reason: &str,
               message: String| {
        condition::set(
            &mut status.conditions,
            DesiredCondition::new(type_, state, reason)
                .message(message)
                .observed_generation(generation),
        );
    };
    let cluster = match deps.clusters.get() {
        Some(store) => {
            find_cluster(store, &context.client, &check.spec.cluster_name, &namespace).await?
        }
        None => None,
    };
    let Some(cluster) = cluster else {
        return Ok(Next::Requeue(deps.settings.poll));
    };
    let paused = cluster.is_paused() || labels::has_paused_annotation(&check.metadata);
    condition::set(
        &mut status.conditions,
        reasons::paused_condition(paused, generation),
    );
    if paused {
        write::patch_status_if_changed(&api, &check.name_any(), check.status.as_ref(), &status)
            .await?;
        return Ok(Next::AwaitChange);
    }
    let Some(store) = synced(&deps.machines) else {
        return Ok(Next::Requeue(deps.settings.poll));
    };
    let mut targets: Vec<Arc<Machine>> = store
        .state()
        .into_iter()
        .filter(|m| {
            m.namespace().as_deref() == Some(namespace.as_str())
                && m.spec.cluster_name == check.spec.cluster_name
                && m.metadata.deletion_timestamp.is_none()
                && selector::matches(&check.spec.selector, m.metadata.labels.as_ref())
        })
        .collect();
    targets.sort_by_key(|m| m.name_any());
    let workload = deps
        .workloads
        .get(&namespace, &check.spec.cluster_name)
        .await
        .ok()
        .filter(|w| w.synced());
    let now = jiff::Timestamp::now().as_second();
    let mut recheck: Option<Duration> = None;
    let mut verdicts = Vec::new();
    // As upstream, no machine is judged while its cluster's infrastructure is not ready (a
    // Cluster change brings the check back).
    let cluster_conditions = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let infrastructure_ready =
        condition::is_true(cluster_conditions, condition::INFRASTRUCTURE_READY);
    let cluster_conditions = observed(cluster_conditions);
    for machine in &targets {
        if !infrastructure_ready {
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
        let observation = MachineObservation {
            node_startup_since: node_startup_since(created, &cluster_conditions, &conditions),
            node,
            conditions,
        };
        let verdict = assess(check.spec.checks.as_ref(), &observation, now);
        if let Verdict::Pending {
            recheck: Some(after),
        } = &verdict
        {
            recheck = Some(recheck.map_or(*after, |r| r.min(*after)));
        }
        verdicts.push(Some(verdict));
    }
    let unhealthy_found = verdicts
        .iter()
        .any(|v| matches!(v, Some(Verdict::Unhealthy { .. })));
    let total = i32::try_from(targets.len()).unwrap_or(i32::MAX);
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
    let was_restricted = condition::status(&status.conditions, condition::REMEDIATION_ALLOWED)
        == Some(ConditionStatus::False);
    let remaining = remediation.as_ref().map_or(0, |r| r.remaining);
    let allowed = match remediation {
        Ok(Remediation { allowed: true, .. }) => {
            set(
                &mut status,
                condition::REMEDIATION_ALLOWED,
                ConditionStatus::True,
                reasons::REMEDIATION_ALLOWED,
                String::new(),
            );
            true
        }
        Ok(Remediation { allowed: false, .. }) => {
            set(
                &mut status,
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
            set(
                &mut status,
                condition::REMEDIATION_ALLOWED,
                ConditionStatus::False,
                reasons::INVALID_SPEC,
                message,
            );
            false
        }
    };

    // A machine whose condition write meets a newer version (its own controller wrote it
    // meanwhile) does not stop the pass: with many machines changing, stopping at the first
    // conflict would leave the rest unassessed, pass after pass.
    let mut conflict = None;
    let mut marked = Vec::new();
    for (machine, verdict) in targets.iter().zip(&verdicts) {
        let Some(verdict) = verdict else { continue };
        let mut conditions = machine
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let machine_generation = machine.metadata.generation;
        let mut newly_unhealthy = None;
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
                if newly {
                    newly_unhealthy = Some(format!("{reason}: {message}"));
                }
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
                changed
            }
        };
        if changed {
            match write::patch_status_guarded(
                &machines_api,
                machine.as_ref(),
                json!({"conditions": conditions}),
            )
            .await
            {
                Err(kube::Error::Api(refusal)) if refusal.is_conflict() => {
                    conflict.get_or_insert(kube::Error::Api(refusal));
                    continue;
                }
                other => drop(other?),
            }
            if let Some(why) = newly_unhealthy {
                marked.push((machine, why));
            }
        }
    }

    // As upstream: an event on each machine newly found unhealthy (the condition says why; so
    // does the event, for `kubectl describe machine`), a warning on the check when unhealthy
    // machines are left unremediated by `triggerIf` — once as it starts, not at every pass.
    for (machine, why) in marked {
        let note = EventNote {
            warning: false,
            reason: reasons::MACHINE_MARKED_UNHEALTHY,
            note: format!(
                "machine {} has been marked as unhealthy by MachineHealthCheck {}: {why}",
                machine.name_any(),
                check.name_any()
            ),
        };
        write::publish(&context.recorder, machine.as_ref(), &[note]).await;
    }
    if !allowed && !was_restricted && unhealthy_found {
        let message = condition::get(&status.conditions, condition::REMEDIATION_ALLOWED)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        let note = EventNote {
            warning: true,
            reason: reasons::REMEDIATION_RESTRICTED,
            note: message,
        };
        write::publish(&context.recorder, check, &[note]).await;
    }
    status.expected_machines = Some(total);
    status.current_healthy = Some(healthy);
    status.remediations_allowed = Some(remaining);
    status.targets = targets.iter().map(|m| m.name_any()).collect();
    status.observed_generation = generation;
    write::patch_status_if_changed(&api, &check.name_any(), check.status.as_ref(), &status).await?;
    if let Some(error) = conflict {
        // Retried shortly with fresh machines (see `RetryPolicy::conflict_base`).
        return Err(error.into());
    }
    Ok(match recheck {
        Some(after) => Next::Requeue(after + Duration::from_secs(1)),
        None => Next::Resync,
    })
}

/// The generation `HealthCheckSucceeded` is stamped with: a verdict that has not changed keeps
/// the generation it was given. A machine's health does not follow its spec, and restamping the
/// verdict on every spec write (the bootstrap data's name, the provider ID) would be a status
/// write per spec change, each racing the Machine controller's own.
fn verdict_generation(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_verdict_keeps_its_generation_and_a_new_one_takes_the_machines() {
        let mut conditions = Vec::new();
        condition::set(
            &mut conditions,
            DesiredCondition::new(
                HEALTH_CHECK_SUCCEEDED,
                ConditionStatus::True,
                reasons::HEALTHY,
            )
            .observed_generation(Some(1)),
        );
        let same = verdict_generation(
            &conditions,
            ConditionStatus::True,
            reasons::HEALTHY,
            "",
            Some(3),
        );
        assert_eq!(same, Some(1), "a spec write alone is no new verdict");
        let mut unchanged = conditions.clone();
        assert!(!condition::set(
            &mut unchanged,
            DesiredCondition::new(
                HEALTH_CHECK_SUCCEEDED,
                ConditionStatus::True,
                reasons::HEALTHY
            )
            .observed_generation(same),
        ));
        let changed = verdict_generation(
            &conditions,
            ConditionStatus::False,
            reasons::NODE_NOT_READY,
            "node not ready for 5m",
            Some(3),
        );
        assert_eq!(changed, Some(3));
        assert_eq!(
            verdict_generation(&[], ConditionStatus::True, reasons::HEALTHY, "", Some(2)),
            Some(2)
        );
    }
}
