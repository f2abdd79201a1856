//! One pass over a KubeadmControlPlane: observe (cluster, machines, their configs and
//! infrastructure, etcd), let departing members go, decide one step, take it, write status.

use std::sync::Arc;

use capi_bootstrap::api::KubeadmConfig;
use capi_bootstrap::cluster_pki::{self, EnsureError};
use capi_core::api::{Cluster, Machine};
use capi_core::condition;
use capi_core::labels;
use capi_runtime::plan::{EventNote, FinalizerChange, Next};
use capi_runtime::{Context, ReconcileError, write};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::machines::{self, Observed as MachineObserved, node_name};
use super::status::{self, Observation};
use super::{CLEANUP_HOOK, ControlPlaneController, FINALIZER, components, remediate};
use crate::api::KubeadmControlPlane;
use crate::components::Judgement;
use crate::etcd::{EtcdCluster, EtcdClusterStatus, EtcdError};
use crate::quorum::{self, Change};
use crate::remediation::RemediationData;
use crate::rollout::{self, Step};
use crate::scale::MachineFacts;

/// Event reasons of this controller.
mod events {
    pub(super) const MACHINE_CREATED: &str = "SuccessfulCreate";
    pub(super) const MACHINE_DELETED: &str = "SuccessfulDelete";
    pub(super) const LEADERSHIP_MOVED: &str = "EtcdLeadershipMoved";
    pub(super) const MEMBER_REMOVED: &str = "EtcdMemberRemoved";
    pub(super) const INVALID: &str = "InvalidConfiguration";
    pub(super) const REMEDIATING: &str = "Remediating";
}

/// etcd as one pass saw it: the connection and what it said, or why it could not be read.
type EtcdView = Result<(Arc<dyn EtcdCluster>, EtcdClusterStatus), String>;

pub(super) async fn reconcile_once(
    kcp: &Arc<KubeadmControlPlane>,
    context: &Context<ControlPlaneController>,
) -> Result<Next, ReconcileError> {
    let client = &context.client;
    let state = &context.state;
    let poll = state.settings.poll;
    let namespace = kcp.namespace().unwrap_or_default();
    let kcps: Api<KubeadmControlPlane> = Api::namespaced(client.clone(), &namespace);
    let machines_api: Api<Machine> = Api::namespaced(client.clone(), &namespace);

    let Some(cluster_name) = kcp
        .owner_references()
        .iter()
        .find(|r| r.kind == "Cluster" && r.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|r| r.name.clone())
    else {
        // The Cluster controller makes the Cluster the owner; its change triggers the next pass.
        return Ok(Next::AwaitChange);
    };
    let cluster = match state.clusters.get() {
        Some(clusters) => clusters.get(&namespace, &cluster_name).await?,
        None => Api::<Cluster>::namespaced(client.clone(), &namespace)
            .get_opt(&cluster_name)
            .await?
            .map(Arc::new),
    };
    let selector = machines::selector(kcp, &cluster_name);
    let uid = kcp.uid().unwrap_or_default();
    let mut owned: Vec<Machine> = machines_api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|m| {
            m.owner_references()
                .iter()
                .any(|r| r.controller == Some(true) && r.uid == uid)
        })
        .collect();
    owned.sort_by_key(|m| m.name_any());

    let mut report = Report::new(&selector);
    if kcp.metadata.deletion_timestamp.is_some() {
        let next = delete(kcp, &cluster_name, &owned, &machines_api, poll, &mut report).await?;
        report.write(&kcps, kcp, &owned, None, context).await?;
        if matches!(next, Next::AwaitChange) {
            write::change_finalizer(&kcps, kcp.as_ref(), FinalizerChange::Remove, FINALIZER)
                .await?;
            state.workloads.forget(&namespace, &cluster_name);
        }
        return Ok(next);
    }
    let Some(cluster) = cluster else {
        report.waiting = Some(format!("waiting for Cluster {cluster_name}"));
        report.write(&kcps, kcp, &owned, None, context).await?;
        return Ok(Next::Requeue(poll));
    };
    if cluster.is_paused() || labels::has_paused_annotation(&kcp.metadata) {
        report.paused = true;
        report.write(&kcps, kcp, &owned, None, context).await?;
        return Ok(Next::AwaitChange);
    }
    write::change_finalizer(&kcps, kcp.as_ref(), FinalizerChange::Add, FINALIZER).await?;

    let endpoint = cluster
        .spec
        .control_plane_endpoint
        .clone()
        .filter(|e| e.is_valid() && cluster.infrastructure_provisioned());
    let Some(endpoint) = endpoint else {
        let why = "waiting for the cluster infrastructure and its control plane endpoint";
        report.certificates = Err(why.into());
        report.waiting = Some(why.into());
        report.write(&kcps, kcp, &owned, None, context).await?;
        return Ok(Next::AwaitChange);
    };
    let server = format!("https://{}:{}", endpoint.host, endpoint.port);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let pki_key = format!("{namespace}/{}/{server}", cluster.uid().unwrap_or_default());
    let pki = match state.pki_complete.get(&pki_key) {
        Some(_) => Ok(()),
        None => cluster_pki::ensure(&secrets, &cluster, &server)
            .await
            .map(|_| drop(state.pki_complete.put(pki_key, ()))),
    };
    match pki {
        Ok(()) => {}
        Err(EnsureError::Api(error)) => return Err(error.into()),
        Err(other) => {
            report.certificates = Err(other.to_string());
            report.waiting = Some(other.to_string());
            report.write(&kcps, kcp, &owned, None, context).await?;
            return Ok(Next::Requeue(poll));
        }
    }

    // What each machine is.
    let configs: Vec<KubeadmConfig> = Api::<KubeadmConfig>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    let mut infrastructure = Vec::with_capacity(owned.len());
    for machine in &owned {
        infrastructure.push(
            state
                .references
                .get(&machine.spec.infrastructure_ref, &namespace)
                .await?,
        );
    }
    let now = jiff::Timestamp::now();
    report.outdated = owned
        .iter()
        .zip(&infrastructure)
        .map(|(machine, infrastructure)| {
            let config = configs.iter().find(|c| c.name_any() == machine.name_any());
            machines::outdated(
                kcp,
                &MachineObserved {
                    machine,
                    config,
                    infrastructure: infrastructure.as_deref(),
                },
                now,
            )
        })
        .collect();

    // etcd, once there is one.
    report.initialized = owned.iter().any(|m| node_name(m).is_some());
    let initialized = report.initialized
        || kcp
            .status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.control_plane_initialized)
            .unwrap_or(false);
    let etcd: Option<EtcdView> = if initialized {
        Some(read_etcd(state, client, &cluster).await)
    } else {
        None
    };
    let etcd_status = etcd.as_ref().and_then(|e| e.as_ref().ok()).map(|(_, s)| s);
    // The nodes' control-plane components and etcd members, as the machines' conditions.
    if let Some(view) = &etcd {
        let etcd_read = view.as_ref().map(|(_, s)| s).map_err(String::as_str);
        report.components =
            components::observe(&state.workloads, client, &cluster, &owned, etcd_read).await;
        components::record(&machines_api, &mut owned, &report.components).await?;
    }
    let facts: Vec<MachineFacts> = owned
        .iter()
        .zip(&report.outdated)
        .enumerate()
        .map(|(i, (m, outdated))| {
            machines::facts(m, outdated.is_none(), etcd_status, report.judged(i))
        })
        .collect();

    // Departing machines' members leave after their node was drained.
    let mut waiting = Vec::new();
    for machine in owned
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_some())
    {
        if let Some(why) = release_member(
            machine,
            &owned,
            &facts,
            etcd.as_ref(),
            &machines_api,
            &mut report,
        )
        .await?
        {
            waiting.push(why);
        }
    }
    // A member whose machine is gone (a crash before its hook ran, a machine deleted by hand).
    if let Some(Ok((etcd, status))) = &etcd
        && owned.iter().all(|m| node_name(m).is_some())
        && facts.iter().all(|f| !f.deleting)
    {
        remove_stray_member(etcd.as_ref(), status, &owned, &facts, &mut report).await?;
    }

    // Complete a machine whose KubeadmConfig or infrastructure machine is missing (a crash in
    // the middle of creating it).
    for machine in &owned {
        let provisioned = machine
            .status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.infrastructure_provisioned)
            .unwrap_or(false);
        if !provisioned && machine.metadata.deletion_timestamp.is_none() {
            let init = !initialized && owned.len() == 1;
            machines::complete(kcp, machine, init, client, state).await?;
        }
    }

    // Machines a health check marked, one at a time and never at the control plane's cost.
    let etcd_read = etcd.as_ref().map(|view| match view {
        Ok((_, status)) => Ok(status),
        Err(why) => Err(why.as_str()),
    });
    let remediation = remediate::remediate(
        kcp,
        &owned,
        &facts,
        etcd_read,
        initialized,
        &kcps,
        &machines_api,
    )
    .await?;
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
        report
            .write(&kcps, kcp, &owned, etcd.as_ref(), context)
            .await?;
        return Ok(Next::Requeue(poll));
    }

    let node_to_machine = |node: &str| {
        owned
            .iter()
            .find(|m| node_name(m) == Some(node))
            .map_or_else(|| node.to_string(), |m| m.name_any())
    };
    let members = etcd_status
        .map(|s| s.quorum_members(node_to_machine))
        .unwrap_or_default();
    let leader = etcd_status.and_then(|s| {
        let id = s.leader?;
        let member = s.members.iter().find(|m| m.id == id)?;
        Some(node_to_machine(&member.name))
    });
    let domains: Vec<String> = cluster
        .status
        .as_ref()
        .map(|s| {
            s.failure_domains
                .iter()
                .filter(|d| d.control_plane.unwrap_or(false))
                .map(|d| d.name.clone())
                .collect()
        })
        .unwrap_or_default();
    let replicas = usize::try_from(kcp.spec.replicas.unwrap_or(1)).unwrap_or(0);
    let max_surge = max_surge(kcp);
    let step = if initialized && etcd_status.is_none() && !owned.is_empty() {
        Step::Wait(match &etcd {
            Some(Err(why)) => format!("etcd cannot be read: {why}"),
            _ => "etcd cannot be read".into(),
        })
    } else {
        rollout::next_step(&rollout::Observed {
            replicas,
            max_surge,
            failure_domains: &domains,
            machines: &facts,
            members: &members,
            leader: leader.as_deref(),
        })
    };
    tracing::debug!(?step, "next step");
    let next = match step {
        Step::Initialize { failure_domain } | Step::ScaleUp { failure_domain } => {
            let init = owned.is_empty() && !initialized;
            match machines::machine_name(kcp, &cluster_name) {
                Ok(name) => {
                    let new = machines::NewMachine {
                        name: &name,
                        failure_domain: failure_domain.clone(),
                        init,
                        remediation_for: remediation.in_progress.as_ref(),
                    };
                    machines::create(kcp, &cluster, &new, client, state).await?;
                    // The replacement carries the remediation on: it is no longer in progress.
                    if remediation.in_progress.is_some() {
                        remediate::clear_in_progress(&kcps, kcp).await?;
                    }
                    let role = if init {
                        "kubeadm init"
                    } else {
                        "kubeadm join --control-plane"
                    };
                    let place = failure_domain
                        .map(|d| format!(" in failure domain {d}"))
                        .unwrap_or_default();
                    report.event(
                        false,
                        events::MACHINE_CREATED,
                        format!("created machine {name} ({role}){place}"),
                    );
                    Next::Requeue(poll)
                }
                Err(why) => {
                    report.event(true, events::INVALID, why.clone());
                    waiting.push(why);
                    Next::InvalidConfiguration
                }
            }
        }
        Step::ScaleDown {
            machine,
            move_leadership_to,
        } => {
            if let (Some(to), Some(Ok((etcd, status)))) = (&move_leadership_to, &etcd)
                && let Some(member) = owned
                    .iter()
                    .find(|m| m.name_any() == *to)
                    .and_then(node_name)
                    .and_then(|node| status.member(node))
            {
                etcd.move_leader(member.id)
                    .await
                    .map_err(controller_error)?;
                report.event(
                    false,
                    events::LEADERSHIP_MOVED,
                    format!(
                        "moved etcd leadership to {} before deleting machine {machine}",
                        member.name
                    ),
                );
            }
            write::delete(&machines_api, &machine).await?;
            report.event(
                false,
                events::MACHINE_DELETED,
                format!("deleted machine {machine}"),
            );
            Next::Requeue(poll)
        }
        Step::Wait(why) => {
            waiting.push(why);
            Next::Requeue(poll)
        }
        Step::Done if waiting.is_empty() && etcd_status.is_some_and(healthy) => Next::Resync,
        Step::Done => Next::Requeue(poll),
    };
    if !waiting.is_empty() {
        report.waiting = Some(waiting.join("; "));
    }
    report
        .write(&kcps, kcp, &owned, etcd.as_ref(), context)
        .await?;
    Ok(next)
}

fn healthy(status: &EtcdClusterStatus) -> bool {
    status.members.iter().all(|m| m.healthy && !m.learner)
}

fn max_surge(kcp: &KubeadmControlPlane) -> usize {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match kcp
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|u| u.max_surge.as_ref())
    {
        Some(IntOrString::Int(0)) => 0,
        Some(IntOrString::String(s)) if s.trim() == "0" || s.trim() == "0%" => 0,
        _ => 1,
    }
}

fn controller_error(error: crate::etcd::EtcdError) -> ReconcileError {
    ReconcileError::Controller(Box::new(error))
}

async fn read_etcd(
    state: &ControlPlaneController,
    client: &kube::Client,
    cluster: &Cluster,
) -> EtcdView {
    let etcd = state
        .settings
        .etcd
        .connect(client, cluster)
        .await
        .map_err(|e| e.to_string())?;
    let status = etcd.status().await.map_err(|e| e.to_string())?;
    Ok((etcd, status))
}

/// Lets the etcd member of a deleting machine go once its node was drained (the Machine waits
/// at the pre-terminate hook): hands leadership over if it leads, removes it if etcd keeps its
/// quorum, then removes the hook. Returns what it waits for, if it waits.
async fn release_member(
    machine: &Machine,
    owned: &[Machine],
    facts: &[MachineFacts],
    etcd: Option<&EtcdView>,
    machines_api: &Api<Machine>,
    report: &mut Report,
) -> Result<Option<String>, ReconcileError> {
    let name = machine.name_any();
    if !machine.annotations().contains_key(CLEANUP_HOOK) {
        return Ok(None);
    }
    let conditions = machine
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let at_hook = condition::get(conditions, condition::DELETING)
        .is_some_and(|c| c.reason == capi_runtime::reasons::WAITING_FOR_PRE_TERMINATE_HOOK);
    if !at_hook {
        return Ok(Some(format!("machine {name} is being drained")));
    }
    if let Some(node) = node_name(machine) {
        match etcd {
            Some(Ok((etcd, status))) => {
                if let Some(member) = status.member(node) {
                    if status.leader == Some(member.id)
                        && let Some(successor) = successor(status, owned, facts, node)
                    {
                        etcd.move_leader(successor.0)
                            .await
                            .map_err(controller_error)?;
                        report.event(
                            false,
                            events::LEADERSHIP_MOVED,
                            format!("moved etcd leadership from {node} to {}", successor.1),
                        );
                    }
                    let members = status.quorum_members(|n| n.to_string());
                    if !quorum::safe(&members, Change::Remove(node)) {
                        return Ok(Some(format!(
                            "etcd would lose its quorum without {node}'s member; machine {name} waits"
                        )));
                    }
                    match etcd.remove_member(member.id).await {
                        Ok(()) => {}
                        // etcd says no for now (e.g. a member joined less than its health
                        // interval ago): wait, as for any other reason, without an error.
                        Err(EtcdError::Refused(why)) => {
                            return Ok(Some(format!(
                                "etcd refused to remove {node}'s member for now ({why}); machine {name} waits"
                            )));
                        }
                        Err(e) => return Err(controller_error(e)),
                    }
                    report.event(
                        false,
                        events::MEMBER_REMOVED,
                        format!("removed etcd member {node} of machine {name}"),
                    );
                }
            }
            Some(Err(why)) => {
                return Ok(Some(format!(
                    "etcd cannot be read to remove {node}'s member: {why}"
                )));
            }
            None => {}
        }
    }
    remove_hook(machines_api, &name).await?;
    Ok(None)
}

/// The healthy member of a machine that stays, newest machine first: `(id, name)`.
fn successor(
    status: &EtcdClusterStatus,
    owned: &[Machine],
    facts: &[MachineFacts],
    leaving: &str,
) -> Option<(u64, String)> {
    owned
        .iter()
        .zip(facts)
        .filter(|(_, f)| !f.deleting)
        .filter_map(|(m, f)| {
            let node = node_name(m)?;
            let member = status.member(node)?;
            (node != leaving && member.healthy).then_some((f.up_to_date, f.created, member))
        })
        .max_by_key(|(up_to_date, created, _)| (*up_to_date, *created))
        .map(|(_, _, m)| (m.id, m.name.clone()))
}

async fn remove_hook(machines_api: &Api<Machine>, name: &str) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {"annotations": {CLEANUP_HOOK: null}}});
    match machines_api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(error) => Err(error),
    }
}

/// Removes one member that belongs to no machine, if etcd keeps its quorum without it.
async fn remove_stray_member(
    etcd: &dyn EtcdCluster,
    status: &EtcdClusterStatus,
    owned: &[Machine],
    facts: &[MachineFacts],
    report: &mut Report,
) -> Result<(), ReconcileError> {
    let stray = status
        .members
        .iter()
        .filter(|m| !m.name.is_empty())
        .filter(|m| {
            !owned
                .iter()
                .any(|machine| node_name(machine) == Some(m.name.as_str()))
        })
        .min_by(|a, b| a.name.cmp(&b.name));
    let Some(stray) = stray else {
        return Ok(());
    };
    let members = status.quorum_members(|n| n.to_string());
    if !quorum::safe(&members, Change::Remove(&stray.name)) {
        return Ok(());
    }
    if status.leader == Some(stray.id)
        && let Some((successor, _)) = successor(status, owned, facts, &stray.name)
    {
        etcd.move_leader(successor)
            .await
            .map_err(controller_error)?;
    }
    etcd.remove_member(stray.id)
        .await
        .map_err(controller_error)?;
    report.event(
        false,
        events::MEMBER_REMOVED,
        format!(
            "removed etcd member {} that belonged to no machine",
            stray.name
        ),
    );
    Ok(())
}

/// Deleting the control plane: after the cluster's other machines, all of its own at once (the
/// whole cluster goes; etcd membership no longer matters). `AwaitChange` means done.
async fn delete(
    kcp: &KubeadmControlPlane,
    cluster: &str,
    owned: &[Machine],
    machines_api: &Api<Machine>,
    poll: std::time::Duration,
    report: &mut Report,
) -> Result<Next, ReconcileError> {
    if !kcp.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Next::AwaitChange);
    }
    let workers = machines_api
        .list_metadata(&ListParams::default().labels(&format!(
            "{}={cluster},!{}",
            labels::CLUSTER_NAME,
            labels::MACHINE_CONTROL_PLANE
        )))
        .await?
        .items
        .len();
    if workers > 0 {
        report.deleting = Some(format!(
            "waiting for the cluster's {workers} other machines to be deleted first"
        ));
        return Ok(Next::Requeue(poll));
    }
    for machine in owned {
        let name = machine.name_any();
        if machine.annotations().contains_key(CLEANUP_HOOK) {
            remove_hook(machines_api, &name).await?;
        }
        if machine.metadata.deletion_timestamp.is_none() {
            write::delete(machines_api, &name).await?;
        }
    }
    if owned.is_empty() {
        return Ok(Next::AwaitChange);
    }
    report.deleting = Some(format!(
        "waiting for {} machines to be deleted",
        owned.len()
    ));
    Ok(Next::Requeue(poll))
}

/// What a pass found, for status and events.
struct Report {
    selector: String,
    outdated: Vec<Option<String>>,
    initialized: bool,
    certificates: Result<(), String>,
    waiting: Option<String>,
    deleting: Option<String>,
    paused: bool,
    remediating: Option<String>,
    last_remediation: Option<RemediationData>,
    /// Per machine, in the machines' order: its components' and etcd member's judgements (empty
    /// when not judged this pass).
    components: Vec<Vec<Judgement>>,
    events: Vec<EventNote>,
}

impl Report {
    fn new(selector: &str) -> Self {
        Self {
            selector: selector.to_string(),
            outdated: Vec::new(),
            initialized: false,
            certificates: Ok(()),
            waiting: None,
            deleting: None,
            paused: false,
            remediating: None,
            last_remediation: None,
            components: Vec::new(),
            events: Vec::new(),
        }
    }

    /// The judgements of machine `i` (none when it was not judged).
    fn judged(&self, i: usize) -> &[Judgement] {
        self.components
            .get(i)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    fn event(&mut self, warning: bool, reason: &'static str, note: String) {
        tracing::info!(reason, %note);
        self.events.push(EventNote {
            warning,
            reason,
            note,
        });
    }

    async fn write(
        &self,
        kcps: &Api<KubeadmControlPlane>,
        kcp: &KubeadmControlPlane,
        owned: &[Machine],
        etcd: Option<&EtcdView>,
        context: &Context<ControlPlaneController>,
    ) -> Result<(), kube::Error> {
        let facts: Vec<MachineFacts> = owned
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let up_to_date = self.outdated.get(i).is_none_or(Option::is_none);
                machines::facts(m, up_to_date, None, self.judged(i))
            })
            .collect();
        let outdated: Vec<Option<String>> = (0..owned.len())
            .map(|i| self.outdated.get(i).cloned().flatten())
            .collect();
        let conditions = |m: &Machine| {
            m.status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default()
        };
        let ready: Vec<(bool, bool)> = owned
            .iter()
            .map(|m| {
                let c = conditions(m);
                (
                    condition::is_true(&c, condition::READY),
                    condition::is_true(&c, condition::AVAILABLE),
                )
            })
            .collect();
        let nodes: Vec<(Option<&str>, bool)> = owned
            .iter()
            .map(|m| {
                (
                    node_name(m),
                    condition::is_true(&conditions(m), condition::NODE_READY),
                )
            })
            .collect();
        let versions: Vec<Option<String>> = owned.iter().map(|m| m.spec.version.clone()).collect();
        let etcd = etcd.map(|view| match view {
            Ok((_, status)) => Ok(status),
            Err(why) => Err(why.as_str()),
        });
        let observation = Observation {
            generation: kcp.metadata.generation,
            replicas: usize::try_from(kcp.spec.replicas.unwrap_or(1)).unwrap_or(0),
            selector: &self.selector,
            versions: &versions,
            machines: &facts,
            ready: &ready,
            outdated: &outdated,
            nodes: &nodes,
            etcd,
            initialized: self.initialized,
            certificates: self
                .certificates
                .as_ref()
                .map(|_| ())
                .map_err(String::as_str),
            waiting: self.waiting.as_deref(),
            deleting: self.deleting.as_deref(),
            paused: self.paused,
            remediating: self.remediating.as_deref(),
            last_remediation: self.last_remediation.as_ref(),
            components: &self.components,
        };
        let desired = status::compute(kcp.status.as_ref(), &observation);
        write::patch_status_if_changed(kcps, &kcp.name_any(), kcp.status.as_ref(), &desired)
            .await?;
        write::publish(&context.recorder, kcp, &self.events).await;
        Ok(())
    }
}
