//! Clients of workload clusters, reached through the `<cluster>-kubeconfig` Secret (key `value`),
//! one per cluster, cached and rebuilt when the Secret changes.
//!
//! Each cached cluster keeps a cache of its `Node`s, fed by one watch, so that finding a machine's
//! node by provider ID costs no request; every node change is reported on a channel (as the
//! cluster it belongs to and the node's provider ID) so that the machine controller looks again.
//! The Secret is read again at most every [`SECRET_RECHECK`], and at once after a failure.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;

/// How long a cached client is used before the kubeconfig Secret is checked for changes.
pub const SECRET_RECHECK: Duration = Duration::from_secs(10);

/// Why a workload cluster cannot be reached.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The kubeconfig Secret does not exist (yet).
    #[error("Secret {0:?} with the workload cluster's kubeconfig does not exist yet")]
    KubeconfigMissing(String),
    /// The Secret holds no usable kubeconfig.
    #[error("Secret {secret:?} does not hold a usable kubeconfig under key \"value\": {reason}")]
    KubeconfigInvalid {
        /// The Secret's name.
        secret: String,
        /// What is wrong (never the Secret's content).
        reason: String,
    },
    /// Reading the management cluster failed.
    #[error("reading the kubeconfig Secret failed: {0}")]
    Management(#[source] kube::Error),
}

/// A node changed in a workload cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeChange {
    /// The namespace of the `Cluster`.
    pub(crate) namespace: String,
    /// The `Cluster`'s name.
    pub(crate) cluster: String,
    /// The node's `spec.providerID`.
    pub(crate) provider_id: Option<String>,
}

/// One workload cluster: a client and its node cache.
#[derive(Clone)]
pub(crate) struct Workload {
    /// A client of the workload cluster.
    pub(crate) client: Client,
    nodes: Arc<Mutex<NodeCache>>,
    synced: Arc<AtomicBool>,
}

/// What the controllers read of a node: its name, UID, provider ID, conditions and upstream's
/// owner annotations — about 300 bytes where a decoded `Node` is 1.5 KB before any of its
/// images, labels, other annotations, managed
/// fields, capacity and heartbeats (a node cache holds one per machine). Anything else is read
/// from the API server.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CachedNode {
    /// `metadata.name`.
    pub(crate) name: Box<str>,
    /// `metadata.uid` (what a MachinePool's node references carry).
    pub(crate) uid: Option<Box<str>>,
    /// `spec.providerID`.
    pub(crate) provider_id: Option<Box<str>>,
    /// `status.conditions`, as reported.
    pub(crate) conditions: Box<[NodeReading]>,
    /// The owner upstream's annotations name, when the node carries all four of them.
    pub(crate) owner: Option<NodeOwner>,
}

/// Upstream's annotations on a node: its cluster, and the object that owns it.
pub(crate) const CLUSTER_NAME_ANNOTATION: &str = "cluster.x-k8s.io/cluster-name";
/// The namespace of the node's cluster.
pub(crate) const CLUSTER_NAMESPACE_ANNOTATION: &str = "cluster.x-k8s.io/cluster-namespace";
/// The kind of the object that owns the node (`MachinePool`, `MachineSet` …).
pub(crate) const OWNER_KIND_ANNOTATION: &str = "cluster.x-k8s.io/owner-kind";
/// Its name.
pub(crate) const OWNER_NAME_ANNOTATION: &str = "cluster.x-k8s.io/owner-name";
const OWNER_ANNOTATIONS: [&str; 4] = [
    CLUSTER_NAMESPACE_ANNOTATION,
    CLUSTER_NAME_ANNOTATION,
    OWNER_KIND_ANNOTATION,
    OWNER_NAME_ANNOTATION,
];

/// The owner a node's annotations name: cluster namespace, cluster, owner kind and owner name,
/// in one string (`<namespace>/<cluster>/<kind>/<name>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeOwner(Box<str>);

impl NodeOwner {
    /// The owner `kind` `name` in cluster `namespace/cluster`.
    pub(crate) fn new(namespace: &str, cluster: &str, kind: &str, name: &str) -> Self {
        Self(format!("{namespace}/{cluster}/{kind}/{name}").into())
    }

    fn of(annotations: &std::collections::BTreeMap<String, String>) -> Option<Self> {
        let [namespace, cluster, kind, name] =
            OWNER_ANNOTATIONS.map(|key| annotations.get(key).map(String::as_str));
        Some(Self::new(namespace?, cluster?, kind?, name?))
    }
}

/// One of a node's conditions as the controllers read it: type, status, since when, message —
/// no reason, no heartbeat (64 bytes, where a `NodeCondition` is 144).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NodeReading {
    /// `type`, e.g. `Ready`.
    pub(crate) type_: Box<str>,
    /// `True`, `False` or `Unknown`.
    pub(crate) status: Box<str>,
    /// `lastTransitionTime`, in seconds since the epoch.
    pub(crate) since: Option<i64>,
    /// `message`.
    pub(crate) message: Option<Box<str>>,
}

impl CachedNode {
    fn of(node: &Node) -> Option<Self> {
        let conditions = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|conditions| {
                conditions
                    .iter()
                    .map(|c| NodeReading {
                        type_: c.type_.as_str().into(),
                        status: c.status.as_str().into(),
                        since: c.last_transition_time.as_ref().map(|t| t.0.as_second()),
                        message: c.message.as_deref().map(Into::into),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(Self {
            name: node.metadata.name.as_deref()?.into(),
            uid: node.metadata.uid.as_deref().map(Into::into),
            provider_id: node
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .map(Into::into),
            conditions,
            owner: node.metadata.annotations.as_ref().and_then(NodeOwner::of),
        })
    }
}

/// A watched node cut down to what [`CachedNode`] and the change report read (name, UID,
/// owner annotations, provider ID, conditions) before anything holds it — a re-list's nodes are
/// held until its end.
fn slim_node(node: &mut Node) {
    let name = node.metadata.name.take();
    let uid = node.metadata.uid.take();
    let annotations = node.metadata.annotations.take().map(|mut all| {
        all.retain(|key, _| OWNER_ANNOTATIONS.contains(&key.as_str()));
        all
    });
    node.metadata = ObjectMeta {
        name,
        uid,
        annotations: annotations.filter(|kept| !kept.is_empty()),
        ..ObjectMeta::default()
    };
    let provider_id = node.spec.take().and_then(|s| s.provider_id);
    node.spec = Some(NodeSpec {
        provider_id,
        ..NodeSpec::default()
    });
    let conditions = node.status.take().and_then(|s| s.conditions);
    node.status = Some(NodeStatus {
        conditions,
        ..NodeStatus::default()
    });
}

/// The cached nodes of one cluster by name, and their names by provider ID (upstream's
/// `spec.providerID` cache index: a lookup costs one hash, not a scan of every node). Kept from the node watch's events: a
/// (re-)list is staged and swapped in at its end, so a reader never sees half a list.
#[derive(Debug, Default)]
struct NodeCache {
    live: Nodes,
    staged: Option<Nodes>,
}

/// Both maps share each node (the provider-ID map's value is the node itself, not its name: one
/// lookup, and no third copy of the name).
#[derive(Debug, Default)]
struct Nodes {
    by_name: HashMap<Box<str>, Arc<CachedNode>>,
    by_provider_id: HashMap<Box<str>, Arc<CachedNode>>,
}

impl Nodes {
    fn put(&mut self, node: CachedNode) {
        self.remove(&node.name);
        let node = Arc::new(node);
        if let Some(id) = &node.provider_id {
            self.by_provider_id.insert(id.clone(), Arc::clone(&node));
        }
        self.by_name.insert(node.name.clone(), node);
    }

    fn remove(&mut self, name: &str) {
        if let Some(old) = self.by_name.remove(name)
            && let Some(id) = &old.provider_id
            && self
                .by_provider_id
                .get(id)
                .is_some_and(|n| *n.name == *name)
        {
            self.by_provider_id.remove(id);
        }
    }
}

impl NodeCache {
    fn apply(&mut self, event: &kube::runtime::watcher::Event<Node>) {
        use kube::runtime::watcher::Event;
        match event {
            Event::Init => self.staged = Some(Nodes::default()),
            Event::InitApply(node) => {
                if let Some(cached) = CachedNode::of(node) {
                    self.staged.get_or_insert_with(Nodes::default).put(cached);
                }
            }
            Event::InitDone => {
                if let Some(staged) = self.staged.take() {
                    self.live = staged;
                }
            }
            Event::Apply(node) => {
                if let Some(cached) = CachedNode::of(node) {
                    self.live.put(cached);
                }
            }
            Event::Delete(node) => {
                if let Some(name) = &node.metadata.name {
                    self.live.remove(name);
                }
            }
        }
    }
}

fn lock_nodes(nodes: &Mutex<NodeCache>) -> std::sync::MutexGuard<'_, NodeCache> {
    nodes.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Workload {
    /// A workload cluster reached through `client` whose cache holds `nodes` (tests of what the
    /// controllers do with a cache in a given state).
    #[cfg(test)]
    pub(crate) fn cached(client: Client, nodes: &[Node]) -> Self {
        let mut cache = NodeCache::default();
        for node in nodes.iter().filter_map(CachedNode::of) {
            cache.live.put(node);
        }
        Self {
            client,
            nodes: Arc::new(Mutex::new(cache)),
            synced: Arc::new(AtomicBool::new(true)),
        }
    }

    /// The node with this provider ID, from the cache; `None` also while the cache fills
    /// (see [`Workload::synced`]).
    pub(crate) fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<CachedNode>> {
        let nodes = lock_nodes(&self.nodes);
        nodes.live.by_provider_id.get(provider_id).cloned()
    }

    /// The node of this name, from the cache.
    pub(crate) fn node(&self, name: &str) -> Option<Arc<CachedNode>> {
        lock_nodes(&self.nodes).live.by_name.get(name).cloned()
    }

    /// Whether the node cache holds the cluster's nodes (a node missing from it is missing).
    pub(crate) fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}

struct Entry {
    secret_version: String,
    checked: Instant,
    workload: Workload,
    task: tokio::task::JoinHandle<()>,
}

/// The workload clusters known to the controllers; see the module documentation.
pub(crate) struct WorkloadClusters {
    management: Client,
    entries: Mutex<HashMap<(String, String), Entry>>,
    /// Where node changes go: one channel per controller that follows nodes.
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<NodeChange>>>>,
}

impl Drop for WorkloadClusters {
    fn drop(&mut self) {
        for entry in self
            .entries
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            entry.task.abort();
        }
    }
}

impl WorkloadClusters {
    /// Workload clusters found through Secrets read with `management`; node changes arrive on the
    /// returned receiver (and on those of [`WorkloadClusters::subscribe`]).
    pub(crate) fn new(management: Client) -> (Self, mpsc::UnboundedReceiver<NodeChange>) {
        let clusters = Self {
            management,
            entries: Mutex::new(HashMap::new()),
            subscribers: Arc::default(),
        };
        let receiver = clusters.subscribe();
        (clusters, receiver)
    }

    /// A receiver of every node change from now on, for one more controller. Unbounded for the
    /// reason the reference caches' channel is (`references`): drained as changes come by the
    /// controller's scheduler, which keeps one entry per object. A dropped receiver is forgotten
    /// at the next change.
    pub(crate) fn subscribe(&self) -> mpsc::UnboundedReceiver<NodeChange> {
        let (changes, receiver) = mpsc::unbounded_channel();
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(changes);
        receiver
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The workload cluster of `cluster` in `namespace`.
    pub(crate) async fn get(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> Result<Workload, WorkloadError> {
        let key = (namespace.to_string(), cluster.to_string());
        let known_version = match self.lock().get(&key) {
            Some(entry) if entry.checked.elapsed() < SECRET_RECHECK => {
                return Ok(entry.workload.clone());
            }
            Some(entry) => Some(entry.secret_version.clone()),
            None => None,
        };
        let name = format!("{cluster}-kubeconfig");
        let secret = Api::<Secret>::namespaced(self.management.clone(), namespace)
            .get_opt(&name)
            .await
            .map_err(WorkloadError::Management)?;
        let Some(secret) = secret else {
            self.forget(namespace, cluster);
            return Err(WorkloadError::KubeconfigMissing(name));
        };
        let version = secret.resource_version().unwrap_or_default();
        if known_version.as_deref() == Some(version.as_str()) {
            let mut entries = self.lock();
            if let Some(entry) = entries.get_mut(&key) {
                entry.checked = Instant::now();
                return Ok(entry.workload.clone());
            }
        }
        let client = client_from_secret(&secret).await?;
        let workload = self.start(client, namespace, cluster);
        let previous = self.lock().insert(
            key,
            Entry {
                secret_version: version,
                checked: Instant::now(),
                workload: workload.0.clone(),
                task: workload.1,
            },
        );
        if let Some(previous) = previous {
            previous.task.abort();
        }
        Ok(workload.0)
    }

    /// Drops the cached client of a cluster (after it was deleted, or its Secret went).
    pub(crate) fn forget(&self, namespace: &str, cluster: &str) {
        if let Some(entry) = self
            .lock()
            .remove(&(namespace.to_string(), cluster.to_string()))
        {
            entry.task.abort();
        }
    }

    /// Marks the cached client of a cluster for a Secret check at its next use (after a request
    /// with it failed).
    pub(crate) fn recheck(&self, namespace: &str, cluster: &str) {
        if let Some(entry) = self
            .lock()
            .get_mut(&(namespace.to_string(), cluster.to_string()))
        {
            entry.checked = Instant::now() - SECRET_RECHECK;
        }
    }

    fn start(
        &self,
        client: Client,
        namespace: &str,
        cluster: &str,
    ) -> (Workload, tokio::task::JoinHandle<()>) {
        let subscribers = Arc::clone(&self.subscribers);
        let (namespace, cluster) = (namespace.to_string(), cluster.to_string());
        let api: Api<Node> = Api::all(client.clone());
        let nodes = Arc::new(Mutex::new(NodeCache::default()));
        let cache = Arc::clone(&nodes);
        let (synced, task) = crate::cache::spawn_cache(
            api,
            slim_node,
            move |event| lock_nodes(&cache).apply(event),
            move |node: Node| {
                let change = NodeChange {
                    namespace: namespace.clone(),
                    cluster: cluster.clone(),
                    provider_id: node.spec.and_then(|s| s.provider_id),
                };
                subscribers
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain(|subscriber| subscriber.send(change.clone()).is_ok());
            },
        );
        let workload = Workload {
            client,
            nodes,
            synced,
        };
        (workload, task)
    }
}

/// A client of the workload cluster whose kubeconfig `secret` holds (key `value`), with kube's
/// own retries off (the controllers retry on their own terms). The Secret is in the tenant's
/// namespace: only what a control plane writes in a kubeconfig is followed
/// ([`capi_runtime::kubeconfig::workload_config`]). Errors name the Secret and what is wrong with
/// it (a refused field by its position), never its content.
pub async fn client_from_secret(secret: &Secret) -> Result<Client, WorkloadError> {
    let invalid = |reason: String| WorkloadError::KubeconfigInvalid {
        secret: secret.name_any(),
        reason,
    };
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .ok_or_else(|| invalid("the key is missing".into()))?;
    let text =
        std::str::from_utf8(&bytes.0).map_err(|_| invalid("the value is not UTF-8".into()))?;
    // Only what a control plane writes is followed (no command run, no file read, no proxy);
    // errors name fields, never values.
    let mut config = capi_runtime::kubeconfig::workload_config(text)
        .await
        .map_err(|e| invalid(e.to_string()))?;
    // A 429 from the workload cluster is an answer (an eviction a PodDisruptionBudget refuses),
    // not something to wait out inside one request: the controllers retry on their own terms.
    config.default_retry = false;
    Client::try_from(config).map_err(|_| invalid("no client can be built from it".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, provider_id: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"providerID": provider_id},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn nodes_are_found_by_provider_id_through_the_index_and_forgotten_when_gone() {
        use kube::runtime::watcher::Event;
        let nodes = Arc::new(Mutex::new(NodeCache::default()));
        let workload = Workload {
            client: Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap(),
            nodes: Arc::clone(&nodes),
            synced: Arc::new(AtomicBool::new(true)),
        };
        // As `spawn_cache` does.
        let change = |event: Event<Node>| lock_nodes(&nodes).apply(&event);
        // Nodes that exist when the cache starts come in its first list.
        change(Event::Init);
        change(Event::InitApply(node("n-1", "sim:///i-1")));
        assert!(
            workload.node_by_provider_id("sim:///i-1").is_none(),
            "not before the list is in"
        );
        change(Event::InitDone);
        assert!(workload.node_by_provider_id("sim:///i-1").is_some());
        change(Event::Apply(node("n-2", "sim:///i-2")));
        let found = workload.node_by_provider_id("sim:///i-2").unwrap();
        assert_eq!(&*found.name, "n-2");
        assert!(workload.node("n-2").is_some());
        assert!(workload.node_by_provider_id("sim:///i-3").is_none());
        // A node whose provider ID changed is not found under the old one.
        change(Event::Apply(node("n-1", "sim:///i-9")));
        assert!(workload.node_by_provider_id("sim:///i-1").is_none());
        assert!(workload.node_by_provider_id("sim:///i-9").is_some());
        change(Event::Delete(node("n-2", "sim:///i-2")));
        assert!(workload.node_by_provider_id("sim:///i-2").is_none());
        assert!(workload.node("n-2").is_none());
        // A re-list replaces the index as it replaces the nodes.
        change(Event::Init);
        change(Event::InitApply(node("n-3", "sim:///i-3")));
        change(Event::InitDone);
        assert!(workload.node_by_provider_id("sim:///i-9").is_none());
        assert!(workload.node("n-1").is_none());
        assert!(workload.node_by_provider_id("sim:///i-3").is_some());
        let cache = lock_nodes(&nodes);
        assert_eq!(cache.live.by_provider_id.len(), 1);
        assert_eq!(cache.live.by_name.len(), 1);
    }

    #[test]
    fn a_cached_node_keeps_what_the_controllers_read_and_nothing_else() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n-0", "uid": "u", "resourceVersion": "7",
                "labels": {"kubernetes.io/hostname": "n-0"},
                "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true",
                    "cluster.x-k8s.io/cluster-namespace": "ns", "cluster.x-k8s.io/cluster-name": "c",
                    "cluster.x-k8s.io/owner-kind": "MachinePool", "cluster.x-k8s.io/owner-name": "p"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"providerID": "inmemory:///i-1", "podCIDR": "10.0.0.0/24",
                     "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                    "message": "cni not ready", "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "lastHeartbeatTime": "2026-01-01T00:05:00Z"}],
                "images": [{"names": ["registry.k8s.io/kube-proxy:v1.34.0"], "sizeBytes": 30000000}],
                "nodeInfo": {"kubeletVersion": "v1.34.0", "architecture": "amd64",
                    "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                    "kubeProxyVersion": "", "machineID": "", "operatingSystem": "linux",
                    "osImage": "", "systemUUID": ""},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.4"}],
                "capacity": {"cpu": "2"}
            }
        }))
        .unwrap();
        let cached = CachedNode::of(&node).unwrap();
        let mut slimmed = node.clone();
        slim_node(&mut slimmed);
        assert_eq!(
            CachedNode::of(&slimmed).as_ref(),
            Some(&cached),
            "slimmed first, same"
        );
        assert!(slimmed.status.as_ref().unwrap().images.is_none());
        assert_eq!(
            slimmed.metadata.annotations.as_ref().map(|a| a.len()),
            Some(4),
            "only the owner's annotations are kept"
        );
        assert_eq!(
            cached.owner,
            Some(NodeOwner::new("ns", "c", "MachinePool", "p"))
        );
        assert_eq!(&*cached.name, "n-0");
        assert_eq!(cached.uid.as_deref(), Some("u"));
        assert_eq!(cached.provider_id.as_deref(), Some("inmemory:///i-1"));
        assert_eq!(
            *cached.conditions,
            [NodeReading {
                type_: "Ready".into(),
                status: "False".into(),
                since: Some(1_767_225_600),
                message: Some("cni not ready".into()),
            }]
        );
        let nameless = Node::default();
        assert!(
            CachedNode::of(&nameless).is_none(),
            "a node without a name is not cached"
        );
    }
}
