//! A control plane's status from what one pass observed — counters, version, selector,
//! initialization and upstream's conditions — as a pure function.
//!
//! Conditions (types and reasons as upstream's v1beta2 KubeadmControlPlane): `Available`,
//! `Initialized`, `CertificatesAvailable`, `EtcdClusterHealthy`, `ControlPlaneComponentsHealthy`,
//! `MachinesReady`, `MachinesUpToDate`, `RollingOut`, `ScalingUp`, `ScalingDown`, `Remediating`,
//! `Deleting`, `Paused`; and `lastRemediation`. `ControlPlaneComponentsHealthy` aggregates the
//! machines' component conditions ([`crate::components`]); `EtcdClusterHealthy` the members etcd
//! reports, matched to the machines, with the machines' etcd pods.

use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::api::{KubeadmControlPlaneInitializationStatus, KubeadmControlPlaneStatus};
use crate::components::{self, Judgement, types as machine_types};
use crate::etcd::EtcdClusterStatus;
use crate::quorum;
use crate::remediation::RemediationData;
use crate::scale::MachineFacts;

/// Condition types of a KubeadmControlPlane.
pub mod types {
    /// The control plane's API servers can be reached and etcd has its quorum.
    pub const AVAILABLE: &str = "Available";
    /// The first machine ran `kubeadm init` and its node registered.
    pub const INITIALIZED: &str = "Initialized";
    /// The cluster's CA Secrets and kubeconfig exist.
    pub const CERTIFICATES_AVAILABLE: &str = "CertificatesAvailable";
    /// Every etcd member is healthy and belongs to a machine.
    pub const ETCD_CLUSTER_HEALTHY: &str = "EtcdClusterHealthy";
    /// The control-plane components run on every machine.
    pub const CONTROL_PLANE_COMPONENTS_HEALTHY: &str = "ControlPlaneComponentsHealthy";
    /// Every machine is `Ready`.
    pub const MACHINES_READY: &str = "MachinesReady";
    /// Every machine matches the spec.
    pub const MACHINES_UP_TO_DATE: &str = "MachinesUpToDate";
    /// Outdated machines are being replaced.
    pub const ROLLING_OUT: &str = "RollingOut";
    /// Fewer machines than wanted.
    pub const SCALING_UP: &str = "ScalingUp";
    /// More machines than wanted.
    pub const SCALING_DOWN: &str = "ScalingDown";
    /// Machines a health check marked unhealthy are (or wait to be) replaced.
    pub const REMEDIATING: &str = "Remediating";
    /// Being deleted.
    pub const DELETING: &str = "Deleting";
    /// Reconciliation is paused.
    pub const PAUSED: &str = "Paused";
}

/// Reasons of `EtcdClusterHealthy` and `ControlPlaneComponentsHealthy` (upstream's).
pub mod reasons {
    /// Every member or component is healthy.
    pub const HEALTHY: &str = "Healthy";
    /// A member or component is not healthy.
    pub const NOT_HEALTHY: &str = "NotHealthy";
    /// The health of a member or component is not known.
    pub const HEALTH_UNKNOWN: &str = "HealthUnknown";
}

/// What one pass observed.
#[derive(Clone, Copy, Debug)]
pub struct Observation<'a> {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `spec.replicas`.
    pub replicas: usize,
    /// `status.selector`.
    pub selector: &'a str,
    /// The machines' versions, in the machines' order.
    pub versions: &'a [Option<String>],
    /// The machines as the decisions see them.
    pub machines: &'a [MachineFacts],
    /// Per machine, in the same order: its `Ready` and `Available` conditions are `True`.
    pub ready: &'a [(bool, bool)],
    /// Per machine: why it is outdated, if it is.
    pub outdated: &'a [Option<String>],
    /// Per machine: its node's name and whether the node is ready (`NodeReady`).
    pub nodes: &'a [(Option<&'a str>, bool)],
    /// etcd, once the control plane is initialized: what it said, or why it could not be read.
    pub etcd: Option<Result<&'a EtcdClusterStatus, &'a str>>,
    /// The control plane is (or was once) initialized.
    pub initialized: bool,
    /// Why the PKI is not available, if it is not.
    pub certificates: Result<(), &'a str>,
    /// What the current step waits for, if it waits.
    pub waiting: Option<&'a str>,
    /// Why deletion has not finished, when deleting.
    pub deleting: Option<&'a str>,
    /// Reconciliation is paused.
    pub paused: bool,
    /// Machines marked for remediation and what happens to them, if any are.
    pub remediating: Option<&'a str>,
    /// The remediation in progress, else the latest one the machines remember.
    pub last_remediation: Option<&'a RemediationData>,
    /// Per machine, in the same order (may be shorter): its components' and etcd member's
    /// judgements, empty when it was not judged (no node, being deleted, not initialized).
    pub components: &'a [Vec<Judgement>],
}

fn set(
    conditions: &mut Vec<Condition>,
    generation: Option<i64>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
) {
    condition::set(
        conditions,
        DesiredCondition::new(type_, status, reason)
            .message(message)
            .observed_generation(generation),
    );
}

fn names(facts: &[MachineFacts], pick: impl Fn(usize) -> bool) -> String {
    facts
        .iter()
        .enumerate()
        .filter(|(i, _)| pick(*i))
        .map(|(_, m)| m.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The status for `observed`, starting from `current` (conditions keep their transition times).
pub fn compute(
    current: Option<&KubeadmControlPlaneStatus>,
    observed: &Observation<'_>,
) -> KubeadmControlPlaneStatus {
    use ConditionStatus::{False, True, Unknown};
    use types::*;
    let mut status = current.cloned().unwrap_or_default();
    let g = observed.generation;
    let machines = observed.machines;
    let count = |pick: &dyn Fn(usize) -> bool| {
        i32::try_from((0..machines.len()).filter(|i| pick(*i)).count()).unwrap_or(i32::MAX)
    };
    status.replicas = Some(count(&|_| true));
    status.ready_replicas = Some(count(&|i| observed.ready[i].0));
    status.available_replicas = Some(count(&|i| observed.ready[i].1));
    status.up_to_date_replicas = Some(count(&|i| observed.outdated[i].is_none()));
    status.selector = Some(observed.selector.to_string());
    status.version = lowest_version(observed.versions);
    status.observed_generation = g;
    let initialized = observed.initialized
        || status
            .initialization
            .as_ref()
            .and_then(|i| i.control_plane_initialized)
            .unwrap_or(false);
    status.initialization = Some(KubeadmControlPlaneInitializationStatus {
        control_plane_initialized: Some(initialized),
    });
    let c = &mut status.conditions;

    set(
        c,
        g,
        PAUSED,
        if observed.paused { True } else { False },
        if observed.paused {
            "Paused"
        } else {
            "NotPaused"
        },
        "",
    );
    match observed.deleting {
        Some(why) => set(c, g, DELETING, True, "Deleting", why),
        None => set(c, g, DELETING, False, "NotDeleting", ""),
    }
    if initialized {
        set(c, g, INITIALIZED, True, "Initialized", "");
    } else {
        set(
            c,
            g,
            INITIALIZED,
            False,
            "NotInitialized",
            "waiting for the first machine's node (kubeadm init)",
        );
    }
    match observed.certificates {
        Ok(()) => set(c, g, CERTIFICATES_AVAILABLE, True, "Available", ""),
        Err(why) => set(c, g, CERTIFICATES_AVAILABLE, False, "NotAvailable", why),
    }

    // etcd: every member healthy, one member per machine with a node, no member without one.
    let etcd_quorum = match observed.etcd {
        None => {
            set(
                c,
                g,
                ETCD_CLUSTER_HEALTHY,
                Unknown,
                reasons::HEALTH_UNKNOWN,
                "etcd is not running yet",
            );
            false
        }
        Some(Err(why)) => {
            set(
                c,
                g,
                ETCD_CLUSTER_HEALTHY,
                Unknown,
                reasons::HEALTH_UNKNOWN,
                why,
            );
            false
        }
        Some(Ok(etcd)) => {
            let mut problems = Vec::new();
            for member in &etcd.members {
                let name = if member.name.is_empty() {
                    "(not started)"
                } else {
                    &member.name
                };
                if !member.healthy {
                    problems.push(format!("member {name} is not healthy"));
                }
                if !observed
                    .nodes
                    .iter()
                    .any(|(node, _)| *node == Some(member.name.as_str()))
                {
                    problems.push(format!("member {name} belongs to no machine"));
                }
            }
            for (i, (node, _)) in observed.nodes.iter().enumerate() {
                if let Some(node) = node
                    && etcd.member(node).is_none()
                    && !machines[i].deleting
                {
                    problems.push(format!("machine {} has no etcd member", machines[i].name));
                }
            }
            // The etcd static pods, where judged.
            for (machine, judged) in machines.iter().zip(observed.components) {
                for j in judged
                    .iter()
                    .filter(|j| j.type_ == machine_types::ETCD_POD_HEALTHY && j.status != True)
                {
                    problems.push(format!("machine {}: {}", machine.name, j.message));
                }
            }
            if problems.is_empty() {
                set(c, g, ETCD_CLUSTER_HEALTHY, True, reasons::HEALTHY, "");
            } else {
                set(
                    c,
                    g,
                    ETCD_CLUSTER_HEALTHY,
                    False,
                    reasons::NOT_HEALTHY,
                    problems.join("; "),
                );
            }
            let voting = etcd.members.iter().filter(|m| !m.learner).count();
            let healthy = etcd
                .members
                .iter()
                .filter(|m| !m.learner && m.healthy)
                .count();
            voting > 0 && healthy >= quorum::quorum(voting)
        }
    };

    let judged: Vec<(&str, &[Judgement])> = machines
        .iter()
        .zip(observed.components)
        .filter(|(_, j)| !j.is_empty())
        .map(|(m, j)| (m.name.as_str(), j.as_slice()))
        .collect();
    if judged.is_empty() {
        set(
            c,
            g,
            CONTROL_PLANE_COMPONENTS_HEALTHY,
            Unknown,
            reasons::HEALTH_UNKNOWN,
            "no control-plane machine has a node yet",
        );
    } else {
        let pods = [
            machine_types::API_SERVER_POD_HEALTHY,
            machine_types::CONTROLLER_MANAGER_POD_HEALTHY,
            machine_types::SCHEDULER_POD_HEALTHY,
        ];
        let (health, lines) = components::aggregate(&judged, &pods);
        let reason = match health {
            True => reasons::HEALTHY,
            False => reasons::NOT_HEALTHY,
            Unknown => reasons::HEALTH_UNKNOWN,
        };
        set(
            c,
            g,
            CONTROL_PLANE_COMPONENTS_HEALTHY,
            health,
            reason,
            lines.join("\n"),
        );
    }
    // An API server serves: a machine's node is ready and its kube-apiserver pod (once judged)
    // is healthy.
    let api_server_up = (0..machines.len()).any(|i| {
        observed.nodes[i].0.is_some()
            && observed.nodes[i].1
            && observed.components.get(i).is_none_or(|judged| {
                judged
                    .iter()
                    .filter(|j| j.type_ == machine_types::API_SERVER_POD_HEALTHY)
                    .all(|j| j.status == True)
            })
    });

    let not_ready = names(machines, |i| !observed.ready[i].0);
    if machines.is_empty() {
        set(c, g, MACHINES_READY, True, "NoReplicas", "");
    } else if not_ready.is_empty() {
        set(c, g, MACHINES_READY, True, "Ready", "");
    } else {
        set(
            c,
            g,
            MACHINES_READY,
            False,
            "NotReady",
            format!("not ready: {not_ready}"),
        );
    }
    let outdated: Vec<String> = machines
        .iter()
        .zip(observed.outdated)
        .filter_map(|(m, why)| why.as_ref().map(|why| format!("{}: {why}", m.name)))
        .collect();
    if outdated.is_empty() {
        set(c, g, MACHINES_UP_TO_DATE, True, "UpToDate", "");
        set(c, g, ROLLING_OUT, False, "NotRollingOut", "");
    } else {
        set(
            c,
            g,
            MACHINES_UP_TO_DATE,
            False,
            "NotUpToDate",
            outdated.join("; "),
        );
        set(
            c,
            g,
            ROLLING_OUT,
            True,
            "RollingOut",
            format!(
                "replacing {} outdated machines; {}",
                outdated.len(),
                outdated.join("; ")
            ),
        );
    }
    let present = machines.iter().filter(|m| !m.deleting).count();
    let waiting = observed
        .waiting
        .map(|w| format!("; waiting: {w}"))
        .unwrap_or_default();
    if present < observed.replicas {
        set(
            c,
            g,
            SCALING_UP,
            True,
            "ScalingUp",
            format!(
                "scaling up from {present} to {} replicas{waiting}",
                observed.replicas
            ),
        );
    } else {
        set(c, g, SCALING_UP, False, "NotScalingUp", "");
    }
    if present > observed.replicas {
        set(
            c,
            g,
            SCALING_DOWN,
            True,
            "ScalingDown",
            format!(
                "scaling down from {present} to {} replicas{waiting}",
                observed.replicas
            ),
        );
    } else {
        set(c, g, SCALING_DOWN, False, "NotScalingDown", "");
    }
    match observed.remediating {
        Some(what) => set(c, g, REMEDIATING, True, "Remediating", what),
        None => set(c, g, REMEDIATING, False, "NotRemediating", ""),
    }
    if let Some(last) = observed.last_remediation {
        status.last_remediation = Some(crate::api::LastRemediationStatus {
            machine: last.machine.clone(),
            time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(last.timestamp),
            retry_count: last.retry_count,
        });
    }
    let c = &mut status.conditions;
    if initialized && etcd_quorum && api_server_up && observed.deleting.is_none() {
        set(c, g, AVAILABLE, True, "Available", "");
    } else {
        let why = if !initialized {
            "the control plane is not initialized"
        } else if observed.deleting.is_some() {
            "the control plane is being deleted"
        } else if !etcd_quorum {
            "etcd has no healthy quorum"
        } else {
            "no control-plane machine has a ready node with a healthy kube-apiserver pod"
        };
        set(c, g, AVAILABLE, False, "NotAvailable", why);
    }
    status
}

/// The lowest `vMAJOR.MINOR.PATCH` among `versions` (what every machine runs at least); `None`
/// when a machine has none or the list is empty.
fn lowest_version(versions: &[Option<String>]) -> Option<String> {
    let parse = |v: &str| {
        let mut parts = v.trim_start_matches('v').split(['.', '-', '+']);
        let mut next = || {
            parts
                .next()
                .and_then(|p| p.parse::<u64>().ok())
                .unwrap_or(0)
        };
        (next(), next(), next())
    };
    let mut lowest: Option<&String> = None;
    for version in versions {
        let version = version.as_ref()?;
        if lowest.is_none_or(|l| parse(version) < parse(l)) {
            lowest = Some(version);
        }
    }
    lowest.cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::EtcdMember;

    fn facts(name: &str) -> MachineFacts {
        MachineFacts {
            name: name.into(),
            up_to_date: true,
            healthy: true,
            ..MachineFacts::default()
        }
    }

    #[test]
    fn the_lowest_version_is_reported_numerically() {
        let v = |s: &str| Some(s.to_string());
        assert_eq!(lowest_version(&[v("v1.34.10"), v("v1.34.9")]), v("v1.34.9"));
        assert_eq!(lowest_version(&[v("v1.34.1"), None]), None);
        assert_eq!(lowest_version(&[]), None);
    }

    #[test]
    fn an_initialized_control_plane_with_a_healthy_quorum_is_available_and_a_stray_member_is_reported()
     {
        let machines = [facts("a"), facts("b")];
        let etcd = EtcdClusterStatus {
            members: ["node-a", "node-b", "node-gone"]
                .iter()
                .enumerate()
                .map(|(i, n)| EtcdMember {
                    id: i as u64 + 1,
                    name: n.to_string(),
                    healthy: *n != "node-gone",
                    learner: false,
                })
                .collect(),
            leader: Some(1),
        };
        let observed = Observation {
            generation: Some(2),
            replicas: 3,
            selector: "s",
            versions: &[Some("v1.34.1".into()), Some("v1.34.1".into())],
            machines: &machines,
            ready: &[(true, true), (true, false)],
            outdated: &[None, Some("version v1.33.0 (wanted v1.34.1)".into())],
            nodes: &[(Some("node-a"), true), (Some("node-b"), true)],
            etcd: Some(Ok(&etcd)),
            initialized: true,
            certificates: Ok(()),
            waiting: Some("machine b is not healthy yet"),
            deleting: None,
            paused: false,
            remediating: None,
            last_remediation: None,
            components: &[],
        };
        let status = compute(None, &observed);
        assert_eq!(
            (
                status.replicas,
                status.ready_replicas,
                status.available_replicas,
                status.up_to_date_replicas
            ),
            (Some(2), Some(2), Some(1), Some(1))
        );
        let c = &status.conditions;
        assert!(
            condition::is_true(c, types::AVAILABLE),
            "2 of 3 members healthy is a quorum"
        );
        let etcd = condition::get(c, types::ETCD_CLUSTER_HEALTHY).unwrap();
        assert_eq!(etcd.reason, reasons::NOT_HEALTHY);
        assert!(
            etcd.message
                .contains("member node-gone belongs to no machine"),
            "{}",
            etcd.message
        );
        let scaling = condition::get(c, types::SCALING_UP).unwrap();
        assert!(
            scaling
                .message
                .contains("from 2 to 3 replicas; waiting: machine b"),
            "{}",
            scaling.message
        );
        assert!(condition::is_true(c, types::ROLLING_OUT));
        assert_eq!(
            status.initialization.unwrap().control_plane_initialized,
            Some(true)
        );
    }

    #[test]
    fn initialization_never_goes_back() {
        let observed = Observation {
            generation: Some(1),
            replicas: 1,
            selector: "s",
            versions: &[],
            machines: &[],
            ready: &[],
            outdated: &[],
            nodes: &[],
            etcd: None,
            initialized: true,
            certificates: Ok(()),
            waiting: None,
            deleting: None,
            paused: false,
            remediating: None,
            last_remediation: None,
            components: &[],
        };
        let first = compute(None, &observed);
        let later = compute(
            Some(&first),
            &Observation {
                initialized: false,
                ..observed
            },
        );
        assert_eq!(
            later.initialization.unwrap().control_plane_initialized,
            Some(true)
        );
        assert!(!condition::is_true(&later.conditions, types::AVAILABLE));
    }
}
