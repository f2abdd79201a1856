//! The `azure-manager` binary as deployed, against the ARM test server: its ServiceAccount from
//! `config/azure/rbac.yaml`, leader election, JSON logs at debug level, Azure at the test server
//! (whose CA it is told to trust), in standalone mode with the core, kubeadm bootstrap and
//! KubeadmControlPlane controllers; and what would run in the VMs (kubelets, static pods, etcd
//! members) simulated from the bootstrap data of each, registering nodes in a workload API
//! server whose kubeconfig Secret the cluster's objects find.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capi_core::api::Machine;
use capi_testing::TestEnv;
use capi_testing::deployed;
use capi_testing::envtest::ControlPlane;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use provider_azure::arm::ResourceType;
use provider_inmemory::cloud::EtcdProcesses;
use provider_inmemory::fake_hypervisor::FakeHypervisor;
use provider_inmemory::nodes::NodeRegistrar;
use serde_json::json;

use super::arm_server::{ArmServer, SECRET};
use super::azure_servers::AzureServers;
use super::model_checker::ModelChecker;

/// The manager's namespace.
pub const SYSTEM_NAMESPACE: &str = "capi-azure-system";
/// The manager's ServiceAccount and lease.
pub const MANAGER: &str = "capi-azure-manager";
/// The subscription of the test server's resources.
pub const SUBSCRIPTION: &str = "7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c";

/// A running manager (restartable), the API server and namespace it serves, and how long the
/// test waits for any one step.
pub struct World {
    pub client: Client,
    pub namespace: String,
    pub manager: tokio::process::Child,
    pub logs: Vec<PathBuf>,
    pub cluster: String,
    pub within: Duration,
    token: String,
    dir: PathBuf,
    args: Vec<String>,
}

impl World {
    /// Starts the manager (again), logging to a new file.
    pub fn spawn(&mut self, env: &TestEnv) {
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

    /// The current manager's log.
    pub fn log(&self) -> &Path {
        self.logs
            .last()
            .map(PathBuf::as_path)
            .unwrap_or(Path::new(""))
    }

    /// Waits until `done` answers `Ok`, failing with `what`, the last state and the manager's
    /// log.
    pub async fn until<T, F, Fut>(&mut self, what: &str, mut done: F) -> T
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
                Err(state) if started.elapsed() > self.within => panic!(
                    "{what}: not within {:?}: {state}\n--- azure-manager's last warnings\n{}",
                    self.within,
                    deployed::warnings(self.log())
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// The Machines of the test's namespace.
    pub fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The cluster's tag value: `<namespace>/<cluster>`.
    pub fn tag(&self) -> String {
        format!("{}/{}", self.namespace, self.cluster)
    }

    /// Everything the managers logged.
    pub fn all_logs(&self) -> String {
        self.logs
            .iter()
            .map(|log| std::fs::read_to_string(log).unwrap_or_default())
            .collect()
    }
}

/// The manager against the test server, and the simulated VMs' workload cluster.
pub struct Harness {
    pub server: Arc<ArmServer>,
    pub env: TestEnv,
    pub world: World,
    pub workload: ControlPlane,
    pub etcd: EtcdProcesses,
    pub kubelets: tokio::task::JoinHandle<()>,
}

impl Harness {
    /// Starts the test server (changed by `faults` first), an API server with every CRD the
    /// manager serves, the manager for cluster `cluster`, and the simulated VMs; `prefix` names
    /// the directory of the run's logs (kept in the target directory to read when a test fails).
    pub async fn start(
        cluster: &str,
        prefix: &str,
        within: Duration,
        faults: impl FnOnce(&mut super::arm_server::Faults),
    ) -> Self {
        let server = ArmServer::start(Arc::new(ModelChecker::start())).await;
        server.faults(faults);
        let mut crds = capi_core::crd::core();
        crds.extend(capi_bootstrap::api::crds());
        crds.extend(capi_control_plane::api::crds());
        crds.extend(provider_azure::api::crds());
        let env = TestEnv::start_with_crds(&crds).await.unwrap();
        let client = env.client();
        let namespace = env.namespace().await.unwrap();
        let rbac = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/azure/rbac.yaml"),
        )
        .unwrap();
        let token = deployed::service_account_token(&client, &rbac, SYSTEM_NAMESPACE, MANAGER)
            .await
            .unwrap();
        let dir = tempfile::Builder::new()
            .prefix(prefix)
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
            cluster: cluster.to_string(),
            within,
            token,
            dir: dir.path().to_path_buf(),
            args,
        };
        world.spawn(&env);

        // What would run in the VMs: kubelets, static pods, etcd members.
        let workload = ControlPlane::start().await.unwrap();
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{cluster}-kubeconfig"),
                         "labels": {capi_core::labels::CLUSTER_NAME: cluster}},
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
        Self {
            server,
            env,
            world,
            workload,
            etcd,
            kubelets,
        }
    }
}

/// The cluster `capictl generate cluster <cluster> --infrastructure azure [--flavor <flavor>]`
/// renders in `namespace` for Kubernetes `version`, with CAPZ's variables (the test server's
/// subscription, `westeurope`, `Standard_D2s_v3` control-plane and `Standard_D4s_v3` node VMs)
/// and `extra` ones.
pub fn rendered_cluster(
    cluster: &str,
    namespace: &str,
    flavor: Option<&str>,
    version: &str,
    (control_plane, workers): (u32, u32),
    extra: &[(&str, &str)],
) -> Vec<kube::api::DynamicObject> {
    use capi_cli::generate;
    let variables = [
        ("AZURE_SUBSCRIPTION_ID", SUBSCRIPTION),
        ("AZURE_LOCATION", "westeurope"),
        ("AZURE_CONTROL_PLANE_MACHINE_TYPE", "Standard_D2s_v3"),
        ("AZURE_NODE_MACHINE_TYPE", "Standard_D4s_v3"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let inputs = generate::Inputs {
        cluster_name: cluster.into(),
        namespace: Some(namespace.into()),
        kubernetes_version: Some(version.into()),
        control_plane_machine_count: Some(control_plane),
        worker_machine_count: Some(workers),
        extra: variables,
    };
    let text = generate::render(
        generate::built_in("azure", flavor).unwrap(),
        &inputs,
        |_| None,
    )
    .unwrap();
    capi_testing::manifest::parse(&text).unwrap()
}

/// The names of the server's resources of `kind`.
pub fn names(server: &ArmServer, kind: ResourceType) -> BTreeSet<String> {
    server
        .world
        .lock()
        .unwrap()
        .of_kind(kind)
        .into_iter()
        .map(|r| r.id.rsplit('/').next().unwrap_or_default().to_string())
        .collect()
}

/// The `customData` every VM of the server was created with (what to look for in what a user
/// sees).
pub fn vms_custom_data(server: &ArmServer) -> Vec<String> {
    let world = server.world.lock().unwrap();
    world
        .of_kind(ResourceType::VirtualMachine)
        .iter()
        .filter_map(|vm| world.custom_data(&vm.id))
        .collect()
}

/// Fails if `text` (what `source` shows a user) holds the client secret, a token or a VM's
/// bootstrap data (`customData`).
pub fn assert_nothing_secret(source: &str, text: &str, server: &ArmServer, custom_data: &[String]) {
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
