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
use std::time::Instant;

use capi_core::ClusterActuator;
use capi_core::api::Cluster;
use capi_core::infra::InfraCluster;
use futures::{Future, StreamExt};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

pub use decide::INFRA_CLUSTER_FINALIZER;

use crate::ReconcilerOptions;
use crate::instrument::InstrumentedClusterActuator;
use crate::machine::ReconcileError;
use crate::metrics::{Metrics, ReconcileResult};
use crate::plan::Next;
use crate::readiness::Readiness;
use crate::retry::RetryState;

/// Builds and runs the reconciler of one infrastructure cluster kind `C`.
pub struct InfraClusterReconciler<C: InfraCluster> {
    client: Client,
    actuator: Arc<dyn ClusterActuator<C>>,
    options: ReconcilerOptions,
    metrics: Option<Metrics>,
    readiness: Option<Readiness>,
}

impl<C: InfraCluster> InfraClusterReconciler<C> {
    /// A reconciler of every `C` in the cluster, with default options.
    pub fn new(client: Client, actuator: Arc<dyn ClusterActuator<C>>) -> Self {
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
        C::kind(&()).to_lowercase()
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
        let trigger = watcher(options.api::<C>(&self.client), options.watch_config())
            .default_backoff()
            .reflect(writer)
            .inspect(crate::readiness::on_initial_list(
                self.readiness.clone(),
                controller_name,
            ))
            .applied_objects()
            .predicate_filter(
                crate::predicate::reconcile_relevant::<C>,
                Default::default(),
            );
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
                Some(metrics) => Arc::new(InstrumentedClusterActuator {
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
            // The Cluster changes (paused, deleted, adopted): reconcile its infrastructure.
            .watches(
                options.api::<Cluster>(&self.client),
                watcher::Config::default(),
                |cluster| {
                    let reference = cluster.spec.infrastructure_ref.as_ref()?;
                    let ours =
                        reference.kind == C::kind(&()) && reference.api_group == C::group(&());
                    let namespace = cluster.namespace().unwrap_or_default();
                    ours.then(|| ObjectRef::<C>::new(&reference.name).within(&namespace))
                },
            )
            .graceful_shutdown_on(shutdown)
            .run(reconcile::<C>, error_policy::<C>, context)
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(%error, "reconcile finished with an error");
                }
            })
            .await;
    }
}

struct Context<C: InfraCluster> {
    client: Client,
    recorder: Recorder,
    actuator: Arc<dyn ClusterActuator<C>>,
    retry: RetryState,
    metrics: Option<Metrics>,
    controller: String,
}

#[tracing::instrument(skip_all, fields(kind = %C::kind(&()), namespace = %infra.namespace().unwrap_or_default(), name = %infra.name_any()))]
async fn reconcile<C: InfraCluster>(
    infra: Arc<C>,
    context: Arc<Context<C>>,
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

async fn reconcile_once<C: InfraCluster>(
    infra: &Arc<C>,
    context: &Context<C>,
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

fn error_policy<C: InfraCluster>(
    infra: Arc<C>,
    error: &ReconcileError,
    context: Arc<Context<C>>,
) -> Action {
    context.retry.back_off(infra.as_ref(), error)
}

#[cfg(test)]
mod tests;
