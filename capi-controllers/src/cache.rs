//! The caches the core controllers count from, and how a change of one object reaches the
//! controllers of the objects that depend on it: a store that is only read once its first list
//! is in ([`synced`]), the Cluster watch filtered to what a cluster's objects read
//! ([`cluster_cache`]), the fan-out from a Cluster to its objects ([`of_cluster`]), and the
//! caches kept by a task of their own — referenced kinds, workload clusters' nodes — that report
//! each change on a channel ([`spawn_cache`], [`receiver_stream`]).

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use capi_core::api::Cluster;
use capi_runtime::cache::informer::Informer;
use futures::{Stream, stream};
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

/// The `Cluster` named `name` in `namespace`: from the cache, else from the API server (the cache
/// may not have seen it yet).
pub(crate) async fn find_cluster(
    store: &Store<Cluster>,
    client: &kube::Client,
    name: &str,
    namespace: &str,
) -> Result<Option<Arc<Cluster>>, kube::Error> {
    if let Some(found) = store.get(&ObjectRef::new(name).within(namespace)) {
        return Ok(Some(found));
    }
    let api: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(name).await?.map(Arc::new))
}

/// The phase every controller of a cluster's objects starts with: the `Cluster` named `name`
/// in `namespace` from the cache in `slot` (else read fresh); while there is none (the cache not
/// set yet, or no such Cluster), the pass ends and looks again after `poll`.
pub(crate) async fn cluster_or_wait(
    slot: &std::sync::OnceLock<Store<Cluster>>,
    client: &kube::Client,
    name: &str,
    namespace: &str,
    poll: std::time::Duration,
) -> Result<std::ops::ControlFlow<capi_runtime::plan::Next, Arc<Cluster>>, kube::Error> {
    use std::ops::ControlFlow::{Break, Continue};
    let cluster = match slot.get() {
        Some(store) => find_cluster(store, client, name, namespace).await?,
        None => None,
    };
    Ok(match cluster {
        Some(cluster) => Continue(cluster),
        None => Break(capi_runtime::plan::Next::Requeue(poll)),
    })
}

/// The store of the watch in `slot` once it holds everything the API server had at its first list
/// — never a partial view. A controller that counted machines in a cache still filling after a
/// restart would see too few and create more than the user asked for; so every decision that
/// counts from a cache asks here first and requeues on `None` (which only happens after a restart
/// or at start-up). It never waits: a worker is not held while the first list is under way. (It
/// asks the informer, not the store's `wait_until_ready`, whose poll would take the wake-up of
/// whoever awaits the store: see `capi_runtime::cache::informer`.)
pub(crate) fn synced<K>(slot: &std::sync::OnceLock<Informer<K>>) -> Option<Store<K>>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    let informer = slot.get()?;
    informer.listed().then(|| informer.store())
}

/// A manager's shared watch ([`Informer`]: one per kind for every controller, managed fields
/// dropped; its store, and whether its first list is in), and this controller's stream of its
/// changes (hand it to `Controller::watches_stream`).
pub(crate) fn cache<K>(
    informer: Informer<K>,
) -> (
    Informer<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    let changes = informer.changes();
    (informer, changes)
}

/// [`cache`] for Clusters: the store sees every change, the stream passes on only those the
/// cluster's objects read ([`capi_runtime::cache::predicate::cluster_as_its_objects_see_it`]).
pub(crate) fn cluster_cache(
    informer: Informer<Cluster>,
) -> (
    Store<Cluster>,
    impl Stream<Item = Result<Cluster, watcher::Error>> + Send + 'static,
) {
    let (informer, changes) = cache(informer);
    let relevant = capi_runtime::cache::predicate::changed(
        changes,
        capi_runtime::cache::predicate::cluster_as_its_objects_see_it,
    );
    (informer.store(), relevant)
}

/// Maps a changed Cluster to the objects of `store` that belong to it (same namespace,
/// `cluster_name` naming it).
pub(crate) fn of_cluster<K>(
    store: Store<K>,
    cluster_name: fn(&K) -> &str,
) -> impl Fn(Cluster) -> Vec<ObjectRef<K>> + Send + Sync + 'static
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Send + Sync + 'static,
{
    move |cluster| {
        let name = cluster.name_any();
        let namespace = cluster.namespace();
        store
            .state()
            .into_iter()
            .filter(|o| o.namespace() == namespace && cluster_name(o) == name)
            .map(|o| ObjectRef::from_obj(o.as_ref()))
            .collect()
    }
}

/// Hands one watch `event` to `apply`, then its objects to `on_change` — those of a (re-)list,
/// held in `listed`, only once `apply` has had its end. Says whether the event ended a list.
fn relay<K>(
    event: watcher::Event<K>,
    listed: &mut Vec<K>,
    apply: &mut impl FnMut(&watcher::Event<K>),
    on_change: &impl Fn(K),
) -> bool {
    apply(&event);
    match event {
        watcher::Event::Apply(object) | watcher::Event::Delete(object) => on_change(object),
        watcher::Event::Init => listed.clear(),
        watcher::Event::InitApply(object) => listed.push(object),
        watcher::Event::InitDone => {
            for object in listed.drain(..) {
                on_change(object);
            }
            return true;
        }
    }
    false
}

/// Takes a receiver out of its slot (once; later calls get none).
pub(crate) fn take<T>(
    slot: &Mutex<Option<mpsc::UnboundedReceiver<T>>>,
) -> Option<mpsc::UnboundedReceiver<T>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// A receiver as a stream; an absent one never yields.
pub(crate) fn receiver_stream<T: Send + 'static>(
    receiver: Option<mpsc::UnboundedReceiver<T>>,
) -> impl Stream<Item = T> + Send + 'static {
    use futures::StreamExt;
    match receiver {
        Some(receiver) => stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|item| (item, receiver))
        })
        .left_stream(),
        None => stream::pending().right_stream(),
    }
}

/// Keeps a cache filled from a watch of `api` on a task of its own: each object is cut down by
/// `slim` to what the controllers read, then each watch event is handed to `apply` (which keeps
/// the cache: a kube reflector `Writer`, an index beside it — a first list is staged and swapped in
/// at its end, as the events say) and each object that changed to `on_change` — the objects of a
/// (re-)list only at its end, once `apply` has the whole list (else a controller woken by one
/// would read the cache before it holds it, and wait for the next change). Returns the flag
/// that turns true once the first list is in (a cache that is not yet may be missing objects;
/// read from the API server until then) and the task (abort it to stop watching). A failed watch
/// is retried with [`WatchBackoff`](capi_runtime::retry::WatchBackoff), so the cache never stops
/// by itself.
pub(crate) fn spawn_cache<K>(
    api: Api<K>,
    slim: fn(&mut K),
    mut apply: impl FnMut(&watcher::Event<K>) + Send + 'static,
    on_change: impl Fn(K) + Send + Sync + 'static,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
{
    use futures::StreamExt;
    let synced = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&synced);
    let task = tokio::spawn(async move {
        let mut listed = Vec::new();
        watcher(api, watcher::Config::default())
            .backoff(capi_runtime::retry::WatchBackoff::default())
            .modify(slim)
            .for_each(|event| {
                if let Ok(event) = event
                    && relay(event, &mut listed, &mut apply, &on_change)
                {
                    flag.store(true, Ordering::Release);
                }
                std::future::ready(())
            })
            .await;
    });
    (synced, task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lists_objects_are_reported_only_once_the_cache_has_the_whole_list() {
        let applied = Arc::new(Mutex::new(Vec::<String>::new()));
        let reported = Arc::new(Mutex::new(Vec::<String>::new()));
        let mut apply = {
            let applied = Arc::clone(&applied);
            move |event: &watcher::Event<String>| {
                let name = match event {
                    watcher::Event::Init => "init".to_string(),
                    watcher::Event::InitApply(o) => format!("list {o}"),
                    watcher::Event::InitDone => "done".to_string(),
                    watcher::Event::Apply(o) => format!("apply {o}"),
                    watcher::Event::Delete(o) => format!("delete {o}"),
                };
                applied.lock().unwrap().push(name);
            }
        };
        let on_change = {
            let reported = Arc::clone(&reported);
            let applied = Arc::clone(&applied);
            move |object: String| {
                // What the cache had had when the change was reported.
                let seen = applied.lock().unwrap().last().cloned().unwrap_or_default();
                reported
                    .lock()
                    .unwrap()
                    .push(format!("{object} after {seen}"));
            }
        };
        let mut listed = Vec::new();
        for event in [
            watcher::Event::Apply("a".to_string()),
            watcher::Event::Init,
            watcher::Event::InitApply("b".to_string()),
            watcher::Event::InitApply("c".to_string()),
        ] {
            assert!(!relay(event, &mut listed, &mut apply, &on_change));
        }
        assert_eq!(*reported.lock().unwrap(), ["a after apply a"]);
        assert!(relay(
            watcher::Event::InitDone,
            &mut listed,
            &mut apply,
            &on_change
        ));
        assert_eq!(
            *reported.lock().unwrap(),
            ["a after apply a", "b after done", "c after done"]
        );
        assert!(listed.is_empty());
    }
}
