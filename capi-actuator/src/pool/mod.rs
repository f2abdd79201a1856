//! The infrastructure machine pool reconciler: drives a [`PoolActuator`] for a provider's pool
//! kind, and keeps one machine of the provider's machine kind per instance ("MachinePool
//! Machines").
//!
//! Per object: find the owner `MachinePool`, its `Cluster` and the provider's cluster object;
//! honour pause; on deletion call `delete` until the scale set is gone, then release the pool's
//! machines and drop the finalizer; otherwise add the finalizer and the idempotency key, then
//! `exists` → `update`, or `create`, with the size, the removals and the model revision the loop
//! decided ([`rollout`]), and record `spec.providerID`, `spec.providerIDList`, `status.replicas`,
//! provisioned, and the machines of the instances (in an order that strands no `Machine` and
//! drains every node).
//!
//! Guarantees beyond the machine loop's, each a failure of upstream providers made impossible:
//! - the provider ID list is written on every pass that sees the scale set — also while the
//!   bootstrap data is away, when `update` fails, or `Ready` is false — and the pool is looked at
//!   again every poll interval until its instances settle, so it never goes stale;
//! - `status.ready`, `initialization.provisioned` and `Ready` stay true once the scale set exists
//!   (unless a call fails): a scaling or rolling pool is not an unready one — its progress is in
//!   the `ScaleSetReplicas` and `ScaleSetModel` conditions;
//! - an instance leaves only after its `Machine` drained it, only the instances the loop named
//!   leave, and no machine is made for an instance of a pool being deleted.

mod actuator;
mod decide;
pub(crate) mod members;
mod observe;
mod record;
mod revision;
pub mod rollout;

use std::sync::Arc;

use capi_core::PoolActuator;
use capi_core::api::{Cluster, Machine, MachinePool};
use capi_core::infra::{InfraCluster, InfraMachinePool};
use capi_core::labels;
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use futures::Future;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

pub use actuator::{AnyScaleSet, DynPoolActuator, erase};
pub use decide::{INFRA_MACHINE_POOL_FINALIZER, SCALE_SET_MODEL, SCALE_SET_REPLICAS};
pub use members::{MISSING_GRACE, POOL_MACHINE_FINALIZER};

use crate::instrument::InstrumentedPoolActuator;
use capi_runtime::plan::Next;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// The reconciler of one infrastructure machine pool kind `P` of cluster kind `C`.
pub type InfraMachinePoolReconciler<P, C> = Reconciler<P, DynPoolActuator<P, C>>;

/// A reconciler of `P` driving `actuator` (see [`Reconciler::new`] for the rest); [`run`] runs it.
pub fn reconciler<P, C, A>(
    client: kube::Client,
    actuator: Arc<A>,
) -> InfraMachinePoolReconciler<P, C>
where
    P: InfraMachinePool,
    C: InfraCluster,
    A: PoolActuator<P, C> + ?Sized + 'static,
{
    Reconciler::new(client, erase(actuator))
}

/// Runs `reconciler` until `shutdown` completes; in-flight reconciles finish first.
pub async fn run<P: InfraMachinePool, C: InfraCluster>(
    reconciler: InfraMachinePoolReconciler<P, C>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, reader) = reconciler.trigger();
    reconciler.offer_as_referenced();
    let by_cluster = reader.clone();
    let (machine_pools, machine_pool_stream) = reconciler.cached::<MachinePool>();
    let (clusters, cluster_stream) = reconciler.cached::<Cluster>();
    let (machines, machine_stream) = reconciler.cached::<Machine>();
    let (members, member_stream) = reconciler.cached::<P::Machine>();
    let infra_clusters = capi_runtime::cache::lookup::Cached::of(
        reconciler.informer::<C>(),
        reconciler.client().clone(),
    );
    let members_by_name = members.store().clone();
    let owners = Arc::new(observe::Owners {
        machine_pools,
        clusters,
        infra_clusters,
        machines,
        members,
    });
    let concurrency = reconciler.concurrency();
    let context = reconciler.into_context(|inner, metrics, controller| {
        Arc::new(InstrumentedPoolActuator {
            inner,
            metrics,
            controller,
        })
    });
    let results = Controller::for_stream(trigger, reader)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        // A MachinePool changes (size, template, bootstrap data name): reconcile its pool.
        .watches_stream(machine_pool_stream, |pool| {
            let reference = &pool.spec.template.spec.infrastructure_ref;
            let ours = reference.kind == P::kind(&()) && reference.api_group == P::group(&());
            let namespace = pool.namespace().unwrap_or_default();
            ours.then(|| ObjectRef::<P>::new(&reference.name).within(&namespace))
        })
        // A Cluster changes (infrastructure ready, paused): reconcile its pools.
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
                    .filter(|p| {
                        p.namespace() == namespace
                            && labels::cluster_name(p.meta()) == Some(name.as_str())
                    })
                    .map(|p| ObjectRef::from_obj(p.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        // A machine of an instance changes (being deleted after its drain): reconcile its pool.
        .watches_stream(member_stream, |member| owning_pool::<P, _>(&member))
        // A Machine of an instance changes (ready, marked for deletion, being deleted).
        .watches_stream(machine_stream, move |machine| {
            let reference = &machine.spec.infrastructure_ref;
            if reference.kind != <P::Machine as Resource>::kind(&())
                || !machine.labels().contains_key(labels::MACHINE_POOL_NAME)
            {
                return None;
            }
            let namespace = machine.namespace().unwrap_or_default();
            let member = members_by_name
                .get(&ObjectRef::<P::Machine>::new(&reference.name).within(&namespace))?;
            owning_pool::<P, _>(member.as_ref())
        })
        .graceful_shutdown_on(shutdown)
        .run(
            move |infra, context| reconcile::<P, C>(infra, context, Arc::clone(&owners)),
            back_off::<P, DynPoolActuator<P, C>>,
            context,
        );
    drain(results).await;
}

/// The pool of kind `P` that owns `object`, if any.
fn owning_pool<P: InfraMachinePool, K: Resource>(object: &K) -> Option<ObjectRef<P>> {
    let namespace = object.meta().namespace.clone().unwrap_or_default();
    object
        .meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.kind == P::kind(&()) && r.api_version == P::api_version(&()))
        .map(|r| ObjectRef::<P>::new(&r.name).within(&namespace))
}

#[tracing::instrument(skip_all, fields(kind = %P::kind(&()), namespace = %infra.namespace().unwrap_or_default(), name = %infra.name_any()))]
async fn reconcile<P: InfraMachinePool, C: InfraCluster>(
    infra: Arc<P>,
    context: Arc<Context<DynPoolActuator<P, C>>>,
    owners: Arc<observe::Owners<P, C>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(infra.as_ref(), reconcile_once(&infra, &context, &owners))
        .await
}

async fn reconcile_once<P: InfraMachinePool, C: InfraCluster>(
    infra: &Arc<P>,
    context: &Context<DynPoolActuator<P, C>>,
    owners: &observe::Owners<P, C>,
) -> Result<Next, ReconcileError> {
    let poll = context.retry.policy.poll;
    if !owners.listed_within(poll).await {
        return Ok(Next::Requeue(poll));
    }
    let invalid = context.retry.invalid_at(infra.as_ref());
    let snapshot = observe::observe(&context.client, owners, Arc::clone(infra), invalid).await?;
    let plan = decide::decide(context.state.as_ref(), snapshot, context.retry.policy.poll).await;
    record::record(&context.client, &context.recorder, infra.as_ref(), &plan).await?;
    Ok(plan.next)
}

#[cfg(test)]
mod tests;
