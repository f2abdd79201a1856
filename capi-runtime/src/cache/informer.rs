//! One watch per kind for every controller of a manager: [`Informers`] hands out [`Informer`]s —
//! one store and one watch of a kind (per namespace and selector) — that every controller asking
//! for that kind shares, each with its own stream of the watch's events.
//!
//! A process keeps one copy of each watched object — without managed fields, which no controller
//! reads — however many of its controllers read the kind, and decodes each change once.
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
//! - a queue holds shared objects, not copies — an applied object and the list a late subscriber
//!   is given are the store's own, a deleted object or one of a re-list is shared by every queue —
//!   and a subscriber gets its own copy only as it takes an object from its queue: a slow
//!   subscriber, or a list handed to every subscriber at start-up, costs a pointer per object and
//!   subscriber rather than a whole object;
//! - the store is updated before any subscriber sees the change, so a controller that looks an
//!   object up in the store after a change finds it at least as new. That holds for re-lists too:
//!   the objects of a re-list are held back and passed on at its end, once the store holds the
//!   new list (the store swaps a re-list in whole at its end; a controller triggered by an object
//!   of the list before that would find the old version, or none — kube-runtime then drops the
//!   request — and wait for the next change or its resync).
//!
//! Readers that must not act on a partial view wait for the first list with
//! [`Informer::until_listed`] (or ask [`Informer::listed`]), which wakes every task waiting, never
//! with the store's own `Store::wait_until_ready`: kube-runtime's store keeps one waker, that of
//! the task that polled it last, so of two readers waiting on a shared store (two reconciles, a
//! reconcile and a controller's start, a check that polls it once) all but one may sleep forever.
//!
//! A typed watch without selectors can also be offered, through [`DynamicViews`], to readers that
//! know its kind only at run time (the objects Cluster API objects refer to by kind): they read the
//! same store, seen as `DynamicObject`s, instead of keeping a second copy of every object.
//!
//! The watch runs on a task of its own from the first [`Informers::informer`] call until the
//! last handle of its informer and the last subscriber's stream are dropped; a failed watch is retried with
//! [`WatchBackoff`](crate::retry::WatchBackoff), so it never stops by itself.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, TypeMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

/// The informers of one manager (one API server, one identity), by kind, URL and selectors.
/// Cloning it shares them.
#[derive(Clone, Default)]
pub struct Informers {
    by_key: Arc<Mutex<HashMap<Key, Box<dyn Any + Send + Sync>>>>,
    shared: Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
    views: DynamicViews,
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
        let unfiltered = key.config == format!("{:?}", watcher::Config::default());
        let hub = Hub::start(api, config, unfiltered);
        by_key.insert(key, Box::new(Arc::clone(&hub)));
        Informer { hub }
    }

    /// The views of these informers' typed watches offered to readers of run-time kinds. A view
    /// keeps its watch running (as these informers do anyway while they live).
    pub fn dynamic_views(&self) -> DynamicViews {
        self.views.clone()
    }
}

/// Typed watches offered to readers that know their kind only at run time, by resource URL (the
/// kind's group, version and plural, and the namespace watched, as `Api::resource_url` gives it).
/// Cloning shares them.
#[derive(Clone, Default)]
pub struct DynamicViews {
    by_url: Arc<Mutex<HashMap<String, DynamicView>>>,
}

impl Debug for DynamicViews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = lock(&self.by_url).keys().cloned().collect();
        f.debug_struct("DynamicViews").field("urls", &urls).finish()
    }
}

impl DynamicViews {
    /// Offers `informer`'s objects to [`get`](Self::get) under its resource URL (so only to
    /// readers of the same version and namespace scope). Only a watch without selectors or other
    /// settings is offered (a filtered one would hide objects from readers expecting all of them);
    /// the first offer of a URL stays. A view lists only when its typed watch does: an object that
    /// the type cannot decode holds both back, the typed controller's trigger and its readers, who
    /// then read from the API server.
    pub fn offer<K>(&self, informer: &Informer<K>)
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Serialize + Send + Sync + 'static,
    {
        if !informer.hub.unfiltered {
            return;
        }
        lock(&self.by_url)
            .entry(informer.hub.url.clone())
            .or_insert_with(|| DynamicView {
                source: Arc::new(informer.clone()),
            });
    }

    /// The view offered for the resource URL `url`, if any.
    pub fn get(&self, url: &str) -> Option<DynamicView> {
        lock(&self.by_url).get(url).cloned()
    }
}

/// A typed watch's store and changes seen as `DynamicObject`s (converted at each read: nothing
/// is kept besides the typed store). Cloning shares it, and keeps its watch running.
#[derive(Clone)]
pub struct DynamicView {
    source: Arc<dyn DynamicSource>,
}

impl Debug for DynamicView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicView").finish_non_exhaustive()
    }
}

impl DynamicView {
    /// Whether the watch's first list is in (before, a missing object may exist).
    pub fn listed(&self) -> bool {
        self.source.listed()
    }

    /// The object `name` (in `namespace`, for a namespaced kind); `Some(Err(…))` when it could
    /// not be seen as a `DynamicObject` (read it from the API server then).
    pub fn get(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Result<DynamicObject, serde_json::Error>> {
        self.source.get(namespace, name)
    }

    /// Whether the store holds the object `name` (in `namespace`, for a namespaced kind); nothing
    /// is converted.
    pub fn contains(&self, namespace: Option<&str>, name: &str) -> bool {
        self.source.contains(namespace, name)
    }

    /// A new subscriber's stream of the objects the watch touches (a complete list first, then
    /// each applied or deleted object; see the module's guarantees); an object that cannot be
    /// seen as a `DynamicObject` is left out.
    pub fn changes(&self) -> futures::stream::BoxStream<'static, DynamicObject> {
        self.source.changes()
    }
}

trait DynamicSource: Send + Sync {
    fn listed(&self) -> bool;
    fn contains(&self, namespace: Option<&str>, name: &str) -> bool;
    fn get(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Result<DynamicObject, serde_json::Error>>;
    fn changes(&self) -> futures::stream::BoxStream<'static, DynamicObject>;
}

impl<K> DynamicSource for Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + Send + Sync + 'static,
{
    fn listed(&self) -> bool {
        Informer::listed(self)
    }

    fn contains(&self, namespace: Option<&str>, name: &str) -> bool {
        self.hub.store.get(&object_ref(namespace, name)).is_some()
    }

    fn get(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Result<DynamicObject, serde_json::Error>> {
        let object = self.hub.store.get(&object_ref(namespace, name))?;
        Some(as_dynamic(object.as_ref()))
    }

    fn changes(&self) -> futures::stream::BoxStream<'static, DynamicObject> {
        // The typed stream (the inherent method), each object seen as a `DynamicObject`.
        Informer::changes(self)
            .filter_map(|object| {
                let dynamic = object.ok().and_then(|object| match as_dynamic(&object) {
                    Ok(dynamic) => Some(dynamic),
                    Err(error) => {
                        tracing::warn!(kind = %K::kind(&()), name = ?object.meta().name, %error,
                            "a watched object could not be seen as a DynamicObject");
                        None
                    }
                });
                std::future::ready(dynamic)
            })
            .boxed()
    }
}

/// The reference of the object `name` (in `namespace`, for a namespaced kind).
fn object_ref<K: Resource<DynamicType = ()>>(namespace: Option<&str>, name: &str) -> ObjectRef<K> {
    let reference = ObjectRef::<K>::new(name);
    match namespace {
        Some(namespace) => reference.within(namespace),
        None => reference,
    }
}

/// `object` as a `DynamicObject`: its type, its metadata, and every other field as JSON.
fn as_dynamic<K>(object: &K) -> Result<DynamicObject, serde_json::Error>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let Value::Object(mut fields) = serde_json::to_value(object)? else {
        return Err(serde::ser::Error::custom(
            "the object is not written as a JSON object",
        ));
    };
    fields.remove("apiVersion");
    fields.remove("kind");
    let metadata = match fields.remove("metadata") {
        Some(metadata) => serde_json::from_value(metadata)?,
        None => ObjectMeta::default(),
    };
    Ok(DynamicObject {
        types: Some(TypeMeta {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
        }),
        metadata,
        data: Value::Object(fields),
    })
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
    /// The shared store. Whether it holds the first list is [`listed`](Self::listed) (or
    /// [`until_listed`](Self::until_listed)) to say, not the store's `wait_until_ready` (see the
    /// module's guarantees).
    pub fn store(&self) -> Store<K> {
        self.hub.store.clone()
    }

    /// Whether the store holds the watch's first complete list (before, a missing object may
    /// exist). Stays true: a re-list swaps the store's contents whole.
    pub fn listed(&self) -> bool {
        *self.hub.listed.borrow()
    }

    /// Completes once the store holds the watch's first complete list — at once if it does. Any
    /// number of tasks may wait at once, and every one is woken; the future keeps the watch
    /// running while it waits. It waits as long as the list takes (forever for a kind the API
    /// server never lists): bound it with a timeout.
    pub fn until_listed(&self) -> impl Future<Output = ()> + Send + 'static + use<K> {
        let hub = Arc::clone(&self.hub);
        async move {
            // The hub, which holds the sender, lives as long as this future: `wait_for` can only
            // end with the list in.
            let _ = hub.listed.subscribe().wait_for(|listed| *listed).await;
        }
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
            Some((Ok(owned(event)), (receiver, hub)))
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
    /// The resource URL watched (kind and namespace).
    url: String,
    /// Watched without selectors or other settings: every object of the URL.
    unfiltered: bool,
    state: Mutex<HubState<K>>,
    /// The first list is in (set under `state`'s lock): a new subscriber is given the store's
    /// contents at once (see [`HubState::listing`]), and every reader waiting for it is woken.
    listed: watch::Sender<bool>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

/// A subscriber's queue: events carry shared objects (see [`Hub::dispatch`]).
type Subscriber<K> = mpsc::UnboundedSender<watcher::Event<Arc<K>>>;

struct HubState<K> {
    /// A (re-)list is under way: a new subscriber waits for its end (as for the first list,
    /// [`Hub::listed`]), so that what it gets is one whole list, never the old store followed by
    /// the tail of a new list.
    listing: bool,
    subscribers: Vec<Subscriber<K>>,
    /// The objects of the (re-)list under way, passed on at its end (see [`Hub::dispatch`]).
    relist: Vec<K>,
    /// Subscribers that joined while a list (the first, or a re-list) was under way: given the
    /// store at its end.
    waiting: Vec<Subscriber<K>>,
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
    fn new(store: Store<K>, url: String, unfiltered: bool) -> Arc<Self> {
        Arc::new(Self {
            store,
            url,
            unfiltered,
            state: Mutex::new(HubState {
                listing: false,
                subscribers: Vec::new(),
                relist: Vec::new(),
                waiting: Vec::new(),
            }),
            listed: watch::Sender::new(false),
            task: Mutex::new(None),
        })
    }

    fn start(api: Api<K>, config: watcher::Config, unfiltered: bool) -> Arc<Self>
    where
        K: DeserializeOwned,
    {
        let (store, writer) = reflector::store();
        let hub = Self::new(store, api.resource_url().to_string(), unfiltered);
        let weak: Weak<Self> = Arc::downgrade(&hub);
        let kind = K::kind(&()).to_string();
        let task = tokio::spawn(async move {
            let events = watcher(api, config)
                .backoff(crate::retry::WatchBackoff::default())
                .modify(drop_managed_fields)
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

    fn subscribe(&self, sender: Subscriber<K>) {
        let mut state = lock(&self.state);
        if *self.listed.borrow() && !state.listing {
            self.seed(&sender);
            state.subscribers.push(sender);
        } else {
            state.waiting.push(sender);
        }
    }

    /// The store's contents as a complete list.
    fn seed(&self, sender: &Subscriber<K>) {
        let _ = sender.send(watcher::Event::Init);
        for object in self.store.state() {
            let _ = sender.send(watcher::Event::InitApply(object));
        }
        let _ = sender.send(watcher::Event::InitDone);
    }

    /// The store's copy of `object` when it is that very version (the store takes it before the
    /// subscribers see it), else `object` itself, shared.
    ///
    /// The watch task applies each event to the store just before it dispatches it, and is the
    /// store's only writer, so the lookup finds exactly this version; the check costs nothing and
    /// keeps a surprise from handing out another version.
    fn stored(&self, object: K) -> Arc<K> {
        let meta = object.meta();
        let found = meta
            .name
            .as_deref()
            .and_then(|name| self.store.get(&object_ref(meta.namespace.as_deref(), name)));
        match found {
            Some(stored)
                if stored.meta().resource_version == object.meta().resource_version
                    && stored.meta().uid == object.meta().uid =>
            {
                stored
            }
            _ => Arc::new(object),
        }
    }

    /// Passes `event` (already in the store) on to every live subscriber, as one shared object:
    /// an applied object is the store's own (the copy the store just took), a deleted one is moved
    /// into its one `Arc`. The objects of a (re-)list are held until its end — the store takes a
    /// list whole at its end — and passed on then, as the store's own objects, before the end.
    fn dispatch(&self, event: watcher::Event<K>) {
        let mut state = lock(&self.state);
        let events = match event {
            watcher::Event::Apply(object) => vec![watcher::Event::Apply(self.stored(object))],
            watcher::Event::Delete(object) => vec![watcher::Event::Delete(Arc::new(object))],
            watcher::Event::Init => {
                state.listing = true;
                state.relist.clear();
                vec![watcher::Event::Init]
            }
            watcher::Event::InitApply(object) => {
                state.relist.push(object);
                Vec::new()
            }
            watcher::Event::InitDone => {
                let held = std::mem::take(&mut state.relist);
                held.into_iter()
                    .map(|object| watcher::Event::InitApply(self.stored(object)))
                    .chain([watcher::Event::InitDone])
                    .collect()
            }
        };
        let done = matches!(events.last(), Some(watcher::Event::InitDone));
        for event in events {
            state
                .subscribers
                .retain(|subscriber| subscriber.send(event.clone()).is_ok());
        }
        if done {
            // The store swapped the list in before this event came: readers find it whole.
            self.listed.send_replace(true);
            state.listing = false;
            let waiting = std::mem::take(&mut state.waiting);
            for subscriber in waiting {
                self.seed(&subscriber);
                state.subscribers.push(subscriber);
            }
        }
    }
}

/// Drops a watched object's `managedFields` before it is cached: nothing reads them, and they are
/// often half of an object's JSON. (The store keeps its own copy, made by cloning, so every list
/// and string in it already has exactly the room it needs.)
fn drop_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// A subscriber's own copy of a queued event (no copy when it holds the last reference).
fn owned<K: Clone>(event: watcher::Event<Arc<K>>) -> watcher::Event<K> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(Arc::unwrap_or_clone(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(Arc::unwrap_or_clone(object)),
        watcher::Event::InitApply(object) => {
            watcher::Event::InitApply(Arc::unwrap_or_clone(object))
        }
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

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
                hub: Hub::new(store, "/api/v1/namespaces/ns/configmaps".into(), true),
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

    /// A whole list of `objects`, fed as the watch feeds one.
    fn list(
        informer: &Informer<ConfigMap>,
        writer: &mut reflector::store::Writer<ConfigMap>,
        objects: Vec<ConfigMap>,
    ) {
        feed(informer, writer, watcher::Event::Init);
        for object in objects {
            feed(informer, writer, watcher::Event::InitApply(object));
        }
        feed(informer, writer, watcher::Event::InitDone);
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

    #[test]
    fn queued_events_share_the_stores_objects_and_a_subscriber_gets_its_own_copy() {
        let (informer, mut writer) = fed();
        list(&informer, &mut writer, vec![map("a", "1")]);
        let stored = || {
            informer
                .store()
                .get(&ObjectRef::new("a").within("ns"))
                .expect("a is stored")
        };
        let (sender, mut queue) = mpsc::unbounded_channel();
        informer.hub.subscribe(sender);
        let mut queued = || {
            let mut all = Vec::new();
            while let Ok(event) = queue.try_recv() {
                all.push(event);
            }
            all
        };
        // Seeded from the store: the store's own objects, not copies.
        match &queued()[..] {
            [
                watcher::Event::Init,
                watcher::Event::InitApply(listed),
                watcher::Event::InitDone,
            ] => assert!(Arc::ptr_eq(listed, &stored())),
            other => panic!("unexpected seed {other:?}"),
        }
        feed(&informer, &mut writer, watcher::Event::Apply(map("a", "2")));
        let applied = match queued().pop() {
            Some(watcher::Event::Apply(applied)) => applied,
            other => panic!("unexpected event {other:?}"),
        };
        assert!(Arc::ptr_eq(&applied, &stored()));
        // Taken from the queue, it is the subscriber's own object, equal to the store's.
        match owned(watcher::Event::Apply(Arc::clone(&applied))) {
            watcher::Event::Apply(own) => assert_eq!(&own, stored().as_ref()),
            other => panic!("unexpected event {other:?}"),
        }
    }

    #[test]
    fn an_applied_object_the_store_does_not_hold_in_that_version_is_passed_on_as_it_came() {
        let (informer, mut writer) = fed();
        let versioned = |value: &str, version: &str| {
            let mut object = map("a", value);
            object.metadata.resource_version = Some(version.into());
            object
        };
        list(&informer, &mut writer, vec![versioned("1", "1")]);
        let (sender, mut queue) = mpsc::unbounded_channel();
        informer.hub.subscribe(sender);
        while queue.try_recv().is_ok() {}
        // Dispatched without reaching the store first: the store's version 1 must not stand in.
        informer
            .hub
            .dispatch(watcher::Event::Apply(versioned("2", "2")));
        match queue.try_recv() {
            Ok(watcher::Event::Apply(passed)) => assert_eq!(passed.as_ref(), &versioned("2", "2")),
            other => panic!("unexpected event {other:?}"),
        }
    }

    #[test]
    fn cached_objects_hold_no_managed_fields() {
        let mut object = map("a", "1");
        object.metadata.managed_fields = Some(vec![Default::default()]);
        drop_managed_fields(&mut object);
        assert_eq!(object.metadata.managed_fields, None);
        assert_eq!(object, map("a", "1"));
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
        list(&informer, &mut writer, vec![map("a", "1")]);
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
    async fn a_re_list_reaches_subscribers_only_once_the_store_holds_it() {
        let (informer, mut writer) = fed();
        list(&informer, &mut writer, vec![map("a", "1")]);
        let mut stream = Box::pin(informer.events());
        assert_eq!(names(&drain(&mut stream).await), ["init", "list a", "done"]);
        // The watch lost its place: a re-list with a new object and a newer `a`.
        feed(&informer, &mut writer, watcher::Event::Init);
        feed(
            &informer,
            &mut writer,
            watcher::Event::InitApply(map("n", "1")),
        );
        feed(
            &informer,
            &mut writer,
            watcher::Event::InitApply(map("a", "2")),
        );
        assert_eq!(
            names(&drain(&mut stream).await),
            ["init"],
            "nothing of the list before the store has it"
        );
        let store = informer.store();
        assert!(store.get(&ObjectRef::new("n").within("ns")).is_none());
        feed(&informer, &mut writer, watcher::Event::InitDone);
        let seen = drain(&mut stream).await;
        assert_eq!(names(&seen), ["list n", "list a", "done"]);
        // Each object, as it arrives, is in the store in that version.
        for event in &seen {
            if let watcher::Event::InitApply(object) = event {
                let stored = store
                    .get(&ObjectRef::from_obj(object))
                    .expect("in the store");
                assert_eq!(stored.data, object.data);
            }
        }
    }

    /// The hang of a pool reconcile in `cargo xtask chaos --pool`: it waited for the shared
    /// `Machine` store's first list while the `Machine` controller's start waited for the same
    /// store and another controller checked it once; only the last to poll was woken.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[allow(clippy::disallowed_methods)] // the store's own readiness, polled as the others poll it
    async fn every_reader_waiting_for_the_first_list_is_woken_whoever_else_polls_the_store() {
        use futures::FutureExt;
        use std::time::Duration;
        let (informer, mut writer) = fed();
        assert!(!informer.listed());
        let waiting: Vec<_> = (0..3)
            .map(|_| tokio::spawn(informer.until_listed()))
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // What else reads the store meanwhile: a controller that awaits it before its first
        // reconcile (kube-runtime's `Controller`), one that checks it without waiting.
        let store = informer.store();
        let controller_start = tokio::spawn(async move { store.wait_until_ready().await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(informer.store().wait_until_ready().now_or_never().is_none());

        list(&informer, &mut writer, vec![map("a", "1")]);
        for waiter in waiting {
            tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("every waiting reader is woken by the list")
                .expect("the waiter did not panic");
        }
        assert!(informer.listed());
        // Listed for good, and at once for a reader that comes later.
        assert!(informer.until_listed().now_or_never().is_some());
        controller_start.abort();
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

    /// A client of nothing: watches through it fail and retry, which these tests never wait for.
    fn unreachable_client() -> kube::Client {
        kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("a URL"),
        ))
        .expect("a client")
    }

    #[tokio::test]
    async fn one_informer_per_kind_url_and_selector() {
        let client = unreachable_client();
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

    #[tokio::test]
    async fn a_view_serves_the_typed_store_as_dynamic_objects() {
        use futures::FutureExt;
        let (informer, mut writer) = fed();
        let views = DynamicViews::default();
        views.offer(&informer);
        let view = views
            .get("/api/v1/namespaces/ns/configmaps")
            .expect("offered under its URL");
        assert!(views.get("/api/v1/configmaps").is_none());
        let mut changes = view.changes();
        assert!(!view.listed(), "no list yet: a missing object may exist");
        list(&informer, &mut writer, vec![map("a", "1")]);
        assert!(view.listed());
        let a = view
            .get(Some("ns"), "a")
            .expect("in the store")
            .expect("seen as a DynamicObject");
        assert_eq!(a.metadata.name.as_deref(), Some("a"));
        let types = a.types.clone().expect("types");
        assert_eq!(
            (types.api_version.as_str(), types.kind.as_str()),
            ("v1", "ConfigMap")
        );
        assert_eq!(a.data.pointer("/data/v"), Some(&Value::from("1")));
        assert!(a.data.get("metadata").is_none() && a.data.get("kind").is_none());
        assert!(view.get(Some("ns"), "b").is_none());
        assert!(view.contains(Some("ns"), "a") && !view.contains(Some("ns"), "b"));
        assert!(view.get(Some("other"), "a").is_none());
        feed(&informer, &mut writer, watcher::Event::Apply(map("a", "2")));
        let mut seen = Vec::new();
        while let Some(Some(object)) = changes.next().now_or_never() {
            seen.push(object.data.pointer("/data/v").cloned());
        }
        assert_eq!(seen, [Some(Value::from("1")), Some(Value::from("2"))]);
    }

    #[tokio::test]
    async fn a_filtered_watch_is_not_offered() {
        let client = unreachable_client();
        let informers = Informers::default();
        let api = || Api::<ConfigMap>::namespaced(client.clone(), "ns");
        let views = informers.dynamic_views();
        views.offer(&informers.informer(api(), watcher::Config::default().labels("x=y")));
        assert!(views.get("/api/v1/namespaces/ns/configmaps").is_none());
        views.offer(&informers.informer(api(), watcher::Config::default()));
        assert!(views.get("/api/v1/namespaces/ns/configmaps").is_some());
    }
}
