//! Helpers shared by the `openstack-manager` end-to-end tests: the local OpenStack's credentials,
//! the manager process as deployed, the cluster `capictl generate` renders, and what the cloud
//! still holds of a cluster.
#![allow(dead_code)]

#[cfg(feature = "real-etcd")]
pub(crate) mod nova_hosts;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use capi_testing::envtest::ControlPlane;
use capi_testing::{deployed, manifest};
use kube::Client;
use kube::api::DynamicObject;
use provider_openstack::cloud::{Compute, LoadBalancing, Networking, Session};
use provider_openstack::credentials;
use provider_openstack::naming::ClusterNames;
use serde_json::json;

pub(crate) const CLOUDS_YAML_ENV: &str = "CAPI_RS_OPENSTACK_CLOUDS_YAML";
pub(crate) const SYSTEM_NAMESPACE: &str = "capi-openstack-system";
pub(crate) const MANAGER: &str = "capi-openstack-manager";
/// Long enough for the slowest step (Octavia's load balancer, then 5 servers) on 2 cores.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(300);

/// The local OpenStack's `clouds.yaml`.
pub(crate) fn clouds_yaml() -> String {
    let path = std::env::var(CLOUDS_YAML_ENV).unwrap_or_else(|_| {
        panic!(
            "{CLOUDS_YAML_ENV} is not set: start the local OpenStack with `cargo xtask openstack start` \
             and export the variable it prints (`cargo xtask test` does both)"
        )
    });
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// Cloud `local` of `clouds_yaml`, parsed.
pub(crate) fn local_cloud(clouds_yaml: &str) -> serde_json::Value {
    let parsed: serde_json::Value = serde_saphyr::from_str(clouds_yaml).unwrap();
    parsed["clouds"]["local"].clone()
}

/// The password of cloud `local`, which must never show up outside the credentials Secret and
/// the bootstrap data.
pub(crate) fn password(clouds_yaml: &str) -> String {
    local_cloud(clouds_yaml)["auth"]["password"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A session of cloud `local`, as the provider opens it.
pub(crate) async fn session(clouds_yaml: &str) -> Session {
    let credentials = credentials::from_secret(
        &serde_json::from_value(json!({
            "metadata": {"name": "local"},
            "stringData": {},
            "data": {credentials::CLOUDS_YAML_KEY: base64_of(clouds_yaml)},
        }))
        .unwrap(),
        "local",
        None,
    )
    .unwrap();
    Session::connect(&credentials).await.unwrap()
}

pub(crate) async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
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
pub(crate) async fn generated_rbac_token(client: &Client) -> String {
    let rbac = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/openstack/rbac.yaml"),
    )
    .unwrap();
    deployed::service_account_token(client, &rbac, SYSTEM_NAMESPACE, MANAGER)
        .await
        .unwrap()
}

/// The `openstack-manager` process, as deployed ([`deployed::spawn`]): its generated
/// ServiceAccount (`token`) on `api_server`, JSON logs at debug level for every crate into
/// `log`, and `args`.
pub(crate) fn spawn_manager(
    api_server: &ControlPlane,
    token: &str,
    dir: &Path,
    log: &Path,
    args: &[&str],
) -> tokio::process::Child {
    deployed::spawn(
        Path::new(env!("CARGO_BIN_EXE_openstack-manager")),
        api_server,
        token,
        dir,
        log,
        args,
    )
    .unwrap()
}

/// The cluster `name` as `capictl generate cluster --infrastructure openstack --clouds-yaml …
/// --cloud local` renders it, with `control_plane` + `workers` machines and the API server's
/// floating IP turned off: the noop Octavia driver's VIP port does not exist in Neutron, so
/// Neutron cannot associate one (the floating-IP path is covered by the mock tests in
/// `provider_openstack::cluster`).
pub(crate) fn cluster_manifests(
    name: &str,
    namespace: &str,
    clouds_yaml: &str,
    control_plane: u32,
    workers: u32,
) -> Vec<DynamicObject> {
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
        cluster_name: name.into(),
        namespace: Some(namespace.into()),
        kubernetes_version: Some("v1.33.0".into()),
        control_plane_machine_count: Some(control_plane),
        worker_machine_count: Some(workers),
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

/// What Nova, Neutron and Octavia still hold of the cluster.
pub(crate) async fn leftovers(session: &Session, names: &ClusterNames) -> Vec<String> {
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
pub(crate) fn assert_no_secrets(source: &str, text: &str, password: &str, clouds_yaml: &str) {
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

pub(crate) fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}
