//! The two stacks a side-by-side scenario runs, one after the other, each on a fresh management
//! control plane built from the same kube-apiserver and etcd:
//!
//! - **capi-rs**: `inmemory-manager` (this workspace's core, kubeadm bootstrap,
//!   KubeadmControlPlane and in-memory provider controllers), `inmemory-cloud` (the simulated
//!   cloud), and a second kube-apiserver + etcd where the simulated kubelets register the nodes
//!   of every workload cluster;
//! - **upstream**: Cluster API v1.14's core, kubeadm bootstrap (CABPK) and kubeadm control plane
//!   (KCP) managers and CAPD with its in-memory backend (`cargo xtask upstream install`), which
//!   fakes every workload cluster's API server, etcd and static pods inside CAPD's own process.
//!
//! Both get the same documents: this workspace's built-in in-memory template rendered by
//! `capictl generate` (Cluster, KubeadmControlPlane, MachineDeployment, MachineHealthCheck,
//! kubeadm bootstrap templates), with the infrastructure kinds swapped for upstream's `DevCluster`
//! and `DevMachineTemplate` (`backend.inMemory`) on the upstream side; the same client limits and
//! reconciles at once per kind ([`PeerSettings`]).

use std::path::Path;

use anyhow::{Context, Result, bail};
use capi_testing::envtest::{Assets, ControlPlane, ControlPlaneOptions};
use capi_testing::upstream::{
    CLUSTER_API_VERSION, COMPONENTS, PeerSettings, UpstreamAssets, UpstreamPeer,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::Options;
use super::measure;
use super::rig::{CloudOptions, Rig};

/// The Kubernetes version every generated cluster asks for (both stacks).
pub(crate) const KUBERNETES_VERSION: &str = "v1.35.0";

/// Which implementation of Cluster API a round runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stack {
    /// This workspace.
    Ours,
    /// Upstream Cluster API v1.14 with CAPD's in-memory backend.
    Upstream,
}

impl Stack {
    /// The name in tables and JSON.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Ours => "capi-rs",
            Self::Upstream => "upstream",
        }
    }

    /// What runs, and its version.
    pub(crate) fn describe(self) -> String {
        match self {
            Self::Ours => format!(
                "capi-rs {} (commit {}): inmemory-manager (core, kubeadm bootstrap, KubeadmControlPlane, in-memory provider) + inmemory-cloud + a workload kube-apiserver for the simulated nodes",
                env!("CARGO_PKG_VERSION"),
                crate::command::built_commit()
            ),
            Self::Upstream => format!(
                "upstream Cluster API {CLUSTER_API_VERSION}: core, CABPK, KCP and CAPD (in-memory backend), built from Go modules"
            ),
        }
    }
}

/// What runs a cluster's workers, and which built-in in-memory template renders it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Workers {
    /// The default template: a MachineDeployment, with a MachineHealthCheck over it when
    /// `health_check`.
    Deployment { health_check: bool },
    /// The `machinepool` flavor: one MachinePool over an `InMemoryMachinePool` (a scale set of
    /// the simulated cloud), whose instances each get an `InMemoryMachine` and a Machine
    /// (MachinePool Machines).
    Pool,
}

impl Workers {
    /// The kind of the workers' owner (`cluster.x-k8s.io/v1beta2`).
    pub(crate) fn owner_kind(self) -> &'static str {
        match self {
            Self::Deployment { .. } => "MachineDeployment",
            Self::Pool => "MachinePool",
        }
    }

    /// The flavor of the built-in in-memory templates that renders them.
    fn flavor(self) -> Option<&'static str> {
        match self {
            Self::Deployment { .. } => None,
            Self::Pool => Some("machinepool"),
        }
    }
}

/// How long a simulated machine takes to boot.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Boot {
    pub(crate) ms: u64,
    /// Relative jitter (0.2 = ± 20 %).
    pub(crate) jitter: f64,
}

/// A stack running on its own fresh management control plane; dropping it stops everything.
pub(crate) struct Running {
    /// An admin client of the management API server.
    pub(crate) client: Client,
    pub(crate) namespace: String,
    world: World,
}

enum World {
    Ours(Box<Rig>),
    Upstream(Box<UpstreamWorld>),
}

struct UpstreamWorld {
    // The peer is dropped before the control plane it runs against.
    peer: UpstreamPeer,
    _control_plane: ControlPlane,
}

/// CPU seconds and peak resident memory of a group of processes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Usage {
    pub(crate) cpu_seconds: f64,
    /// The sum of each process's peak (an upper bound of the group's peak at any one moment).
    pub(crate) peak_rss_mib: f64,
}

impl Usage {
    fn of(pids: &[u32]) -> Result<Self> {
        let mut usage = Self::default();
        for pid in pids {
            let (rss, cpu) = measure::usage(*pid)?;
            usage.cpu_seconds += cpu;
            usage.peak_rss_mib += rss;
        }
        Ok(usage)
    }

    pub(crate) fn json(&self) -> Value {
        json!({"cpu_seconds": self.cpu_seconds, "peak_rss_mib": self.peak_rss_mib})
    }
}

/// The processes of a stack, measured apart.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StackUsage {
    /// The controllers: `inmemory-manager`; upstream's four managers (CAPD's in-memory backend,
    /// the fake workload clusters included: it runs inside CAPD).
    pub(crate) controllers: Usage,
    /// Every process of the stack: the controllers plus, for capi-rs, `inmemory-cloud` and the
    /// workload kube-apiserver and etcd (upstream has nothing outside its managers).
    pub(crate) all: Usage,
}

impl StackUsage {
    pub(crate) fn json(&self) -> Value {
        json!({"controllers": self.controllers.json(), "all_processes": self.all.json()})
    }
}

impl Running {
    /// Starts `stack` at `options`' settings with simulated machines booting as `boot` says, and
    /// creates `namespace`.
    pub(crate) async fn start(
        stack: Stack,
        options: &Options,
        boot: Boot,
        namespace: &str,
        audit_log: Option<&Path>,
    ) -> Result<Self> {
        match stack {
            Stack::Ours => {
                let cloud = CloudOptions {
                    boot_ms: boot.ms,
                    jitter: boot.jitter,
                    ..CloudOptions::default()
                };
                let mut rig = Rig::start(
                    &options.assets_dir,
                    &options.bin_dir,
                    &cloud,
                    options.manager.clone(),
                    namespace,
                    audit_log,
                )
                .await?;
                rig.start_manager()?;
                Ok(Self {
                    client: rig.client.clone(),
                    namespace: namespace.to_string(),
                    world: World::Ours(Box::new(rig)),
                })
            }
            Stack::Upstream => {
                let assets = UpstreamAssets::locate()?;
                let mut control_plane_options = ControlPlaneOptions::default();
                if let Some(path) = audit_log {
                    control_plane_options = control_plane_options.with_audit_log(path);
                }
                let control_plane = ControlPlane::start_with_options(
                    &Assets::in_dir(&options.assets_dir)?,
                    &control_plane_options,
                )
                .await?;
                let peer = UpstreamPeer::start_with(
                    &control_plane,
                    &assets,
                    &COMPONENTS,
                    &upstream_settings(options),
                )
                .await?;
                let client = control_plane.client().await?;
                let ns: Namespace =
                    serde_json::from_value(json!({"metadata": {"name": namespace}}))?;
                Api::<Namespace>::all(client.clone())
                    .create(&PostParams::default(), &ns)
                    .await?;
                println!("    upstream managers' logs: {}", peer.dir().display());
                Ok(Self {
                    client,
                    namespace: namespace.to_string(),
                    world: World::Upstream(Box::new(UpstreamWorld {
                        peer,
                        _control_plane: control_plane,
                    })),
                })
            }
        }
    }

    /// The rig of capi-rs's stack.
    pub(crate) fn rig(&self) -> Option<&Rig> {
        match &self.world {
            World::Ours(rig) => Some(rig),
            World::Upstream(_) => None,
        }
    }

    /// The rig of capi-rs's stack, to stop its manager.
    pub(crate) fn rig_mut(&mut self) -> Option<&mut Rig> {
        match &mut self.world {
            World::Ours(rig) => Some(rig),
            World::Upstream(_) => None,
        }
    }

    /// `Err` if a process of the stack has exited.
    pub(crate) fn check(&mut self) -> Result<()> {
        match &mut self.world {
            World::Ours(rig) => rig.manager().map(|_| ()),
            World::Upstream(world) => world
                .peer
                .check()
                .map_err(|e| anyhow::anyhow!("{e}\n{}", world.peer.log_tails())),
        }
    }

    /// The controllers' processes: `inmemory-manager`, or upstream's managers.
    fn controller_pids(&self) -> Result<Vec<u32>> {
        Ok(match &self.world {
            World::Ours(rig) => vec![rig.manager()?.id()],
            World::Upstream(world) => world.peer.pids(),
        })
    }

    /// The controllers' resident memory now (MiB, summed over their processes).
    pub(crate) fn controllers_resident_mib(&self) -> Result<f64> {
        self.controller_pids()?
            .iter()
            .map(|pid| measure::resident(*pid))
            .sum()
    }

    /// The stack's CPU and memory so far.
    pub(crate) fn usage(&self) -> Result<StackUsage> {
        let controllers = self.controller_pids()?;
        match &self.world {
            World::Ours(rig) => {
                let mut all = controllers.clone();
                all.push(rig.cloud_pid());
                all.extend(rig.workload.pids());
                Ok(StackUsage {
                    controllers: Usage::of(&controllers)?,
                    all: Usage::of(&all)?,
                })
            }
            World::Upstream(_) => {
                let usage = Usage::of(&controllers)?;
                Ok(StackUsage {
                    controllers: usage,
                    all: usage,
                })
            }
        }
    }

    /// The objects of cluster `name` with `workers` workers run by `kind` (and 1 control-plane
    /// machine); whatever the stack needs outside the clock (capi-rs: the `<name>-kubeconfig`
    /// Secret pointing at the workload API server) is created now.
    pub(crate) async fn prepare_cluster(
        &self,
        name: &str,
        workers: u32,
        kind: Workers,
        boot: Boot,
    ) -> Result<Vec<DynamicObject>> {
        let objects =
            generated_cluster_with(name, &self.namespace, workers, kind, KUBERNETES_VERSION)?;
        match &self.world {
            World::Ours(rig) => {
                Api::namespaced(self.client.clone(), &self.namespace)
                    .create(
                        &PostParams::default(),
                        &rig.workload_kubeconfig(name, &self.namespace)?,
                    )
                    .await?;
                Ok(objects)
            }
            World::Upstream(_) => objects
                .into_iter()
                .map(|object| to_upstream(object, boot))
                .collect(),
        }
    }

    /// Creates `objects` (one cluster's, in order).
    pub(crate) async fn create(&self, objects: &[DynamicObject]) -> Result<()> {
        for object in objects {
            let types = object.types.as_ref().context("an object without a kind")?;
            let gvk = GroupVersionKind::try_from(types)?;
            let api: Api<DynamicObject> = Api::namespaced_with(
                self.client.clone(),
                &self.namespace,
                &ApiResource::from_gvk(&gvk),
            );
            api.create(&PostParams::default(), object)
                .await
                .with_context(|| {
                    format!(
                        "creating {} {:?}",
                        types.kind,
                        object.metadata.name.as_deref().unwrap_or_default()
                    )
                })?;
        }
        Ok(())
    }
}

/// The upstream managers' settings matching capi-rs's manager: the same QPS, burst and reconciles
/// at once per kind.
pub(crate) fn upstream_settings(options: &Options) -> PeerSettings {
    PeerSettings {
        qps: Some(options.manager.qps),
        burst: Some(options.manager.burst),
        concurrency: Some(options.manager.concurrency),
    }
}

/// How long upstream's in-memory backend waits before the node, the API server and etcd of a
/// provisioned VM come up (its own templates use 2 s each): nothing, as the simulated kubelets of
/// capi-rs register a node the moment its instance has booted.
const UPSTREAM_COMPONENT_STARTUP: &str = "0s";

/// The annotation every upstream `DevCluster` gets (see [`to_upstream`]).
const UPSTREAM_ANNOTATION: &str = "bench.example/run";

/// The documents of cluster `name`: the built-in in-memory template as `capictl generate`
/// renders it asking for Kubernetes `version`, 1 control-plane machine and `workers` workers run
/// by `kind` (a MachineDeployment with or without a MachineHealthCheck, or a MachinePool);
/// without workers, without the workers' objects at all.
pub(crate) fn generated_cluster_with(
    name: &str,
    namespace: &str,
    workers: u32,
    kind: Workers,
    version: &str,
) -> Result<Vec<DynamicObject>> {
    let inputs = capi_cli::generate::Inputs {
        cluster_name: name.into(),
        namespace: Some(namespace.into()),
        kubernetes_version: Some(version.into()),
        control_plane_machine_count: Some(1),
        worker_machine_count: Some(workers),
        ..Default::default()
    };
    let yaml = capi_cli::generate::render(
        capi_cli::generate::built_in("inmemory", kind.flavor())?,
        &inputs,
        |_| None,
    )?;
    let mut objects = capi_testing::manifest::parse(&yaml)?;
    let kind_of = |o: &DynamicObject| o.types.as_ref().map(|t| t.kind.clone());
    if workers == 0 {
        let worker_pool = [format!("{name}-md-0"), format!("{name}-mp-0")];
        objects.retain(|o| {
            !worker_pool
                .iter()
                .any(|w| o.metadata.name.as_deref() == Some(w.as_str()))
        });
    } else if kind
        == (Workers::Deployment {
            health_check: false,
        })
    {
        objects.retain(|o| kind_of(o).as_deref() != Some("MachineHealthCheck"));
    }
    Ok(objects)
}

/// `object` for upstream's stack: `InMemoryCluster` → `DevCluster`, `InMemoryMachineTemplate` →
/// `DevMachineTemplate` (both `backend.inMemory`, machines booting as `boot` says), and every
/// reference to them rewritten; everything else as it is.
fn to_upstream(object: DynamicObject, boot: Boot) -> Result<DynamicObject> {
    let mut value = serde_json::to_value(&object)?;
    let in_memory_vm = json!({
        "vm": {"provisioning": {
            "startupDuration": format!("{}ms", boot.ms),
            "startupJitter": format!("{}", boot.jitter),
        }},
        "node": {"provisioning": {"startupDuration": UPSTREAM_COMPONENT_STARTUP}},
        "apiServer": {"provisioning": {"startupDuration": UPSTREAM_COMPONENT_STARTUP}},
        "etcd": {"provisioning": {"startupDuration": UPSTREAM_COMPONENT_STARTUP}},
    });
    match value["kind"].as_str() {
        Some("InMemoryCluster") => {
            value["apiVersion"] = json!("infrastructure.cluster.x-k8s.io/v1beta2");
            value["kind"] = json!("DevCluster");
            value["spec"] = json!({"backend": {"inMemory": {}}});
            // CAPD v1.14's in-memory backend writes into the DevCluster's annotations without
            // making the map first: a DevCluster without any panics its reconcile (those from a
            // ClusterClass always have some).
            value["metadata"]["annotations"] = json!({UPSTREAM_ANNOTATION: "side-by-side"});
        }
        Some("InMemoryMachineTemplate") => {
            value["apiVersion"] = json!("infrastructure.cluster.x-k8s.io/v1beta2");
            value["kind"] = json!("DevMachineTemplate");
            value["spec"] = json!({"template": {"spec": {"backend": {"inMemory": in_memory_vm}}}});
        }
        Some(kind) if kind.starts_with("InMemory") => {
            bail!("the side-by-side run has no upstream counterpart for {kind}")
        }
        _ => rewrite_references(&mut value),
    }
    Ok(serde_json::from_value(value)?)
}

/// Rewrites every `{apiGroup, kind, name}` reference to an in-memory kind into upstream's.
fn rewrite_references(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("apiGroup").and_then(Value::as_str) == Some("infrastructure.capi-rs.dev") {
                let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default();
                let upstream = kind.replacen("InMemory", "Dev", 1);
                map.insert("kind".into(), json!(upstream));
                map.insert("apiGroup".into(), json!("infrastructure.cluster.x-k8s.io"));
            }
            for child in map.values_mut() {
                rewrite_references(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_references),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_gets_the_same_documents_with_its_own_infrastructure_kinds() {
        let ours = generated_cluster_with(
            "c1",
            "ns",
            2,
            Workers::Deployment { health_check: true },
            KUBERNETES_VERSION,
        )
        .unwrap();
        let kinds: Vec<_> = ours
            .iter()
            .map(|o| o.types.as_ref().unwrap().kind.clone())
            .collect();
        assert!(kinds.contains(&"MachineDeployment".to_string()));
        let boot = Boot {
            ms: 10_000,
            jitter: 0.2,
        };
        let upstream: Vec<Value> = ours
            .into_iter()
            .map(|o| serde_json::to_value(to_upstream(o, boot).unwrap()).unwrap())
            .collect();
        let text = serde_json::to_string(&upstream).unwrap();
        assert!(!text.contains("capi-rs.dev"), "{text}");
        assert!(!text.contains("InMemory"), "{text}");
        let template = upstream
            .iter()
            .find(|o| o["kind"] == "DevMachineTemplate")
            .unwrap();
        assert_eq!(
            template["spec"]["template"]["spec"]["backend"]["inMemory"]["vm"]["provisioning"]["startupDuration"],
            "10000ms"
        );
        let kcp = upstream
            .iter()
            .find(|o| o["kind"] == "KubeadmControlPlane")
            .unwrap();
        assert_eq!(
            kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"],
            json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DevMachineTemplate", "name": "c1-control-plane"})
        );
        assert_eq!(kcp["spec"]["replicas"], 1);
    }

    #[test]
    fn a_single_node_cluster_has_no_worker_pool() {
        let objects = generated_cluster_with(
            "c1",
            "ns",
            0,
            Workers::Deployment { health_check: true },
            KUBERNETES_VERSION,
        )
        .unwrap();
        let kinds: Vec<_> = objects
            .iter()
            .map(|o| o.types.as_ref().unwrap().kind.as_str())
            .collect();
        assert_eq!(
            kinds,
            [
                "Cluster",
                "InMemoryCluster",
                "InMemoryMachineTemplate",
                "KubeadmControlPlane"
            ]
        );
    }

    #[test]
    fn a_pool_cluster_is_the_machinepool_flavor_and_has_no_upstream_counterpart() {
        let objects =
            generated_cluster_with("c1", "ns", 7, Workers::Pool, KUBERNETES_VERSION).unwrap();
        let pool = objects
            .iter()
            .find(|o| o.types.as_ref().unwrap().kind == "MachinePool")
            .unwrap();
        assert_eq!(pool.data["spec"]["replicas"], 7);
        assert!(
            objects
                .iter()
                .any(|o| o.types.as_ref().unwrap().kind == "InMemoryMachinePool")
        );
        let refused = objects.into_iter().map(|o| to_upstream(o, Boot::default()));
        assert!(refused.into_iter().any(|o| o.is_err()));
    }

    #[test]
    fn a_deployment_without_health_check_differs_only_by_the_health_check() {
        let kinds = |health_check: bool| -> Vec<String> {
            let workers = Workers::Deployment { health_check };
            generated_cluster_with("c1", "ns", 7, workers, KUBERNETES_VERSION)
                .unwrap()
                .iter()
                .map(|o| o.types.as_ref().unwrap().kind.clone())
                .collect()
        };
        let (with, without) = (kinds(true), kinds(false));
        assert!(with.contains(&"MachineHealthCheck".to_string()));
        let with: Vec<String> = with
            .into_iter()
            .filter(|k| k != "MachineHealthCheck")
            .collect();
        assert_eq!(with, without);
    }
}
