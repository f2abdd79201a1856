//! The phases of a Cluster pass, in the order [`super::reconcile_once`] runs them. A phase that
//! returns `Break` ends the pass with what comes next; the others record what they found in the
//! scope for [`super::status`].

use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;

use capi_core::api::{ApiEndpoint, FailureDomain, Machine};
use capi_core::condition::{self, ConditionStatus};
use capi_core::labels;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::json;

use super::{Scope, TOPOLOGY_RECONCILED, control_plane};
use crate::references::{ReferenceError, initialization_flag};
use crate::{ownership, synced};
use capi_runtime::ReconcileError;
use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::reasons;
use capi_runtime::write;

/// The finalizer, before anything else: a cluster is never deleted without deleting what it is
/// made of.
pub(super) async fn ensure_finalizer(
    scope: &Scope<'_>,
) -> Result<ControlFlow<Next>, ReconcileError> {
    if super::has_finalizer(scope.cluster) {
        return Ok(Continue(()));
    }
    write::change_finalizer(
        &scope.api,
        scope.cluster,
        FinalizerChange::Add,
        labels::CLUSTER_FINALIZER,
    )
    .await?;
    Ok(Break(Next::AwaitChange))
}

/// `Paused` recorded; a paused cluster writes it and changes nothing else.
pub(super) async fn honour_pause(
    scope: &mut Scope<'_>,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let cluster = scope.cluster;
    let paused = cluster.is_paused();
    condition::set(
        &mut scope.status.conditions,
        reasons::paused_condition(paused, cluster.metadata.generation),
    );
    if paused {
        write::patch_status_if_changed(
            &scope.api,
            &cluster.name_any(),
            cluster.status.as_ref(),
            &scope.status,
        )
        .await?;
        return Ok(Break(Next::AwaitChange));
    }
    Ok(Continue(()))
}

/// A topology is stored, not acted on: `TopologyReconciled` says so where upstream reports on it.
pub(super) fn record_topology(scope: &mut Scope<'_>) {
    match &scope.cluster.spec.topology {
        Some(topology) => scope.set(
            TOPOLOGY_RECONCILED,
            ConditionStatus::False,
            reasons::TOPOLOGY_NOT_SUPPORTED,
            format!(
                "spec.topology (ClusterClass {:?}) is stored but not acted on: this workspace's core \
                 controllers have no topology controller; run upstream Cluster API's core manager \
                 for ClusterClass clusters, or describe the cluster with controlPlaneRef, \
                 infrastructureRef and MachineDeployments",
                topology.class_ref.name
            ),
        ),
        None => {
            condition::remove(&mut scope.status.conditions, TOPOLOGY_RECONCILED);
        }
    }
}

/// The infrastructure cluster owned by the cluster; its endpoint, failure domains and
/// provisioning recorded (`InfrastructureReady`). No infrastructure reference counts as
/// provisioned.
pub(super) async fn reconcile_infrastructure(scope: &mut Scope<'_>) -> Result<(), ReconcileError> {
    let (cluster, deps) = (scope.cluster, scope.deps());
    let namespace = scope.namespace.as_str();
    let (infra_provisioned, infra_reason, infra_message) = match &cluster.spec.infrastructure_ref {
        None => (true, reasons::PROVISIONED, String::new()),
        Some(reference) => match deps.references.get(reference, namespace).await {
            Err(
                error @ (ReferenceError::UnknownKind { .. }
                | ReferenceError::NotAProviderKind { .. }),
            ) => (false, reasons::REFERENCE_KIND_UNKNOWN, error.to_string()),
            Err(error) => return Err(error.into()),
            Ok(None) => (
                false,
                reasons::REFERENCE_NOT_FOUND,
                format!("waiting for {} {:?}", reference.kind, reference.name),
            ),
            Ok(Some(infra)) => {
                if let Some(owner) = scope.owner.clone() {
                    ownership::ensure_owner(
                        &deps.references,
                        reference,
                        namespace,
                        &infra,
                        owner,
                        &cluster.name_any(),
                    )
                    .await?;
                }
                scope.endpoint = endpoint_of(&infra);
                if let Ok(domains) = serde_json::from_value::<Vec<FailureDomain>>(
                    infra.data["status"]["failureDomains"].clone(),
                ) {
                    scope.status.failure_domains = domains;
                }
                if initialization_flag(&infra, "provisioned") {
                    (true, reasons::PROVISIONED, String::new())
                } else {
                    (
                        false,
                        reasons::PROVISIONING,
                        format!(
                            "{} {:?} is being provisioned",
                            reference.kind, reference.name
                        ),
                    )
                }
            }
        },
    };
    scope.infra_provisioned = infra_provisioned;
    scope.set(
        condition::INFRASTRUCTURE_READY,
        if infra_provisioned {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        infra_reason,
        infra_message,
    );
    Ok(())
}

/// Reads (writes nothing) the cluster's machines from the cache into the scope; none while the
/// cache is not synced.
pub(super) fn observe_machines(scope: &mut Scope<'_>) {
    let cluster = scope.cluster;
    let namespace = scope.namespace.as_str();
    scope.machines = synced(&scope.deps().machines)
        .map(|store| {
            store
                .state()
                .into_iter()
                .filter(|m| {
                    m.namespace().as_deref() == Some(namespace)
                        && m.spec.cluster_name == cluster.name_any()
                })
                .collect::<Vec<Arc<Machine>>>()
        })
        .unwrap_or_default();
}

/// The control plane owned by the cluster, and whether it is initialized: as the control plane
/// object reports it (through the contract), or without one once a control-plane machine has a
/// node. Once initialized, always initialized. `ControlPlaneAvailable` (with a control plane
/// object) and `ControlPlaneInitialized` recorded; the endpoint taken from the control plane when
/// the infrastructure has none.
pub(super) async fn reconcile_control_plane(scope: &mut Scope<'_>) -> Result<(), ReconcileError> {
    let (cluster, deps) = (scope.cluster, scope.deps());
    let namespace = scope.namespace.as_str();
    let reported_initialized = match &cluster.spec.control_plane_ref {
        Some(reference) => match deps.references.get(reference, namespace).await {
            Err(ReferenceError::UnknownKind { .. } | ReferenceError::NotAProviderKind { .. })
            | Ok(None) => false,
            Err(error) => return Err(error.into()),
            Ok(Some(control_plane)) => {
                if let Some(owner) = scope.owner.clone() {
                    ownership::ensure_owner(
                        &deps.references,
                        reference,
                        namespace,
                        &control_plane,
                        owner,
                        &cluster.name_any(),
                    )
                    .await?;
                }
                if scope.endpoint.is_none() {
                    scope.endpoint = endpoint_of(&control_plane);
                }
                let initialized = initialization_flag(&control_plane, "controlPlaneInitialized");
                scope.control_plane = Some(control_plane);
                initialized
            }
        },
        None => scope.machines.iter().any(|m| {
            m.is_control_plane() && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
        }),
    };
    // Once initialized, always initialized (as upstream): a control plane that goes away later is
    // reported as deleted, not as never having existed.
    let control_plane_initialized = reported_initialized
        || cluster
            .status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.control_plane_initialized)
            == Some(true);
    scope.control_plane_initialized = control_plane_initialized;
    if let Some(reference) = &cluster.spec.control_plane_ref {
        let verdict = control_plane::available(
            &reference.kind,
            scope.control_plane.as_deref(),
            control_plane_initialized,
            cluster.metadata.deletion_timestamp.is_some(),
        );
        scope.set(
            control_plane::CONTROL_PLANE_AVAILABLE,
            verdict.status,
            &verdict.reason,
            verdict.message,
        );
    }
    scope.set(
        condition::CONTROL_PLANE_INITIALIZED,
        if control_plane_initialized {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        if control_plane_initialized {
            "Initialized"
        } else {
            "WaitingForControlPlane"
        },
        String::new(),
    );
    Ok(())
}

/// `spec.controlPlaneEndpoint` copied from the infrastructure cluster or control plane once one
/// reports a valid endpoint; a valid endpoint is never replaced.
pub(super) async fn ensure_endpoint(scope: &Scope<'_>) -> Result<(), ReconcileError> {
    let cluster = scope.cluster;
    if let Some(found) = scope.endpoint.as_ref().filter(|e| e.is_valid())
        && !current_endpoint(cluster).is_valid()
    {
        let patch = json!({"spec": {"controlPlaneEndpoint": found}});
        write::patch(&scope.api, &cluster.name_any(), patch).await?;
    }
    Ok(())
}

/// `spec.controlPlaneEndpoint` as the cluster has it (empty when unset).
pub(super) fn current_endpoint(cluster: &capi_core::api::Cluster) -> ApiEndpoint {
    cluster
        .spec
        .control_plane_endpoint
        .clone()
        .unwrap_or_default()
}

/// `spec.controlPlaneEndpoint` of an infrastructure cluster or control plane, if it has one.
fn endpoint_of(object: &DynamicObject) -> Option<ApiEndpoint> {
    serde_json::from_value(object.data["spec"]["controlPlaneEndpoint"].clone()).ok()
}
