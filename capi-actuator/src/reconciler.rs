//! What every reconciler of the loop shares: the builder, the watch that triggers it, the context
//! its reconciles run in, and how a reconcile's end becomes the controller's next action.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use capi_core::ActuatorError;
use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

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
    /// An object referenced by `{apiGroup, kind, name}` could not be read or written.
    #[error("{0}")]
    Reference(#[from] crate::standalone::ReferenceError),
}

impl ReconcileError {
    /// Whether the API server refused a write with 409: the object changed since the cache showed
    /// it (Conflict) or a create found it already there (AlreadyExists). Either way the cache was
    /// behind and the reconcile is retried shortly rather than backed off as a failure.
    pub fn is_conflict(&self) -> bool {
        let kube = match self {
            Self::Kube(error) => error,
            Self::Reference(crate::standalone::ReferenceError::Kube(error)) => error,
            _ => return false,
        };
        matches!(kube, kube::Error::Api(status) if status.code == 409)
    }
}

/// A reconciler of kind `K` driving an actuator `A`: see
/// [`InfraMachineReconciler`](crate::machine::InfraMachineReconciler) and
/// [`InfraClusterReconciler`](crate::cluster::InfraClusterReconciler).
pub struct Reconciler<K, A: ?Sized> {
    pub(crate) client: Client,
    pub(crate) actuator: Arc<A>,
    pub(crate) options: ReconcilerOptions,
    metrics: Option<Metrics>,
    readiness: Option<Readiness>,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource<DynamicType = ()>, A: ?Sized> Reconciler<K, A> {
    /// A reconciler of every `K` in the cluster, with default options.
    pub fn new(client: Client, actuator: Arc<A>) -> Self {
        Self {
            client,
            actuator,
            options: ReconcilerOptions::default(),
            metrics: None,
            readiness: None,
            kind: PhantomData,
        }
    }

    /// Sets the options.
    pub fn options(mut self, options: ReconcilerOptions) -> Self {
        self.options = options;
        self
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
        K::kind(&()).to_lowercase()
    }
}

impl<K, A: ?Sized> Reconciler<K, A>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    /// The stream that triggers reconciles — the watch of `K`, reflected into the returned store,
    /// reporting readiness after its first list, without the loop's own status writes — and the
    /// store.
    pub(crate) fn trigger(
        &self,
    ) -> (
        impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
        Store<K>,
    ) {
        let controller = Self::controller_name();
        if let Some(readiness) = &self.readiness {
            readiness.register(&controller);
        }
        let (reader, writer) = reflector::store();
        let trigger = watcher(
            self.options.api::<K>(&self.client),
            self.options.watch_config(),
        )
        .backoff(crate::retry::WatchBackoff::default())
        .reflect(writer)
        .inspect(crate::readiness::on_initial_list(
            self.readiness.clone(),
            controller,
        ))
        .applied_objects()
        .predicate_filter(
            crate::predicate::reconcile_relevant::<K>,
            Default::default(),
        );
        (trigger, reader)
    }

    /// The context reconciles run in; `instrument` wraps the actuator when metrics are recorded.
    pub(crate) fn into_context(
        self,
        instrument: impl FnOnce(Arc<A>, Metrics, String) -> Arc<A>,
    ) -> Arc<Context<A>> {
        let controller = Self::controller_name();
        let reporter = Reporter {
            controller: format!("{controller}-controller"),
            instance: None,
        };
        let actuator = match &self.metrics {
            Some(metrics) => instrument(self.actuator, metrics.clone(), controller.clone()),
            None => self.actuator,
        };
        Arc::new(Context {
            recorder: Recorder::new(self.client.clone(), reporter),
            client: self.client,
            actuator,
            retry: RetryState::new(self.options.retry.clone()),
            metrics: self.metrics,
            controller,
        })
    }
}

/// What a reconcile of one controller works with.
pub(crate) struct Context<A: ?Sized> {
    pub(crate) client: Client,
    pub(crate) recorder: Recorder,
    pub(crate) actuator: Arc<A>,
    pub(crate) retry: RetryState,
    metrics: Option<Metrics>,
    controller: String,
}

impl<A: ?Sized> Context<A> {
    /// Records the reconcile that started at `started` and ended with `outcome`, and turns it into
    /// the controller's next action (failures go to [`back_off`]).
    pub(crate) fn finish<K: Resource>(
        &self,
        object: &K,
        started: Instant,
        outcome: Result<Next, ReconcileError>,
    ) -> Result<Action, ReconcileError> {
        if let Some(metrics) = &self.metrics {
            let result = match &outcome {
                Ok(next) => next.result(),
                Err(_) => ReconcileResult::Error,
            };
            metrics.reconcile_done(&self.controller, result, started.elapsed());
        }
        self.retry
            .next_action(object, outcome?)
            .map_err(ReconcileError::Actuator)
    }
}

/// The controller's error policy: per-object exponential backoff.
pub(crate) fn back_off<K: Resource, A: ?Sized>(
    object: Arc<K>,
    error: &ReconcileError,
    context: Arc<Context<A>>,
) -> Action {
    context
        .retry
        .back_off(object.as_ref(), error, error.is_conflict())
}

/// Drains a controller's result stream, logging what failed at debug level (failures are
/// already logged by [`back_off`]).
pub(crate) async fn drain<T, E: std::fmt::Display>(results: impl Stream<Item = Result<T, E>>) {
    results
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile finished with an error");
            }
        })
        .await;
}
