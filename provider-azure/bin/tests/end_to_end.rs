//! The Azure provider end to end: the `azure-manager` binary, running as its generated
//! ServiceAccount (`config/azure/rbac.yaml`) in standalone mode with the core, kubeadm bootstrap
//! and KubeadmControlPlane controllers, reconciles the cluster that `capictl generate cluster
//! --infrastructure azure --flavor static-credentials` renders with CAPZ's variables — a
//! KubeadmControlPlane of 3 machines in the API server load balancer's backend pool and 2
//! workers — against the ARM test server (`--azure-resource-manager-url`, `--azure-authority-host`,
//! `--azure-ca-file`), with tokens from the server's Microsoft Entra ID endpoint.
//!
//! VM creations are slow (seconds, as Azure's are), and the manager is killed while one is under
//! way — its operation recorded in the AzureMachine's status — and started again: the new manager
//! resumes it, and there is exactly one VM, NIC, OS disk and (control plane) etcd disk per
//! machine, nothing else. Then the cluster is deleted and the server holds nothing. No
//! credential or token shows in the managers' logs (JSON, debug level for every crate), in
//! events or in status; every body of the run is checked against Azure's models.
//!
//! The server runs no VM; what would run in each is simulated from the `customData` it was
//! created with (`common::azure_servers`): kubelets registering nodes in a second API server,
//! kubeadm's static pods, and a real etcd member per control-plane VM, which the
//! KubeadmControlPlane reaches through the workload API server. The workload cluster's
//! kubeconfig Secret points at that API server (the public IP's DNS name resolves nowhere).
//!
//! Needs the envtest binaries and Azure's models (`CAPI_RS_AZURE_MODELS_PYTHON`); `cargo xtask
//! test` provides both.
#![cfg(feature = "real-etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use capi_control_plane::api::KubeadmControlPlane;
use capi_core::api::Cluster;
use capi_testing::deployed;
use common::arm_server::{CLIENT, SECRET, TENANT, Target};
use common::manager::{
    Harness, SUBSCRIPTION, assert_nothing_secret, names, rendered_cluster, vms_custom_data,
};
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use provider_azure::api::{AzureCluster, AzureMachine};
use provider_azure::arm::ResourceType;

const CLUSTER: &str = "e2e";
const KUBERNETES_VERSION: &str = "v1.33.0";
/// How long a VM takes to be created.
const VM_CREATION: Duration = Duration::from_secs(4);
/// Long enough for the slowest step (three control-plane machines joining etcd one after the
/// other, a restart waiting out the old manager's lease) on 2 cores.
const WITHIN: Duration = Duration::from_secs(300);

/// The cluster as `capictl generate cluster e2e --infrastructure azure --flavor
/// static-credentials` renders it with CAPZ's variables.
fn cluster_manifests(namespace: &str) -> Vec<kube::api::DynamicObject> {
    rendered_cluster(
        CLUSTER,
        namespace,
        Some("static-credentials"),
        KUBERNETES_VERSION,
        (3, 2),
        &[
            ("AZURE_TENANT_ID", TENANT),
            ("AZURE_CLIENT_ID", CLIENT),
            ("AZURE_CLIENT_SECRET", SECRET),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_builds_and_tears_down_a_kubeadm_cluster_on_the_arm_test_server_across_a_restart()
 {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("provider_inmemory=info")
        .try_init();
    let Harness {
        server,
        env,
        mut world,
        workload,
        etcd,
        kubelets,
    } = Harness::start(CLUSTER, "azure-end-to-end-", WITHIN, |f| {
        f.slow
            .push((Target::of("PUT", ResourceType::VirtualMachine), VM_CREATION));
    })
    .await;
    let client = world.client.clone();
    let namespace = world.namespace.clone();

    capi_cli::apply::apply(
        &client,
        &cluster_manifests(&namespace),
        Some(&namespace),
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));

    // A VM is being created, its operation recorded in its AzureMachine's status: the manager
    // is killed there, and started again.
    let azure_machines: Api<AzureMachine> = Api::namespaced(client.clone(), &namespace);
    let in_flight = world
        .until("a VM's creation recorded in flight", || async {
            let list = azure_machines
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .iter()
                .find_map(|m| {
                    let status = m.status.as_ref()?;
                    status
                        .long_running_operation_states
                        .iter()
                        .any(|o| o.service_name == "virtualmachine")
                        .then(|| m.name_any())
                })
                .ok_or_else(|| "no operation recorded yet".to_string())
        })
        .await;
    let creating = server
        .world
        .lock()
        .unwrap()
        .read(&format!(
            "/subscriptions/{SUBSCRIPTION}/resourceGroups/{CLUSTER}/providers/Microsoft.Compute/virtualMachines/{in_flight}"
        ))
        .map(|vm| vm["properties"]["provisioningState"].clone());
    println!("killing the manager while VM {in_flight} is {creating:?}");
    world.manager.start_kill().unwrap();
    let _ = world.manager.wait().await;
    world.spawn(&env);

    // Up: 3 control-plane machines and 2 workers Running, the control plane healthy.
    let machines = world.machines();
    let (control_plane, workers) = world
        .until("3 control-plane machines and 2 workers Running", || {
            deployed::running_machines(&machines, 3, 2)
        })
        .await;
    let kcps: Api<KubeadmControlPlane> = Api::namespaced(client.clone(), &namespace);
    let kcp_name = format!("{CLUSTER}-control-plane");
    world
        .until(
            "the KubeadmControlPlane's etcd healthy with 3 members",
            || async {
                let kcp = kcps.get(&kcp_name).await.map_err(|e| e.to_string())?;
                let status = kcp.status.clone().unwrap_or_default();
                let etcd = capi_core::condition::get(&status.conditions, "EtcdClusterHealthy");
                match (status.ready_replicas, etcd) {
                    (Some(3), Some(c)) if c.status == "True" => Ok(()),
                    _ => Err(format!("{status:?}")),
                }
            },
        )
        .await;
    assert_eq!(
        etcd.client_urls(&world.tag()).len(),
        3,
        "3 etcd members run"
    );
    let nodes = Api::<Node>::all(workload.client().await.unwrap())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(nodes.items.len(), 5, "a node per VM");

    // Exactly one VM, NIC, OS disk (and etcd disk for the control plane) per machine.
    let infra: Vec<AzureMachine> = azure_machines
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let vms: BTreeSet<String> = infra.iter().map(|m| m.name_any()).collect();
    assert_eq!(vms.len(), 5);
    assert_eq!(
        names(&server, ResourceType::VirtualMachine),
        vms,
        "a VM per machine, no other"
    );
    let nics: BTreeSet<String> = vms.iter().map(|v| format!("{v}-nic")).collect();
    assert_eq!(
        names(&server, ResourceType::NetworkInterface),
        nics,
        "no orphaned NIC"
    );
    let planes: BTreeSet<String> = infra
        .iter()
        .filter(|m| {
            m.labels()
                .contains_key(capi_core::labels::MACHINE_CONTROL_PLANE)
        })
        .map(|m| m.name_any())
        .collect();
    let disks: BTreeSet<String> = vms
        .iter()
        .map(|v| format!("{v}_OSDisk"))
        .chain(planes.iter().map(|v| format!("{v}_etcddisk")))
        .collect();
    assert_eq!(
        names(&server, ResourceType::Disk),
        disks,
        "no orphaned disk"
    );
    for machine in control_plane.iter().chain(&workers) {
        let provider_id = machine.spec.provider_id.clone().unwrap_or_default();
        assert!(
            provider_id.starts_with(&format!(
                "azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/{CLUSTER}/providers/Microsoft.Compute/virtualMachines/"
            )),
            "{provider_id}"
        );
    }
    for machine in &infra {
        let status = machine.status.clone().unwrap_or_default();
        assert!(
            status.long_running_operation_states.is_empty(),
            "operations cleared once done: {:?}",
            status.long_running_operation_states
        );
    }

    // The control plane is the load balancer's backend pool, and the cluster's endpoint is its
    // public IP's DNS name.
    let lb = server
        .world
        .lock()
        .unwrap()
        .read(&format!(
            "/subscriptions/{SUBSCRIPTION}/resourceGroups/{CLUSTER}/providers/Microsoft.Network/loadBalancers/{CLUSTER}-public-lb"
        ))
        .expect("the load balancer");
    let members: BTreeSet<String> =
        lb["properties"]["backendAddressPools"][0]["properties"]["backendIPConfigurations"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|c| {
                let id = c["id"].as_str()?;
                let nic = id.split("/networkInterfaces/").nth(1)?.split('/').next()?;
                Some(nic.trim_end_matches("-nic").to_string())
            })
            .collect();
    assert_eq!(
        members, planes,
        "the control plane, and only it, in the backend pool"
    );
    let cluster = Api::<Cluster>::namespaced(client.clone(), &namespace)
        .get(CLUSTER)
        .await
        .unwrap();
    let endpoint = cluster
        .spec
        .control_plane_endpoint
        .clone()
        .unwrap_or_default();
    assert!(
        endpoint.host.ends_with(".westeurope.cloudapp.azure.com") && endpoint.port == 6443,
        "{endpoint:?}"
    );

    // What the VMs booted with, to look for in what a user sees.
    let custom_data = vms_custom_data(&server);
    assert_eq!(
        custom_data.len(),
        5,
        "every VM was created with its bootstrap data"
    );

    // Nothing a user sees in the objects' status holds a credential or token.
    let mut shown = serde_json::to_string(&cluster.status).unwrap();
    for machine in control_plane.iter().chain(&workers) {
        shown.push_str(&serde_json::to_string(&machine.status).unwrap());
    }
    for machine in &infra {
        shown.push_str(&serde_json::to_string(&machine.status).unwrap());
    }
    let azure_cluster = Api::<AzureCluster>::namespaced(client.clone(), &namespace)
        .get(CLUSTER)
        .await
        .unwrap();
    shown.push_str(&serde_json::to_string(&azure_cluster.status).unwrap());
    shown.push_str(&serde_json::to_string(&kcps.get(&kcp_name).await.unwrap().status).unwrap());
    assert_nothing_secret("the objects' status", &shown, &server, &custom_data);

    // Delete the cluster: nothing is left in the server.
    Api::<Cluster>::namespaced(client.clone(), &namespace)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    world
        .until("the cluster's objects gone", || async {
            let clusters = Api::<AzureCluster>::namespaced(client.clone(), &namespace)
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let machines = machines
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            (clusters.items.is_empty() && machines.items.is_empty())
                .then_some(())
                .ok_or(format!(
                    "{} AzureClusters, {} machines",
                    clusters.items.len(),
                    machines.items.len()
                ))
        })
        .await;
    let left = server.world.lock().unwrap().census();
    assert!(left.is_empty(), "left in Azure: {left:?}");

    // Events and the managers' logs hold no credential or token.
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(!events.items.is_empty(), "the manager records events");
    assert_nothing_secret(
        "the events",
        &serde_json::to_string(&events.items).unwrap(),
        &server,
        &custom_data,
    );
    world.manager.start_kill().unwrap();
    let _ = world.manager.wait().await;
    kubelets.abort();
    let logs = world.all_logs();
    assert!(
        logs.contains(&namespace) && logs.contains(r#""target":"provider_azure::machine""#),
        "the logs cover the provider's reconciles"
    );
    assert_nothing_secret("the managers' logs", &logs, &server, &custom_data);
    server.assert_clean();
    let requests = server.world.lock().unwrap().requests.len();
    println!(
        "ARM requests: {requests}; bodies checked against Azure's models: {}",
        server.checked()
    );
}
