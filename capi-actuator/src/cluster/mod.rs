//! The infrastructure cluster reconciler: drives a [`ClusterActuator`] for a provider's cluster
//! kind.
//!
//! Per object: find the owner `Cluster`; honour pause; on deletion wait until the cluster's
//! machines are gone, then call `delete` until the infrastructure is gone, then drop the finalizer;
//! otherwise add the finalizer, call `reconcile`, and record `spec.controlPlaneEndpoint`,
//! `status.failureDomains`, `status.initialization.provisioned` and conditions.

mod decide;
mod observe;
mod record;

use std::sync::Arc;

use capi_core::ClusterActuator;
use capi_core::api::Cluster;
use capi_core::infra::InfraCluster;
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use futures::Future;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

pub use decide::INFRA_CLUSTER_FINALIZER;

use crate::instrument::InstrumentedClusterActuator;
use capi_runtime::cache::lookup::Cached;
use capi_runtime::plan::Next;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// The reconciler of one infrastructure cluster kind `C`.
pub type InfraClusterReconciler<C> = Reconciler<C, dyn ClusterActuator<C>>;

/// Runs `reconciler` until `shutdown` completes; in-flight reconciles finish first.
pub async fn run<C: InfraCluster>(
    reconciler: InfraClusterReconciler<C>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, reader) = reconciler.trigger();
    reconciler.offer_as_referenced();
    let (clusters, cluster_stream) = reconciler.cached::<Cluster>();
    let concurrency = reconciler.concurrency();
    let context = reconciler.into_context(|inner, metrics, controller| {
        Arc::new(InstrumentedClusterActuator {
            inner,
            metrics,
            controller,
        })
    });
    let results = Controller::for_stream(trigger, reader)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        // The Cluster changes (paused, deleted, adopted): reconcile its infrastructure.
        .watches_stream(cluster_stream, |cluster| {
            let reference = cluster.spec.infrastructure_ref.as_ref()?;
            let ours = reference.kind == C::kind(&()) && reference.api_group == C::group(&());
            let namespace = cluster.namespace().unwrap_or_default();
            ours.then(|| ObjectRef::<C>::new(&reference.name).within(&namespace))
        })
        .graceful_shutdown_on(shutdown)
        .run(
            move |infra, context| reconcile::<C>(infra, context, clusters.clone()),
            back_off::<C, dyn ClusterActuator<C>>,
            context,
        );
    drain(results).await;
}

#[tracing::instrument(skip_all, fields(kind = %C::kind(&()), namespace = %infra.namespace().unwrap_or_default(), name = %infra.name_any()))]
async fn reconcile<C: InfraCluster>(
    infra: Arc<C>,
    context: Arc<Context<dyn ClusterActuator<C>>>,
    clusters: Cached<Cluster>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(infra.as_ref(), reconcile_once(&infra, &context, &clusters))
        .await
}

async fn reconcile_once<C: InfraCluster>(
    infra: &Arc<C>,
    context: &Context<dyn ClusterActuator<C>>,
    clusters: &Cached<Cluster>,
) -> Result<Next, ReconcileError> {
    let invalid = context.retry.invalid_at(infra.as_ref());
    let snapshot = observe::observe(&context.client, clusters, Arc::clone(infra), invalid).await?;
    let plan = decide::decide(context.state.as_ref(), snapshot, context.retry.policy.poll).await;
    record::record(&context.client, &context.recorder, infra.as_ref(), &plan).await?;
    Ok(plan.next)
}

#[cfg(test)]
pub(crate) mod tests;
