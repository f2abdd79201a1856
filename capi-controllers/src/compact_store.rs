//! A cache of objects whose kind is known only at run time, each kept as its JSON text.
//!
//! A [`DynamicObject`] holds its body as a `serde_json::Value` tree: every key and string its own
//! allocation, every map a tree of nodes — several times the object's JSON size. A manager caches
//! every infrastructure machine and bootstrap config that way, one or two per Machine, so at
//! thousands of machines most of its memory would be those trees. This store keeps the text
//! instead and parses an object when it is read (a few microseconds for the kilobyte or two a
//! referenced object is; reads are a handful per reconcile).
//!
//! It takes the events of a watch as kube's reflector store does: a (re-)list is staged and
//! replaces the contents at its end, so a reader never sees half a list.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::api::DynamicObject;
use kube::runtime::watcher;

/// Namespace (empty for a cluster-scoped object) and name.
type Key = (String, String);

/// One cached object: its JSON text, or the object itself in the (unexpected) case that it could
/// not be written as text — never dropped.
#[derive(Clone)]
enum Kept {
    Text(Arc<str>),
    Object(Arc<DynamicObject>),
}

#[derive(Default)]
struct State {
    objects: HashMap<Key, Kept>,
    /// A list under way: what replaces `objects` at its end.
    staged: Option<HashMap<Key, Kept>>,
}

/// What a read found in a [`CompactStore`].
#[derive(Debug)]
pub(crate) enum Read {
    /// The object.
    Found(Arc<DynamicObject>),
    /// No such object in the cache.
    Absent,
    /// The cached text did not parse back (it was written from a parsed object, so this is not
    /// expected): read the object from the API server instead.
    Unreadable(serde_json::Error),
}

/// See the module documentation.
#[derive(Default)]
pub(crate) struct CompactStore {
    state: RwLock<State>,
}

fn key_of(object: &DynamicObject) -> Key {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

fn keep(object: &DynamicObject) -> Kept {
    match serde_json::to_string(object) {
        Ok(text) => Kept::Text(text.into()),
        Err(_) => Kept::Object(Arc::new(object.clone())),
    }
}

impl CompactStore {
    /// Takes one event of the kind's watch.
    pub(crate) fn apply(&self, event: &watcher::Event<DynamicObject>) {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(object) => {
                state.objects.insert(key_of(object), keep(object));
            }
            watcher::Event::Delete(object) => {
                state.objects.remove(&key_of(object));
            }
            watcher::Event::Init => state.staged = Some(HashMap::new()),
            watcher::Event::InitApply(object) => {
                state
                    .staged
                    .get_or_insert_with(HashMap::new)
                    .insert(key_of(object), keep(object));
            }
            watcher::Event::InitDone => {
                if let Some(listed) = state.staged.take() {
                    state.objects = listed;
                }
            }
        }
    }

    /// The object named `name` in `namespace` (empty for a cluster-scoped kind).
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Read {
        let kept = {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            state
                .objects
                .get(&(namespace.to_string(), name.to_string()))
                .cloned()
        };
        match kept {
            None => Read::Absent,
            Some(Kept::Object(object)) => Read::Found(object),
            Some(Kept::Text(text)) => match serde_json::from_str(&text) {
                Ok(object) => Read::Found(Arc::new(object)),
                Err(error) => Read::Unreadable(error),
            },
        }
    }

    /// Whether the store holds the object named `name` in `namespace` (nothing is parsed).
    pub(crate) fn contains(&self, namespace: &str, name: &str) -> bool {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .objects
            .contains_key(&(namespace.to_string(), name.to_string()))
    }

    /// How many objects the store holds (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .objects
            .len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(name: &str, ready: bool) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.example.com/v1beta2",
            "kind": "ExampleMachine",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "labels": {"cluster.x-k8s.io/cluster-name": "c"},
                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                    "name": name, "uid": "u-1", "controller": true}],
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "finalizers": ["f"]
            },
            "spec": {"providerID": format!("example:///{name}"), "list": [1, 2.5, null]},
            "status": {"initialization": {"provisioned": ready}}
        }))
        .unwrap()
    }

    fn found(store: &CompactStore, name: &str) -> Option<Arc<DynamicObject>> {
        match store.get("ns", name) {
            Read::Found(object) => Some(object),
            Read::Absent => None,
            Read::Unreadable(error) => panic!("unreadable: {error}"),
        }
    }

    #[test]
    fn an_object_reads_back_as_it_was_stored() {
        let store = CompactStore::default();
        let stored = object("m-1", true);
        store.apply(&watcher::Event::Apply(stored.clone()));
        let read = found(&store, "m-1").unwrap();
        assert_eq!(
            serde_json::to_value(read.as_ref()).unwrap(),
            serde_json::to_value(&stored).unwrap()
        );
        assert!(read.metadata.deletion_timestamp.is_some());
        assert!(found(&store, "m-2").is_none());
        assert!(matches!(store.get("other", "m-1"), Read::Absent));
    }

    #[test]
    fn changes_replace_and_deletions_remove() {
        let store = CompactStore::default();
        store.apply(&watcher::Event::Apply(object("m-1", false)));
        store.apply(&watcher::Event::Apply(object("m-1", true)));
        assert_eq!(
            found(&store, "m-1").unwrap().data["status"]["initialization"]["provisioned"],
            json!(true)
        );
        store.apply(&watcher::Event::Delete(object("m-1", true)));
        assert!(found(&store, "m-1").is_none());
        assert_eq!(store.len(), 0);
    }

    #[test]
    fn a_relist_replaces_the_contents_only_at_its_end() {
        let store = CompactStore::default();
        store.apply(&watcher::Event::Apply(object("old", true)));
        store.apply(&watcher::Event::Init);
        store.apply(&watcher::Event::InitApply(object("new", true)));
        assert!(
            found(&store, "old").is_some(),
            "the old contents until the list is in"
        );
        assert!(found(&store, "new").is_none());
        store.apply(&watcher::Event::InitDone);
        assert!(
            found(&store, "old").is_none(),
            "gone while the watch was down"
        );
        assert!(found(&store, "new").is_some());
    }
}
