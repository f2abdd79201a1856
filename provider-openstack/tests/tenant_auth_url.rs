//! A tenant points its credentials at a server of its choosing: the namespace's owner — a
//! ServiceAccount with only `config/tenant-role.yaml` — writes a `clouds.yaml` whose `auth_url`
//! is a loopback server that answers every request with a response that never ends. A manager
//! started with `--allowed-auth-url-hosts` never contacts it (the server counts no connection)
//! and the OpenStackCluster's condition names the refused host and the flag, never the password.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use capi_actuator::cluster::{self, InfraClusterReconciler};
use capi_runtime::ReconcilerOptions;
use capi_runtime::retry::RetryPolicy;
use capi_testing::{TestEnv, manifest};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use provider_openstack::api::OpenStackCluster;
use provider_openstack::auth_url::AuthUrlPolicy;
use provider_openstack::cluster::OpenStackClusterActuator;
use provider_openstack::connector::SecretConnector;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PASSWORD: &str = "never-shown-8d1e4b";

const TENANT_CLUSTER: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo}
spec:
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: OpenStackCluster, name: demo}
"#;

/// The OpenStackCluster, owned by the Cluster with `uid` (as the core controllers would make it).
fn tenant_infra_cluster(uid: &str) -> String {
    format!(
        r#"
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: OpenStackCluster
metadata:
  name: demo
  labels: {{cluster.x-k8s.io/cluster-name: demo}}
  ownerReferences:
  - {{apiVersion: cluster.x-k8s.io/v1beta2, kind: Cluster, name: demo, uid: "{uid}", controller: true}}
spec:
  identityRef: {{name: demo-cloud-config, cloudName: openstack}}
  managedSubnets: [{{cidr: 10.6.0.0/24}}]
"#
    )
}

/// A server answering every connection with headers and a body that never ends, a kilobyte at a
/// time; counts the connections it accepted.
async fn endless_server() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"x\":\"",
                    )
                    .await;
                let chunk = [b'a'; 1024];
                while stream.write_all(&chunk).await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
        }
    });
    (format!("http://{address}/v3"), accepted)
}

#[tokio::test]
async fn an_auth_url_the_operator_does_not_allow_is_never_contacted() {
    let mut crds = capi_core::crd::core();
    crds.extend(provider_openstack::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let role = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/tenant-role.yaml"),
    )
    .unwrap();
    let tenant = capi_testing::deployed::tenant_client(&env, &ns, &role, "cluster-api-tenant")
        .await
        .unwrap();
    let (auth_url, accepted) = endless_server().await;

    // Everything the cluster needs, written by the tenant with the tenant's own rights.
    let created = manifest::create_all(&tenant, &ns, &manifest::parse(TENANT_CLUSTER).unwrap())
        .await
        .unwrap();
    let uid = created[0].metadata.uid.clone().unwrap();
    manifest::create_all(
        &tenant,
        &ns,
        &manifest::parse(&tenant_infra_cluster(&uid)).unwrap(),
    )
    .await
    .unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "demo-cloud-config"},
        "stringData": {"clouds.yaml": format!(
            "clouds:\n  openstack:\n    auth:\n      auth_url: {auth_url}\n      \
             username: admin\n      password: {PASSWORD}\n      project_name: admin\n"
        )},
    }))
    .unwrap();
    Api::<Secret>::namespaced(tenant.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    // The manager, as an operator of a shared management cluster runs it.
    let policy = AuthUrlPolicy::only(&["keystone.example.com", "*.cloud.example.org"]).unwrap();
    let connector = SecretConnector::new(env.client()).with_auth_url_policy(policy);
    let actuator = Arc::new(OpenStackClusterActuator::new(Arc::new(connector)));
    let reconciler = InfraClusterReconciler::<OpenStackCluster>::new(env.client(), actuator)
        .options(
            ReconcilerOptions::default()
                .namespace(&ns)
                .retry_policy(RetryPolicy {
                    backoff_base: Duration::from_millis(50),
                    backoff_cap: Duration::from_millis(500),
                    ..RetryPolicy::default()
                }),
        );
    let running = tokio::spawn(cluster::run(reconciler, std::future::pending()));

    let clusters: Api<OpenStackCluster> = Api::namespaced(tenant.clone(), &ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        let status = serde_json::to_string(&clusters.get("demo").await.unwrap().status).unwrap();
        if status.contains("AuthURLNotAllowed") {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no AuthURLNotAllowed condition; last status: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        status.contains("127.0.0.1") && status.contains("--allowed-auth-url-hosts"),
        "{status}"
    );
    assert!(!status.contains(PASSWORD), "{status}");
    // Retried a while (the Secret may be fixed): still never contacted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "the manager connected to the tenant's server"
    );
    running.abort();
}
