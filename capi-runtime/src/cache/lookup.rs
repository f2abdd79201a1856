//! Read-through caches: the objects a reconcile reads about (its owner `Machine`, its
//! `Cluster`) from a store its controller's own watch fills, and from the API server only what
//! the store has not seen yet — so that a reconcile reads nothing over the network in the common
//! case, as controller-runtime's cached client does.
//!
//! The store may lag the API server by a watch event. That is safe for what the reconcilers read
//! through it: every change of a cached object also reaches the controller through the same
//! watch and triggers a reconcile that reads the newer copy, and decisions that must not act on
//! a stale view (creating an instance) are guarded by the object's own finalizer, provider ID
//! and idempotency key, never by a cached owner.

use std::fmt::Debug;
use std::sync::Arc;

use futures::Stream;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

/// A store of `K` fed by a watch, with the API server behind it for what it does not hold.
#[derive(Clone)]
pub struct Cached<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    client: Client,
    /// The watch filling `store`, which says whether its first list is in, kept running while
    /// this cache lives (`None`: a store handed in, see [`Cached::new`]).
    informer: Option<crate::cache::informer::Informer<K>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Debug for Cached<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached")
            .field("kind", &K::kind(&()))
            .field("objects", &self.store.len())
            .finish()
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Cached<K> {
    /// A cache over `store`, filled by someone else (a test, a watch the caller waited for): it
    /// counts as [`listed`](Self::listed) from the start. Reads that miss it go to `client`.
    pub fn new(store: Store<K>, client: Client) -> Self {
        Self {
            store,
            client,
            informer: None,
        }
    }
}

impl<K> Cached<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    /// A cache over `informer`'s store that keeps its watch running while the cache lives, even
    /// when nothing else holds the informer (a reconciler run outside a manager); reads that miss
    /// it go to `client`.
    pub fn of(informer: crate::cache::informer::Informer<K>, client: Client) -> Self {
        Self {
            store: informer.store(),
            client,
            informer: Some(informer),
        }
    }

    /// Whether the store holds its watch's first complete list (before, a missing object may
    /// exist): what a reader that counts objects from the store alone asks first.
    pub fn listed(&self) -> bool {
        self.informer
            .as_ref()
            .is_none_or(crate::cache::informer::Informer::listed)
    }

    /// Completes once the store holds its watch's first complete list (see
    /// [`Informer::until_listed`](crate::cache::informer::Informer::until_listed): every reader
    /// waiting is woken; it waits as long as the list takes, so bound it with a timeout).
    pub async fn until_listed(&self) {
        if let Some(informer) = &self.informer {
            informer.until_listed().await;
        }
    }
}

/// A cache of `api`'s objects (managed fields dropped), and the stream of changes that fills it:
/// hand it to `Controller::watches_stream` (filtered as the controller needs). Reads that miss the
/// store go to `api`'s client. The watch is an [`Informer`](crate::cache::informer::Informer) of its own
/// (a manager's controllers share theirs through `Reconciler::cached`); it starts now, so this is
/// called within a Tokio runtime, and lasts while the cache or the stream does.
pub fn cached<K>(
    api: Api<K>,
) -> (
    Cached<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let client = api.clone().into_client();
    let informer =
        crate::cache::informer::Informers::default().informer(api, watcher::Config::default());
    of_informer(&informer, client)
}

/// The cache of `informer`'s store (reads that miss it go to `client`) and a new stream of its
/// changes.
pub(crate) fn of_informer<K>(
    informer: &crate::cache::informer::Informer<K>,
    client: Client,
) -> (
    Cached<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static + use<K>,
)
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    (Cached::of(informer.clone(), client), informer.changes())
}

impl<K> Cached<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    /// `namespace/name`: from the store, else (not seen yet, or gone) from the API server.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, kube::Error> {
        if let Some(found) = self.store.get(&ObjectRef::new(name).within(namespace)) {
            return Ok(Some(found));
        }
        Api::<K>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map(|found| found.map(Arc::new))
    }

    /// The store itself (what the watch has seen). Whether it holds the first list is
    /// [`listed`](Self::listed) to say, never the store's `wait_until_ready` (see
    /// [`crate::cache::informer`]).
    pub fn store(&self) -> &Store<K> {
        &self.store
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event;

    #[tokio::test]
    async fn a_stored_object_is_read_without_a_request_and_a_missing_one_is_asked_for() {
        // A client of an address where nothing listens: a read that reaches it fails.
        let config = kube::Config::new(
            "http://127.0.0.1:1"
                .parse()
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let client = Client::try_from(config).unwrap_or_else(|e| panic!("{e}"));
        let (store, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        let object: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        writer.apply_watcher_event(&Event::Apply(object));
        let cached = Cached::new(store, client);
        let found = cached
            .get("ns", "a")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            found.and_then(|o| o.metadata.uid.clone()).as_deref(),
            Some("u")
        );
        assert!(
            cached.get("ns", "b").await.is_err(),
            "an object the store does not hold is asked of the API server"
        );
    }
}
