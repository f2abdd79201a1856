//! What every reconciler shares — the controllers built on this crate (`capi-actuator`'s
//! infrastructure reconcilers, `capi-controllers`, `capi-bootstrap`, a vendor's own): the builder,
//! the watch that triggers it, the context its reconciles run in, and how a reconcile's end
//! becomes the controller's next action.
//!
//! A controller built on it runs like this: [`Reconciler::trigger`] gives the watch of its kind
//! (status-only changes filtered out, readiness reported after the first list) and its cache;
//! [`Reconciler::into_context`] the [`Context`] every reconcile gets; a reconcile ends with
//! [`Context::reconcile`] (metrics, then the retry policy's next action); [`back_off`] is the
//! controller's error policy and [`drain`] consumes its results.

use std::fmt::Debug;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use crate::controller::Action;
use capi_core::ActuatorError;
use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::cache::informer::{Informer, Informers};
use crate::cache::packed::Packed;
use crate::events::EventRecorder;
use crate::metrics::{Metrics, ReconcileResult};
use crate::options::ReconcilerOptions;
use crate::plan::Next;
use crate::readiness::Readiness;
use crate::retry::{RetryMemory, RetryState, split_object_key};

/// Why one reconcile failed. Transient actuator failures and API errors back off per object.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading or writing the API server failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// The actuator reported a failure.
    #[error("actuator failed: {0}")]
    Actuator(#[source] ActuatorError),
    /// A controller built on this machinery failed in its own way (a referenced object that
    /// cannot be read, a workload cluster out of reach); its message says what to fix.
    #[error("{0}")]
    Controller(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// A cached object that did not unpack fails its reconcile, which backs off.
impl From<crate::cache::packed::PackError> for ReconcileError {
    fn from(error: crate::cache::packed::PackError) -> Self {
        Self::Controller(Box::new(error))
    }
}

impl ReconcileError {
    /// Whether the API server refused a write with 409: the object changed since the cache showed
    /// it (Conflict) or a create found it already there (AlreadyExists). Either way the cache was
    /// behind and the reconcile is retried shortly rather than backed off as a failure.
    /// The API error is looked for along the whole chain of causes, so a controller's own error
    /// wrapping it counts too.
    pub fn is_conflict(&self) -> bool {
        let mut cause = std::error::Error::source(self);
        while let Some(error) = cause {
            if let Some(kube) = error.downcast_ref::<kube::Error>() {
                return matches!(kube, kube::Error::Api(status) if status.code == 409);
            }
            cause = error.source();
        }
        false
    }
}

/// A reconciler of kind `K` whose reconciles share `S`: a provider's actuator for the
/// infrastructure kinds (`capi_actuator`'s `InfraMachineReconciler`, `InfraClusterReconciler`), a
/// controller's caches and
/// settings for the others. [`Manager::reconciler`](crate::manager::Manager::reconciler) gives
/// one wired to the manager's client, options, metrics and readiness.
pub struct Reconciler<K, S: ?Sized> {
    client: Client,
    /// The client events are published through (the reconciler's own when `None`).
    events_client: Option<Client>,
    state: Arc<S>,
    options: ReconcilerOptions,
    metrics: Option<Metrics>,
    readiness: Option<Readiness>,
    memory: Arc<RetryMemory>,
    informers: Informers,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource<DynamicType = ()>, S: ?Sized> Reconciler<K, S> {
    /// A reconciler of every `K` in the cluster, with default options.
    pub fn new(client: Client, state: Arc<S>) -> Self {
        Self {
            client,
            events_client: None,
            state,
            options: ReconcilerOptions::default(),
            metrics: None,
            readiness: None,
            memory: Arc::default(),
            informers: Informers::default(),
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

    /// Publishes events through `client` instead of the reconciler's own client: a client with
    /// a request budget of its own (as upstream's event broadcaster has), so that events never
    /// spend the requests a reconcile needs (a reconcile still waits for its event's answer). A
    /// manager made by [`crate::manager::Manager::new`] gives every reconciler its one events
    /// client; with [`crate::manager::Manager::with_client`], events share the given client.
    pub fn events_client(mut self, client: Client) -> Self {
        self.events_client = Some(client);
        self
    }

    /// Shares `informers`' watches (a manager gives every reconciler its own; a reconciler made
    /// alone has informers of its own).
    pub fn informers(mut self, informers: Informers) -> Self {
        self.informers = informers;
        self
    }

    /// The controller's name in metrics and readiness: the kind, lower case.
    pub fn controller_name() -> String {
        K::kind(&()).to_lowercase()
    }

    /// The client reconciles use.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// What the reconciles share.
    pub fn state(&self) -> &Arc<S> {
        &self.state
    }

    /// At most this many objects are reconciled at once.
    pub fn concurrency(&self) -> u16 {
        self.options.concurrency
    }

    /// The namespace this reconciler is limited to (`None`: all).
    pub fn namespace(&self) -> Option<&str> {
        self.options.namespace.as_deref()
    }

    /// An API for a namespaced kind, in this reconciler's namespace (or all namespaces).
    pub fn api<T>(&self) -> kube::Api<T>
    where
        T: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
    {
        self.options.api::<T>(&self.client)
    }

    /// The manager's shared watch and store of every `T` in the reconciler's namespace (managed
    /// fields dropped; see [`crate::cache::informer`]): what a controller watches besides its own kind.
    pub fn informer<T>(&self) -> Informer<T>
    where
        T: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        self.informers
            .informer(self.api::<T>(), watcher::Config::default())
    }

    /// [`informer`](Self::informer) of only the `T`s matching the label selector `selector`: a
    /// watch of its own, shared by every controller of the manager that asks for the same
    /// selection. For a controller that reads a small part of a kind, whose cache then holds
    /// only that part.
    pub fn selected_informer<T>(&self, selector: &str) -> Informer<T>
    where
        T: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        self.informers
            .informer(self.api::<T>(), watcher::Config::default().labels(selector))
    }

    /// [`cached`](crate::cache::lookup::cached) over the manager's shared watch of `T`
    /// ([`informer`](Self::informer)): a store with the API server behind it for what it does not
    /// hold, and this controller's stream of its changes.
    pub fn cached<T>(
        &self,
    ) -> (
        crate::cache::lookup::Cached<T>,
        impl Stream<Item = Result<T, watcher::Error>> + Send + 'static + use<T, K, S>,
    )
    where
        T: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        crate::cache::lookup::of_informer(&self.informer::<T>(), self.client.clone())
    }
}

impl<K, S: ?Sized> Reconciler<K, S>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    /// The stream that triggers reconciles — the manager's shared watch of `K` (managed fields
    /// dropped; [`crate::cache::informer`]), reflected into the returned store, reporting readiness after
    /// its first list, without the loop's own status writes, merged with the sweep that brings
    /// back converged objects as their resync comes due (an entry of a few bytes per converged
    /// object instead of a scheduler timer each; while the stream is not polled, the reconciles
    /// requeue with timers) — and the store. The watch also prunes the per-object retry memory: a
    /// deleted object, or one a re-list no longer finds, is forgotten.
    pub fn trigger(
        &self,
    ) -> (
        impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
        Store<K>,
    ) {
        self.trigger_of::<K>(crate::cache::predicate::reconcile_relevant::<K>)
    }

    /// [`trigger`](Self::trigger) with the objects kept packed ([`crate::cache::packed`]): the same
    /// stream and guarantees, a store of [`Packed<K>`] — identity, predicate hash and cluster
    /// name decoded, the rest compressed — at a fraction of the memory; a reconcile unpacks its
    /// object. A controller uses one or the other: each is a watch and a store of its own.
    pub fn packed_trigger(
        &self,
    ) -> (
        impl Stream<Item = Result<Packed<K>, watcher::Error>> + Send + 'static,
        Store<Packed<K>>,
    )
    where
        K: serde::Serialize,
    {
        self.trigger_of::<Packed<K>>(Packed::relevance)
    }

    /// The trigger of a watch of `T`, `K` itself or a representation of it: changes that
    /// `relevant` says matter, and the sweep's resyncs.
    fn trigger_of<T>(
        &self,
        relevant: fn(&T) -> Option<u64>,
    ) -> (
        impl Stream<Item = Result<T, watcher::Error>> + Send + 'static + use<T, K, S>,
        Store<T>,
    )
    where
        T: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        let controller = Self::controller_name();
        if let Some(readiness) = &self.readiness {
            readiness.register(&controller);
        }
        let informer = self.informers.informer(
            self.options.api::<T>(&self.client),
            self.options.watch_config(),
        );
        let reader = informer.store();
        let memory = Arc::clone(&self.memory);
        let present = reader.clone();
        let trigger = informer
            .events()
            .inspect(move |event| {
                if let Ok(event) = event {
                    forget_gone(&memory, event, &present);
                }
            })
            .inspect(crate::readiness::on_initial_list(
                self.readiness.clone(),
                controller,
            ))
            .applied_objects();
        let trigger = crate::cache::predicate::changed(trigger, relevant);
        // Converged objects come back through the sweep, not through a timer each.
        let resyncs = crate::cache::resync::sweep(
            Arc::clone(&self.memory.resyncs),
            reader.clone(),
            self.options.retry.resync,
        );
        (futures::stream::select(trigger, resyncs), reader)
    }

    /// The context reconciles run in; `instrument` wraps the shared state when metrics are
    /// recorded (with the metrics and the controller's name) — the infrastructure reconcilers
    /// count actuator calls that way; others return it as it is.
    pub fn into_context(
        self,
        instrument: impl FnOnce(Arc<S>, Metrics, String) -> Arc<S>,
    ) -> Arc<Context<S>> {
        let controller = Self::controller_name();
        let state = match &self.metrics {
            Some(metrics) => instrument(self.state, metrics.clone(), controller.clone()),
            None => self.state,
        };
        Arc::new(Context {
            recorder: EventRecorder::new(
                self.events_client.unwrap_or_else(|| self.client.clone()),
                format!("{controller}-controller"),
            ),
            client: self.client,
            state,
            retry: RetryState::with_memory(self.options.retry.clone(), self.memory),
            metrics: self.metrics,
            controller,
        })
    }
}

/// Prunes `memory` after a watch `event`: after a deletion, and once a (re-)list is complete,
/// every object the store no longer holds goes — the deleted one (the store has applied the
/// event already), one deleted while the watch was down, and one whose last reconcile ended (and
/// was remembered) after its deletion was seen.
fn forget_gone<K>(memory: &RetryMemory, event: &watcher::Event<K>, store: &Store<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    if matches!(event, watcher::Event::Delete(_) | watcher::Event::InitDone) {
        retain_present(memory, store);
    }
}

/// Keeps what `memory` holds of the objects `store` still holds. Costs a store lookup per
/// remembered object (usually few: the failing ones); the store's UIDs are collected only when an
/// invalid-configuration memo is held.
fn retain_present<K>(memory: &RetryMemory, store: &Store<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let uids = std::cell::OnceCell::new();
    memory.retain(
        |key| {
            let (namespace, name) = split_object_key(key);
            let reference = kube::runtime::reflector::ObjectRef::<K>::new(name);
            let reference = if namespace.is_empty() {
                reference
            } else {
                reference.within(namespace)
            };
            store.get(&reference).is_some()
        },
        |uid| {
            uids.get_or_init(|| {
                store
                    .state()
                    .iter()
                    .filter_map(|o| o.meta().uid.clone())
                    .collect::<std::collections::HashSet<String>>()
            })
            .contains(uid)
        },
    );
}

impl<K, S: ?Sized> Reconciler<K, S>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + Debug
        + Send
        + Sync
        + 'static,
{
    /// Offers this controller's watch of `K` to the manager's readers of run-time kinds
    /// ([`crate::cache::informer::DynamicViews`]): the core controllers read the `K`s their objects
    /// refer to from it instead of a watch and a copy of their own. Only a watch without
    /// selectors is offered.
    pub fn offer_as_referenced(&self) {
        let informer = self.informers.informer(
            self.options.api::<K>(&self.client),
            self.options.watch_config(),
        );
        self.informers.dynamic_views().offer(&informer);
    }

    /// [`offer_as_referenced`](Self::offer_as_referenced) for a controller on
    /// [`packed_trigger`](Self::packed_trigger): offers its watch of packed `K`s (each read
    /// unpacks one).
    pub fn offer_packed_as_referenced(&self) {
        let informer = self.informers.informer(
            self.options.api::<Packed<K>>(&self.client),
            self.options.watch_config(),
        );
        self.informers.dynamic_views().offer(&informer);
    }
}

/// What a reconcile of one controller works with.
pub struct Context<S: ?Sized> {
    /// The client (the manager's, rate limited).
    pub client: Client,
    /// Publishes events as `<kind>-controller`.
    pub recorder: EventRecorder,
    /// What the reconciles share (the actuator, or the controller's caches and settings).
    pub state: Arc<S>,
    /// Per-object retry state: backoff, and the memo of configurations found invalid.
    pub retry: RetryState,
    metrics: Option<Metrics>,
    controller: String,
}

impl<S: ?Sized> Context<S> {
    /// Runs one reconcile of `object` — `once`, the controller's own work, which decides what
    /// comes next — records it in the metrics and turns it into the controller's next action
    /// (failures go to [`back_off`]).
    pub async fn reconcile<K: Resource>(
        &self,
        object: &K,
        once: impl Future<Output = Result<Next, ReconcileError>>,
    ) -> Result<Action, ReconcileError> {
        let started = Instant::now();
        self.retry.starting(object);
        let outcome = once.await;
        self.finish(object, started, outcome)
    }

    /// Records the reconcile that started at `started` and ended with `outcome`, and turns it into
    /// the controller's next action (failures go to [`back_off`]).
    fn finish<K: Resource>(
        &self,
        object: &K,
        started: Instant,
        outcome: Result<Next, ReconcileError>,
    ) -> Result<Action, ReconcileError> {
        // One line per reconcile at debug level, inside the controller's span (the object and why it was
        // queued): a per-object timeline when enabled (`capi_runtime::reconciler=debug,
        // capi_runtime::controller=info`). Only the outcome's kind: an error's text is logged
        // where it is handled.
        if tracing::enabled!(tracing::Level::DEBUG) {
            let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            match &outcome {
                Ok(Next::Requeue(after)) => {
                    tracing::debug!(took_ms, requeue_after = ?after, "reconciled")
                }
                Ok(Next::Failed(_)) | Err(_) => tracing::debug!(took_ms, "reconcile failed"),
                Ok(next) => tracing::debug!(took_ms, ?next, "reconciled"),
            }
        }
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

/// The controller's error policy: per-object exponential backoff (a conflict is retried soon,
/// not backed off).
pub fn back_off<K: Resource, S: ?Sized>(
    object: Arc<K>,
    error: &ReconcileError,
    context: Arc<Context<S>>,
) -> Action {
    context
        .retry
        .back_off(object.as_ref(), error, error.is_conflict())
}

/// Drains a controller's result stream, logging what failed at debug level (failures are
/// already logged by [`back_off`]).
pub async fn drain<T, E: std::fmt::Display>(results: impl Stream<Item = Result<T, E>>) {
    results
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile finished with an error");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::RetryPolicy;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn object(name: &str) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(name.into());
        object.metadata.namespace = Some("ns".into());
        object.metadata.uid = Some(format!("uid-{name}"));
        object.metadata.generation = Some(1);
        object
    }

    /// A client answering every request with an Event, counting the requests it got.
    fn counting_client(count: Arc<std::sync::atomic::AtomicUsize>) -> Client {
        let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async move {
                let answer = serde_json::json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                                                "metadata": {"name": "e", "namespace": "ns"},
                                                "eventTime": "2026-11-30T00:00:00.000000Z"});
                http::Response::builder()
                    .status(201)
                    .body(kube::client::Body::from(answer.to_string().into_bytes()))
            }
        });
        Client::new(service, "default")
    }

    #[tokio::test]
    async fn events_go_through_the_events_client_and_spend_none_of_the_reconcilers_requests() {
        let occurrence = crate::events::Occurrence {
            warning: false,
            reason: "Created",
            action: "Reconcile",
            note: "made",
        };
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            kind: Some("ConfigMap".into()),
            name: Some("a".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        };
        let (own, events) = (Arc::default(), Arc::default());
        let context =
            Reconciler::<ConfigMap, ()>::new(counting_client(Arc::clone(&own)), Arc::new(()))
                .events_client(counting_client(Arc::clone(&events)))
                .into_context(|state, _, _| state);
        context
            .recorder
            .publish(&regarding, &occurrence)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let count =
            |c: &Arc<std::sync::atomic::AtomicUsize>| c.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!((count(&own), count(&events)), (0, 1));

        // Without one, events share the reconciler's client.
        let alone =
            Reconciler::<ConfigMap, ()>::new(counting_client(Arc::clone(&own)), Arc::new(()))
                .into_context(|state, _, _| state);
        alone
            .recorder
            .publish(&regarding, &occurrence)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((count(&own), count(&events)), (1, 1));
    }

    #[test]
    fn the_retry_memory_forgets_deleted_objects_and_those_a_relist_misses() {
        let memory = Arc::new(RetryMemory::default());
        let state = RetryState::with_memory(RetryPolicy::default(), Arc::clone(&memory));
        let (a, b, c) = (object("a"), object("b"), object("c"));
        state.back_off(&a, &"cloud down", false);
        state.back_off(&b, &"cloud down", true);
        state.next_action(&c, Next::InvalidConfiguration).ok();
        assert_eq!(memory.len(), 3);

        let (store, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        for object in [&b, &c] {
            writer.apply_watcher_event(&watcher::Event::Apply(object.clone()));
        }
        forget_gone(&memory, &watcher::Event::Delete(a.clone()), &store);
        assert_eq!(memory.len(), 2, "a deleted object is forgotten");
        assert_eq!(state.invalid_at(&c), Some(1));
        // A reconcile of the deleted object that ends after the deletion is remembered until
        // the next deletion.
        state.back_off(&a, &"finalizer gone", false);
        let d = object("d");
        writer.apply_watcher_event(&watcher::Event::Apply(d.clone()));
        writer.apply_watcher_event(&watcher::Event::Delete(d.clone()));
        forget_gone(&memory, &watcher::Event::Delete(d), &store);
        assert_eq!(memory.len(), 2, "a is forgotten with d");

        // The watch was down while b was deleted: the re-list holds only c.
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(c.clone()),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
            forget_gone(&memory, &event, &store);
        }
        assert_eq!(memory.len(), 1, "only c is remembered");
        assert_eq!(state.invalid_at(&c), Some(1));
    }
}
