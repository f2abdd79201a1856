//! Upstream drives this provider: upstream Cluster API v1.14's own core, kubeadm bootstrap and
//! kubeadm control plane managers (built by `cargo xtask upstream install`, with upstream's CRDs
//! and webhooks) and this workspace's in-memory provider — nothing else of this workspace — bring
//! up a KubeadmControlPlane cluster (1 control-plane machine, 2 workers through a
//! MachineDeployment) from the built-in template, scale the workers 2 → 4 → 1, roll them to a new
//! machine template, and delete the cluster with no instance left in the simulated cloud. It
//! proves the provider contract as upstream reads it: `spec.providerID`,
//! `status.initialization.provisioned`, addresses, failure domains, the control-plane endpoint,
//! conditions, and deletion. A MachinePool (upstream's kubeadm bootstrap for pools, this
//! provider's `InMemoryMachinePool` over a scale set of the simulated cloud) is scaled 1 → 3 → 1
//! and rolled to another flavor on the way, with upstream's MachinePool controller making a
//! `Machine` for every instance from the provider's MachinePool Machines — the infrastructure
//! machine pool contract as upstream reads it: `spec.providerIDList`, `status.replicas`,
//! `status.infrastructureMachineKind`, one machine per instance.
//!
//! Upstream's KubeadmControlPlane reaches into the workload cluster, and the simulated cloud is
//! made good enough for it:
//! - the workload cluster is a real kube-apiserver shared by the simulated nodes; its admin
//!   kubeconfig is the `<cluster>-kubeconfig` Secret (upstream keeps a Secret it finds and does
//!   not own, and rotates only its own);
//! - simulated kubelets register each instance's `Node` (control-plane nodes labelled and tainted
//!   as kubeadm does) and mirror kubeadm's static pods in `kube-system`, which upstream judges
//!   for `APIServerPodHealthy` and its siblings;
//! - each control-plane instance runs a real etcd member (`EtcdProcesses`) that serves TLS with a
//!   certificate from the etcd CA found in its own bootstrap data (cloud-init `write_files`, as
//!   kubeadm finds it), and each node's kubelet endpoint (`kubelet::Kubelet`, on the instance's
//!   loopback address) forwards `etcd-<node>:2379` over SPDY/3.1: upstream dials etcd through the
//!   workload API server's `pods/portforward`, exactly as on a real cloud, for `EtcdMemberHealthy`
//!   and `EtcdClusterHealthy`.
//!
//! - `kubeadm init` is simulated far enough for upstream to call the control plane initialized:
//!   the `kubeadm-config` ConfigMap with the `ClusterConfiguration` from the instance's own
//!   bootstrap data; nodes report `Ready` and no memory, disk or PID pressure.
//!
//! More than one replica: the test scales the control plane 1 → 3 → 1 and upstream gets all the
//! way. Each joining control-plane instance's member is added to the etcd cluster as a learner
//! and promoted, as kubeadm does, so upstream's scale-up preflight checks (all members healthy,
//! every component pod running) pass and the three machines become ready with
//! `EtcdClusterHealthy`; on the way down upstream moves etcd's leadership and removes the
//! members itself through the same port-forward (the simulated cloud never removes a
//! membership), leaving one member. Not simulated (and not needed on this test's path):
//! kubeadm's `kubelet-config` ConfigMap, kube-proxy, CoreDNS and certificate expiry on the
//! nodes.
#![cfg(feature = "real-etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use capi_actuator::InfrastructureControllers;
use capi_cli::generate::{Inputs, render};
use capi_testing::envtest::ControlPlane;
use capi_testing::upstream::{CORE_BOOTSTRAP_CONTROL_PLANE, UpstreamAssets, UpstreamPeer};
use common::{manager_config, workload_kubeconfig};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Api, Client};
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::{InMemoryCluster, InMemoryMachine, InMemoryMachinePool};
use provider_inmemory::cloud::{CloudConfig, EtcdProcesses, SimulatedCloud};
use provider_inmemory::nodes::NodeRegistrar;
use provider_inmemory::pool::InMemoryPoolActuator;
use serde_json::{Value, json};

const NAMESPACE: &str = "upstream-drives";
const CLUSTER: &str = "driven";
const WITHIN: Duration = Duration::from_secs(300);

fn api(client: &Client, group: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1beta2", kind);
    Api::namespaced_with(client.clone(), NAMESPACE, &ApiResource::from_gvk(&gvk))
}

fn condition(object: &DynamicObject, kind: &str) -> Option<Value> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
}

struct World {
    client: Client,
    peer: UpstreamPeer,
    cloud: Arc<SimulatedCloud>,
    workload: ControlPlane,
}

impl World {
    /// Waits until `done` answers `Some`, failing with `what`, the state and upstream's logs.
    async fn until<T, F, Fut>(&mut self, what: &str, mut done: F) -> T
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let started = Instant::now();
        loop {
            self.peer
                .check()
                .unwrap_or_else(|e| panic!("an upstream manager exited: {e}"));
            match done(self.client.clone()).await {
                Ok(value) => {
                    println!("{what}: after {:.1?}", started.elapsed());
                    return value;
                }
                Err(state) if started.elapsed() > WITHIN => panic!(
                    "{what}: not within {WITHIN:?}: {state}\n{}",
                    self.peer.log_tails()
                ),
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }
}

/// The workers (machines of the MachineDeployment), `Running`, with the machine template their
/// InMemoryMachine was cloned from;
/// `Err` with what is not there yet.
async fn workers(client: &Client) -> Result<Vec<(String, String)>, String> {
    let machines = api(client, "cluster.x-k8s.io", "Machine")
        .list(
            &ListParams::default()
                .labels(&format!("cluster.x-k8s.io/deployment-name={CLUSTER}-md-0")),
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for machine in &machines.items {
        let phase = machine.data["status"]["phase"].as_str().unwrap_or_default();
        if phase != "Running" || machine.metadata.deletion_timestamp.is_some() {
            return Err(format!("machine {:?} is {phase}", machine.metadata.name));
        }
        // The template the machine's InMemoryMachine was cloned from.
        let infra: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            NAMESPACE,
            &ApiResource::erase::<InMemoryMachine>(&()),
        );
        let infra = infra
            .get(
                machine.data["spec"]["infrastructureRef"]["name"]
                    .as_str()
                    .unwrap_or_default(),
            )
            .await
            .map_err(|e| e.to_string())?;
        let template = infra
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("cluster.x-k8s.io/cloned-from-name"))
            .cloned()
            .unwrap_or_default();
        out.push((machine.metadata.name.clone().unwrap_or_default(), template));
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_managers_drive_the_in_memory_provider_through_a_clusters_life() {
    let _ = capi_runtime::telemetry::init_logging(capi_runtime::telemetry::LogFormat::Text);
    let assets = UpstreamAssets::locate().unwrap_or_else(|e| panic!("{e}"));
    let management = ControlPlane::start().await.unwrap();
    let peer = UpstreamPeer::start_components(&management, &assets, &CORE_BOOTSTRAP_CONTROL_PLANE)
        .await
        .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));
    let client = management.client().await.unwrap();
    capi_testing::install_crds(&client, &provider_inmemory::api::crds())
        .await
        .unwrap();
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&Default::default(), &namespace)
        .await
        .unwrap();

    // The simulated cloud: loopback addresses (kubelet endpoints listen there), a real etcd
    // member per control-plane instance, kubelets registering nodes in the workload API server.
    let workload = ControlPlane::start().await.unwrap();
    workload_kubeconfig(&client, NAMESPACE, CLUSTER, &workload).await;
    let cloud = Arc::new(SimulatedCloud::new(CloudConfig {
        boot_time: Duration::from_millis(300),
        delete_time: Duration::from_millis(100),
        loopback_addresses: true,
        ..CloudConfig::default()
    }));
    let etcd_binary = capi_testing::envtest::Assets::locate().unwrap().etcd;
    let etcd = EtcdProcesses::start(&cloud, &etcd_binary);
    let kubelets = tokio::spawn(
        NodeRegistrar::new(workload.client().await.unwrap(), cloud.clone())
            .with_kubelets(etcd.port_forward_targets())
            .run(Duration::from_millis(200)),
    );

    // This workspace's part: the in-memory provider's reconcilers alone.
    let mut manager = capi_runtime::manager::Manager::new(
        management.config().await.unwrap(),
        manager_config(NAMESPACE),
    )
    .await
    .unwrap();
    let actuator = Arc::new(InMemoryActuator::new(
        cloud.clone(),
        cloud.clone(),
        Duration::from_millis(200),
    ));
    manager.add_machine_reconciler(actuator.clone());
    manager.add_cluster_reconciler::<InMemoryCluster>(actuator);
    manager.add_machine_pool_reconciler::<InMemoryMachinePool, InMemoryCluster, _>(Arc::new(
        InMemoryPoolActuator::new(cloud.clone(), Duration::from_millis(200)),
    ));
    let provider = tokio::spawn(async move {
        let _ = manager.run_until(std::future::pending()).await;
    });

    let inputs = Inputs {
        cluster_name: CLUSTER.into(),
        namespace: Some(NAMESPACE.into()),
        kubernetes_version: Some("v1.34.0".into()),
        control_plane_machine_count: Some(1),
        worker_machine_count: Some(2),
        ..Inputs::default()
    };
    let template = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../capi-cli/templates/inmemory/cluster-template.yaml"),
    )
    .unwrap();
    let yaml = render(&template, &inputs, |_| None).unwrap();
    // Upstream's managers do the rest; the MachineHealthCheck is not part of this test.
    let objects: Vec<_> = capi_cli::apply::parse(&yaml)
        .unwrap()
        .into_iter()
        .filter(|o| {
            o.types
                .as_ref()
                .is_some_and(|t| t.kind != "MachineHealthCheck")
        })
        .collect();
    capi_cli::apply::apply(&client, &objects, Some(NAMESPACE), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));

    let mut world = World {
        client: client.clone(),
        peer,
        cloud: cloud.clone(),
        workload,
    };

    // Up: the cluster Available as upstream judges it, every machine Running.
    world
        .until("cluster Available, 1 control plane + 2 workers Running", |client| async move {
            let cluster = api(&client, "cluster.x-k8s.io", "Cluster")
                .get(CLUSTER)
                .await
                .map_err(|e| e.to_string())?;
            let available = condition(&cluster, "Available");
            if !available.as_ref().is_some_and(|c| c["status"] == "True") {
                let kcp = api(&client, "controlplane.cluster.x-k8s.io", "KubeadmControlPlane")
                    .get(&format!("{CLUSTER}-control-plane"))
                    .await
                    .map(|k| k.data["status"].clone())
                    .unwrap_or_default();
                let machines: Vec<Value> = api(&client, "cluster.x-k8s.io", "Machine")
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items.into_iter().map(|m| m.data["status"].clone()).collect())
                    .unwrap_or_default();
                return Err(format!(
                    "Available: {available:?}\nKubeadmControlPlane: {kcp:#}\nmachines: {machines:#?}"
                ));
            }
            let running = workers(&client).await?;
            if running.len() != 2 {
                return Err(format!("{} workers", running.len()));
            }
            Ok(())
        })
        .await;
    let machines = api(&client, "cluster.x-k8s.io", "Machine")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(machines.items.len(), 3);
    for machine in &machines.items {
        assert!(
            machine.data["spec"]["providerID"]
                .as_str()
                .is_some_and(|p| p.starts_with("inmemory://")),
            "{:#}",
            machine.data
        );
        assert!(machine.data["status"]["nodeRef"]["name"].is_string());
        assert_eq!(machine.data["status"]["phase"], "Running");
        assert!(
            machine.data["status"]["addresses"]
                .as_array()
                .is_some_and(|a| !a.is_empty()),
            "{:#}",
            machine.data["status"]
        );
    }
    let kcp = api(
        &client,
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
    )
    .get(&format!("{CLUSTER}-control-plane"))
    .await
    .unwrap();
    for healthy in [
        "EtcdClusterHealthy",
        "ControlPlaneComponentsHealthy",
        "Available",
    ] {
        let found = condition(&kcp, healthy);
        assert!(
            found.as_ref().is_some_and(|c| c["status"] == "True"),
            "KubeadmControlPlane {healthy}: {found:?}\n{}",
            world.peer.log_tails()
        );
    }
    assert_eq!(world.cloud.instance_count(), 3);
    let nodes = Api::<Node>::all(world.workload.client().await.unwrap())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(nodes.items.len(), 3);

    // The control plane 1 → 3 → 1: upstream's KubeadmControlPlane joins two machines, each
    // with its etcd member, then removes them again — moving etcd's leadership and removing the
    // members itself, through the workload API server's port-forward.
    let kcps = api(
        &client,
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
    );
    let kcp_name = format!("{CLUSTER}-control-plane");
    let etcd_cluster = format!("{NAMESPACE}.{CLUSTER}");
    for replicas in [3i64, 1] {
        kcps.patch(
            &kcp_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
        world
            .until(
                &format!("{replicas} control-plane machines ready, etcd healthy"),
                |client| {
                    let kcp_name = kcp_name.clone();
                    async move {
                        let kcp = api(
                            &client,
                            "controlplane.cluster.x-k8s.io",
                            "KubeadmControlPlane",
                        )
                        .get(&kcp_name)
                        .await
                        .map_err(|e| e.to_string())?;
                        let status = &kcp.data["status"];
                        let settled = [
                            "replicas",
                            "readyReplicas",
                            "availableReplicas",
                            "upToDateReplicas",
                        ]
                        .iter()
                        .all(|field| status[field].as_i64() == Some(replicas));
                        let etcd = condition(&kcp, "EtcdClusterHealthy");
                        (settled && etcd.as_ref().is_some_and(|c| c["status"] == "True"))
                            .then_some(())
                            .ok_or(format!("{status:#}"))
                    }
                },
            )
            .await;
        world
            .until(&format!("{replicas} etcd members"), |_| {
                let urls = etcd.client_urls(&etcd_cluster);
                async move {
                    let mut etcd_client = etcd_client::Client::connect(&urls, None)
                        .await
                        .map_err(|e| e.to_string())?;
                    let members = etcd_client.member_list().await.map_err(|e| e.to_string())?;
                    let names: Vec<String> = members
                        .members()
                        .iter()
                        .map(|m| m.name().to_string())
                        .collect();
                    (names.len() == replicas as usize && urls.len() == replicas as usize)
                        .then_some(())
                        .ok_or(format!("members {names:?}, processes {}", urls.len()))
                }
            })
            .await;
    }

    // Scale the workers 2 → 4 → 1.
    let deployments = api(&client, "cluster.x-k8s.io", "MachineDeployment");
    let md = format!("{CLUSTER}-md-0");
    for replicas in [4usize, 1] {
        deployments
            .patch(
                &md,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
        world
            .until(
                &format!("{replicas} workers Running"),
                |client| async move {
                    let running = workers(&client).await?;
                    (running.len() == replicas)
                        .then_some(())
                        .ok_or(format!("{} workers", running.len()))
                },
            )
            .await;
        world
            .until(&format!("{} instances in the cloud", replicas + 1), |_| {
                let count = cloud.instance_count();
                async move {
                    (count == replicas + 1)
                        .then_some(())
                        .ok_or(format!("{count} instances"))
                }
            })
            .await;
    }

    // Roll the workers to a new machine template.
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::erase::<provider_inmemory::api::InMemoryMachineTemplate>(&()),
    );
    let mut rolled: DynamicObject = templates.get(&md).await.unwrap();
    rolled.metadata = kube::api::ObjectMeta {
        name: Some(format!("{md}-rolled")),
        namespace: Some(NAMESPACE.into()),
        ..Default::default()
    };
    rolled.data["spec"]["template"]["spec"]["flavor"] = json!("medium");
    rolled.data.as_object_mut().unwrap().remove("status");
    templates
        .create(&Default::default(), &rolled)
        .await
        .unwrap();
    deployments
        .patch(
            &md,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"infrastructureRef": {"name": format!("{md}-rolled")}}}}})),
        )
        .await
        .unwrap();
    world
        .until("the worker rolled to the new template", |client| {
            let md = md.clone();
            async move {
                let running = workers(&client).await?;
                let all_new = running.iter().all(|(_, t)| *t == format!("{md}-rolled"));
                (running.len() == 1 && all_new)
                    .then_some(())
                    .ok_or(format!("workers {running:?}"))
            }
        })
        .await;
    world
        .until("the old worker's instance gone", |_| {
            let count = cloud.instance_count();
            async move {
                (count == 2)
                    .then_some(())
                    .ok_or(format!("{count} instances"))
            }
        })
        .await;
    let flavors: Vec<String> = cloud
        .instances()
        .into_iter()
        .filter(|i| !i.control_plane)
        .map(|i| i.flavor)
        .collect();
    assert_eq!(
        flavors,
        ["medium"],
        "the worker runs the rolled template's flavor"
    );

    drive_a_pool(&mut world, &client, &cloud).await;

    // Delete: nothing left in the cloud.
    api(&client, "cluster.x-k8s.io", "Cluster")
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    world
        .until("the cluster deleted", |client| async move {
            match api(&client, "cluster.x-k8s.io", "Cluster")
                .get_opt(CLUSTER)
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(_) => Err("still there".into()),
            }
        })
        .await;
    assert_eq!(cloud.instance_count(), 0, "instances left in the cloud");
    assert!(
        cloud.scale_sets().is_empty(),
        "scale sets left in the cloud"
    );
    assert!(
        cloud.load_balancers().is_empty(),
        "load balancers left in the cloud"
    );
    provider.abort();
    kubelets.abort();
    drop(etcd);
}

const POOL: &str = "driven-mp-0";

const POOL_MANIFESTS: &str = r##"
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfig
metadata: {name: driven-mp-0, namespace: upstream-drives}
spec: {format: cloud-config}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachinePool
metadata: {name: driven-mp-0, namespace: upstream-drives}
spec: {flavor: small}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachinePool
metadata: {name: driven-mp-0, namespace: upstream-drives}
spec:
  clusterName: driven
  replicas: 1
  template:
    spec:
      clusterName: driven
      version: v1.34.0
      bootstrap:
        configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfig, name: driven-mp-0}
      infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachinePool, name: driven-mp-0}
"##;

/// The pool's instances in the cloud (active), by provider ID, with their flavors.
fn pool_instances(cloud: &SimulatedCloud) -> Vec<(String, String)> {
    cloud
        .instances()
        .into_iter()
        .filter(|i| {
            i.scale_set.is_some() && i.status == provider_inmemory::cloud::InstanceStatus::Active
        })
        .map(|i| (provider_inmemory::actuator::provider_id(&i.id), i.flavor))
        .collect()
}

/// Upstream's MachinePool controller and kubeadm bootstrap drive an `InMemoryMachinePool`:
/// `n` instances of `flavor`, each with a `Machine` upstream made for it, Running on its node,
/// the pool's provider ID list and ready replicas as upstream computes them.
async fn pool_converged(
    world: &mut World,
    cloud: &Arc<SimulatedCloud>,
    n: usize,
    flavor: &'static str,
) {
    let cloud = cloud.clone();
    world
        .until(
            &format!("the pool at {n} instances of {flavor}"),
            |client| {
                let instances = pool_instances(&cloud);
                async move {
                    let pool = api(&client, "cluster.x-k8s.io", "MachinePool")
                        .get(POOL)
                        .await
                        .map_err(|e| e.to_string())?;
                    let machines = api(&client, "cluster.x-k8s.io", "Machine")
                        .list(
                            &ListParams::default()
                                .labels(&format!("cluster.x-k8s.io/pool-name={POOL}")),
                        )
                        .await
                        .map_err(|e| e.to_string())?;
                    let running: std::collections::BTreeSet<String> = machines
                        .items
                        .iter()
                        .filter(|m| {
                            m.data["status"]["phase"] == "Running"
                                && m.metadata.deletion_timestamp.is_none()
                        })
                        .filter_map(|m| m.data["spec"]["providerID"].as_str().map(str::to_string))
                        .collect();
                    let ids: std::collections::BTreeSet<String> =
                        instances.iter().map(|(id, _)| id.clone()).collect();
                    let listed: std::collections::BTreeSet<String> =
                        pool.data["spec"]["providerIDList"]
                            .as_array()
                            .map(|l| {
                                l.iter()
                                    .filter_map(|v| v.as_str().map(str::to_string))
                                    .collect()
                            })
                            .unwrap_or_default();
                    let settled = instances.len() == n
                        && instances.iter().all(|(_, f)| f == flavor)
                        && listed == ids
                        && running == ids
                        && machines.items.len() == n
                        && pool.data["status"]["readyReplicas"] == json!(n)
                        && pool.data["status"]["phase"] == "Running";
                    settled.then_some(()).ok_or(format!(
                        "instances {instances:?}\nproviderIDList {listed:?}\nrunning machines \
                     {running:?} of {}\npool status {:#}",
                        machines.items.len(),
                        pool.data["status"]
                    ))
                }
            },
        )
        .await;
}

/// A MachinePool through its life, upstream's controllers driving this provider's pool:
/// created, scaled 1 → 3 → 1, rolled to another flavor (every instance replaced, one scale set
/// throughout); it goes with the cluster.
async fn drive_a_pool(world: &mut World, client: &Client, cloud: &Arc<SimulatedCloud>) {
    let objects = capi_cli::apply::parse(POOL_MANIFESTS).unwrap();
    capi_cli::apply::apply(client, &objects, Some(NAMESPACE), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));
    pool_converged(world, cloud, 1, "small").await;
    let pools = api(client, "cluster.x-k8s.io", "MachinePool");
    for replicas in [3, 1] {
        pools
            .patch(
                POOL,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
        pool_converged(world, cloud, replicas, "small").await;
    }
    let before: Vec<String> = pool_instances(cloud)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    Api::<InMemoryMachinePool>::namespaced(client.clone(), NAMESPACE)
        .patch(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"flavor": "medium"}})),
        )
        .await
        .unwrap();
    pool_converged(world, cloud, 1, "medium").await;
    let after: Vec<String> = pool_instances(cloud)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert!(
        before.iter().all(|id| !after.contains(id)),
        "the instance was replaced: {before:?} → {after:?}"
    );
    assert_eq!(
        cloud.max_scale_sets_per_tag(),
        1,
        "one scale set for the pool"
    );
}
