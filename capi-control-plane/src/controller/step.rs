//! The one step of a rollout a pass takes, as [`crate::rollout::next_step`] decides it: create a
//! machine (the first runs `kubeadm init`), hand etcd leadership over and delete a machine, or
//! wait. A control plane whose etcd cannot be read waits.

use capi_core::api::Cluster;
use capi_runtime::plan::Next;
use capi_runtime::{ReconcileError, write};
use kube::ResourceExt;

use super::machines::{self, node_name};
use super::membership::controller_error;
use super::reconcile::Scope;
use super::remediate;
use super::report::events;
use crate::api::KubeadmControlPlane;
use crate::etcd::EtcdClusterStatus;
use crate::rollout::{self, Step};

/// Decides the step from the machines, etcd's members and leader, and the cluster's failure
/// domains, and takes it; what the pass waits for is recorded on the status. Returns what comes
/// next: a resync only when nothing is left to do and etcd is healthy.
pub(super) async fn take_next_step(
    scope: &mut Scope<'_>,
    cluster: &Cluster,
) -> Result<Next, ReconcileError> {
    let step = next_step(scope, cluster);
    tracing::debug!(?step, "next step");
    let (kcp, poll) = (scope.kcp, scope.poll());
    let etcd_status = scope
        .etcd
        .as_ref()
        .and_then(|e| e.as_ref().ok())
        .map(|(_, s)| s);
    let next = match step {
        Step::Initialize { failure_domain } | Step::ScaleUp { failure_domain } => {
            let init = scope.owned.is_empty() && !scope.initialized;
            match machines::machine_name(kcp, &scope.cluster_name) {
                Ok(name) => {
                    let new = machines::NewMachine {
                        name: &name,
                        failure_domain: failure_domain.clone(),
                        init,
                        remediation_for: scope.remediation_in_progress.as_ref(),
                    };
                    machines::create(kcp, cluster, &new, &scope.context.client, scope.state())
                        .await?;
                    scope.created = true;
                    // The replacement carries the remediation on: it is no longer in progress.
                    if scope.remediation_in_progress.is_some() {
                        remediate::clear_in_progress(&scope.kcps, kcp).await?;
                    }
                    let role = if init {
                        "kubeadm init"
                    } else {
                        "kubeadm join --control-plane"
                    };
                    let place = failure_domain
                        .map(|d| format!(" in failure domain {d}"))
                        .unwrap_or_default();
                    scope.report.event(
                        false,
                        events::MACHINE_CREATED,
                        format!("created machine {name} ({role}){place}"),
                    );
                    Next::Requeue(poll)
                }
                Err(why) => {
                    scope.report.event(true, events::INVALID, why.clone());
                    scope.waiting.push(why);
                    Next::InvalidConfiguration
                }
            }
        }
        Step::ScaleDown {
            machine,
            move_leadership_to,
        } => {
            if let (Some(to), Some(Ok((etcd, status)))) = (&move_leadership_to, &scope.etcd)
                && let Some(member) = scope
                    .owned
                    .iter()
                    .find(|m| m.name_any() == *to)
                    .and_then(node_name)
                    .and_then(|node| status.member(node))
            {
                etcd.move_leader(member.id)
                    .await
                    .map_err(controller_error)?;
                scope.report.event(
                    false,
                    events::LEADERSHIP_MOVED,
                    format!(
                        "moved etcd leadership to {} before deleting machine {machine}",
                        member.name
                    ),
                );
            }
            scope
                .state()
                .expectations
                .deleted(&kcp.uid().unwrap_or_default(), &machine);
            write::delete(&scope.machines, &machine).await?;
            scope.report.event(
                false,
                events::MACHINE_DELETED,
                format!("deleted machine {machine}"),
            );
            Next::Requeue(poll)
        }
        Step::Wait(why) => {
            scope.waiting.push(why);
            Next::Requeue(poll)
        }
        Step::Done if scope.waiting.is_empty() && etcd_status.is_some_and(healthy) => Next::Resync,
        Step::Done => Next::Requeue(poll),
    };
    if !scope.waiting.is_empty() {
        scope.report.waiting = Some(scope.waiting.join("; "));
    }
    Ok(next)
}

/// The step [`rollout::next_step`] decides, unless the control plane was initialised and etcd
/// cannot be read: then it waits.
fn next_step(scope: &Scope<'_>, cluster: &Cluster) -> Step {
    let (kcp, owned) = (scope.kcp, &scope.owned);
    let etcd_status = scope
        .etcd
        .as_ref()
        .and_then(|e| e.as_ref().ok())
        .map(|(_, s)| s);
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
    if scope.initialized && etcd_status.is_none() && !owned.is_empty() {
        Step::Wait(match &scope.etcd {
            Some(Err(why)) => format!("etcd cannot be read: {why}"),
            _ => "etcd cannot be read".into(),
        })
    } else {
        rollout::next_step(&rollout::Observed {
            replicas,
            max_surge,
            failure_domains: &domains,
            machines: &scope.facts,
            members: &members,
            leader: leader.as_deref(),
        })
    }
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
