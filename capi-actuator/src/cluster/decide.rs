//! The decision of one reconcile of an infrastructure cluster, given what was observed.

use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{ApiEndpoint, Cluster, FailureDomain};
use capi_core::condition::{self, ConditionStatus};
use capi_core::infra::InfraCluster;
use capi_core::{ClusterActuator, ClusterScope, labels};
use kube::ResourceExt;

use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::reasons;

/// The finalizer the loop puts on infrastructure clusters before creating anything.
pub const INFRA_CLUSTER_FINALIZER: &str = "infrastructure.cluster.x-k8s.io/cluster";

/// Everything observed for one reconcile.
#[derive(Debug)]
pub(crate) struct Snapshot<C> {
    pub(crate) infra: Arc<C>,
    /// The UID of the owning `Cluster`, from the owner reference.
    pub(crate) owner_uid: Option<String>,
    pub(crate) cluster: Option<Arc<Cluster>>,
    /// Machines of the cluster that still exist (counted only during deletion).
    pub(crate) remaining_machines: usize,
    /// The generation at which an invalid configuration was last reported, if any.
    pub(crate) invalid_at_generation: Option<i64>,
}

/// What a cluster reconcile records besides conditions.
#[derive(Debug, Default)]
pub(crate) struct ClusterRecord {
    pub(crate) control_plane_endpoint: Option<ApiEndpoint>,
    pub(crate) failure_domains: Option<Vec<FailureDomain>>,
    pub(crate) provider_status: capi_core::ProviderStatus,
    pub(crate) provisioned: bool,
}

/// What one cluster reconcile decided.
pub(crate) type Plan = capi_runtime::plan::Plan<ClusterRecord>;

/// Decides one reconcile. Calls the actuator as the contract allows and nothing else.
pub(crate) async fn decide<C: InfraCluster>(
    actuator: &dyn ClusterActuator<C>,
    snapshot: Snapshot<C>,
    poll: Duration,
) -> Plan {
    let infra = Arc::clone(&snapshot.infra);
    let generation = infra.meta().generation;
    let mut plan = Plan::new(generation);

    let paused = labels::has_paused_annotation(infra.meta())
        || snapshot.cluster.as_ref().is_some_and(|c| c.is_paused());
    if plan.paused(paused) {
        return plan;
    }

    let has_finalizer = infra
        .finalizers()
        .iter()
        .any(|f| f == INFRA_CLUSTER_FINALIZER);
    if infra.meta().deletion_timestamp.is_some() {
        if !has_finalizer {
            return plan;
        }
        if snapshot.remaining_machines > 0 {
            return plan.not_ready(
                reasons::WAITING_FOR_MACHINES_DELETION,
                format!(
                    "waiting for {} machine(s) of the cluster to be deleted",
                    snapshot.remaining_machines
                ),
                Next::Requeue(poll),
            );
        }
        // The Cluster may already be gone: the actuator then sees a stand-in with its UID.
        let cluster = snapshot.cluster.unwrap_or_else(|| {
            let mut stand_in = Cluster::default();
            stand_in.metadata.uid = snapshot.owner_uid.clone();
            Arc::new(stand_in)
        });
        let scope = ClusterScope {
            cluster,
            infra_cluster: infra,
        };
        return match actuator.delete(&scope).await {
            Ok(()) => {
                plan.finalizer = FinalizerChange::Remove;
                plan.event(
                    false,
                    reasons::INFRASTRUCTURE_DELETED,
                    "deleted the cluster infrastructure",
                );
                plan
            }
            Err(error) => plan.deletion_error(error),
        };
    }

    let Some(cluster) = snapshot.cluster.clone() else {
        let next = if snapshot.owner_uid.is_some() {
            Next::Requeue(poll)
        } else {
            Next::AwaitChange
        };
        return plan.not_ready(
            reasons::WAITING_FOR_OWNER,
            "waiting for a Cluster to own this object",
            next,
        );
    };
    if !has_finalizer {
        plan.finalizer = FinalizerChange::Add;
        return plan;
    }
    if snapshot.invalid_at_generation.is_some() && snapshot.invalid_at_generation == generation {
        plan.conditions.clear();
        plan.next = Next::InvalidConfiguration;
        return plan;
    }
    let scope = ClusterScope {
        cluster,
        infra_cluster: infra,
    };
    match actuator.reconcile(&scope).await {
        Err(error) => plan.actuator_error(error),
        Ok(reported) => {
            plan.record.control_plane_endpoint = reported
                .control_plane_endpoint
                .filter(ApiEndpoint::is_valid);
            plan.record.failure_domains = Some(reported.failure_domains);
            plan.record.provider_status = reported.provider_status;
            // The provider's own conditions first: `Ready` is the loop's, set below.
            for wanted in reported.conditions {
                if wanted.type_ != condition::READY {
                    plan.provider_condition(wanted);
                }
            }
            if reported.provisioned {
                plan.record.provisioned = true;
                plan.condition(
                    condition::READY,
                    ConditionStatus::True,
                    reasons::INFRASTRUCTURE_READY,
                    "",
                );
                plan.next = Next::Resync;
                plan
            } else {
                plan.not_ready(
                    reasons::INFRASTRUCTURE_PROVISIONING,
                    "the cluster infrastructure is being provisioned",
                    Next::Requeue(poll),
                )
            }
        }
    }
}
