//! Standalone mode end to end: the core controllers, the in-memory provider and simulated kubelets
//! registering nodes in a second (workload) API server. A Cluster with a MachineDeployment is
//! scaled 3 → 5 → 2, rolled to a new version with no capacity dip, healed by a
//! MachineHealthCheck after its node is deleted, and deleted with everything it owns.
//!
//! The MachineSet replica changes of the rollout are compared with a checked-in golden log
//! (`tests/golden/standalone-*.log`; `UPDATE_GOLDEN=1` rewrites it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capi_actuator::InfrastructureControllers;
use capi_controllers::{CoreControllers, CoreSettings, TEMPLATE_HASH_LABEL};
use capi_core::api::{
    Cluster, Machine, MachineDeployment, MachineHealthCheck, MachinePhase, MachineSet,
};
use capi_core::{condition, labels};
use capi_runtime::ReconcilerOptions;
use capi_runtime::manager::{Manager, ManagerConfig};
use capi_testing::envtest::ControlPlane;
use capi_testing::faults::ApiFaults;
use capi_testing::{TestEnv, manifest};
use common::{TIMEOUT, eventually, manager_config, policy, workload_kubeconfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::{InMemoryCluster, InMemoryMachine, InMemoryMachineTemplate};
use provider_inmemory::cloud::{CloudConfig, SimulatedCloud};
use provider_inmemory::nodes::NodeRegistrar;
use serde_json::json;

const MANIFESTS: &str = r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo}
spec:
  clusterNetwork: {pods: {cidrBlocks: [192.168.0.0/16]}}
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryCluster, name: demo}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryCluster
metadata: {name: demo}
spec: {}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachineTemplate
metadata: {name: workers}
spec: {template: {spec: {flavor: small}}}
---
apiVersion: v1
kind: Secret
metadata: {name: workers-bootstrap}
stringData: {value: "#cloud-config\n"}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: workers}
spec:
  clusterName: demo
  replicas: 3
  selector: {matchLabels: {pool: workers}}
  rollout: {strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}}
  template:
    metadata: {labels: {pool: workers}}
    spec:
      clusterName: demo
      version: v1.33.0
      bootstrap: {dataSecretName: workers-bootstrap}
      infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachineTemplate, name: workers}
"##;

struct World {
    env: TestEnv,
    ns: String,
    cloud: Arc<SimulatedCloud>,
    workload: ControlPlane,
    metrics: capi_runtime::metrics::Metrics,
    _tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl World {
    fn client(&self) -> Client {
        self.env.client()
    }
    fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.client(), &self.ns)
    }
    fn sets(&self) -> Api<MachineSet> {
        Api::namespaced(self.client(), &self.ns)
    }
    fn deployments(&self) -> Api<MachineDeployment> {
        Api::namespaced(self.client(), &self.ns)
    }
}

async fn world() -> World {
    world_as(Identity::Admin).await
}

/// Whom the Manager runs as.
enum Identity {
    /// `system:masters`.
    Admin,
    /// The in-memory manager's ServiceAccount with only its generated RBAC
    /// (`config/inmemory/rbac.yaml`), cluster-wide, with leader election.
    GeneratedRbac,
    /// `system:masters`, every request passing through these fault rules.
    Faulty(ApiFaults),
}

/// A ServiceAccount token for the generated RBAC of the in-memory manager.
async fn generated_rbac_token(env: &TestEnv) -> String {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/inmemory/rbac.yaml"),
    )
    .unwrap();
    let system = "capi-inmemory-system";
    let namespace: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": system}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client())
        .create(&Default::default(), &namespace)
        .await
        .unwrap();
    manifest::create_all(&env.client(), system, &manifest::parse(&text).unwrap())
        .await
        .unwrap();
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(env.client(), system)
        .create_token_request("capi-inmemory-manager", &Default::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
}

async fn world_as(identity: Identity) -> World {
    let _ = capi_runtime::telemetry::init_logging(capi_runtime::telemetry::LogFormat::Text);
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let workload = ControlPlane::start().await.unwrap();
    let cloud = Arc::new(SimulatedCloud::new(CloudConfig::default()));

    // The workload cluster's kubeconfig, where the bootstrap provider would put it.
    workload_kubeconfig(&env.client(), &ns, "demo", &workload).await;

    let registrar = NodeRegistrar::new(workload.client().await.unwrap(), cloud.clone());
    let kubelets = tokio::spawn(registrar.run(Duration::from_millis(100)));

    let mut config = manager_config(&ns);
    let kube_config = match &identity {
        Identity::Admin | Identity::Faulty(_) => env.control_plane().config().await.unwrap(),
        Identity::GeneratedRbac => {
            // As deployed: every namespace, leader election in the system namespace.
            config.reconciler = ReconcilerOptions::default().retry_policy(policy());
            config.leader_election = Some(capi_runtime::manager::LeaderElectionConfig::new(
                "capi-inmemory-system",
                "capi-inmemory-manager",
            ));
            let token = generated_rbac_token(&env).await;
            env.control_plane().config_with_token(&token).await.unwrap()
        }
    };
    let manager = match identity {
        Identity::Faulty(faults) => {
            let client = faults
                .client(env.control_plane().kubeconfig_yaml())
                .await
                .unwrap();
            Manager::with_client(client, config).await.unwrap()
        }
        _ => Manager::new(kube_config, config).await.unwrap(),
    };
    let metrics = manager.metrics();
    let running = start_manager(manager, cloud.clone()).await;
    World {
        env,
        ns,
        cloud,
        workload,
        metrics,
        _tasks: vec![kubelets, running],
    }
}

/// `manager` with the in-memory provider, kubeadm bootstrap and core controllers, running until
/// the returned task is aborted.
async fn start_manager(
    mut manager: Manager,
    cloud: Arc<SimulatedCloud>,
) -> tokio::task::JoinHandle<()> {
    let actuator = Arc::new(InMemoryActuator::new(
        cloud.clone(),
        cloud,
        Duration::from_millis(50),
    ));
    manager.add_machine_reconciler(actuator.clone());
    manager.add_machine_template_reconciler::<InMemoryMachineTemplate, InMemoryCluster>(
        actuator.clone(),
    );
    manager.add_cluster_reconciler::<InMemoryCluster>(actuator);
    manager.add(capi_bootstrap::controller::KubeadmBootstrap::default());
    manager.add(CoreControllers::new(CoreSettings {
        poll: Duration::from_millis(200),
        ..CoreSettings::default()
    }));
    tokio::spawn(async move {
        let _ = manager.run_until(std::future::pending()).await;
    })
}

/// The machines that are Running and Ready with a node, by name.
async fn running(world: &World) -> BTreeMap<String, Machine> {
    world
        .machines()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|m| {
            m.metadata.deletion_timestamp.is_none()
                && m.phase() == Some(MachinePhase::Running)
                && m.status.as_ref().is_some_and(|s| {
                    s.node_ref.is_some() && condition::is_true(&s.conditions, condition::READY)
                })
        })
        .map(|m| (m.name_any(), m))
        .collect()
}

async fn all_machines(world: &World) -> Vec<Machine> {
    world
        .machines()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

async fn scale(world: &World, replicas: i32) {
    let patch = json!({"spec": {"replicas": replicas}});
    world
        .deployments()
        .patch("workers", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Waits until exactly `n` machines exist, all Running with nodes, and the cloud has `n`
/// instances.
async fn converged(world: &World, n: usize) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let machines = all_machines(world).await;
        if machines.len() == n
            && running(world).await.len() == n
            && world.cloud.instance_count() == n
        {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let summary: Vec<String> = machines
                .iter()
                .map(|m| {
                    format!(
                        "{} phase={:?} deleting={} finalizers={:?} conditions={:?}",
                        m.name_any(),
                        m.phase(),
                        m.metadata.deletion_timestamp.is_some(),
                        m.finalizers(),
                        m.status.as_ref().map(|s| s
                            .conditions
                            .iter()
                            .map(|c| format!("{}={} {} {}", c.type_, c.status, c.reason, c.message))
                            .collect::<Vec<_>>())
                    )
                })
                .collect();
            let infra: Vec<String> = Api::<InMemoryMachine>::namespaced(world.client(), &world.ns)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .map(|m| {
                    format!(
                        "{} deleting={} owners={:?} providerID={:?}",
                        m.name_any(),
                        m.metadata.deletion_timestamp.is_some(),
                        m.owner_references()
                            .iter()
                            .map(|o| &o.name)
                            .collect::<Vec<_>>(),
                        m.spec.provider_id
                    )
                })
                .collect();
            let instances: Vec<String> = world
                .cloud
                .instances()
                .iter()
                .map(|i| format!("{i:?}"))
                .collect();
            panic!(
                "timed out waiting for {n} running machines; cloud has {}:\n{}\ninfra:\n{}\ninstances:\n{}",
                world.cloud.instance_count(),
                summary.join("\n"),
                infra.join("\n"),
                instances.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn check_golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing {}; run with UPDATE_GOLDEN=1", path.display()));
    assert_eq!(
        actual,
        expected,
        "behaviour differs from {}",
        path.display()
    );
}

#[tokio::test]
async fn a_machine_deployment_scales_rolls_heals_and_goes_away() {
    let world = world().await;
    let objects = manifest::parse(MANIFESTS).unwrap();
    manifest::create_all(&world.client(), &world.ns, &objects)
        .await
        .unwrap();

    // Applied: the cluster becomes Provisioned and three machines Running with node references.
    converged(&world, 3).await;
    let clusters: Api<Cluster> = Api::namespaced(world.client(), &world.ns);
    let cluster = clusters.get("demo").await.unwrap();
    let status = cluster.status.clone().unwrap();
    assert_eq!(
        status.phase,
        Some(capi_core::api::ClusterPhase::Provisioned)
    );
    assert_eq!(
        status.initialization.unwrap().infrastructure_provisioned,
        Some(true)
    );
    assert!(
        cluster
            .spec
            .control_plane_endpoint
            .is_some_and(|e| e.is_valid()),
        "the endpoint is copied from the infrastructure cluster"
    );
    for machine in running(&world).await.values() {
        let node = machine.status.as_ref().unwrap().node_ref.as_ref().unwrap();
        let found = Api::<Node>::all(world.workload.client().await.unwrap())
            .get(&node.name)
            .await
            .unwrap();
        assert_eq!(
            found.spec.unwrap().provider_id,
            machine.spec.provider_id,
            "the node reference names the node with the machine's provider ID"
        );
        assert!(condition::is_true(
            &machine.status.as_ref().unwrap().conditions,
            condition::READY
        ));
    }
    eventually("deployment status", || async {
        let d = world.deployments().get("workers").await.unwrap();
        let s = d.status.unwrap_or_default();
        s.replicas == Some(3) && s.available_replicas == Some(3) && s.up_to_date_replicas == Some(3)
    })
    .await;

    // kubectl's columns, as upstream's.
    let table = capi_testing::table::get_table(
        &world.client(),
        "cluster.x-k8s.io",
        "v1beta2",
        "machines",
        Some(&world.ns),
    )
    .await
    .unwrap();
    assert_eq!(table.cell(0, "Phase"), Some("Running"));
    assert_eq!(table.cell(0, "Ready"), Some("True"));
    assert_eq!(table.cell(0, "Available"), Some("True"));
    assert_eq!(table.cell(0, "Up-to-date"), Some("True"));
    assert_eq!(table.cell(0, "Version"), Some("v1.33.0"));
    for (plural, column, value) in [
        ("machinesets", "Current", "3"),
        ("machinesets", "Available", "3"),
        ("machinedeployments", "Desired", "3"),
        ("machinedeployments", "Up-to-date", "3"),
        ("machinedeployments", "Phase", "Running"),
        ("clusters", "Phase", "Provisioned"),
        ("clusters", "W Available", "3"),
    ] {
        // Each object's status is aggregated by its own controller from the ones below it, so
        // the Cluster's worker counts may trail the deployment's by a reconcile.
        let client = world.client();
        let ns = world.ns.clone();
        eventually(&format!("{plural} {column} = {value}"), || {
            let client = client.clone();
            let ns = ns.clone();
            async move {
                let table = capi_testing::table::get_table(
                    &client,
                    "cluster.x-k8s.io",
                    "v1beta2",
                    plural,
                    Some(&ns),
                )
                .await
                .unwrap();
                table.cell(0, column) == Some(value)
            }
        })
        .await;
    }

    // Every MachineSet replica change from here on, for the golden logs.
    let changes = Arc::new(Mutex::new(Vec::<(String, i64, i32)>::new()));
    let recorder = {
        let changes = Arc::clone(&changes);
        // The last state of each set, kept apart from the log, which the test drains per phase.
        let mut last_seen: BTreeMap<String, (i64, i32)> = BTreeMap::new();
        let sets = world.sets();
        tokio::spawn(async move {
            let mut stream = watcher(sets, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(set)) = stream.next().await {
                let revision = set
                    .annotations()
                    .get(labels::REVISION)
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0);
                let state = (revision, set.spec.replicas.unwrap_or(0));
                if last_seen.insert(set.name_any(), state) != Some(state) {
                    changes
                        .lock()
                        .unwrap()
                        .push((set.name_any(), state.0, state.1));
                }
            }
        })
    };

    // Scale 3 → 5 → 2.
    scale(&world, 5).await;
    converged(&world, 5).await;
    scale(&world, 2).await;
    converged(&world, 2).await;
    let scaled: String = changes
        .lock()
        .unwrap()
        .drain(..)
        .map(|(_, revision, replicas)| {
            format!("MachineSet (revision {revision}): replicas {replicas}\n")
        })
        .collect();
    check_golden("standalone-scale.log", &scaled);

    // Roll to a new version, sampling capacity.

    let old_hash = world
        .sets()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items[0]
        .labels()
        .get(TEMPLATE_HASH_LABEL)
        .cloned()
        .unwrap();
    let patch = json!({"spec": {"template": {"spec": {"version": "v1.33.1"}}}});
    world
        .deployments()
        .patch("workers", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let mut most = 0;
    let mut fewest_available = usize::MAX;
    let mut needs_rollout = false;
    loop {
        let machines = all_machines(&world).await;
        let live: Vec<&Machine> = machines
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .collect();
        let available = live
            .iter()
            .filter(|m| {
                m.status
                    .as_ref()
                    .is_some_and(|s| condition::is_true(&s.conditions, condition::AVAILABLE))
            })
            .count();
        // Machines being deleted are on their way out; upstream does not count them either.
        most = most.max(live.len());
        needs_rollout |= live.iter().any(|m| {
            m.spec.version.as_deref() == Some("v1.33.0")
                && m.status.as_ref().is_some_and(|s| {
                    condition::get(&s.conditions, condition::UP_TO_DATE)
                        .is_some_and(|c| c.reason == "NeedsRollout")
                })
        });
        fewest_available = fewest_available.min(available);
        let done = machines.len() == 2
            && live
                .iter()
                .all(|m| m.spec.version.as_deref() == Some("v1.33.1"))
            && running(&world).await.len() == 2
            && world
                .sets()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len()
                == 1;
        if done {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "rollout timed out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        most <= 3,
        "never more than replicas + maxSurge machines not being deleted: saw {most}"
    );
    assert!(
        fewest_available >= 2,
        "never fewer than replicas − maxUnavailable available: saw {fewest_available}"
    );
    assert_eq!(world.cloud.instance_count(), 2, "old instances deleted");
    assert!(
        needs_rollout,
        "old machines reported UpToDate=False (NeedsRollout) while they lived"
    );
    recorder.abort();
    let log: String = changes
        .lock()
        .unwrap()
        .iter()
        .map(|(name, revision, replicas)| {
            let which = if name.ends_with(&old_hash) {
                "old"
            } else {
                "new"
            };
            format!("{which} MachineSet (revision {revision}): replicas {replicas}\n")
        })
        .collect();
    check_golden("standalone-rolling-update.log", &log);

    // Delete a node: the health check marks its machine and the set replaces it.
    initialize_control_plane(&world).await;
    let checks: Api<MachineHealthCheck> = Api::namespaced(world.client(), &world.ns);
    let check: MachineHealthCheck = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
        "metadata": {"name": "workers"},
        "spec": {"clusterName": "demo", "selector": {"matchLabels": {"pool": "workers"}},
                 "checks": {"nodeStartupTimeoutSeconds": 60,
                            "unhealthyNodeConditions": [{"type": "Ready", "status": "False", "timeoutSeconds": 5}]},
                 "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": "50%"}}}
    }))
    .unwrap();
    checks.create(&Default::default(), &check).await.unwrap();
    eventually("the health check sees two healthy machines", || async {
        let c = checks.get("workers").await.unwrap();
        c.status
            .is_some_and(|s| s.current_healthy == Some(2) && s.expected_machines == Some(2))
    })
    .await;
    let before = running(&world).await;
    let (victim, machine) = before.iter().next().unwrap();
    let node = machine
        .status
        .as_ref()
        .unwrap()
        .node_ref
        .clone()
        .unwrap()
        .name;
    // The victim's health and remediation as every write leaves them.
    let states = Arc::new(Mutex::new(Vec::<String>::new()));
    let machine_recorder = {
        let states = Arc::clone(&states);
        let machines = world.machines();
        let victim = victim.clone();
        tokio::spawn(async move {
            let config = watcher::Config::default().fields(&format!("metadata.name={victim}"));
            let mut stream = watcher(machines, config).applied_objects().boxed();
            while let Some(Ok(machine)) = stream.next().await {
                let conditions = machine
                    .status
                    .as_ref()
                    .map(|s| s.conditions.clone())
                    .unwrap_or_default();
                let show = |type_: &str| {
                    condition::get(&conditions, type_)
                        .map_or("-".to_string(), |c| format!("{} ({})", c.status, c.reason))
                };
                let line = format!(
                    "victim: HealthCheckSucceeded={} OwnerRemediated={} deleting={}\n",
                    show(condition::HEALTH_CHECK_SUCCEEDED),
                    show("OwnerRemediated"),
                    machine.metadata.deletion_timestamp.is_some()
                );
                let mut states = states.lock().unwrap();
                if states.last() != Some(&line) {
                    states.push(line);
                }
            }
        })
    };
    eventually("the recorder sees the victim", || async {
        !states.lock().unwrap().is_empty()
    })
    .await;
    Api::<Node>::all(world.workload.client().await.unwrap())
        .delete(&node, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the machine without a node is replaced", || async {
        let now = running(&world).await;
        now.len() == 2 && !now.contains_key(victim) && all_machines(&world).await.len() == 2
    })
    .await;
    machine_recorder.abort();
    let mut remediation: String = states.lock().unwrap().concat();
    remediation.push_str("replacement: Running with a node\n");
    check_golden("standalone-remediation.log", &remediation);
    assert_eq!(
        world.cloud.instance_count(),
        2,
        "the unhealthy instance is gone"
    );
    // As upstream, the machine handed over for remediation has an event saying so, and why.
    let events = event_lines(&world).await;
    let marked: Vec<&String> = events
        .iter()
        .filter(|e| e.contains("MachineMarkedUnhealthy"))
        .collect();
    assert_eq!(marked.len(), 1, "{events:#?}");
    assert!(
        marked[0].starts_with(&format!("Normal MachineMarkedUnhealthy Machine/{victim}:"))
            && marked[0].contains("NodeNotFound"),
        "{marked:?}"
    );

    // Delete the cluster: everything goes, in the management cluster and in the cloud.
    clusters
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    eventually("everything deleted", || async {
        let ns = &world.ns;
        let client = world.client();
        clusters.get_opt("demo").await.unwrap().is_none()
            && all_machines(&world).await.is_empty()
            && world
                .sets()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
            && world
                .deployments()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
            && Api::<InMemoryMachine>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
            && Api::<InMemoryCluster>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
            && checks
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
    })
    .await;
    assert_eq!(world.cloud.instance_count(), 0, "no instance leaked");
    let secrets: Api<Secret> = Api::namespaced(world.client(), &world.ns);
    assert!(
        secrets.get_opt("demo-kubeconfig").await.unwrap().is_some(),
        "a Secret the cluster does not own is left alone"
    );
}

/// The deployment's manifests with `replicas` machines and extra fields in the machine template
/// spec (YAML flow mappings, one per line, indented as template spec fields).
fn manifests(replicas: i32, template_extra: &[&str]) -> Vec<kube::api::DynamicObject> {
    let mut text = MANIFESTS.replace("replicas: 3", &format!("replicas: {replicas}"));
    let extra: String = template_extra
        .iter()
        .map(|line| format!("\n      {line}"))
        .collect();
    text = text.replace("version: v1.33.0", &format!("version: v1.33.0{extra}"));
    manifest::parse(&text).unwrap()
}

fn pod(name: &str, node: &str, app: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "automountServiceAccountToken": false,
                 "containers": [{"name": "main", "image": "example.invalid/app:1"}]}
    }))
    .unwrap()
}

#[tokio::test]
async fn deletion_drains_the_node_respecting_budgets_until_the_timeout() {
    let world = world().await;
    let objects = manifests(1, &["deletion: {nodeDrainTimeoutSeconds: 4}"]);
    manifest::create_all(&world.client(), &world.ns, &objects)
        .await
        .unwrap();
    converged(&world, 1).await;
    let (name, machine) = running(&world).await.into_iter().next().unwrap();
    let node = machine.status.unwrap().node_ref.unwrap().name;

    // A pod that may go, and one that a PodDisruptionBudget protects (no disruption controller
    // runs here, so the budget never allows an eviction).
    let workload = world.workload.client().await.unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(workload.clone(), "default");
    pods.create(&Default::default(), &pod("web", &node, "web"))
        .await
        .unwrap();
    pods.create(&Default::default(), &pod("guarded", &node, "guarded"))
        .await
        .unwrap();
    // Running, as a kubelet would report: pending pods are evicted without asking budgets.
    for name in ["web", "guarded"] {
        let running = json!({"status": {"phase": "Running"}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&running))
            .await
            .unwrap();
    }
    let budget = manifest::parse(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: guarded}\nspec: {minAvailable: 1, selector: {matchLabels: {app: guarded}}}\n",
    )
    .unwrap();
    manifest::create_all(&workload, "default", &budget)
        .await
        .unwrap();

    world
        .machines()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the drain reports the budget", || async {
        world
            .machines()
            .get_opt(&name)
            .await
            .unwrap()
            .is_some_and(|m| {
                m.status.as_ref().is_some_and(|s| {
                    condition::get(&s.conditions, condition::DELETING).is_some_and(|c| {
                        c.reason == "DrainingNode"
                            && c.message.contains("PodDisruptionBudget")
                            && c.message.contains("default/guarded")
                    })
                })
            })
    })
    .await;
    let cordoned = Api::<Node>::all(workload.clone()).get(&node).await.unwrap();
    assert_eq!(
        cordoned.spec.unwrap().unschedulable,
        Some(true),
        "the node is cordoned first"
    );
    eventually("the unprotected pod is evicted", || async {
        pods.get_opt("web").await.unwrap().is_none()
    })
    .await;
    assert!(
        pods.get_opt("guarded").await.unwrap().is_some(),
        "the budget holds while the timeout runs"
    );
    // After the drain timeout the machine goes anyway; its set replaces it.
    eventually("the machine is deleted after the drain timeout", || async {
        world.machines().get_opt(&name).await.unwrap().is_none()
    })
    .await;
    eventually("its node is deleted", || async {
        Api::<Node>::all(workload.clone())
            .get_opt(&node)
            .await
            .unwrap()
            .is_none()
    })
    .await;
    converged(&world, 1).await;
}

#[tokio::test]
async fn a_health_check_stops_remediating_when_too_many_machines_are_unhealthy() {
    let world = world().await;
    let objects = manifests(2, &[]);
    manifest::create_all(&world.client(), &world.ns, &objects)
        .await
        .unwrap();
    converged(&world, 2).await;
    initialize_control_plane(&world).await;
    let checks: Api<MachineHealthCheck> = Api::namespaced(world.client(), &world.ns);
    let check: MachineHealthCheck = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
        "metadata": {"name": "workers"},
        "spec": {"clusterName": "demo", "selector": {"matchLabels": {"pool": "workers"}},
                 "remediation": {"triggerIf": {"unhealthyInRange": "[0-0]"}}}
    }))
    .unwrap();
    checks.create(&Default::default(), &check).await.unwrap();
    let before = running(&world).await;
    let (victim, machine) = before.iter().next().unwrap();
    let node = machine
        .status
        .as_ref()
        .unwrap()
        .node_ref
        .clone()
        .unwrap()
        .name;
    Api::<Node>::all(world.workload.client().await.unwrap())
        .delete(&node, &DeleteParams::default())
        .await
        .unwrap();
    eventually("remediation is short-circuited", || async {
        checks
            .get("workers")
            .await
            .unwrap()
            .status
            .is_some_and(|s| {
                s.current_healthy == Some(1)
                    && condition::get(&s.conditions, condition::REMEDIATION_ALLOWED)
                        .is_some_and(|c| c.status == "False" && c.reason == "TooManyUnhealthy")
            })
    })
    .await;
    // The check's status is written even when marking a machine met a conflict (the mark is
    // retried on the next pass): the verdict on the machine may land just after it.
    eventually("the machine's verdict is NodeNotFound", || async {
        let marked = world.machines().get(victim).await.unwrap();
        let conditions = marked.status.unwrap_or_default().conditions;
        condition::get(&conditions, condition::HEALTH_CHECK_SUCCEEDED)
            .is_some_and(|c| c.reason == "NodeNotFound")
    })
    .await;
    let marked = world.machines().get(victim).await.unwrap();
    let conditions = marked.status.unwrap().conditions;
    assert!(
        condition::get(&conditions, "OwnerRemediated").is_none(),
        "not marked for remediation"
    );
    // As upstream: the check warns that it holds back; the machine, not handed over for
    // remediation, gets no `MachineMarkedUnhealthy`.
    eventually("the restriction is an event", || async {
        event_lines(&world)
            .await
            .iter()
            .any(|e| e.starts_with("Warning RemediationRestricted MachineHealthCheck/workers:"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events = event_lines(&world).await;
    assert!(
        !events.iter().any(|e| e.contains("MachineMarkedUnhealthy")),
        "{events:#?}"
    );
    assert!(
        world
            .machines()
            .get_opt(victim)
            .await
            .unwrap()
            .is_some_and(|m| m.metadata.deletion_timestamp.is_none()),
        "the unhealthy machine is left alone"
    );
}

#[tokio::test]
async fn a_health_check_judges_no_worker_before_the_control_plane_is_initialized() {
    let world = world().await;
    let objects = manifests(1, &[]);
    manifest::create_all(&world.client(), &world.ns, &objects)
        .await
        .unwrap();
    converged(&world, 1).await;
    create_lonely_worker(&world).await;
    let checks: Api<MachineHealthCheck> = Api::namespaced(world.client(), &world.ns);
    let check: MachineHealthCheck = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
        "metadata": {"name": "spare"},
        "spec": {"clusterName": "demo", "selector": {"matchLabels": {"pool": "spare"}},
                 "checks": {"nodeStartupTimeoutSeconds": 1},
                 "remediation": {"triggerIf": {"unhealthyInRange": "[0-0]"}}}
    }))
    .unwrap();
    checks.create(&Default::default(), &check).await.unwrap();
    let health = || async {
        world
            .machines()
            .get("lonely")
            .await
            .unwrap()
            .status
            .and_then(|s| condition::get(&s.conditions, condition::HEALTH_CHECK_SUCCEEDED).cloned())
    };
    eventually("the check has looked at the worker", || async {
        checks
            .get("spare")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.expected_machines == Some(1))
    })
    .await;
    // Well past its 1-s start-up timeout, but its cluster has no control plane yet: as upstream,
    // a worker is not judged then (it could not have joined).
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(health().await, None);
    initialize_control_plane(&world).await;
    eventually("the worker without a node is found unhealthy", || async {
        health()
            .await
            .is_some_and(|c| c.status == "False" && c.reason == "NodeStartupTimeout")
    })
    .await;
}

/// Creates `lonely`, a worker of pool `spare` whose infrastructure machine does not exist: it
/// never gets a node.
async fn create_lonely_worker(world: &World) {
    let lonely: Machine = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "lonely", "labels": {"pool": "spare"}},
        "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "workers-bootstrap"},
                 "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev",
                                       "kind": "InMemoryMachine", "name": "lonely"}}
    }))
    .unwrap();
    world
        .machines()
        .create(&Default::default(), &lonely)
        .await
        .unwrap();
}

/// Brings the cluster's control plane to initialized, which a MachineHealthCheck waits for before
/// it judges any worker (upstream's rule): a control-plane machine comes up, the Cluster records
/// `ControlPlaneInitialized` (which stays once set), and the machine goes again — the world is
/// as before, with an initialized control plane.
async fn initialize_control_plane(world: &World) {
    let infra: InMemoryMachine = serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "InMemoryMachine",
        "metadata": {"name": "cp-0"}, "spec": {"flavor": "small"}
    }))
    .unwrap();
    Api::<InMemoryMachine>::namespaced(world.client(), &world.ns)
        .create(&Default::default(), &infra)
        .await
        .unwrap();
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "cp-0", "labels": {"cluster.x-k8s.io/control-plane": ""}},
        "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "workers-bootstrap"},
                 "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev",
                                       "kind": "InMemoryMachine", "name": "cp-0"}}
    }))
    .unwrap();
    world
        .machines()
        .create(&Default::default(), &machine)
        .await
        .unwrap();
    let clusters: Api<Cluster> = Api::namespaced(world.client(), &world.ns);
    eventually("the control plane is initialized", || async {
        clusters.get("demo").await.unwrap().status.is_some_and(|s| {
            condition::is_true(&s.conditions, condition::CONTROL_PLANE_INITIALIZED)
        })
    })
    .await;
    world
        .machines()
        .delete("cp-0", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the control-plane machine is gone", || async {
        world.machines().get_opt("cp-0").await.unwrap().is_none()
    })
    .await;
}

/// The events of the world's namespace, one line each: `type reason kind/name: note`.
async fn event_lines(world: &World) -> Vec<String> {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(world.client(), &world.ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| {
            let regarding = e.regarding.unwrap_or_default();
            format!(
                "{} {} {}/{}: {}",
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                regarding.kind.unwrap_or_default(),
                regarding.name.unwrap_or_default(),
                e.note.unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test]
async fn a_health_check_assesses_every_machine_while_one_refuses_its_writes() {
    let faults = ApiFaults::default();
    let world = world_as(Identity::Faulty(faults.clone())).await;
    let objects = manifests(3, &[]);
    manifest::create_all(&world.client(), &world.ns, &objects)
        .await
        .unwrap();
    converged(&world, 3).await;
    initialize_control_plane(&world).await;
    // Every status write to one machine meets a "newer version" from now on, as when its own
    // controller keeps writing it.
    let stubborn = running(&world).await.into_keys().next().unwrap();
    faults.fail_next(
        http::Method::PATCH,
        &format!("/machines/{stubborn}/status"),
        409,
        u32::MAX,
    );
    let checks: Api<MachineHealthCheck> = Api::namespaced(world.client(), &world.ns);
    let check: MachineHealthCheck = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
        "metadata": {"name": "workers"},
        "spec": {"clusterName": "demo", "selector": {"matchLabels": {"pool": "workers"}}}
    }))
    .unwrap();
    checks.create(&Default::default(), &check).await.unwrap();

    eventually("the other machines are marked healthy", || async {
        let marked = all_machines(&world)
            .await
            .into_iter()
            .filter(|m| {
                m.status.as_ref().is_some_and(|s| {
                    condition::is_true(&s.conditions, condition::HEALTH_CHECK_SUCCEEDED)
                })
            })
            .map(|m| m.name_any())
            .collect::<Vec<_>>();
        marked.len() == 2 && !marked.contains(&stubborn)
    })
    .await;
    eventually("the check reports all three machines healthy", || async {
        checks
            .get("workers")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.expected_machines == Some(3) && s.current_healthy == Some(3))
    })
    .await;
    assert!(faults.injected() > 0);
}

#[tokio::test]
async fn a_health_check_marks_no_machine_before_its_node_is_there() {
    let world = world().await;
    let objects = manifests(2, &[]);
    manifest::create_all(&world.client(), &world.ns, &objects)
        .await
        .unwrap();
    converged(&world, 2).await;
    initialize_control_plane(&world).await;
    create_lonely_worker(&world).await;
    let checks: Api<MachineHealthCheck> = Api::namespaced(world.client(), &world.ns);
    let check: MachineHealthCheck = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
        "metadata": {"name": "all"},
        "spec": {"clusterName": "demo",
                 "selector": {"matchExpressions": [
                     {"key": "pool", "operator": "In", "values": ["workers", "spare"]}]}}
    }))
    .unwrap();
    checks.create(&Default::default(), &check).await.unwrap();
    // As upstream: a machine is healthy only once its node is there; before that it is neither
    // counted healthy nor marked either way, and it counts against `triggerIf` (unset: 100 % of
    // the 3 machines, so 3 - 1 more may be remediated).
    eventually(
        "the two machines with nodes are healthy, the third is not",
        || async {
            checks.get("all").await.unwrap().status.is_some_and(|s| {
                s.expected_machines == Some(3)
                    && s.current_healthy == Some(2)
                    && s.remediations_allowed == Some(2)
            })
        },
    )
    .await;
    let marked = all_machines(&world)
        .await
        .into_iter()
        .filter(|m| {
            m.status.as_ref().is_some_and(|s| {
                condition::get(&s.conditions, condition::HEALTH_CHECK_SUCCEEDED).is_some()
            })
        })
        .map(|m| m.name_any())
        .collect::<Vec<_>>();
    assert_eq!(marked.len(), 2, "marked: {marked:?}");
    assert!(
        !marked.contains(&"lonely".to_string()),
        "marked: {marked:?}"
    );
}

/// How many reconciles `controller` has finished, from the manager's metrics.
fn reconciles(world: &World, controller: &str) -> f64 {
    let prefix = format!("controller_runtime_reconcile_total{{controller=\"{controller}\",");
    world
        .metrics
        .encode()
        .lines()
        .filter(|line| line.starts_with(&prefix))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Waits until `controller` has finished no reconcile for a second.
async fn quiet(world: &World, controller: &str) -> f64 {
    let mut last = reconciles(world, controller);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = reconciles(world, controller);
        if now == last {
            return now;
        }
        last = now;
    }
}

#[tokio::test]
async fn status_counters_of_a_cluster_do_not_wake_its_machines() {
    let world = world().await;
    manifest::create_all(&world.client(), &world.ns, &manifests(3, &[]))
        .await
        .unwrap();
    converged(&world, 3).await;
    let before = quiet(&world, "inmemorymachine").await;
    assert!(before > 0.0);

    // What the Cluster controller writes as machines come and go: counters and conditions.
    let clusters: Api<capi_core::api::Cluster> = Api::namespaced(world.client(), &world.ns);
    let patch = json!({"status": {
        "workers": {"desiredReplicas": 7, "readyReplicas": 5},
        "conditions": [{"type": "Probe", "status": "True", "reason": "Probe", "message": "",
                        "lastTransitionTime": "2026-11-22T00:00:00Z"}]
    }});
    clusters
        .patch_status("demo", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let after = quiet(&world, "inmemorymachine").await;
    assert_eq!(
        after, before,
        "a Cluster status write that changes nothing its machines read woke them"
    );

    // What they do read still wakes them: pausing the cluster.
    let patch = json!({"spec": {"paused": true}});
    clusters
        .patch("demo", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("the infrastructure machines look again", || async {
        reconciles(&world, "inmemorymachine") >= before + 3.0
    })
    .await;
}

/// Every machine name a watch saw, and the most machines not being deleted at once.
type Seen = Arc<Mutex<(Vec<String>, usize)>>;

/// Records what [`Seen`] holds until the returned task is aborted.
fn record_machines(world: &World) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new((Vec::<String>::new(), 0usize)));
    let machines = world.machines();
    let task = {
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            let (reader, writer) = kube::runtime::reflector::store();
            let mut stream = watcher(machines, watcher::Config::default())
                .reflect(writer)
                .applied_objects()
                .boxed();
            while let Some(Ok(machine)) = stream.next().await {
                let live = reader
                    .state()
                    .iter()
                    .filter(|m| m.metadata.deletion_timestamp.is_none())
                    .count();
                let mut seen = seen.lock().unwrap();
                if !seen.0.contains(&machine.name_any()) {
                    seen.0.push(machine.name_any());
                }
                seen.1 = seen.1.max(live);
            }
        })
    };
    (seen, task)
}

/// Creates the objects of `MANIFESTS` but the MachineDeployment.
async fn create_all_but_the_deployment(world: &World) {
    let base: Vec<_> = manifest::parse(MANIFESTS)
        .unwrap()
        .into_iter()
        .filter(|o| {
            o.types
                .as_ref()
                .is_some_and(|t| t.kind != "MachineDeployment")
        })
        .collect();
    manifest::create_all(&world.client(), &world.ns, &base)
        .await
        .unwrap();
}

/// A Machine whose infrastructure machine is made after it, by hand and without an owner, finds
/// it: nothing about that object's appearance names the Machine, so the Machine looks again.
#[tokio::test]
async fn a_machine_finds_an_infrastructure_machine_made_after_it_without_an_owner() {
    let world = world().await;
    create_all_but_the_deployment(&world).await;
    let machine = manifest::parse(
        r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata: {name: late}
spec:
  clusterName: demo
  bootstrap: {dataSecretName: workers-bootstrap}
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachine, name: late}
"##,
    )
    .unwrap();
    manifest::create_all(&world.client(), &world.ns, &machine)
        .await
        .unwrap();
    eventually("the machine says what it waits for", || async {
        let machine = world.machines().get("late").await.unwrap();
        serde_json::to_string(&machine.status)
            .unwrap()
            .contains("ReferenceNotFound")
    })
    .await;
    let infra = manifest::parse(
        r##"
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachine
metadata: {name: late}
spec: {flavor: small}
"##,
    )
    .unwrap();
    manifest::create_all(&world.client(), &world.ns, &infra)
        .await
        .unwrap();
    eventually("the machine runs on it", || async {
        let machine = world.machines().get("late").await.unwrap();
        machine.phase() == Some(MachinePhase::Running)
    })
    .await;
}

#[tokio::test]
async fn a_machine_set_adopts_orphans_honours_delete_marks_and_never_overshoots() {
    let world = world().await;
    create_all_but_the_deployment(&world).await;
    let (seen, recorder) = record_machines(&world);

    // An orphan that matches the set's selector, made by hand.
    let orphan = manifest::parse(
        r##"
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachine
metadata: {name: orphan}
spec: {flavor: small}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata: {name: orphan, labels: {app: pool}}
spec:
  clusterName: demo
  bootstrap: {dataSecretName: workers-bootstrap}
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachine, name: orphan}
"##,
    )
    .unwrap();
    manifest::create_all(&world.client(), &world.ns, &orphan)
        .await
        .unwrap();
    eventually("the orphan is seen by the controllers", || async {
        let machine = world.machines().get("orphan").await.unwrap();
        !machine.finalizers().is_empty()
    })
    .await;
    let set = manifest::parse(
        r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineSet
metadata: {name: pool}
spec:
  clusterName: demo
  replicas: 2
  selector: {matchLabels: {app: pool}}
  template:
    metadata: {labels: {app: pool}}
    spec:
      clusterName: demo
      bootstrap: {dataSecretName: workers-bootstrap}
      infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachineTemplate, name: workers}
"##,
    )
    .unwrap();
    manifest::create_all(&world.client(), &world.ns, &set)
        .await
        .unwrap();
    converged(&world, 2).await;
    let adopted = world.machines().get("orphan").await.unwrap();
    let set_uid = world.sets().get("pool").await.unwrap().uid().unwrap();
    assert!(
        adopted
            .owner_references()
            .iter()
            .any(|o| o.uid == set_uid && o.controller == Some(true)),
        "the orphan is adopted"
    );
    assert_eq!(
        seen.lock().unwrap().0.len(),
        2,
        "one machine created, not two"
    );

    // The delete-machine mark wins over every other priority.
    let other = all_machines(&world)
        .await
        .into_iter()
        .find(|m| m.name_any() != "orphan")
        .unwrap()
        .name_any();
    let mark = json!({"metadata": {"annotations": {labels::DELETE_MACHINE: ""}}});
    world
        .machines()
        .patch(&other, &PatchParams::default(), &Patch::Merge(&mark))
        .await
        .unwrap();
    let scale = json!({"spec": {"replicas": 1}});
    world
        .sets()
        .patch("pool", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    converged(&world, 1).await;
    assert!(world.machines().get_opt("orphan").await.unwrap().is_some());

    // A big step up creates exactly the missing machines, never more at once.
    let scale = json!({"spec": {"replicas": 12}});
    world
        .sets()
        .patch("pool", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    converged(&world, 12).await;
    recorder.abort();
    let (names, most) = seen.lock().unwrap().clone();
    assert_eq!(names.len(), 2 + 11, "every create was needed: {names:?}");
    assert!(most <= 12, "never more machines than replicas: saw {most}");
    assert_eq!(world.cloud.instance_count(), 12);
    let set = world.sets().get("pool").await.unwrap();
    let status = set.status.unwrap();
    assert_eq!(status.replicas, Some(12));
    assert_eq!(status.selector.as_deref(), Some("app=pool"));

    // A set told not to create (an OnDelete deployment's old set) does not replace a machine.
    let gate = json!({"metadata": {"annotations": {labels::DISABLE_MACHINE_CREATE: "true"}}});
    world
        .sets()
        .patch("pool", &PatchParams::default(), &Patch::Merge(&gate))
        .await
        .unwrap();
    world
        .machines()
        .delete("orphan", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the deleted machine is gone", || async {
        world.machines().get_opt("orphan").await.unwrap().is_none()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        all_machines(&world).await.len(),
        11,
        "a set with creation disabled creates nothing"
    );
    let ungate = json!({"metadata": {"annotations": {labels::DISABLE_MACHINE_CREATE: "false"}}});
    world
        .sets()
        .patch("pool", &PatchParams::default(), &Patch::Merge(&ungate))
        .await
        .unwrap();
    converged(&world, 12).await;
}

/// A change the instance cannot take in place (another flavor on the infrastructure machine) is
/// reported by the actuator, shows on the Machine as `UpToDate=False` (`NeedsRollout`, naming the
/// field), and is never applied to the running instance.
#[tokio::test]
async fn an_immutable_change_shows_on_the_machine_as_a_needed_rollout() {
    let world = world().await;
    manifest::create_all(&world.client(), &world.ns, &manifests(1, &[]))
        .await
        .unwrap();
    converged(&world, 1).await;
    let machine = all_machines(&world).await.pop().unwrap();
    let instance = world.cloud.instances().pop().unwrap();
    let infra: Api<InMemoryMachine> = Api::namespaced(world.client(), &world.ns);
    let patch = json!({"spec": {"flavor": "large"}});
    infra
        .patch(
            &machine.spec.infrastructure_ref.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    eventually("the Machine says a rollout is needed", || async {
        let machine = world.machines().get(&machine.name_any()).await.unwrap();
        machine.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_ == condition::UP_TO_DATE
                    && c.status == "False"
                    && c.reason == "NeedsRollout"
                    && c.message.contains("spec.flavor (small → large)")
            })
        })
    })
    .await;
    let now = world.cloud.instances();
    assert_eq!(now.len(), 1);
    assert_eq!(
        (now[0].id.as_str(), now[0].flavor.as_str()),
        (instance.id.as_str(), "small")
    );
}

/// Machine templates publish what their machines will have — `status.capacity` and
/// `status.nodeInfo` from the flavor, for the cluster autoscaler's scale from zero — and a flavor
/// the cloud does not have is reported in `Ready=False`, not guessed.
#[tokio::test]
async fn machine_templates_publish_capacity_for_scale_from_zero() {
    let world = world().await;
    let templates = manifest::parse(
        r##"
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachineTemplate
metadata: {name: medium}
spec: {template: {spec: {flavor: medium}}}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachineTemplate
metadata: {name: huge}
spec: {template: {spec: {flavor: huge}}}
"##,
    )
    .unwrap();
    manifest::create_all(&world.client(), &world.ns, &templates)
        .await
        .unwrap();
    let api: Api<InMemoryMachineTemplate> = Api::namespaced(world.client(), &world.ns);
    eventually("the medium template reports its capacity", || async {
        let status = api.get("medium").await.unwrap().status.unwrap_or_default();
        let capacity: BTreeMap<&str, &str> = status
            .capacity
            .iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str()))
            .collect();
        capacity
            == BTreeMap::from([
                ("cpu", "2"),
                ("memory", "4096Mi"),
                ("ephemeral-storage", "40Gi"),
            ])
            && status.node_info.as_ref().is_some_and(|info| {
                info.architecture == Some(capi_core::infra::Architecture::Amd64)
                    && info.operating_system.as_deref() == Some("linux")
            })
            && condition::is_true(&status.conditions, condition::READY)
    })
    .await;
    eventually("the unknown flavor is reported", || async {
        let status = api.get("huge").await.unwrap().status.unwrap_or_default();
        status.capacity.is_empty()
            && status.conditions.iter().any(|c| {
                c.type_ == condition::READY
                    && c.status == "False"
                    && c.reason == "UnknownFlavor"
                    && c.message.contains("huge")
            })
    })
    .await;
    // The wire form the autoscaler reads.
    let raw = Api::<kube::api::DynamicObject>::namespaced_with(
        world.client(),
        &world.ns,
        &kube::api::ApiResource::erase::<InMemoryMachineTemplate>(&()),
    )
    .get("medium")
    .await
    .unwrap();
    assert_eq!(raw.data["status"]["nodeInfo"]["architecture"], "amd64");
    assert_eq!(raw.data["status"]["capacity"]["memory"], "4096Mi");
}

/// The cluster autoscaler's node-group size annotations default an absent `spec.replicas` the way
/// upstream's admission webhooks do: a new deployment starts at the minimum, one handed over later
/// keeps its size brought into range, a malformed annotation is reported (nothing scales) until
/// it is fixed, and a set with neither replicas nor annotations gets one machine.
#[tokio::test]
async fn autoscaler_size_annotations_default_replicas_like_upstream() {
    let world = world().await;
    let min = labels::AUTOSCALER_MIN_SIZE;
    let max = labels::AUTOSCALER_MAX_SIZE;
    let text = MANIFESTS.replace(
        "metadata: {name: workers}\nspec:\n  clusterName: demo\n  replicas: 3\n",
        &format!("metadata: {{name: workers, annotations: {{{min}: \"2\", {max}: \"5\"}}}}\nspec:\n  clusterName: demo\n"),
    );
    assert_ne!(text, MANIFESTS, "the deployment's replicas are left out");
    manifest::create_all(&world.client(), &world.ns, &manifest::parse(&text).unwrap())
        .await
        .unwrap();
    converged(&world, 2).await;
    let replicas = |d: MachineDeployment| d.spec.replicas;
    assert_eq!(
        replicas(world.deployments().get("workers").await.unwrap()),
        Some(2),
        "a new deployment starts at the minimum size"
    );

    // Handed back to the autoscaler with a larger minimum: the current size is brought into range.
    let hand_over = |min_size: &str| json!({"metadata": {"annotations": {min: min_size, max: "5"}}, "spec": {"replicas": null}});
    world
        .deployments()
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(&hand_over("3")),
        )
        .await
        .unwrap();
    converged(&world, 3).await;
    assert_eq!(
        replicas(world.deployments().get("workers").await.unwrap()),
        Some(3)
    );

    // A malformed size: named in Available=False, nothing defaulted, nothing scaled.
    world
        .deployments()
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(&hand_over("three")),
        )
        .await
        .unwrap();
    eventually("the malformed annotation is reported", || async {
        let deployment = world.deployments().get("workers").await.unwrap();
        deployment.spec.replicas.is_none()
            && deployment.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == condition::AVAILABLE
                        && c.status == "False"
                        && c.reason == "InvalidSpec"
                        && c.message.contains(min)
                        && c.message.contains("\"three\"")
                })
            })
    })
    .await;
    assert_eq!(all_machines(&world).await.len(), 3, "nothing scaled");

    // Fixed: the size in range is kept.
    world
        .deployments()
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(&hand_over("1")),
        )
        .await
        .unwrap();
    eventually("the fixed annotations default replicas", || async {
        let deployment = world.deployments().get("workers").await.unwrap();
        deployment.spec.replicas == Some(3)
            && deployment
                .status
                .as_ref()
                .is_some_and(|s| condition::is_true(&s.conditions, condition::AVAILABLE))
    })
    .await;

    // A set with neither replicas nor annotations: one machine, as upstream defaults.
    let set = manifest::parse(
        r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineSet
metadata: {name: single}
spec:
  clusterName: demo
  selector: {matchLabels: {app: single}}
  template:
    metadata: {labels: {app: single}}
    spec:
      clusterName: demo
      bootstrap: {dataSecretName: workers-bootstrap}
      infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachineTemplate, name: workers}
"##,
    )
    .unwrap();
    manifest::create_all(&world.client(), &world.ns, &set)
        .await
        .unwrap();
    converged(&world, 4).await;
    assert_eq!(
        world.sets().get("single").await.unwrap().spec.replicas,
        Some(1)
    );
}

#[tokio::test]
async fn on_delete_waits_for_the_user_and_a_paused_deployment_waits_for_everyone() {
    let world = world().await;
    let text = MANIFESTS.replace("replicas: 3", "replicas: 2").replace(
        "{type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}",
        "{type: OnDelete}",
    );
    let objects = manifest::parse(&text).unwrap();
    manifest::create_all(&world.client(), &world.ns, &objects)
        .await
        .unwrap();
    converged(&world, 2).await;
    let (seen, recorder) = record_machines(&world);

    // OnDelete: a new template replaces nothing by itself…
    let patch = json!({"spec": {"template": {"spec": {"version": "v1.33.1"}}}});
    world
        .deployments()
        .patch("workers", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("a new MachineSet with no replicas", || async {
        let sets = world
            .sets()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        sets.len() == 2 && sets.iter().any(|s| s.spec.replicas == Some(0))
    })
    .await;
    let gates: Vec<(Option<i32>, Option<String>)> = world
        .sets()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| {
            let gate = s.annotations().get(labels::DISABLE_MACHINE_CREATE).cloned();
            (s.spec.replicas, gate)
        })
        .collect();
    assert!(
        gates.contains(&(Some(2), Some("true".into())))
            && gates.contains(&(Some(0), Some("false".into()))),
        "the old set may not create, the new one may: {gates:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let old: Vec<Machine> = all_machines(&world).await;
    assert_eq!(old.len(), 2);
    assert!(
        old.iter()
            .all(|m| m.spec.version.as_deref() == Some("v1.33.0")),
        "no machine is replaced by the controller"
    );
    // …until the user deletes a machine: its replacement has the new version.
    world
        .machines()
        .delete(&old[0].name_any(), &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the deleted machine is replaced with the new version",
        || async {
            let now = running(&world).await;
            now.len() == 2
                && !now.contains_key(&old[0].name_any())
                && now
                    .values()
                    .filter(|m| m.spec.version.as_deref() == Some("v1.33.1"))
                    .count()
                    == 1
        },
    )
    .await;
    converged(&world, 2).await;
    recorder.abort();
    assert_eq!(
        seen.lock().unwrap().0.len(),
        3,
        "the old set did not replace the deleted machine: one new machine, from the new set"
    );

    // Paused: scaling waits until it is resumed.
    let pause = json!({"spec": {"paused": true, "replicas": 3}});
    world
        .deployments()
        .patch("workers", &PatchParams::default(), &Patch::Merge(&pause))
        .await
        .unwrap();
    eventually("the deployment reports itself paused", || async {
        let d = world.deployments().get("workers").await.unwrap();
        d.status
            .is_some_and(|s| condition::is_true(&s.conditions, condition::PAUSED))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        all_machines(&world).await.len(),
        2,
        "nothing happens while paused"
    );
    let resume = json!({"spec": {"paused": false}});
    world
        .deployments()
        .patch("workers", &PatchParams::default(), &Patch::Merge(&resume))
        .await
        .unwrap();
    converged(&world, 3).await;
}

const KUBEADM_CLUSTER: &str = r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo}
spec:
  clusterNetwork: {pods: {cidrBlocks: [192.168.0.0/16]}}
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryCluster, name: demo}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryCluster
metadata: {name: demo}
spec: {}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfig
metadata: {name: cp-0}
spec: {}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachine
metadata: {name: cp-0}
spec: {flavor: small}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: cp-0
  labels: {cluster.x-k8s.io/control-plane: ""}
spec:
  clusterName: demo
  version: v1.31.1
  bootstrap: {configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfig, name: cp-0}}
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachine, name: cp-0}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata: {name: workers}
spec: {template: {spec: {preKubeadmCommands: ["echo joining"]}}}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachineTemplate
metadata: {name: workers}
spec: {template: {spec: {flavor: small}}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: workers}
spec:
  clusterName: demo
  replicas: 2
  selector: {matchLabels: {pool: workers}}
  template:
    metadata: {labels: {pool: workers}}
    spec:
      clusterName: demo
      version: v1.31.1
      bootstrap: {configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfigTemplate, name: workers}}
      infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachineTemplate, name: workers}
"##;

#[tokio::test]
async fn kubeadm_bootstrapped_control_plane_and_workers_come_up_and_go_away() {
    let world = world().await;
    let objects = manifest::parse(KUBEADM_CLUSTER).unwrap();
    manifest::create_all(&world.client(), &world.ns, &objects)
        .await
        .unwrap();
    converged(&world, 3).await;

    let clusters: Api<Cluster> = Api::namespaced(world.client(), &world.ns);
    let status = clusters.get("demo").await.unwrap().status.unwrap();
    assert_eq!(
        status.initialization.unwrap().control_plane_initialized,
        Some(true),
        "initialised once the control-plane machine has a node"
    );
    let configs: Api<capi_bootstrap::api::KubeadmConfig> =
        Api::namespaced(world.client(), &world.ns);
    let secrets: Api<Secret> = Api::namespaced(world.client(), &world.ns);
    for machine in all_machines(&world).await {
        let name = machine.name_any();
        let config = configs.get(&name).await.unwrap();
        assert!(
            config
                .owner_references()
                .iter()
                .any(|o| o.kind == "Machine" && Some(&o.uid) == machine.metadata.uid.as_ref()),
            "{name}: the config is owned by its machine"
        );
        let data_secret = machine.spec.bootstrap.data_secret_name.clone().unwrap();
        let secret = secrets.get(&data_secret).await.unwrap();
        let value = capi_core::BootstrapData::from_secret(&secret).unwrap();
        let text = String::from_utf8(value.expose().to_vec()).unwrap();
        if machine.is_control_plane() {
            assert!(text.contains("kubeadm init"), "{name}");
        } else {
            assert!(
                text.contains("kubeadm join") && text.contains("echo joining"),
                "{name}"
            );
            assert_eq!(
                config
                    .annotations()
                    .get("cluster.x-k8s.io/cloned-from-name")
                    .map(String::as_str),
                Some("workers")
            );
        }
    }

    // Deleting the cluster removes the configs, their Secrets and the cluster's own Secrets.
    clusters
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    eventually("everything deleted", || async {
        clusters.get_opt("demo").await.unwrap().is_none()
            && all_machines(&world).await.is_empty()
            && configs
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
    })
    .await;
    assert_eq!(world.cloud.instance_count(), 0, "no instance leaked");
    let left: Vec<String> = secrets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| s.name_any())
        .collect();
    assert_eq!(
        left,
        ["demo-kubeconfig"],
        "only the Secret the test made itself is left"
    );
}

#[tokio::test]
async fn the_manager_needs_nothing_beyond_its_generated_rbac() {
    let world = world_as(Identity::GeneratedRbac).await;
    let objects = manifests(2, &[]);
    manifest::create_all(&world.client(), &world.ns, &objects)
        .await
        .unwrap();
    converged(&world, 2).await;
    scale(&world, 1).await;
    converged(&world, 1).await;
    let clusters: Api<Cluster> = Api::namespaced(world.client(), &world.ns);
    clusters
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    eventually("everything deleted", || async {
        clusters.get_opt("demo").await.unwrap().is_none() && all_machines(&world).await.is_empty()
    })
    .await;
    assert_eq!(world.cloud.instance_count(), 0);

    // Least privilege: what the manager does not need, it cannot do, and the refusal says what
    // was refused to whom.
    let token = generated_rbac_token_again(&world).await;
    let restricted = Client::try_from(
        world
            .env
            .control_plane()
            .config_with_token(&token)
            .await
            .unwrap(),
    )
    .unwrap();
    let error = Api::<k8s_openapi::api::core::v1::Namespace>::all(restricted.clone())
        .delete(&world.ns, &DeleteParams::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("forbidden")
            && error.contains("system:serviceaccount:capi-inmemory-system:capi-inmemory-manager")
            && error.contains("namespaces"),
        "{error}"
    );
    // A tenant's Secrets are read and deleted by name only, never listed; Leases only in the
    // manager's own namespace; control planes of the kinds it serves only.
    let forbidden = |result: Result<_, kube::Error>, what: &str| match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("{what}: expected 403, got {other:?}"),
    };
    forbidden(
        Api::<Secret>::namespaced(restricted.clone(), &world.ns)
            .list_metadata(&ListParams::default())
            .await
            .map(|_| ()),
        "listing a tenant's Secrets",
    );
    forbidden(
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(restricted.clone(), &world.ns)
            .list_metadata(&ListParams::default())
            .await
            .map(|_| ()),
        "a tenant's Leases",
    );
    let other = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "OtherControlPlane",
    ));
    forbidden(
        Api::<kube::api::DynamicObject>::namespaced_with(restricted, &world.ns, &other)
            .list_metadata(&ListParams::default())
            .await
            .map(|_| ()),
        "a control plane of a kind the manager does not serve",
    );
}

/// Another token for the same ServiceAccount.
async fn generated_rbac_token_again(world: &World) -> String {
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(
        world.client(),
        "capi-inmemory-system",
    )
    .create_token_request("capi-inmemory-manager", &Default::default(), &request)
    .await
    .unwrap()
    .status
    .unwrap()
    .token
}

#[tokio::test]
async fn move_hands_a_running_cluster_to_another_management_cluster_without_touching_instances() {
    let world = world().await;
    let objects = manifests(2, &[]);
    manifest::create_all(&world.client(), &world.ns, &objects)
        .await
        .unwrap();
    converged(&world, 2).await;
    let instances_before: Vec<String> = world.cloud.instances().into_iter().map(|i| i.id).collect();

    // The target: another management cluster with the same CRDs and its own Manager, reaching
    // the same cloud and workload cluster.
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(provider_inmemory::api::crds());
    let target = TestEnv::start_with_crds(&crds).await.unwrap();
    let config = ManagerConfig {
        reconciler: ReconcilerOptions::default()
            .namespace(&world.ns)
            .retry_policy(policy()),
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..ManagerConfig::default()
    };
    let target_manager = Manager::new(target.control_plane().config().await.unwrap(), config)
        .await
        .unwrap();
    let _target_manager = start_manager(target_manager, world.cloud.clone()).await;

    // Interrupted after the copy: run again, and it completes without duplicating anything.
    let source = world.client();
    capi_cli::move_cluster::pause(&source, &world.ns, "demo")
        .await
        .unwrap();
    let movable = capi_cli::move_cluster::objects_of(&source, &world.ns, "demo")
        .await
        .unwrap();
    let kinds: BTreeSet<String> = movable.iter().map(|m| m.resource.kind.clone()).collect();
    for kind in [
        "Cluster",
        "InMemoryCluster",
        "MachineDeployment",
        "MachineSet",
        "Machine",
        "InMemoryMachine",
        "InMemoryMachineTemplate",
        "Secret",
    ] {
        assert!(kinds.contains(kind), "{kind} is moved: {kinds:?}");
    }
    let first = capi_cli::move_cluster::copy(&target.client(), &world.ns, &movable, |_| {})
        .await
        .unwrap();
    assert_eq!(first, movable.len());
    let moved =
        capi_cli::move_cluster::move_cluster(&source, &target.client(), &world.ns, "demo", |_| {})
            .await
            .unwrap();
    assert_eq!(moved, movable.len());

    // The source is empty; the cloud still has exactly the same instances.
    eventually("the source forgets the cluster", || async {
        all_machines(&world).await.is_empty()
            && Api::<Cluster>::namespaced(world.client(), &world.ns)
                .get_opt("demo")
                .await
                .unwrap()
                .is_none()
    })
    .await;
    // The target runs it: its machines are Running and Ready on the same instances.
    let target_machines: Api<Machine> = Api::namespaced(target.client(), &world.ns);
    eventually("the target runs the moved machines", || async {
        let machines = target_machines
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        machines.len() == 2
            && machines.iter().all(|m| {
                m.phase() == Some(MachinePhase::Running)
                    && m.status
                        .as_ref()
                        .is_some_and(|s| condition::is_true(&s.conditions, condition::READY))
            })
    })
    .await;
    let target_cluster = Api::<Cluster>::namespaced(target.client(), &world.ns)
        .get("demo")
        .await
        .unwrap();
    assert!(!target_cluster.is_paused(), "unpaused in the target");
    // A scale-up in the target works and the cloud never saw a duplicate.
    let deployments: Api<MachineDeployment> = Api::namespaced(target.client(), &world.ns);
    deployments
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    eventually("three machines in the target", || async {
        world.cloud.instance_count() == 3
            && target_machines
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len()
                == 3
    })
    .await;
    let instances_after: Vec<String> = world.cloud.instances().into_iter().map(|i| i.id).collect();
    for id in &instances_before {
        assert!(
            instances_after.contains(id),
            "instance {id} survived the move"
        );
    }
}
