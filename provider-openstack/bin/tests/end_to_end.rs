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

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use capi_control_plane::api::KubeadmControlPlane;
use capi_core::api::{
    Cluster, Machine, MachineAddressType, MachineDeployment, MachinePhase, MachineSet,
};
use capi_testing::envtest::ControlPlane;
use capi_testing::{TestEnv, manifest};
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Secret, ServiceAccount};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use provider_inmemory::nodes::{NodeRegistration, register};
use provider_openstack::api::{OpenStackCluster, OpenStackMachine};
use provider_openstack::cloud::{Compute, LoadBalancing, Networking, Session};
use provider_openstack::credentials;
use provider_openstack::naming::ClusterNames;
use serde_json::json;

const CLOUDS_YAML_ENV: &str = "CAPI_RS_OPENSTACK_CLOUDS_YAML";
const CLUSTER: &str = "demo";
const SYSTEM_NAMESPACE: &str = "capi-openstack-system";
const MANAGER: &str = "capi-openstack-manager";
/// Long enough for the slowest step (Octavia's load balancer, then 5 servers) on 2 cores.
const TIMEOUT: Duration = Duration::from_secs(300);

fn clouds_yaml() -> String {
    let path = std::env::var(CLOUDS_YAML_ENV).unwrap_or_else(|_| {
        panic!(
            "{CLOUDS_YAML_ENV} is not set: start the local OpenStack with `cargo xtask openstack start` \
             and export the variable it prints (`cargo xtask test` does both)"
        )
    });
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The password of cloud `local`, which must never show up outside the credentials Secret and
/// the bootstrap data.
fn password(clouds_yaml: &str) -> String {
    let parsed: serde_json::Value = serde_saphyr::from_str(clouds_yaml).unwrap();
    parsed["clouds"]["local"]["auth"]["password"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(done) = check().await {
            return done;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A ServiceAccount token for the generated RBAC (`config/openstack/rbac.yaml`).
async fn generated_rbac_token(client: &Client) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/openstack/rbac.yaml"),
    )
    .unwrap();
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": SYSTEM_NAMESPACE}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&Default::default(), &namespace)
        .await
        .unwrap();
    manifest::create_all(client, SYSTEM_NAMESPACE, &manifest::parse(&text).unwrap())
        .await
        .unwrap();
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), SYSTEM_NAMESPACE)
        .create_token_request(MANAGER, &Default::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
}

/// The cluster as `capictl generate cluster --infrastructure openstack --clouds-yaml … --cloud
/// local` renders it, with the API server's floating IP turned off (see the crate docs).
fn cluster_manifests(namespace: &str, clouds_yaml: &str) -> Vec<kube::api::DynamicObject> {
    use capi_cli::generate;
    let mut extra = generate::openstack_credentials(clouds_yaml, "local", |_| Ok(Vec::new()))
        .unwrap()
        .into_iter()
        .collect::<BTreeMap<_, _>>();
    for (name, value) in [
        ("OPENSTACK_CONTROL_PLANE_MACHINE_FLAVOR", "m1.small"),
        ("OPENSTACK_NODE_MACHINE_FLAVOR", "m1.small"),
        ("OPENSTACK_IMAGE_NAME", "capi-rs-test-image"),
        ("OPENSTACK_SSH_KEY_NAME", "capi-rs-test-key"),
        ("OPENSTACK_NODE_CIDR", "10.64.0.0/24"),
    ] {
        extra.insert(name.to_string(), value.to_string());
    }
    let inputs = generate::Inputs {
        cluster_name: CLUSTER.into(),
        namespace: Some(namespace.into()),
        kubernetes_version: Some("v1.33.0".into()),
        control_plane_machine_count: Some(1),
        worker_machine_count: Some(2),
        extra,
    };
    let text = generate::render(
        generate::built_in("openstack", None).unwrap(),
        &inputs,
        |_| None,
    )
    .unwrap();
    let mut objects = manifest::parse(&text).unwrap();
    for object in &mut objects {
        if object.types.as_ref().map(|t| t.kind.as_str()) == Some("OpenStackCluster") {
            object.data["spec"]["apiServer"]["enableFloatingIP"] = json!(false);
        }
    }
    objects
}

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

/// What Nova, Neutron and Octavia still hold of the cluster.
async fn leftovers(session: &Session, names: &ClusterNames) -> Vec<String> {
    let tag = vec![("tags".to_string(), names.tag())];
    let mut left = Vec::new();
    for s in session.servers_tagged(&names.tag()).await.unwrap() {
        left.push(format!("server {} {}", s.name, s.status));
    }
    for p in session.ports(&tag).await.unwrap() {
        left.push(format!("port {}", p.name));
    }
    for n in session.networks(&tag).await.unwrap() {
        left.push(format!("network {}", n.name));
    }
    for s in session.subnets(&tag).await.unwrap() {
        left.push(format!("subnet {}", s.name));
    }
    for r in session.routers(&tag).await.unwrap() {
        left.push(format!("router {}", r.name));
    }
    for g in session.security_groups(&tag).await.unwrap() {
        left.push(format!("security group {}", g.name));
    }
    for lb in session
        .load_balancers_named(&names.load_balancer())
        .await
        .unwrap()
    {
        left.push(format!(
            "load balancer {} {}",
            lb.name, lb.provisioning_status
        ));
    }
    left
}

/// Fails if `text` (what `source` shows a user) carries a credential or a token.
fn assert_no_secrets(source: &str, text: &str, password: &str, clouds_yaml: &str) {
    assert!(
        !text.contains(password),
        "{source} contains the cloud password"
    );
    // Keystone's Fernet tokens all start like this.
    assert!(
        !text.contains("gAAAAA"),
        "{source} contains a Keystone token"
    );
    assert!(
        !text.to_ascii_lowercase().contains("x-auth-token: "),
        "{source} contains an auth header"
    );
    for line in clouds_yaml.lines().filter(|l| l.trim().len() > 12) {
        assert!(
            !text.contains(line),
            "{source} contains clouds.yaml content: {line:?}"
        );
    }
}

#[tokio::test]
async fn the_manager_builds_and_tears_down_a_cluster_with_a_kubeadm_control_plane_and_two_workers()
{
    let clouds_yaml = clouds_yaml();
    let password = password(&clouds_yaml);
    let credentials = credentials::from_secret(
        &serde_json::from_value(json!({
            "metadata": {"name": "local"},
            "stringData": {},
            "data": {credentials::CLOUDS_YAML_KEY: base64_of(&clouds_yaml)},
        }))
        .unwrap(),
        "local",
        None,
    )
    .unwrap();
    let session = Session::connect(&credentials).await.unwrap();

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
    let kubeconfig = dir.path().join("kubeconfig");
    let api_server = env.control_plane();
    std::fs::write(
        &kubeconfig,
        serde_json::to_string(&json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "manager",
            "clusters": [{"name": "local", "cluster": {
                "server": api_server.url(),
                "certificate-authority": api_server.dir().join("ca.crt")}}],
            "users": [{"name": "manager", "user": {"token": token}}],
            "contexts": [{"name": "manager", "context": {"cluster": "local", "user": "manager"}}],
        }))
        .unwrap(),
    )
    .unwrap();
    let log_path = dir.path().join("manager.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut manager = tokio::process::Command::new(env!("CARGO_BIN_EXE_openstack-manager"))
        .args([
            "--with-bootstrap",
            "--with-core",
            "--with-control-plane",
            "--http-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--leader-elect",
            &format!("{SYSTEM_NAMESPACE}/{MANAGER}"),
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .unwrap();

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
    manifest::create_all(&client, &ns, &cluster_manifests(&ns, &clouds_yaml))
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

    // Every machine's bootstrap data carries the cloud provider's cloud.conf.
    for machine in &all {
        let name = machine
            .spec
            .bootstrap
            .data_secret_name
            .clone()
            .expect("bootstrap data");
        let data = secrets.get(&name).await.unwrap().data.unwrap();
        let value = String::from_utf8(data["value"].0.clone()).unwrap();
        assert!(
            value.contains(provider_openstack::cloud_conf::CLOUD_CONF_PATH),
            "{} has no cloud.conf",
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

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}
