//! `cargo xtask quickstart`: the README's main job — a Cluster API management plane on this
//! machine, end to end, with nothing but Rust.
//!
//! Provisions (once) and starts the local control plane, plus a second API server that plays the
//! workload cluster (its nodes are registered by simulated kubelets); runs a Manager with the
//! in-memory provider, the kubeadm bootstrap reconciler and the core controllers; generates a
//! cluster with `capictl`'s built-in template (a KubeadmControlPlane of 3, 3 workers), applies it and
//! shows progress until every machine is Running; prints the `describe` tree; scales the workers
//! 3 → 5; deletes a worker and shows it replaced; then stops (or keeps running with
//! `--keep-running`, printing the kubeconfig to use).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capi_actuator::InfrastructureControllers;
use capi_bootstrap::controller::KubeadmBootstrap;
use capi_cli::describe::{self, Style};
use capi_cli::generate::{self, Inputs};
use capi_control_plane::controller::{ControlPlaneSettings, KubeadmControlPlanes};
use capi_controllers::{CoreControllers, CoreSettings};
use capi_core::api::{Machine, MachineDeployment, MachinePhase};
use capi_core::condition;
use capi_runtime::manager::{Manager, ManagerConfig};
use capi_testing::envtest::{Assets, ControlPlane, ETCD_VERSION};
use capi_testing::{install_crds, table};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::{InMemoryCluster, InMemoryMachineTemplate};
use provider_inmemory::cloud::{CloudConfig, SimulatedCloud};
use provider_inmemory::etcd::SimulatedEtcdAccess;
use provider_inmemory::nodes::NodeRegistrar;
use serde_json::json;

use crate::command::step;

const NAMESPACE: &str = "quickstart";
const CLUSTER: &str = "demo";
const KUBERNETES_VERSION: &str = "v1.33.0";
/// How long the quickstart waits for any one step.
const STEP_TIMEOUT: Duration = Duration::from_secs(180);

pub(crate) fn run(keep_running: bool) -> Result<()> {
    step("Local control plane binaries (etcd, kube-apiserver)");
    let assets_dir = crate::envtest::ensure_control_plane()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let assets = Assets::in_dir(&assets_dir)?;
        step("Starting the management cluster and a workload API server (etcd + kube-apiserver on loopback)");
        let started = Instant::now();
        let (management, workload) =
            tokio::try_join!(ControlPlane::start_with(&assets), ControlPlane::start_with(&assets))?;
        println!("    management: {}", management.url());
        println!("    workload:   {} (simulated kubelets register nodes here)", workload.url());
        println!("    ready in {:.1?}", started.elapsed());
        let client = management.client().await?;
        let version = client.apiserver_version().await?;
        println!("    API server version: {} (etcd {ETCD_VERSION})", version.git_version);

        step("Installing CRDs: Cluster API core, kubeadm bootstrap, KubeadmControlPlane, in-memory provider");
        let mut crds = capi_core::crd::core();
        crds.extend(capi_bootstrap::api::crds());
        crds.extend(capi_control_plane::api::crds());
        crds.extend(provider_inmemory::api::crds());
        install_crds(&client, &crds).await?;
        println!("    {} CRDs installed", crds.len());

        step("Starting the Manager: in-memory provider, kubeadm bootstrap, KubeadmControlPlane, core controllers");
        let cloud = Arc::new(SimulatedCloud::new(CloudConfig {
            boot_time: Duration::from_millis(500),
            ..CloudConfig::default()
        }));
        let kubelets = tokio::spawn(
            NodeRegistrar::new(workload.client().await?, cloud.clone()).run(Duration::from_millis(200)),
        );
        let config = ManagerConfig {
            http_addr: ([127, 0, 0, 1], 0).into(),
            ..ManagerConfig::default()
        };
        let mut manager = Manager::new(management.config().await?, config).await?;
        let actuator = Arc::new(InMemoryActuator::new(cloud.clone(), cloud.clone(), Duration::from_millis(500)));
        manager.add_machine_reconciler(actuator.clone());
        manager.add_machine_template_reconciler::<InMemoryMachineTemplate, InMemoryCluster>(actuator.clone());
        manager.add_cluster_reconciler::<InMemoryCluster>(actuator);
        manager.add(KubeadmBootstrap::default());
        let etcd = Arc::new(SimulatedEtcdAccess::new(cloud.clone()));
        manager.add(KubeadmControlPlanes::new(ControlPlaneSettings { poll: Duration::from_secs(1), ..ControlPlaneSettings::new(etcd) }));
        manager.add(CoreControllers::new(CoreSettings { poll: Duration::from_secs(1), ..CoreSettings::default() }));
        println!("    health and metrics on http://{}/metrics", manager.http_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let manager_task = tokio::spawn(manager.run_until(async {
            let _ = stopped.await;
        }));

        step(&format!(
            "capictl generate cluster {CLUSTER} --infrastructure inmemory --kubernetes-version {KUBERNETES_VERSION} \
             --control-plane-machine-count 3 --worker-machine-count 3 --target-namespace {NAMESPACE}"
        ));
        let inputs = Inputs {
            cluster_name: CLUSTER.into(),
            namespace: Some(NAMESPACE.into()),
            kubernetes_version: Some(KUBERNETES_VERSION.into()),
            control_plane_machine_count: Some(3),
            worker_machine_count: Some(3),
            ..Inputs::default()
        };
        let yaml = generate::render(generate::built_in("inmemory", None)?, &inputs, |_| None)?;
        let objects = capi_cli::apply::parse(&yaml)?;
        let namespace = Namespace {
            metadata: ObjectMeta { name: Some(NAMESPACE.into()), ..ObjectMeta::default() },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await?;
        // The workload cluster's kubeconfig where the bootstrap provider would write it; a
        // simulated cluster's own endpoint answers nothing, the workload API server does.
        let kubeconfig: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{CLUSTER}-kubeconfig"), "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
            "stringData": {"value": workload.kubeconfig_yaml()},
        }))?;
        Api::<Secret>::namespaced(client.clone(), NAMESPACE).create(&PostParams::default(), &kubeconfig).await?;
        step(&format!("capictl apply -f {CLUSTER}.yaml (server-side apply, strict field validation)"));
        capi_cli::apply::apply(&client, &objects, Some(NAMESPACE), |what| println!("    {what} applied")).await?;

        step("Waiting for 6 Running machines (a KubeadmControlPlane of 3, joining one at a time, and 3 workers)");
        wait_for_machines(&client, 6, None).await?;
        print_etcd(&cloud).await?;
        print_describe(&client).await?;

        step("Scaling the workers 3 → 5 (kubectl scale machinedeployment demo-md-0 --replicas 5)");
        let deployments: Api<MachineDeployment> = Api::namespaced(client.clone(), NAMESPACE);
        deployments
            .patch_scale(&format!("{CLUSTER}-md-0"), &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}})))
            .await?;
        wait_for_machines(&client, 8, None).await?;

        let machines: Api<Machine> = Api::namespaced(client.clone(), NAMESPACE);
        let victim = machines
            .list(&ListParams::default().labels("pool=md-0"))
            .await?
            .items
            .into_iter()
            .map(|m| m.name_any())
            .min()
            .context("no worker machine to delete")?;
        step(&format!("Deleting machine {victim}: its MachineSet replaces it"));
        machines.delete(&victim, &DeleteParams::default()).await?;
        wait_for_machines(&client, 8, Some(&victim)).await?;

        step("kubectl get machines");
        let listing = table::get_table(&client, capi_core::api::GROUP, capi_core::api::VERSION, "machines", Some(NAMESPACE)).await?;
        println!("{listing}");
        print_describe(&client).await?;
        println!("    simulated cloud: {} instances", cloud.instance_count());

        if keep_running {
            println!(
                "\nEverything keeps running. Use the management cluster with:\n    export KUBECONFIG={}\n    \
                 cargo run -q -p capi-cli --bin capictl -- describe cluster {CLUSTER} -n {NAMESPACE}\nPress Ctrl-C to stop.",
                management.kubeconfig_path().display()
            );
            tokio::signal::ctrl_c().await?;
        }
        step("Stopping");
        let _ = stop.send(());
        match tokio::time::timeout(Duration::from_secs(30), manager_task).await {
            Ok(Ok(Ok(()))) => println!("    manager stopped"),
            Ok(Ok(Err(error))) => println!("    manager stopped with: {error}"),
            _ => println!("    manager did not stop in time; its tasks are dropped"),
        }
        kubelets.abort();
        drop(workload);
        drop(management);
        println!("\nQuickstart finished in {:.0?}; the local API servers are stopped.", started.elapsed());
        Ok(())
    })
}

/// Prints the simulated etcd's members of the quickstart's cluster: one per control-plane machine.
async fn print_etcd(cloud: &SimulatedCloud) -> Result<()> {
    use provider_inmemory::cloud::EtcdClusters;
    let key = provider_inmemory::etcd::etcd_cluster_key(NAMESPACE, CLUSTER);
    let etcd = cloud.etcd_cluster(&key).await?;
    let members: Vec<String> = etcd
        .members
        .iter()
        .map(|m| {
            let leads = if Some(m.id) == etcd.leader {
                " (leader)"
            } else {
                ""
            };
            format!("{}{leads}", m.name)
        })
        .collect();
    println!("    etcd members: {}", members.join(", "));
    Ok(())
}

/// Prints progress until `want` machines are Running and Ready with a node (and `gone`, if given,
/// no longer exists).
async fn wait_for_machines(client: &Client, want: usize, gone: Option<&str>) -> Result<()> {
    let machines: Api<Machine> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let all = machines.list(&ListParams::default()).await?.items;
        let count = |phase: MachinePhase| all.iter().filter(|m| m.phase() == Some(phase)).count();
        let ready = all
            .iter()
            .filter(|m| {
                m.metadata.deletion_timestamp.is_none()
                    && m.status.as_ref().is_some_and(|s| {
                        s.node_ref.is_some() && condition::is_true(&s.conditions, condition::READY)
                    })
            })
            .count();
        let deleting = all
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_some())
            .count();
        let line = format!(
            "    {:>5.1}s  machines: {} ({} Pending, {} Provisioning, {} Provisioned, {} Running, {} Deleting), {ready}/{want} ready",
            started.elapsed().as_secs_f64(),
            all.len(),
            count(MachinePhase::Pending),
            count(MachinePhase::Provisioning),
            count(MachinePhase::Provisioned),
            count(MachinePhase::Running),
            deleting,
        );
        let progress = line
            .split_once("machines:")
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_default();
        if progress != last {
            println!("{line}");
            last = progress;
        }
        let victim_gone = gone.is_none_or(|name| all.iter().all(|m| m.name_any() != name));
        if ready == want && all.len() == want && victim_gone {
            println!("    done in {:.1?}", started.elapsed());
            return Ok(());
        }
        if started.elapsed() > STEP_TIMEOUT {
            bail!("machines did not converge within {STEP_TIMEOUT:?}; last state:{last}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn print_describe(client: &Client) -> Result<()> {
    step(&format!(
        "capictl describe cluster {CLUSTER} -n {NAMESPACE}"
    ));
    let tree = describe::tree(client, NAMESPACE, CLUSTER).await?;
    let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::io::IsTerminal::is_terminal(&std::io::stdout());
    print!(
        "{}",
        describe::render(
            &tree,
            jiff::Timestamp::now(),
            Style {
                color,
                show_conditions: false
            }
        )
    );
    Ok(())
}
