//! The infrastructure machine reconciler: drives an [`Actuator`] for a provider's machine kind.
//!
//! Per object: find the owner `Machine`, its `Cluster` and the provider's cluster object; honour
//! pause; on deletion call
//! `delete` until the instance is gone, then drop the finalizer; otherwise add the finalizer, wait
//! for the cluster infrastructure and the bootstrap data, then `exists` → `update`, or `create`,
//! and record provider ID, addresses, `initialization.provisioned` and conditions.
//!
//! Phases are separate functions: `observe` reads, `decide`
//! calls the cloud and plans, `record` writes.

mod actuator;
mod decide;
mod observe;
mod record;

use std::sync::Arc;

use capi_core::Actuator;
use capi_core::api::{Cluster, Machine};
use capi_core::infra::{InfraCluster, InfraMachine};
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use futures::Future;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

pub use actuator::{AnyInstance, DynActuator, erase};
pub use decide::{Decision, INFRA_MACHINE_FINALIZER, Observed, decide_once};
pub(crate) use observe::infra_cluster;

use crate::instrument::InstrumentedActuator;
use capi_runtime::cache::packed::Packed;
use capi_runtime::plan::Next;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// The reconciler of one infrastructure machine kind `M` of cluster kind `C`.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use capi_actuator::machine;
/// # use capi_runtime::ReconcilerOptions;
/// # use capi_core::infra::{InfraCluster, InfraMachine};
/// # async fn demo<M: InfraMachine, C: InfraCluster>(
/// #     client: kube::Client,
/// #     actuator: Arc<impl capi_core::Actuator<M, C> + 'static>,
/// # ) {
/// let reconciler = machine::reconciler(client, actuator)
///     .options(ReconcilerOptions::default().concurrency(32));
/// machine::run(reconciler, std::future::pending()).await;
/// # }
/// ```
pub type InfraMachineReconciler<M, C> = Reconciler<M, DynActuator<M, C>>;

/// A reconciler of `M` driving `actuator` (see [`Reconciler::new`] for the rest); [`run`] runs it.
pub fn reconciler<M, C, A>(client: kube::Client, actuator: Arc<A>) -> InfraMachineReconciler<M, C>
where
    M: InfraMachine,
    C: InfraCluster,
    A: Actuator<M, C> + ?Sized + 'static,
{
    Reconciler::new(client, erase(actuator))
}

/// Runs `reconciler` until `shutdown` completes; in-flight reconciles finish first.
pub async fn run<M: InfraMachine, C: InfraCluster>(
    reconciler: InfraMachineReconciler<M, C>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    // Packed: one cached object per machine, decoded only when reconciled.
    let (trigger, reader) = reconciler.packed_trigger();
    reconciler.offer_packed_as_referenced();
    let by_cluster = reader.clone();
    let (machines, machine_stream) = reconciler.cached::<Machine>();
    let (clusters, cluster_stream) = reconciler.cached::<Cluster>();
    // No stream: a change of the provider's cluster object reaches its machines at their
    // resync; a machine waiting for it looks again by itself.
    let infra_clusters = capi_runtime::cache::lookup::Cached::of(
        reconciler.informer::<C>(),
        reconciler.client().clone(),
    );
    let owners = Arc::new(observe::Owners {
        machines,
        clusters,
        infra_clusters,
    });
    let concurrency = reconciler.concurrency();
    let context = reconciler.into_context(|inner, metrics, controller| {
        Arc::new(InstrumentedActuator {
            inner,
            metrics,
            controller,
        })
    });
    let results = Controller::for_stream(trigger, reader)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        // A Machine changes (bootstrap data ready, owner set): reconcile its infrastructure.
        .watches_stream(machine_changes(machine_stream), |machine| {
            let reference = &machine.spec.infrastructure_ref;
            let ours = reference.kind == M::kind(&()) && reference.api_group == M::group(&());
            let namespace = machine.namespace().unwrap_or_default();
            ours.then(|| ObjectRef::<Packed<M>>::new(&reference.name).within(&namespace))
        })
        // A Cluster changes (infrastructure ready, paused): reconcile its machines.
        .watches_stream(
            capi_runtime::cache::predicate::changed(
                cluster_stream,
                capi_runtime::cache::predicate::cluster_as_its_objects_see_it,
            ),
            move |cluster| {
                let name = cluster.name_any();
                let namespace = cluster.namespace();
                by_cluster
                    .state()
                    .into_iter()
                    .filter(|m| {
                        m.namespace() == namespace && m.cluster_name() == Some(name.as_str())
                    })
                    .map(|m| ObjectRef::from_obj(m.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(
            move |infra, context| reconcile::<M, C>(infra, context, Arc::clone(&owners)),
            back_off::<Packed<M>, DynActuator<M, C>>,
            context,
        );
    drain(results).await;
}

/// The changes of Machines that matter to their infrastructure: spec (bootstrap data name,
/// provider ID, version), metadata and deletion — not the status the Machine controller rewrites
/// at each step, which the infrastructure reconcile never reads.
fn machine_changes(
    changes: impl futures::Stream<Item = Result<Machine, watcher::Error>> + Send + 'static,
) -> impl futures::Stream<Item = Result<Machine, watcher::Error>> + Send + 'static {
    capi_runtime::cache::predicate::changed(
        changes,
        capi_runtime::cache::predicate::reconcile_relevant::<Machine>,
    )
}

#[tracing::instrument(skip_all, fields(kind = %M::kind(&()), namespace = %infra.namespace().unwrap_or_default(), name = %infra.name_any()))]
async fn reconcile<M: InfraMachine, C: InfraCluster>(
    infra: Arc<Packed<M>>,
    context: Arc<Context<DynActuator<M, C>>>,
    owners: Arc<observe::Owners<C>>,
) -> Result<Action, ReconcileError> {
    let once = async {
        let infra = Arc::new(infra.unpack()?);
        reconcile_once(&infra, &context, &owners).await
    };
    context.reconcile(infra.as_ref(), once).await
}

async fn reconcile_once<M: InfraMachine, C: InfraCluster>(
    infra: &Arc<M>,
    context: &Context<DynActuator<M, C>>,
    owners: &observe::Owners<C>,
) -> Result<Next, ReconcileError> {
    let invalid = context.retry.invalid_at(infra.as_ref());
    let snapshot = observe::observe(&context.client, owners, Arc::clone(infra), invalid).await?;
    let plan = decide::decide(context.state.as_ref(), snapshot, context.retry.policy.poll).await;
    record::record(&context.client, &context.recorder, infra.as_ref(), &plan).await?;
    Ok(plan.next)
}

#[cfg(test)]
pub(crate) mod tests;
