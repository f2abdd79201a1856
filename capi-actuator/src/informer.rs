//! One watch per kind for every controller of a manager: [`Informers`] hands out [`Informer`]s —
//! one store and one watch of a kind (per namespace and selector) — that every controller asking
//! for that kind shares, each with its own stream of the watch's events.
//!
//! Without it a manager running the core, bootstrap, control-plane and infrastructure controllers
//! kept six copies of every Machine (one per controller that reads Machines) and decoded every
//! change of one seven times. With it the process keeps one copy — without managed fields, which
//! no controller reads — and decodes each change once.
//!
//! Guarantees of a subscriber's stream ([`Informer::events`]):
//! - it starts with one complete list (`Init`, `InitApply`…, `InitDone`): the store's contents,
//!   given at once to a subscriber that joins while no list is under way, or at the end of the
//!   list under way (the first, or a re-list after the watch lost its place) to one that joins
//!   during it; then every change after it;
//! - it sees every change (`Apply`, `Delete`, re-lists) after that, in the watch's order; a change
//!   may be seen twice around the moment it joins, never missed;
//! - it never blocks the watch or the other subscribers (each stream has its own unbounded queue,
//!   drained by its controller), and a dropped stream is forgotten at the next change;
//! - the store is updated before any subscriber sees the change, so a controller that looks an
//!   object up in the store after a change finds it at least as new.
//!
//! The watch runs on a task of its own from the first [`Informers::informer`] call until the
//! last handle of its informer and the last subscriber's stream are dropped; a failed watch is retried with
//! [`WatchBackoff`](crate::retry::WatchBackoff), so it never stops by itself.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

/// The informers of one manager (one API server, one identity), by kind, URL and selectors.
/// Cloning it shares them.
#[derive(Clone, Default)]
pub struct Informers {
    by_key: Arc<Mutex<HashMap<Key, Box<dyn Any + Send + Sync>>>>,
    shared: Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
}

impl Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = lock(&self.by_key).len();
        f.debug_struct("Informers")
            .field("watches", &count)
            .finish()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    kind: TypeId,
    url: String,
    /// The whole watch configuration (selectors, page size, timeouts, list strategy).
    config: String,
}

impl Informers {
    /// The one `T` of these informers, made with `Default` on first use: what the controllers of
    /// a manager share besides typed watches (e.g. the watches of kinds known only at run time).
    pub fn shared<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut shared = lock(&self.shared);
        let entry = shared
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()) as Arc<dyn Any + Send + Sync>);
        match Arc::clone(entry).downcast::<T>() {
            Ok(found) => found,
            // Unreachable: the entry of `T`'s type ID holds a `T`.
            Err(_) => {
                let made = Arc::new(T::default());
                *entry = Arc::clone(&made) as Arc<dyn Any + Send + Sync>;
                made
            }
        }
    }

    /// The informer of `api`'s objects matching `config`'s selectors: the one already running for
    /// the same kind, URL (namespace) and watch configuration, else a new one whose watch starts
    /// now (through `api`'s client). The stored objects have no managed fields. Must be called
    /// within a Tokio runtime.
    pub fn informer<K>(&self, api: Api<K>, config: watcher::Config) -> Informer<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let key = Key {
            kind: TypeId::of::<K>(),
            url: api.resource_url().to_string(),
            config: format!("{config:?}"),
        };
        let mut by_key = lock(&self.by_key);
        if let Some(hub) = by_key
            .get(&key)
            .and_then(|hub| hub.downcast_ref::<Arc<Hub<K>>>())
        {
            return Informer {
                hub: Arc::clone(hub),
            };
        }
        let hub = Hub::start(api, config);
        by_key.insert(key, Box::new(Arc::clone(&hub)));
        Informer { hub }
    }
}

/// One kind's shared store and watch. Cloning shares them.
pub struct Informer<K: Resource<DynamicType = ()> + Clone + 'static> {
    hub: Arc<Hub<K>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Self {
            hub: Arc::clone(&self.hub),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Debug for Informer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("kind", &K::kind(&()))
            .field("objects", &self.hub.store.len())
            .finish()
    }
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    /// The shared store (ready once the first list is in: `Store::wait_until_ready`).
    pub fn store(&self) -> Store<K> {
        self.hub.store.clone()
    }

    /// A new subscriber's stream of the watch's events, starting with a complete list (see the
    /// module's guarantees). Never yields an error: the shared watch retries by itself.
    pub fn events(&self) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + use<K> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.hub.subscribe(sender);
        // The stream keeps the watch alive: a controller holding only its stream and the store
        // still gets every change.
        let hub = Arc::clone(&self.hub);
        futures::stream::unfold((receiver, hub), |(mut receiver, hub)| async move {
            let event = receiver.recv().await?;
            Some((Ok(event), (receiver, hub)))
        })
    }

    /// [`events`](Self::events) as the objects they touch (applied or deleted), as
    /// `WatchStreamExt::touched_objects` gives them.
    pub fn changes(&self) -> impl Stream<Item = Result<K, watcher::Error>> + use<K> {
        self.events().touched_objects()
    }

    /// How many subscribers the watch serves (for tests).
    #[cfg(test)]
    fn subscribers(&self) -> usize {
        let state = lock(&self.hub.state);
        state.subscribers.len() + state.waiting.len()
    }
}

struct Hub<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    state: Mutex<HubState<K>>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

struct HubState<K> {
    /// The first list is in: a new subscriber is given the store's contents at once…
    listed: bool,
    /// …unless a (re-)list is under way: then it waits for its end, so that what it gets is one
    /// whole list, never the old store followed by the tail of a new list.
    listing: bool,
    subscribers: Vec<mpsc::UnboundedSender<watcher::Event<K>>>,
    /// Subscribers that joined while the first list was under way: given the store at its end.
    waiting: Vec<mpsc::UnboundedSender<watcher::Event<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Drop for Hub<K> {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

impl<K> Hub<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    /// A hub of `store`, without subscribers or a watch yet.
    fn new(store: Store<K>) -> Arc<Self> {
        Arc::new(Self {
            store,
            state: Mutex::new(HubState {
                listed: false,
                listing: false,
                subscribers: Vec::new(),
                waiting: Vec::new(),
            }),
            task: Mutex::new(None),
        })
    }

    fn start(api: Api<K>, config: watcher::Config) -> Arc<Self>
    where
        K: DeserializeOwned,
    {
        let (store, writer) = reflector::store();
        let hub = Self::new(store);
        let weak: Weak<Self> = Arc::downgrade(&hub);
        let kind = K::kind(&()).to_string();
        let task = tokio::spawn(async move {
            let events = watcher(api, config)
                .backoff(crate::retry::WatchBackoff::default())
                .modify(|object| object.meta_mut().managed_fields = None)
                .reflect(writer);
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                let Some(hub) = weak.upgrade() else {
                    return;
                };
                match event {
                    Ok(event) => hub.dispatch(event),
                    Err(error) => tracing::debug!(%kind, %error, "shared watch failed; retrying"),
                }
            }
        });
        *lock(&hub.task) = Some(task.abort_handle());
        hub
    }

    fn subscribe(&self, sender: mpsc::UnboundedSender<watcher::Event<K>>) {
        let mut state = lock(&self.state);
        if state.listed && !state.listing {
            self.seed(&sender);
            state.subscribers.push(sender);
        } else {
            state.waiting.push(sender);
        }
    }

    /// The store's contents as a complete list.
    fn seed(&self, sender: &mpsc::UnboundedSender<watcher::Event<K>>) {
        let _ = sender.send(watcher::Event::Init);
        for object in self.store.state() {
            let _ = sender.send(watcher::Event::InitApply(K::clone(&object)));
        }
        let _ = sender.send(watcher::Event::InitDone);
    }

    /// Passes `event` (already in the store) on to every live subscriber.
    fn dispatch(&self, event: watcher::Event<K>) {
        let mut state = lock(&self.state);
        state
            .subscribers
            .retain(|subscriber| subscriber.send(event.clone()).is_ok());
        if matches!(event, watcher::Event::Init) {
            state.listing = true;
        }
        if matches!(event, watcher::Event::InitDone) {
            state.listed = true;
            state.listing = false;
            let waiting = std::mem::take(&mut state.waiting);
            for subscriber in waiting {
                self.seed(&subscriber);
                state.subscribers.push(subscriber);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn map(name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            data: Some([("v".to_string(), value.to_string())].into()),
            ..ConfigMap::default()
        }
    }

    /// A hub without a watch, fed by hand as the watch task feeds it.
    fn fed() -> (Informer<ConfigMap>, reflector::store::Writer<ConfigMap>) {
        let (store, writer) = reflector::store();
        (
            Informer {
                hub: Hub::new(store),
            },
            writer,
        )
    }

    fn feed(
        informer: &Informer<ConfigMap>,
        writer: &mut reflector::store::Writer<ConfigMap>,
        event: watcher::Event<ConfigMap>,
    ) {
        writer.apply_watcher_event(&event);
        informer.hub.dispatch(event);
    }

    fn names(events: &[watcher::Event<ConfigMap>]) -> Vec<String> {
        events
            .iter()
            .map(|event| match event {
                watcher::Event::Init => "init".to_string(),
                watcher::Event::InitApply(o) => {
                    format!("list {}", o.metadata.name.as_deref().unwrap_or(""))
                }
                watcher::Event::InitDone => "done".to_string(),
                watcher::Event::Apply(o) => {
                    format!("apply {}", o.metadata.name.as_deref().unwrap_or(""))
                }
                watcher::Event::Delete(o) => {
                    format!("delete {}", o.metadata.name.as_deref().unwrap_or(""))
                }
            })
            .collect()
    }

    async fn drain(
        stream: &mut (impl Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin),
    ) -> Vec<watcher::Event<ConfigMap>> {
        use futures::FutureExt;
        let mut seen = Vec::new();
        while let Some(Some(Ok(event))) = stream.next().now_or_never() {
            seen.push(event);
        }
        seen
    }

    #[tokio::test]
    async fn early_and_late_subscribers_each_get_a_complete_list_then_every_change() {
        let (informer, mut writer) = fed();
        let mut early = Box::pin(informer.events());
        feed(&informer, &mut writer, watcher::Event::Init);
        feed(
            &informer,
            &mut writer,
            watcher::Event::InitApply(map("a", "1")),
        );
        // Joins in the middle of the first list: must not get half of it.
        let mut middle = Box::pin(informer.events());
        feed(
            &informer,
            &mut writer,
            watcher::Event::InitApply(map("b", "1")),
        );
        feed(&informer, &mut writer, watcher::Event::InitDone);
        feed(&informer, &mut writer, watcher::Event::Apply(map("a", "2")));
        let mut late = Box::pin(informer.events());
        feed(
            &informer,
            &mut writer,
            watcher::Event::Delete(map("b", "1")),
        );

        // Both joined before the first list was in: each gets it whole (in the store's order),
        // then every change.
        for stream in [&mut early, &mut middle] {
            let mut seen = names(&drain(stream).await);
            seen[1..3].sort();
            assert_eq!(
                seen,
                ["init", "list a", "list b", "done", "apply a", "delete b"]
            );
        }
        let late = drain(&mut late).await;
        let listed_a = late.iter().find_map(|e| match e {
            watcher::Event::InitApply(o) if o.metadata.name.as_deref() == Some("a") => {
                o.data.clone()
            }
            _ => None,
        });
        assert_eq!(
            listed_a.and_then(|d| d.get("v").cloned()).as_deref(),
            Some("2"),
            "the store's newest"
        );
        assert_eq!(names(&late).last().map(String::as_str), Some("delete b"));
        assert_eq!(informer.store().len(), 1);
    }

    #[tokio::test]
    async fn a_subscriber_joining_during_a_re_list_gets_the_new_list_whole() {
        let (informer, mut writer) = fed();
        feed(&informer, &mut writer, watcher::Event::Init);
        feed(
            &informer,
            &mut writer,
            watcher::Event::InitApply(map("a", "1")),
        );
        feed(&informer, &mut writer, watcher::Event::InitDone);
        // The watch lost its place: a re-list, during which someone joins.
        feed(&informer, &mut writer, watcher::Event::Init);
        feed(
            &informer,
            &mut writer,
            watcher::Event::InitApply(map("b", "1")),
        );
        let mut joined = Box::pin(informer.events());
        feed(
            &informer,
            &mut writer,
            watcher::Event::InitApply(map("c", "1")),
        );
        feed(&informer, &mut writer, watcher::Event::InitDone);
        let mut seen = names(&drain(&mut joined).await);
        seen[1..3].sort();
        assert_eq!(
            seen,
            ["init", "list b", "list c", "done"],
            "not the old store (a)"
        );
    }

    #[tokio::test]
    async fn a_dropped_subscriber_is_forgotten_and_does_not_hold_the_others() {
        let (informer, mut writer) = fed();
        let kept = informer.events();
        let dropped = informer.events();
        assert_eq!(informer.subscribers(), 2);
        feed(&informer, &mut writer, watcher::Event::Init);
        feed(&informer, &mut writer, watcher::Event::InitDone);
        drop(dropped);
        feed(&informer, &mut writer, watcher::Event::Apply(map("a", "1")));
        assert_eq!(informer.subscribers(), 1);
        let mut kept = Box::pin(kept);
        assert_eq!(names(&drain(&mut kept).await), ["init", "done", "apply a"]);
    }

    #[tokio::test]
    async fn one_informer_per_kind_url_and_selector() {
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("a URL"),
        ))
        .expect("a client");
        let informers = Informers::default();
        let api = || Api::<ConfigMap>::namespaced(client.clone(), "ns");
        let a = informers.informer(api(), watcher::Config::default());
        let b = informers.informer(api(), watcher::Config::default());
        assert!(
            Arc::ptr_eq(&a.hub, &b.hub),
            "same kind, namespace and selectors: shared"
        );
        let other_namespace = informers.informer(
            Api::<ConfigMap>::namespaced(client.clone(), "other"),
            watcher::Config::default(),
        );
        let selected = informers.informer(api(), watcher::Config::default().labels("x=y"));
        assert!(!Arc::ptr_eq(&a.hub, &other_namespace.hub));
        assert!(!Arc::ptr_eq(&a.hub, &selected.hub));
        let paged = informers.informer(api(), watcher::Config::default().page_size(10));
        assert!(
            !Arc::ptr_eq(&a.hub, &paged.hub),
            "another watch configuration"
        );
        let shared = informers.shared::<Mutex<Vec<u8>>>();
        assert!(Arc::ptr_eq(
            &shared,
            &informers.clone().shared::<Mutex<Vec<u8>>>()
        ));
        // The watch task goes with the last handle and the last subscriber's stream.
        let task = lock(&a.hub.task).clone().expect("a watch task");
        let stream = a.events();
        drop((a, b, informers));
        tokio::task::yield_now().await;
        assert!(!task.is_finished(), "a subscriber's stream keeps the watch");
        drop(stream);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(task.is_finished());
    }
}
