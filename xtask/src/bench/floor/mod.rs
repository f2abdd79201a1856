//! The **floor**: the least any correct controller must write to bring N machines from nothing
//! to Running under the contract, written by a minimal kube client at the manager's own limits,
//! against the same API server in the same run.
//!
//! Per machine, in causal order, each write by the client of the family of controllers that makes
//! it (each family has its own rate limit, as in the manager: `ManagerConfig::qps` per family):
//!
//! - core: create the `Machine` (finalizer, labels and owner already set, as a MachineSet creates
//!   it), its `KubeadmConfig` and its `InMemoryMachine` (3 creates);
//! - bootstrap: create the bootstrap data `Secret`, then the `KubeadmConfig` status (data ready)
//!   (2);
//! - core: the `Machine`'s `spec.bootstrap.dataSecretName` (1);
//! - infrastructure: the `InMemoryMachine`'s finalizer (before any instance may exist), its
//!   `spec.providerID`, then its status (provisioned, addresses, `Ready`) (3);
//! - core: the `Machine`'s `spec.providerID`, then its status (Running, node reference,
//!   conditions) (2);
//! - core: the MachineHealthCheck's mark, `HealthCheckSucceeded=True`, once the machine's node
//!   is there (1; not on the first machine, which stands for the control-plane machine). The
//!   scenario's cluster has a MachineHealthCheck over its workers, and the
//!   MachineHealthCheck contract has its controller mark every healthy machine it checks (upstream
//!   v1.14 patches each one: `patchHealthyTargets`); it is a controller of its own, so the mark is
//!   a write of its own, after the Machine controller's.
//!
//! That is 12 writes per worker, 11 for the control-plane machine; no events (the contract asks
//! for none). The floor stands for the one-cluster scenario (one control-plane machine, the rest
//! workers of one MachineDeployment under one health check). Like a controller, the floor holds a
//! watch on each of the four kinds for its whole run (the API server serves them while it writes). Nothing is read back: every write is made from what the floor wrote before.
//! The manager's time divided by this one says what the SDK's machinery costs on top of the API
//! server's own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use capi_bootstrap::api::KubeadmConfig;
use capi_core::api::Machine;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Patch, PatchParams, PostParams};
use kube::client::ClientBuilder;
use kube::runtime::watcher;
use kube::{Api, Client};
use provider_inmemory::api::InMemoryMachine;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::Options;
use super::measure::{difference, request_counts, total};
use super::rig::{Rig, create};
use crate::command::step;

const NAMESPACE: &str = "floor";
/// The writes of one worker (the control-plane machine has one fewer: no health check mark).
pub(crate) const WRITES_PER_WORKER: u32 = 12;

pub(crate) mod clusters;

/// What the floor program took.
pub(crate) struct Floor {
    pub(crate) seconds: f64,
    /// Writes the API server counted.
    pub(crate) writes: f64,
    /// Which of the scenario's times the floor's time stands for.
    pub(crate) end: FloorEnd,
}

/// Which of the scenario's times a floor's time stands for: its last write is what ends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloorEnd {
    /// Every machine `Running` (the one-cluster scenario).
    MachinesRunning,
    /// Every cluster `Available` (the many-clusters scenario).
    ClustersAvailable,
}

impl FloorEnd {
    /// The JSON key of the scenario's time the floor is compared with.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Self::MachinesRunning => "seconds_to_all_machines_running",
            Self::ClustersAvailable => "seconds_to_all_clusters_available",
        }
    }
}

/// One client per family of controllers, each with the manager's rate limit.
#[derive(Clone)]
struct Families {
    core: Client,
    bootstrap: Client,
    infrastructure: Client,
}

/// Runs the floor program for `machines` machines (the manager must not be running: it would
/// reconcile these objects).
pub(crate) async fn run(rig: &Rig, options: &Options, machines: u32) -> Result<Floor> {
    step(&format!(
        "Floor program: the writes the contract requires for {machines} machines ({WRITES_PER_WORKER} per worker, one fewer for the control-plane machine), {} workers, qps {} burst {} per family, with watches",
        options.manager.concurrency, options.manager.qps, options.manager.burst
    ));
    let admin = rig.client.clone();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let config = rig.management.config().await?;
    let family = || family_client(&config, options);
    let families = Families {
        core: family()?,
        bootstrap: family()?,
        infrastructure: family()?,
    };
    let watches = vec![
        watch::<Machine>(&families.core, NAMESPACE),
        watch::<KubeadmConfig>(&families.bootstrap, NAMESPACE),
        watch::<InMemoryMachine>(&families.infrastructure, NAMESPACE),
        watch::<Secret>(&families.bootstrap, NAMESPACE),
    ];
    // Bootstrap data of a realistic size (a rendered cloud-config is a few KiB).
    let user_data = "#cloud-config\n".to_string() + &"# kubeadm join …\n".repeat(200);

    let user_data: Arc<str> = user_data.into();
    let (seconds, writes) = in_workers(&admin, options.manager.concurrency, machines, move |i| {
        let (families, user_data) = (families.clone(), Arc::clone(&user_data));
        async move { one_machine(&families, i, &user_data).await }
    })
    .await?;
    for watch in watches {
        watch.abort();
    }
    println!("    {machines} machines written in {seconds:.1}s ({writes:.0} writes)");
    Ok(Floor {
        seconds,
        writes,
        end: FloorEnd::MachinesRunning,
    })
}

/// Runs `one(i)` for every `i` below `count`, `workers` at a time (a worker takes the next
/// index when its last is done); returns the seconds it took and the writes the API server
/// counted meanwhile.
async fn in_workers<F, Fut>(admin: &Client, workers: u16, count: u32, one: F) -> Result<(f64, f64)>
where
    F: Fn(u32) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let before = request_counts(admin).await?;
    let started = Instant::now();
    let next = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (next, one) = (Arc::clone(&next), one.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return Ok::<_, anyhow::Error>(());
                    }
                    one(i).await?;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.context("a floor worker panicked")??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let requests = difference(&request_counts(admin).await?, &before);
    Ok((seconds, total(&requests, true)))
}

/// A client of one family of controllers: the manager's configuration and rate limit (`burst`
/// requests per window of `burst / qps` seconds, as the manager's own family clients).
fn family_client(config: &kube::Config, options: &Options) -> Result<Client> {
    let window = Duration::from_secs_f64(f64::from(options.manager.burst) / options.manager.qps);
    let rate_limit = tower::limit::RateLimitLayer::new(u64::from(options.manager.burst), window);
    Ok(ClientBuilder::try_from(config.clone())?
        .with_layer(&rate_limit)
        .build())
}

/// A watch of `K` in `namespace`, drained until aborted.
fn watch<K>(client: &Client, namespace: &str) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    tokio::spawn(watcher(api, watcher::Config::default()).for_each(|_| std::future::ready(())))
}

/// The writes of one machine.
async fn one_machine(families: &Families, i: u32, user_data: &str) -> Result<()> {
    let name = format!("floor-{i}");
    let cluster = "floor";
    let labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
    let provider_id = format!("inmemory:///floor/{name}");
    let core = &families.core;
    create::<Machine>(
        core,
        NAMESPACE,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "labels": labels, "finalizers": ["machine.cluster.x-k8s.io"]},
            "spec": {"clusterName": cluster, "version": "v1.33.0",
                     "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}},
                     "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": name}}
        }),
    )
    .await?;
    create::<KubeadmConfig>(
        core,
        NAMESPACE,
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {"name": name, "labels": labels}, "spec": {}
        }),
    )
    .await?;
    create::<InMemoryMachine>(
        core,
        NAMESPACE,
        json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "InMemoryMachine",
            "metadata": {"name": name, "labels": labels}, "spec": {"flavor": "small"}
        }),
    )
    .await?;
    create::<Secret>(
        &families.bootstrap,
        NAMESPACE,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": labels},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": user_data, "format": "cloud-config"}
        }),
    )
    .await?;
    patch_status::<KubeadmConfig>(
        &families.bootstrap,
        &name,
        json!({"status": {"dataSecretName": name, "initialization": {"dataSecretCreated": true}}}),
    )
    .await?;
    patch::<Machine>(
        core,
        &name,
        json!({"spec": {"bootstrap": {"dataSecretName": name}}}),
    )
    .await?;
    let infrastructure = &families.infrastructure;
    patch::<InMemoryMachine>(
        infrastructure,
        &name,
        json!({"metadata": {"finalizers": ["inmemorymachine.infrastructure.capi-rs.dev"]}}),
    )
    .await?;
    patch::<InMemoryMachine>(
        infrastructure,
        &name,
        json!({"spec": {"providerID": provider_id}}),
    )
    .await?;
    patch_status::<InMemoryMachine>(
        infrastructure,
        &name,
        json!({"status": {"initialization": {"provisioned": true},
                          "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                          "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                                          "message": "", "lastTransitionTime": "2026-11-25T00:00:00Z"}]}}),
    )
    .await?;
    patch::<Machine>(core, &name, json!({"spec": {"providerID": provider_id}})).await?;
    patch_status::<Machine>(
        core,
        &name,
        json!({"status": {"phase": "Running", "observedGeneration": 1, "nodeRef": {"name": name},
                          "initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true},
                          "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                                          "message": "", "lastTransitionTime": "2026-11-25T00:00:00Z"}]}}),
    )
    .await?;
    if i == 0 {
        // The control-plane machine: no MachineHealthCheck of the scenario selects it.
        return Ok(());
    }
    // The MachineHealthCheck's mark (a merge patch replaces the list: both conditions are sent).
    patch_status::<Machine>(
        core,
        &name,
        json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "Ready",
             "message": "", "lastTransitionTime": "2026-11-25T00:00:00Z"},
            {"type": "HealthCheckSucceeded", "status": "True", "reason": "HealthCheckSucceeded",
             "message": "", "lastTransitionTime": "2026-11-25T00:00:00Z"}]}}),
    )
    .await?;
    Ok(())
}

async fn patch<K>(client: &Client, name: &str, patch: serde_json::Value) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), NAMESPACE)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

async fn patch_status<K>(client: &Client, name: &str, patch: serde_json::Value) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), NAMESPACE)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
