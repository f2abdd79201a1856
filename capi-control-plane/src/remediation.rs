//! Remediation of control-plane machines that a MachineHealthCheck marked unhealthy
//! (`HealthCheckSucceeded=False` and `OwnerRemediated=False`), with upstream Cluster API's safety
//! rules, as pure decisions:
//!
//! - **one at a time**: while a remediation is in progress (the control plane's
//!   [`IN_PROGRESS_ANNOTATION`], until the replacement machine exists) nothing else is remediated,
//!   and a machine being deleted is not remediated again;
//! - **which machine first** ([`pick`]): one carrying `cluster.x-k8s.io/remediate-machine`, then
//!   one without a node (its provisioning failed), then one whose etcd member is unhealthy, then
//!   one whose components fail, then the oldest;
//! - **retries** ([`check_retries`]): a replacement that turns unhealthy within
//!   `minHealthyPeriodSeconds` (default 3600) of its predecessor's remediation continues that
//!   sequence — it waits `retryPeriodSeconds` after the last attempt and stops after `maxRetry`
//!   attempts; later, a new sequence starts;
//! - **never at the cost of the control plane** (once initialized): not with one machine or fewer,
//!   not while another machine is still provisioning or being deleted, not when etcd cannot be
//!   read, and not when removing the machine's etcd member would lose the quorum or no other
//!   machine would run healthy components.
//!
//! A refusal names its reason (`CannotBeRemediated` when it cannot happen as things stand,
//! `RemediationDeferred` when it waits for something to pass), which the controller writes to the
//! machine's `OwnerRemediated` condition and the control plane's `Remediating` condition.

use serde::{Deserialize, Serialize};

use crate::api::KubeadmControlPlaneRemediationSpec;

/// On the control plane while a remediation is in progress: the [`RemediationData`] of the
/// machine being replaced, as JSON. Removed once the replacement exists.
pub const IN_PROGRESS_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/remediation-in-progress";
/// On a machine created to replace a remediated one: the [`RemediationData`] of that remediation.
pub const FOR_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/remediation-for";
/// `minHealthyPeriodSeconds` when the spec does not say.
pub const DEFAULT_MIN_HEALTHY_PERIOD_SECONDS: i64 = 3600;

/// Reason: the machine cannot be remediated as things stand.
pub const CANNOT_BE_REMEDIATED: &str = "CannotBeRemediated";
/// Reason: the remediation waits for something to pass.
pub const REMEDIATION_DEFERRED: &str = "RemediationDeferred";
/// Reason: the machine is being deleted to be replaced.
pub const MACHINE_DELETING: &str = "MachineDeleting";

/// One remediation, as upstream records it in [`IN_PROGRESS_ANNOTATION`] and [`FOR_ANNOTATION`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemediationData {
    /// The machine remediated.
    pub machine: String,
    /// When (RFC 3339, whole seconds, UTC).
    pub timestamp: jiff::Timestamp,
    /// How many retries of this sequence preceded it (0 for the first attempt).
    pub retry_count: i32,
}

impl RemediationData {
    /// Parses an annotation's value; `None` when it is not valid.
    pub fn parse(value: &str) -> Option<Self> {
        serde_json::from_str(value).ok()
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        // Three plain fields: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// `spec.remediation` with upstream's defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// At most this many retries of one sequence; unlimited when `None`.
    pub max_retry: Option<i32>,
    /// Seconds between two attempts of one sequence.
    pub retry_period_seconds: i64,
    /// A replacement healthy for this long ends its sequence.
    pub min_healthy_period_seconds: i64,
}

impl Policy {
    /// The policy `spec` asks for.
    pub fn of(spec: Option<&KubeadmControlPlaneRemediationSpec>) -> Self {
        Self {
            max_retry: spec.and_then(|s| s.max_retry),
            retry_period_seconds: spec
                .and_then(|s| s.retry_period_seconds)
                .map_or(0, i64::from),
            min_healthy_period_seconds: spec
                .and_then(|s| s.min_healthy_period_seconds)
                .map_or(DEFAULT_MIN_HEALTHY_PERIOD_SECONDS, i64::from),
        }
    }
}

/// A machine marked for remediation, as the decisions see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The Machine's name.
    pub name: String,
    /// Creation time, seconds since the epoch.
    pub created: i64,
    /// Carries `cluster.x-k8s.io/remediate-machine` (a user asked).
    pub remediate_annotation: bool,
    /// Has a node.
    pub has_node: bool,
    /// Its etcd member is reported unhealthy.
    pub member_unhealthy: bool,
    /// Its node or components are reported failing.
    pub components_failing: bool,
    /// Being deleted.
    pub deleting: bool,
    /// Its [`FOR_ANNOTATION`], when it replaced a remediated machine.
    pub remediation_for: Option<RemediationData>,
}

/// The machine to remediate first among `candidates`.
pub fn pick(candidates: &[Candidate]) -> Option<&Candidate> {
    candidates.iter().min_by_key(|c| {
        (
            !c.remediate_annotation,
            c.has_node,
            !c.member_unhealthy,
            !c.components_failing,
            c.created,
            c.name.clone(),
        )
    })
}

/// Why a machine is not remediated now: `(reason, message)`.
pub type Hold = (&'static str, String);

/// Whether the retry rules let `candidate` be remediated at `now` (seconds since the epoch), and
/// if so the record of this attempt.
pub fn check_retries(
    policy: &Policy,
    candidate: &Candidate,
    now: jiff::Timestamp,
) -> Result<RemediationData, Hold> {
    let now = jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
    let mut attempt = RemediationData {
        machine: candidate.name.clone(),
        timestamp: now,
        retry_count: 0,
    };
    let Some(last) = &candidate.remediation_for else {
        return Ok(attempt);
    };
    let since = now.as_second() - last.timestamp.as_second();
    if since >= policy.min_healthy_period_seconds {
        // The replacement stayed healthy long enough: a new sequence.
        return Ok(attempt);
    }
    attempt.retry_count = last.retry_count;
    if since < policy.retry_period_seconds {
        return Err((
            REMEDIATION_DEFERRED,
            format!(
                "the remediation of {} failed {since}s ago; retryPeriodSeconds is {}",
                last.machine, policy.retry_period_seconds
            ),
        ));
    }
    if let Some(max) = policy.max_retry
        && attempt.retry_count >= max
    {
        return Err((
            CANNOT_BE_REMEDIATED,
            format!(
                "remediation already failed {} times (maxRetry {max}); fix the cause and delete the machine by hand",
                attempt.retry_count
            ),
        ));
    }
    attempt.retry_count += 1;
    Ok(attempt)
}

/// What the rest of the control plane looks like, for the safety rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlaneState {
    /// The control plane is initialized (the safety rules apply only then).
    pub initialized: bool,
    /// How many machines the control plane has.
    pub machines: usize,
    /// A machine not marked for remediation still has no node.
    pub provisioning: Option<String>,
    /// A machine is being deleted.
    pub deleting: Option<String>,
    /// Another remediation is in progress.
    pub in_progress: Option<RemediationData>,
}

/// What to do about the machines marked for remediation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No machine is marked.
    Nothing,
    /// The machine first in line is already being deleted, or another remediation is in
    /// progress: nothing to do until it completes.
    InProgress(String),
    /// `machine` is not remediated now, for this reason.
    Hold {
        /// The machine first in line.
        machine: String,
        /// `CannotBeRemediated` or `RemediationDeferred`.
        reason: &'static str,
        /// What a user reads.
        message: String,
    },
    /// Delete `machine`; the scale-up that follows creates its replacement carrying `record`.
    Remediate {
        /// The machine to delete.
        machine: String,
        /// This attempt, for [`IN_PROGRESS_ANNOTATION`].
        record: RemediationData,
    },
}

/// Decides about `candidates` (machines marked for remediation). `safe` answers, for the machine
/// in line, whether the control plane stays operational without it: `Ok(())`, or why not
/// (`Err(None)` when etcd cannot be read, to defer).
pub fn decide(
    candidates: &[Candidate],
    state: &ControlPlaneState,
    policy: &Policy,
    now: jiff::Timestamp,
    safe: impl FnOnce(&Candidate) -> Result<(), Option<String>>,
) -> Decision {
    let Some(first) = pick(candidates) else {
        return Decision::Nothing;
    };
    if first.deleting {
        return Decision::InProgress(format!("machine {} is being deleted", first.name));
    }
    if let Some(running) = &state.in_progress {
        return Decision::InProgress(format!(
            "the remediation of machine {} is in progress",
            running.machine
        ));
    }
    let hold = |(reason, message): Hold| Decision::Hold {
        machine: first.name.clone(),
        reason,
        message,
    };
    let record = match check_retries(policy, first, now) {
        Ok(record) => record,
        Err(why) => return hold(why),
    };
    if state.initialized {
        if state.machines <= 1 {
            return hold((
                CANNOT_BE_REMEDIATED,
                "a control plane of one machine cannot be remediated: it would lose etcd and the API server; scale it up first or replace the machine by hand".into(),
            ));
        }
        if let Some(machine) = &state.provisioning {
            return hold((
                REMEDIATION_DEFERRED,
                format!("waiting for machine {machine} to finish provisioning"),
            ));
        }
        if let Some(machine) = &state.deleting {
            return hold((
                REMEDIATION_DEFERRED,
                format!("waiting for the deletion of machine {machine} to complete"),
            ));
        }
        match safe(first) {
            Ok(()) => {}
            Err(None) => {
                return hold((
                    REMEDIATION_DEFERRED,
                    "etcd cannot be read to check that remediation keeps its quorum".into(),
                ));
            }
            Err(Some(why)) => return hold((CANNOT_BE_REMEDIATED, why)),
        }
    }
    Decision::Remediate {
        machine: first.name.clone(),
        record,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(second).unwrap()
    }

    fn candidate(name: &str, created: i64) -> Candidate {
        Candidate {
            name: name.into(),
            created,
            remediate_annotation: false,
            has_node: true,
            member_unhealthy: false,
            components_failing: false,
            deleting: false,
            remediation_for: None,
        }
    }

    fn three_machines() -> ControlPlaneState {
        ControlPlaneState {
            initialized: true,
            machines: 3,
            provisioning: None,
            deleting: None,
            in_progress: None,
        }
    }

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn the_most_broken_machine_goes_first_then_the_oldest() {
        let mut a = candidate("a", 1);
        let mut b = candidate("b", 2);
        assert_eq!(pick(&[b.clone(), a.clone()]).unwrap().name, "a");
        b.components_failing = true;
        assert_eq!(pick(&[a.clone(), b.clone()]).unwrap().name, "b");
        a.member_unhealthy = true;
        assert_eq!(pick(&[a.clone(), b.clone()]).unwrap().name, "a");
        b.has_node = false;
        assert_eq!(pick(&[a.clone(), b.clone()]).unwrap().name, "b");
        a.remediate_annotation = true;
        assert_eq!(pick(&[a, b]).unwrap().name, "a");
    }

    #[test]
    fn one_at_a_time() {
        let state = ControlPlaneState {
            in_progress: Some(RemediationData {
                machine: "a".into(),
                timestamp: at(NOW - 5),
                retry_count: 0,
            }),
            ..three_machines()
        };
        let decision = decide(
            &[candidate("b", 1)],
            &state,
            &Policy::of(None),
            at(NOW),
            |_| Ok(()),
        );
        assert!(matches!(decision, Decision::InProgress(_)), "{decision:?}");
        let mut deleting = candidate("a", 1);
        deleting.deleting = true;
        let decision = decide(
            &[deleting],
            &three_machines(),
            &Policy::of(None),
            at(NOW),
            |_| Ok(()),
        );
        assert!(matches!(decision, Decision::InProgress(_)), "{decision:?}");
    }

    #[test]
    fn refused_when_it_would_lose_quorum_and_with_a_single_machine() {
        let decision = decide(
            &[candidate("a", 1)],
            &three_machines(),
            &Policy::of(None),
            at(NOW),
            |_| Err(Some("etcd would lose its quorum".into())),
        );
        assert_eq!(
            decision,
            Decision::Hold {
                machine: "a".into(),
                reason: CANNOT_BE_REMEDIATED,
                message: "etcd would lose its quorum".into()
            }
        );
        let single = ControlPlaneState {
            machines: 1,
            ..three_machines()
        };
        let decision = decide(
            &[candidate("a", 1)],
            &single,
            &Policy::of(None),
            at(NOW),
            |_| Ok(()),
        );
        assert!(
            matches!(
                decision,
                Decision::Hold {
                    reason: CANNOT_BE_REMEDIATED,
                    ..
                }
            ),
            "{decision:?}"
        );
        // Before the control plane is initialized (the first machine failed), it is replaced.
        let first = ControlPlaneState {
            initialized: false,
            ..single
        };
        let decision = decide(
            &[candidate("a", 1)],
            &first,
            &Policy::of(None),
            at(NOW),
            |_| Err(Some("unused".into())),
        );
        assert!(
            matches!(decision, Decision::Remediate { .. }),
            "{decision:?}"
        );
    }

    #[test]
    fn deferred_while_another_machine_provisions_or_is_deleted_or_etcd_is_unreadable() {
        for state in [
            ControlPlaneState {
                provisioning: Some("c".into()),
                ..three_machines()
            },
            ControlPlaneState {
                deleting: Some("c".into()),
                ..three_machines()
            },
        ] {
            let decision = decide(
                &[candidate("a", 1)],
                &state,
                &Policy::of(None),
                at(NOW),
                |_| Ok(()),
            );
            assert!(
                matches!(
                    decision,
                    Decision::Hold {
                        reason: REMEDIATION_DEFERRED,
                        ..
                    }
                ),
                "{decision:?}"
            );
        }
        let decision = decide(
            &[candidate("a", 1)],
            &three_machines(),
            &Policy::of(None),
            at(NOW),
            |_| Err(None),
        );
        assert!(
            matches!(
                decision,
                Decision::Hold {
                    reason: REMEDIATION_DEFERRED,
                    ..
                }
            ),
            "{decision:?}"
        );
    }

    #[test]
    fn retries_follow_min_healthy_period_retry_period_and_max_retry() {
        let policy = Policy::of(Some(&KubeadmControlPlaneRemediationSpec {
            max_retry: Some(2),
            retry_period_seconds: Some(60),
            min_healthy_period_seconds: Some(600),
        }));
        let mut replacement = candidate("b", 2);
        replacement.remediation_for = Some(RemediationData {
            machine: "a".into(),
            timestamp: at(NOW - 30),
            retry_count: 0,
        });
        // Within the retry period: deferred.
        assert!(matches!(
            check_retries(&policy, &replacement, at(NOW)),
            Err((REMEDIATION_DEFERRED, _))
        ));
        // After it: the first retry.
        let record = check_retries(&policy, &replacement, at(NOW + 31)).unwrap();
        assert_eq!((record.machine.as_str(), record.retry_count), ("b", 1));
        // After maxRetry retries: refused.
        replacement.remediation_for.as_mut().unwrap().retry_count = 2;
        assert!(matches!(
            check_retries(&policy, &replacement, at(NOW + 31)),
            Err((CANNOT_BE_REMEDIATED, _))
        ));
        // Healthy for longer than minHealthyPeriod: a new sequence.
        let record = check_retries(&policy, &replacement, at(NOW + 600)).unwrap();
        assert_eq!(record.retry_count, 0);
    }

    #[test]
    fn defaults_are_upstreams() {
        let policy = Policy::of(None);
        assert_eq!(policy.min_healthy_period_seconds, 3600);
        assert_eq!(policy.retry_period_seconds, 0);
        assert_eq!(policy.max_retry, None);
    }

    #[test]
    fn the_annotation_reads_as_upstream_writes_it() {
        let data = RemediationData::parse(
            r#"{"machine":"cp-abc","timestamp":"2026-11-23T10:00:00Z","retryCount":2}"#,
        )
        .unwrap();
        assert_eq!(data.machine, "cp-abc");
        assert_eq!(data.retry_count, 2);
        assert_eq!(
            data.to_annotation(),
            r#"{"machine":"cp-abc","timestamp":"2026-11-23T10:00:00Z","retryCount":2}"#
        );
        assert_eq!(RemediationData::parse("not json"), None);
    }
}
