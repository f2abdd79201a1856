//! Whether a machine is healthy, and whether remediation may proceed, as a `MachineHealthCheck`
//! defines it. Pure functions of what was observed and the current time.
//!
//! - [`assess`]: a machine without a node is unhealthy once the node startup timeout has passed
//!   since [`node_startup_since`] (as upstream, the latest of its creation, its cluster's control
//!   plane initialization and infrastructure readiness, and its own infrastructure readiness); a
//!   machine whose node vanished is unhealthy at once; a node or machine condition listed in `unhealthyNodeConditions`/`unhealthyMachineConditions` makes it unhealthy
//!   once it has held for its timeout. Until then it is pending (neither healthy nor unhealthy;
//!   the answer says when to look again), and so is a machine without a node yet: as upstream,
//!   only a machine whose node is there and with no timeout running is healthy.
//! - [`remediation_allowed`]: `triggerIf.unhealthyInRange` (`[min-max]`) or
//!   `triggerIf.unhealthyLessThanOrEqualTo` (a count, or a percentage of the checked machines,
//!   rounded down; 100 % when unset) short-circuits remediation when too many machines are not
//!   healthy at once, and says how many more may be remediated.

use std::time::Duration;

use capi_core::api::{MachineHealthCheckChecks, MachineHealthCheckRemediationTriggerIf};
use capi_core::condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The upstream default node startup timeout.
pub const DEFAULT_NODE_STARTUP_TIMEOUT: Duration = Duration::from_secs(600);

/// A condition as observed: type, status and when it last changed (seconds since the epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedCondition {
    /// The condition type.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When it last changed.
    pub since: i64,
}

/// The node of a machine, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeObservation {
    /// The machine has no `nodeRef` yet.
    NotRegistered,
    /// The machine's `nodeRef` names a node that does not exist.
    Missing,
    /// The node exists, with these conditions.
    Present(Vec<ObservedCondition>),
}

/// What the health check needs to know about one machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineObservation {
    /// When its node startup timeout started counting (seconds since the epoch): see
    /// [`node_startup_since`].
    pub node_startup_since: i64,
    /// Its node.
    pub node: NodeObservation,
    /// Its own conditions.
    pub conditions: Vec<ObservedCondition>,
}

/// The verdict on one machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Healthy: its node is there, and no listed condition holds (not even one whose timeout
    /// has yet to pass).
    Healthy,
    /// Not judged yet: no node so far (within the node startup timeout, or with none), or a
    /// listed condition that has not yet held for its timeout. As upstream, such a machine is
    /// neither counted healthy nor marked either way.
    Pending {
        /// When it may turn unhealthy, if a timeout is running.
        recheck: Option<Duration>,
    },
    /// Unhealthy, with a reason and a message for the machine's condition.
    Unhealthy {
        /// A CamelCase reason.
        reason: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// When a machine's node startup timeout starts counting (seconds since the epoch), as upstream:
/// the latest of the machine's creation (`created`), the last transitions of its cluster's
/// `ControlPlaneInitialized` and `InfrastructureReady` conditions and of its own
/// `InfrastructureReady` condition — each only while it is `True`. So a machine whose cluster or
/// infrastructure became ready within the timeout (a slow cloud, a provider behind a rate
/// limit) gets the whole timeout again for its node from that moment; one whose infrastructure
/// is still not ready when the timeout has passed since its creation is unhealthy, as upstream.
/// (Workers are not judged at all before their cluster's control plane is initialized: the
/// controller does not ask.)
pub fn node_startup_since(
    created: i64,
    cluster: &[ObservedCondition],
    machine: &[ObservedCondition],
) -> i64 {
    let ready_since = |conditions: &[ObservedCondition], type_: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
            .map(|c| c.since)
    };
    [
        ready_since(cluster, condition::CONTROL_PLANE_INITIALIZED),
        ready_since(cluster, condition::INFRASTRUCTURE_READY),
        ready_since(machine, condition::INFRASTRUCTURE_READY),
    ]
    .into_iter()
    .flatten()
    .fold(created, i64::max)
}

fn remaining(since: i64, timeout: Duration, now: i64) -> Option<Duration> {
    let deadline = since.saturating_add(i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX));
    (deadline > now).then(|| Duration::from_secs(u64::try_from(deadline - now).unwrap_or(0)))
}

/// Judges one machine at `now` (seconds since the epoch).
pub fn assess(
    checks: Option<&MachineHealthCheckChecks>,
    machine: &MachineObservation,
    now: i64,
) -> Verdict {
    let default_checks = MachineHealthCheckChecks::default();
    let checks = checks.unwrap_or(&default_checks);
    let mut recheck: Option<Duration> = None;
    let mut sooner = |d: Duration| recheck = Some(recheck.map_or(d, |r| r.min(d)));

    // Unhealthy machine conditions apply whether or not there is a node.
    for rule in &checks.unhealthy_machine_conditions {
        if let Some(found) = machine
            .conditions
            .iter()
            .find(|c| c.type_ == rule.type_ && c.status == rule.status.as_str())
        {
            let timeout = Duration::from_secs(u64::try_from(rule.timeout_seconds).unwrap_or(0));
            match remaining(found.since, timeout, now) {
                None => {
                    return Verdict::Unhealthy {
                        reason: "UnhealthyMachineCondition",
                        message: format!(
                            "condition {}={} for more than {}s",
                            rule.type_,
                            rule.status.as_str(),
                            rule.timeout_seconds
                        ),
                    };
                }
                Some(left) => sooner(left),
            }
        }
    }
    let registered = !matches!(machine.node, NodeObservation::NotRegistered);
    match &machine.node {
        NodeObservation::Missing => {
            return Verdict::Unhealthy {
                reason: "NodeNotFound",
                message: "the machine's node no longer exists".into(),
            };
        }
        NodeObservation::NotRegistered => {
            let timeout = checks
                .node_startup_timeout_seconds
                .map_or(DEFAULT_NODE_STARTUP_TIMEOUT, |s| {
                    Duration::from_secs(u64::try_from(s).unwrap_or(0))
                });
            if !timeout.is_zero() {
                match remaining(machine.node_startup_since, timeout, now) {
                    None => {
                        return Verdict::Unhealthy {
                            reason: "NodeStartupTimeout",
                            message: format!("no node registered within {}s", timeout.as_secs()),
                        };
                    }
                    Some(left) => sooner(left),
                }
            }
        }
        NodeObservation::Present(conditions) => {
            for rule in &checks.unhealthy_node_conditions {
                if let Some(found) = conditions
                    .iter()
                    .find(|c| c.type_ == rule.type_ && c.status == rule.status.as_str())
                {
                    let timeout =
                        Duration::from_secs(u64::try_from(rule.timeout_seconds).unwrap_or(0));
                    match remaining(found.since, timeout, now) {
                        None => {
                            return Verdict::Unhealthy {
                                reason: "UnhealthyNode",
                                message: format!(
                                    "node condition {}={} for more than {}s",
                                    rule.type_,
                                    rule.status.as_str(),
                                    rule.timeout_seconds
                                ),
                            };
                        }
                        Some(left) => sooner(left),
                    }
                }
            }
        }
    }
    if recheck.is_some() || !registered {
        Verdict::Pending { recheck }
    } else {
        Verdict::Healthy
    }
}

/// What `triggerIf` allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remediation {
    /// Whether remediation may proceed.
    pub allowed: bool,
    /// How many more machines may be remediated (`status.remediationsAllowed`): the limit less
    /// the machines not healthy, and 0 when remediation is not allowed.
    pub remaining: i32,
}

impl Remediation {
    fn within(allowed: bool, limit: i32, unhealthy: i32) -> Self {
        Self {
            allowed,
            remaining: if allowed {
                limit.saturating_sub(unhealthy).max(0)
            } else {
                0
            },
        }
    }
}

/// Whether remediation may proceed with `unhealthy` of `total` checked machines not healthy
/// (as upstream, every machine not counted healthy: unhealthy, pending or not seen), and how
/// many more may be remediated. An unusable `triggerIf` is an error a user must fix
/// (remediation is then not allowed).
pub fn remediation_allowed(
    trigger: Option<&MachineHealthCheckRemediationTriggerIf>,
    total: i32,
    unhealthy: i32,
) -> Result<Remediation, String> {
    let everything = || Remediation::within(unhealthy <= total, total, unhealthy);
    let Some(trigger) = trigger else {
        return Ok(everything());
    };
    if let Some(range) = &trigger.unhealthy_in_range {
        let inner = range
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .ok_or_else(|| format!("unhealthyInRange {range:?} is not [min-max]"))?;
        let (min, max) = inner
            .split_once('-')
            .ok_or_else(|| format!("unhealthyInRange {range:?} is not [min-max]"))?;
        let (min, max): (i32, i32) = (
            min.parse()
                .map_err(|_| format!("unhealthyInRange {range:?}: bad minimum"))?,
            max.parse()
                .map_err(|_| format!("unhealthyInRange {range:?}: bad maximum"))?,
        );
        if min > max {
            return Err(format!("unhealthyInRange {range:?}: minimum above maximum"));
        }
        return Ok(Remediation::within(
            (min..=max).contains(&unhealthy),
            max,
            unhealthy,
        ));
    }
    if let Some(limit) = &trigger.unhealthy_less_than_or_equal_to {
        let limit = match limit {
            IntOrString::Int(n) if *n >= 0 => *n,
            IntOrString::String(text) => {
                crate::percentage::of(text, total, false).ok_or_else(|| {
                    format!("unhealthyLessThanOrEqualTo {text:?} is not a count or a percentage")
                })?
            }
            IntOrString::Int(n) => {
                return Err(format!("unhealthyLessThanOrEqualTo {n} is negative"));
            }
        };
        return Ok(Remediation::within(unhealthy <= limit, limit, unhealthy));
    }
    Ok(everything())
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_core::api::{UnhealthyMachineCondition, UnhealthyNodeCondition};
    use capi_core::condition::ConditionStatus;

    fn checks() -> MachineHealthCheckChecks {
        MachineHealthCheckChecks {
            node_startup_timeout_seconds: Some(600),
            unhealthy_node_conditions: vec![
                UnhealthyNodeCondition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    timeout_seconds: 300,
                },
                UnhealthyNodeCondition {
                    type_: "Ready".into(),
                    status: "Unknown".into(),
                    timeout_seconds: 300,
                },
            ],
            unhealthy_machine_conditions: vec![UnhealthyMachineCondition {
                type_: "InfrastructureReady".into(),
                status: ConditionStatus::False,
                timeout_seconds: 60,
            }],
        }
    }

    fn node(status: &str, since: i64) -> NodeObservation {
        NodeObservation::Present(vec![ObservedCondition {
            type_: "Ready".into(),
            status: status.into(),
            since,
        }])
    }

    fn machine(node: NodeObservation) -> MachineObservation {
        MachineObservation {
            node_startup_since: 0,
            node,
            conditions: vec![],
        }
    }

    #[test]
    fn node_startup_timeout_counts_from_creation() {
        let waiting = assess(
            Some(&checks()),
            &machine(NodeObservation::NotRegistered),
            100,
        );
        assert_eq!(
            waiting,
            Verdict::Pending {
                recheck: Some(Duration::from_secs(500))
            }
        );
        let late = assess(
            Some(&checks()),
            &machine(NodeObservation::NotRegistered),
            601,
        );
        assert!(matches!(
            late,
            Verdict::Unhealthy {
                reason: "NodeStartupTimeout",
                ..
            }
        ));
        let mut disabled = checks();
        disabled.node_startup_timeout_seconds = Some(0);
        assert_eq!(
            assess(
                Some(&disabled),
                &machine(NodeObservation::NotRegistered),
                10_000
            ),
            Verdict::Pending { recheck: None }
        );
    }

    fn ready(type_: &str, status: &str, since: i64) -> ObservedCondition {
        ObservedCondition {
            type_: type_.into(),
            status: status.into(),
            since,
        }
    }

    #[test]
    fn node_startup_counts_from_the_latest_readiness_not_from_creation() {
        // Created at 0; the cluster's control plane initialized at 50, its infrastructure ready
        // at 20; the machine's own infrastructure ready at 400 (it waited in a queue).
        let cluster = [
            ready("ControlPlaneInitialized", "True", 50),
            ready("InfrastructureReady", "True", 20),
        ];
        let machine_conditions = [ready("InfrastructureReady", "True", 400)];
        let since = node_startup_since(0, &cluster, &machine_conditions);
        assert_eq!(since, 400);
        let waiting = MachineObservation {
            node_startup_since: since,
            node: NodeObservation::NotRegistered,
            conditions: vec![],
        };
        // 700 s after creation, 300 s after its infrastructure: still within 600 s.
        assert_eq!(
            assess(Some(&checks()), &waiting, 700),
            Verdict::Pending {
                recheck: Some(Duration::from_secs(300))
            }
        );
        assert!(matches!(
            assess(Some(&checks()), &waiting, 1001),
            Verdict::Unhealthy {
                reason: "NodeStartupTimeout",
                ..
            }
        ));
        // Conditions that are not True do not move the start; nor does one older than creation.
        let not_ready = [
            ready("ControlPlaneInitialized", "False", 900),
            ready("InfrastructureReady", "Unknown", 900),
        ];
        assert_eq!(
            node_startup_since(
                100,
                &not_ready,
                &[ready("InfrastructureReady", "False", 900)]
            ),
            100
        );
        assert_eq!(node_startup_since(100, &cluster, &[]), 100);
        assert_eq!(node_startup_since(10, &cluster, &[]), 50);
    }

    #[test]
    fn unhealthy_node_conditions_need_their_timeout() {
        assert_eq!(
            assess(Some(&checks()), &machine(node("True", 0)), 10_000),
            Verdict::Healthy
        );
        // A listed condition that has not held for its timeout yet: not healthy, not unhealthy.
        assert_eq!(
            assess(Some(&checks()), &machine(node("False", 1000)), 1100),
            Verdict::Pending {
                recheck: Some(Duration::from_secs(200))
            }
        );
        assert!(matches!(
            assess(Some(&checks()), &machine(node("Unknown", 1000)), 1301),
            Verdict::Unhealthy {
                reason: "UnhealthyNode",
                ..
            }
        ));
        assert!(matches!(
            assess(Some(&checks()), &machine(NodeObservation::Missing), 1),
            Verdict::Unhealthy {
                reason: "NodeNotFound",
                ..
            }
        ));
    }

    #[test]
    fn unhealthy_machine_conditions_apply_too() {
        let mut observed = machine(node("True", 0));
        observed.conditions.push(ObservedCondition {
            type_: "InfrastructureReady".into(),
            status: "False".into(),
            since: 0,
        });
        assert!(matches!(
            assess(Some(&checks()), &observed, 61),
            Verdict::Unhealthy {
                reason: "UnhealthyMachineCondition",
                ..
            }
        ));
    }

    #[test]
    fn trigger_if_short_circuits_remediation() {
        let trigger = |less: Option<IntOrString>, range: Option<&str>| {
            MachineHealthCheckRemediationTriggerIf {
                unhealthy_less_than_or_equal_to: less,
                unhealthy_in_range: range.map(str::to_string),
            }
        };
        let allowed = |remaining| {
            Ok(Remediation {
                allowed: true,
                remaining,
            })
        };
        let refused = Ok(Remediation {
            allowed: false,
            remaining: 0,
        });
        // Unset: 100 % of the machines.
        assert_eq!(remediation_allowed(None, 10, 10), allowed(0));
        assert_eq!(remediation_allowed(None, 10, 3), allowed(7));
        assert_eq!(
            remediation_allowed(Some(&trigger(Some(IntOrString::Int(2)), None)), 10, 2),
            allowed(0)
        );
        assert_eq!(
            remediation_allowed(Some(&trigger(Some(IntOrString::Int(2)), None)), 10, 1),
            allowed(1)
        );
        assert_eq!(
            remediation_allowed(Some(&trigger(Some(IntOrString::Int(2)), None)), 10, 3),
            refused
        );
        // A 19-digit percentage (the CRD's pattern accepts it) allows every machine.
        assert_eq!(
            remediation_allowed(
                Some(&trigger(
                    Some(IntOrString::String("9223372036854775807%".into())),
                    None
                )),
                i32::MAX,
                3
            ),
            allowed(i32::MAX - 3)
        );
        // 40 % of 6 is 2.4: rounded down to 2.
        assert_eq!(
            remediation_allowed(
                Some(&trigger(Some(IntOrString::String("40%".into())), None)),
                6,
                3
            ),
            refused
        );
        assert_eq!(
            remediation_allowed(Some(&trigger(None, Some("[1-3]"))), 10, 3),
            allowed(0)
        );
        assert_eq!(
            remediation_allowed(Some(&trigger(None, Some("[1-3]"))), 10, 1),
            allowed(2)
        );
        assert_eq!(
            remediation_allowed(Some(&trigger(None, Some("[1-3]"))), 10, 4),
            refused
        );
        assert_eq!(
            remediation_allowed(Some(&trigger(None, Some("[1-3]"))), 10, 0),
            refused
        );
        assert!(remediation_allowed(Some(&trigger(None, Some("[3-1]"))), 10, 2).is_err());
        assert!(
            remediation_allowed(
                Some(&trigger(Some(IntOrString::String("many".into())), None)),
                10,
                2
            )
            .is_err()
        );
    }
}
