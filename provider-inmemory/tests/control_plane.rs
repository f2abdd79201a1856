//! A KubeadmControlPlane end to end on the local control plane: the control plane controller, the
//! core controllers, the kubeadm bootstrap controller and the in-memory provider, whose
//! control-plane instances form a simulated etcd cluster. The control plane is scaled 1 → 3,
//! rolled to a new Kubernetes version, and scaled 3 → 1, while a monitor samples etcd and the
//! machines every few milliseconds: no member ever outlives its machine, etcd never loses its
//! quorum, the roll never has fewer than 3 healthy members, and whenever the control plane has
//! settled, the members are exactly the machines' nodes. A control-plane component that fails
//! (a static pod the simulated kubelet runs) is reported in the machine's and the control plane's
//! conditions, and no machine joins until it recovers.
//!
//! With the feature `real-etcd` the same scenario runs a second time with a real etcd member
//! process per control-plane instance (`EtcdProcesses`), the controller and the monitor both
//! talking to etcd over gRPC: the membership changes are checked against etcd itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capi_actuator::InfrastructureControllers;
use capi_control_plane::api::KubeadmControlPlane;
use capi_control_plane::controller::{ControlPlaneSettings, KubeadmControlPlanes};
use capi_control_plane::etcd::EtcdAccess;
use capi_controllers::{CoreControllers, CoreSettings};
use capi_core::api::{Cluster, Machine};
use capi_core::condition;
use capi_runtime::manager::Manager;
use capi_testing::envtest::ControlPlane;
use capi_testing::faults::ApiFaults;
use capi_testing::{TestEnv, manifest};
use common::{TIMEOUT, manager_config, workload_kubeconfig};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::InMemoryCluster;
use provider_inmemory::cloud::{CloudConfig, EtcdClusters, SimulatedCloud};
use provider_inmemory::etcd::{SimulatedEtcdAccess, etcd_cluster_key};
use provider_inmemory::nodes::NodeRegistrar;
use serde_json::json;

const MANIFESTS: &str = r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo}
spec:
  clusterNetwork: {pods: {cidrBlocks: [192.168.0.0/16]}}
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryCluster, name: demo}
  controlPlaneRef: {apiGroup: controlplane.cluster.x-k8s.io, kind: KubeadmControlPlane, name: demo-cp}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryCluster
metadata: {name: demo}
spec: {}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachineTemplate
metadata: {name: demo-cp}
spec: {template: {spec: {flavor: medium}}}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata: {name: demo-cp}
spec:
  replicas: 1
  version: v1.33.0
  machineTemplate:
    spec:
      infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachineTemplate, name: demo-cp}
  kubeadmConfigSpec: {format: cloud-config}
"##;

/// What the monitor saw.
#[derive(Default)]
struct Watch {
    /// Broken guarantees, with when they were seen.
    violations: Vec<String>,
    /// The fewest healthy members seen while `counting` was on.
    fewest_healthy: Option<usize>,
    counting: bool,
    /// Since when the healthy members have been fewer than a quorum, if they are.
    below_quorum_since: Option<Duration>,
}

/// How long the healthy members may read as fewer than a quorum before it counts as lost. A
/// member is healthy when it answers a status call within the client's timeout (2 s) with no
/// error; on a starved machine an election (every member briefly without a leader) or a slow
/// answer reads as unhealthy for a sample or two. A quorum a control plane really lost — a member
/// removed too early, a dead member kept — stays lost until a member is restored or removed,
/// which takes reconciles, not one election.
const QUORUM_LOSS: Duration = Duration::from_secs(5);

/// Where the test reads etcd from: the simulated membership, or the real members.
#[derive(Clone)]
enum EtcdReader {
    Simulated(Arc<SimulatedCloud>, String),
    #[cfg(feature = "real-etcd")]
    Real(provider_inmemory::etcd::ProcessEtcdAccess, String),
}

impl EtcdReader {
    /// Every voting member's name and health (a learner does not count in the quorum and is not
    /// a member yet); `None` when etcd cannot be read.
    async fn members(&self) -> Option<Vec<(String, bool)>> {
        match self {
            EtcdReader::Simulated(cloud, key) => Some(
                cloud
                    .etcd_cluster(key)
                    .await
                    .ok()?
                    .members
                    .into_iter()
                    .map(|m| (m.name, m.healthy))
                    .collect(),
            ),
            #[cfg(feature = "real-etcd")]
            EtcdReader::Real(access, ns) => {
                use capi_control_plane::etcd::EtcdCluster;
                Some(
                    access
                        .cluster(ns, "demo")
                        .status()
                        .await
                        .ok()?
                        .members
                        .into_iter()
                        .filter(|m| !m.learner)
                        .map(|m| (m.name, m.healthy))
                        .collect(),
                )
            }
        }
    }
}

struct World {
    env: TestEnv,
    ns: String,
    cloud: Arc<SimulatedCloud>,
    etcd: EtcdReader,
    watch: Arc<Mutex<Watch>>,
    #[cfg(feature = "real-etcd")]
    _processes: Option<Arc<provider_inmemory::cloud::EtcdProcesses>>,
    #[cfg(not(feature = "real-etcd"))]
    _processes: Option<()>,
    workload: ControlPlane,
    _tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl World {
    fn kcps(&self) -> Api<KubeadmControlPlane> {
        Api::namespaced(self.env.client(), &self.ns)
    }
    fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.env.client(), &self.ns)
    }

    /// The control-plane machines' node names and the etcd members' names, once the control plane
    /// has `replicas` Ready machines of `version`, none deleting, and etcd agrees with them.
    async fn settled(
        &self,
        replicas: usize,
        version: &str,
    ) -> (BTreeSet<String>, BTreeSet<String>) {
        let what = format!("{replicas} ready control-plane machines of {version}");
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            if let Some(found) = self.settled_now(replicas, version).await {
                return found;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn settled_now(
        &self,
        replicas: usize,
        version: &str,
    ) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
        {
            let machines = self
                .machines()
                .list(&ListParams::default())
                .await
                .ok()?
                .items;
            let ready = machines.iter().all(|m| {
                m.metadata.deletion_timestamp.is_none()
                    && m.spec.version.as_deref() == Some(version)
                    && m.status.as_ref().is_some_and(|s| {
                        s.node_ref.is_some() && condition::is_true(&s.conditions, condition::READY)
                    })
            });
            if machines.len() != replicas || !ready {
                return None;
            }
            let nodes: BTreeSet<String> = machines
                .iter()
                .filter_map(|m| Some(m.status.as_ref()?.node_ref.as_ref()?.name.clone()))
                .collect();
            let members: BTreeSet<String> = self
                .etcd
                .members()
                .await?
                .into_iter()
                .map(|(name, _)| name)
                .collect();
            let kcp = self.kcps().get("demo-cp").await.ok()?;
            let status = kcp.status?;
            let available = condition::is_true(&status.conditions, "Available");
            (nodes == members && available && status.ready_replicas == Some(replicas as i32))
                .then_some((nodes, members))
        }
    }
}

/// How the control-plane instances run etcd.
enum EtcdMode {
    /// The simulated cloud's membership.
    Simulated,
    /// A real etcd member process per instance.
    #[cfg(feature = "real-etcd")]
    Real,
}

async fn world(mode: EtcdMode) -> World {
    world_lagging(mode, None).await
}

/// [`world`] whose manager's watches of Machines deliver every event `lag` late, when given.
async fn world_lagging(mode: EtcdMode, lag: Option<Duration>) -> World {
    let _ = capi_runtime::telemetry::init_logging(capi_runtime::telemetry::LogFormat::Text);
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(capi_control_plane::api::crds());
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let workload = ControlPlane::start().await.unwrap();
    let cloud = Arc::new(SimulatedCloud::new(CloudConfig {
        boot_time: Duration::from_millis(300),
        delete_time: Duration::from_millis(100),
        ..CloudConfig::default()
    }));
    workload_kubeconfig(&env.client(), &ns, "demo", &workload).await;
    let (etcd, access, processes): (EtcdReader, Arc<dyn EtcdAccess>, _) = match mode {
        EtcdMode::Simulated => (
            EtcdReader::Simulated(cloud.clone(), etcd_cluster_key(&ns, "demo")),
            Arc::new(SimulatedEtcdAccess::new(cloud.clone())),
            None,
        ),
        #[cfg(feature = "real-etcd")]
        EtcdMode::Real => {
            let etcd_binary = capi_testing::envtest::Assets::locate().unwrap().etcd;
            let processes = Arc::new(provider_inmemory::cloud::EtcdProcesses::start(
                &cloud,
                &etcd_binary,
            ));
            let access = provider_inmemory::etcd::ProcessEtcdAccess::new(
                processes.clone(),
                capi_control_plane::etcd::client::GrpcEtcdOptions::default(),
            );
            (
                EtcdReader::Real(access.clone(), ns.clone()),
                Arc::new(access),
                Some(processes),
            )
        }
    };
    let kubelets = tokio::spawn(
        NodeRegistrar::new(workload.client().await.unwrap(), cloud.clone())
            .run(Duration::from_millis(100)),
    );
    let mut manager = match lag {
        None => Manager::new(
            env.control_plane().config().await.unwrap(),
            manager_config(&ns),
        )
        .await
        .unwrap(),
        Some(lag) => {
            let faults = ApiFaults::default();
            faults.lag_watches(
                &format!("/apis/cluster.x-k8s.io/v1beta2/namespaces/{ns}/machines"),
                lag,
            );
            let client = faults
                .client(env.control_plane().kubeconfig_yaml())
                .await
                .unwrap();
            Manager::with_client(client, manager_config(&ns))
                .await
                .unwrap()
        }
    };
    let actuator = Arc::new(InMemoryActuator::new(
        cloud.clone(),
        cloud.clone(),
        Duration::from_millis(50),
    ));
    manager.add_machine_reconciler(actuator.clone());
    manager.add_cluster_reconciler::<InMemoryCluster>(actuator);
    manager.add(capi_bootstrap::controller::KubeadmBootstrap::default());
    manager.add(CoreControllers::new(CoreSettings {
        poll: Duration::from_millis(200),
        ..CoreSettings::default()
    }));
    manager.add(KubeadmControlPlanes::new(ControlPlaneSettings {
        poll: Duration::from_millis(200),
        ..ControlPlaneSettings::new(access)
    }));
    let running = tokio::spawn(async move {
        let _ = manager.run_until(std::future::pending()).await;
    });
    let watch = Arc::new(Mutex::new(Watch::default()));
    let monitor = tokio::spawn(monitor(
        cloud.clone(),
        Api::namespaced(env.client(), &ns),
        etcd.clone(),
        watch.clone(),
    ));
    manifest::create_all(&env.client(), &ns, &manifest::parse(MANIFESTS).unwrap())
        .await
        .unwrap();
    World {
        env,
        ns,
        cloud,
        etcd,
        watch,
        _processes: processes,
        workload,
        _tasks: vec![kubelets, running, monitor],
    }
}

/// Samples etcd and the machines until aborted: a member must belong to an existing Machine's
/// node (a machine being deleted still counts), and the healthy members must be a quorum.
async fn monitor(
    cloud: Arc<SimulatedCloud>,
    machines: Api<Machine>,
    etcd: EtcdReader,
    watch: Arc<Mutex<Watch>>,
) {
    let started = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let Some(members) = etcd.members().await else {
            continue;
        };
        let Ok(list) = machines.list(&ListParams::default()).await else {
            continue;
        };
        // Read etcd again: a member that joined between the two reads is not a stray.
        let Some(after) = etcd.members().await else {
            continue;
        };
        let nodes: BTreeSet<String> = list
            .items
            .iter()
            .filter_map(|m| Some(m.status.as_ref()?.node_ref.as_ref()?.name.clone()))
            .collect();
        let instances: BTreeSet<String> = cloud.instances().into_iter().map(|i| i.id).collect();
        let at = started.elapsed();
        let mut watch = watch.lock().unwrap();
        for (name, _) in members.iter().filter(|m| after.contains(m)) {
            // A member whose instance is gone and whose machine is gone is left behind.
            if !nodes.contains(name) && !instances.contains(name) {
                watch
                    .violations
                    .push(format!("{at:?}: member {name} outlived its machine"));
            }
        }
        let healthy = members.iter().filter(|(_, healthy)| *healthy).count();
        if !members.is_empty() && healthy < members.len() / 2 + 1 {
            let since = *watch.below_quorum_since.get_or_insert(at);
            if at - since >= QUORUM_LOSS {
                watch.violations.push(format!(
                    "{at:?}: {healthy} healthy of {} members, below quorum since {since:?}",
                    members.len()
                ));
                // One violation per episode.
                watch.below_quorum_since = Some(at);
            }
        } else {
            watch.below_quorum_since = None;
        }
        if watch.counting {
            watch.fewest_healthy = Some(watch.fewest_healthy.map_or(healthy, |f| f.min(healthy)));
        }
    }
}

fn scale(replicas: i32) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"spec": {"replicas": replicas}}))
}

#[tokio::test]
async fn a_control_plane_scales_1_3_rolls_and_scales_to_1_with_one_etcd_member_per_machine() {
    scale_roll_and_scale_down(world(EtcdMode::Simulated).await).await;
}

#[cfg(feature = "real-etcd")]
#[tokio::test]
async fn against_real_etcd_members_a_control_plane_scales_1_3_rolls_and_scales_to_1() {
    scale_roll_and_scale_down(world(EtcdMode::Real).await).await;
}

/// 1 → 3, a roll from v1.33 to v1.34 with maxSurge 1, 3 → 1; the monitor's findings at the end.
async fn scale_roll_and_scale_down(world: World) {
    let (nodes, members) = world.settled(1, "v1.33.0").await;
    assert_eq!(nodes, members);
    // The Cluster controller mirrors the control plane's status on its own pass: wait for it.
    let clusters: Api<Cluster> = Api::namespaced(world.env.client(), &world.ns);
    let deadline = std::time::Instant::now() + TIMEOUT;
    let initialized = loop {
        let cluster = clusters.get("demo").await.unwrap();
        let initialized = cluster
            .status
            .and_then(|s| s.initialization)
            .and_then(|i| i.control_plane_initialized);
        if initialized == Some(true) || std::time::Instant::now() >= deadline {
            break initialized;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        initialized,
        Some(true),
        "the Cluster learns initialization from its control plane"
    );

    world
        .kcps()
        .patch_scale("demo-cp", &PatchParams::default(), &scale(3))
        .await
        .unwrap();
    let (nodes, members) = world.settled(3, "v1.33.0").await;
    assert_eq!(nodes, members, "one member per machine after scaling up");
    let kcp = world.kcps().get("demo-cp").await.unwrap();
    let status = kcp.status.unwrap();
    assert_eq!(status.replicas, Some(3));
    assert_eq!(status.up_to_date_replicas, Some(3));
    assert_eq!(status.version.as_deref(), Some("v1.33.0"));
    let domains: BTreeSet<Option<String>> = world
        .machines()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|m| m.spec.failure_domain)
        .collect();
    assert_eq!(
        domains.len(),
        3,
        "spread over the three failure domains: {domains:?}"
    );

    // A rolling update with maxSurge 1 (the default): never fewer than 3 healthy members.
    world.watch.lock().unwrap().counting = true;
    world
        .kcps()
        .patch(
            "demo-cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "v1.34.0"}})),
        )
        .await
        .unwrap();
    let (rolled, members) = world.settled(3, "v1.34.0").await;
    assert_eq!(rolled, members);
    assert!(rolled.is_disjoint(&nodes), "every machine was replaced");
    {
        let mut watch = world.watch.lock().unwrap();
        watch.counting = false;
        assert_eq!(
            watch.fewest_healthy,
            Some(3),
            "the roll kept 3 healthy members at all times"
        );
    }

    world
        .kcps()
        .patch_scale("demo-cp", &PatchParams::default(), &scale(1))
        .await
        .unwrap();
    let (nodes, members) = world.settled(1, "v1.34.0").await;
    assert_eq!(nodes, members, "no member left behind after scaling down");

    let watch = world.watch.lock().unwrap();
    assert!(watch.violations.is_empty(), "{:#?}", watch.violations);
}

/// The control plane counts its machines from the manager's shared watch of Machines. Behind a
/// watch that delivers every event 2 s late — ten of the controller's 200 ms polls — it creates
/// each machine only once the watch shows the one before: scaled 1 → 3, three machines are ever
/// made, never a fourth (and a fourth etcd member).
#[tokio::test]
async fn behind_a_lagging_machine_watch_no_machine_is_made_twice() {
    let world = world_lagging(EtcdMode::Simulated, Some(Duration::from_secs(2))).await;
    // Every machine ever made, and the most alive at once, read past the lagging client.
    let seen = Arc::new(Mutex::new((BTreeSet::<String>::new(), 0usize)));
    let watcher = {
        let (machines, seen) = (world.machines(), seen.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(list) = machines.list(&ListParams::default()).await {
                    let mut seen = seen.lock().unwrap();
                    seen.1 = seen.1.max(list.items.len());
                    seen.0.extend(list.items.iter().map(|m| m.name_any()));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let (nodes, members) = world.settled(1, "v1.33.0").await;
    assert_eq!(nodes, members);
    world
        .kcps()
        .patch_scale("demo-cp", &PatchParams::default(), &scale(3))
        .await
        .unwrap();
    let (nodes, members) = world.settled(3, "v1.33.0").await;
    assert_eq!(nodes, members, "one member per machine");
    // Settled means the lagging watch shows all three: another pass would have made a fourth.
    tokio::time::sleep(Duration::from_secs(3)).await;
    watcher.abort();
    let (ever, most) = seen.lock().unwrap().clone();
    assert_eq!(ever.len(), 3, "machines ever made: {ever:?}");
    assert_eq!(most, 3);
    assert_eq!(world.cloud.instance_count(), 3);
    let watch = world.watch.lock().unwrap();
    assert!(watch.violations.is_empty(), "{:#?}", watch.violations);
}

/// Marks `machine` as a MachineHealthCheck does when it finds it unhealthy.
async fn mark_unhealthy(world: &World, machine: &str) {
    let now = jiff::Timestamp::now().to_string();
    let conditions = |m: &Machine| {
        let mut conditions: Vec<serde_json::Value> = m
            .status
            .as_ref()
            .map(|s| {
                s.conditions
                    .iter()
                    .filter(|c| c.type_ != "HealthCheckSucceeded" && c.type_ != "OwnerRemediated")
                    .map(|c| serde_json::to_value(c).unwrap())
                    .collect()
            })
            .unwrap_or_default();
        conditions.push(json!({"type": "HealthCheckSucceeded", "status": "False",
            "reason": "UnhealthyNode", "message": "the test says so", "lastTransitionTime": now}));
        conditions.push(json!({"type": "OwnerRemediated", "status": "False",
            "reason": "WaitingForRemediation", "message": "waiting", "lastTransitionTime": now}));
        conditions
    };
    // Retried: the machine controller writes the same status.
    for _ in 0..50 {
        let m = world.machines().get(machine).await.unwrap();
        let patch = json!({
            "metadata": {"resourceVersion": m.metadata.resource_version},
            "status": {"conditions": conditions(&m)},
        });
        if world
            .machines()
            .patch_status(machine, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("could not mark {machine}");
}

fn owner_remediated(machine: &Machine) -> Option<(String, String)> {
    let c = condition::get(&machine.status.as_ref()?.conditions, "OwnerRemediated")?;
    Some((c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn unhealthy_control_plane_machines_are_remediated_one_at_a_time_never_at_the_cost_of_quorum()
{
    let world = world(EtcdMode::Simulated).await;
    world.settled(1, "v1.33.0").await;
    world
        .kcps()
        .patch_scale("demo-cp", &PatchParams::default(), &scale(3))
        .await
        .unwrap();
    world.settled(3, "v1.33.0").await;
    let mut machines = world
        .machines()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    machines.sort_by_key(|m| m.metadata.creation_timestamp.clone());
    let name = |m: &Machine| m.metadata.name.clone().unwrap();
    let node = |m: &Machine| {
        m.status
            .as_ref()
            .unwrap()
            .node_ref
            .as_ref()
            .unwrap()
            .name
            .clone()
    };
    let (b, c) = (name(&machines[1]), name(&machines[2]));

    // c's etcd member fails; remediating b would leave 1 healthy of 2 voting members: refused.
    world.cloud.fail_etcd_member(&node(&machines[2]));
    mark_unhealthy(&world, &b).await;
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let machine = world.machines().get(&b).await.unwrap();
        assert!(
            machine.metadata.deletion_timestamp.is_none(),
            "b was remediated at the cost of quorum"
        );
        let kcp = world.kcps().get("demo-cp").await.unwrap();
        let remediating = kcp
            .status
            .as_ref()
            .and_then(|s| condition::get(&s.conditions, "Remediating").cloned());
        // The machine's condition and the control plane's are two writes: wait for both.
        if let (Some((reason, message)), Some(remediating)) =
            (owner_remediated(&machine), &remediating)
            && reason == "CannotBeRemediated"
            && remediating.status == "True"
        {
            assert!(message.contains("quorum"), "{message}");
            assert!(
                remediating.message.contains("quorum"),
                "{}",
                remediating.message
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no refusal: {:?}, Remediating {:?}",
            owner_remediated(&machine),
            remediating
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // c is marked too: the most broken (its member is down) goes first, and b waits until c's
    // replacement has joined.
    mark_unhealthy(&world, &c).await;
    let deadline = std::time::Instant::now() + TIMEOUT * 2;
    loop {
        let all = world
            .machines()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let replacement_of = |old: &str| {
            all.iter().find(|m| {
                m.annotations()
                    .get("controlplane.cluster.x-k8s.io/remediation-for")
                    .is_some_and(|v| v.contains(&format!("\"machine\":\"{old}\"")))
            })
        };
        if let Some(b_now) = all.iter().find(|m| name(m) == b)
            && b_now.metadata.deletion_timestamp.is_some()
        {
            assert!(
                all.iter().all(|m| name(m) != c),
                "b and c were remediated at once"
            );
            let joined = replacement_of(&c)
                .is_some_and(|m| m.status.as_ref().is_some_and(|s| s.node_ref.is_some()));
            assert!(joined, "b was remediated before c's replacement joined");
        }
        let settled = all.len() == 3
            && all.iter().all(|m| name(m) != b && name(m) != c)
            && replacement_of(&b).is_some()
            && replacement_of(&c).is_some();
        if settled {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "remediation did not finish"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (nodes, members) = world.settled(3, "v1.33.0").await;
    assert_eq!(
        nodes, members,
        "the remediated machines' members left with them"
    );
    let kcp = world.kcps().get("demo-cp").await.unwrap();
    let last = kcp.status.unwrap().last_remediation.unwrap();
    assert_eq!((last.machine.as_str(), last.retry_count), (b.as_str(), 0));
    let watch = world.watch.lock().unwrap();
    assert!(watch.violations.is_empty(), "{:#?}", watch.violations);
}

/// Sets the kube-scheduler pod on `node` crash-looping (`broken`) or running and ready again.
async fn set_scheduler(world: &World, node: &str, broken: bool) {
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(world.workload.client().await.unwrap(), "kube-system");
    let state = if broken {
        json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting"}})
    } else {
        json!({"running": {"startedAt": jiff::Timestamp::now().to_string()}})
    };
    let status = json!({"status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": if broken { "False" } else { "True" }}],
        "containerStatuses": [{"name": "kube-scheduler", "ready": !broken, "restartCount": 3,
            "image": "registry.k8s.io/kube-scheduler:simulated", "imageID": "", "state": state}],
    }});
    pods.patch_status(
        &format!("kube-scheduler-{node}"),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_failing_control_plane_component_is_reported_and_no_machine_joins_until_it_recovers() {
    let world = world(EtcdMode::Simulated).await;
    world.settled(1, "v1.33.0").await;
    const HEALTHY: [&str; 5] = [
        "APIServerPodHealthy",
        "ControllerManagerPodHealthy",
        "SchedulerPodHealthy",
        "EtcdPodHealthy",
        "EtcdMemberHealthy",
    ];
    // The machine is Ready once its node is; its pods' conditions follow the next pass that
    // reads them (a static pod may still be Pending then).
    let deadline = std::time::Instant::now() + TIMEOUT;
    let first = loop {
        let first = world
            .machines()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .remove(0);
        let conditions = &first.status.as_ref().unwrap().conditions;
        if HEALTHY.iter().all(|c| condition::is_true(conditions, c)) {
            break first;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the first machine's components never all became healthy: {conditions:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let machine = first.name_any();
    let node = first
        .status
        .as_ref()
        .unwrap()
        .node_ref
        .as_ref()
        .unwrap()
        .name
        .clone();

    // The scheduler crash-loops; then the control plane is asked for 3 machines.
    set_scheduler(&world, &node, true).await;
    world
        .kcps()
        .patch_scale("demo-cp", &PatchParams::default(), &scale(3))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let kcp = world.kcps().get("demo-cp").await.unwrap();
        let status = kcp.status.unwrap_or_default();
        let components = condition::get(&status.conditions, "ControlPlaneComponentsHealthy");
        let scaling = condition::get(&status.conditions, "ScalingUp");
        if let (Some(components), Some(scaling)) = (components, scaling)
            && components.status == "False"
            && scaling.message.contains("not healthy")
        {
            assert_eq!(components.reason, "NotHealthy");
            assert!(
                components
                    .message
                    .contains(&format!("* Machine {machine}: SchedulerPodHealthy"))
                    && components.message.contains("CrashLoopBackOff"),
                "{}",
                components.message
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the failing scheduler was not reported: {components:?} {scaling:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = world.machines().get(&machine).await.unwrap();
    let scheduler = condition::get(
        &m.status.as_ref().unwrap().conditions,
        "SchedulerPodHealthy",
    )
    .unwrap()
    .clone();
    assert_eq!(
        (scheduler.status.as_str(), scheduler.reason.as_str()),
        ("False", "Failed")
    );
    // Several passes later, still one machine: nothing joins a control plane whose components fail.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let count = world
        .machines()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(count, 1, "a machine joined while the scheduler failed");

    set_scheduler(&world, &node, false).await;
    let (nodes, members) = world.settled(3, "v1.33.0").await;
    assert_eq!(nodes, members);
    let kcp = world.kcps().get("demo-cp").await.unwrap();
    assert!(condition::is_true(
        &kcp.status.unwrap().conditions,
        "ControlPlaneComponentsHealthy"
    ));
    let watch = world.watch.lock().unwrap();
    assert!(watch.violations.is_empty(), "{:#?}", watch.violations);
}
