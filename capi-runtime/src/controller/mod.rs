//! The loop that runs a controller's reconciles: what triggers them, how many run at once, and in
//! which order — the builder of kube-runtime's `Controller` (the same methods, so a controller
//! written for one reads the same on the other), on a fair queue.
//!
//! # Why not kube-runtime's
//!
//! kube-runtime 5's scheduler keeps due requests on tokio-util `DelayQueue`'s expired stack
//! (newest first), and once every slot is busy, in a hash set from which it takes whichever key
//! iterates first. Under a steady stream of triggers an older request waits behind newer ones
//! for as long as the stream lasts (at 10 000 machines, requests waited 800 s). Here due
//! requests are served **oldest first**, with client-go's workqueue semantics
//! (`queue`): a key is queued once however often it is triggered, is never reconciled twice at
//! once (a trigger during its reconcile queues it again, at the back, once the reconcile ends),
//! and a requeue waits on a timer, replaced by a sooner one or by a trigger. So no request waits
//! longer than the requests queued before it take.
//!
//! Each reconcile runs in a span `reconciling object` with `object.ref` and `object.reason`
//! (why it was queued), as kube-runtime's did.

mod queue;

use std::collections::VecDeque;
use std::fmt::{self, Debug, Display};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, FuturesUnordered, SelectAll};
use futures::{FutureExt, Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::{Backoff, StreamBackoff};
use kube::runtime::watcher;
use tokio::time::Instant;
use tracing::Instrument;

use queue::WorkQueue;

/// What a reconcile asks for next: to run again after a while (even without a change), or only
/// when a watch brings a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Reconcile again after `duration` unless a trigger comes sooner.
    #[must_use]
    pub const fn requeue(duration: Duration) -> Self {
        Self {
            requeue_after: Some(duration),
        }
    }

    /// Reconcile again only when a watch brings a change.
    #[must_use]
    pub const fn await_change() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// How long until the next reconcile, if one is asked for without a change.
    #[must_use]
    pub const fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// Why a key was queued: the first reason stands until its reconcile starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The object itself changed (or its resync came due).
    ObjectUpdated,
    /// An object it depends on changed (a `watches_stream`).
    RelatedObjectUpdated,
    /// A trigger of the controller's own (`reconcile_on`).
    Requested,
    /// Its last reconcile asked to run again after a while.
    Requeue,
    /// Its last reconcile failed, and the error policy asked to retry after a while.
    ErrorPolicy,
}

impl Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ObjectUpdated => "object updated",
            Self::RelatedObjectUpdated => "related object updated",
            Self::Requested => "requested",
            Self::Requeue => "reconciler requested retry",
            Self::ErrorPolicy => "error policy requested retry",
        })
    }
}

/// How a controller runs: how many reconciles at once.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    concurrency: u16,
}

impl Default for Config {
    /// Unbounded concurrency, as kube-runtime's default.
    fn default() -> Self {
        Self { concurrency: 0 }
    }
}

impl Config {
    /// At most `concurrency` reconciles at once (0: no bound). Each key runs one at a time
    /// whatever the bound.
    #[must_use]
    pub fn concurrency(mut self, concurrency: u16) -> Self {
        self.concurrency = concurrency;
        self
    }
}

/// What went wrong on the way to (or in) a reconcile; the controller goes on.
#[derive(Debug)]
pub enum Error<K: Resource<DynamicType = ()>, E> {
    /// The key was due, but its object is no longer in the store (deleted meanwhile).
    ObjectNotFound(ObjectRef<K>),
    /// The reconcile failed (the error policy decided when to retry).
    ReconcilerFailed(E, ObjectRef<K>),
    /// A trigger's watch failed (it is retried with the trigger backoff).
    QueueError(watcher::Error),
}

impl<K: Resource<DynamicType = ()>, E: Display> Display for Error<K, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ObjectNotFound(key) => write!(f, "object {key} was not found in the store"),
            Self::ReconcilerFailed(error, key) => write!(f, "reconciling {key} failed: {error}"),
            Self::QueueError(error) => write!(f, "a trigger's watch failed: {error}"),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Debug, E: std::error::Error + 'static> std::error::Error
    for Error<K, E>
{
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::ObjectNotFound(_) => None,
            Self::ReconcilerFailed(error, _) => Some(error),
            Self::QueueError(error) => Some(error),
        }
    }
}

type Trigger<K> = BoxStream<'static, Result<(ObjectRef<K>, Reason), watcher::Error>>;

/// What one reconcile's run yields.
pub type Outcome<K, E> = Result<(ObjectRef<K>, Action), Error<K, E>>;

/// A reconcile running: its key, its object and, once done, what it returned.
type Reconciling<K, E> = BoxFuture<'static, (ObjectRef<K>, Arc<K>, Result<Action, E>)>;

/// A controller of `K`: its triggers, its store, how it runs. Built like kube-runtime's
/// `Controller` and run with [`run`](Self::run).
pub struct Controller<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    triggers: Vec<Trigger<K>>,
    /// Triggers that report watch errors, which the trigger backoff paces.
    watched: Vec<Trigger<K>>,
    backoff: Option<Box<dyn FnMut() -> Box<dyn Backoff> + Send>>,
    config: Config,
    shutdown: Option<BoxFuture<'static, ()>>,
}

impl<K> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// A controller of the objects of `trigger` (a watch of `K`), found in `store` when their
    /// reconcile starts. `store` must hold an object by the time `trigger` yields it, as the
    /// stores of [`Reconciler::trigger`](crate::Reconciler::trigger) and of the manager's
    /// informers do; a key the store does not hold is not reconciled
    /// ([`Error::ObjectNotFound`]). (kube-runtime's `reflector(..).applied_objects()` yields its
    /// first list before its store holds it, and kube-runtime's `Controller` waits for that
    /// store; this one does not.)
    pub fn for_stream(
        trigger: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
        store: Store<K>,
    ) -> Self {
        let trigger = trigger
            .map(|object| {
                object.map(|object| (ObjectRef::from_obj(&object), Reason::ObjectUpdated))
            })
            .boxed();
        Self {
            store,
            triggers: Vec::new(),
            watched: vec![trigger],
            backoff: None,
            config: Config::default(),
            shutdown: None,
        }
    }

    /// Paces the watches that trigger the controller after they fail (each watch its own copy of
    /// `backoff`, reset when it delivers again). Without it, [`WatchBackoff`]'s default.
    ///
    /// [`WatchBackoff`]: crate::retry::WatchBackoff
    #[must_use]
    pub fn trigger_backoff<B: Backoff + Clone + 'static>(mut self, backoff: B) -> Self {
        self.backoff = Some(Box::new(move || Box::new(backoff.clone())));
        self
    }

    /// Runs as `config` says.
    #[must_use]
    pub fn with_config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// A change of another kind triggers the objects `mapper` names.
    #[must_use]
    pub fn watches_stream<Other, I>(
        mut self,
        changes: impl Stream<Item = Result<Other, watcher::Error>> + Send + 'static,
        mapper: impl Fn(Other) -> I + Send + 'static,
    ) -> Self
    where
        I: IntoIterator<Item = ObjectRef<K>>,
    {
        let trigger = changes
            .flat_map(move |change| match change {
                Ok(other) => stream::iter(mapper(other).into_iter().collect::<Vec<_>>())
                    .map(|key| Ok((key, Reason::RelatedObjectUpdated)))
                    .left_stream(),
                Err(error) => stream::once(async { Err(error) }).right_stream(),
            })
            .boxed();
        self.watched.push(trigger);
        self
    }

    /// Every key of `requests` is reconciled.
    #[must_use]
    pub fn reconcile_on(
        mut self,
        requests: impl Stream<Item = ObjectRef<K>> + Send + 'static,
    ) -> Self {
        self.triggers
            .push(requests.map(|key| Ok((key, Reason::Requested))).boxed());
        self
    }

    /// Once `shutdown` completes, no reconcile starts; those running finish, then
    /// [`run`](Self::run)'s stream ends.
    #[must_use]
    pub fn graceful_shutdown_on(
        mut self,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> Self {
        self.shutdown = Some(shutdown.boxed());
        self
    }

    /// Runs `reconcile` for each due key, oldest first, at most the configured number at once,
    /// one at a time per key; a failed reconcile's next run is what `error_policy` says. The
    /// stream yields each reconcile's outcome. It ends after shutdown once the running
    /// reconciles have finished, or once every trigger has ended and nothing is running or due
    /// (requeues still waiting are dropped).
    pub fn run<Ctx, Fut, E>(
        self,
        mut reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> Fut + Send + 'static,
        error_policy: impl Fn(Arc<K>, &E, Arc<Ctx>) -> Action + Send + 'static,
        context: Arc<Ctx>,
    ) -> impl Stream<Item = Outcome<K, E>> + Send
    where
        Ctx: Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: Send + 'static,
    {
        let Self {
            store,
            triggers,
            watched,
            mut backoff,
            config,
            shutdown,
        } = self;
        let mut all: SelectAll<Trigger<K>> = stream::select_all(triggers);
        let backoff = backoff
            .get_or_insert_with(|| Box::new(|| Box::new(crate::retry::WatchBackoff::default())));
        for trigger in watched {
            all.push(StreamBackoff::new(trigger, backoff()).boxed());
        }
        let mut run = Run::<K, E> {
            queue: WorkQueue::default(),
            running: FuturesUnordered::new(),
            triggers: all,
            triggers_ended: false,
            shutdown: shutdown.unwrap_or_else(|| futures::future::pending().boxed()),
            stopping: false,
            concurrency: usize::from(config.concurrency),
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            outcomes: VecDeque::new(),
        };
        stream::poll_fn(move |cx| {
            loop {
                if let Some(outcome) = run.outcomes.pop_front() {
                    return Poll::Ready(Some(outcome));
                }
                if !run.stopping && run.shutdown.poll_unpin(cx).is_ready() {
                    run.stopping = true;
                }
                if !run.stopping && !run.triggers_ended {
                    run.take_triggers(cx);
                }
                run.queue.promote(Instant::now());
                // Start what may start, oldest first.
                while !run.stopping && run.has_room() {
                    let Some((key, reason)) = run.queue.pop() else {
                        break;
                    };
                    let Some(object) = store.get(&key) else {
                        run.queue.done(&key);
                        run.outcomes.push_back(Err(Error::ObjectNotFound(key)));
                        continue;
                    };
                    let span = tracing::info_span!(
                        "reconciling object",
                        "object.ref" = %key,
                        "object.reason" = %reason
                    );
                    let reconciling = reconcile(Arc::clone(&object), Arc::clone(&context));
                    run.running.push(
                        async move { (key, object, reconciling.await) }
                            .instrument(span)
                            .boxed(),
                    );
                }
                // A reconcile ended: its key is free, and comes again as its action says.
                if let Poll::Ready(Some((key, object, outcome))) = run.running.poll_next_unpin(cx) {
                    run.queue.done(&key);
                    let (action, reason, outcome) = match outcome {
                        Ok(action) => (action, Reason::Requeue, Ok((key.clone(), action))),
                        Err(error) => (
                            error_policy(object, &error, Arc::clone(&context)),
                            Reason::ErrorPolicy,
                            Err(Error::ReconcilerFailed(error, key.clone())),
                        ),
                    };
                    // A delay past what a clock can hold means never.
                    if let Some(at) = action
                        .requeue_after()
                        .and_then(|after| Instant::now().checked_add(after))
                    {
                        run.queue.add_at(key, at, reason);
                    }
                    run.outcomes.push_back(outcome);
                    continue;
                }
                if !run.outcomes.is_empty() {
                    continue;
                }
                if run.running.is_empty()
                    && (run.stopping || (run.triggers_ended && run.queue.len() == 0))
                {
                    return Poll::Ready(None);
                }
                if !run.stopping
                    && let Some(at) = run.queue.next_due()
                {
                    if run.timer.deadline() != at {
                        run.timer.as_mut().reset(at);
                    }
                    if run.timer.as_mut().poll(cx).is_ready() {
                        continue;
                    }
                }
                return Poll::Pending;
            }
        })
    }
}

/// The state of a running controller.
struct Run<K: Resource<DynamicType = ()> + 'static, E> {
    queue: WorkQueue<ObjectRef<K>, Reason>,
    running: FuturesUnordered<Reconciling<K, E>>,
    triggers: SelectAll<Trigger<K>>,
    triggers_ended: bool,
    shutdown: BoxFuture<'static, ()>,
    stopping: bool,
    /// At most this many reconciles at once (0: no bound).
    concurrency: usize,
    /// Wakes the loop when the next waiting key comes due.
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Outcomes not yet yielded.
    outcomes: VecDeque<Outcome<K, E>>,
}

/// The most triggers taken in one go before the loop serves the queue (and lets others run).
const TRIGGERS_PER_TURN: usize = 1024;

impl<K: Resource<DynamicType = ()> + 'static, E> Run<K, E> {
    fn has_room(&self) -> bool {
        self.concurrency == 0 || self.running.len() < self.concurrency
    }

    /// Queues what the triggers have now (at most [`TRIGGERS_PER_TURN`]; the loop is woken
    /// again for the rest).
    fn take_triggers(&mut self, cx: &mut Context<'_>) {
        for _ in 0..TRIGGERS_PER_TURN {
            match self.triggers.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok((key, reason)))) => self.queue.add(key, reason),
                Poll::Ready(Some(Err(error))) => {
                    self.outcomes.push_back(Err(Error::QueueError(error)))
                }
                Poll::Ready(None) => {
                    self.triggers_ended = true;
                    return;
                }
                Poll::Pending => return,
            }
        }
        cx.waker().wake_by_ref();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector::store::Writer;
    use tokio::sync::mpsc;

    use super::*;

    fn object(name: &str) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(name.into());
        object.metadata.namespace = Some("ns".into());
        object
    }

    fn key(name: &str) -> ObjectRef<ConfigMap> {
        ObjectRef::new(name).within("ns")
    }

    /// A store holding `names`, listed.
    fn store(names: impl IntoIterator<Item = String>) -> Store<ConfigMap> {
        let mut writer = Writer::<ConfigMap>::default();
        writer.apply_watcher_event(&watcher::Event::Init);
        for name in names {
            writer.apply_watcher_event(&watcher::Event::InitApply(object(&name)));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        writer.as_reader()
    }

    /// What the reconciles of a test saw: each start, by name, with its time.
    #[derive(Default)]
    struct Seen {
        started: Mutex<Vec<(String, Instant)>>,
    }

    impl Seen {
        fn names(&self) -> Vec<String> {
            self.started
                .lock()
                .unwrap()
                .iter()
                .map(|(name, _)| name.clone())
                .collect()
        }
    }

    /// Runs a controller of `store`'s objects whose reconciles take `took` each and end with
    /// `action`, triggered through the returned sender; `seen` records them.
    fn controller(
        store: Store<ConfigMap>,
        concurrency: u16,
        took: Duration,
        action: Action,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> (
        mpsc::UnboundedSender<ObjectRef<ConfigMap>>,
        Arc<Seen>,
        tokio::task::JoinHandle<Vec<String>>,
    ) {
        let (send, receive) = mpsc::unbounded_channel();
        let seen = Arc::new(Seen::default());
        let requests = futures::stream::unfold(receive, |mut receive| async move {
            receive.recv().await.map(|key| (key, receive))
        });
        let results = Controller::for_stream(futures::stream::pending(), store)
            .with_config(Config::default().concurrency(concurrency))
            .reconcile_on(requests)
            .graceful_shutdown_on(shutdown)
            .run(
                move |object: Arc<ConfigMap>, seen: Arc<Seen>| async move {
                    seen.started.lock().unwrap().push((
                        object.metadata.name.clone().unwrap_or_default(),
                        Instant::now(),
                    ));
                    tokio::time::sleep(took).await;
                    if object.metadata.name.as_deref() == Some("fails") {
                        return Err("the cloud is down");
                    }
                    Ok(action)
                },
                |_, _, _| Action::requeue(Duration::from_secs(7)),
                Arc::clone(&seen),
            );
        let outcomes = tokio::spawn(async move {
            results
                .map(|outcome| match outcome {
                    Ok((key, _)) => format!("ok {}", key.name),
                    Err(error) => error.to_string(),
                })
                .collect()
                .await
        });
        (send, seen, outcomes)
    }

    /// The fairness the loop exists for: while a stream of new keys arrives faster than they are
    /// served, a key waits only for those queued before it, never for the stream.
    #[tokio::test(start_paused = true)]
    async fn a_stream_of_new_triggers_never_overtakes_an_older_one() {
        let names: Vec<String> = (0..4)
            .map(|i| format!("first-{i}"))
            .chain(["old".to_string()])
            .chain((0..200).map(|i| format!("new-{i}")))
            .collect();
        let (send, seen, _outcomes) = controller(
            store(names.clone()),
            2,
            Duration::from_millis(10),
            Action::await_change(),
            futures::future::pending(),
        );
        for name in &names[..5] {
            send.send(key(name)).unwrap();
        }
        // Two reconciles every 10 ms, one new key every 4 ms: the queue grows for the whole
        // stream (800 ms).
        for name in &names[5..] {
            tokio::time::sleep(Duration::from_millis(4)).await;
            send.send(key(name)).unwrap();
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let served = seen.names();
        assert_eq!(served.len(), names.len(), "every key ran once: {served:?}");
        assert_eq!(served, names, "keys run in the order they were triggered");
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_runs_once_per_burst_and_once_more_after_a_trigger_during_its_run() {
        let (send, seen, _outcomes) = controller(
            store(["a".to_string(), "b".to_string()]),
            4,
            Duration::from_millis(100),
            Action::await_change(),
            futures::future::pending(),
        );
        for name in ["a", "a", "b", "a"] {
            send.send(key(name)).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(seen.names(), ["a", "b"], "a burst runs each key once");
        for _ in 0..3 {
            send.send(key("a")).unwrap();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let started = seen.started.lock().unwrap().clone();
        assert_eq!(
            started.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["a", "b", "a"],
            "triggers during a run bring one more run"
        );
        assert!(
            started[2].1 - started[0].1 >= Duration::from_millis(100),
            "never two runs of a key at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn requeues_come_at_their_time_and_a_trigger_brings_them_forward() {
        let (send, seen, _outcomes) = controller(
            store(["a".to_string(), "fails".to_string()]),
            4,
            Duration::ZERO,
            Action::requeue(Duration::from_secs(10)),
            futures::future::pending(),
        );
        let start = Instant::now();
        send.send(key("a")).unwrap();
        send.send(key("fails")).unwrap();
        tokio::time::sleep(Duration::from_secs(8)).await;
        send.send(key("a")).unwrap();
        tokio::time::sleep(Duration::from_millis(21_500)).await;
        let runs: Vec<(String, u64)> = seen
            .started
            .lock()
            .unwrap()
            .iter()
            .map(|(name, at)| (name.clone(), (*at - start).as_secs()))
            .collect();
        let of = |name: &str| -> Vec<u64> {
            runs.iter()
                .filter(|(n, _)| n == name)
                .map(|(_, at)| *at)
                .collect()
        };
        assert_eq!(
            of("a"),
            [0, 8, 18, 28],
            "the trigger at 8 s replaced the requeue at 10 s"
        );
        assert_eq!(of("fails"), [0, 7, 14, 21, 28], "the error policy's 7 s");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_lets_running_reconciles_finish_and_starts_none() {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (send, seen, outcomes) = controller(
            store(["a".to_string(), "b".to_string(), "gone".to_string()]),
            1,
            Duration::from_secs(1),
            Action::await_change(),
            async move {
                stopped.await.ok();
            },
        );
        send.send(key("missing")).unwrap();
        send.send(key("a")).unwrap();
        send.send(key("b")).unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.send(()).unwrap();
        let outcomes = outcomes.await.unwrap();
        assert_eq!(seen.names(), ["a"], "b never started");
        assert_eq!(
            outcomes,
            [
                "object ConfigMap.v1./missing.ns was not found in the store".to_string(),
                "ok a".to_string()
            ]
        );
    }
}
