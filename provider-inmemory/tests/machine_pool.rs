//! A MachinePool end to end in standalone mode: the core controllers (with the MachinePool
//! controller), the in-memory provider's pool reconciler over a scale set of the simulated cloud,
//! and simulated kubelets registering nodes in a second (workload) API server. The pool is scaled
//! 1 → 5 → 2, rolled to another flavor, and deleted; at every step the cloud, the MachinePool
//! Machines, the provider ID list, the node references and the workload's nodes agree, and in
//! the end nothing is left in the cloud, the management cluster or the workload cluster.
//!
//! The `machinepool` flavor of the in-memory templates then runs whole in standalone mode: a
//! KubeadmControlPlane and a MachinePool bootstrapped by the kubeadm bootstrap controller (one
//! KubeadmConfig for the pool, its join token rotated in its Secret), until its pool's instances
//! are Running nodes, and the cluster's deletion takes the pool with it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use capi_actuator::InfrastructureControllers;
use capi_controllers::{CoreControllers, CoreSettings};
use capi_core::api::{Cluster, Machine, MachinePhase, MachinePool, MachinePoolPhase};
use capi_core::{condition, labels};
use capi_runtime::manager::Manager;
use capi_testing::envtest::ControlPlane;
use capi_testing::{TestEnv, manifest};
use common::{TIMEOUT, manager_config, workload_kubeconfig};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::{
    InMemoryCluster, InMemoryMachine, InMemoryMachinePool, InMemoryMachineTemplate,
};
use provider_inmemory::cloud::{CloudConfig, InstanceStatus, SimulatedCloud};
use provider_inmemory::nodes::NodeRegistrar;
use provider_inmemory::pool::InMemoryPoolActuator;
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
apiVersion: v1
kind: Secret
metadata: {name: workers-bootstrap}
stringData: {value: "#cloud-config\n"}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachinePool
metadata: {name: workers}
spec: {flavor: small}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachinePool
metadata: {name: workers}
spec:
  clusterName: demo
  replicas: 1
  template:
    metadata: {labels: {team: blue}}
    spec:
      clusterName: demo
      version: v1.33.0
      bootstrap: {dataSecretName: workers-bootstrap}
      infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachinePool, name: workers}
"##;

struct World {
    env: TestEnv,
    ns: String,
    cloud: Arc<SimulatedCloud>,
    workload: ControlPlane,
    _tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl World {
    fn client(&self) -> Client {
        self.env.client()
    }
    fn pools(&self) -> Api<MachinePool> {
        Api::namespaced(self.client(), &self.ns)
    }
    fn infra_pools(&self) -> Api<InMemoryMachinePool> {
        Api::namespaced(self.client(), &self.ns)
    }
    fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.client(), &self.ns)
    }
    fn infra_machines(&self) -> Api<InMemoryMachine> {
        Api::namespaced(self.client(), &self.ns)
    }
    async fn nodes(&self) -> Api<Node> {
        Api::all(self.workload.client().await.unwrap())
    }
}

async fn world() -> World {
    let _ = capi_runtime::telemetry::init_logging(capi_runtime::telemetry::LogFormat::Text);
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let workload = ControlPlane::start().await.unwrap();
    let cloud = Arc::new(SimulatedCloud::new(CloudConfig::default()));
    workload_kubeconfig(&env.client(), &ns, "demo", &workload).await;
    let registrar = NodeRegistrar::new(workload.client().await.unwrap(), cloud.clone());
    let kubelets = tokio::spawn(registrar.run(Duration::from_millis(100)));

    let kube_config = env.control_plane().config().await.unwrap();
    let mut manager = Manager::new(kube_config, manager_config(&ns))
        .await
        .unwrap();
    let machines = Arc::new(InMemoryActuator::new(
        cloud.clone(),
        cloud.clone(),
        Duration::from_millis(50),
    ));
    let pools = Arc::new(InMemoryPoolActuator::new(
        cloud.clone(),
        Duration::from_millis(50),
    ));
    manager.add_machine_reconciler(machines.clone());
    manager.add_machine_template_reconciler::<InMemoryMachineTemplate, InMemoryCluster>(
        machines.clone(),
    );
    manager.add_machine_pool_reconciler::<InMemoryMachinePool, InMemoryCluster, _>(pools);
    manager.add_cluster_reconciler::<InMemoryCluster>(machines);
    manager.add(CoreControllers::new(CoreSettings {
        poll: Duration::from_millis(200),
        ..CoreSettings::default()
    }));
    let running = tokio::spawn(async move {
        let _ = manager.run_until(std::future::pending()).await;
    });
    manifest::create_all(&env.client(), &ns, &manifest::parse(MANIFESTS).unwrap())
        .await
        .unwrap();
    World {
        env,
        ns,
        cloud,
        workload,
        _tasks: vec![kubelets, running],
    }
}

/// What the pool looks like from every side, for one comparison (and a useful panic message).
#[derive(Debug, Default)]
struct Sighting {
    /// The cloud's active instances of scale sets, by provider ID, with their flavors.
    instances: BTreeSet<(String, String)>,
    provider_id_list: BTreeSet<String>,
    node_refs: BTreeSet<String>,
    /// The Machines of the pool that are Running, Ready and have a node, by their provider IDs.
    running_machines: BTreeSet<String>,
    machines: usize,
    infra_machines: usize,
    nodes: BTreeSet<String>,
    phase: Option<MachinePoolPhase>,
    replicas: Option<i32>,
    ready_replicas: Option<i32>,
    available: bool,
    /// Every condition of the MachinePool and its InMemoryMachinePool, and whether the
    /// InMemoryMachinePool is labelled, owned and finalized: what a timeout's message shows of
    /// where the pool stopped.
    why: Vec<String>,
}

async fn sighting(world: &World) -> Sighting {
    let instances = world
        .cloud
        .instances()
        .into_iter()
        .filter(|i| i.scale_set.is_some() && i.status == InstanceStatus::Active)
        .map(|i| (provider_inmemory::actuator::provider_id(&i.id), i.flavor))
        .collect();
    let pool = world.pools().get("workers").await.unwrap();
    let status = pool.status.clone().unwrap_or_default();
    let selector = format!("{}=workers", labels::MACHINE_POOL_NAME);
    let machines = world
        .machines()
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items;
    let running_machines = machines
        .iter()
        .filter(|m| {
            m.metadata.deletion_timestamp.is_none()
                && m.phase() == Some(MachinePhase::Running)
                && m.status.as_ref().is_some_and(|s| {
                    s.node_ref.is_some() && condition::is_true(&s.conditions, condition::READY)
                })
        })
        .filter_map(|m| m.spec.provider_id.clone())
        .collect();
    let infra_machines = world
        .infra_machines()
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .len();
    let nodes = world
        .nodes()
        .await
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.spec.and_then(|s| s.provider_id))
        .collect();
    let infra = world.infra_pools().get("workers").await.unwrap();
    let mut why: Vec<String> = status
        .conditions
        .iter()
        .map(|c| {
            format!(
                "MachinePool {} {} {}: {}",
                c.type_, c.status, c.reason, c.message
            )
        })
        .collect();
    let infra_conditions = infra
        .status
        .as_ref()
        .map(|s| s.contract.conditions.clone())
        .unwrap_or_default();
    why.extend(infra_conditions.iter().map(|c| {
        format!(
            "InMemoryMachinePool {} {} {}: {}",
            c.type_, c.status, c.reason, c.message
        )
    }));
    why.push(format!(
        "InMemoryMachinePool labels {:?}, owners {:?}, finalizers {:?}",
        infra.metadata.labels,
        infra
            .metadata
            .owner_references
            .iter()
            .flatten()
            .map(|o| format!("{} {}", o.kind, o.name))
            .collect::<Vec<_>>(),
        infra.metadata.finalizers
    ));
    Sighting {
        why,
        instances,
        provider_id_list: pool.spec.provider_id_list.iter().cloned().collect(),
        node_refs: status
            .node_refs
            .iter()
            .filter_map(|r| r.name.clone())
            .collect(),
        running_machines,
        machines: machines.len(),
        infra_machines,
        nodes,
        phase: status.phase,
        replicas: status.replicas,
        ready_replicas: status.ready_replicas,
        available: condition::is_true(&status.conditions, condition::AVAILABLE),
    }
}

/// Waits until the pool has `n` running instances of `flavor`, each with one Machine Running
/// on its node, listed in `spec.providerIDList` and `status.nodeRefs`, and nothing else.
async fn converged(world: &World, n: usize, flavor: &str) -> Sighting {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let seen = sighting(world).await;
        let ids: BTreeSet<String> = seen.instances.iter().map(|(id, _)| id.clone()).collect();
        let settled = seen.instances.len() == n
            && seen.instances.iter().all(|(_, f)| f == flavor)
            && seen.provider_id_list == ids
            && seen.running_machines == ids
            && seen.machines == n
            && seen.infra_machines == n
            && seen.nodes == ids
            && seen.node_refs.len() == n
            && seen.replicas == i32::try_from(n).ok()
            && seen.ready_replicas == i32::try_from(n).ok()
            && seen.phase == Some(MachinePoolPhase::Running)
            && seen.available;
        if settled {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {n} instances of {flavor}: {seen:#?}\nwhere it stands:\n{}",
            seen.why.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn scale(world: &World, replicas: i32) {
    world
        .pools()
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_pool_scales_rolls_and_goes_leaving_nothing() {
    let world = world().await;
    let first = converged(&world, 1, "small").await;

    let pool = world.pools().get("workers").await.unwrap();
    assert!(
        pool.finalizers()
            .contains(&capi_controllers::MACHINE_POOL_FINALIZER.to_string())
    );
    assert_eq!(labels::cluster_name(&pool.metadata), Some("demo"));
    let machine = world
        .machines()
        .list(&ListParams::default().labels(&format!("{}=workers", labels::MACHINE_POOL_NAME)))
        .await
        .unwrap()
        .items
        .remove(0);
    assert_eq!(machine.labels()["team"], "blue", "the template's labels");
    assert_eq!(
        machine.owner_references()[0].kind,
        "MachinePool",
        "controlled by the pool"
    );
    let node_name = first.node_refs.iter().next().unwrap().clone();
    let node = world.nodes().await.get(&node_name).await.unwrap();
    assert_eq!(
        node.annotations()
            .get("cluster.x-k8s.io/owner-kind")
            .map(String::as_str),
        Some("MachinePool")
    );

    scale(&world, 5).await;
    converged(&world, 5, "small").await;
    scale(&world, 2).await;
    let after_scale_down = converged(&world, 2, "small").await;
    assert_eq!(
        after_scale_down.nodes.len(),
        2,
        "the nodes of the instances that left are gone"
    );

    world
        .infra_pools()
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"flavor": "medium"}})),
        )
        .await
        .unwrap();
    let rolled = converged(&world, 2, "medium").await;
    assert!(
        rolled.instances.is_disjoint(&after_scale_down.instances),
        "every instance was replaced"
    );
    assert_eq!(
        world.cloud.max_scale_sets_per_tag(),
        1,
        "one scale set for the pool, ever"
    );

    world
        .pools()
        .delete("workers", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let pool_gone = world.pools().get_opt("workers").await.unwrap().is_none();
        let infra_gone = world
            .infra_pools()
            .get_opt("workers")
            .await
            .unwrap()
            .is_none();
        let machines = world
            .machines()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len();
        let infra_machines = world
            .infra_machines()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len();
        let nodes = world
            .nodes()
            .await
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len();
        let instances = world.cloud.instance_count();
        let scale_sets = world.cloud.scale_sets().len();
        if pool_gone
            && infra_gone
            && machines == 0
            && infra_machines == 0
            && nodes == 0
            && instances == 0
            && scale_sets == 0
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "deletion left pool={} infra pool={} machines={machines} infra machines={infra_machines} \
             nodes={nodes} instances={instances} scale sets={scale_sets}",
            !pool_gone,
            !infra_gone
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_machinepool_flavor_runs_standalone_and_goes_with_its_cluster() {
    use capi_control_plane::controller::{ControlPlaneSettings, KubeadmControlPlanes};
    use provider_inmemory::etcd::SimulatedEtcdAccess;

    let _ = capi_runtime::telemetry::init_logging(capi_runtime::telemetry::LogFormat::Text);
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(capi_control_plane::api::crds());
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let workload = ControlPlane::start().await.unwrap();
    let cloud = Arc::new(SimulatedCloud::new(CloudConfig {
        boot_time: Duration::from_millis(200),
        delete_time: Duration::from_millis(100),
        ..CloudConfig::default()
    }));
    workload_kubeconfig(&env.client(), &ns, "demo", &workload).await;
    let kubelets = tokio::spawn(
        NodeRegistrar::new(workload.client().await.unwrap(), cloud.clone())
            .run(Duration::from_millis(100)),
    );
    let mut manager = Manager::new(
        env.control_plane().config().await.unwrap(),
        manager_config(&ns),
    )
    .await
    .unwrap();
    let machines = Arc::new(InMemoryActuator::new(
        cloud.clone(),
        cloud.clone(),
        Duration::from_millis(50),
    ));
    manager.add_machine_reconciler(machines.clone());
    manager.add_machine_template_reconciler::<InMemoryMachineTemplate, InMemoryCluster>(
        machines.clone(),
    );
    manager.add_cluster_reconciler::<InMemoryCluster>(machines);
    manager.add_machine_pool_reconciler::<InMemoryMachinePool, InMemoryCluster, _>(Arc::new(
        InMemoryPoolActuator::new(cloud.clone(), Duration::from_millis(50)),
    ));
    manager.add(capi_bootstrap::controller::KubeadmBootstrap::default());
    manager.add(CoreControllers::new(CoreSettings {
        poll: Duration::from_millis(200),
        ..CoreSettings::default()
    }));
    manager.add(KubeadmControlPlanes::new(ControlPlaneSettings {
        poll: Duration::from_millis(200),
        ..ControlPlaneSettings::new(Arc::new(SimulatedEtcdAccess::new(cloud.clone())))
    }));
    let running = tokio::spawn(async move {
        let _ = manager.run_until(std::future::pending()).await;
    });

    let inputs = capi_cli::generate::Inputs {
        cluster_name: "demo".into(),
        namespace: Some(ns.clone()),
        kubernetes_version: Some("v1.34.0".into()),
        control_plane_machine_count: Some(1),
        worker_machine_count: Some(2),
        ..capi_cli::generate::Inputs::default()
    };
    let yaml = capi_cli::generate::render(
        capi_cli::generate::built_in("inmemory", Some("machinepool")).unwrap(),
        &inputs,
        |_| None,
    )
    .unwrap();
    let objects = capi_cli::apply::parse(&yaml).unwrap();
    capi_cli::apply::apply(&env.client(), &objects, Some(&ns), |_| {})
        .await
        .unwrap();

    let pools: Api<MachinePool> = Api::namespaced(env.client(), &ns);
    let machines: Api<Machine> = Api::namespaced(env.client(), &ns);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let pool = pools.get("demo-mp-0").await.unwrap();
        let status = pool.status.clone().unwrap_or_default();
        let pool_machines = machines
            .list(
                &ListParams::default().labels(&format!("{}=demo-mp-0", labels::MACHINE_POOL_NAME)),
            )
            .await
            .unwrap()
            .items;
        let running = pool_machines
            .iter()
            .filter(|m| m.phase() == Some(MachinePhase::Running))
            .count();
        if status.phase == Some(MachinePoolPhase::Running)
            && status.ready_replicas == Some(2)
            && running == 2
            && pool_machines.len() == 2
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pool did not run: {status:#?}\n{} machines, {running} running",
            pool_machines.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(env.client(), &ns);
    let data = secrets.get("demo-mp-0").await.unwrap();
    assert!(
        data.annotations()
            .contains_key("bootstrap.cluster.x-k8s.io/token-expires"),
        "the pool's bootstrap data carries a rotated join token"
    );
    assert_eq!(
        pools
            .get("demo-mp-0")
            .await
            .unwrap()
            .spec
            .template
            .spec
            .bootstrap
            .data_secret_name
            .as_deref(),
        Some("demo-mp-0")
    );
    assert_eq!(cloud.scale_sets().len(), 1);

    Api::<Cluster>::namespaced(env.client(), &ns)
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let cluster_gone = Api::<Cluster>::namespaced(env.client(), &ns)
            .get_opt("demo")
            .await
            .unwrap()
            .is_none();
        if cluster_gone && cloud.instance_count() == 0 && cloud.scale_sets().is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cluster's deletion left cluster={} instances={} scale sets={}",
            !cluster_gone,
            cloud.instance_count(),
            cloud.scale_sets().len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(pools.get_opt("demo-mp-0").await.unwrap().is_none());
    // With no garbage collector running, the pool's bootstrap data Secret goes with it too.
    assert!(
        secrets.get_opt("demo-mp-0").await.unwrap().is_none(),
        "the pool's bootstrap data Secret is left behind"
    );
    running.abort();
    kubelets.abort();
}
