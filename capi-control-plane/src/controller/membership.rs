//! etcd membership: the view of etcd a pass reads, the members of departing machines let go
//! (after their node was drained, at the pre-terminate hook `kcp-cleanup`), and members that
//! belong to no machine removed — each only while etcd keeps its quorum.

use std::sync::Arc;

use capi_core::api::{Cluster, Machine};
use capi_core::condition;
use capi_runtime::ReconcileError;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::machines::node_name;
use super::reconcile::Scope;
use super::report::{Report, events};
use super::{CLEANUP_HOOK, ControlPlaneController};
use crate::etcd::{EtcdCluster, EtcdClusterStatus, EtcdError};
use crate::quorum::{self, Change};
use crate::scale::MachineFacts;

/// etcd as one pass saw it: the connection and what it said, or why it could not be read.
pub(super) type EtcdView = Result<(Arc<dyn EtcdCluster>, EtcdClusterStatus), String>;

pub(super) fn controller_error(error: EtcdError) -> ReconcileError {
    ReconcileError::Controller(Box::new(error))
}

/// Connects to the cluster's etcd and reads its status; reads only.
pub(super) async fn read_etcd(
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

/// Each departing machine's member lets go after its node was drained (see
/// [`release_member`]); what they wait for is noted in the scope.
pub(super) async fn release_departing_members(scope: &mut Scope<'_>) -> Result<(), ReconcileError> {
    for machine in scope
        .owned
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_some())
    {
        if let Some(why) = release_member(
            machine,
            &scope.owned,
            &scope.facts,
            scope.etcd.as_ref(),
            &scope.machines,
            &mut scope.report,
        )
        .await?
        {
            scope.waiting.push(why);
        }
    }
    Ok(())
}

/// A member whose machine is gone (a crash before its hook ran, a machine deleted by hand) is
/// removed, once every machine has a node and none is being deleted.
pub(super) async fn remove_stray_member(scope: &mut Scope<'_>) -> Result<(), ReconcileError> {
    if let Some(Ok((etcd, status))) = &scope.etcd
        && scope.owned.iter().all(|m| node_name(m).is_some())
        && scope.facts.iter().all(|f| !f.deleting)
    {
        remove_stray(
            etcd.as_ref(),
            status,
            &scope.owned,
            &scope.facts,
            &mut scope.report,
        )
        .await?;
    }
    Ok(())
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

/// Removes the pre-terminate hook from machine `name` (one already gone has none).
pub(super) async fn remove_hook(
    machines_api: &Api<Machine>,
    name: &str,
) -> Result<(), kube::Error> {
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
async fn remove_stray(
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
