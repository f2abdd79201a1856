//! The processes a scenario measures: a management API server with the CRDs, a workload API
//! server where the simulated kubelets register their nodes, `inmemory-cloud` and
//! `inmemory-manager` — each its own process, so that the manager's CPU and memory are its own and
//! it can be killed and restarted while the cloud keeps its state.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};
use capi_testing::envtest::{Assets, ControlPlane, ControlPlaneOptions};
use capi_testing::install_crds;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::PostParams;
use kube::{Api, Client};
use provider_inmemory::cloud::{Inspection, RemoteCloud};
use serde_json::json;

use super::measure;

/// How the simulated cloud behaves.
#[derive(Clone, Debug, Default)]
pub(crate) struct CloudOptions {
    pub(crate) boot_ms: u64,
    pub(crate) delete_ms: u64,
    pub(crate) call_latency_ms: u64,
    /// Relative jitter on every latency (0.2 = ±20 %).
    pub(crate) jitter: f64,
    /// Every cloud call fails with this probability.
    pub(crate) error_rate: f64,
    /// Creates that happen but answer with an error.
    pub(crate) lost_create_response_rate: f64,
    /// Seeds the cloud's draws of faults and latencies (`None`: random).
    pub(crate) seed: Option<u64>,
    /// A new instance shows in the cloud's lists after a random delay up to this.
    pub(crate) list_lag_ms: u64,
}

impl CloudOptions {
    fn args(&self) -> Vec<String> {
        [
            ("--boot-time-ms", self.boot_ms.to_string()),
            ("--delete-time-ms", self.delete_ms.to_string()),
            ("--call-latency-ms", self.call_latency_ms.to_string()),
            ("--list-lag-ms", self.list_lag_ms.to_string()),
            ("--jitter", self.jitter.to_string()),
            ("--error-rate", self.error_rate.to_string()),
            (
                "--lost-create-response-rate",
                self.lost_create_response_rate.to_string(),
            ),
        ]
        .into_iter()
        .chain(self.seed.map(|seed| ("--seed", seed.to_string())))
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .collect()
    }
}

/// How the manager runs.
#[derive(Clone, Debug)]
pub(crate) struct ManagerOptions {
    pub(crate) qps: f64,
    pub(crate) burst: u32,
    pub(crate) concurrency: u16,
    /// Whether the manager holds a Lease (renewing it every retry period) while it runs, as
    /// shipped.
    pub(crate) leader_election: bool,
    /// How many manager processes run (more than one only with leader election: one leads).
    pub(crate) replicas: usize,
    /// The cargo profile the manager and the simulated cloud are built with.
    pub(crate) build: Build,
}

/// The cargo profile the manager and the simulated cloud are built with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Build {
    /// Optimised, as shipped: the only build whose figures mean anything.
    #[default]
    Release,
    /// Unoptimised, with debug assertions and overflow checks: for checking that the commands and
    /// the guarantees they assert still work (CI), where the figures are not judged. The binaries
    /// are the ones `cargo xtask test` ran its tests against ([`Build::DEBUG_AS_TESTED`]).
    Debug,
}

impl Build {
    /// The cargo command that builds the debug binaries: the build `cargo nextest run --workspace
    /// --all-targets --all-features` makes, so that after the tests nothing is compiled (a build
    /// of one package with its own features rebuilt the crates under it, 131 s in a warm CI run).
    pub(crate) const DEBUG_AS_TESTED: [&str; 5] = [
        "test",
        "--no-run",
        "--workspace",
        "--all-targets",
        "--all-features",
    ];
}

impl Build {
    /// Its name, as given on the command line and recorded with the results.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Build::Release => "release",
            Build::Debug => "debug",
        }
    }
}

/// The Lease the manager replicas elect a leader with, in the scenario's namespace.
pub(crate) const LEASE: &str = "capi-rs-bench-manager";

impl ManagerOptions {
    /// The settings the manager ships with (`ManagerConfig::default()`,
    /// `ReconcilerOptions::default()`, leader election on as the shipped manifests have it).
    pub(crate) fn shipped() -> Self {
        let config = capi_runtime::manager::ManagerConfig::default();
        Self {
            qps: config.qps,
            burst: config.burst,
            concurrency: capi_runtime::ReconcilerOptions::default().concurrency,
            leader_election: true,
            replicas: 1,
            build: Build::Release,
        }
    }

    /// Whether these are the shipped settings.
    pub(crate) fn are_shipped(&self) -> bool {
        let shipped = Self::shipped();
        self.qps == shipped.qps
            && self.burst == shipped.burst
            && self.concurrency == shipped.concurrency
            && self.leader_election == shipped.leader_election
            && self.replicas == shipped.replicas
            && self.build == shipped.build
    }

    /// One line for the printed results.
    pub(crate) fn describe(&self) -> String {
        format!(
            "manager: qps {}, burst {}, concurrency {} per kind, leader election {}, {} replica(s), {} build ({})",
            self.qps,
            self.burst,
            self.concurrency,
            if self.leader_election { "on" } else { "off" },
            self.replicas,
            self.build.name(),
            if self.are_shipped() {
                "the shipped defaults"
            } else {
                "NOT the shipped defaults"
            }
        )
    }

    /// The settings as recorded with the results.
    pub(crate) fn json(&self) -> serde_json::Value {
        json!({"qps": self.qps, "burst": self.burst, "concurrency": self.concurrency,
               "leader_election": self.leader_election, "replicas": self.replicas,
               "shipped_defaults": self.are_shipped(),
               "build": self.build.name()})
    }
}

/// A child process killed (SIGKILL) when dropped.
#[derive(Debug)]
pub(crate) struct Process(Child);

impl Process {
    /// Peak RSS (MiB) and CPU seconds so far.
    pub(crate) fn usage(&self) -> Result<(f64, f64)> {
        measure::usage(self.0.id())
    }

    /// The process ID.
    pub(crate) fn id(&self) -> u32 {
        self.0.id()
    }

    /// Whether the process has exited on its own.
    fn exited(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(Some(_)))
    }

    /// Kills the process with SIGKILL and reaps it.
    pub(crate) fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Everything a scenario runs against.
pub(crate) struct Rig {
    pub(crate) management: ControlPlane,
    pub(crate) workload: ControlPlane,
    /// An admin client of the management API server (the benchmark's own requests are few: one
    /// watch and its metrics scrapes).
    pub(crate) client: Client,
    pub(crate) cloud: RemoteCloud,
    cloud_process: Process,
    cloud_url: String,
    /// The simulated cloud's per-cluster API endpoints ([`provider_inmemory::endpoints`]).
    endpoints_url: String,
    /// The manager replicas' processes (`None`: not running).
    managers: Vec<Option<Process>>,
    manager_options: ManagerOptions,
    /// The kubeconfig each manager replica uses (the management API server's, or a proxy's).
    manager_kubeconfigs: Vec<PathBuf>,
    bin_dir: PathBuf,
    log_path: PathBuf,
    /// The namespace the scenario's objects (and the manager's Lease) live in.
    namespace: String,
}

impl Rig {
    /// Starts both API servers (CRDs installed), the cloud, and a namespace `namespace`; the
    /// manager is started with [`Rig::start_manager`].
    pub(crate) async fn start(
        assets_dir: &Path,
        bin_dir: &Path,
        cloud: &CloudOptions,
        manager_options: ManagerOptions,
        namespace: &str,
        audit_log: Option<&Path>,
    ) -> Result<Self> {
        let assets = Assets::in_dir(assets_dir)?;
        let mut management_options = ControlPlaneOptions::default();
        if let Some(path) = audit_log {
            management_options = management_options.with_audit_log(path);
        }
        let (management, workload) = tokio::try_join!(
            ControlPlane::start_with_options(&assets, &management_options),
            ControlPlane::start_with(&assets)
        )?;
        let client = management.client().await?;
        let mut crds = capi_core::crd::core();
        crds.extend(capi_bootstrap::api::crds());
        crds.extend(capi_control_plane::api::crds());
        crds.extend(provider_inmemory::api::crds());
        install_crds(&client, &crds).await?;
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;

        let (cloud_process, cloud_url, endpoints_url) = start_cloud(bin_dir, cloud, &workload)?;
        let log_path =
            std::env::temp_dir().join(format!("capi-rs-bench-manager-{}.log", std::process::id()));
        std::fs::File::create(&log_path)?;
        println!("    manager log: {}", log_path.display());
        Ok(Self {
            manager_kubeconfigs: vec![
                management.kubeconfig_path().to_path_buf();
                manager_options.replicas.max(1)
            ],
            managers: (0..manager_options.replicas.max(1)).map(|_| None).collect(),
            management,
            workload,
            client,
            cloud: RemoteCloud::new(cloud_url.clone()),
            cloud_process,
            cloud_url,
            endpoints_url,
            manager_options,
            bin_dir: bin_dir.to_path_buf(),
            log_path,
            namespace: namespace.to_string(),
        })
    }

    /// Makes manager replica `replica` talk to the API server through `kubeconfig` (from its
    /// next start).
    pub(crate) fn replica_kubeconfig(&mut self, replica: usize, kubeconfig: PathBuf) {
        if let Some(each) = self.manager_kubeconfigs.get_mut(replica) {
            *each = kubeconfig;
        }
    }

    /// Starts every manager replica not running.
    pub(crate) fn start_manager(&mut self) -> Result<()> {
        for replica in 0..self.managers.len() {
            if self.managers[replica].is_none() {
                self.start_replica(replica)?;
            }
        }
        Ok(())
    }

    /// Starts `inmemory-manager` replica `replica` (core, bootstrap, control plane and in-memory
    /// controllers; `POD_NAME` `replica-<n>`, which starts its leader-election identity); the log of
    /// every replica is appended to one file across restarts. `CAPI_RS_BENCH_MANAGER_LOG` sets
    /// its `RUST_LOG` (`warn`); `CAPI_RS_BENCH_MANAGER_WRAPPER` names a program (with arguments)
    /// to run it under, such as a heap profiler.
    pub(crate) fn start_replica(&mut self, replica: usize) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log_path)?;
        let options = &self.manager_options;
        let kubeconfig = self
            .manager_kubeconfigs
            .get(replica)
            .context("no such manager replica")?;
        // A profiler to run the manager under (e.g. `heaptrack -o /tmp/manager`), split on
        // whitespace: for finding where memory goes, never for figures.
        let wrapper = std::env::var("CAPI_RS_BENCH_MANAGER_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace();
        let binary = self.bin_dir.join("inmemory-manager");
        let mut command = match words.next() {
            Some(program) => {
                let mut command = Command::new(program);
                command.args(words).arg(&binary);
                command
            }
            None => Command::new(&binary),
        };
        let child = command
            .args([
                "--cloud-url",
                &self.cloud_url,
                "--with-bootstrap",
                "--with-core",
                "--with-control-plane",
            ])
            .args(["--http-addr", "127.0.0.1:0", "--insecure-diagnostics"])
            .args(["--qps", &options.qps.to_string()])
            .args(["--burst", &options.burst.to_string()])
            .args(["--concurrency", &options.concurrency.to_string()])
            .args(if options.leader_election {
                vec![
                    "--leader-elect".to_string(),
                    format!("{}/{LEASE}", self.namespace),
                ]
            } else {
                Vec::new()
            })
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", format!("replica-{replica}"))
            .env(
                "RUST_LOG",
                std::env::var("CAPI_RS_BENCH_MANAGER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting inmemory-manager")?;
        self.managers[replica] = Some(Process(child));
        Ok(())
    }

    /// Kills every manager replica with SIGKILL, as a node failure or an OOM kill would.
    pub(crate) fn kill_manager(&mut self) {
        for replica in 0..self.managers.len() {
            self.kill_replica(replica);
        }
    }

    /// Kills manager replica `replica` with SIGKILL.
    pub(crate) fn kill_replica(&mut self, replica: usize) {
        if let Some(mut manager) = self.managers.get_mut(replica).and_then(Option::take) {
            manager.kill();
        }
    }

    /// Starts again every replica that exited on its own (a manager that lost its lease exits,
    /// and Kubernetes would restart its container); returns which.
    pub(crate) fn restart_exited(&mut self) -> Result<Vec<usize>> {
        let mut restarted = Vec::new();
        for replica in 0..self.managers.len() {
            if self.managers[replica].as_mut().is_some_and(Process::exited) {
                self.managers[replica] = None;
                self.start_replica(replica)?;
                restarted.push(replica);
            }
        }
        Ok(restarted)
    }

    /// The replica holding the Lease, if one does.
    pub(crate) async fn leader(&self) -> Result<Option<usize>> {
        let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
            self.client.clone(),
            &self.namespace,
        )
        .get_opt(LEASE)
        .await?;
        let holder = lease
            .and_then(|l| l.spec)
            .and_then(|spec| spec.holder_identity)
            .unwrap_or_default();
        Ok((0..self.managers.len()).find(|r| holder.starts_with(&format!("replica-{r}_"))))
    }

    /// The first running manager replica.
    pub(crate) fn manager(&self) -> Result<&Process> {
        self.managers
            .iter()
            .flatten()
            .next()
            .context("the manager is not running")
    }

    /// The simulated cloud's process ID.
    pub(crate) fn cloud_pid(&self) -> u32 {
        self.cloud_process.id()
    }

    /// Where the manager logs.
    pub(crate) fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// A `<cluster>-kubeconfig` Secret for `namespace` pointing at the cluster's own endpoint in
    /// the simulated cloud ([`provider_inmemory::endpoints`]): the shared workload API server,
    /// where the simulated kubelets register every cluster's nodes, seen as that cluster alone.
    pub(crate) fn workload_kubeconfig(&self, cluster: &str, namespace: &str) -> Result<Secret> {
        let kubeconfig =
            provider_inmemory::endpoints::kubeconfig_yaml(&self.endpoints_url, namespace, cluster);
        Ok(serde_json::from_value(json!({
            "metadata": {"name": format!("{cluster}-kubeconfig"),
                         "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "stringData": {"value": kubeconfig},
        }))?)
    }

    /// The objects of cluster `name` as `capictl generate` renders the built-in in-memory template
    /// (a KubeadmControlPlane of 1, `machines` − 1 workers run by `workers`); its
    /// `<name>-kubeconfig` Secret is created in `namespace` now, the objects are for the caller
    /// to create.
    pub(crate) async fn generated_cluster(
        &self,
        name: &str,
        namespace: &str,
        machines: u32,
        workers: super::stack::Workers,
    ) -> Result<Vec<kube::api::DynamicObject>> {
        let objects = super::stack::generated_cluster_with(
            name,
            namespace,
            machines - 1,
            workers,
            "v1.33.0",
        )?;
        Api::namespaced(self.client.clone(), namespace)
            .create(
                &PostParams::default(),
                &self.workload_kubeconfig(name, namespace)?,
            )
            .await?;
        Ok(objects)
    }

    /// What the cloud holds now.
    pub(crate) async fn inspect(&self) -> Result<Inspection> {
        self.cloud
            .inspect()
            .await
            .context("asking inmemory-cloud what it holds")
    }

    /// Checks the provider's own status against the cloud: every `InMemoryMachine` in `namespace`
    /// that the machine loop runs names its instance (`status.instanceID`, the one in its
    /// provider ID) and that instance's state, every `InMemoryCluster` its load balancer. One
    /// LIST of each kind. The machines standing for a pool's instances (labelled with the pool's
    /// name) are the pool loop's, which records only the contract's status on them: they are
    /// counted apart, not checked.
    pub(crate) async fn check_provider_status(
        &self,
        client: &Client,
        namespace: &str,
    ) -> Result<()> {
        use provider_inmemory::api::{InMemoryCluster, InMemoryMachine};
        use std::collections::HashMap;
        let cloud = self.inspect().await?;
        let states: HashMap<&str, String> = cloud
            .instances
            .iter()
            .map(|i| (i.id.as_str(), format!("{:?}", i.status)))
            .collect();
        let (pool_members, machines): (Vec<InMemoryMachine>, Vec<InMemoryMachine>) =
            Api::<InMemoryMachine>::namespaced(client.clone(), namespace)
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .partition(|m| {
                    kube::ResourceExt::labels(m).contains_key(capi_core::labels::MACHINE_POOL_NAME)
                });
        for machine in &machines {
            let name = kube::ResourceExt::name_any(machine);
            let status = machine.status.clone().unwrap_or_default();
            let id = status
                .instance_id
                .with_context(|| format!("InMemoryMachine {name} has no status.instanceID"))?;
            let in_spec = machine.spec.provider_id.as_deref().unwrap_or_default();
            anyhow::ensure!(
                in_spec.ends_with(&format!("/{id}")),
                "InMemoryMachine {name}: status.instanceID {id} is not its provider ID {in_spec}"
            );
            let state = states.get(id.as_str());
            anyhow::ensure!(
                state.is_some() && status.instance_state.as_ref() == state,
                "InMemoryMachine {name}: status.instanceState {:?}, the cloud says {state:?}",
                status.instance_state
            );
        }
        let clusters = Api::<InMemoryCluster>::namespaced(client.clone(), namespace)
            .list(&Default::default())
            .await?;
        for cluster in &clusters {
            let id = cluster
                .status
                .as_ref()
                .and_then(|s| s.load_balancer_id.as_deref());
            anyhow::ensure!(
                id.is_some_and(|id| cloud.load_balancers.iter().any(|lb| lb.id == id)),
                "InMemoryCluster {}: status.loadBalancerID {id:?} is no load balancer of the cloud",
                kube::ResourceExt::name_any(cluster)
            );
        }
        println!(
            "    provider status checked: {} machines, {} clusters ({} machines of pools not checked)",
            machines.len(),
            clusters.items.len(),
            pool_members.len()
        );
        Ok(())
    }
}

/// Spawns `inmemory-cloud` with its kubelets registering nodes in `workload` and an endpoint per
/// cluster over it; returns it, its URL and its endpoints' URL.
fn start_cloud(
    bin_dir: &Path,
    options: &CloudOptions,
    workload: &ControlPlane,
) -> Result<(Process, String, String)> {
    use std::io::BufRead;
    let mut child = Command::new(bin_dir.join("inmemory-cloud"))
        .args(["--listen", "127.0.0.1:0"])
        .args(options.args())
        .arg("--workload-kubeconfig")
        .arg(workload.kubeconfig_path())
        .args(["--workload-endpoints", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting inmemory-cloud")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let process = Process(child);
    let mut lines = std::io::BufReader::new(stdout);
    let mut announced = |prefix: &str| -> Result<String> {
        let mut line = String::new();
        lines.read_line(&mut line)?;
        Ok(line
            .trim()
            .strip_prefix(prefix)
            .with_context(|| format!("inmemory-cloud said {line:?}, expected {prefix:?}…"))?
            .to_string())
    };
    let url = announced("listening on ")?;
    let endpoints = announced("workload endpoints on ")?;
    Ok((process, url, endpoints))
}

/// Creates `object` (JSON of kind `K`) in `namespace`.
pub(crate) async fn create<K>(
    client: &Client,
    namespace: &str,
    object: serde_json::Value,
) -> Result<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object)?;
    Ok(Api::<K>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &object)
        .await?)
}
