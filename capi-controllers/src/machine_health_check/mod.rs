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
//!
//! Watches: MachineHealthChecks; the machines their selector matches; their Cluster.
//!
//! Phases (`reconcile_once`, in `phases`): the cluster found, pause honoured, the targets
//! observed, each judged, remediation allowed or not, the verdicts written on the machines, the
//! events published; status written once, at the end (`status`) — after the events, and not
//! when a machine write failed other than by a conflict.

mod phases;
mod status;
pub mod verdict;

use std::ops::ControlFlow::{Break, Continue};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use capi_core::api::{Cluster, Machine, MachineHealthCheck, MachineHealthCheckStatus};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};

use crate::workload::WorkloadClusters;
use crate::{CoreSettings, cache, cluster_cache, of_cluster, selector};
use capi_runtime::cache::informer::Informer;
use capi_runtime::plan::Next;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// What the MachineHealthCheck controller works with besides the client.
pub(crate) struct HealthCheckController {
    workloads: Arc<WorkloadClusters>,
    machines: OnceLock<Informer<Machine>>,
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

/// What one pass over a health check works with: its targets, and the status it computes,
/// written once.
struct Scope<'a> {
    check: &'a MachineHealthCheck,
    context: &'a Context<HealthCheckController>,
    namespace: String,
    api: Api<MachineHealthCheck>,
    machines_api: Api<Machine>,
    /// The status being computed from the one last written.
    status: MachineHealthCheckStatus,
    /// The machines the selector matches, by name (none until observed).
    targets: Vec<Arc<Machine>>,
    /// How soon a pending verdict is due.
    recheck: Option<Duration>,
}

impl<'a> Scope<'a> {
    fn new(check: &'a MachineHealthCheck, context: &'a Context<HealthCheckController>) -> Self {
        let namespace = check.namespace().unwrap_or_default();
        Self {
            check,
            context,
            api: Api::namespaced(context.client.clone(), &namespace),
            machines_api: Api::namespaced(context.client.clone(), &namespace),
            namespace,
            status: check.status.clone().unwrap_or_default(),
            targets: Vec::new(),
            recheck: None,
        }
    }

    fn deps(&self) -> &'a HealthCheckController {
        &self.context.state
    }

    /// Sets a condition of the status being computed, at the check's generation.
    fn set(&mut self, type_: &str, state: ConditionStatus, reason: &str, message: String) {
        condition::set(
            &mut self.status.conditions,
            DesiredCondition::new(type_, state, reason)
                .message(message)
                .observed_generation(self.check.metadata.generation),
        );
    }
}

/// One pass over a health check: each phase either goes on or ends the pass with what comes
/// next.
async fn reconcile_once(
    check: &MachineHealthCheck,
    context: &Context<HealthCheckController>,
) -> Result<Next, ReconcileError> {
    let mut scope = Scope::new(check, context);
    let cluster = match phases::find_cluster(&scope).await? {
        Continue(cluster) => cluster,
        Break(next) => return Ok(next),
    };
    if let Break(next) = phases::honour_pause(&mut scope, &cluster).await? {
        return Ok(next);
    }
    if let Break(next) = phases::observe_targets(&mut scope) {
        return Ok(next);
    }
    let verdicts = phases::assess_targets(&mut scope, &cluster).await;
    let allowance = phases::allow_remediation(&mut scope, &verdicts);
    let marking = phases::mark_machines(&scope, &verdicts, allowance.allowed).await;
    phases::publish_marked(&scope, &marking).await;
    if let Some(error) = marking.failure {
        return Err(error.into());
    }
    phases::publish_restriction(&scope, &allowance, &marking).await;
    let conflict = marking.conflict;
    status::write(&mut scope, &allowance).await?;
    if let Some(error) = conflict {
        // Retried shortly with fresh machines (see `RetryPolicy::conflict_base`).
        return Err(error.into());
    }
    Ok(match scope.recheck {
        Some(after) => Next::Requeue(after + Duration::from_secs(1)),
        None => Next::Resync,
    })
}

#[cfg(test)]
mod tests {
    use super::phases::{observation, verdict_generation};
    use super::verdict::{NodeObservation, ObservedCondition};
    use super::*;
    use crate::machine::status::HEALTH_CHECK_SUCCEEDED;
    use capi_runtime::reasons;
    use serde_json::json;

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
