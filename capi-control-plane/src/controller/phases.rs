//! The phases of a control plane pass, in the order [`super::reconcile::reconcile_once`] runs
//! them (etcd membership in [`super::membership`], the rollout step in [`super::step`]). A phase
//! that returns `Break` has written the status and ends the pass with what comes next;
//! `Continue` goes on to the next one.

use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;

use capi_bootstrap::api::KubeadmConfig;
use capi_bootstrap::cluster_pki::{self, EnsureError};
use capi_core::api::{Cluster, Machine};
use capi_core::{condition, labels};
use capi_runtime::ReconcileError;
use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::write;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::machines::{self, Observed as MachineObserved, node_name};
use super::membership::read_etcd;
use super::reconcile::Scope;
use super::report::events;
use super::{FINALIZER, components, remediate, status};
use crate::api::KubeadmControlPlane;
use crate::scale::MachineFacts;

/// The name of the Cluster that owns the control plane; without one the pass waits (the Cluster
/// controller makes the Cluster the owner, and its change triggers the next pass).
pub(super) fn owning_cluster(kcp: &KubeadmControlPlane) -> ControlFlow<Next, String> {
    match kcp
        .owner_references()
        .iter()
        .find(|r| r.kind == "Cluster" && r.api_version.starts_with("cluster.x-k8s.io/"))
    {
        Some(owner) => Continue(owner.name.clone()),
        None => Break(Next::AwaitChange),
    }
}

/// The Cluster, from the controller's watch (else read fresh); reads only.
pub(super) async fn read_cluster(scope: &Scope<'_>) -> Result<Option<Arc<Cluster>>, kube::Error> {
    match scope.state().clusters.get() {
        Some(clusters) => clusters.get(&scope.namespace, &scope.cluster_name).await,
        None => Ok(
            Api::<Cluster>::namespaced(scope.context.client.clone(), &scope.namespace)
                .get_opt(&scope.cluster_name)
                .await?
                .map(Arc::new),
        ),
    }
}

/// The machines the control plane controls (its labels and its controller reference), sorted by
/// name; reads only. They come from the manager's shared watch once it holds its first list and
/// shows every machine this control plane created or deleted
/// ([`Expectations`](capi_runtime::cache::Expectations)); until it does,
/// the pass waits (`Break`: the machine's event brings the next pass), so a lagging watch never
/// makes a pass create or delete a machine again. Before the first list, from the API server.
pub(super) async fn read_machines(scope: &mut Scope<'_>) -> Result<ControlFlow<Next>, kube::Error> {
    let uid = scope.kcp.uid().unwrap_or_default();
    let wanted = machines::machine_labels(scope.kcp, &scope.cluster_name);
    let ours = |m: &Machine| {
        wanted.iter().all(|(k, v)| m.labels().get(k) == Some(v))
            && m.owner_references()
                .iter()
                .any(|r| r.controller == Some(true) && r.uid == uid)
    };
    let mut owned: Vec<Machine> = match scope.state().machines.get().filter(|i| i.listed()) {
        Some(informer) => informer
            .store()
            .state()
            .iter()
            .filter(|m| m.namespace().as_deref() == Some(scope.namespace.as_str()) && ours(m))
            .map(|m| Machine::clone(m))
            .collect(),
        None => scope
            .machines
            .list(&ListParams::default().labels(&scope.selector))
            .await?
            .items
            .into_iter()
            .filter(|m| ours(m))
            .collect(),
    };
    let shown = scope.state().expectations.satisfied(&uid, |name| {
        owned
            .iter()
            .any(|m| m.name_any() == name && m.metadata.deletion_timestamp.is_none())
    });
    if !shown {
        return Ok(Break(Next::Requeue(scope.poll())));
    }
    owned.sort_by_key(|m| m.name_any());
    scope.owned = owned;
    Ok(Continue(()))
}

/// Without its Cluster the control plane waits, and says so.
pub(super) async fn require_cluster(
    scope: &mut Scope<'_>,
    cluster: Option<Arc<Cluster>>,
) -> Result<ControlFlow<Next, Arc<Cluster>>, ReconcileError> {
    if let Some(cluster) = cluster {
        return Ok(Continue(cluster));
    }
    scope.report.waiting = Some(format!("waiting for Cluster {}", scope.cluster_name));
    scope.write_status().await?;
    Ok(Break(Next::Requeue(scope.poll())))
}

/// `Paused` recorded; a paused control plane (or one of a paused cluster) changes nothing else.
pub(super) async fn honour_pause(
    scope: &mut Scope<'_>,
    cluster: &Cluster,
) -> Result<ControlFlow<Next>, ReconcileError> {
    if cluster.is_paused() || labels::has_paused_annotation(&scope.kcp.metadata) {
        scope.report.paused = true;
        scope.write_status().await?;
        return Ok(Break(Next::AwaitChange));
    }
    Ok(Continue(()))
}

/// The finalizer, before anything is created: a control plane is never deleted without
/// deleting its machines.
pub(super) async fn ensure_finalizer(scope: &Scope<'_>) -> Result<(), kube::Error> {
    write::change_finalizer(&scope.kcps, scope.kcp, FinalizerChange::Add, FINALIZER).await
}

/// The cluster's infrastructure and its control plane endpoint, awaited; returns the endpoint's
/// URL.
pub(super) async fn await_infrastructure(
    scope: &mut Scope<'_>,
    cluster: &Cluster,
) -> Result<ControlFlow<Next, String>, ReconcileError> {
    let endpoint = cluster
        .spec
        .control_plane_endpoint
        .clone()
        .filter(|e| e.is_valid() && cluster.infrastructure_provisioned());
    let Some(endpoint) = endpoint else {
        let why = "waiting for the cluster infrastructure and its control plane endpoint";
        scope.report.certificates = Err(why.into());
        scope.report.waiting = Some(why.into());
        scope.write_status().await?;
        return Ok(Break(Next::AwaitChange));
    };
    Ok(Continue(format!(
        "https://{}:{}",
        endpoint.host, endpoint.port
    )))
}

/// The cluster PKI Secrets and kubeconfig for `server` exist (generated once, see
/// [`cluster_pki`]); once found complete they are not read again for a while. A control plane
/// that has not recorded its certificates as available yet expects none stored, and creates them
/// without reading first ([`cluster_pki::ensure_new`]). Until they exist the control plane
/// waits.
pub(super) async fn ensure_certificates(
    scope: &mut Scope<'_>,
    cluster: &Cluster,
    server: &str,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let state = scope.state();
    let secrets: Api<Secret> = Api::namespaced(scope.context.client.clone(), &scope.namespace);
    let pki_key = format!(
        "{}/{}/{server}",
        scope.namespace,
        cluster.uid().unwrap_or_default()
    );
    let pki = match state.pki_complete.get(&pki_key) {
        Some(_) => Ok(()),
        None => {
            let recorded = scope.kcp.status.as_ref().is_some_and(|s| {
                condition::is_true(&s.conditions, status::types::CERTIFICATES_AVAILABLE)
            });
            let found = if recorded {
                cluster_pki::ensure(&secrets, cluster, server).await
            } else {
                cluster_pki::ensure_new(&secrets, cluster, server).await
            };
            found.map(|_| drop(state.pki_complete.put(pki_key, ())))
        }
    };
    match pki {
        Ok(()) => Ok(Continue(())),
        Err(EnsureError::Api(error)) => Err(error.into()),
        Err(other) => {
            scope.report.certificates = Err(other.to_string());
            scope.report.waiting = Some(other.to_string());
            scope.write_status().await?;
            Ok(Break(Next::Requeue(scope.poll())))
        }
    }
}

/// What each machine is: its KubeadmConfig and infrastructure machine read, and why it is
/// outdated, if it is; reads only.
pub(super) async fn observe_machines(scope: &mut Scope<'_>) -> Result<(), ReconcileError> {
    let (kcp, state) = (scope.kcp, scope.state());
    let mut configs: Vec<Option<Arc<KubeadmConfig>>> = Vec::with_capacity(scope.owned.len());
    for machine in &scope.owned {
        configs.push(match state.configs.get() {
            Some(cached) => cached.get(&scope.namespace, &machine.name_any()).await?,
            None => {
                Api::<KubeadmConfig>::namespaced(scope.context.client.clone(), &scope.namespace)
                    .get_opt(&machine.name_any())
                    .await?
                    .map(Arc::new)
            }
        });
    }
    let mut infrastructure = Vec::with_capacity(scope.owned.len());
    for machine in &scope.owned {
        infrastructure.push(
            state
                .references
                .get(&machine.spec.infrastructure_ref, &scope.namespace)
                .await?,
        );
    }
    let now = jiff::Timestamp::now();
    scope.report.outdated = scope
        .owned
        .iter()
        .zip(&infrastructure)
        .zip(&configs)
        .map(|((machine, infrastructure), config)| {
            machines::outdated(
                kcp,
                &MachineObserved {
                    machine,
                    config: config.as_deref(),
                    infrastructure: infrastructure.as_deref(),
                },
                now,
            )
        })
        .collect();
    Ok(())
}

/// Whether the control plane is initialised, and etcd read once it is; reads only.
pub(super) async fn observe_etcd(scope: &mut Scope<'_>, cluster: &Cluster) {
    scope.report.initialized = scope.owned.iter().any(|m| node_name(m).is_some());
    scope.initialized = scope.report.initialized
        || scope
            .kcp
            .status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.control_plane_initialized)
            .unwrap_or(false);
    scope.etcd = if scope.initialized {
        Some(read_etcd(scope.state(), &scope.context.client, cluster).await)
    } else {
        None
    };
}

/// Once etcd was looked at: the nodes' control-plane components and etcd members judged and
/// written as the machines' conditions (where they changed). Then each machine's facts, which
/// the rollout and remediation decide from.
pub(super) async fn record_components(
    scope: &mut Scope<'_>,
    cluster: &Cluster,
) -> Result<(), ReconcileError> {
    let state = scope.state();
    if let Some(view) = &scope.etcd {
        let etcd_read = view.as_ref().map(|(_, s)| s).map_err(String::as_str);
        scope.report.components = components::observe(
            &state.workloads,
            &scope.context.client,
            cluster,
            &scope.owned,
            etcd_read,
        )
        .await;
        components::record(&scope.machines, &mut scope.owned, &scope.report.components).await?;
    }
    let etcd_status = scope
        .etcd
        .as_ref()
        .and_then(|e| e.as_ref().ok())
        .map(|(_, s)| s);
    let report = &scope.report;
    let facts: Vec<MachineFacts> = scope
        .owned
        .iter()
        .zip(&report.outdated)
        .enumerate()
        .map(|(i, (m, outdated))| {
            machines::facts(m, outdated.is_none(), etcd_status, report.judged(i))
        })
        .collect();
    scope.facts = facts;
    Ok(())
}

/// A machine whose KubeadmConfig or infrastructure machine is missing (a crash in the middle of
/// creating it) gets what it lacks.
pub(super) async fn complete_machines(scope: &Scope<'_>) -> Result<(), ReconcileError> {
    for machine in &scope.owned {
        let provisioned = machine
            .status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.infrastructure_provisioned)
            .unwrap_or(false);
        if !provisioned && machine.metadata.deletion_timestamp.is_none() {
            let init = !scope.initialized && scope.owned.len() == 1;
            machines::complete(
                scope.kcp,
                machine,
                init,
                machines::Made::Earlier,
                &scope.context.client,
                scope.state(),
            )
            .await?;
        }
    }
    Ok(())
}

/// Machines a health check marked, one at a time and never at the control plane's cost (see
/// [`remediate`]). A machine deleted for remediation ends the pass; otherwise the remediation in
/// progress is kept for the next machine created.
pub(super) async fn remediate(scope: &mut Scope<'_>) -> Result<ControlFlow<Next>, ReconcileError> {
    let etcd_read = scope.etcd.as_ref().map(|view| match view {
        Ok((_, status)) => Ok(status),
        Err(why) => Err(why.as_str()),
    });
    let remediation = remediate::remediate(
        scope.kcp,
        &scope.owned,
        &scope.facts,
        etcd_read,
        scope.initialized,
        remediate::Writes {
            kcps: &scope.kcps,
            machines: &scope.machines,
            expectations: &scope.state().expectations,
        },
    )
    .await?;
    let report = &mut scope.report;
    report.remediating = remediation.remediating.clone();
    report.last_remediation = remediation.last.clone();
    if let Some(machine) = &remediation.remediated {
        let retry = report
            .last_remediation
            .as_ref()
            .map(|r| r.retry_count)
            .unwrap_or_default();
        report.event(
            true,
            events::REMEDIATING,
            format!("deleting unhealthy machine {machine} to replace it (retry {retry})"),
        );
        scope.write_status().await?;
        return Ok(Break(Next::Requeue(scope.poll())));
    }
    scope.remediation_in_progress = remediation.in_progress;
    Ok(Continue(()))
}
