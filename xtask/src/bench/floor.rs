//! The **floor**: the least any controller must write to bring N machines from nothing to Running,
//! written by a minimal kube client with the manager's own limits (the same QPS/burst token bucket,
//! as many workers as the manager's concurrency), against the same API server in the same run.
//!
//! Per machine, in causal order: create the `Machine`, its `KubeadmConfig`, its `InMemoryMachine`
//! and the bootstrap data `Secret` (4 creates); then the status of the `KubeadmConfig` (data ready),
//! the `InMemoryMachine` (provisioned) and the `Machine` (Running) (3 status merge patches). The
//! manager's time divided by this one says what the SDK's machinery costs on top of the API
//! server's own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use capi_bootstrap::api::KubeadmConfig;
use capi_core::api::Machine;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Patch, PatchParams, PostParams};
use kube::client::ClientBuilder;
use kube::{Api, Client};
use provider_inmemory::api::InMemoryMachine;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::Options;
use super::measure::{difference, request_counts, total};
use super::rig::{Rig, create};
use crate::command::step;

const NAMESPACE: &str = "floor";

/// What the floor program took.
pub(crate) struct Floor {
    pub(crate) seconds: f64,
    /// Writes the API server counted.
    pub(crate) writes: f64,
}

/// Runs the floor program for `machines` machines (the manager must not be running: it would
/// reconcile these objects).
pub(crate) async fn run(rig: &Rig, options: &Options, machines: u32) -> Result<Floor> {
    step(&format!(
        "Floor program: the same unavoidable writes for {machines} machines (4 creates + 3 status writes each), {} workers, qps {} burst {}",
        options.manager.concurrency, options.manager.qps, options.manager.burst
    ));
    let admin = rig.client.clone();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let window = Duration::from_secs_f64(f64::from(options.manager.burst) / options.manager.qps);
    let rate_limit = tower::limit::RateLimitLayer::new(u64::from(options.manager.burst), window);
    let client = ClientBuilder::try_from(rig.management.config().await?)?
        .with_layer(&rate_limit)
        .build();
    // Bootstrap data of a realistic size (a rendered cloud-config is a few KiB).
    let user_data = "#cloud-config\n".to_string() + &"# kubeadm join …\n".repeat(200);

    let before = request_counts(&admin).await?;
    let started = Instant::now();
    let next = Arc::new(AtomicU32::new(0));
    let workers: Vec<_> = (0..options.manager.concurrency)
        .map(|_| {
            let client = client.clone();
            let next = Arc::clone(&next);
            let user_data = user_data.clone();
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= machines {
                        return Ok::<_, anyhow::Error>(());
                    }
                    one_machine(&client, i, &user_data).await?;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.context("a floor worker panicked")??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let requests = difference(&request_counts(&admin).await?, &before);
    let writes = total(&requests, true);
    println!("    {machines} machines written in {seconds:.1}s ({writes:.0} writes)");
    Ok(Floor { seconds, writes })
}

/// The seven writes of one machine.
async fn one_machine(client: &Client, i: u32, user_data: &str) -> Result<()> {
    let name = format!("floor-{i}");
    let cluster = "floor";
    let labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
    create::<Machine>(
        client,
        NAMESPACE,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "labels": labels},
            "spec": {"clusterName": cluster, "version": "v1.33.0",
                     "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}},
                     "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": name}}
        }),
    )
    .await?;
    create::<KubeadmConfig>(
        client,
        NAMESPACE,
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {"name": name, "labels": labels}, "spec": {}
        }),
    )
    .await?;
    create::<InMemoryMachine>(
        client,
        NAMESPACE,
        json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "InMemoryMachine",
            "metadata": {"name": name, "labels": labels}, "spec": {"flavor": "small"}
        }),
    )
    .await?;
    create::<Secret>(
        client,
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
        client,
        &name,
        json!({"status": {"dataSecretName": name, "initialization": {"dataSecretCreated": true}}}),
    )
    .await?;
    patch_status::<InMemoryMachine>(
        client,
        &name,
        json!({"status": {"initialization": {"provisioned": true},
                          "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}),
    )
    .await?;
    patch_status::<Machine>(
        client,
        &name,
        json!({"status": {"phase": "Running", "observedGeneration": 1,
                          "initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true}}}),
    )
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
