//! Upstream drives the OpenStack provider: upstream Cluster API v1.14's own core, kubeadm
//! bootstrap and kubeadm control plane managers (built by `cargo xtask upstream install`, with
//! upstream's CRDs and webhooks) and this workspace's `openstack-manager` in its default mode —
//! the provider's controllers alone, as its generated ServiceAccount — bring up the cluster that
//! `capictl generate cluster --infrastructure openstack` renders (a KubeadmControlPlane of one
//! machine behind an Octavia load balancer, one worker through a MachineDeployment) on the local
//! OpenStack, scale the workers 1 → 2 → 1, roll them to a new machine template (another flavor),
//! and delete the cluster with nothing left in Nova, Neutron or Octavia. It proves the provider
//! contract as upstream reads it: `spec.providerID`, `status.initialization.provisioned`,
//! addresses, failure domains, the control-plane endpoint, and deletion.
//!
//! Nova's fake driver boots no VM; what would run in each server is simulated from the server's
//! own user data, read back from Nova (`common::nova_hosts`): kubelets registering nodes in a
//! second API server and serving port-forward, kubeadm's static pods, the `kubeadm-config`
//! upload, and a real etcd member per control-plane server with TLS from the etcd CA in its user
//! data — which upstream's KubeadmControlPlane reaches through the workload API server's
//! `pods/portforward`, as on a real cloud. The workload cluster's kubeconfig Secret points at
//! that API server (upstream keeps a Secret it finds and does not own).
//!
//! Differences from a real cloud's run: no floating IP for the API server (see
//! `common::cluster_manifests`), and each kubelet listens on a loopback stand-in of its server's
//! Neutron address (see `common::nova_hosts`). One control-plane machine: how far upstream gets
//! with more is told in `provider-inmemory/tests/upstream_drives.rs`.
//!
//! Needs the local OpenStack (`CAPI_RS_OPENSTACK_CLOUDS_YAML`) and the upstream peer
//! (`cargo xtask upstream install`); `cargo xtask test` provides both.
#![cfg(feature = "real-etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capi_testing::envtest::ControlPlane;
use capi_testing::upstream::{CORE_BOOTSTRAP_CONTROL_PLANE, UpstreamAssets, UpstreamPeer};
use common::nova_hosts::{NovaAdmin, nova_hosts};
use common::{assert_no_secrets, clouds_yaml, cluster_manifests, leftovers, password};
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Api, Client};
use provider_inmemory::nodes::NodeRegistrar;
use provider_openstack::api::OpenStackMachineTemplate;
use provider_openstack::cloud::{Compute, LoadBalancing, Session};
use provider_openstack::naming::ClusterNames;
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
    manager: tokio::process::Child,
    manager_log: std::path::PathBuf,
}

impl World {
    /// Waits until `done` answers `Ok`, failing with `what`, the last state and the managers'
    /// logs.
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
            if let Ok(Some(status)) = self.manager.try_wait() {
                panic!(
                    "openstack-manager exited ({status}):\n{}",
                    tail(&self.manager_log)
                );
            }
            match done(self.client.clone()).await {
                Ok(value) => {
                    println!("{what}: after {:.1?}", started.elapsed());
                    return value;
                }
                Err(state) if started.elapsed() > WITHIN => panic!(
                    "{what}: not within {WITHIN:?}: {state}\n{}\n--- openstack-manager\n{}",
                    self.peer.log_tails(),
                    tail(&self.manager_log)
                ),
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }
}

fn tail(path: &std::path::Path) -> String {
    capi_testing::deployed::tail(path, 40)
}

/// The workers (machines of the MachineDeployment), all `Running`: (machine, the template its
/// OpenStackMachine was cloned from, its server ID). `Err` with what is not there yet.
async fn workers(client: &Client) -> Result<Vec<(String, String, String)>, String> {
    let machines = api(client, "cluster.x-k8s.io", "Machine")
        .list(
            &ListParams::default()
                .labels(&format!("cluster.x-k8s.io/deployment-name={CLUSTER}-md-0")),
        )
        .await
        .map_err(|e| e.to_string())?;
    let infra: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::erase::<provider_openstack::api::OpenStackMachine>(&()),
    );
    let mut out = Vec::new();
    for machine in &machines.items {
        let phase = machine.data["status"]["phase"].as_str().unwrap_or_default();
        if phase != "Running" || machine.metadata.deletion_timestamp.is_some() {
            return Err(format!("machine {:?} is {phase}", machine.metadata.name));
        }
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
        let server = machine.data["spec"]["providerID"]
            .as_str()
            .and_then(|p| p.strip_prefix("openstack:///"))
            .unwrap_or_default()
            .to_string();
        out.push((
            machine.metadata.name.clone().unwrap_or_default(),
            template,
            server,
        ));
    }
    Ok(out)
}

/// The cluster's servers: (ID, status).
async fn servers(session: &Session, names: &ClusterNames) -> Vec<(String, String)> {
    session
        .servers_tagged(&names.tag())
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.id, s.status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_managers_drive_the_openstack_provider_through_a_clusters_life() {
    let clouds_yaml = clouds_yaml();
    let password = password(&clouds_yaml);
    let session = common::session(&clouds_yaml).await;
    let names = ClusterNames::new(NAMESPACE, CLUSTER);
    let assets = UpstreamAssets::locate().unwrap_or_else(|e| panic!("{e}"));
    let management = ControlPlane::start().await.unwrap();
    let peer = UpstreamPeer::start_components(&management, &assets, &CORE_BOOTSTRAP_CONTROL_PLANE)
        .await
        .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));
    let client = management.client().await.unwrap();
    capi_testing::install_crds(&client, &provider_openstack::api::crds())
        .await
        .unwrap();
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&Default::default(), &namespace)
        .await
        .unwrap();

    // This workspace's part: the provider's controllers alone, as deployed.
    let token = common::generated_rbac_token(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let manager_log = dir.path().join("manager.log");
    let manager = common::spawn_manager(&management, &token, dir.path(), &manager_log, &[]);

    // What would run in the servers: kubelets, static pods, etcd members.
    let workload = ControlPlane::start().await.unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{CLUSTER}-kubeconfig"),
                     "labels": {capi_core::labels::CLUSTER_NAME: CLUSTER}},
        "stringData": {"value": workload.kubeconfig_yaml()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    let nova = NovaAdmin::connect(&clouds_yaml).await.unwrap();
    let etcd_binary = capi_testing::envtest::Assets::locate().unwrap().etcd;
    let (hosts, etcd) = nova_hosts(session.clone(), nova.clone(), names.tag(), &etcd_binary);
    let kubelets = tokio::spawn(
        NodeRegistrar::new(workload.client().await.unwrap(), Arc::new(hosts))
            .with_kubelets(etcd.port_forward_targets())
            .run(Duration::from_millis(500)),
    );

    capi_cli::apply::apply(
        &client,
        &cluster_manifests(CLUSTER, NAMESPACE, &clouds_yaml, 1, 1),
        Some(NAMESPACE),
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));

    let mut world = World {
        client: client.clone(),
        peer,
        manager,
        manager_log: manager_log.clone(),
    };

    // Up: the cluster Available as upstream judges it, both machines Running.
    world
        .until("cluster Available, 1 control plane + 1 worker Running", |client| async move {
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
            if running.len() != 1 {
                return Err(format!("{} workers", running.len()));
            }
            Ok(())
        })
        .await;
    let machines = api(&client, "cluster.x-k8s.io", "Machine")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(machines.items.len(), 2);
    for machine in &machines.items {
        assert!(
            machine.data["spec"]["providerID"]
                .as_str()
                .is_some_and(|p| p.starts_with("openstack:///")),
            "{:#}",
            machine.data
        );
        assert!(machine.data["status"]["nodeRef"]["name"].is_string());
        assert_eq!(machine.data["status"]["phase"], "Running");
        assert!(
            machine.data["status"]["addresses"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a["type"] == "InternalIP")),
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
    assert_eq!(
        servers(&session, &names).await.len(),
        2,
        "one server per machine"
    );
    assert_eq!(
        Api::<Node>::all(workload.client().await.unwrap())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    // The API server endpoint upstream's Cluster carries is the Octavia load balancer's, and the
    // control plane's server is its pool's member.
    let lb = session
        .load_balancers_named(&names.load_balancer())
        .await
        .unwrap()
        .pop()
        .expect("the API server load balancer");
    let cluster = api(&client, "cluster.x-k8s.io", "Cluster")
        .get(CLUSTER)
        .await
        .unwrap();
    assert_eq!(
        cluster.data["spec"]["controlPlaneEndpoint"]["host"], lb.vip_address,
        "the endpoint is the load balancer's address"
    );
    // The provider's own status: each server's ID and Nova state, and the cluster's resources.
    let openstack_machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::erase::<provider_openstack::api::OpenStackMachine>(&()),
    );
    for machine in openstack_machines
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        let status = &machine.data["status"];
        let id = machine.data["spec"]["providerID"]
            .as_str()
            .and_then(|p| p.strip_prefix("openstack:///"))
            .unwrap();
        assert_eq!(status["instanceID"], id, "{status:#}");
        assert_eq!(status["instanceState"], "ACTIVE", "{status:#}");
        assert!(status["failureDomain"].is_string(), "{status:#}");
    }
    let openstack_cluster: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::erase::<provider_openstack::api::OpenStackCluster>(&()),
    );
    let status = openstack_cluster.get(CLUSTER).await.unwrap().data["status"].clone();
    assert_eq!(status["apiServerLoadBalancer"]["id"], lb.id, "{status:#}");
    assert_eq!(
        status["apiServerLoadBalancer"]["internalIP"], lb.vip_address,
        "{status:#}"
    );
    for field in [
        "externalNetwork",
        "network",
        "router",
        "controlPlaneSecurityGroup",
        "workerSecurityGroup",
    ] {
        assert!(status[field]["id"].is_string(), "{field}: {status:#}");
    }
    assert_eq!(
        status["subnets"].as_array().map(Vec::len),
        Some(1),
        "{status:#}"
    );
    let pool = session.pools(&lb.id).await.unwrap().pop().expect("a pool");
    let members = session.members(&pool.id).await.unwrap();
    assert_eq!(
        members.len(),
        1,
        "the control plane in the pool: {members:?}"
    );

    // Scale the workers 1 → 2 → 1.
    let deployments = api(&client, "cluster.x-k8s.io", "MachineDeployment");
    let md = format!("{CLUSTER}-md-0");
    for replicas in [2usize, 1] {
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
            .until(&format!("{} servers in Nova", replicas + 1), |_| {
                let session = session.clone();
                let names = names.clone();
                async move {
                    let servers = servers(&session, &names).await;
                    (servers.len() == replicas + 1)
                        .then_some(())
                        .ok_or(format!("servers {servers:?}"))
                }
            })
            .await;
    }

    // Roll the workers to a new machine template with another flavor.
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::erase::<OpenStackMachineTemplate>(&()),
    );
    let mut rolled = templates.get(&md).await.unwrap();
    rolled.metadata = kube::api::ObjectMeta {
        name: Some(format!("{md}-rolled")),
        namespace: Some(NAMESPACE.into()),
        ..Default::default()
    };
    rolled.data["spec"]["template"]["spec"]["flavor"] = json!({"filter": {"name": "m1.medium"}});
    rolled.data.as_object_mut().unwrap().remove("status");
    templates
        .create(&Default::default(), &rolled)
        .await
        .unwrap();
    let before: BTreeSet<String> = workers(&client)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, _, server)| server)
        .collect();
    deployments
        .patch(
            &md,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"infrastructureRef": {"name": format!("{md}-rolled")}}}}})),
        )
        .await
        .unwrap();
    let after = world
        .until("the worker rolled to the new template", |client| {
            let md = md.clone();
            async move {
                let running = workers(&client).await?;
                let all_new = running.iter().all(|(_, t, _)| *t == format!("{md}-rolled"));
                (running.len() == 1 && all_new)
                    .then(|| running[0].2.clone())
                    .ok_or(format!("workers {running:?}"))
            }
        })
        .await;
    assert!(
        !before.contains(&after),
        "the rolled worker has a new server"
    );
    assert_eq!(
        nova.flavor_name(&after).await.unwrap(),
        "m1.medium",
        "the rolled worker's server runs the new template's flavor"
    );
    world
        .until("the old worker's server gone", |_| {
            let session = session.clone();
            let before = before.clone();
            async move {
                let mut left = Vec::new();
                for id in &before {
                    if session
                        .get_server(id)
                        .await
                        .map_err(|e| e.to_string())?
                        .is_some()
                    {
                        left.push(id.clone());
                    }
                }
                left.is_empty()
                    .then_some(())
                    .ok_or(format!("still there: {left:?}"))
            }
        })
        .await;

    // Delete: nothing of the cluster left in Nova, Neutron or Octavia.
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
    let left = leftovers(&session, &names).await;
    assert!(left.is_empty(), "left in the cloud: {left:?}");

    // Nothing the provider showed holds a credential: events and its own logs.
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_no_secrets(
        "the events",
        &serde_json::to_string(&events.items).unwrap(),
        &password,
        &clouds_yaml,
    );
    let mut manager = world.manager;
    manager.start_kill().unwrap();
    let _ = manager.wait().await;
    kubelets.abort();
    drop(etcd);
    assert_no_secrets(
        "the manager's logs",
        &std::fs::read_to_string(&manager_log).unwrap(),
        &password,
        &clouds_yaml,
    );
}
