//! Scenario **many single-node clusters**: N clusters, each a `Cluster`, its `InMemoryCluster` and
//! one control-plane `Machine` with its `KubeadmConfig` (`kubeadm init`, so a CA and keys per
//! cluster) and `InMemoryMachine`, zero simulated latency. Measured: time from the first create
//! until every Machine is Running, API writes per cluster, the manager's CPU and peak RSS. The
//! upstream anchor is about 15 minutes for 1000 in-memory clusters on a 16-core laptop (Cluster
//! API v1.7, the metal3 scaling blog); the ratio to it is reported.
//!
//! Every cluster's `<cluster>-kubeconfig` points at the one workload API server, where the
//! simulated kubelets register all nodes (told apart by provider ID); those Secrets are written
//! before the clock starts.

use std::time::Instant;

use anyhow::{Result, bail};
use capi_bootstrap::api::KubeadmConfig;
use capi_core::api::{Cluster, Machine};
use futures::{StreamExt, TryStreamExt, stream};
use kube::api::PostParams;
use kube::{Api, Client};
use provider_inmemory::api::{InMemoryCluster, InMemoryMachine};
use serde_json::json;

use super::Options;
use super::measure::{self, difference, request_counts, total};
use super::one_cluster::MachineFollower;
use super::rig::{CloudOptions, Rig, create};
use crate::command::step;

const NAMESPACE: &str = "clusters";
/// Upstream Cluster API: ~15 minutes for 1000 in-memory clusters on a 16-core laptop.
const UPSTREAM_SECONDS_PER_1000: f64 = 15.0 * 60.0;
/// How many creates the driver keeps in flight.
const DRIVER_CONCURRENCY: usize = 32;

/// Runs the scenario; returns its result.
pub(crate) async fn run(options: &Options) -> Result<serde_json::Value> {
    let n = options.clusters;
    step(&format!(
        "Scenario clusters: {n} single-node clusters; starting the API servers and inmemory-cloud"
    ));
    let mut rig = Rig::start(
        &options.assets_dir,
        &options.bin_dir,
        &CloudOptions::default(),
        options.manager.clone(),
        NAMESPACE,
    )
    .await?;
    let client = rig.client.clone();
    let secrets = Api::namespaced(client.clone(), NAMESPACE);
    for i in 0..n {
        secrets
            .create(&PostParams::default(), &rig.workload_kubeconfig(&name(i))?)
            .await?;
    }
    rig.start_manager()?;
    let follower = MachineFollower::start(Api::<Machine>::namespaced(client.clone(), NAMESPACE));

    step(&format!(
        "Creating {n} clusters (5 objects each, {DRIVER_CONCURRENCY} creates in flight)"
    ));
    let before = request_counts(&client).await?;
    let (_, cpu_before) = rig.manager()?.usage()?;
    let started = Instant::now();
    stream::iter(0..n)
        .flat_map(|i| stream::iter(objects(&name(i))))
        .map(|object| create_one(&client, object))
        .buffer_unordered(DRIVER_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let created_after = started.elapsed().as_secs_f64();
    println!("    all objects created after {created_after:.1}s");
    follower.wait_until(started, n as usize).await?;
    let seconds = started.elapsed().as_secs_f64();
    let requests = difference(&request_counts(&client).await?, &before);
    let (peak_rss, cpu_after) = rig.manager()?.usage()?;
    drop(follower);
    rig.kill_manager();
    rig.check_provider_status(&client, NAMESPACE).await?;

    let writes = total(&requests, true);
    let per = f64::from(n);
    let upstream = UPSTREAM_SECONDS_PER_1000 * per / 1000.0;
    step(&format!("Results: {n} single-node clusters"));
    println!("    {}", options.manager.describe());
    measure::print_table(&[
        ("time to all Running".into(), format!("{seconds:.1} s")),
        (
            "of which the driver's creates".into(),
            format!("{created_after:.1} s"),
        ),
        (
            "clusters per second".into(),
            format!("{:.1}", per / seconds),
        ),
        (
            "upstream anchor (scaled to N)".into(),
            format!("{upstream:.0} s on 16 cores"),
        ),
        (
            "upstream time ÷ ours".into(),
            format!("{:.1}", upstream / seconds),
        ),
        ("API writes".into(), format!("{writes:.0}")),
        (
            "API writes per cluster".into(),
            format!("{:.2}", writes / per),
        ),
        (
            "manager CPU".into(),
            format!("{:.1} s", cpu_after - cpu_before),
        ),
        ("manager peak RSS".into(), format!("{peak_rss:.1} MiB")),
    ]);
    measure::print_writes(&requests, per, "cluster");
    let result = json!({
        "scenario": "clusters",
        "clusters": n,
        "date": jiff::Timestamp::now().to_string(),
        "command": options.command_line(),
        "host": measure::host(),
        "manager": options.manager.json(),
        "seconds": seconds,
        "driver_create_seconds": created_after,
        "upstream_anchor_seconds": upstream,
        "upstream_ratio": upstream / seconds,
        "writes": writes,
        "writes_per_cluster": writes / per,
        "reads": total(&requests, false),
        "manager_cpu_seconds": cpu_after - cpu_before,
        "manager_peak_rss_mib": peak_rss,
        "requests": measure::requests_json(&requests),
    });
    measure::write_result(&options.out, &format!("clusters-{n}.json"), &result)?;
    Ok(result)
}

fn name(i: u32) -> String {
    format!("c{i:05}")
}

/// What a user applies for one single-node cluster.
fn objects(cluster: &str) -> Vec<serde_json::Value> {
    let labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
    let machine = format!("{cluster}-cp");
    vec![
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
               "metadata": {"name": cluster},
               "spec": {"infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryCluster", "name": cluster}}}),
        json!({"apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "InMemoryCluster",
               "metadata": {"name": cluster, "labels": labels}, "spec": {}}),
        json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
               "metadata": {"name": machine, "labels": labels}, "spec": {}}),
        json!({"apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "InMemoryMachine",
               "metadata": {"name": machine, "labels": labels}, "spec": {"flavor": "medium"}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
               "metadata": {"name": machine,
                            "labels": {"cluster.x-k8s.io/cluster-name": cluster, "cluster.x-k8s.io/control-plane": ""}},
               "spec": {"clusterName": cluster, "version": "v1.33.0",
                        "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": machine}},
                        "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": machine}}}),
    ]
}

async fn create_one(client: &Client, object: serde_json::Value) -> Result<()> {
    match object["kind"].as_str() {
        Some("Cluster") => create::<Cluster>(client, NAMESPACE, object).await,
        Some("InMemoryCluster") => create::<InMemoryCluster>(client, NAMESPACE, object).await,
        Some("KubeadmConfig") => create::<KubeadmConfig>(client, NAMESPACE, object).await,
        Some("InMemoryMachine") => create::<InMemoryMachine>(client, NAMESPACE, object).await,
        Some("Machine") => create::<Machine>(client, NAMESPACE, object).await,
        other => bail!("the scenario has no kind {other:?}"),
    }
}
