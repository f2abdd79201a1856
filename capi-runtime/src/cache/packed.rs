//! Objects kept compressed in a controller's cache, decoded when reconciled.
//!
//! A controller's cache holds every object of its kind decoded: every string, label, annotation
//! and condition its own allocation, every map a tree of nodes. For a kind with one object per
//! machine (infrastructure machines, bootstrap configs) that is 3 KB or so per object, most of
//! what a manager of thousands of machines holds. Yet the loop looks at a cached object's fields
//! only when it reconciles it; between reconciles it needs its identity, whether a change is
//! worth a reconcile, and which cluster it belongs to.
//!
//! A [`Packed<K>`] keeps exactly that decoded — the identity in its [`ObjectMeta`] (name,
//! namespace, UID, resource version, generation, deletion timestamp; nothing else), the
//! [`reconcile_relevant`](crate::cache::predicate::reconcile_relevant) hash, the cluster-name label —
//! and the whole object (managed fields dropped, as every cache here drops them) as its JSON text
//! compressed with LZ4 against a dictionary: (the last 64 KiB of) the first object of `K` this
//! process packed, which objects of one kind resemble closely (an in-memory machine's 1.5 KB of
//! JSON packs into ≈ 0.2 KB). [`Packed::unpack`] gives the object back as `K` writes and reads
//! itself — the object as decoded from the API server, except where `K`'s own serialization is
//! coarser than what it accepts (k8s-openapi's `Time` writes whole seconds). Reading one costs a
//! decompression and a parse, a few microseconds for objects of this size — once per reconcile.
//!
//! [`Reconciler::packed_trigger`](crate::Reconciler::packed_trigger) gives a controller its
//! watch and store of packed objects; the infrastructure machine reconciler and the kubeadm
//! bootstrap controller run on it. [`PackedStore`] keeps objects of a kind known only at run time
//! the same way (the core controllers' caches of referenced infrastructure and bootstrap
//! objects).

use std::any::TypeId;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a packed object could not be packed or given back. None is expected for a kind whose
/// serialization round-trips (the text is written from a decoded object). Packing happens as the
/// watch decodes an event, so a `Write` failure fails that event (or list) of the kind, as an
/// object that does not decode does; a failure to give an object back fails its reconcile, which
/// backs off and is tried again, with the same result until the object changes. The messages
/// name the object and where serde stopped, never a field's value (the object may hold secrets).
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// The object could not be written as JSON.
    #[error("{kind} {name}: could not be written as JSON for the cache ({what})")]
    Write {
        /// The object's kind.
        kind: String,
        /// Its namespace/name.
        name: String,
        /// What serde reported, without the values it quotes.
        what: String,
    },
    /// The compressed text did not decompress.
    #[error("{kind} {name}: its cached copy did not decompress: {source}")]
    Decompress {
        /// The object's kind.
        kind: String,
        /// Its namespace/name.
        name: String,
        /// What LZ4 reported.
        #[source]
        source: lz4_flex::block::DecompressError,
    },
    /// The cached text did not decode as the kind.
    #[error("{kind} {name}: its cached copy did not decode ({what})")]
    Decode {
        /// The object's kind.
        kind: String,
        /// Its namespace/name.
        name: String,
        /// What serde reported, without the values it quotes.
        what: String,
    },
}

impl PackError {
    /// A [`PackError::Decode`] of the object `kind` `namespace/name` from what serde reported,
    /// without the values serde's message may quote.
    pub fn decode(kind: &str, namespace: &str, name: &str, error: &serde_json::Error) -> Self {
        Self::Decode {
            kind: kind.to_string(),
            name: format!("{namespace}/{name}"),
            what: without_values(error),
        }
    }
}

/// A serde error without its message, which may quote a value of the object: its category and
/// where it stopped.
fn without_values(error: &serde_json::Error) -> String {
    format!(
        "a {:?} error at line {} column {}",
        error.classify(),
        error.line(),
        error.column()
    )
    .to_lowercase()
}

/// One object of `K`, compressed; see the module documentation. Its [`Resource::meta`] holds the
/// object's identity only (name, namespace, UID, resource version, generation, deletion
/// timestamp): read anything else from [`unpack`](Self::unpack).
pub struct Packed<K> {
    meta: ObjectMeta,
    relevance: Option<u64>,
    cluster_name: Option<Box<str>>,
    body: Compressed,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Packed<K> {
    fn clone(&self) -> Self {
        Self {
            meta: self.meta.clone(),
            relevance: self.relevance,
            cluster_name: self.cluster_name.clone(),
            body: self.body.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: Resource<DynamicType = ()>> Debug for Packed<K> {
    // Identity and size only: the body may hold what must not reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("kind", &K::kind(&()))
            .field("namespace", &self.meta.namespace)
            .field("name", &self.meta.name)
            .field("resource_version", &self.meta.resource_version)
            .field("packed_bytes", &self.body.body.len())
            .finish_non_exhaustive()
    }
}

/// Which kind a dictionary serves: a Rust type, or a kind known only at run time (its
/// `apiVersion` and `kind`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum DictionaryKey {
    Type(TypeId),
    Kind(String, String),
}

/// Each kind's dictionary: the first object of the kind packed in this process — its last
/// [`DICTIONARY_BYTES`], all LZ4 can refer back to. Kept for the process's life (one object's text
/// per kind, in memory only, like the cache's objects); every packed object holds the one it was
/// packed against, so which object became the dictionary never matters for correctness.
static DICTIONARIES: LazyLock<Mutex<HashMap<DictionaryKey, Arc<[u8]>>>> =
    LazyLock::new(Mutex::default);

/// LZ4's window: the most of a dictionary a match can reach.
const DICTIONARY_BYTES: usize = 64 * 1024;

fn dictionary_for(key: DictionaryKey, text: &[u8]) -> Arc<[u8]> {
    let mut dictionaries = DICTIONARIES.lock().unwrap_or_else(|e| e.into_inner());
    Arc::clone(
        dictionaries
            .entry(key)
            .or_insert_with(|| Arc::from(&text[text.len().saturating_sub(DICTIONARY_BYTES)..])),
    )
}

/// An object's JSON text, LZ4-compressed against its kind's dictionary (length prepended): the
/// one compact representation of both [`Packed`] and [`PackedStore`].
#[derive(Clone)]
struct Compressed {
    body: Box<[u8]>,
    dictionary: Arc<[u8]>,
}

impl Compressed {
    fn new(key: DictionaryKey, text: &[u8]) -> Self {
        let dictionary = dictionary_for(key, text);
        let body = lz4_flex::block::compress_prepend_size_with_dict(text, &dictionary);
        Self {
            body: body.into_boxed_slice(),
            dictionary,
        }
    }

    fn text(&self) -> Result<Vec<u8>, lz4_flex::block::DecompressError> {
        lz4_flex::block::decompress_size_prepended_with_dict(&self.body, &self.dictionary)
    }
}

fn name_of(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

impl<K> Packed<K>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + 'static,
{
    /// Packs `object`, its managed fields dropped.
    pub fn pack(mut object: K) -> Result<Self, PackError> {
        let meta = object.meta_mut();
        meta.managed_fields = None;
        let text = serde_json::to_vec(&object).map_err(|error| PackError::Write {
            kind: K::kind(&()).into_owned(),
            name: name_of(object.meta()),
            what: without_values(&error),
        })?;
        let relevance = crate::cache::predicate::reconcile_relevant(&object);
        let meta = object.meta_mut();
        let cluster_name = capi_core::labels::cluster_name(meta).map(Box::from);
        let body = Compressed::new(DictionaryKey::Type(TypeId::of::<K>()), &text);
        Ok(Self {
            meta: ObjectMeta {
                name: meta.name.take(),
                namespace: meta.namespace.take(),
                uid: meta.uid.take(),
                resource_version: meta.resource_version.take(),
                generation: meta.generation,
                deletion_timestamp: meta.deletion_timestamp.take(),
                ..ObjectMeta::default()
            },
            relevance,
            cluster_name,
            body,
            kind: PhantomData,
        })
    }

    /// The object, decoded from its packed text: what `K` wrote of it when it was packed (managed
    /// fields dropped; see the module documentation).
    pub fn unpack(&self) -> Result<K, PackError> {
        serde_json::from_slice(&self.text()?).map_err(|error| PackError::Decode {
            kind: K::kind(&()).into_owned(),
            name: name_of(&self.meta),
            what: without_values(&error),
        })
    }

    fn text(&self) -> Result<Vec<u8>, PackError> {
        self.body.text().map_err(|source| PackError::Decompress {
            kind: K::kind(&()).into_owned(),
            name: name_of(&self.meta),
            source,
        })
    }
}

impl<K> Packed<K> {
    /// The object's [`reconcile_relevant`](crate::cache::predicate::reconcile_relevant) hash, taken when
    /// it was packed: the trigger's predicate for packed objects.
    pub fn relevance(&self) -> Option<u64> {
        self.relevance
    }

    /// The object's `cluster.x-k8s.io/cluster-name` label, if it has one.
    pub fn cluster_name(&self) -> Option<&str> {
        self.cluster_name.as_deref()
    }

    /// How many bytes the packed text takes (without the fixed part of the struct).
    pub fn packed_len(&self) -> usize {
        self.body.body.len()
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Packed<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn url_path(dt: &(), namespace: Option<&str>) -> String {
        K::url_path(dt, namespace)
    }

    fn metadata_api() -> bool {
        K::metadata_api()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// Decodes `K` as sent by the API server and packs it.
impl<'de, K> Deserialize<'de> for Packed<K>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + 'static,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let object = K::deserialize(deserializer)?;
        Self::pack(object).map_err(serde::de::Error::custom)
    }
}

/// Writes the whole object, as [`unpack`](Packed::unpack) gives it (so a packed store can be
/// offered to readers of run-time kinds, [`crate::cache::informer::DynamicViews`]).
impl<K> Serialize for Packed<K>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + 'static,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = self.text().map_err(serde::ser::Error::custom)?;
        let value: serde_json::Value =
            serde_json::from_slice(&text).map_err(serde::ser::Error::custom)?;
        value.serialize(serializer)
    }
}

/// Namespace (empty for a cluster-scoped object) and name.
type Key = (String, String);

/// One object of a [`PackedStore`]: compressed, or the object itself in the (unexpected) case
/// that it could not be written as text — never dropped.
#[derive(Clone)]
enum Kept {
    Text(Compressed),
    Object(Arc<DynamicObject>),
}

#[derive(Default)]
struct StoreState {
    objects: HashMap<Key, Kept>,
    /// A list under way: what replaces `objects` at its end.
    staged: Option<HashMap<Key, Kept>>,
}

/// What a read found in a [`PackedStore`].
#[derive(Debug)]
pub enum Read {
    /// The object.
    Found(Arc<DynamicObject>),
    /// No such object in the cache.
    Absent,
    /// The cached text did not come back as the object (it was written from a decoded object, so
    /// this is not expected): read the object from the API server instead.
    Unreadable(PackError),
}

/// The cache of one kind known only at run time (a [`DynamicObject`] kind: the infrastructure
/// and bootstrap objects a core controller references), each object kept as [`Packed`] keeps
/// one — its JSON compressed against the kind's dictionary — and decoded when it is read.
///
/// # Guarantees
///
/// - It takes the events of a watch as kube's reflector store does: a (re-)list is staged and
///   replaces the contents at its end, so a reader never sees half a list.
/// - A read gives back the object as it was written into the store, or says why it could not
///   ([`Read::Unreadable`], naming the object, never quoting its values).
#[derive(Default)]
pub struct PackedStore {
    state: RwLock<StoreState>,
}

impl Debug for PackedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("PackedStore")
            .field("objects", &state.objects.len())
            .finish_non_exhaustive()
    }
}

fn key_of(object: &DynamicObject) -> Key {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

fn keep(object: &DynamicObject) -> Kept {
    let kind = object.types.as_ref().map_or_else(
        || DictionaryKey::Kind(String::new(), String::new()),
        |types| DictionaryKey::Kind(types.api_version.clone(), types.kind.clone()),
    );
    // Watches here drop managed fields already; a copy is made only when one did not.
    let stripped;
    let object = if object.metadata.managed_fields.is_some() {
        let mut copy = object.clone();
        copy.metadata.managed_fields = None;
        stripped = copy;
        &stripped
    } else {
        object
    };
    match serde_json::to_vec(object) {
        Ok(text) => Kept::Text(Compressed::new(kind, &text)),
        Err(_) => Kept::Object(Arc::new(object.clone())),
    }
}

impl PackedStore {
    /// Takes one event of the kind's watch.
    pub fn apply(&self, event: &watcher::Event<DynamicObject>) {
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
    pub fn get(&self, namespace: &str, name: &str) -> Read {
        let kept = {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            state
                .objects
                .get(&(namespace.to_string(), name.to_string()))
                .cloned()
        };
        let text = match kept {
            None => return Read::Absent,
            Some(Kept::Object(object)) => return Read::Found(object),
            Some(Kept::Text(compressed)) => compressed.text(),
        };
        let named = format!("{namespace}/{name}");
        let text = match text {
            Ok(text) => text,
            Err(source) => {
                return Read::Unreadable(PackError::Decompress {
                    kind: "object".to_string(),
                    name: named,
                    source,
                });
            }
        };
        match serde_json::from_slice::<DynamicObject>(&text) {
            Ok(object) => Read::Found(Arc::new(object)),
            Err(error) => Read::Unreadable(PackError::decode("object", namespace, name, &error)),
        }
    }

    /// Whether the store holds the object named `name` in `namespace` (nothing is decoded).
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .objects
            .contains_key(&(namespace.to_string(), name.to_string()))
    }

    /// How many objects the store holds.
    pub fn len(&self) -> usize {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .objects
            .len()
    }

    /// Whether the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_core::api::Machine;

    fn machine(name: &str, cluster: &str) -> Machine {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Machine",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": format!("uid-{name}"),
                "resourceVersion": "42",
                "generation": 3,
                "labels": {"cluster.x-k8s.io/cluster-name": cluster, "app": "web"},
                "annotations": {"note": "kept"},
                "finalizers": ["machine.cluster.x-k8s.io"],
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {
                "clusterName": cluster,
                "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                "infrastructureRef": {"apiGroup": "infrastructure.example.com", "kind": "ToyMachine", "name": name},
                "providerID": format!("toy:///{name}"),
            },
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-11-27T10:00:00Z"}
            ]},
        }))
        .unwrap()
    }

    #[test]
    fn unpack_gives_back_every_field_but_managed_fields() {
        let original = machine("m-1", "c");
        let packed = Packed::pack(original.clone()).unwrap();
        let mut expected = original;
        expected.metadata.managed_fields = None;
        assert_eq!(
            serde_json::to_value(packed.unpack().unwrap()).unwrap(),
            serde_json::to_value(&expected).unwrap()
        );
        // Serialized, it is the whole object too.
        assert_eq!(
            serde_json::to_value(&packed).unwrap(),
            serde_json::to_value(&expected).unwrap()
        );
    }

    #[test]
    fn the_decoded_part_is_identity_relevance_and_cluster() {
        let original = machine("m-2", "blue");
        let packed = Packed::pack(original.clone()).unwrap();
        let meta = packed.meta();
        assert_eq!(meta.name.as_deref(), Some("m-2"));
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
        assert_eq!(meta.uid.as_deref(), Some("uid-m-2"));
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
        assert_eq!(meta.generation, Some(3));
        assert_eq!(meta.labels, None, "labels live in the packed text only");
        assert_eq!(packed.cluster_name(), Some("blue"));
        assert_eq!(
            packed.relevance(),
            crate::cache::predicate::reconcile_relevant(&original)
        );
    }

    #[test]
    fn objects_of_one_kind_pack_small_against_their_kinds_dictionary() {
        let first = Packed::pack(machine("first-machine", "c")).unwrap();
        let text = serde_json::to_vec(&machine("another-machine", "c")).unwrap();
        let other = Packed::pack(machine("another-machine", "c")).unwrap();
        assert!(first.packed_len() > 0);
        assert!(
            other.packed_len() * 3 < text.len(),
            "{} packed bytes for {} bytes of JSON",
            other.packed_len(),
            text.len()
        );
        assert_eq!(
            other.unpack().unwrap().metadata.name.as_deref(),
            Some("another-machine")
        );
    }

    #[test]
    fn a_packed_object_decodes_from_the_api_servers_json() {
        let text = serde_json::to_string(&machine("m-3", "c")).unwrap();
        let packed: Packed<Machine> = serde_json::from_str(&text).unwrap();
        assert_eq!(packed.unpack().unwrap().spec.cluster_name, "c");
        let broken = r#"{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Machine","metadata":{"name":"x"},"spec":{"clusterName":7}}"#;
        assert!(serde_json::from_str::<Packed<Machine>>(broken).is_err());
    }

    #[test]
    fn an_object_that_does_not_decode_is_named_without_its_values() {
        let mut packed = Packed::pack(machine("m-5", "c")).unwrap();
        let text = br#"{"metadata":{"name":"m-5"},"spec":"s3cr3t"}"#;
        packed.body.body =
            lz4_flex::block::compress_prepend_size_with_dict(text, &packed.body.dictionary).into();
        let error = packed.unpack().unwrap_err().to_string();
        assert!(error.contains("ns/m-5"), "{error}");
        assert!(!error.contains("s3cr3t"), "{error}");
    }

    #[test]
    fn a_damaged_body_is_an_error_not_a_panic() {
        let mut packed = Packed::pack(machine("m-4", "c")).unwrap();
        let mut body = packed.body.body.to_vec();
        body.truncate(body.len() / 2);
        packed.body.body = body.into_boxed_slice();
        let error = packed.unpack().unwrap_err();
        assert!(error.to_string().contains("ns/m-4"), "{error}");
    }
}

#[cfg(test)]
mod store_tests {
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

    fn found(store: &PackedStore, name: &str) -> Option<Arc<DynamicObject>> {
        match store.get("ns", name) {
            Read::Found(object) => Some(object),
            Read::Absent => None,
            Read::Unreadable(error) => panic!("unreadable: {error}"),
        }
    }

    #[test]
    fn an_object_reads_back_as_it_was_stored() {
        let store = PackedStore::default();
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
    fn objects_of_a_kind_are_kept_compressed() {
        let store = PackedStore::default();
        let stored = object("m-1", true);
        store.apply(&watcher::Event::Apply(stored.clone()));
        let state = store.state.read().unwrap();
        let Some(Kept::Text(compressed)) = state.objects.get(&("ns".into(), "m-1".into())) else {
            panic!("kept as text");
        };
        assert!(compressed.body.len() < serde_json::to_vec(&stored).unwrap().len());
    }

    #[test]
    fn changes_replace_and_deletions_remove() {
        let store = PackedStore::default();
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
        let store = PackedStore::default();
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
