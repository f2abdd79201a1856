//! Azure machine pools under chaos: the `azure-manager` binary (standalone, as in
//! `pools_end_to_end`) runs a cluster with a MachinePool against the ARM test server while a
//! seeded share of ARM's answers go wrong ([`Chaos`]: a tenth of reads and a quarter of writes
//! meet throttling, 409s, answers lost after the request was carried out, failed and vanished
//! operations) and new scale-set VMs show in listings only up to 2 s after they were made. The
//! pool grows in stages to 8 VMs, is scaled to zero and is deleted with its cluster; in each of
//! those, the manager is killed (SIGKILL) while the scale set is changing and started again.
//!
//! What must hold whatever the seed: the pool never had a second scale set and the control
//! plane's machine never a second VM; at no moment did the pool hold more VMs than the stage
//! asked for, and no VM was ever made beyond the 8 asked (none replaced, none doubled by a
//! retried PUT); every stage converged (each VM a node, a Running Machine and an AzureMachine);
//! after the deletion nothing is left in Azure and no object of the cluster (or a Secret they
//! owned) in the API server; nothing secret in the managers' logs; every body matched Azure's
//! models. The seed is printed; `CAPI_RS_POOLS_CHAOS_SEED` replays one.
#![cfg(feature = "real-etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capi_bootstrap::api::KubeadmConfig;
use capi_control_plane::api::KubeadmControlPlane;
use capi_core::api::{Cluster, Machine, MachinePool};
use common::arm_server::{ArmServer, Chaos, ChaosFault};
use common::manager::{Harness, World, assert_nothing_secret, vms_custom_data};
use common::pools::{converged, pool_cluster, scale, scale_set_vms};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Resource};
use provider_azure::api::{AzureCluster, AzureMachine, AzureMachinePool};
use provider_azure::arm::ResourceType;

const CLUSTER: &str = "chaos";
const POOL: &str = "chaos-mp-0";
const KUBERNETES_VERSION: &str = "v1.33.0";
const SIZE: &str = "Standard_D4s_v3";
/// The share of ARM reads that meet a fault.
const RATE: f64 = 0.1;
/// The share of ARM writes that meet one.
const WRITE_RATE: f64 = 0.25;
/// The longest a new scale-set VM stays out of listings.
const LIST_LAG: Duration = Duration::from_secs(2);
/// How long each scale-set and VM operation takes.
const OPERATION: Duration = Duration::from_secs(1);
const WITHIN: Duration = Duration::from_secs(120);

/// The seed: `CAPI_RS_POOLS_CHAOS_SEED` or the clock's.
fn seed() -> u64 {
    std::env::var("CAPI_RS_POOLS_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

/// What the watcher saw of the server.
#[derive(Debug, Default)]
struct Seen {
    scale_sets: BTreeSet<String>,
    standalone_vms: BTreeSet<String>,
    pool_vms: BTreeSet<String>,
    peak: usize,
    over: Vec<String>,
}

/// Looks at the server every 100 ms: every scale set and VM ever there, and whether the pool
/// held more VMs than `limit` allows at that moment.
fn watch(
    server: Arc<ArmServer>,
    limit: Arc<AtomicUsize>,
    seen: Arc<Mutex<Seen>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            {
                let world = server.world.lock().unwrap();
                let mut seen = seen.lock().unwrap();
                for set in world.of_kind(ResourceType::VirtualMachineScaleSet) {
                    seen.scale_sets.insert(set.id.to_lowercase());
                }
                let mut in_pool = 0;
                for vm in world.of_kind(ResourceType::VirtualMachine) {
                    let name = vm.id.to_lowercase();
                    if vm.body["properties"]["virtualMachineScaleSet"]["id"].is_string() {
                        in_pool += 1;
                        seen.pool_vms.insert(name);
                    } else {
                        seen.standalone_vms.insert(name);
                    }
                }
                seen.peak = seen.peak.max(in_pool);
                let limit = limit.load(Ordering::SeqCst);
                if in_pool > limit && seen.over.len() < 20 {
                    seen.over
                        .push(format!("{in_pool} VMs in the pool, {limit} asked"));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Kills the manager (SIGKILL: no lease released, nothing flushed) and starts it again.
async fn kill(world: &mut World, env: &capi_testing::TestEnv, when: &str) {
    world.manager.start_kill().unwrap();
    let _ = world.manager.wait().await;
    println!("the manager killed {when}, and started again");
    world.spawn(env);
}

/// Whether the AzureMachinePool has a scale-set operation recorded in flight.
async fn operation_recorded(pools: &Api<AzureMachinePool>) -> Result<bool, String> {
    let pool = pools.get(POOL).await.map_err(|e| e.to_string())?;
    Ok(pool
        .status
        .as_ref()
        .is_some_and(|s| !s.long_running_operation_states.is_empty()))
}

/// The names of the objects of kind `K` left in `namespace`.
async fn left<K>(client: &kube::Client, namespace: &str) -> Result<Vec<String>, String>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Ok(Api::<K>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                K::kind(&K::DynamicType::default()),
                o.meta().name.clone().unwrap_or_default()
            )
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_pool_grows_shrinks_and_goes_through_faults_kills_and_lagging_lists() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("provider_inmemory=warn")
        .try_init();
    let seed = seed();
    println!("chaos seed {seed} (CAPI_RS_POOLS_CHAOS_SEED={seed} replays it)");
    let Harness {
        server,
        env,
        mut world,
        workload,
        etcd: _etcd,
        kubelets,
    } = Harness::start(CLUSTER, "azure-pools-chaos-", WITHIN, |f| {
        f.operation_time = OPERATION;
        f.chaos = Some(Chaos::new(seed, RATE, WRITE_RATE, LIST_LAG));
    })
    .await;
    let client = world.client.clone();
    let namespace = world.namespace.clone();
    let limit = Arc::new(AtomicUsize::new(2));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watcher = watch(server.clone(), limit.clone(), seen.clone());
    capi_cli::apply::apply(
        &client,
        &pool_cluster(CLUSTER, &namespace, KUBERNETES_VERSION, 2),
        Some(&namespace),
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));
    let nodes: Api<Node> = Api::all(workload.client().await.unwrap());
    let infra_pools: Api<AzureMachinePool> = Api::namespaced(client.clone(), &namespace);
    converged(&mut world, &server, &nodes, POOL, 2, SIZE).await;

    // Growing: the manager killed while the scale set changes, in each stage.
    let mut before = 2;
    for stage in [5, 8] {
        limit.store(stage, Ordering::SeqCst);
        scale(&world, POOL, i32::try_from(stage).unwrap()).await;
        world
            .until("the scale set changing", || async {
                let changing = operation_recorded(&infra_pools).await?
                    || scale_set_vms(&server).len() > before;
                changing.then_some(()).ok_or_else(|| "not yet".to_string())
            })
            .await;
        kill(&mut world, &env, &format!("while growing to {stage}")).await;
        converged(&mut world, &server, &nodes, POOL, stage, SIZE).await;
        before = stage;
    }
    // What the VMs booted with, to look for in what a user sees.
    let custom_data = vms_custom_data(&server);

    // Scaled to zero: the manager killed while VMs go.
    scale(&world, POOL, 0).await;
    world
        .until("VMs going", || async {
            let vms = scale_set_vms(&server);
            let going = operation_recorded(&infra_pools).await?
                || vms.len() < before
                || vms.iter().any(|(_, _, state)| state == "Deleting");
            going.then_some(()).ok_or_else(|| format!("{vms:?}"))
        })
        .await;
    kill(&mut world, &env, "while scaling to zero").await;
    converged(&mut world, &server, &nodes, POOL, 0, SIZE).await;
    limit.store(0, Ordering::SeqCst);

    // Deleted with the cluster: the manager killed while it goes.
    Api::<Cluster>::namespaced(client.clone(), &namespace)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    world
        .until("the pool being deleted", || async {
            let pool = infra_pools.get(POOL).await.map_err(|e| e.to_string())?;
            pool.metadata
                .deletion_timestamp
                .map(|_| ())
                .ok_or_else(|| "not yet".to_string())
        })
        .await;
    kill(&mut world, &env, "while deleting the cluster").await;
    world
        .until("the cluster's objects gone", || async {
            let mut objects = left::<Cluster>(&client, &namespace).await?;
            objects.extend(left::<Machine>(&client, &namespace).await?);
            objects.extend(left::<MachinePool>(&client, &namespace).await?);
            objects.extend(left::<AzureMachinePool>(&client, &namespace).await?);
            objects.extend(left::<AzureMachine>(&client, &namespace).await?);
            objects.extend(left::<AzureCluster>(&client, &namespace).await?);
            objects.extend(left::<KubeadmConfig>(&client, &namespace).await?);
            objects.extend(left::<KubeadmControlPlane>(&client, &namespace).await?);
            objects
                .is_empty()
                .then_some(())
                .ok_or(format!("{objects:?}"))
        })
        .await;
    world
        .until("nothing left in Azure", || async {
            let left = server.world.lock().unwrap().census();
            left.is_empty().then_some(()).ok_or(format!("{left:?}"))
        })
        .await;
    watcher.abort();
    world.manager.start_kill().unwrap();
    let _ = world.manager.wait().await;
    kubelets.abort();

    let owned: Vec<String> = Api::<Secret>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| {
            !s.metadata
                .owner_references
                .clone()
                .unwrap_or_default()
                .is_empty()
        })
        .filter_map(|s| s.metadata.name)
        .collect();
    assert!(
        owned.is_empty(),
        "Secrets of deleted objects left: {owned:?}"
    );

    let seen = seen.lock().unwrap();
    let injected = server
        .world
        .lock()
        .unwrap()
        .faults
        .chaos
        .as_ref()
        .map(|c| c.injected.clone())
        .unwrap_or_default();
    println!(
        "seed {seed}: faults {injected:?}; scale sets {:?}; pool VMs ever {} (peak {}); \
         ARM requests {}",
        seen.scale_sets,
        seen.pool_vms.len(),
        seen.peak,
        server.world.lock().unwrap().requests.len()
    );
    // Throttling and lost answers are common enough to land in every run; 409s and failed or
    // vanished operations land on writes only, and not in every run.
    for fault in [ChaosFault::Throttle, ChaosFault::LoseResponse] {
        assert!(
            injected.get(&fault).copied().unwrap_or(0) > 0,
            "seed {seed}: no {fault:?} was injected: {injected:?}"
        );
    }
    assert_eq!(
        seen.scale_sets.len(),
        1,
        "seed {seed}: one scale set per pool"
    );
    assert_eq!(
        seen.standalone_vms.len(),
        1,
        "seed {seed}: one VM for the control plane's machine: {:?}",
        seen.standalone_vms
    );
    assert!(seen.over.is_empty(), "seed {seed}: {:?}", seen.over);
    assert_eq!(
        seen.pool_vms.len(),
        8,
        "seed {seed}: no VM made beyond the 8 asked: {:?}",
        seen.pool_vms
    );
    assert_nothing_secret(
        "the managers' logs",
        &world.all_logs(),
        &server,
        &custom_data,
    );
    server.assert_clean();
}
