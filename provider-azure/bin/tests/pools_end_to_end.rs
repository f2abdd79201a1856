//! Azure machine pools end to end: the `azure-manager` binary (as deployed, in standalone mode:
//! `common::manager`) runs the cluster that `capictl generate cluster --infrastructure azure
//! --flavor machinepool` renders — one control-plane machine and a MachinePool of two — against
//! the ARM test server, whose scale-set operations take seconds as Azure's do. The pool's scale
//! set is made once; it grows to four (the manager killed while the scale set's operation is
//! recorded in the AzureMachinePool's status, and started again: the new one resumes it),
//! shrinks to one by exactly the VMs the pool's Machines were drained from (no VM is ever
//! made to replace one), rolls to a new VM size, and goes with the cluster, leaving nothing in
//! the server. Every VM boots from its scale set's bootstrap data into a node; each has an
//! AzureMachine and a Machine of its own; no credential, token or bootstrap data shows in
//! logs or status; every body is checked against Azure's models.
#![cfg(feature = "real-etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use capi_core::api::{Cluster, MachinePool};
use common::arm_server::Target;
use common::manager::{Harness, assert_nothing_secret, names, vms_custom_data};
use common::pools::{converged, pool_cluster, scale};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use provider_azure::api::AzureMachinePool;
use provider_azure::arm::ResourceType;
use serde_json::json;

const CLUSTER: &str = "pools";
const POOL: &str = "pools-mp-0";
const KUBERNETES_VERSION: &str = "v1.33.0";
/// How long a scale set's operation (and a standalone VM's creation) takes.
const OPERATION: Duration = Duration::from_secs(3);
const WITHIN: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_runs_an_azure_pool_through_scaling_a_restart_a_roll_and_deletion() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("provider_inmemory=info")
        .try_init();
    let Harness {
        server,
        env,
        mut world,
        workload,
        etcd: _etcd,
        kubelets,
    } = Harness::start(CLUSTER, "azure-pools-", WITHIN, |f| {
        for kind in [
            ResourceType::VirtualMachine,
            ResourceType::VirtualMachineScaleSet,
        ] {
            f.slow.push((Target::of("PUT", kind), OPERATION));
        }
        f.slow.push((
            Target::of("POST", ResourceType::VirtualMachineScaleSet),
            OPERATION,
        ));
    })
    .await;
    let client = world.client.clone();
    let namespace = world.namespace.clone();
    capi_cli::apply::apply(
        &client,
        &pool_cluster(CLUSTER, &namespace, KUBERNETES_VERSION, 2),
        Some(&namespace),
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));
    let nodes: Api<Node> = Api::all(workload.client().await.unwrap());

    // Up: the control plane's machine, and a pool of two VMs in one scale set.
    let first = converged(&mut world, &server, &nodes, POOL, 2, "Standard_D4s_v3").await;
    assert_eq!(
        names(&server, ResourceType::VirtualMachineScaleSet).len(),
        1,
        "one scale set per pool"
    );
    let mut made: BTreeSet<String> = first.clone();

    // Grown to four; the manager is killed while the scale set's PUT is recorded in flight.
    scale(&world, POOL, 4).await;
    let infra_pools: Api<AzureMachinePool> = Api::namespaced(client.clone(), &namespace);
    world
        .until("the scale set's operation recorded in flight", || async {
            let pool = infra_pools.get(POOL).await.map_err(|e| e.to_string())?;
            let recorded = pool
                .status
                .as_ref()
                .is_some_and(|s| !s.long_running_operation_states.is_empty());
            recorded
                .then_some(())
                .ok_or_else(|| format!("{:?}", pool.status))
        })
        .await;
    world.manager.start_kill().unwrap();
    let _ = world.manager.wait().await;
    world.spawn(&env);
    let grown = converged(&mut world, &server, &nodes, POOL, 4, "Standard_D4s_v3").await;
    assert!(
        first.is_subset(&grown),
        "the first VMs stay: {first:?} {grown:?}"
    );
    made.extend(grown.iter().cloned());
    assert_eq!(
        names(&server, ResourceType::VirtualMachineScaleSet).len(),
        1
    );

    // Shrunk to one by three named VMs: the one left is one of the four, none made since.
    scale(&world, POOL, 1).await;
    let shrunk = converged(&mut world, &server, &nodes, POOL, 1, "Standard_D4s_v3").await;
    assert!(shrunk.is_subset(&grown), "{shrunk:?} ⊄ {grown:?}");
    made.extend(shrunk.iter().cloned());
    assert_eq!(made.len(), 4, "no VM replaced a removed one: {made:?}");

    // Rolled to a new size: a surge VM of the new model, then the old one removed.
    infra_pools
        .patch(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"template": {"vmSize": "Standard_D8s_v3"}}})),
        )
        .await
        .unwrap();
    let rolled = converged(&mut world, &server, &nodes, POOL, 1, "Standard_D8s_v3").await;
    assert!(rolled.is_disjoint(&shrunk), "the VM was replaced");
    let infra = infra_pools.get(POOL).await.unwrap();
    let status = infra.status.clone().unwrap_or_default();
    assert!(
        status.long_running_operation_states.is_empty(),
        "operations cleared once done: {:?}",
        status.long_running_operation_states
    );
    assert_eq!(
        status.contract.infrastructure_machine_kind.as_deref(),
        Some("AzureMachine")
    );

    // What the VMs booted with, to look for in what a user sees.
    let custom_data = vms_custom_data(&server);
    assert_eq!(
        custom_data.len(),
        2,
        "the control plane's VM and the pool's"
    );
    let mut shown = serde_json::to_string(&infra.status).unwrap();
    let pool = Api::<MachinePool>::namespaced(client.clone(), &namespace)
        .get(POOL)
        .await
        .unwrap();
    shown.push_str(&serde_json::to_string(&pool.status).unwrap());
    assert_nothing_secret("the pools' status", &shown, &server, &custom_data);

    // Deleted with the cluster: nothing is left in the server.
    Api::<Cluster>::namespaced(client.clone(), &namespace)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    let machines = world.machines();
    world
        .until("the cluster's objects gone", || async {
            let pools = infra_pools
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let machines = machines
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            (pools.items.is_empty() && machines.items.is_empty())
                .then_some(())
                .ok_or(format!(
                    "{} AzureMachinePools, {} machines",
                    pools.items.len(),
                    machines.items.len()
                ))
        })
        .await;
    world
        .until("nothing left in Azure", || async {
            let left = server.world.lock().unwrap().census();
            left.is_empty().then_some(()).ok_or(format!("{left:?}"))
        })
        .await;
    world.manager.start_kill().unwrap();
    let _ = world.manager.wait().await;
    kubelets.abort();
    let logs = world.all_logs();
    assert!(
        logs.contains(r#""target":"provider_azure::pool""#),
        "the logs cover the pool's reconciles"
    );
    assert_nothing_secret("the managers' logs", &logs, &server, &custom_data);
    server.assert_clean();
    println!(
        "ARM requests: {}; bodies checked against Azure's models: {}",
        server.world.lock().unwrap().requests.len(),
        server.checked()
    );
}
