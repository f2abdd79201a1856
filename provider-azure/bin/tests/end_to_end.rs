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
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capi_control_plane::api::KubeadmControlPlane;
use capi_core::api::{Cluster, Machine};
use capi_testing::TestEnv;
use capi_testing::deployed;
use capi_testing::envtest::ControlPlane;
use common::arm_server::{ArmServer, CLIENT, SECRET, TENANT, Target};
use common::azure_servers::AzureServers;
use common::model_checker::ModelChecker;
use k8s_openapi::api::core::v1::{Event, Node, Secret};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use provider_azure::api::{AzureCluster, AzureMachine};
use provider_azure::arm::ResourceType;
use provider_inmemory::fake_hypervisor::FakeHypervisor;
use provider_inmemory::nodes::NodeRegistrar;
use serde_json::json;

const CLUSTER: &str = "e2e";
const SYSTEM_NAMESPACE: &str = "capi-azure-system";
const MANAGER: &str = "capi-azure-manager";
const SUBSCRIPTION: &str = "7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c";
const KUBERNETES_VERSION: &str = "v1.33.0";
/// How long a VM takes to be created.
const VM_CREATION: Duration = Duration::from_secs(4);
/// Long enough for the slowest step (three control-plane machines joining etcd one after the
/// other, a restart waiting out the old manager's lease) on 2 cores.
const WITHIN: Duration = Duration::from_secs(300);

struct World {
    client: Client,
    namespace: String,
    manager: tokio::process::Child,
    logs: Vec<PathBuf>,
    token: String,
    dir: PathBuf,
    args: Vec<String>,
}

impl World {
    fn spawn(&mut self, env: &TestEnv) {
        let log = self
            .dir
            .join(format!("manager-{}.log", self.logs.len() + 1));
        println!("the manager's log: {}", log.display());
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.manager = deployed::spawn(
            Path::new(env!("CARGO_BIN_EXE_azure-manager")),
            env.control_plane(),
            &self.token,
            &self.dir,
            &log,
            &args,
        )
        .unwrap();
        self.logs.push(log);
    }

    fn log(&self) -> &Path {
        self.logs
            .last()
            .map(PathBuf::as_path)
            .unwrap_or(Path::new(""))
    }

    /// Waits until `done` answers `Ok`, failing with `what`, the last state and the manager's
    /// log.
    async fn until<T, F, Fut>(&mut self, what: &str, mut done: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.manager.try_wait() {
                panic!(
                    "azure-manager exited ({status}):\n{}",
                    deployed::tail(self.log(), 60)
                );
            }
            match done().await {
                Ok(value) => {
                    println!("{what}: after {:.1?}", started.elapsed());
                    return value;
                }
                Err(state) if started.elapsed() > WITHIN => panic!(
                    "{what}: not within {WITHIN:?}: {state}\n--- azure-manager's last warnings\n{}",
                    deployed::warnings(self.log())
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn tag(&self) -> String {
        format!("{}/{CLUSTER}", self.namespace)
    }
}

/// The names of the server's resources of `kind`.
fn names(server: &ArmServer, kind: ResourceType) -> BTreeSet<String> {
    server
        .world
        .lock()
        .unwrap()
        .of_kind(kind)
        .into_iter()
        .map(|r| r.id.rsplit('/').next().unwrap_or_default().to_string())
        .collect()
}

/// Fails if `text` (what `source` shows a user) holds the client secret, a token or a VM's
/// bootstrap data (`customData`).
fn assert_nothing_secret(source: &str, text: &str, server: &ArmServer, custom_data: &[String]) {
    assert!(
        !text.contains(SECRET),
        "{source} contains the client secret"
    );
    for (i, token) in server.world.lock().unwrap().issued.iter().enumerate() {
        assert!(
            !text.contains(token.as_str()),
            "{source} contains token #{i}"
        );
    }
    assert!(
        !text.contains("Bearer ey"),
        "{source} contains a bearer token"
    );
    for data in custom_data {
        assert!(
            !text.contains(data.as_str()),
            "{source} contains a VM's customData"
        );
    }
}

/// The cluster as `capictl generate cluster e2e --infrastructure azure --flavor
/// static-credentials` renders it with CAPZ's variables.
fn cluster_manifests(namespace: &str) -> Vec<kube::api::DynamicObject> {
    use capi_cli::generate;
    let extra = [
        ("AZURE_SUBSCRIPTION_ID", SUBSCRIPTION),
        ("AZURE_LOCATION", "westeurope"),
        ("AZURE_CONTROL_PLANE_MACHINE_TYPE", "Standard_D2s_v3"),
        ("AZURE_NODE_MACHINE_TYPE", "Standard_D4s_v3"),
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_CLIENT_SECRET", SECRET),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let inputs = generate::Inputs {
        cluster_name: CLUSTER.into(),
        namespace: Some(namespace.into()),
        kubernetes_version: Some(KUBERNETES_VERSION.into()),
        control_plane_machine_count: Some(3),
        worker_machine_count: Some(2),
        extra,
    };
    let text = generate::render(
        generate::built_in("azure", Some("static-credentials")).unwrap(),
        &inputs,
        |_| None,
    )
    .unwrap();
    capi_testing::manifest::parse(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_builds_and_tears_down_a_kubeadm_cluster_on_the_arm_test_server_across_a_restart()
 {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("provider_inmemory=info")
        .try_init();
    let server = ArmServer::start(Arc::new(ModelChecker::start())).await;
    server.faults(|f| {
        f.slow
            .push((Target::of("PUT", ResourceType::VirtualMachine), VM_CREATION));
    });

    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(capi_control_plane::api::crds());
    crds.extend(provider_azure::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let client = env.client();
    let namespace = env.namespace().await.unwrap();

    // The manager process, as deployed: its ServiceAccount, leader election, JSON logs at debug
    // level for every crate, Azure at the test server (whose CA it is told to trust).
    let rbac = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/azure/rbac.yaml"),
    )
    .unwrap();
    let token = deployed::service_account_token(&client, &rbac, SYSTEM_NAMESPACE, MANAGER)
        .await
        .unwrap();
    // Kept after the test (in the target directory) to read when it fails.
    let dir = tempfile::Builder::new()
        .prefix("azure-end-to-end-")
        .disable_cleanup(true)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let ca = dir.path().join("arm-ca.pem");
    std::fs::write(&ca, &server.ca_pem).unwrap();
    let args = vec![
        "--with-bootstrap".to_string(),
        "--with-core".into(),
        "--with-control-plane".into(),
        "--leader-elect".into(),
        format!("{SYSTEM_NAMESPACE}/{MANAGER}"),
        "--azure-resource-manager-url".into(),
        server.url.clone(),
        "--azure-authority-host".into(),
        server.url.clone(),
        "--azure-ca-file".into(),
        ca.display().to_string(),
    ];
    let placeholder = tokio::process::Command::new("true").spawn().unwrap();
    let mut world = World {
        client: client.clone(),
        namespace: namespace.clone(),
        manager: placeholder,
        logs: Vec::new(),
        token,
        dir: dir.path().to_path_buf(),
        args,
    };
    world.spawn(&env);

    // What would run in the VMs: kubelets, static pods, etcd members.
    let workload = ControlPlane::start().await.unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{CLUSTER}-kubeconfig"),
                     "labels": {capi_core::labels::CLUSTER_NAME: CLUSTER}},
        "stringData": {"value": workload.kubeconfig_yaml()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &namespace)
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    let etcd_binary = capi_testing::envtest::Assets::locate().unwrap().etcd;
    let servers = AzureServers {
        server: server.clone(),
        cluster: world.tag(),
    };
    let (hosts, etcd) = FakeHypervisor::new(servers, world.tag(), &etcd_binary);
    let kubelets = tokio::spawn(
        NodeRegistrar::new(workload.client().await.unwrap(), Arc::new(hosts))
            .with_kubelets(etcd.port_forward_targets())
            .run(Duration::from_millis(500)),
    );

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
    let custom_data: Vec<String> = {
        let world = server.world.lock().unwrap();
        world
            .of_kind(ResourceType::VirtualMachine)
            .iter()
            .filter_map(|vm| world.custom_data(&vm.id))
            .collect()
    };
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
    let mut logs = String::new();
    for log in &world.logs {
        logs.push_str(&std::fs::read_to_string(log).unwrap());
    }
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
