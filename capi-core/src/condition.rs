//! `metav1.Condition` helpers that make status writes deterministic.
//!
//! Controllers call [`set`] (or [`mark_true`], [`mark_false`], [`mark_unknown`]) every pass. The
//! helpers guarantee:
//!
//! - `lastTransitionTime` changes only when `status` changes, so a pass that finds nothing new
//!   leaves the list byte-for-byte identical and a status write can be skipped;
//! - every call reports whether anything changed;
//! - the order of the list is stable: an existing condition keeps its place, a new one is appended;
//! - what is written always passes the CRD's validation: an invalid reason is cleaned up and an
//!   over-long message is truncated, instead of the API server rejecting the whole status write.
//!
//! ```
//! use capi_core::condition::{self, ConditionStatus};
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
//!
//! let mut conditions: Vec<Condition> = Vec::new();
//! assert!(condition::mark_false(&mut conditions, condition::READY, "WaitingForBootstrapData", "no data yet", Some(1)));
//! let first = condition::get(&conditions, condition::READY).unwrap().last_transition_time.clone();
//!
//! // The same facts again: nothing changes.
//! assert!(!condition::mark_false(&mut conditions, condition::READY, "WaitingForBootstrapData", "no data yet", Some(1)));
//!
//! // A new generation: observedGeneration moves, lastTransitionTime does not.
//! assert!(condition::mark_false(&mut conditions, condition::READY, "WaitingForBootstrapData", "no data yet", Some(2)));
//! assert_eq!(condition::get(&conditions, condition::READY).unwrap().last_transition_time, first);
//! assert_eq!(condition::status(&conditions, condition::READY), Some(ConditionStatus::False));
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The object is ready for use: the summary of all its other conditions.
pub const READY: &str = "Ready";
/// The object is available: ready for at least `minReadySeconds` (machines) or enough of its
/// replicas are (sets, deployments, clusters).
pub const AVAILABLE: &str = "Available";
/// Reconciliation is paused (annotation or `Cluster.spec.paused`).
pub const PAUSED: &str = "Paused";
/// The infrastructure object reports itself provisioned.
pub const INFRASTRUCTURE_READY: &str = "InfrastructureReady";
/// A Cluster's control plane can be reached (its first control plane machine is up).
pub const CONTROL_PLANE_INITIALIZED: &str = "ControlPlaneInitialized";
/// The bootstrap config produced its data Secret.
pub const BOOTSTRAP_CONFIG_READY: &str = "BootstrapConfigReady";
/// The machine's node is ready.
pub const NODE_READY: &str = "NodeReady";
/// The machine passes its health checks.
pub const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
/// The object is being deleted; the reason tells which step is running.
pub const DELETING: &str = "Deleting";
/// The object matches its spec; `False` lists what cannot be applied in place.
pub const UP_TO_DATE: &str = "UpToDate";
/// A `MachineSet` or `MachineDeployment` can add replicas; `False` says what stops it (a selector
/// that does not select the template's labels). On a `MachinePool`: it has fewer instances than
/// it wants.
pub const SCALING_UP: &str = "ScalingUp";
/// A `MachinePool` has more instances than it wants and is removing some.
pub const SCALING_DOWN: &str = "ScalingDown";
/// A `MachineHealthCheck` may remediate now.
pub const REMEDIATION_ALLOWED: &str = "RemediationAllowed";

/// The longest message the CRD schema accepts, in bytes.
pub const MAX_MESSAGE_LEN: usize = 32768;

/// The status of a condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// It is not known whether the condition holds.
    #[default]
    Unknown,
}

impl ConditionStatus {
    /// The wire form: `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }

    /// Parses the wire form; anything else is `None`.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "True" => Some(Self::True),
            "False" => Some(Self::False),
            "Unknown" => Some(Self::Unknown),
            _ => None,
        }
    }
}

/// A condition as a controller wants it to be; [`set`] adds the timestamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCondition {
    /// The condition type, e.g. [`READY`].
    pub type_: String,
    /// Its status.
    pub status: ConditionStatus,
    /// A CamelCase reason.
    pub reason: String,
    /// A message a user can act on; may be empty.
    pub message: String,
    /// The object's `metadata.generation` the condition was computed from.
    pub observed_generation: Option<i64>,
}

impl DesiredCondition {
    /// A condition of the given type, status and reason, with no message.
    pub fn new(
        type_: impl Into<String>,
        status: ConditionStatus,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: String::new(),
            observed_generation: None,
        }
    }

    /// Sets the message.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// Sets the observed generation.
    pub fn observed_generation(mut self, generation: Option<i64>) -> Self {
        self.observed_generation = generation;
        self
    }
}

/// The condition of the given type, if present.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The status of the condition of the given type; `None` when absent or not a valid status.
pub fn status(conditions: &[Condition], type_: &str) -> Option<ConditionStatus> {
    get(conditions, type_).and_then(|c| ConditionStatus::parse(&c.status))
}

/// Whether the condition of the given type is present and `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    status(conditions, type_) == Some(ConditionStatus::True)
}

/// Sets a condition, using the current time as `lastTransitionTime` if its status changes.
/// Returns whether the list changed.
pub fn set(conditions: &mut Vec<Condition>, desired: DesiredCondition) -> bool {
    set_at(conditions, desired, Time(jiff::Timestamp::now()))
}

/// [`set`] with an explicit clock, for deterministic tests and simulations.
///
/// `now` is used only when the condition is new or its status changes; otherwise reason, message
/// and observed generation are updated in place and the transition time is kept.
pub fn set_at(conditions: &mut Vec<Condition>, desired: DesiredCondition, now: Time) -> bool {
    let reason = clean_reason(&desired.reason, desired.status);
    let message = truncate_message(desired.message);
    let status = desired.status.as_str();
    match conditions.iter_mut().find(|c| c.type_ == desired.type_) {
        None => {
            conditions.push(Condition {
                type_: desired.type_,
                status: status.to_string(),
                reason,
                message,
                observed_generation: desired.observed_generation,
                last_transition_time: now,
            });
            true
        }
        Some(existing) => {
            let mut changed = false;
            if existing.status != status {
                existing.status = status.to_string();
                existing.last_transition_time = now;
                changed = true;
            }
            if existing.reason != reason {
                existing.reason = reason;
                changed = true;
            }
            if existing.message != message {
                existing.message = message;
                changed = true;
            }
            if existing.observed_generation != desired.observed_generation {
                existing.observed_generation = desired.observed_generation;
                changed = true;
            }
            changed
        }
    }
}

/// Sets the condition to `True` with the given reason and an empty message.
pub fn mark_true(
    conditions: &mut Vec<Condition>,
    type_: &str,
    reason: &str,
    observed_generation: Option<i64>,
) -> bool {
    set(
        conditions,
        DesiredCondition::new(type_, ConditionStatus::True, reason)
            .observed_generation(observed_generation),
    )
}

/// Sets the condition to `False` with a reason and a message a user can act on.
pub fn mark_false(
    conditions: &mut Vec<Condition>,
    type_: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
) -> bool {
    set(
        conditions,
        DesiredCondition::new(type_, ConditionStatus::False, reason)
            .message(message)
            .observed_generation(observed_generation),
    )
}

/// Sets the condition to `Unknown` with a reason and a message.
pub fn mark_unknown(
    conditions: &mut Vec<Condition>,
    type_: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
) -> bool {
    set(
        conditions,
        DesiredCondition::new(type_, ConditionStatus::Unknown, reason)
            .message(message)
            .observed_generation(observed_generation),
    )
}

/// Removes the condition of the given type. Returns whether it was present.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Makes `reason` match `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$` by dropping what does not fit;
/// an empty result becomes the status itself (`True`, `False`, `Unknown`).
fn clean_reason(reason: &str, status: ConditionStatus) -> String {
    let mut cleaned: String = reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        .skip_while(|c| !c.is_ascii_alphabetic())
        .take(1024)
        .collect();
    while cleaned.ends_with([',', ':']) {
        cleaned.pop();
    }
    if cleaned.is_empty() {
        status.as_str().to_string()
    } else {
        cleaned
    }
}

fn truncate_message(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_LEN {
        let mut end = MAX_MESSAGE_LEN;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(jiff::Timestamp::from_second(seconds).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
    }

    fn ready(status: ConditionStatus, reason: &str) -> DesiredCondition {
        DesiredCondition::new(READY, status, reason)
    }

    #[test]
    fn new_condition_is_appended_with_now() {
        let mut list = Vec::new();
        assert!(set_at(
            &mut list,
            ready(ConditionStatus::False, "Waiting"),
            at(10)
        ));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].status, "False");
        assert_eq!(list[0].last_transition_time, at(10));
    }

    #[test]
    fn same_condition_again_changes_nothing() {
        let mut list = Vec::new();
        set_at(
            &mut list,
            ready(ConditionStatus::False, "Waiting").message("m"),
            at(10),
        );
        let before = list.clone();
        assert!(!set_at(
            &mut list,
            ready(ConditionStatus::False, "Waiting").message("m"),
            at(99)
        ));
        assert_eq!(list, before);
    }

    #[test]
    fn status_change_moves_transition_time() {
        let mut list = Vec::new();
        set_at(&mut list, ready(ConditionStatus::False, "Waiting"), at(10));
        assert!(set_at(
            &mut list,
            ready(ConditionStatus::True, "Provisioned"),
            at(20)
        ));
        assert_eq!(list[0].last_transition_time, at(20));
        assert_eq!(list[0].reason, "Provisioned");
    }

    #[test]
    fn reason_message_or_generation_change_keeps_transition_time() {
        let mut list = Vec::new();
        set_at(&mut list, ready(ConditionStatus::False, "A"), at(10));
        assert!(set_at(
            &mut list,
            ready(ConditionStatus::False, "B"),
            at(20)
        ));
        assert!(set_at(
            &mut list,
            ready(ConditionStatus::False, "B").message("x"),
            at(30)
        ));
        assert!(set_at(
            &mut list,
            ready(ConditionStatus::False, "B")
                .message("x")
                .observed_generation(Some(4)),
            at(40)
        ));
        assert_eq!(list[0].last_transition_time, at(10));
        assert_eq!(list[0].observed_generation, Some(4));
    }

    #[test]
    fn order_is_stable() {
        let mut list = Vec::new();
        set_at(
            &mut list,
            DesiredCondition::new("B", ConditionStatus::True, "R"),
            at(1),
        );
        set_at(
            &mut list,
            DesiredCondition::new("A", ConditionStatus::True, "R"),
            at(1),
        );
        set_at(
            &mut list,
            DesiredCondition::new("B", ConditionStatus::False, "R"),
            at(2),
        );
        let types: Vec<_> = list.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["B", "A"]);
    }

    #[test]
    fn getters_read_status() {
        let mut list = Vec::new();
        assert!(!is_true(&list, READY));
        assert_eq!(status(&list, READY), None);
        set_at(&mut list, ready(ConditionStatus::True, "Ok"), at(1));
        assert!(is_true(&list, READY));
        assert!(remove(&mut list, READY));
        assert!(!remove(&mut list, READY));
    }

    #[test]
    fn invalid_reason_is_cleaned_not_rejected() {
        assert_eq!(
            clean_reason("Waiting For Data", ConditionStatus::False),
            "WaitingForData"
        );
        assert_eq!(clean_reason("  9lives", ConditionStatus::False), "lives");
        assert_eq!(
            clean_reason("Trailing,:", ConditionStatus::False),
            "Trailing"
        );
        assert_eq!(clean_reason("", ConditionStatus::Unknown), "Unknown");
        assert_eq!(clean_reason("!!!", ConditionStatus::True), "True");
    }

    #[test]
    fn long_message_is_truncated_on_a_char_boundary() {
        let message = "é".repeat(MAX_MESSAGE_LEN); // two bytes each
        let truncated = truncate_message(message);
        assert!(truncated.len() <= MAX_MESSAGE_LEN);
        assert!(truncated.chars().all(|c| c == 'é'));
    }

    #[test]
    fn condition_status_round_trips_its_wire_form() {
        for s in [
            ConditionStatus::True,
            ConditionStatus::False,
            ConditionStatus::Unknown,
        ] {
            assert_eq!(ConditionStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(ConditionStatus::parse("true"), None);
    }
}
