//! A Machine's status from what one reconcile found: phase, conditions, node reference,
//! addresses. Pure, so that every combination is tested without an API server.

use std::time::Duration;

use capi_core::api::{
    MachineAddress, MachineInitializationStatus, MachineNodeReference, MachinePhase, MachineStatus,
};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use capi_runtime::pace::Change;
use capi_runtime::reasons;

/// `HealthCheckSucceeded`, written by the MachineHealthCheck controller.
pub(crate) const HEALTH_CHECK_SUCCEEDED: &str = condition::HEALTH_CHECK_SUCCEEDED;
/// `OwnerRemediated`, written by the MachineHealthCheck controller when remediation is due and
/// read by the MachineSet controller.
pub(crate) const OWNER_REMEDIATED: &str = "OwnerRemediated";

/// The state of one step of provisioning, as a condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) status: ConditionStatus,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

impl Step {
    pub(crate) fn done(reason: &'static str) -> Self {
        Self {
            status: ConditionStatus::True,
            reason,
            message: String::new(),
        }
    }

    pub(crate) fn waiting(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: ConditionStatus::False,
            reason,
            message: message.into(),
        }
    }

    pub(crate) fn unknown(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: ConditionStatus::Unknown,
            reason,
            message: message.into(),
        }
    }

    fn ready(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// What one reconcile of a (not deleting) Machine found.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Facts {
    pub(crate) generation: Option<i64>,
    /// Made from the current template of its MachineDeployment (if any).
    pub(crate) up_to_date: Step,
    /// `spec.bootstrap.dataSecretName` is set.
    pub(crate) bootstrap_data: bool,
    pub(crate) bootstrap: Step,
    /// The infrastructure machine reports `status.initialization.provisioned`.
    pub(crate) infrastructure_provisioned: bool,
    pub(crate) infrastructure: Step,
    /// The node found for the provider ID, if any.
    pub(crate) node_name: Option<String>,
    pub(crate) node: Step,
    pub(crate) addresses: Option<Vec<MachineAddress>>,
    pub(crate) min_ready: Duration,
    /// `spec.readinessGates`: conditions that must hold for `Ready`.
    pub(crate) readiness_gates: Vec<capi_core::api::MachineReadinessGate>,
}

/// The status after applying `facts` to `current` at `now`, and how long until `Available` may
/// turn true (if it is waiting for `minReadySeconds`).
pub(crate) fn desired(
    current: &MachineStatus,
    facts: &Facts,
    now: Time,
) -> (MachineStatus, Option<Duration>) {
    let mut status = current.clone();
    let generation = facts.generation;
    let set = |status: &mut MachineStatus, type_: &str, step: &Step| {
        let wanted = DesiredCondition::new(type_, step.status, step.reason)
            .message(step.message.clone())
            .observed_generation(generation);
        condition::set_at(&mut status.conditions, wanted, now.clone());
    };
    set(
        &mut status,
        condition::BOOTSTRAP_CONFIG_READY,
        &facts.bootstrap,
    );
    set(
        &mut status,
        condition::INFRASTRUCTURE_READY,
        &facts.infrastructure,
    );
    set(&mut status, condition::NODE_READY, &facts.node);
    set(&mut status, condition::UP_TO_DATE, &facts.up_to_date);
    set(
        &mut status,
        condition::DELETING,
        &Step::waiting(reasons::NOT_DELETING, ""),
    );
    set(
        &mut status,
        condition::PAUSED,
        &Step::waiting(reasons::NOT_PAUSED, ""),
    );

    let health_failed = condition::status(&status.conditions, HEALTH_CHECK_SUCCEEDED)
        == Some(ConditionStatus::False);
    let ready = if health_failed {
        Step::waiting(
            reasons::HEALTH_CHECK_FAILED,
            "a MachineHealthCheck found the machine unhealthy",
        )
    } else if !facts.bootstrap.ready() {
        Step::waiting(
            reasons::WAITING_FOR_BOOTSTRAP_DATA,
            &facts.bootstrap.message,
        )
    } else if !facts.infrastructure.ready() {
        Step::waiting(
            reasons::WAITING_FOR_INFRASTRUCTURE,
            &facts.infrastructure.message,
        )
    } else if !facts.node.ready() {
        Step::waiting(reasons::WAITING_FOR_NODE, &facts.node.message)
    } else if let Some(open) = open_gates(&status.conditions, &facts.readiness_gates) {
        Step::waiting(reasons::READINESS_GATES_NOT_READY, &open)
    } else {
        Step::done(reasons::MACHINE_READY)
    };
    set(&mut status, condition::READY, &ready);

    let mut wait = None;
    let available = match condition::get(&status.conditions, condition::READY) {
        Some(c) if c.status == "True" => {
            let ready_for = now.0.duration_since(c.last_transition_time.0);
            let ready_for = Duration::try_from(ready_for).unwrap_or_default();
            if ready_for >= facts.min_ready {
                Step::done(reasons::MACHINE_AVAILABLE)
            } else {
                wait = Some(facts.min_ready - ready_for);
                Step::waiting(
                    reasons::WAITING_FOR_MIN_READY,
                    format!(
                        "ready for less than minReadySeconds ({}s)",
                        facts.min_ready.as_secs()
                    ),
                )
            }
        }
        _ => Step::waiting(reasons::MACHINE_NOT_READY, "the machine is not ready"),
    };
    set(&mut status, condition::AVAILABLE, &available);

    let initialization = MachineInitializationStatus {
        infrastructure_provisioned: facts.infrastructure_provisioned.then_some(true),
        bootstrap_data_secret_created: facts.bootstrap_data.then_some(true),
    };
    // An empty `initialization` is refused by the schema (minProperties 1): nothing to record yet.
    if initialization != MachineInitializationStatus::default() {
        status.initialization = Some(initialization);
    }
    if let Some(name) = &facts.node_name {
        status.node_ref = Some(MachineNodeReference { name: name.clone() });
    }
    if let Some(addresses) = &facts.addresses {
        status.addresses = addresses.clone();
    }
    status.phase = Some(phase(
        facts.bootstrap_data,
        facts.infrastructure_provisioned,
        status.node_ref.is_some(),
    ));
    status.observed_generation = generation;
    (status, wait)
}

/// What the change from `current` to `desired` is to the controllers and users that read
/// Machines: acted on when the node reference changes, the phase goes into or out of `Running`,
/// the infrastructure becomes or stops being provisioned (a control plane and a MachineSet stop
/// completing the machine), `Ready`, `Available` or `NodeReady` becomes `True` or changes once
/// reported (a control plane, a MachineSet, a health check waits for these or decides by them),
/// or `UpToDate` changes once reported (a machine that needs a rollout says so while it lives);
/// otherwise it only informs (reasons and messages, a first report of a condition that is not
/// true, a first `UpToDate`, the bootstrap data's flag, intermediate phases, addresses).
pub(crate) fn change(current: &MachineStatus, desired: &MachineStatus) -> Change {
    let running = |s: &MachineStatus| s.phase == Some(MachinePhase::Running);
    let provisioned = |s: &MachineStatus| {
        s.initialization
            .as_ref()
            .and_then(|i| i.infrastructure_provisioned)
            == Some(true)
    };
    // A condition changing once reported (False for Unknown, True for False …), or becoming
    // true when it is waited for.
    let changed = |type_: &str, waited_for: bool| {
        let (before, after) = (
            condition::status(&current.conditions, type_),
            condition::status(&desired.conditions, type_),
        );
        before != after && (before.is_some() || waited_for && after == Some(ConditionStatus::True))
    };
    let acted_on = current.node_ref != desired.node_ref
        || running(current) != running(desired)
        || provisioned(current) != provisioned(desired)
        || [
            condition::READY,
            condition::AVAILABLE,
            condition::NODE_READY,
        ]
        .iter()
        .any(|type_| changed(type_, true))
        || changed(condition::UP_TO_DATE, false);
    if acted_on {
        Change::ActedOn
    } else {
        Change::Informs
    }
}

/// The upstream phase of a Machine that is not being deleted.
pub(crate) fn phase(bootstrap_data: bool, provisioned: bool, node: bool) -> MachinePhase {
    match (bootstrap_data, provisioned, node) {
        (_, true, true) => MachinePhase::Running,
        (_, true, false) => MachinePhase::Provisioned,
        (true, false, _) => MachinePhase::Provisioning,
        (false, false, _) => MachinePhase::Pending,
    }
}

/// The readiness gates that do not hold, as one message, or `None` when all hold: a gate holds
/// when its condition is `True` (`Negative` polarity: `False`).
fn open_gates(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    gates: &[capi_core::api::MachineReadinessGate],
) -> Option<String> {
    use capi_core::api::ConditionPolarity;
    let open: Vec<String> = gates
        .iter()
        .filter(|gate| {
            let wanted = match gate.polarity.unwrap_or_default() {
                ConditionPolarity::Positive => ConditionStatus::True,
                ConditionPolarity::Negative => ConditionStatus::False,
            };
            condition::status(conditions, &gate.condition_type) != Some(wanted)
        })
        .map(|gate| {
            let now = condition::get(conditions, &gate.condition_type)
                .map_or("missing".to_string(), |c| c.status.clone());
            format!("readiness gate {} is {now}", gate.condition_type)
        })
        .collect();
    (!open.is_empty()).then(|| open.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(jiff::Timestamp::from_second(seconds).unwrap_or_default())
    }

    fn facts() -> Facts {
        Facts {
            generation: Some(1),
            up_to_date: Step::done("UpToDate"),
            bootstrap_data: true,
            bootstrap: Step::done("DataSecretAvailable"),
            infrastructure_provisioned: true,
            infrastructure: Step::done("Provisioned"),
            node_name: Some("node-a".into()),
            node: Step::done("NodeReady"),
            addresses: None,
            min_ready: Duration::ZERO,
            readiness_gates: Vec::new(),
        }
    }

    #[test]
    fn only_a_change_a_controller_acts_on_is_written_at_once() {
        let now = at(1_000);
        let pending = Facts {
            bootstrap_data: false,
            bootstrap: Step::waiting("WaitingForDataSecret", "waiting for the bootstrap data"),
            infrastructure_provisioned: false,
            infrastructure: Step::waiting("WaitingForBootstrapData", "waiting for data"),
            node_name: None,
            node: Step::waiting("NodeNotFound", "no node yet"),
            ..facts()
        };
        let (fresh, _) = desired(&MachineStatus::default(), &pending, now.clone());
        assert_eq!(
            change(&MachineStatus::default(), &fresh),
            Change::Informs,
            "conditions that are not true yet, and a first phase, only inform"
        );
        let data = Facts {
            bootstrap_data: true,
            bootstrap: Step::done("DataSecretAvailable"),
            ..pending.clone()
        };
        let (with_data, _) = desired(&fresh, &data, now.clone());
        assert_eq!(with_data.phase, Some(MachinePhase::Provisioning));
        assert_eq!(
            change(&fresh, &with_data),
            Change::Informs,
            "bootstrap data, without an instance, only informs"
        );
        let provisioned = Facts {
            infrastructure_provisioned: true,
            infrastructure: Step::done("Provisioned"),
            ..data
        };
        let (next, _) = desired(&with_data, &provisioned, now.clone());
        assert_eq!(next.phase, Some(MachinePhase::Provisioned));
        assert_eq!(
            change(&with_data, &next),
            Change::ActedOn,
            "a provisioned instance ends the completing of the machine"
        );
        let (running, _) = desired(&next, &facts(), now.clone());
        assert_eq!(
            change(&next, &running),
            Change::ActedOn,
            "a node reference, Running and Ready are waited for"
        );
        let mut outdated = facts();
        outdated.up_to_date = Step::waiting("NeedsRollout", "the template changed");
        let (needs_rollout, _) = desired(&running, &outdated, now.clone());
        assert_eq!(
            change(&running, &needs_rollout),
            Change::ActedOn,
            "a machine that needs a rollout says so while it lives"
        );
        let mut unready = facts();
        unready.node = Step::waiting("NodeNotReady", "the node is not ready");
        let (lost, _) = desired(&running, &unready, now);
        assert_eq!(
            change(&running, &lost),
            Change::ActedOn,
            "a machine that stops being ready is counted at once"
        );
    }

    #[test]
    fn phases_follow_upstream() {
        assert_eq!(phase(false, false, false), MachinePhase::Pending);
        assert_eq!(phase(true, false, false), MachinePhase::Provisioning);
        assert_eq!(phase(true, true, false), MachinePhase::Provisioned);
        assert_eq!(phase(true, true, true), MachinePhase::Running);
    }

    #[test]
    fn a_new_machine_records_no_empty_initialization() {
        let new = Facts {
            bootstrap_data: false,
            infrastructure_provisioned: false,
            node_name: None,
            ..facts()
        };
        let (status, _) = desired(&MachineStatus::default(), &new, at(100));
        assert_eq!(status.initialization, None, "{{}} is refused by the schema");
        let (status, _) = desired(&MachineStatus::default(), &facts(), at(100));
        assert_eq!(
            status
                .initialization
                .and_then(|i| i.infrastructure_provisioned),
            Some(true)
        );
    }

    #[test]
    fn ready_machine_is_running_and_available() {
        let (status, wait) = desired(&MachineStatus::default(), &facts(), at(100));
        assert_eq!(status.phase, Some(MachinePhase::Running));
        assert!(condition::is_true(&status.conditions, condition::READY));
        assert!(condition::is_true(&status.conditions, condition::AVAILABLE));
        assert_eq!(status.node_ref.map(|n| n.name).as_deref(), Some("node-a"));
        assert_eq!(wait, None);
    }

    #[test]
    fn readiness_gates_hold_ready_back_until_their_conditions_hold() {
        use capi_core::api::{ConditionPolarity, MachineReadinessGate};
        let facts = Facts {
            readiness_gates: vec![
                MachineReadinessGate {
                    condition_type: "APIServerPodHealthy".into(),
                    polarity: None,
                },
                MachineReadinessGate {
                    condition_type: "Degraded".into(),
                    polarity: Some(ConditionPolarity::Negative),
                },
            ],
            ..facts()
        };
        let (status, _) = desired(&MachineStatus::default(), &facts, at(100));
        let ready = condition::get(&status.conditions, condition::READY).unwrap();
        assert_eq!(ready.reason, reasons::READINESS_GATES_NOT_READY);
        assert!(
            ready.message.contains("APIServerPodHealthy is missing")
                && ready.message.contains("Degraded is missing"),
            "{}",
            ready.message
        );
        let mut current = status.clone();
        for (type_, state) in [
            ("APIServerPodHealthy", ConditionStatus::True),
            ("Degraded", ConditionStatus::False),
        ] {
            condition::set(
                &mut current.conditions,
                DesiredCondition::new(type_, state, "Test"),
            );
        }
        let (status, _) = desired(&current, &facts, at(101));
        assert!(condition::is_true(&status.conditions, condition::READY));
    }

    #[test]
    fn available_waits_for_min_ready_seconds() {
        let facts = Facts {
            min_ready: Duration::from_secs(30),
            readiness_gates: Vec::new(),
            ..facts()
        };
        let (first, wait) = desired(&MachineStatus::default(), &facts, at(100));
        assert!(!condition::is_true(&first.conditions, condition::AVAILABLE));
        assert_eq!(wait, Some(Duration::from_secs(30)));
        let (later, wait) = desired(&first, &facts, at(131));
        assert!(condition::is_true(&later.conditions, condition::AVAILABLE));
        assert_eq!(wait, None);
    }

    #[test]
    fn a_failed_health_check_makes_the_machine_not_ready() {
        let mut current = MachineStatus::default();
        condition::set_at(
            &mut current.conditions,
            DesiredCondition::new(
                HEALTH_CHECK_SUCCEEDED,
                ConditionStatus::False,
                "NodeNotFound",
            ),
            at(1),
        );
        let (status, _) = desired(&current, &facts(), at(100));
        let ready = condition::get(&status.conditions, condition::READY);
        assert_eq!(
            ready.map(|c| c.reason.as_str()),
            Some(reasons::HEALTH_CHECK_FAILED)
        );
        assert!(
            condition::get(&status.conditions, HEALTH_CHECK_SUCCEEDED).is_some(),
            "another controller's condition is kept"
        );
    }

    #[test]
    fn an_unchanged_pass_changes_nothing() {
        let (first, _) = desired(&MachineStatus::default(), &facts(), at(100));
        let (second, _) = desired(&first, &facts(), at(200));
        assert_eq!(first, second, "no timestamp churn");
    }

    #[test]
    fn the_step_that_waits_is_named_in_ready() {
        let facts = Facts {
            infrastructure_provisioned: false,
            infrastructure: Step::waiting("WaitingForInfrastructure", "instance booting"),
            node_name: None,
            node: Step::unknown("WaitingForNode", "no node yet"),
            ..facts()
        };
        let (status, _) = desired(&MachineStatus::default(), &facts, at(100));
        assert_eq!(status.phase, Some(MachinePhase::Provisioning));
        let ready = condition::get(&status.conditions, condition::READY);
        assert_eq!(ready.map(|c| c.message.as_str()), Some("instance booting"));
    }
}
