//! The MachineHealthCheck controller: judges every machine its selector matches with
//! [`health::assess`](crate::machine_health_check::verdict::assess), stops when too many are unhealthy
//! ([`health::remediation_allowed`](crate::machine_health_check::verdict::remediation_allowed), condition
//! `RemediationAllowed=False`), and otherwise marks unhealthy machines `OwnerRemediated=False` so
//! that their MachineSet replaces them.
//!
//! As upstream, no machine is judged before its cluster's infrastructure is ready, and no worker
//! before its cluster's control plane is initialized; the events `MachineMarkedUnhealthy` (on a
//! machine handed to its owner) and `RemediationRestricted` (on the check) are upstream's, each
//! recorded as it happens rather than at every pass.
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
use capi_runtime::plan::{EventNote, Next};
use capi_runtime::reasons;
use capi_runtime::write;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

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
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
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

/// What the health check judges `machine` by: its conditions, its node, and when its node
/// startup timeout started ([`node_startup_since`], from its creation — `now` if unknown — and
/// its cluster's and its own readiness).
fn observation(
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
    for machine in &targets {
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
    let was_restricted = condition::get(&status.conditions, condition::REMEDIATION_ALLOWED)
        .is_some_and(|c| {
            c.status == ConditionStatus::False.as_str() && c.reason == reasons::TOO_MANY_UNHEALTHY
        });
    let remaining = remediation.as_ref().map_or(0, |r| r.remaining);
    let restricted = matches!(remediation, Ok(Remediation { allowed: false, .. }));
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
    let mut failure = None;
    let mut marked = Vec::new();
    let mut newly_unhealthy = 0_usize;
    for (machine, verdict) in targets.iter().zip(&verdicts) {
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
                &machines_api,
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

    // Upstream's events, each recorded when it happens rather than at every pass (upstream
    // records them at each pass and lets its recorder fold the repeats): `MachineMarkedUnhealthy`
    // on each machine handed to its owner for remediation (only while remediation is allowed),
    // `RemediationRestricted` on the check when `triggerIf` holds back unhealthy machines — as
    // the restriction starts, and again whenever another machine turns unhealthy under it.
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
    if let Some(error) = failure {
        return Err(error.into());
    }
    if restricted && unhealthy_found && (!was_restricted || newly_unhealthy > 0) {
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
    fn a_machine_is_judged_from_its_own_and_its_clusters_readiness() {
        let machine: Machine = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"clusterName": "c", "bootstrap": {"dataSecretName": "d"},
                     "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "m"}},
            "status": {"conditions": [{"type": "InfrastructureReady", "status": "True",
                "reason": "Provisioned", "message": "",
                "lastTransitionTime": "2026-01-01T00:10:00Z"}]}
        }))
        .unwrap();
        let created = 1_767_225_600;
        let cluster = [ObservedCondition {
            type_: condition::CONTROL_PLANE_INITIALIZED.into(),
            status: "True".into(),
            since: created + 60,
        }];
        let seen = observation(&machine, &cluster, NodeObservation::NotRegistered, 0);
        assert_eq!(
            seen.node_startup_since,
            created + 600,
            "its infrastructure, latest"
        );
        let seen = observation(&machine, &[], NodeObservation::NotRegistered, 0);
        assert_eq!(seen.node_startup_since, created + 600);
        let mut waiting = machine.clone();
        waiting.status = None;
        let seen = observation(&waiting, &cluster, NodeObservation::NotRegistered, 0);
        assert_eq!(
            seen.node_startup_since,
            created + 60,
            "its cluster's control plane"
        );
        waiting.metadata.creation_timestamp = None;
        let seen = observation(&waiting, &[], NodeObservation::NotRegistered, 42);
        assert_eq!(seen.node_startup_since, 42, "no creation time: from now");
    }

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
