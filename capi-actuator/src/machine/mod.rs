//! The infrastructure machine reconciler: drives an [`Actuator`] for a provider's machine kind.
//!
//! Per object: find the owner `Machine` and its `Cluster`; honour pause; on deletion call
//! `delete` until the instance is gone, then drop the finalizer; otherwise add the finalizer, wait
//! for the cluster infrastructure and the bootstrap data, then `exists` → `update`, or `create`,
//! and record provider ID, addresses, `initialization.provisioned` and conditions.
//!
//! Phases are separate functions: `observe` reads, `decide`
//! calls the cloud and plans, `record` writes.

mod decide;
mod observe;
mod record;

use std::sync::Arc;

use capi_core::Actuator;
use capi_core::api::{Cluster, Machine};
use capi_core::infra::InfraMachine;
use futures::Future;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

pub use decide::{Decision, INFRA_MACHINE_FINALIZER, decide_once};

use crate::instrument::InstrumentedActuator;
use crate::packed::Packed;
use crate::plan::Next;
use crate::reconciler::{Context, ReconcileError, Reconciler, back_off, drain};

/// The reconciler of one infrastructure machine kind `M`.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use capi_actuator::machine::InfraMachineReconciler;
/// # use capi_actuator::ReconcilerOptions;
/// # async fn demo<M: capi_core::infra::InfraMachine>(client: kube::Client, actuator: Arc<dyn capi_core::Actuator<M>>) {
/// InfraMachineReconciler::new(client, actuator)
///     .options(ReconcilerOptions::default().concurrency(32))
///     .run(std::future::pending())
///     .await;
/// # }
/// ```
pub type InfraMachineReconciler<M> = Reconciler<M, dyn Actuator<M>>;

impl<M: InfraMachine> Reconciler<M, dyn Actuator<M>> {
    /// Runs until `shutdown` completes; in-flight reconciles finish first.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
        // Packed: one cached object per machine, decoded only when reconciled.
        let (trigger, reader) = self.packed_trigger();
        self.offer_packed_as_referenced();
        let by_cluster = reader.clone();
        let (machines, machine_stream) = self.cached::<Machine>();
        let (clusters, cluster_stream) = self.cached::<Cluster>();
        let owners = Arc::new(observe::Owners { machines, clusters });
        let concurrency = self.concurrency();
        let context = self.into_context(|inner, metrics, controller| {
            Arc::new(InstrumentedActuator {
                inner,
                metrics,
                controller,
            })
        });
        let results = Controller::for_stream(trigger, reader)
            .trigger_backoff(crate::retry::WatchBackoff::default())
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
                crate::predicate::changed(
                    cluster_stream,
                    crate::predicate::cluster_as_its_objects_see_it,
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
                move |infra, context| reconcile::<M>(infra, context, Arc::clone(&owners)),
                back_off::<Packed<M>, dyn Actuator<M>>,
                context,
            );
        drain(results).await;
    }
}

/// The changes of Machines that matter to their infrastructure: spec (bootstrap data name,
/// provider ID, version), metadata and deletion — not the status the Machine controller rewrites
/// at each step, which the infrastructure reconcile never reads.
fn machine_changes(
    changes: impl futures::Stream<Item = Result<Machine, watcher::Error>> + Send + 'static,
) -> impl futures::Stream<Item = Result<Machine, watcher::Error>> + Send + 'static {
    crate::predicate::changed(changes, crate::predicate::reconcile_relevant::<Machine>)
}

#[tracing::instrument(skip_all, fields(kind = %M::kind(&()), namespace = %infra.namespace().unwrap_or_default(), name = %infra.name_any()))]
async fn reconcile<M: InfraMachine>(
    infra: Arc<Packed<M>>,
    context: Arc<Context<dyn Actuator<M>>>,
    owners: Arc<observe::Owners>,
) -> Result<Action, ReconcileError> {
    let once = async {
        let infra = Arc::new(infra.unpack()?);
        reconcile_once(&infra, &context, &owners).await
    };
    context.reconcile(infra.as_ref(), once).await
}

async fn reconcile_once<M: InfraMachine>(
    infra: &Arc<M>,
    context: &Context<dyn Actuator<M>>,
    owners: &observe::Owners,
) -> Result<Next, ReconcileError> {
    let invalid = context.retry.invalid_at(infra.as_ref());
    let snapshot = observe::observe(&context.client, owners, Arc::clone(infra), invalid).await?;
    let plan = decide::decide(context.state.as_ref(), snapshot, context.retry.policy.poll).await;
    record::record(&context.client, &context.recorder, infra.as_ref(), &plan).await?;
    Ok(plan.next)
}

#[cfg(test)]
mod tests;
