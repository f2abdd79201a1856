//! The OpenStack provider end to end: the `openstack-manager` binary, running as its generated
//! ServiceAccount (`config/openstack/rbac.yaml`) in standalone mode with the KubeadmControlPlane
//! controller, reconciles the cluster that `capictl generate cluster --infrastructure openstack`
//! produces — a KubeadmControlPlane behind an Octavia load balancer and 2 workers — on the local
//! OpenStack (`cargo xtask openstack start`; `cargo xtask test` starts it and sets
//! `CAPI_RS_OPENSTACK_CLOUDS_YAML`). A simulated kubelet registers a node in a second API server
//! for every ACTIVE server of the cluster, as the real one would once the VM booted.
//!
//! Two differences from a real cloud's run:
//! - no floating IP for the API server. The noop Octavia driver's VIP port does not exist in
//!   Neutron, so Neutron cannot associate one (the floating-IP path is covered by the mock tests
//!   in `provider_openstack::cluster`);
//! - a control plane of **one** machine. Nova's fake driver boots no VM, so no etcd runs and the
//!   manager's etcd access (a port-forward to the etcd static pods through the workload API
//!   server) finds no member: the control plane provider would — rightly — never add a second
//!   machine to an etcd it cannot see. Scaling and rolling against real etcd members is covered
//!   by `provider-inmemory/tests/control_plane.rs`; the load balancer's pool as control-plane
//!   machines come and go by `provider-openstack/tests/local_openstack.rs`.
//!
//! Without `CAPI_RS_OPENSTACK_CLOUDS_YAML` the test fails and says how to start the cloud.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use capi_control_plane::api::KubeadmControlPlane;
use capi_core::api::{
    Cluster, Machine, MachineAddressType, MachineDeployment, MachinePhase, MachineSet,
};
use capi_testing::TestEnv;
use capi_testing::envtest::ControlPlane;
use capi_testing::table;
use common::{
    MANAGER, SYSTEM_NAMESPACE, assert_no_secrets, clouds_yaml, cluster_manifests, eventually,
    generated_rbac_token, leftovers, password, spawn_manager,
};
use k8s_openapi::api::core::v1::{Event, Node, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use provider_inmemory::nodes::{NodeRegistration, register};
use provider_openstack::api::{
    GROUP, OpenStackCluster, OpenStackMachine, OpenStackMachineTemplate, VERSION,
};
use provider_openstack::cloud::{Compute, LoadBalancing, Networking, Session};
use provider_openstack::naming::ClusterNames;
use serde_json::json;

const CLUSTER: &str = "demo";

/// A kubelet for every ACTIVE server of the cluster: registers its node in the workload cluster.
async fn kubelets(session: Session, nodes: Api<Node>, tag: String) {
    let mut registered = BTreeSet::new();
    loop {
        for server in session.servers_tagged(&tag).await.unwrap_or_default() {
            if server.status != "ACTIVE" || registered.contains(&server.id) {
                continue;
            }
            let ports = session
                .ports(&[("device_id".into(), server.id.clone())])
                .await
                .unwrap_or_default();
            let Some(ip) = ports
                .iter()
                .flat_map(|p| &p.fixed_ips)
                .map(|f| f.ip_address.clone())
                .next()
            else {
                continue;
            };
            let node = NodeRegistration {
                name: server.name.clone(),
                provider_id: format!("openstack:///{}", server.id),
                internal_ip: ip,
                zone: server.availability_zone.clone(),
                kubelet_port: None,
                control_plane: false,
                cluster: None,
            };
            if register(&nodes, &node).await.is_ok() {
                registered.insert(server.id);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn running(machines: &[Machine]) -> Vec<&Machine> {
    machines
        .iter()
        .filter(|m| {
            m.metadata.deletion_timestamp.is_none()
                && m.phase() == Some(MachinePhase::Running)
                && m.spec.provider_id.is_some()
        })
        .collect()
}

fn internal_ips(machine: &Machine) -> Vec<String> {
    machine
        .status
        .as_ref()
        .map(|s| {
            s.addresses
                .iter()
                .filter(|a| a.type_ == MachineAddressType::InternalIp)
                .map(|a| a.address.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn server_id(machine: &Machine) -> String {
    machine
        .spec
        .provider_id
        .as_deref()
        .and_then(|p| p.strip_prefix("openstack:///"))
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn the_manager_builds_and_tears_down_a_cluster_with_a_kubeadm_control_plane_and_two_workers()
{
    let clouds_yaml = clouds_yaml();
    let password = password(&clouds_yaml);
    let session = common::session(&clouds_yaml).await;

    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(capi_control_plane::api::crds());
    crds.extend(provider_openstack::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let client = env.client();
    let ns = env.namespace().await.unwrap();
    let names = ClusterNames::new(&ns, CLUSTER);
    let workload = ControlPlane::start().await.unwrap();

    // The manager process, as deployed: its ServiceAccount, every namespace, leader election,
    // JSON logs — at debug level for every crate, so that anything a library logs is checked.
    let token = generated_rbac_token(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("manager.log");
    let mut manager = spawn_manager(
        env.control_plane(),
        &token,
        dir.path(),
        &log_path,
        &[
            "--with-bootstrap",
            "--with-core",
            "--with-control-plane",
            "--leader-elect",
            &format!("{SYSTEM_NAMESPACE}/{MANAGER}"),
        ],
    );

    let kubelet = tokio::spawn(kubelets(
        session.clone(),
        Api::all(workload.client().await.unwrap()),
        names.tag(),
    ));

    // The workload cluster's kubeconfig, pointing at the API server the kubelets register with.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let workload_kubeconfig: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{CLUSTER}-kubeconfig"),
                     "labels": {capi_core::labels::CLUSTER_NAME: CLUSTER}},
        "stringData": {"value": workload.kubeconfig_yaml()},
    }))
    .unwrap();
    secrets
        .create(&Default::default(), &workload_kubeconfig)
        .await
        .unwrap();
    capi_testing::manifest::create_all(
        &client,
        &ns,
        &cluster_manifests(CLUSTER, &ns, &clouds_yaml, 1, 2),
    )
    .await
    .unwrap();

    // The control plane's machine and 2 workers Running, each with its node.
    let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
    let all = eventually("3 Running machines", || async {
        let list = machines.list(&ListParams::default()).await.ok()?.items;
        (running(&list).len() == 3 && list.len() == 3).then_some(list)
    })
    .await;
    let (control_plane, workers): (Vec<&Machine>, Vec<&Machine>) =
        all.iter().partition(|m| m.is_control_plane());
    assert_eq!((control_plane.len(), workers.len()), (1, 2));
    let servers = session.servers_tagged(&names.tag()).await.unwrap();
    assert_eq!(servers.len(), 3, "one server per machine: {servers:?}");

    // The control-plane machine belongs to the KubeadmControlPlane, which initialized the cluster
    // and says plainly why it cannot see etcd.
    let kcp = eventually("the control plane initialized", || async {
        let kcp = Api::<KubeadmControlPlane>::namespaced(client.clone(), &ns)
            .get(&format!("{CLUSTER}-control-plane"))
            .await
            .ok()?;
        let status = kcp.status.clone()?;
        let initialized = status.initialization.as_ref()?.control_plane_initialized?;
        let etcd = capi_core::condition::get(&status.conditions, "EtcdClusterHealthy")?;
        (initialized && etcd.status != "True").then_some(kcp)
    })
    .await;
    assert!(
        control_plane[0]
            .owner_references()
            .iter()
            .any(|o| o.kind == "KubeadmControlPlane" && o.controller == Some(true)),
        "the control plane's machine is the KubeadmControlPlane's"
    );
    assert_eq!(kcp.status.as_ref().and_then(|s| s.replicas), Some(1));

    // The control plane is behind the load balancer: its three addresses are the pool's members,
    // and the cluster's endpoint is the load balancer's.
    let lb = session
        .load_balancers_named(&names.load_balancer())
        .await
        .unwrap()
        .pop()
        .expect("the API server load balancer");
    let pool = session.pools(&lb.id).await.unwrap().pop().expect("a pool");
    let expected: BTreeSet<String> = control_plane.iter().flat_map(|m| internal_ips(m)).collect();
    let members = eventually("the control plane in the pool", || async {
        let members: BTreeSet<String> = session
            .members(&pool.id)
            .await
            .ok()?
            .into_iter()
            .map(|m| m.address)
            .collect();
        (members == expected).then_some(members)
    })
    .await;
    assert_eq!(members.len(), 1);
    let cluster = Api::<Cluster>::namespaced(client.clone(), &ns)
        .get(CLUSTER)
        .await
        .unwrap();
    assert_eq!(
        cluster.spec.control_plane_endpoint.map(|e| e.host),
        Some(lb.vip_address.clone()),
        "the API server endpoint is the load balancer's address"
    );

    // The control plane's bootstrap data carries the cloud provider's cloud.conf (its template
    // asks for it), a worker's does not.
    for machine in &all {
        let name = machine
            .spec
            .bootstrap
            .data_secret_name
            .clone()
            .expect("bootstrap data");
        let data = secrets.get(&name).await.unwrap().data.unwrap();
        let value = String::from_utf8(data["value"].0.clone()).unwrap();
        assert_eq!(
            value.contains(provider_openstack::cloud_conf::CLOUD_CONF_PATH),
            machine.is_control_plane(),
            "{}: cloud.conf only where the template asks for it",
            machine.name_any()
        );
    }

    // Nothing a user sees in the objects' status or in events holds a credential.
    let mut shown = String::new();
    for machine in &all {
        shown.push_str(&serde_json::to_string(&machine.status).unwrap());
    }
    for object in Api::<OpenStackMachine>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        shown.push_str(&serde_json::to_string(&object.status).unwrap());
    }
    let openstack_cluster = Api::<OpenStackCluster>::namespaced(client.clone(), &ns)
        .get(CLUSTER)
        .await
        .unwrap();
    shown.push_str(&serde_json::to_string(&openstack_cluster.status).unwrap());
    // What `kubectl get` shows: each server's state and the cluster's resource IDs.
    let resources = openstack_cluster.status.clone().unwrap_or_default();
    let network = resources.network.clone().expect("status.network");
    assert_eq!(
        resources
            .api_server_load_balancer
            .as_ref()
            .map(|l| l.id.as_str()),
        Some(lb.id.as_str())
    );
    assert!(resources.router.is_some() && resources.subnets.len() == 1);
    let listing = table::get_table(&client, GROUP, VERSION, "openstackclusters", Some(&ns))
        .await
        .unwrap();
    assert_eq!(
        listing.cell(0, "Network"),
        Some(network.id.as_str()),
        "{listing}"
    );
    assert_eq!(
        listing.cell(0, "Load Balancer"),
        Some(lb.id.as_str()),
        "{listing}"
    );
    let listing = table::get_table(&client, GROUP, VERSION, "openstackmachines", Some(&ns))
        .await
        .unwrap();
    assert_eq!(listing.rows.len(), 3, "{listing}");
    for row in 0..3 {
        assert_eq!(listing.cell(row, "State"), Some("ACTIVE"), "{listing}");
    }
    // The machine templates publish what Nova says of their flavor, for scale from zero.
    let flavor = session.find_flavor("m1.small").await.unwrap().unwrap();
    let templates: Api<OpenStackMachineTemplate> = Api::namespaced(client.clone(), &ns);
    for template in [
        format!("{CLUSTER}-control-plane"),
        format!("{CLUSTER}-md-0"),
    ] {
        let status = eventually("the template's capacity", || async {
            let status = templates.get(&template).await.ok()?.status?;
            (!status.capacity.is_empty()).then_some(status)
        })
        .await;
        let capacity = |name: &str| status.capacity.get(name).map(|q| q.0.clone());
        assert_eq!(capacity("cpu"), Some(flavor.vcpus.to_string()));
        assert_eq!(capacity("memory"), Some(format!("{}Mi", flavor.ram)));
        assert_eq!(
            capacity("ephemeral-storage"),
            (flavor.disk > 0).then(|| format!("{}Gi", flavor.disk))
        );
        assert_eq!(
            status.node_info.and_then(|i| i.operating_system).as_deref(),
            Some("linux")
        );
    }
    let listing = table::get_table(
        &client,
        GROUP,
        VERSION,
        "openstackmachinetemplates",
        Some(&ns),
    )
    .await
    .unwrap();
    assert_eq!(
        listing.cell(0, "CPU"),
        Some(flavor.vcpus.to_string().as_str()),
        "{listing}"
    );
    shown.push_str(&serde_json::to_string(&cluster.status).unwrap());
    for set in Api::<MachineSet>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        shown.push_str(&serde_json::to_string(&set.status).unwrap());
    }
    assert_no_secrets("the objects' status", &shown, &password, &clouds_yaml);

    // Scale the workers down by one, naming the machine to go: its server and ports go with it.
    let doomed = workers[0];
    let doomed_server = server_id(doomed);
    let doomed_ports: Vec<String> = session
        .ports(&[("device_id".into(), doomed_server.clone())])
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert!(!doomed_ports.is_empty());
    machines
        .patch(
            &doomed.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                capi_core::labels::DELETE_MACHINE: ""}}})),
        )
        .await
        .unwrap();
    Api::<MachineDeployment>::namespaced(client.clone(), &ns)
        .patch(
            &format!("{CLUSTER}-md-0"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    eventually(
        "the worker's machine, server and ports to be gone",
        || async {
            let machine_gone = machines.get_opt(&doomed.name_any()).await.ok()?.is_none();
            let server_gone = session.get_server(&doomed_server).await.ok()?.is_none();
            let mut ports_gone = true;
            for id in &doomed_ports {
                ports_gone &= session
                    .ports(&[("id".into(), id.clone())])
                    .await
                    .ok()?
                    .is_empty();
            }
            (machine_gone && server_gone && ports_gone).then_some(())
        },
    )
    .await;
    assert_eq!(
        session.servers_tagged(&names.tag()).await.unwrap().len(),
        2,
        "the other machines keep their servers"
    );

    // Delete the cluster: nothing of it is left in Nova, Neutron or Octavia.
    Api::<Cluster>::namespaced(client.clone(), &ns)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the cluster's objects to be gone", || async {
        let clusters = Api::<OpenStackCluster>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .ok()?;
        let machines = machines.list(&ListParams::default()).await.ok()?;
        let gone = clusters.items.is_empty()
            && machines.items.is_empty()
            && Api::<Cluster>::namespaced(client.clone(), &ns)
                .get_opt(CLUSTER)
                .await
                .ok()?
                .is_none();
        gone.then_some(())
    })
    .await;
    let left = leftovers(&session, &names).await;
    assert!(left.is_empty(), "left in the cloud: {left:?}");

    // Events (everything the manager recorded) and the manager's own logs hold no credential.
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(!events.items.is_empty(), "the manager records events");
    assert_no_secrets(
        "the events",
        &serde_json::to_string(&events.items).unwrap(),
        &password,
        &clouds_yaml,
    );
    manager.start_kill().unwrap();
    let _ = manager.wait().await;
    kubelet.abort();
    let logs = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        logs.contains(&names.load_balancer()) && logs.contains("openstack_sdk"),
        "the logs cover the reconciles and the SDK's own debug output"
    );
    assert_no_secrets("the manager's logs", &logs, &password, &clouds_yaml);
}
