//! The control-plane components of a machine's node — the static pods `kube-apiserver-<node>`,
//! `kube-controller-manager-<node>`, `kube-scheduler-<node>` and `etcd-<node>` in `kube-system`,
//! as kubeadm runs them — judged from what the workload API server reports, as pure functions.
//!
//! Each component becomes a condition of the machine (`APIServerPodHealthy`,
//! `ControllerManagerPodHealthy`, `SchedulerPodHealthy`, `EtcdPodHealthy`; types and reasons as
//! upstream Cluster API's v1beta2 KubeadmControlPlane), and the machines' conditions together
//! make the control plane's `ControlPlaneComponentsHealthy`. A machine takes part in a scale or
//! rollout step only when all of its components are healthy.

use capi_core::condition::ConditionStatus;
use k8s_openapi::api::core::v1::Pod;

/// A control-plane component kubeadm runs as a static pod on every control-plane node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Component {
    /// `kube-apiserver`.
    ApiServer,
    /// `kube-controller-manager`.
    ControllerManager,
    /// `kube-scheduler`.
    Scheduler,
    /// `etcd` (stacked etcd).
    Etcd,
}

impl Component {
    /// Every component, in the order their conditions are reported.
    pub const ALL: [Component; 4] = [
        Component::ApiServer,
        Component::ControllerManager,
        Component::Scheduler,
        Component::Etcd,
    ];

    /// The value of the pod's `component` label, and the prefix of its name.
    pub fn name(self) -> &'static str {
        match self {
            Component::ApiServer => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
            Component::Etcd => "etcd",
        }
    }

    /// The static pod's name on `node`, as the kubelet mirrors it: `<component>-<node>`.
    pub fn pod_name(self, node: &str) -> String {
        format!("{}-{node}", self.name())
    }

    /// The machine condition that reports this component.
    pub fn condition_type(self) -> &'static str {
        match self {
            Component::ApiServer => types::API_SERVER_POD_HEALTHY,
            Component::ControllerManager => types::CONTROLLER_MANAGER_POD_HEALTHY,
            Component::Scheduler => types::SCHEDULER_POD_HEALTHY,
            Component::Etcd => types::ETCD_POD_HEALTHY,
        }
    }
}

/// Machine condition types the control plane writes.
pub mod types {
    /// The node's `kube-apiserver` pod runs and is ready.
    pub const API_SERVER_POD_HEALTHY: &str = "APIServerPodHealthy";
    /// The node's `kube-controller-manager` pod runs and is ready.
    pub const CONTROLLER_MANAGER_POD_HEALTHY: &str = "ControllerManagerPodHealthy";
    /// The node's `kube-scheduler` pod runs and is ready.
    pub const SCHEDULER_POD_HEALTHY: &str = "SchedulerPodHealthy";
    /// The node's `etcd` pod runs and is ready.
    pub const ETCD_POD_HEALTHY: &str = "EtcdPodHealthy";
    /// The node's etcd member is healthy.
    pub const ETCD_MEMBER_HEALTHY: &str = "EtcdMemberHealthy";
}

/// Reasons of the machine conditions.
pub mod reasons {
    /// The pod runs and is ready.
    pub const POD_RUNNING: &str = "Running";
    /// The pod is starting (pending, or running but not ready yet).
    pub const POD_PROVISIONING: &str = "Provisioning";
    /// The pod's containers failed or ended.
    pub const POD_FAILED: &str = "Failed";
    /// There is no such pod on the node.
    pub const POD_DOES_NOT_EXIST: &str = "DoesNotExist";
    /// The pod's state could not be read, or the node does not report.
    pub const POD_INSPECTION_FAILED: &str = "InspectionFailed";
    /// The etcd member is healthy.
    pub const MEMBER_HEALTHY: &str = "Healthy";
    /// The etcd member is unhealthy, or missing.
    pub const MEMBER_NOT_HEALTHY: &str = "NotHealthy";
    /// etcd could not be read.
    pub const MEMBER_INSPECTION_FAILED: &str = "InspectionFailed";
}

/// One judged condition of a machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// The condition type.
    pub type_: &'static str,
    /// Its status.
    pub status: ConditionStatus,
    /// Its reason.
    pub reason: &'static str,
    /// What a user should know; empty when healthy.
    pub message: String,
}

impl Judgement {
    fn new(
        type_: &'static str,
        status: ConditionStatus,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }
}

/// What the workload cluster said about one control-plane node.
#[derive(Clone, Copy, Debug)]
pub enum NodeView<'a> {
    /// The static pods bound to the node (pods of other nodes are ignored).
    Read {
        /// The node reports (its `Ready` condition is not `Unknown`): its pods' states are
        /// current. A node whose kubelet stopped reporting leaves stale pod states behind.
        reporting: bool,
        /// The pods in `kube-system` bound to it.
        pods: &'a [Pod],
    },
    /// The workload cluster could not be asked; the reason, for the message.
    Unreadable(&'a str),
}

/// The condition of `component` on `node`, as upstream judges a static pod: missing pod → False
/// (`DoesNotExist`); running and ready → True; pending, or running and not ready with no
/// container failing → False (`Provisioning`); a container waiting after a crash, terminated
/// containers, phase `Failed` or `Succeeded` → False (`Failed`); phase `Unknown`, an unreachable
/// node, or an unreadable workload cluster → Unknown (`InspectionFailed`).
pub fn judge_pod(component: Component, node: &str, view: NodeView<'_>) -> Judgement {
    use ConditionStatus::{False, True, Unknown};
    let type_ = component.condition_type();
    let name = component.pod_name(node);
    let (reporting, pods) = match view {
        NodeView::Unreadable(why) => {
            return Judgement::new(
                type_,
                Unknown,
                reasons::POD_INSPECTION_FAILED,
                format!("pod {name} cannot be read: {why}"),
            );
        }
        NodeView::Read { reporting, pods } => (reporting, pods),
    };
    if !reporting {
        return Judgement::new(
            type_,
            Unknown,
            reasons::POD_INSPECTION_FAILED,
            format!("node {node} does not report (its Ready condition is Unknown)"),
        );
    }
    let Some(pod) = pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
    else {
        return Judgement::new(
            type_,
            False,
            reasons::POD_DOES_NOT_EXIST,
            format!("pod {name} does not exist"),
        );
    };
    let status = pod.status.clone().unwrap_or_default();
    let containers = status.container_statuses.unwrap_or_default();
    // A container that crashed and waits to restart, or one that is not running at all any more.
    let crashed: Vec<String> = containers
        .iter()
        .filter_map(|c| {
            let state = c.state.as_ref()?;
            if let Some(waiting) = &state.waiting
                && let Some(reason) = &waiting.reason
                && failing_wait(reason)
            {
                return Some(format!("container {} is waiting: {reason}", c.name));
            }
            state.terminated.as_ref().map(|t| {
                let reason = t.reason.as_deref().unwrap_or("terminated");
                format!("container {} terminated: {reason}", c.name)
            })
        })
        .collect();
    let ready = status
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    match status.phase.as_deref() {
        Some("Running") if ready => Judgement::new(type_, True, reasons::POD_RUNNING, ""),
        Some("Running") | Some("Pending") if !crashed.is_empty() => Judgement::new(
            type_,
            False,
            reasons::POD_FAILED,
            format!("pod {name}: {}", crashed.join("; ")),
        ),
        Some("Running") => Judgement::new(
            type_,
            False,
            reasons::POD_PROVISIONING,
            format!("pod {name} is running but not ready yet (startup or readiness probes)"),
        ),
        Some("Pending") | None => Judgement::new(
            type_,
            False,
            reasons::POD_PROVISIONING,
            format!("pod {name} is pending"),
        ),
        Some("Succeeded") | Some("Failed") => Judgement::new(
            type_,
            False,
            reasons::POD_FAILED,
            format!("pod {name}: all its containers have terminated"),
        ),
        Some(other) => Judgement::new(
            type_,
            Unknown,
            reasons::POD_INSPECTION_FAILED,
            format!("pod {name} reports phase {other}"),
        ),
    }
}

/// Waiting reasons that mean a container failed rather than that it is still starting.
fn failing_wait(reason: &str) -> bool {
    matches!(
        reason,
        "CrashLoopBackOff"
            | "ErrImagePull"
            | "ImagePullBackOff"
            | "InvalidImageName"
            | "CreateContainerConfigError"
            | "CreateContainerError"
            | "RunContainerError"
    )
}

/// The component conditions of one control-plane node: every [`Component`], etcd's only when
/// etcd is stacked (`stacked_etcd`).
pub fn judge_node(node: &str, view: NodeView<'_>, stacked_etcd: bool) -> Vec<Judgement> {
    Component::ALL
        .into_iter()
        .filter(|c| stacked_etcd || *c != Component::Etcd)
        .map(|c| judge_pod(c, node, view))
        .collect()
}

/// The `EtcdMemberHealthy` condition of a machine whose node is `node`: `member` is what etcd
/// said of the member of that name (`Ok(None)`: no such member), or why etcd could not be read.
pub fn judge_member(
    node: &str,
    member: Result<Option<&crate::etcd::EtcdMember>, &str>,
) -> Judgement {
    use ConditionStatus::{False, True, Unknown};
    let type_ = types::ETCD_MEMBER_HEALTHY;
    match member {
        Err(why) => Judgement::new(
            type_,
            Unknown,
            reasons::MEMBER_INSPECTION_FAILED,
            format!("etcd cannot be read: {why}"),
        ),
        Ok(None) => Judgement::new(
            type_,
            False,
            reasons::MEMBER_NOT_HEALTHY,
            format!("etcd has no member for node {node}"),
        ),
        Ok(Some(m)) if m.learner => Judgement::new(
            type_,
            False,
            reasons::MEMBER_NOT_HEALTHY,
            format!("etcd member {node} is a learner, not yet voting"),
        ),
        Ok(Some(m)) if !m.healthy => Judgement::new(
            type_,
            False,
            reasons::MEMBER_NOT_HEALTHY,
            format!("etcd member {node} is not healthy"),
        ),
        Ok(Some(_)) => Judgement::new(type_, True, reasons::MEMBER_HEALTHY, ""),
    }
}

/// Whether every judgement is `True`.
pub fn all_healthy(judgements: &[Judgement]) -> bool {
    judgements.iter().all(|j| j.status == ConditionStatus::True)
}

/// Whether any judgement is `False` (a failure seen, not merely unknown).
pub fn any_failing(judgements: &[Judgement]) -> bool {
    judgements
        .iter()
        .any(|j| j.status == ConditionStatus::False)
}

/// The control plane's aggregate of some of its machines' judgements (those of
/// `types`): `True` when every machine's are `True`; otherwise `False` when one is `False`,
/// else `Unknown`; the message lists each machine's problems as `* Machine <name>: <message>`
/// lines, machines in the order given.
pub fn aggregate(
    machines: &[(&str, &[Judgement])],
    types: &[&str],
) -> (ConditionStatus, Vec<String>) {
    let mut status = ConditionStatus::True;
    let mut lines = Vec::new();
    for (machine, judgements) in machines {
        let relevant: Vec<&Judgement> = judgements
            .iter()
            .filter(|j| types.contains(&j.type_))
            .collect();
        let problems: Vec<String> = relevant
            .iter()
            .filter(|j| j.status != ConditionStatus::True)
            .map(|j| format!("{}: {}", j.type_, j.message))
            .collect();
        for j in &relevant {
            status = match (status, j.status) {
                (_, ConditionStatus::False) | (ConditionStatus::False, _) => ConditionStatus::False,
                (_, ConditionStatus::Unknown) | (ConditionStatus::Unknown, _) => {
                    ConditionStatus::Unknown
                }
                _ => ConditionStatus::True,
            };
        }
        if !problems.is_empty() {
            lines.push(format!("* Machine {machine}: {}", problems.join("; ")));
        }
    }
    (status, lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
        PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, phase: &str, ready: bool, containers: Vec<ContainerStatus>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                container_statuses: Some(containers),
                ..PodStatus::default()
            }),
        }
    }

    fn waiting(reason: &str) -> ContainerStatus {
        ContainerStatus {
            name: "c".into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.into()),
                    message: None,
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }
    }

    fn judge(pods: &[Pod]) -> Judgement {
        judge_pod(
            Component::ApiServer,
            "n1",
            NodeView::Read {
                reporting: true,
                pods,
            },
        )
    }

    #[test]
    fn a_static_pod_is_judged_as_upstream_judges_it() {
        use ConditionStatus::{False, True, Unknown};
        let healthy = judge(&[pod("kube-apiserver-n1", "Running", true, vec![])]);
        assert_eq!(
            (healthy.status, healthy.reason),
            (True, reasons::POD_RUNNING)
        );

        let missing = judge(&[pod("kube-apiserver-n2", "Running", true, vec![])]);
        assert_eq!(
            (missing.status, missing.reason, missing.message.as_str()),
            (
                False,
                reasons::POD_DOES_NOT_EXIST,
                "pod kube-apiserver-n1 does not exist"
            )
        );

        let starting = judge(&[pod(
            "kube-apiserver-n1",
            "Running",
            false,
            vec![waiting("ContainerCreating")],
        )]);
        assert_eq!(
            (starting.status, starting.reason),
            (False, reasons::POD_PROVISIONING)
        );

        let crashing = judge(&[pod(
            "kube-apiserver-n1",
            "Running",
            false,
            vec![waiting("CrashLoopBackOff")],
        )]);
        assert_eq!(
            (crashing.status, crashing.reason),
            (False, reasons::POD_FAILED)
        );
        assert!(
            crashing.message.contains("CrashLoopBackOff"),
            "{}",
            crashing.message
        );

        let ended = judge(&[pod(
            "kube-apiserver-n1",
            "Running",
            false,
            vec![ContainerStatus {
                name: "c".into(),
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        reason: Some("Error".into()),
                        ..ContainerStateTerminated::default()
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }],
        )]);
        assert_eq!((ended.status, ended.reason), (False, reasons::POD_FAILED));

        let failed = judge(&[pod("kube-apiserver-n1", "Failed", false, vec![])]);
        assert_eq!((failed.status, failed.reason), (False, reasons::POD_FAILED));

        let unknown = judge(&[pod("kube-apiserver-n1", "Unknown", false, vec![])]);
        assert_eq!(
            (unknown.status, unknown.reason),
            (Unknown, reasons::POD_INSPECTION_FAILED)
        );

        let unreadable = judge_pod(
            Component::Scheduler,
            "n1",
            NodeView::Unreadable("connection refused"),
        );
        assert_eq!(unreadable.type_, types::SCHEDULER_POD_HEALTHY);
        assert_eq!(unreadable.status, Unknown);
    }

    #[test]
    fn a_node_that_does_not_report_makes_its_pods_unknown_not_failed() {
        let pods = [pod("kube-apiserver-n1", "Running", true, vec![])];
        let judged = judge_pod(
            Component::ApiServer,
            "n1",
            NodeView::Read {
                reporting: false,
                pods: &pods,
            },
        );
        assert_eq!(judged.status, ConditionStatus::Unknown);
        assert!(
            judged.message.contains("does not report"),
            "{}",
            judged.message
        );
    }

    #[test]
    fn etcd_is_judged_only_when_stacked() {
        let view = NodeView::Read {
            reporting: true,
            pods: &[],
        };
        assert_eq!(judge_node("n1", view, true).len(), 4);
        let external = judge_node("n1", view, false);
        assert_eq!(external.len(), 3);
        assert!(external.iter().all(|j| j.type_ != types::ETCD_POD_HEALTHY));
    }

    #[test]
    fn the_aggregate_is_false_over_unknown_over_true_and_names_each_machine() {
        let view = |pods: &'static [Pod]| NodeView::Read {
            reporting: true,
            pods,
        };
        let a = judge_node("a", view(&[]), false);
        let b = judge_node("b", NodeView::Unreadable("timeout"), false);
        let types = [types::API_SERVER_POD_HEALTHY, types::SCHEDULER_POD_HEALTHY];
        let (status, lines) = aggregate(&[("ma", &a), ("mb", &b)], &types);
        assert_eq!(status, ConditionStatus::False);
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].starts_with(
                "* Machine ma: APIServerPodHealthy: pod kube-apiserver-a does not exist"
            ),
            "{}",
            lines[0]
        );
        let (status, _) = aggregate(&[("mb", &b)], &types);
        assert_eq!(status, ConditionStatus::Unknown);
        let (status, lines) = aggregate(&[], &types);
        assert_eq!((status, lines.len()), (ConditionStatus::True, 0));
    }

    #[test]
    fn a_member_is_healthy_only_when_it_votes_and_answers() {
        let member = |healthy, learner| crate::etcd::EtcdMember {
            id: 1,
            name: "n1".into(),
            healthy,
            learner,
        };
        assert_eq!(
            judge_member("n1", Ok(Some(&member(true, false)))).status,
            ConditionStatus::True
        );
        assert_eq!(
            judge_member("n1", Ok(Some(&member(true, true)))).status,
            ConditionStatus::False
        );
        assert_eq!(
            judge_member("n1", Ok(Some(&member(false, false)))).status,
            ConditionStatus::False
        );
        assert_eq!(judge_member("n1", Ok(None)).status, ConditionStatus::False);
        assert_eq!(
            judge_member("n1", Err("timeout")).status,
            ConditionStatus::Unknown
        );
    }
}
