//! What a Cluster reads from its control plane object (`spec.controlPlaneRef`) under the v1beta2
//! control-plane contract, as pure functions of that object: the `ControlPlaneAvailable`
//! condition, mirrored from the control plane's `Available` condition (or derived from
//! `status.initialization.controlPlaneInitialized` when it reports none), and the replica
//! counters of `status.controlPlane`.

use capi_core::api::ReplicaSummary;
use capi_core::condition::ConditionStatus;
use kube::api::DynamicObject;
use serde_json::Value;

/// The Cluster condition that mirrors the control plane's availability.
pub(crate) const CONTROL_PLANE_AVAILABLE: &str = "ControlPlaneAvailable";

/// A condition's status, reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) status: ConditionStatus,
    pub(crate) reason: String,
    pub(crate) message: String,
}

impl Verdict {
    fn new(status: ConditionStatus, reason: &str, message: String) -> Self {
        Self {
            status,
            reason: reason.to_string(),
            message,
        }
    }
}

/// `ControlPlaneAvailable` of a Cluster whose control plane is of `kind`: the control plane
/// object's own `Available` condition when it has one; else `True`/`Available` once it is
/// initialized and `False`/`NotAvailable` before. Without the object: `False`/`DoesNotExist` until
/// the control plane was initialized, `False`/`Deleted` after (it went away under a live
/// cluster, or the cluster is being deleted).
pub(crate) fn available(
    kind: &str,
    control_plane: Option<&DynamicObject>,
    initialized: bool,
    deleting: bool,
) -> Verdict {
    let Some(object) = control_plane else {
        return match (initialized, deleting) {
            (true, true) => Verdict::new(
                ConditionStatus::False,
                "Deleted",
                format!("{kind} has been deleted"),
            ),
            (true, false) => Verdict::new(
                ConditionStatus::False,
                "Deleted",
                format!("{kind} has been deleted while the cluster still exists"),
            ),
            (false, _) => Verdict::new(
                ConditionStatus::False,
                "DoesNotExist",
                format!("{kind} does not exist"),
            ),
        };
    };
    let reported = object.data["status"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == "Available"));
    if let Some(condition) = reported {
        let status = match condition["status"].as_str() {
            Some("True") => ConditionStatus::True,
            Some("False") => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        };
        let reason = condition["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
            .unwrap_or(match status {
                ConditionStatus::True => "Available",
                _ => "NoReasonReported",
            });
        let message = condition["message"].as_str().unwrap_or_default();
        return Verdict::new(status, reason, message.to_string());
    }
    if initialized {
        Verdict::new(ConditionStatus::True, "Available", String::new())
    } else {
        Verdict::new(
            ConditionStatus::False,
            "NotAvailable",
            format!("{kind} status.initialization.controlPlaneInitialized is false"),
        )
    }
}

/// The control plane's replica counters, as the contract names them: `spec.replicas` (desired)
/// and `status.replicas`, `readyReplicas`, `availableReplicas`, `upToDateReplicas`. A counter the
/// object does not report stays unset.
pub(crate) fn replicas(control_plane: &DynamicObject) -> ReplicaSummary {
    let count = |value: &Value| value.as_i64().and_then(|n| i32::try_from(n).ok());
    let status = &control_plane.data["status"];
    ReplicaSummary {
        desired_replicas: count(&control_plane.data["spec"]["replicas"]),
        replicas: count(&status["replicas"]),
        ready_replicas: count(&status["readyReplicas"]),
        available_replicas: count(&status["availableReplicas"]),
        up_to_date_replicas: count(&status["upToDateReplicas"]),
        // The control plane's own `status.versions`, where it reports them.
        versions: serde_json::from_value(status["versions"].clone()).unwrap_or_default(),
        upgrade_plan: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use kube::api::{ApiResource, GroupVersionKind};
    use serde_json::json;

    use super::*;

    fn kcp(data: Value) -> DynamicObject {
        let gvk = GroupVersionKind::gvk(
            "controlplane.cluster.x-k8s.io",
            "v1beta2",
            "KubeadmControlPlane",
        );
        DynamicObject::new("cp", &ApiResource::from_gvk(&gvk)).data(data)
    }

    #[test]
    fn the_control_planes_available_condition_is_mirrored() {
        let object = kcp(json!({"status": {"conditions": [
            {"type": "Available", "status": "False", "reason": "EtcdQuorumLost", "message": "2 of 3 members down"},
        ]}}));
        let verdict = available("KubeadmControlPlane", Some(&object), true, false);
        assert_eq!(
            verdict,
            Verdict::new(
                ConditionStatus::False,
                "EtcdQuorumLost",
                "2 of 3 members down".into()
            )
        );
        // A v1beta1-style condition without a reason gets a readable one.
        let object =
            kcp(json!({"status": {"conditions": [{"type": "Available", "status": "True"}]}}));
        let verdict = available("KubeadmControlPlane", Some(&object), true, false);
        assert_eq!(
            (verdict.status, verdict.reason.as_str()),
            (ConditionStatus::True, "Available")
        );
    }

    #[test]
    fn without_a_reported_condition_initialization_decides() {
        let object = kcp(json!({"status": {"initialization": {"controlPlaneInitialized": false}}}));
        let before = available("KubeadmControlPlane", Some(&object), false, false);
        assert_eq!(before.status, ConditionStatus::False);
        assert_eq!(before.reason, "NotAvailable");
        assert_eq!(
            before.message,
            "KubeadmControlPlane status.initialization.controlPlaneInitialized is false"
        );
        let after = available("KubeadmControlPlane", Some(&object), true, false);
        assert_eq!(
            (after.status, after.reason.as_str()),
            (ConditionStatus::True, "Available")
        );
    }

    #[test]
    fn a_missing_control_plane_is_named_for_what_happened() {
        let missing =
            |initialized, deleting| available("KubeadmControlPlane", None, initialized, deleting);
        assert_eq!(missing(false, false).reason, "DoesNotExist");
        assert_eq!(
            missing(false, false).message,
            "KubeadmControlPlane does not exist"
        );
        assert_eq!(missing(true, false).reason, "Deleted");
        assert_eq!(
            missing(true, false).message,
            "KubeadmControlPlane has been deleted while the cluster still exists"
        );
        assert_eq!(
            missing(true, true).message,
            "KubeadmControlPlane has been deleted"
        );
        assert!(
            [missing(false, true), missing(true, true)]
                .iter()
                .all(|v| v.status == ConditionStatus::False)
        );
    }

    #[test]
    fn replica_counters_come_from_the_object_and_missing_ones_stay_unset() {
        let object = kcp(json!({
            "spec": {"replicas": 3},
            "status": {"replicas": 4, "readyReplicas": 3, "availableReplicas": 3,
                       "versions": [{"version": "v1.34.1", "replicas": 4}]},
        }));
        assert_eq!(
            replicas(&object),
            ReplicaSummary {
                desired_replicas: Some(3),
                replicas: Some(4),
                ready_replicas: Some(3),
                available_replicas: Some(3),
                up_to_date_replicas: None,
                versions: vec![capi_core::api::StatusVersion {
                    version: "v1.34.1".into(),
                    replicas: Some(4),
                }],
                upgrade_plan: Vec::new(),
            }
        );
    }
}
