//! The remediation phase of a pass: gathers the machines a health check marked, lets
//! [`remediation::decide`] choose, and carries the decision out — the machine's
//! `OwnerRemediated` condition says what happens to it, a remediated machine is deleted (its etcd
//! member leaves through the pre-terminate hook like any other) and the control plane records the
//! attempt in its remediation-in-progress annotation, which the replacement inherits.

use capi_core::api::Machine;
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use capi_runtime::cache::Expectations;
use capi_runtime::{ReconcileError, write};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::machines::node_name;
use crate::api::KubeadmControlPlane;
use crate::etcd::EtcdClusterStatus;
use crate::quorum::{self, Change};
use crate::remediation::{
    self, Candidate, ControlPlaneState, Decision, FOR_ANNOTATION, IN_PROGRESS_ANNOTATION,
    MACHINE_DELETING, Policy, RemediationData,
};
use crate::scale::MachineFacts;

/// `HealthCheckSucceeded`, written by a MachineHealthCheck.
const HEALTH_CHECK_SUCCEEDED: &str = condition::HEALTH_CHECK_SUCCEEDED;
/// `OwnerRemediated`: a MachineHealthCheck sets it `False` for the owner to act; the owner says
/// in it what it does.
const OWNER_REMEDIATED: &str = "OwnerRemediated";

/// What the phase found and did.
pub(super) struct Outcome {
    /// A machine was deleted for remediation: the pass ends here.
    pub(super) remediated: Option<String>,
    /// For the `Remediating` condition, when machines are marked.
    pub(super) remediating: Option<String>,
    /// For `status.lastRemediation`.
    pub(super) last: Option<RemediationData>,
    /// The remediation in progress (not stale): the next machine created replaces its machine.
    pub(super) in_progress: Option<RemediationData>,
}

/// Marked by a MachineHealthCheck for its owner to replace.
fn marked(machine: &Machine) -> bool {
    machine.status.as_ref().is_some_and(|s| {
        condition::status(&s.conditions, HEALTH_CHECK_SUCCEEDED) == Some(ConditionStatus::False)
            && condition::status(&s.conditions, OWNER_REMEDIATED) == Some(ConditionStatus::False)
    })
}

/// The remediation the control plane records as in progress, if its annotation is valid.
pub(super) fn in_progress(kcp: &KubeadmControlPlane) -> Option<RemediationData> {
    kcp.annotations()
        .get(IN_PROGRESS_ANNOTATION)
        .and_then(|v| RemediationData::parse(v))
}

/// Removes the control plane's remediation-in-progress annotation.
pub(super) async fn clear_in_progress(
    kcps: &Api<KubeadmControlPlane>,
    kcp: &KubeadmControlPlane,
) -> Result<(), kube::Error> {
    if !kcp.annotations().contains_key(IN_PROGRESS_ANNOTATION) {
        return Ok(());
    }
    let patch = json!({"metadata": {"annotations": {IN_PROGRESS_ANNOTATION: null}}});
    write::patch(kcps, &kcp.name_any(), patch).await
}

/// Where the phase writes.
pub(super) struct Writes<'a> {
    pub(super) kcps: &'a Api<KubeadmControlPlane>,
    pub(super) machines: &'a Api<Machine>,
    /// Records the machine it deletes, before the delete is sent.
    pub(super) expectations: &'a Expectations,
}

/// Runs the phase.
pub(super) async fn remediate(
    kcp: &KubeadmControlPlane,
    owned: &[Machine],
    facts: &[MachineFacts],
    etcd: Option<Result<&EtcdClusterStatus, &str>>,
    initialized: bool,
    writes: Writes<'_>,
) -> Result<Outcome, ReconcileError> {
    let Writes {
        kcps,
        machines: machines_api,
        expectations,
    } = writes;
    let mut running = in_progress(kcp);
    if kcp.annotations().contains_key(IN_PROGRESS_ANNOTATION) {
        // Stale once a machine newer than the remediation exists (a crash after creating the
        // replacement), or unreadable: either way it would block remediation for good.
        let stale = running.as_ref().is_none_or(|r| {
            owned.iter().any(|m| {
                m.metadata
                    .creation_timestamp
                    .as_ref()
                    .is_some_and(|t| t.0 > r.timestamp)
            })
        });
        if stale {
            clear_in_progress(kcps, kcp).await?;
            running = None;
        }
    }
    let last = running.clone().or_else(|| {
        owned
            .iter()
            .filter_map(|m| RemediationData::parse(m.annotations().get(FOR_ANNOTATION)?))
            .max_by_key(|d| d.timestamp)
    });

    let candidates: Vec<Candidate> = owned
        .iter()
        .zip(facts)
        .filter(|(m, _)| marked(m))
        .map(|(m, f)| {
            let member_unhealthy = match (etcd, node_name(m)) {
                (Some(Ok(status)), Some(node)) => status.member(node).is_some_and(|m| !m.healthy),
                _ => false,
            };
            Candidate {
                name: m.name_any(),
                created: f.created,
                remediate_annotation: m.annotations().contains_key(labels::REMEDIATE_MACHINE),
                has_node: node_name(m).is_some(),
                member_unhealthy,
                components_failing: f.components_failing,
                deleting: f.deleting,
                remediation_for: m
                    .annotations()
                    .get(FOR_ANNOTATION)
                    .and_then(|v| RemediationData::parse(v)),
            }
        })
        .collect();
    let in_progress = running.clone();
    let state = ControlPlaneState {
        initialized,
        machines: owned.len(),
        provisioning: owned
            .iter()
            .find(|m| {
                !marked(m) && m.metadata.deletion_timestamp.is_none() && node_name(m).is_none()
            })
            .map(ResourceExt::name_any),
        deleting: owned
            .iter()
            .find(|m| m.metadata.deletion_timestamp.is_some())
            .map(ResourceExt::name_any),
        in_progress: running,
    };
    let safe = |candidate: &Candidate| safe_without(candidate, owned, facts, etcd);
    let decision = remediation::decide(
        &candidates,
        &state,
        &Policy::of(kcp.spec.remediation.as_ref()),
        jiff::Timestamp::now(),
        safe,
    );
    let find = |name: &str| owned.iter().find(|m| m.name_any() == name);
    let mut outcome = Outcome {
        remediated: None,
        remediating: None,
        last,
        in_progress,
    };
    match decision {
        Decision::Nothing => {}
        Decision::InProgress(what) => outcome.remediating = Some(what),
        Decision::Hold {
            machine,
            reason,
            message,
        } => {
            if let Some(m) = find(&machine) {
                owner_remediated(machines_api, m, reason, &message).await?;
            }
            outcome.remediating = Some(format!("machine {machine} is not remediated: {message}"));
        }
        Decision::Remediate { machine, record } => {
            if let Some(m) = find(&machine) {
                owner_remediated(
                    machines_api,
                    m,
                    MACHINE_DELETING,
                    "the machine is being deleted to be replaced",
                )
                .await?;
            }
            expectations.deleted(&kcp.uid().unwrap_or_default(), &machine);
            write::delete(machines_api, &machine).await?;
            // After the deletion: a crash in between costs the retry count, never a latch.
            let patch = json!({"metadata": {"annotations": {
                IN_PROGRESS_ANNOTATION: record.to_annotation(),
            }}});
            write::patch(kcps, &kcp.name_any(), patch).await?;
            outcome.remediating = Some(format!("replacing unhealthy machine {machine}"));
            outcome.last = Some(record);
            outcome.remediated = Some(machine);
        }
    }
    Ok(outcome)
}

/// Whether the control plane stays operational without `candidate`'s machine: another machine
/// runs healthy components, and etcd keeps its quorum without its member.
fn safe_without(
    candidate: &Candidate,
    owned: &[Machine],
    facts: &[MachineFacts],
    etcd: Option<Result<&EtcdClusterStatus, &str>>,
) -> Result<(), Option<String>> {
    if !facts.iter().any(|f| f.name != candidate.name && f.healthy) {
        return Err(Some(
            "no other machine runs healthy control plane components and a healthy etcd member"
                .into(),
        ));
    }
    let Some(node) = owned
        .iter()
        .find(|m| m.name_any() == candidate.name)
        .and_then(node_name)
    else {
        return Ok(());
    };
    let status = match etcd {
        None => return Ok(()),
        Some(Err(_)) => return Err(None),
        Some(Ok(status)) => status,
    };
    if status.member(node).is_none() {
        return Ok(());
    }
    let members = status.quorum_members(|n| n.to_string());
    if quorum::safe(&members, Change::Remove(node)) {
        Ok(())
    } else {
        let voting = members.iter().filter(|m| !m.learner).count();
        let healthy = members
            .iter()
            .filter(|m| !m.learner && m.healthy && m.name != node)
            .count();
        Err(Some(format!(
            "removing its etcd member would lose etcd's quorum: {healthy} healthy of {} voting members would remain",
            voting.saturating_sub(1)
        )))
    }
}

/// Sets the machine's `OwnerRemediated=False` with `reason` and `message`, when it says otherwise.
async fn owner_remediated(
    machines_api: &Api<Machine>,
    machine: &Machine,
    reason: &str,
    message: &str,
) -> Result<(), kube::Error> {
    let mut conditions = machine
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let changed = condition::set(
        &mut conditions,
        DesiredCondition::new(OWNER_REMEDIATED, ConditionStatus::False, reason)
            .message(message)
            .observed_generation(machine.metadata.generation),
    );
    if changed {
        write::patch_status_guarded(machines_api, machine, json!({"conditions": conditions}))
            .await?;
    }
    Ok(())
}
