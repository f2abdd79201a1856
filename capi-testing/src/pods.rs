//! Deployments run as local processes: what a kubelet, the Deployment controller and the
//! EndpointSlice controller do for the managers a tool such as clusterctl installs, on a machine
//! with no kubelet and no container runtime.
//!
//! [`PodRunner`] watches every Deployment of a control plane and, for each one with replicas,
//! runs one pod: every container's image is looked up in [`LocalImages`] (an image the test has
//! no binary for is reported, never guessed), and the binary runs
//!
//! - as the pod's ServiceAccount: a token from the TokenRequest API in a kubeconfig (`KUBECONFIG`),
//!   so the RBAC the manifests created is what the process has;
//! - with the container's command and arguments, `$(VAR)` references expanded from its
//!   environment, whose `fieldRef`s (`metadata.namespace`, `metadata.name`, `status.podIP`,
//!   `spec.serviceAccountName`) resolve as a kubelet resolves them;
//! - with its Secret, ConfigMap and emptyDir volumes written to a directory of its own (a pod
//!   waits, as on a node, until its Secrets exist);
//! - with a free local port for each declared container port, and the flags [`LocalImage`] gives
//!   (ports and paths a process cannot share with another replace the container's own).
//!
//! A Service selecting the pod gets an EndpointSlice (`<service>-local`) with the machine's own
//! IPv4 address and the allocated ports, which is how the API server reaches webhooks and
//! conversion endpoints when it routes through endpoints (`--enable-aggregator-routing`, on in
//! [`ControlPlane`](crate::envtest::ControlPlane)). The Deployment's status reports the replica
//! available once its readiness probe (HTTP GET on a container port) answers 200, or at once
//! without a probe. A changed pod template replaces the process (the `Recreate` strategy); a
//! deleted or scaled-to-zero Deployment stops it; a process that exits is started again, and
//! counted.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, Secret, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// How often the runner compares the Deployments with its processes.
const PERIOD: Duration = Duration::from_millis(500);

/// The field manager of what the runner writes.
const MANAGER: &str = "capi-testing-pods";

/// What gives a pod's process its extra flags.
pub type Flags = Box<dyn Fn(&PodContext) -> Vec<String> + Send + Sync>;

/// A binary that runs an image, and the flags that make it a good neighbour on a shared machine.
pub struct LocalImage {
    /// The binary standing for the image's entry point.
    pub binary: PathBuf,
    /// Flags given to the process after the container's own. A flag named here (`--name` or
    /// `--name=value`) replaces every occurrence of that flag among the container's arguments.
    pub flags: Flags,
}

impl std::fmt::Debug for LocalImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalImage")
            .field("binary", &self.binary)
            .finish_non_exhaustive()
    }
}

/// Which binary runs which image: an exact reference (`repository:tag`) first, then the
/// repository alone (any tag).
#[derive(Debug, Default)]
pub struct LocalImages {
    images: BTreeMap<String, LocalImage>,
}

impl LocalImages {
    /// No image known.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `image` — a repository (`registry/path/name`, any tag) or an exact reference — with
    /// `binary` and the flags `flags` returns.
    pub fn with(
        mut self,
        image: impl Into<String>,
        binary: impl Into<PathBuf>,
        flags: impl Fn(&PodContext) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.images.insert(
            image.into(),
            LocalImage {
                binary: binary.into(),
                flags: Box::new(flags),
            },
        );
        self
    }

    /// The binary for `reference`, if one is known.
    pub fn lookup(&self, reference: &str) -> Option<&LocalImage> {
        self.images
            .get(reference)
            .or_else(|| self.images.get(repository(reference)))
    }
}

/// `reference` without its tag or digest.
fn repository(reference: &str) -> &str {
    let without_digest = reference.split('@').next().unwrap_or(reference);
    match without_digest.rfind(':') {
        // A colon after the last slash separates the tag; one before it belongs to a registry's
        // port.
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    }
}

/// What a pod's process is given, for [`LocalImage::flags`].
#[derive(Clone, Debug)]
pub struct PodContext {
    /// The Deployment's namespace.
    pub namespace: String,
    /// The Deployment's name.
    pub deployment: String,
    /// The image of every container, in order, as the Deployment names them.
    pub images: Vec<String>,
    /// The pod's UID (`metadata.uid`): the Deployment's, as one pod stands for it.
    pub uid: String,
    /// The pod's own directory (logs, the kubeconfig, volumes).
    pub dir: PathBuf,
    /// The local port given to each declared container port, by the port's name and by its
    /// number.
    pub ports: BTreeMap<String, u16>,
    /// Where each volume mount's content is, by the container's mount path.
    pub mounts: BTreeMap<String, PathBuf>,
    /// The kubeconfig of the pod's ServiceAccount.
    pub kubeconfig: PathBuf,
}

impl PodContext {
    /// The local port of the container port named (or numbered) `port`.
    pub fn port(&self, port: &str) -> Option<u16> {
        self.ports.get(port).copied()
    }

    /// The directory holding what the container sees at `mount_path`.
    pub fn mount(&self, mount_path: &str) -> Option<&Path> {
        self.mounts.get(mount_path).map(PathBuf::as_path)
    }
}

/// Why a pod could not run (kept for the test's report).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PodError {
    /// The API server refused or failed a request.
    #[error("{what}: {source}")]
    Api {
        /// What was asked.
        what: String,
        /// The failure.
        #[source]
        source: kube::Error,
    },
    /// A file of the pod could not be written, or its process started.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The pod asks for something this runner does not do, or waits for something.
    #[error("{0}")]
    Unsupported(String),
    /// The runner's own directory could not be made.
    #[error(transparent)]
    Envtest(#[from] crate::envtest::EnvtestError),
}

/// One running pod: its processes (one per container) and what it was started from.
struct Pod {
    template_hash: String,
    context: PodContext,
    processes: Vec<Child>,
    ready: bool,
    readiness: Option<(u16, String)>,
    /// The EndpointSlices written for it, by name, as last written.
    endpoints: BTreeMap<String, EndpointSlice>,
    /// Kills the processes if the test process dies without dropping the runner.
    _watchdog: Option<crate::envtest::control_plane::Process>,
}

impl Drop for Pod {
    fn drop(&mut self) {
        stop(&mut self.processes);
    }
}

/// How long a stopped container has between SIGTERM and SIGKILL (a kubelet gives 30 s; managers
/// here release their leases and exit well within this).
const GRACE: Duration = Duration::from_secs(5);

/// SIGTERM to every process now, SIGKILL after [`GRACE`] to those still running — by a shell of
/// its own, so that nothing here waits (it outlives this process if need be) — and a thread that
/// reaps them.
fn stop(processes: &mut Vec<Child>) {
    if processes.is_empty() {
        return;
    }
    let pids: Vec<String> = processes.iter().map(|c| c.id().to_string()).collect();
    let pids = pids.join(" ");
    let _ = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "kill -TERM {pids} 2>/dev/null; sleep {}; kill -KILL {pids} 2>/dev/null",
            GRACE.as_secs()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let children = std::mem::take(processes);
    std::thread::spawn(move || {
        for mut child in children {
            let _ = child.wait();
        }
    });
}

/// What the runner reports of one Deployment's pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodStatus {
    /// `namespace/name` of the Deployment.
    pub deployment: String,
    /// The images its containers run.
    pub images: Vec<String>,
    /// How often a process of the pod exited and was started again.
    pub restarts: u32,
    /// Whether the readiness probe answered (or there is none).
    pub ready: bool,
    /// The pod's directory: `<container>.log` holds each process's output.
    pub dir: PathBuf,
}

#[derive(Default)]
struct State {
    pods: BTreeMap<String, Pod>,
    /// The last failure per Deployment that could not run (cleared when it runs or goes).
    failures: BTreeMap<String, String>,
    /// Every pod start, in order: `namespace/name image`.
    started: Vec<String>,
    /// How often each Deployment's pod exited on its own and was started again.
    restarts: BTreeMap<String, u32>,
    /// When a pod that exited may start again (a kubelet's back-off, doubling to 30 s).
    back_off: BTreeMap<String, tokio::time::Instant>,
}

/// Runs the pods of a control plane's Deployments as local processes (see the module's docs).
/// Dropping it stops every process.
pub struct PodRunner {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for PodRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodRunner").finish_non_exhaustive()
    }
}

impl Drop for PodRunner {
    fn drop(&mut self) {
        self.task.abort();
        if let Ok(mut state) = self.state.lock() {
            // Every pod's processes get SIGTERM at once, then share one grace period.
            let mut pods: Vec<Pod> = std::mem::take(&mut state.pods).into_values().collect();
            let mut processes: Vec<Child> = pods
                .iter_mut()
                .flat_map(|p| p.processes.drain(..))
                .collect();
            stop(&mut processes);
        }
    }
}

impl PodRunner {
    /// Starts watching the Deployments `client` (an administrator) can see, on the control plane
    /// whose admin kubeconfig is `kubeconfig_yaml`.
    pub fn start(
        client: Client,
        kubeconfig_yaml: &str,
        images: LocalImages,
    ) -> Result<Self, PodError> {
        let dir = crate::envtest::control_plane::scratch_dir()?;
        let admin = Kubeconfig::from_yaml(kubeconfig_yaml)
            .map_err(|e| PodError::Unsupported(format!("the admin kubeconfig: {e}")))?;
        let host_ip = host_ipv4()?;
        let state = Arc::new(Mutex::new(State::default()));
        let node = Node {
            client,
            admin,
            images,
            host_ip,
            root: dir.path().to_path_buf(),
            state: state.clone(),
            starts: std::sync::atomic::AtomicU64::new(0),
        };
        let task = tokio::spawn(async move {
            loop {
                node.sync().await;
                tokio::time::sleep(PERIOD).await;
            }
        });
        Ok(Self { state, task, dir })
    }

    /// The pods running now, by Deployment.
    pub fn pods(&self) -> Vec<PodStatus> {
        let Ok(state) = self.state.lock() else {
            return Vec::new();
        };
        state
            .pods
            .iter()
            .map(|(key, pod)| PodStatus {
                deployment: key.clone(),
                images: pod.context.images.clone(),
                restarts: state.restarts.get(key).copied().unwrap_or(0),
                ready: pod.ready,
                dir: pod.context.dir.clone(),
            })
            .collect()
    }

    /// Every pod start, in order (`namespace/name image[,image…]`): a replaced template or a
    /// restart shows as another start of the same Deployment.
    pub fn starts(&self) -> Vec<String> {
        self.state
            .lock()
            .map(|s| s.started.clone())
            .unwrap_or_default()
    }

    /// Why Deployments that should run do not, by `namespace/name`.
    pub fn failures(&self) -> BTreeMap<String, String> {
        self.state
            .lock()
            .map(|s| s.failures.clone())
            .unwrap_or_default()
    }

    /// The last lines of every log of every pod started so far (restarted and stopped ones
    /// too), and why Deployments do not run, for a failing test's report.
    pub fn log_tails(&self) -> String {
        let mut out = String::new();
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        dirs.sort();
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for path in entries.flatten().map(|e| e.path()) {
                if path.extension().is_some_and(|e| e == "log")
                    && path.file_stem().is_some_and(|s| s != "watchdog")
                {
                    out.push_str(&format!(
                        "--- {}\n{}\n",
                        path.display(),
                        crate::envtest::control_plane::tail(&path)
                    ));
                }
            }
        }
        for (deployment, failure) in self.failures() {
            out.push_str(&format!("--- {deployment} not running: {failure}\n"));
        }
        out
    }

    /// Waits until the Deployment `namespace/name` runs a ready pod.
    pub async fn wait_ready(&self, namespace: &str, name: &str, within: Duration) -> bool {
        let key = format!("{namespace}/{name}");
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            if self.pods().iter().any(|p| p.deployment == key && p.ready) {
                return true;
            }
            tokio::time::sleep(PERIOD).await;
        }
        false
    }
}

/// Overrides the address the pods' endpoints carry (see [`PodRunner::start`]).
pub const HOST_IP_ENV: &str = "CAPI_TESTING_HOST_IP";

/// The machine's own non-loopback IPv4 address — the API server refuses loopback addresses in an
/// EndpointSlice: `$CAPI_TESTING_HOST_IP` when set, otherwise the first local address of the
/// kernel's routing table (`/proc/net/fib_trie`) outside `127.0.0.0/8`.
fn host_ipv4() -> Result<Ipv4Addr, PodError> {
    if let Some(value) = std::env::var_os(HOST_IP_ENV) {
        let text = value.to_string_lossy();
        return text.parse().map_err(|_| {
            PodError::Unsupported(format!("{HOST_IP_ENV}={text} is not an IPv4 address"))
        });
    }
    let table = std::fs::read_to_string("/proc/net/fib_trie").map_err(|source| PodError::Io {
        what: format!(
            "reading /proc/net/fib_trie for this machine's addresses (or set {HOST_IP_ENV})"
        ),
        source,
    })?;
    local_addresses(&table)
        .into_iter()
        .find(|ip| !ip.is_loopback() && !ip.is_unspecified() && !ip.is_link_local())
        .ok_or_else(|| {
            PodError::Unsupported(format!(
                "this machine has no IPv4 address outside 127.0.0.0/8 for the pods' endpoints; \
                 set {HOST_IP_ENV} to one"
            ))
        })
}

/// The addresses `/proc/net/fib_trie` lists as the machine's own (`/32 host LOCAL` under an
/// address), in order.
fn local_addresses(table: &str) -> Vec<Ipv4Addr> {
    let mut found = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in table.lines() {
        let trimmed = line.trim_start_matches(|c: char| c.is_whitespace() || c == '|' || c == '-');
        if let Ok(ip) = trimmed.trim().parse::<Ipv4Addr>() {
            last = Some(ip);
        } else if line.contains("/32 host LOCAL")
            && let Some(ip) = last
            && !found.contains(&ip)
        {
            found.push(ip);
        }
    }
    found
}

/// The runner's loop: the kubelet and the controllers it stands for.
struct Node {
    client: Client,
    admin: Kubeconfig,
    images: LocalImages,
    host_ip: Ipv4Addr,
    root: PathBuf,
    state: Arc<Mutex<State>>,
    /// Numbers the pods' directories.
    starts: std::sync::atomic::AtomicU64,
}

impl Node {
    async fn sync(&self) {
        let Ok(deployments) = Api::<Deployment>::all(self.client.clone())
            .list(&ListParams::default())
            .await
        else {
            return;
        };
        let mut wanted = BTreeMap::new();
        let mut scaled_down = Vec::new();
        for deployment in deployments {
            let replicas = deployment
                .spec
                .as_ref()
                .and_then(|s| s.replicas)
                .unwrap_or(1);
            if deployment.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if replicas == 0 {
                // Its pod stops below; the status says so once it has.
                scaled_down.push(deployment);
                continue;
            }
            wanted.insert(deployment_key(&deployment), deployment);
        }
        // Stop what is no longer wanted, or wanted differently.
        let stale: Vec<Pod> = {
            let Ok(mut state) = self.state.lock() else {
                return;
            };
            let keys: Vec<String> = state
                .pods
                .iter()
                .filter(|(key, pod)| {
                    wanted
                        .get(*key)
                        .is_none_or(|d| template_hash(d) != pod.template_hash)
                })
                .map(|(key, _)| key.clone())
                .collect();
            keys.iter()
                .filter_map(|key| state.pods.remove(key))
                .collect()
        };
        for pod in stale {
            let slices: Api<EndpointSlice> =
                Api::namespaced(self.client.clone(), &pod.context.namespace);
            for slice in pod.endpoints.keys() {
                let _ = slices.delete(slice, &Default::default()).await;
            }
            drop(pod);
        }
        for deployment in &scaled_down {
            self.report_scaled_down(deployment).await;
        }
        if let Ok(mut state) = self.state.lock() {
            state.failures.retain(|key, _| wanted.contains_key(key));
        }
        let services = Api::<Service>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for (key, deployment) in &wanted {
            let running = self
                .state
                .lock()
                .map(|s| s.pods.contains_key(key))
                .unwrap_or(true);
            let waiting = self
                .state
                .lock()
                .ok()
                .and_then(|s| s.back_off.get(key).copied())
                .is_some_and(|until| tokio::time::Instant::now() < until);
            if !running && waiting {
                continue;
            }
            if !running {
                match self.start_pod(deployment).await {
                    Ok(pod) => {
                        if let Ok(mut state) = self.state.lock() {
                            state.failures.remove(key);
                            state
                                .started
                                .push(format!("{key} {}", pod.context.images.join(",")));
                            state.pods.insert(key.clone(), pod);
                        }
                    }
                    Err(error) => {
                        if let Ok(mut state) = self.state.lock() {
                            state.failures.insert(key.clone(), error.to_string());
                        }
                        continue;
                    }
                }
            }
            self.tend(key, deployment, &services).await;
        }
    }

    /// Restarts exited processes, probes readiness, and keeps the endpoints and the
    /// Deployment's status current.
    async fn tend(&self, key: &str, deployment: &Deployment, services: &[Service]) {
        let (context, probe, ready, written) = {
            let Ok(mut state) = self.state.lock() else {
                return;
            };
            let Some(pod) = state.pods.get_mut(key) else {
                return;
            };
            let exited = pod.processes.is_empty()
                || pod
                    .processes
                    .iter_mut()
                    .any(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited {
                // The whole pod starts again, with fresh ports, token and volumes, after a
                // back-off that doubles with each restart.
                let restarts = state.restarts.entry(key.to_string()).or_insert(0);
                *restarts += 1;
                let delay =
                    Duration::from_secs(1 << (*restarts).min(5)).min(Duration::from_secs(30));
                state
                    .back_off
                    .insert(key.to_string(), tokio::time::Instant::now() + delay);
                let dropped = state.pods.remove(key);
                drop(state);
                drop(dropped);
                return;
            }
            (
                pod.context.clone(),
                pod.readiness.clone(),
                pod.ready,
                pod.endpoints.clone(),
            )
        };
        if !ready {
            let answered = match &probe {
                Some((port, path)) => http_ok(*port, path).await,
                None => true,
            };
            if !answered {
                return;
            }
            if let Ok(mut state) = self.state.lock()
                && let Some(pod) = state.pods.get_mut(key)
            {
                pod.ready = true;
            }
        }
        let slices = self
            .sync_endpoints(deployment, &context, services, &written)
            .await;
        if let Ok(mut state) = self.state.lock()
            && let Some(pod) = state.pods.get_mut(key)
        {
            pod.endpoints = slices;
        }
        self.report_available(deployment).await;
    }

    async fn start_pod(&self, deployment: &Deployment) -> Result<Pod, PodError> {
        let namespace = deployment.namespace().unwrap_or_default();
        let name = deployment.name_any();
        let spec = pod_spec(deployment)?;
        let containers = &spec.containers;
        let images: Vec<String> = containers
            .iter()
            .map(|c| c.image.clone().unwrap_or_default())
            .collect();
        for container in containers {
            let reference = container.image.as_deref().unwrap_or_default();
            if self.images.lookup(reference).is_none() {
                return Err(PodError::Unsupported(format!(
                    "no local binary stands for image {reference:?} (container {})",
                    container.name
                )));
            }
        }
        let start = self
            .starts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A directory per start: a restarted pod's earlier logs stay for the report.
        let dir = self.root.join(format!("{namespace}.{name}.{start}"));
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;

        let mut mounts = BTreeMap::new();
        for volume in spec.volumes.iter().flatten() {
            let target = dir.join("volumes").join(&volume.name);
            std::fs::create_dir_all(&target)
                .map_err(io(format!("creating {}", target.display())))?;
            if let Some(secret) = &volume.secret {
                let secret_name = secret.secret_name.clone().unwrap_or_default();
                let found = Api::<Secret>::namespaced(self.client.clone(), &namespace)
                    .get_opt(&secret_name)
                    .await
                    .map_err(api(format!("reading Secret {namespace}/{secret_name}")))?;
                let Some(found) = found else {
                    if secret.optional == Some(true) {
                        continue;
                    }
                    return Err(PodError::Unsupported(format!(
                        "waiting for Secret {namespace}/{secret_name} (volume {})",
                        volume.name
                    )));
                };
                for (key, value) in found.data.unwrap_or_default() {
                    let file = target.join(&key);
                    write_private(&file, &value.0)?;
                }
            } else if let Some(config_map) = &volume.config_map {
                let map_name = config_map.name.clone();
                let found = Api::<ConfigMap>::namespaced(self.client.clone(), &namespace)
                    .get_opt(&map_name)
                    .await
                    .map_err(api(format!("reading ConfigMap {namespace}/{map_name}")))?;
                let Some(found) = found else {
                    return Err(PodError::Unsupported(format!(
                        "waiting for ConfigMap {namespace}/{map_name} (volume {})",
                        volume.name
                    )));
                };
                for (key, value) in found.data.unwrap_or_default() {
                    let file = target.join(&key);
                    write_private(&file, value.as_bytes())?;
                }
            } else if volume.empty_dir.is_none() {
                return Err(PodError::Unsupported(format!(
                    "volume {} is neither a Secret, a ConfigMap nor an emptyDir",
                    volume.name
                )));
            }
            for container in containers {
                for mount in container.volume_mounts.iter().flatten() {
                    if mount.name == volume.name {
                        mounts.insert(mount.mount_path.clone(), target.clone());
                    }
                }
            }
        }

        let mut ports = BTreeMap::new();
        for container in containers {
            for port in container.ports.iter().flatten() {
                let local = free_port()?;
                ports.insert(port.container_port.to_string(), local);
                if let Some(port_name) = &port.name {
                    ports.insert(port_name.clone(), local);
                }
            }
        }

        let account = spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into());
        let kubeconfig = dir.join("kubeconfig");
        self.write_kubeconfig(&namespace, &account, &kubeconfig)
            .await?;

        let context = PodContext {
            namespace: namespace.clone(),
            deployment: name.clone(),
            images,
            uid: deployment.uid().unwrap_or_default(),
            dir: dir.clone(),
            ports,
            mounts,
            kubeconfig,
        };
        let readiness = containers.iter().find_map(|c| {
            let get = c.readiness_probe.as_ref()?.http_get.as_ref()?;
            let port = match &get.port {
                IntOrString::Int(n) => context.port(&n.to_string()),
                IntOrString::String(s) => context.port(s),
            }?;
            Some((port, get.path.clone().unwrap_or_else(|| "/".into())))
        });
        let processes = self.spawn_containers(spec, &context)?;
        let pids: Vec<u32> = processes.iter().map(Child::id).collect();
        let watchdog =
            crate::envtest::control_plane::spawn_watchdog_for(&context.dir, "watchdog", &pids).ok();
        Ok(Pod {
            template_hash: template_hash(deployment),
            context,
            processes,
            ready: false,
            readiness,
            endpoints: BTreeMap::new(),
            _watchdog: watchdog,
        })
    }

    /// One process per container; none when one of them cannot start.
    fn spawn_containers(
        &self,
        spec: &PodSpec,
        context: &PodContext,
    ) -> Result<Vec<Child>, PodError> {
        let mut processes = Vec::new();
        for container in &spec.containers {
            match self.spawn_container(container, spec, context) {
                Ok(child) => processes.push(child),
                Err(error) => {
                    stop(&mut processes);
                    return Err(error);
                }
            }
        }
        Ok(processes)
    }

    fn spawn_container(
        &self,
        container: &Container,
        spec: &PodSpec,
        context: &PodContext,
    ) -> Result<Child, PodError> {
        {
            let reference = container.image.as_deref().unwrap_or_default();
            let Some(image) = self.images.lookup(reference) else {
                return Err(PodError::Unsupported(format!(
                    "no local binary stands for image {reference:?}"
                )));
            };
            let env = environment(container, spec, context, self.host_ip)?;
            let mut args: Vec<String> = container
                .command
                .iter()
                .flatten()
                .skip(1)
                .chain(container.args.iter().flatten())
                .map(|a| expand(a, &env))
                .collect();
            let overrides = (image.flags)(context);
            args.retain(|arg| !overrides.iter().any(|o| same_flag(arg, o)));
            args.extend(overrides);
            let log = context.dir.join(format!("{}.log", container.name));
            let out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(io(format!("creating {}", log.display())))?;
            let err = out
                .try_clone()
                .map_err(io(format!("opening {}", log.display())))?;
            let child = Command::new(&image.binary)
                .args(&args)
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", &context.dir)
                .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .env("KUBECONFIG", &context.kubeconfig)
                .current_dir(&context.dir)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .map_err(io(format!("starting {}", image.binary.display())))?;
            Ok(child)
        }
    }

    /// A kubeconfig for `namespace/account`, with a token from the TokenRequest API.
    async fn write_kubeconfig(
        &self,
        namespace: &str,
        account: &str,
        path: &Path,
    ) -> Result<(), PodError> {
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(24 * 3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<ServiceAccount>::namespaced(self.client.clone(), namespace)
            .create_token_request(account, &PostParams::default(), &request)
            .await
            .map_err(api(format!(
                "requesting a token for ServiceAccount {namespace}/{account}"
            )))?;
        let token = answer.status.map(|s| s.token).ok_or_else(|| {
            PodError::Unsupported("a TokenRequest came back without a token".into())
        })?;
        let mut config = self.admin.clone();
        for user in config.auth_infos.iter_mut() {
            if let Some(auth) = user.auth_info.as_mut() {
                auth.token = Some(token.clone().into());
                auth.client_certificate = None;
                auth.client_certificate_data = None;
                auth.client_key = None;
                auth.client_key_data = None;
            }
        }
        let yaml = serde_saphyr::to_string(&config)
            .map_err(|e| PodError::Unsupported(format!("writing a kubeconfig: {e}")))?;
        write_private(path, yaml.as_bytes())
    }

    /// An EndpointSlice `<service>-local` for every Service selecting the pod, written when it
    /// differs from what `written` holds; what is written now.
    async fn sync_endpoints(
        &self,
        deployment: &Deployment,
        context: &PodContext,
        services: &[Service],
        written: &BTreeMap<String, EndpointSlice>,
    ) -> BTreeMap<String, EndpointSlice> {
        let namespace = &context.namespace;
        let labels = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), namespace);
        let mut now = BTreeMap::new();
        for service in services {
            if service.namespace().as_deref() != Some(namespace.as_str()) {
                continue;
            }
            let Some(spec) = &service.spec else { continue };
            let Some(selector) = spec.selector.as_ref().filter(|s| !s.is_empty()) else {
                continue;
            };
            if !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                continue;
            }
            let ports: Vec<EndpointPort> = spec
                .ports
                .iter()
                .flatten()
                .filter_map(|port| {
                    let target = match &port.target_port {
                        Some(IntOrString::Int(n)) => n.to_string(),
                        Some(IntOrString::String(s)) => s.clone(),
                        None => port.port.to_string(),
                    };
                    Some(EndpointPort {
                        name: Some(port.name.clone().unwrap_or_default()),
                        port: Some(i32::from(context.port(&target)?)),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    })
                })
                .collect();
            let service_name = service.name_any();
            let name = format!("{service_name}-local");
            let slice = EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(namespace.clone()),
                    labels: Some(BTreeMap::from([
                        ("kubernetes.io/service-name".into(), service_name.clone()),
                        (
                            "endpointslice.kubernetes.io/managed-by".into(),
                            format!("{MANAGER}.capi-rs.dev"),
                        ),
                    ])),
                    ..Default::default()
                },
                address_type: "IPv4".into(),
                endpoints: vec![Endpoint {
                    addresses: vec![self.host_ip.to_string()],
                    conditions: Some(EndpointConditions {
                        ready: Some(true),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ports: Some(ports),
            };
            if written.get(&name) == Some(&slice) {
                now.insert(name, slice);
                continue;
            }
            let applied = slices
                .patch(
                    &name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(&slice),
                )
                .await;
            if applied.is_ok() {
                now.insert(name, slice);
            }
        }
        now
    }

    /// The Deployment's status as the Deployment controller would write it for one available
    /// replica of the current template.
    async fn report_available(&self, deployment: &Deployment) {
        self.write_status(deployment, 1).await;
    }

    /// The status of a Deployment scaled to zero, as the Deployment controller writes it once
    /// its pods are gone (what `clusterctl upgrade` waits for before replacing a provider).
    async fn report_scaled_down(&self, deployment: &Deployment) {
        let stopped = self
            .state
            .lock()
            .map(|s| !s.pods.contains_key(&deployment_key(deployment)))
            .unwrap_or(false);
        if stopped {
            self.write_status(deployment, 0).await;
        }
    }

    /// `replicas` (0 or 1) ready and available replicas of the current generation, unless the
    /// status already says so.
    async fn write_status(&self, deployment: &Deployment, replicas: i32) {
        let generation = deployment.metadata.generation.unwrap_or_default();
        let current = deployment.status.as_ref();
        if current.and_then(|s| s.observed_generation) == Some(generation)
            && current.and_then(|s| s.available_replicas).unwrap_or(0) == replicas
            && current.and_then(|s| s.replicas).unwrap_or(0) == replicas
        {
            return;
        }
        let (available, reason, message) = if replicas > 0 {
            (
                "True",
                "MinimumReplicasAvailable",
                "The pod runs as a local process.",
            )
        } else {
            ("False", "ScaledToZero", "The Deployment has no replicas.")
        };
        let status = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "status": {
                "observedGeneration": generation,
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": replicas,
                "availableReplicas": replicas,
                "conditions": [{
                    "type": "Available",
                    "status": available,
                    "reason": reason,
                    "message": message,
                }],
            },
        });
        let api: Api<Deployment> = Api::namespaced(
            self.client.clone(),
            &deployment.namespace().unwrap_or_default(),
        );
        let _ = api
            .patch_status(
                &deployment.name_any(),
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&status),
            )
            .await;
    }
}

/// `namespace/name` of a Deployment: how the runner keys its pod.
fn deployment_key(deployment: &Deployment) -> String {
    format!(
        "{}/{}",
        deployment.namespace().unwrap_or_default(),
        deployment.name_any()
    )
}

fn pod_spec(deployment: &Deployment) -> Result<&PodSpec, PodError> {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .ok_or_else(|| PodError::Unsupported("the Deployment has no pod template".into()))
}

/// What identifies the pod a Deployment wants: its UID (a Deployment deleted and created again
/// has a new ServiceAccount, whose tokens the old one's process does not have) and its template.
fn template_hash(deployment: &Deployment) -> String {
    let template = deployment.spec.as_ref().map(|s| &s.template);
    format!(
        "{} {}",
        deployment.uid().unwrap_or_default(),
        serde_json::to_string(&template).unwrap_or_default()
    )
}

/// The container's environment, `fieldRef`s resolved as a kubelet resolves them.
fn environment(
    container: &Container,
    spec: &PodSpec,
    context: &PodContext,
    host_ip: Ipv4Addr,
) -> Result<Vec<(String, String)>, PodError> {
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(value), _) => expand(value, &env),
            (None, None) => String::new(),
            (None, Some(from)) => match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                Some("metadata.namespace") => context.namespace.clone(),
                Some("metadata.name") => format!("{}-local", context.deployment),
                Some("metadata.uid") => context.uid.clone(),
                Some("status.podIP" | "status.hostIP") => host_ip.to_string(),
                Some("spec.serviceAccountName") => spec
                    .service_account_name
                    .clone()
                    .unwrap_or_else(|| "default".into()),
                other => {
                    return Err(PodError::Unsupported(format!(
                        "environment variable {} comes from {other:?}, which this runner does \
                         not resolve",
                        var.name
                    )));
                }
            },
        };
        env.push((var.name.clone(), value));
    }
    Ok(env)
}

/// `$(VAR)` replaced by the variable's value where it is defined (as a kubelet does; `$$` escapes).
fn expand(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('$') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some((_, value)) = env.iter().rev().find(|(k, _)| *k == inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Whether the argument `arg` sets the same `--flag` as `override_`.
fn same_flag(arg: &str, override_: &str) -> bool {
    let name = |a: &str| a.split('=').next().unwrap_or(a).to_string();
    arg.starts_with("--") && name(arg) == name(override_)
}

fn free_port() -> Result<u16, PodError> {
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
        .map_err(io("reserving a free port".into()))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(io("reading a free port".into()))
}

/// Whether `GET path` on the local `port` answers 200 within two seconds.
pub(crate) async fn http_ok(port: u16, path: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<bool, std::io::Error>(
            response.starts_with(b"HTTP/1.0 200") || response.starts_with(b"HTTP/1.1 200"),
        )
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Ok(true))
    )
}

/// Writes `content` readable by this user only: tokens and private keys.
fn write_private(path: &Path, content: &[u8]) -> Result<(), PodError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(content))
        .map_err(io(format!("writing {}", path.display())))
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> PodError {
    move |source| PodError::Io { what, source }
}

fn api(what: String) -> impl FnOnce(kube::Error) -> PodError {
    move |source| PodError::Api { what, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_not_part_of_the_repository_but_a_registry_port_is() {
        assert_eq!(repository("ghcr.io/a/b:v1"), "ghcr.io/a/b");
        assert_eq!(repository("localhost:5000/a/b"), "localhost:5000/a/b");
        assert_eq!(repository("localhost:5000/a/b:v2"), "localhost:5000/a/b");
        assert_eq!(repository("a/b@sha256:00"), "a/b");
    }

    #[test]
    fn the_machines_own_addresses_come_from_the_routing_table() {
        let table = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     \
                     +-- 127.0.0.0/8 2 0 2\n        |-- 127.0.0.1\n           /32 host LOCAL\n     \
                     |-- 192.0.2.0\n        /24 link UNICAST\n     |-- 192.0.2.2\n        \
                     /32 host LOCAL\n     |-- 192.0.2.255\n        /32 link BROADCAST\n\
                     Local:\n     |-- 192.0.2.2\n        /32 host LOCAL\n";
        assert_eq!(
            local_addresses(table),
            [Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(192, 0, 2, 2)]
        );
    }

    #[test]
    fn variables_expand_as_a_kubelet_expands_them() {
        let env = vec![("NS".to_string(), "capi-system".to_string())];
        assert_eq!(expand("--ns=$(NS)", &env), "--ns=capi-system");
        assert_eq!(expand("$(MISSING) $$(NS) $", &env), "$(MISSING) $(NS) $");
    }

    #[test]
    fn an_override_replaces_every_form_of_its_flag() {
        assert!(same_flag("--webhook-port=9443", "--webhook-port=1"));
        assert!(same_flag("--leader-elect", "--leader-elect=false"));
        assert!(!same_flag("--webhook-port-x=1", "--webhook-port=1"));
        assert!(!same_flag("value", "--webhook-port=1"));
    }
}
