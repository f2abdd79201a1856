//! Simulated kubelets: every running machine of a cloud — the simulated one, or any other through
//! [`Hosts`] — registers a `Node` (with its provider ID, addresses and a `Ready` condition) in a
//! workload API server, and the `Node` goes when the machine does — what the kubelet and the
//! cloud-controller-manager do in a real cluster.
//! A control-plane instance's kubelet also runs kubeadm's static pods (`kube-apiserver`,
//! `kube-controller-manager`, `kube-scheduler`, `etcd`) and mirrors them as running, ready pods in
//! `kube-system`, which go with the node.
//! Like a kubelet, it also finishes the deletion of pods on its nodes once they are terminating
//! (an evicted pod is gone as soon as the simulated kubelet sees it), so that node drains complete.
//!
//! Simulated clusters may share one workload API server; nodes are told apart by provider ID, and
//! labelled with their cluster so that each cluster's own endpoint ([`crate::endpoints`]) shows
//! its nodes and static pods only.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::actuator::provider_id;
use crate::cloud::{InstanceStatus, SimulatedCloud};

/// A running machine, as its kubelet registers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningHost {
    /// The node's name (and, on a control-plane machine, its etcd member's).
    pub name: String,
    /// `spec.providerID`, as the cloud-controller-manager would set it.
    pub provider_id: String,
    /// The node's `InternalIP`, where its kubelet endpoint listens.
    pub address: String,
    /// The `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
    /// It runs kubeadm's control plane (static pods, a stacked etcd member).
    pub control_plane: bool,
    /// The cluster it belongs to, `(namespace, name)`, when known: its node and static pods are
    /// labelled with it ([`crate::endpoints`]).
    pub cluster: Option<(String, String)>,
}

/// Where the machines a [`NodeRegistrar`] registers come from: the [`SimulatedCloud`], or a real
/// cloud whose machines boot nothing (a fake hypervisor), for a provider's end-to-end tests.
#[async_trait::async_trait]
pub trait Hosts: Send + Sync + 'static {
    /// The machines running now. An error skips the registrar's pass (it tries again on the next).
    async fn running(&self) -> Result<Vec<RunningHost>, String>;

    /// The `ClusterConfiguration` that `host`'s `kubeadm init` uploads, when its boot data runs
    /// `kubeadm init`.
    async fn init_cluster_configuration(&self, host: &RunningHost) -> Option<String>;
}

#[async_trait::async_trait]
impl Hosts for SimulatedCloud {
    async fn running(&self) -> Result<Vec<RunningHost>, String> {
        Ok(self
            .instances()
            .into_iter()
            .filter(|i| i.status == InstanceStatus::Active)
            .map(|i| RunningHost {
                provider_id: provider_id(&i.id),
                name: i.id,
                address: i.address,
                zone: i.zone,
                control_plane: i.control_plane,
                cluster: i.cluster.as_deref().and_then(|key| {
                    key.split_once('.')
                        .map(|(namespace, name)| (namespace.to_string(), name.to_string()))
                }),
            })
            .collect())
    }

    async fn init_cluster_configuration(&self, host: &RunningHost) -> Option<String> {
        SimulatedCloud::init_cluster_configuration(self, &host.name)
    }
}

/// Why a [`NodeRegistrar::sync`] pass did not finish.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The machines could not be listed.
    #[error("listing the running machines: {0}")]
    Hosts(String),
    /// The workload API server refused or could not be reached.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// The label on every simulated node.
pub const SIMULATED_NODE_LABEL: &str = "node.capi-rs.dev/simulated";

/// kubeadm's label (and taint) of control-plane nodes.
pub const CONTROL_PLANE_NODE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// Keeps the workload API server's nodes in step with a cloud's running machines.
pub struct NodeRegistrar {
    nodes: Api<Node>,
    hosts: Arc<dyn Hosts>,
    registered: BTreeSet<String>,
    /// The workload cluster's pods, from a watch started on the first pass that needs it: a
    /// pass reads them here instead of listing them (a pass every 200 ms was five requests a
    /// second to an idle workload API server).
    pods: Option<PodWatch>,
    #[cfg(feature = "real-etcd")]
    kubelets: Option<Kubelets>,
}

/// The kubelet endpoints of the registered nodes, and where their pods' ports listen.
#[cfg(feature = "real-etcd")]
struct Kubelets {
    targets: Arc<dyn crate::kubelet::PortForwardTargets>,
    running: std::collections::BTreeMap<String, crate::kubelet::Kubelet>,
}

/// A watch of every pod of the workload cluster and what it has seen; stopped when dropped.
struct PodWatch {
    store: kube::runtime::reflector::Store<Pod>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PodWatch {
    fn start(api: Api<Pod>) -> Self {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, reflector, watcher};
        let (store, writer) = reflector::store();
        let task = tokio::spawn(
            watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .for_each(|_| std::future::ready(())),
        );
        Self { store, task }
    }
}

impl std::fmt::Debug for NodeRegistrar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeRegistrar")
            .field("registered", &self.registered.len())
            .finish_non_exhaustive()
    }
}

impl NodeRegistrar {
    /// A registrar writing the nodes of `hosts`' running machines to the workload cluster of
    /// `client`.
    pub fn new(client: Client, hosts: Arc<dyn Hosts>) -> Self {
        Self {
            nodes: Api::all(client),
            hosts,
            registered: BTreeSet::new(),
            pods: None,
            #[cfg(feature = "real-etcd")]
            kubelets: None,
        }
    }

    /// Also runs each node's kubelet endpoint ([`crate::kubelet::Kubelet`], on the machine's
    /// address, which must then be one this machine can listen on: a loopback address, as
    /// [`crate::cloud::CloudConfig::loopback_addresses`] gives instances) and publishes its port in the node's
    /// `status.daemonEndpoints`, so that the workload API server forwards ports to the node's
    /// pods as `targets` resolves them.
    #[cfg(feature = "real-etcd")]
    pub fn with_kubelets(mut self, targets: Arc<dyn crate::kubelet::PortForwardTargets>) -> Self {
        self.kubelets = Some(Kubelets {
            targets,
            running: Default::default(),
        });
        self
    }

    /// Starts `host`'s kubelet endpoint, if kubelets run; its port.
    #[cfg(feature = "real-etcd")]
    async fn start_kubelet(&mut self, host: &RunningHost) -> Option<u16> {
        let kubelets = self.kubelets.as_mut()?;
        if let Some(running) = kubelets.running.get(&host.name) {
            return Some(running.port());
        }
        let ip: std::net::IpAddr = match host.address.parse() {
            Ok(ip) => ip,
            Err(_) => {
                tracing::warn!(node = %host.name, address = %host.address, "no kubelet endpoint: the address is not an IP");
                return None;
            }
        };
        match crate::kubelet::Kubelet::start(ip, &host.name, Arc::clone(&kubelets.targets)).await {
            Ok(kubelet) => {
                let port = kubelet.port();
                kubelets.running.insert(host.name.clone(), kubelet);
                Some(port)
            }
            Err(error) => {
                tracing::warn!(node = %host.name, %error, "no kubelet endpoint");
                None
            }
        }
    }

    #[cfg(not(feature = "real-etcd"))]
    async fn start_kubelet(&mut self, _host: &RunningHost) -> Option<u16> {
        None
    }

    /// Syncs every `interval`, forever. Errors are logged and retried on the next pass.
    pub async fn run(mut self, interval: Duration) {
        loop {
            if let Err(error) = self.sync().await {
                tracing::warn!(%error, "could not sync simulated nodes");
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// One pass: registers nodes for running machines and removes nodes of vanished ones.
    pub async fn sync(&mut self) -> Result<(), SyncError> {
        if self.registered.is_empty() {
            // After a restart: adopt the nodes registered before.
            let selector = format!("{SIMULATED_NODE_LABEL}=true");
            for node in self
                .nodes
                .list_metadata(&ListParams::default().labels(&selector))
                .await?
            {
                if let Some(name) = node.metadata.name {
                    self.registered.insert(name);
                }
            }
        }
        let hosts = self.hosts.running().await.map_err(SyncError::Hosts)?;
        let running: BTreeSet<String> = hosts.iter().map(|h| h.name.clone()).collect();
        let new: Vec<_> = hosts
            .into_iter()
            .filter(|h| !self.registered.contains(&h.name))
            .collect();
        for host in new {
            let registration = NodeRegistration {
                name: host.name.clone(),
                provider_id: host.provider_id.clone(),
                internal_ip: host.address.clone(),
                zone: host.zone.clone(),
                kubelet_port: self.start_kubelet(&host).await,
                control_plane: host.control_plane,
                cluster: host.cluster.clone(),
            };
            register(&self.nodes, &registration).await?;
            if host.control_plane {
                start_control_plane_pods(&self.kube_system(), &host.name, host.cluster.as_ref())
                    .await?;
                if let Some(config) = self.hosts.init_cluster_configuration(&host).await {
                    upload_kubeadm_config(&self.nodes.clone().into_client(), &config).await?;
                }
            }
            self.registered.insert(host.name);
        }
        let gone: Vec<String> = self
            .registered
            .iter()
            .filter(|name| !running.contains(*name))
            .cloned()
            .collect();
        for name in gone {
            match self.nodes.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(error) => return Err(error.into()),
            }
            #[cfg(feature = "real-etcd")]
            if let Some(kubelets) = self.kubelets.as_mut() {
                kubelets.running.remove(&name);
            }
            // Its static pods go with it (the pod garbage collector's part in a real cluster).
            self.kube_system()
                .delete_collection(
                    &DeleteParams::default().grace_period(0),
                    &ListParams::default()
                        .labels(STATIC_POD_SELECTOR)
                        .fields(&format!("spec.nodeName={name}")),
                )
                .await?;
            self.registered.remove(&name);
        }
        self.finish_terminating_pods().await?;
        Ok(())
    }
}

/// A node as a kubelet registers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRegistration {
    /// The node's name (and hostname).
    pub name: String,
    /// `spec.providerID`, as the cloud-controller-manager would set it.
    pub provider_id: String,
    /// The `InternalIP` address.
    pub internal_ip: String,
    /// The `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
    /// The kubelet's port (`status.daemonEndpoints.kubeletEndpoint.port`), when it serves one.
    pub kubelet_port: Option<u16>,
    /// A control-plane node: labelled `node-role.kubernetes.io/control-plane` (and tainted
    /// `NoSchedule`), as `kubeadm init` and `kubeadm join --control-plane` leave it.
    pub control_plane: bool,
    /// The cluster, `(namespace, name)`, the node is labelled with
    /// ([`CLUSTER_NAMESPACE_LABEL`](crate::endpoints::CLUSTER_NAMESPACE_LABEL),
    /// [`CLUSTER_NAME_LABEL`](crate::endpoints::CLUSTER_NAME_LABEL)), so that the cluster's own
    /// endpoint ([`crate::endpoints`]) lists it.
    pub cluster: Option<(String, String)>,
}

/// Registers `node` like a kubelet that has just started: creates the `Node` (labelled
/// [`SIMULATED_NODE_LABEL`]; an existing one is kept) and posts a `Ready` status with its
/// addresses. Usable for any provider's tests: a kubelet for a fake cloud's servers.
pub async fn register(nodes: &Api<Node>, node: &NodeRegistration) -> Result<(), kube::Error> {
    let mut labels: std::collections::BTreeMap<String, String> = [
        (SIMULATED_NODE_LABEL.to_string(), "true".to_string()),
        ("kubernetes.io/hostname".to_string(), node.name.clone()),
        (
            "topology.kubernetes.io/zone".to_string(),
            node.zone.clone().unwrap_or_default(),
        ),
    ]
    .into();
    labels.extend(cluster_labels(node.cluster.as_ref()));
    let mut taints = None;
    if node.control_plane {
        labels.insert(CONTROL_PLANE_NODE_LABEL.to_string(), String::new());
        taints = Some(vec![k8s_openapi::api::core::v1::Taint {
            key: CONTROL_PLANE_NODE_LABEL.to_string(),
            effect: "NoSchedule".to_string(),
            ..Default::default()
        }]);
    }
    let object = Node {
        metadata: ObjectMeta {
            name: Some(node.name.clone()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(k8s_openapi::api::core::v1::NodeSpec {
            provider_id: Some(node.provider_id.clone()),
            taints,
            ..Default::default()
        }),
        status: None,
    };
    match nodes.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_already_exists() => {}
        Err(error) => return Err(error),
    }
    let now = jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        // What a kubelet reports: Ready, and no memory, disk or PID pressure (upstream's
        // Machine NodeHealthy condition reads all four).
        "conditions": [
            {
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "simulated kubelet is posting ready status",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            },
            {
                "type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                "message": "simulated kubelet has sufficient memory available",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            },
            {
                "type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                "message": "simulated kubelet has no disk pressure",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            },
            {
                "type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                "message": "simulated kubelet has sufficient PID available",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            },
        ],
        "addresses": [
            {"type": "InternalIP", "address": node.internal_ip},
            {"type": "Hostname", "address": node.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": node.kubelet_port.unwrap_or(10250)}},
    }});
    nodes
        .patch_status(&node.name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// What `kubeadm init` uploads: the `kubeadm-config` ConfigMap in `kube-system` holding the
/// `ClusterConfiguration` (kept when it exists: a later init of the same cluster does not
/// replace it).
pub async fn upload_kubeadm_config(
    client: &Client,
    cluster_configuration: &str,
) -> Result<(), kube::Error> {
    let config_map: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
        "data": {"ClusterConfiguration": cluster_configuration},
    }))
    .map_err(kube::Error::SerdeError)?;
    match Api::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), &config_map)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
        Err(error) => Err(error),
    }
}

/// The labels telling which cluster a node or static pod belongs to (none when unknown).
fn cluster_labels(cluster: Option<&(String, String)>) -> Vec<(String, String)> {
    cluster
        .map(|(namespace, name)| {
            vec![
                (
                    crate::endpoints::CLUSTER_NAMESPACE_LABEL.to_string(),
                    namespace.clone(),
                ),
                (
                    crate::endpoints::CLUSTER_NAME_LABEL.to_string(),
                    name.clone(),
                ),
            ]
        })
        .unwrap_or_default()
}

/// The labels of kubeadm's static pods.
const STATIC_POD_SELECTOR: &str = "tier=control-plane";

/// Runs kubeadm's control-plane static pods on `node` as its kubelet mirrors them into the API
/// server: `kube-apiserver-<node>`, `kube-controller-manager-<node>`, `kube-scheduler-<node>` and
/// `etcd-<node>` in `kube-system` (labels `component`, `tier=control-plane`; the
/// `kubernetes.io/config.mirror` annotation; the `cluster`'s labels when known), each `Running`
/// and `Ready` (an existing pod is made so again). `pods` is the workload cluster's `kube-system`.
pub async fn start_control_plane_pods(
    pods: &Api<Pod>,
    node: &str,
    cluster: Option<&(String, String)>,
) -> Result<(), kube::Error> {
    for component in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "etcd",
    ] {
        let name = format!("{component}-{node}");
        let mut labels = serde_json::Map::new();
        labels.insert("component".into(), json!(component));
        labels.insert("tier".into(), json!("control-plane"));
        for (key, value) in cluster_labels(cluster) {
            labels.insert(key, json!(value));
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {
                    "kubernetes.io/config.mirror": format!("simulated-{component}"),
                    "kubernetes.io/config.source": "file",
                },
            },
            "spec": {
                "nodeName": node,
                "hostNetwork": true,
                "containers": [{"name": component, "image": format!("registry.k8s.io/{component}:simulated")}],
            },
        }))
        .map_err(kube::Error::SerdeError)?;
        match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => {}
            // A retry after a failed status write finishes the pod.
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(error) => return Err(error),
        }
        let now = jiff::Timestamp::now().to_string();
        let status = json!({"status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
            ],
            "containerStatuses": [{
                "name": component, "ready": true, "started": true, "restartCount": 0,
                "image": format!("registry.k8s.io/{component}:simulated"), "imageID": "",
                "state": {"running": {"startedAt": now}},
            }],
        }});
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
    }
    Ok(())
}

impl NodeRegistrar {
    /// The workload cluster's `kube-system` pods.
    fn kube_system(&self) -> Api<Pod> {
        Api::namespaced(self.nodes.clone().into_client(), "kube-system")
    }

    /// Deletes at once the terminating pods bound to this registrar's nodes, as their kubelet
    /// would after stopping their containers.
    async fn finish_terminating_pods(&mut self) -> Result<(), kube::Error> {
        if self.registered.is_empty() {
            return Ok(());
        }
        let client = self.nodes.clone().into_client();
        let watch = self
            .pods
            .get_or_insert_with(|| PodWatch::start(Api::all(client)));
        // Until the watch has listed them, nothing is known to be terminating: the next pass.
        for pod in watch.store.state() {
            let on_our_node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some_and(|n| self.registered.contains(n));
            if !on_our_node || pod.metadata.deletion_timestamp.is_none() {
                continue;
            }
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.nodes.clone().into_client(), &namespace);
            match api
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }
}
