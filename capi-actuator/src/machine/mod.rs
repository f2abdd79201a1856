//! The infrastructure machine reconciler: drives an [`Actuator`] for a provider's machine kind.
//!
//! Per object: find the owner `Machine` and its `Cluster`; honour pause; on deletion call
//! `delete` until the instance is gone, then drop the finalizer; otherwise add the finalizer, wait
//! for the cluster infrastructure and the bootstrap data, then `exists` → `update`, or `create`,
//! and record provider ID, addresses, `initialization.provisioned` and conditions.
//!
//! Phases are separate functions: [`observe`](observe::observe) reads, [`decide`](decide::decide)
//! calls the cloud and plans, [`record`](record::record) writes.

mod decide;
mod observe;
mod record;

use std::sync::Arc;
use std::time::Instant;

use capi_core::api::{Cluster, Machine};
use capi_core::infra::InfraMachine;
use capi_core::{Actuator, ActuatorError, labels};
use futures::{Future, StreamExt};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

pub use decide::INFRA_MACHINE_FINALIZER;

use crate::instrument::InstrumentedActuator;
use crate::metrics::{Metrics, ReconcileResult};
use crate::options::ReconcilerOptions;
use crate::plan::Next;
use crate::readiness::Readiness;
use crate::retry::RetryState;

/// Why one reconcile failed. Transient actuator failures and API errors back off per object.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading or writing the API server failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// The actuator reported a failure.
    #[error("actuator failed: {0}")]
    Actuator(#[source] ActuatorError),
}

/// Builds and runs the reconciler of one infrastructure machine kind `M`.
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
pub struct InfraMachineReconciler<M: InfraMachine> {
    client: Client,
    actuator: Arc<dyn Actuator<M>>,
    options: ReconcilerOptions,
    metrics: Option<Metrics>,
    readiness: Option<Readiness>,
}

impl<M: InfraMachine> InfraMachineReconciler<M> {
    /// A reconciler of every `M` in the cluster, with default options.
    pub fn new(client: Client, actuator: Arc<dyn Actuator<M>>) -> Self {
        Self {
            client,
            actuator,
            options: ReconcilerOptions::default(),
            metrics: None,
            readiness: None,
        }
    }

    /// Records reconciles and actuator calls in `metrics`.
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Reports this controller ready in `readiness` once its cache is filled.
    pub fn readiness(mut self, readiness: Readiness) -> Self {
        self.readiness = Some(readiness);
        self
    }

    /// The controller's name in metrics and readiness: the kind, lower case.
    pub fn controller_name() -> String {
        M::kind(&()).to_lowercase()
    }

    /// Sets the options.
    pub fn options(mut self, options: ReconcilerOptions) -> Self {
        self.options = options;
        self
    }

    /// Runs until `shutdown` completes; in-flight reconciles finish first.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
        let options = self.options;
        let controller_name = Self::controller_name();
        if let Some(readiness) = &self.readiness {
            readiness.register(&controller_name);
        }
        let (reader, writer) = reflector::store();
        let trigger = watcher(options.api::<M>(&self.client), options.watch_config())
            .default_backoff()
            .reflect(writer)
            .inspect(crate::readiness::on_initial_list(
                self.readiness.clone(),
                controller_name,
            ))
            .applied_objects()
            .predicate_filter(
                crate::predicate::reconcile_relevant::<M>,
                Default::default(),
            );

        let by_cluster = reader.clone();
        let controller = Self::controller_name();
        let reporter = format!("{controller}-controller");
        let context = Arc::new(Context {
            recorder: Recorder::new(
                self.client.clone(),
                Reporter {
                    controller: reporter,
                    instance: None,
                },
            ),
            client: self.client.clone(),
            actuator: match &self.metrics {
                Some(metrics) => Arc::new(InstrumentedActuator {
                    inner: self.actuator,
                    metrics: metrics.clone(),
                    controller: controller.clone(),
                }),
                None => self.actuator,
            },
            retry: RetryState::new(options.retry.clone()),
            metrics: self.metrics,
            controller: controller.clone(),
        });
        Controller::for_stream(trigger, reader)
            .with_config(ControllerConfig::default().concurrency(options.concurrency))
            // A Machine changes (bootstrap data ready, owner set): reconcile its infrastructure.
            .watches(
                options.api::<Machine>(&self.client),
                watcher::Config::default(),
                |machine| {
                    let reference = &machine.spec.infrastructure_ref;
                    let ours =
                        reference.kind == M::kind(&()) && reference.api_group == M::group(&());
                    let namespace = machine.namespace().unwrap_or_default();
                    ours.then(|| ObjectRef::<M>::new(&reference.name).within(&namespace))
                },
            )
            // A Cluster changes (infrastructure ready, paused): reconcile its machines.
            .watches(
                options.api::<Cluster>(&self.client),
                watcher::Config::default(),
                move |cluster| {
                    let name = cluster.name_any();
                    let namespace = cluster.namespace();
                    by_cluster
                        .state()
                        .into_iter()
                        .filter(|m| {
                            m.namespace() == namespace
                                && labels::cluster_name(m.meta()) == Some(name.as_str())
                        })
                        .map(|m| ObjectRef::from_obj(m.as_ref()))
                        .collect::<Vec<_>>()
                },
            )
            .graceful_shutdown_on(shutdown)
            .run(reconcile::<M>, error_policy::<M>, context)
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(%error, "reconcile finished with an error");
                }
            })
            .await;
    }
}

struct Context<M: InfraMachine> {
    client: Client,
    recorder: Recorder,
    actuator: Arc<dyn Actuator<M>>,
    retry: RetryState,
    metrics: Option<Metrics>,
    controller: String,
}

#[tracing::instrument(skip_all, fields(kind = %M::kind(&()), namespace = %infra.namespace().unwrap_or_default(), name = %infra.name_any()))]
async fn reconcile<M: InfraMachine>(
    infra: Arc<M>,
    context: Arc<Context<M>>,
) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let outcome = reconcile_once(&infra, &context).await;
    if let Some(metrics) = &context.metrics {
        let result = match &outcome {
            Ok(next) => next.result(),
            Err(_) => ReconcileResult::Error,
        };
        metrics.reconcile_done(&context.controller, result, started.elapsed());
    }
    context
        .retry
        .next_action(infra.as_ref(), outcome?)
        .map_err(ReconcileError::Actuator)
}

async fn reconcile_once<M: InfraMachine>(
    infra: &Arc<M>,
    context: &Context<M>,
) -> Result<Next, ReconcileError> {
    let invalid = context.retry.invalid_at(infra.as_ref());
    let snapshot = observe::observe(&context.client, Arc::clone(infra), invalid).await?;
    let plan = decide::decide(
        context.actuator.as_ref(),
        snapshot,
        context.retry.policy.poll,
    )
    .await;
    record::record(&context.client, &context.recorder, infra.as_ref(), &plan).await?;
    Ok(plan.next)
}

fn error_policy<M: InfraMachine>(
    infra: Arc<M>,
    error: &ReconcileError,
    context: Arc<Context<M>>,
) -> Action {
    context.retry.back_off(infra.as_ref(), error)
}

#[cfg(test)]
mod tests;
