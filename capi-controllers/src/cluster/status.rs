//! A Cluster's status, computed once per pass from what its phases found.

use std::sync::Arc;

use capi_core::api::{
    ClusterInitializationStatus, ClusterPhase, ClusterStatus, Machine, ReplicaSummary,
};
use capi_core::condition::{self, ConditionStatus};

use super::phases::current_endpoint;
use super::{Scope, control_plane};
use capi_runtime::ReconcileError;
use capi_runtime::pace;
use capi_runtime::plan::Next;
use capi_runtime::reasons;

/// Initialization, phase, `Available` and the replica summaries (a control plane provider's own
/// counters, machines counted only without one), written once (paced, see [`pace`]; a change
/// that only informs is held, see [`change`]). A cluster
/// whose infrastructure is not provisioned looks again after the poll interval.
pub(super) async fn write(scope: &mut Scope<'_>) -> Result<Next, ReconcileError> {
    let (cluster, deps) = (scope.cluster, scope.deps());
    let (infra_provisioned, control_plane_initialized) =
        (scope.infra_provisioned, scope.control_plane_initialized);
    let endpoint_valid = current_endpoint(cluster).is_valid()
        || cluster.spec.infrastructure_ref.is_none() && cluster.spec.control_plane_ref.is_none();
    scope.status.initialization = Some(ClusterInitializationStatus {
        infrastructure_provisioned: Some(infra_provisioned),
        control_plane_initialized: Some(control_plane_initialized),
    });
    scope.status.phase = Some(if infra_provisioned && endpoint_valid {
        ClusterPhase::Provisioned
    } else if cluster.spec.infrastructure_ref.is_some() {
        ClusterPhase::Provisioning
    } else {
        ClusterPhase::Pending
    });
    let (available, reason, message) = match (infra_provisioned, control_plane_initialized) {
        (true, true) => (
            ConditionStatus::True,
            reasons::MACHINE_AVAILABLE,
            String::new(),
        ),
        (false, _) => (
            ConditionStatus::False,
            reasons::PROVISIONING,
            "the infrastructure is not provisioned yet".to_string(),
        ),
        (true, false) => (
            ConditionStatus::False,
            reasons::PROVISIONING,
            "the control plane is not initialized yet".to_string(),
        ),
    };
    scope.set(condition::AVAILABLE, available, reason, message);
    // A control plane provider reports its own counters; machines are counted only without one.
    scope.status.control_plane = Some(match &scope.control_plane {
        Some(object) => control_plane::replicas(object),
        None => summary(&scope.machines, true),
    });
    scope.status.workers = Some(summary(&scope.machines, false));
    scope.status.observed_generation = cluster.metadata.generation;
    let next = if infra_provisioned {
        Next::AwaitChange
    } else {
        Next::Requeue(deps.settings.poll)
    };
    let change = change(cluster.status.as_ref(), &scope.status);
    Ok(pace::patch_status_as(
        &deps.pacer,
        &scope.api,
        cluster,
        cluster.status.as_ref(),
        &scope.status,
        change,
        next,
    )
    .await?)
}

/// What the change from `current` to `desired` is to the controllers that read Clusters: acted
/// on when a flag of the initialization becomes or stops being true or the failure domains
/// change (a control plane and the bootstrap
/// provider wait for them, a control plane spreads its machines over them), or `Available`,
/// `InfrastructureReady`, `ControlPlaneInitialized` or `ControlPlaneAvailable` becomes or stops
/// being `True`, or the phase goes into or out of `Provisioned` (what a user waits for before
/// anything else); otherwise it only informs (reasons and messages, conditions that are not yet
/// true, the other phases, the replica summaries).
fn change(current: Option<&ClusterStatus>, desired: &ClusterStatus) -> pace::Change {
    let empty = ClusterStatus::default();
    let current = current.unwrap_or(&empty);
    let initialized = |s: &ClusterStatus| {
        s.initialization.as_ref().map(|i| {
            (
                i.infrastructure_provisioned == Some(true),
                i.control_plane_initialized == Some(true),
            )
        })
    };
    let provisioned = |s: &ClusterStatus| s.phase == Some(ClusterPhase::Provisioned);
    let acted_on = initialized(current).unwrap_or_default()
        != initialized(desired).unwrap_or_default()
        || provisioned(current) != provisioned(desired)
        || current.failure_domains != desired.failure_domains
        || [
            condition::AVAILABLE,
            condition::INFRASTRUCTURE_READY,
            condition::CONTROL_PLANE_INITIALIZED,
            control_plane::CONTROL_PLANE_AVAILABLE,
        ]
        .iter()
        .any(|type_| {
            condition::is_true(&current.conditions, type_)
                != condition::is_true(&desired.conditions, type_)
        });
    if acted_on {
        pace::Change::ActedOn
    } else {
        pace::Change::Informs
    }
}

/// The replica summary of the control-plane machines or of the workers.
fn summary(machines: &[Arc<Machine>], control_plane: bool) -> ReplicaSummary {
    let group: Vec<&Arc<Machine>> = machines
        .iter()
        .filter(|m| m.is_control_plane() == control_plane)
        .collect();
    let count = |f: &dyn Fn(&Machine) -> bool| {
        i32::try_from(group.iter().filter(|m| f(m)).count()).unwrap_or(i32::MAX)
    };
    let has = |type_: &'static str| {
        move |m: &Machine| {
            m.status
                .as_ref()
                .is_some_and(|s| condition::is_true(&s.conditions, type_))
        }
    };
    ReplicaSummary {
        desired_replicas: None,
        replicas: Some(count(&|_| true)),
        ready_replicas: Some(count(&has(condition::READY))),
        available_replicas: Some(count(&has(condition::AVAILABLE))),
        up_to_date_replicas: None,
        versions: versions(group.iter().filter_map(|m| m.spec.version.as_deref())),
        upgrade_plan: Vec::new(),
    }
}

/// How many machines run each Kubernetes version, by version (deterministic, so that the status
/// does not change from one pass to the next).
fn versions<'a>(of: impl Iterator<Item = &'a str>) -> Vec<capi_core::api::StatusVersion> {
    let mut counts = std::collections::BTreeMap::<&str, i32>::new();
    for version in of {
        *counts.entry(version).or_default() += 1;
    }
    counts
        .into_iter()
        .take(32)
        .map(|(version, n)| capi_core::api::StatusVersion {
            version: version.to_string(),
            replicas: Some(n),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(value: serde_json::Value) -> ClusterStatus {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    fn condition(type_: &str, status: &str) -> serde_json::Value {
        serde_json::json!({"type": type_, "status": status, "reason": "R",
                           "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn only_a_change_a_controller_acts_on_is_written_at_once() {
        let waiting = status(serde_json::json!({
            "initialization": {"infrastructureProvisioned": false, "controlPlaneInitialized": false},
            "phase": "Provisioning",
            "conditions": [condition("InfrastructureReady", "False"), condition("Available", "False")],
        }));
        assert_eq!(
            change(None, &waiting),
            pace::Change::Informs,
            "a first status of flags and conditions not yet true only informs"
        );
        let provisioned = status(serde_json::json!({
            "initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": false},
            "phase": "Provisioned",
            "conditions": [condition("InfrastructureReady", "True"), condition("Available", "False")],
        }));
        assert_eq!(
            change(Some(&waiting), &provisioned),
            pace::Change::ActedOn,
            "the control plane and the bootstrap provider wait for the infrastructure"
        );
        let mut summarised = provisioned.clone();
        summarised.workers = Some(ReplicaSummary {
            replicas: Some(1),
            ..ReplicaSummary::default()
        });
        assert_eq!(
            change(Some(&provisioned), &summarised),
            pace::Change::Informs,
            "a replica count only informs"
        );
        let mut spread = provisioned.clone();
        spread.failure_domains =
            serde_json::from_value(serde_json::json!([{"name": "zone-a", "controlPlane": true}]))
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            change(Some(&provisioned), &spread),
            pace::Change::ActedOn,
            "a control plane spreads its machines over the failure domains"
        );
    }
}
