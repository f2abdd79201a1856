//! Helpers shared by the in-memory provider's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{Cluster, Machine};
use capi_core::labels;
use capi_runtime::retry::RetryPolicy;
use capi_testing::TestEnv;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use provider_inmemory::api::{InMemoryCluster, InMemoryMachine, InMemoryMachineSpec};
use provider_inmemory::cloud::{CloudConfig, SimulatedCloud};
use serde_json::json;

pub(crate) const TIMEOUT: Duration = Duration::from_secs(90);

pub(crate) struct Fixture {
    pub(crate) env: TestEnv,
    pub(crate) ns: String,
    pub(crate) cloud: Arc<SimulatedCloud>,
}

pub(crate) async fn fixture(config: CloudConfig) -> Fixture {
    let mut crds = capi_core::crd::core();
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let clusters: Api<Cluster> = Api::namespaced(env.client(), &ns);
    // Upstream's schema refuses an empty Cluster spec: this one names its pod network.
    let mut cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "demo"},
        "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}}},
    }))
    .unwrap();
    cluster.metadata.namespace = Some(ns.clone());
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let ready = json!({"status": {"initialization": {"infrastructureProvisioned": true}}});
    clusters
        .patch_status("demo", &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .unwrap();
    Fixture {
        env,
        ns,
        cloud: Arc::new(SimulatedCloud::new(config)),
    }
}

/// [`fixture`] with the `InMemoryCluster` of Cluster `demo` (named and labelled like it): what a
/// machine reconcile hands its actuator besides the machine.
pub(crate) async fn machine_fixture(config: CloudConfig) -> Fixture {
    let f = fixture(config).await;
    let mut infra_cluster = InMemoryCluster::new("demo", Default::default());
    infra_cluster.metadata.labels = Some(BTreeMap::from([(
        labels::CLUSTER_NAME.to_string(),
        "demo".to_string(),
    )]));
    Api::<InMemoryCluster>::namespaced(f.env.client(), &f.ns)
        .create(&PostParams::default(), &infra_cluster)
        .await
        .unwrap();
    f
}

pub(crate) fn policy() -> RetryPolicy {
    RetryPolicy {
        backoff_base: Duration::from_millis(20),
        backoff_cap: Duration::from_millis(500),
        jitter: 0.1,
        poll: Duration::from_millis(100),
        resync: Duration::from_secs(60),
        conflict_base: Duration::from_millis(10),
        conflict_cap: Duration::from_millis(200),
        invalid_retry: Duration::from_secs(60),
    }
}

pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a Machine with bootstrap data and its InMemoryMachine, owned as the Machine controller
/// would own it.
pub(crate) async fn add_machine(client: &Client, ns: &str, name: &str) {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(format!("{name}-bootstrap")),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "value".to_string(),
            ByteString(b"#cloud-config\n".to_vec()),
        )])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": name, "labels": {labels::CLUSTER_NAME: "demo"}},
        "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                 "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": name}}
    }))
    .unwrap();
    let machine = Api::<Machine>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    let mut infra = InMemoryMachine::new(
        name,
        InMemoryMachineSpec {
            provider_id: None,
            flavor: "small".into(),
        },
    );
    infra.metadata.labels = Some(BTreeMap::from([(
        labels::CLUSTER_NAME.to_string(),
        "demo".to_string(),
    )]));
    infra.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Machine".into(),
        name: name.into(),
        uid: machine.uid().unwrap(),
        ..OwnerReference::default()
    }]);
    Api::<InMemoryMachine>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &infra)
        .await
        .unwrap();
}

/// A manager's settings for tests: reconciling only `ns`, fast retries, a free local port and a
/// client rate limit that never sets the pace.
pub(crate) fn manager_config(ns: &str) -> capi_runtime::manager::ManagerConfig {
    capi_runtime::manager::ManagerConfig {
        reconciler: capi_runtime::ReconcilerOptions::default()
            .namespace(ns)
            .retry_policy(policy()),
        http_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        qps: 500.0,
        burst: 500,
        ..capi_runtime::manager::ManagerConfig::default()
    }
}

/// The `<cluster>-kubeconfig` Secret in `ns`, where the bootstrap provider would put it, pointing
/// at `workload` (the API server the simulated kubelets register nodes in).
pub(crate) async fn workload_kubeconfig(
    client: &Client,
    ns: &str,
    cluster: &str,
    workload: &capi_testing::envtest::ControlPlane,
) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{cluster}-kubeconfig"), "labels": {labels::CLUSTER_NAME: cluster}},
        "stringData": {"value": workload.kubeconfig_yaml()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}
