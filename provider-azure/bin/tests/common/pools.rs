//! Machine pools as the tests see them: the scale set's VMs in the server, and a MachinePool
//! converged on them.

use std::collections::BTreeSet;

use capi_core::api::MachinePool;
use capi_core::{condition, labels};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use provider_azure::api::{AzureMachine, AzureMachinePool};
use provider_azure::arm::ResourceType;
use serde_json::json;

use super::arm_server::{ArmServer, CLIENT, SECRET, TENANT};
use super::manager::{SUBSCRIPTION, World, rendered_cluster};

/// The scale set's VMs in the server: name → (VM size, provisioning state).
pub fn scale_set_vms(server: &ArmServer) -> Vec<(String, String, String)> {
    let world = server.world.lock().unwrap();
    world
        .of_kind(ResourceType::VirtualMachine)
        .into_iter()
        .filter(|vm| {
            vm.body["properties"]["virtualMachineScaleSet"]["id"]
                .as_str()
                .is_some()
        })
        .map(|vm| {
            (
                vm.id.rsplit('/').next().unwrap_or_default().to_string(),
                vm.body["properties"]["hardwareProfile"]["vmSize"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                vm.state.clone(),
            )
        })
        .collect()
}

/// Waits until the pool holds `n` VMs of `size`, all running, each with a node, a Machine
/// Running on it and an AzureMachine, listed in `spec.providerIDList` and `status.nodeRefs`,
/// and nothing else; returns the VMs' names.
pub async fn converged(
    world: &mut World,
    server: &ArmServer,
    nodes: &Api<Node>,
    pool: &str,
    n: usize,
    size: &str,
) -> BTreeSet<String> {
    let pools: Api<MachinePool> = Api::namespaced(world.client.clone(), &world.namespace);
    let infra_pools: Api<AzureMachinePool> =
        Api::namespaced(world.client.clone(), &world.namespace);
    let infra_machines: Api<AzureMachine> = Api::namespaced(world.client.clone(), &world.namespace);
    let machines = world.machines();
    let group = world.cluster.clone();
    let what = format!("{n} VMs of {size} in the pool, each a Running Machine with a node");
    world
        .until(&what, || async {
            let vms = scale_set_vms(server);
            let names: BTreeSet<String> = vms.iter().map(|(name, _, _)| name.clone()).collect();
            let ids: BTreeSet<String> = names
                .iter()
                .map(|name| {
                    format!(
                        "azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/{group}/providers/Microsoft.Compute/virtualMachines/{name}"
                    )
                })
                .collect();
            let found = pools.get(pool).await.map_err(|e| e.to_string())?;
            let status = found.status.clone().unwrap_or_default();
            let infra = infra_pools.get(pool).await.map_err(|e| e.to_string())?;
            let selector = format!("{}={pool}", labels::MACHINE_POOL_NAME);
            let running: BTreeSet<String> = machines
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter(|m| {
                    m.metadata.deletion_timestamp.is_none()
                        && m.status.as_ref().is_some_and(|s| {
                            s.node_ref.is_some()
                                && condition::is_true(&s.conditions, condition::READY)
                        })
                })
                .filter_map(|m| m.spec.provider_id)
                .collect();
            let azure_machines = infra_machines
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            let node_ids: BTreeSet<String> = nodes
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter_map(|n| n.spec.and_then(|s| s.provider_id))
                .filter(|id| id.contains("/virtualMachines/capi-"))
                .collect();
            let listed: BTreeSet<String> = infra.spec.provider_id_list.iter().cloned().collect();
            let settled = vms.len() == n
                && vms.iter().all(|(_, s, state)| s == size && state == "Succeeded")
                && listed == ids
                && running == ids
                && azure_machines == n
                && node_ids == ids
                && status.node_refs.len() == n
                && status.ready_replicas.unwrap_or(0) == i32::try_from(n).unwrap_or(-1);
            settled.then(|| names.clone()).ok_or_else(|| {
                format!(
                    "VMs {vms:?}; providerIDList {listed:?}; running Machines {running:?}; \
                     {azure_machines} AzureMachines; nodes {node_ids:?}; MachinePool \
                     providerIDList {:?}, status {status:?}; AzureMachinePool status {:?}",
                    found.spec.provider_id_list, infra.status
                )
            })
        })
        .await
}

pub async fn scale(world: &World, pool: &str, replicas: i32) {
    Api::<MachinePool>::namespaced(world.client.clone(), &world.namespace)
        .patch(
            pool,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

/// Cluster `cluster` as `capictl generate cluster <cluster> --infrastructure azure --flavor
/// machinepool` renders it for Kubernetes `version` (one control-plane machine, a pool of
/// `workers`), with the credentials Secret the template expects beside it.
pub fn pool_cluster(
    cluster: &str,
    namespace: &str,
    version: &str,
    workers: u32,
) -> Vec<kube::api::DynamicObject> {
    let mut objects = rendered_cluster(
        cluster,
        namespace,
        Some("machinepool"),
        version,
        (1, workers),
        &[("AZURE_CLUSTER_IDENTITY_SECRET_NAME", "azure-credentials")],
    );
    objects.push(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "azure-credentials", "namespace": namespace},
            "stringData": {"tenantID": TENANT, "clientID": CLIENT, "clientSecret": SECRET},
        }))
        .unwrap(),
    );
    objects
}
