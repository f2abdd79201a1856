//! Each simulated cluster's own API endpoint over one shared workload API server: a cluster's
//! lists and watches of nodes and pods show that cluster's only, by-name reads and writes reach
//! the shared server, and the simulated kubelets label what they register with the cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use capi_testing::envtest::ControlPlane;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use provider_inmemory::cloud::{CloudConfig, Compute, InstanceRequest, SimulatedCloud};
use provider_inmemory::endpoints::{WorkloadEndpoints, kubeconfig_yaml};
use provider_inmemory::nodes::NodeRegistrar;

async fn client_of(endpoints: &WorkloadEndpoints, namespace: &str, name: &str) -> Client {
    let yaml = kubeconfig_yaml(&endpoints.url(), namespace, name);
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn request(tag: &str, cluster: &str, control_plane: bool) -> InstanceRequest {
    InstanceRequest {
        tag: tag.into(),
        flavor: "small".into(),
        zone: None,
        user_data_len: 0,
        user_data: None,
        etcd_cluster: control_plane.then(|| cluster.to_string()),
        client_token: None,
        cluster: Some(cluster.into()),
    }
}

fn names<K: kube::Resource>(objects: impl IntoIterator<Item = K>) -> Vec<String> {
    let mut names: Vec<String> = objects
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn each_cluster_sees_its_own_nodes_and_pods_through_its_endpoint() {
    let workload = ControlPlane::start().await.unwrap();
    let shared = workload.client().await.unwrap();
    let cloud = Arc::new(SimulatedCloud::new(CloudConfig {
        boot_time: Duration::ZERO,
        ..CloudConfig::default()
    }));
    let a0 = cloud
        .create_instance(request("a0", "ns.a", true))
        .await
        .unwrap();
    let a1 = cloud
        .create_instance(request("a1", "ns.a", false))
        .await
        .unwrap();
    let b0 = cloud
        .create_instance(request("b0", "ns.b", true))
        .await
        .unwrap();
    NodeRegistrar::new(shared.clone(), cloud.clone())
        .sync()
        .await
        .unwrap();
    assert_eq!(
        Api::<Node>::all(shared.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        3
    );

    let endpoints = WorkloadEndpoints::start(shared.clone(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let a = client_of(&endpoints, "ns", "a").await;
    let b = client_of(&endpoints, "ns", "b").await;

    // Lists: each cluster's nodes only.
    let a_nodes = Api::<Node>::all(a.clone());
    assert_eq!(
        names(a_nodes.list(&ListParams::default()).await.unwrap()),
        names_of(&[&a0.id, &a1.id])
    );
    assert_eq!(
        names(
            Api::<Node>::all(b.clone())
                .list(&ListParams::default())
                .await
                .unwrap()
        ),
        names_of(&[&b0.id])
    );
    // With a selector of the caller's own, both apply.
    let workers = a_nodes
        .list(&ListParams::default().labels("!node-role.kubernetes.io/control-plane"))
        .await
        .unwrap();
    assert_eq!(names(workers), names_of(&[&a1.id]));
    // Static pods: the control plane's of that cluster only.
    let pods = Api::<Pod>::namespaced(a.clone(), "kube-system")
        .list(&ListParams::default().labels("tier=control-plane"))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 4, "{:?}", names(pods.items.clone()));
    assert!(
        pods.items
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(a0.id.as_str()))
    );

    // A watch (what a node cache runs): the first list holds the cluster's nodes only, and a
    // change of another cluster's node never arrives.
    let (store, writer) = kube::runtime::reflector::store::<Node>();
    let watch = watcher(a_nodes.clone(), watcher::Config::default())
        .reflect(writer)
        .applied_objects();
    futures::pin_mut!(watch);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let node = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push(node.metadata.name.unwrap());
    }
    seen.sort();
    assert_eq!(seen, names_of(&[&a0.id, &a1.id]));
    let touch = serde_json::json!({"metadata": {"annotations": {"touched": "yes"}}});
    // By name, any node is reachable (names are unique instance IDs).
    Api::<Node>::all(b.clone())
        .patch(&a1.id, &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    Api::<Node>::all(a.clone())
        .patch(&b0.id, &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(next.metadata.name.as_deref(), Some(a1.id.as_str()));
    assert_eq!(store.len(), 2);
    let quiet = tokio::time::timeout(Duration::from_millis(500), watch.next()).await;
    assert!(
        quiet.is_err(),
        "another cluster's node reached the watch: {quiet:?}"
    );
}

fn names_of(ids: &[&String]) -> Vec<String> {
    let mut names: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    names.sort();
    names
}

#[tokio::test]
async fn other_paths_and_upgrades_get_clear_answers() {
    let workload = ControlPlane::start().await.unwrap();
    let shared = workload.client().await.unwrap();
    let endpoints = WorkloadEndpoints::start(shared, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let refused = WorkloadEndpoints::start(
        workload.client().await.unwrap(),
        "0.0.0.0:0".parse().unwrap(),
    )
    .await
    .unwrap_err();
    assert!(
        refused.to_string().contains("not a loopback address"),
        "{refused}"
    );
    let http = reqwest_like(&endpoints.url(), "/api/v1/nodes", None).await;
    assert!(http.starts_with("HTTP/1.1 404"), "{http}");
    let upgrade = reqwest_like(
        &endpoints.url(),
        "/clusters/ns/a/api/v1/namespaces/kube-system/pods/p/portforward",
        Some("SPDY/3.1"),
    )
    .await;
    assert!(upgrade.starts_with("HTTP/1.1 501"), "{upgrade}");
    let version = reqwest_like(&endpoints.url(), "/clusters/ns/a/version", None).await;
    assert!(
        version.starts_with("HTTP/1.1 200") && version.contains("gitVersion"),
        "{version}"
    );
}

/// A raw HTTP/1.1 GET (with an `Upgrade` header when given), answered as text.
async fn reqwest_like(base: &str, path: &str, upgrade: Option<&str>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let upgrade = upgrade
        .map(|u| format!("Upgrade: {u}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{upgrade}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}
