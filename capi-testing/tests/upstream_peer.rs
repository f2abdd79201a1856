//! The upstream peer works here: upstream Cluster API's own managers, built from the Go module
//! proxy (`cargo xtask upstream install`), bring one of upstream's own in-memory clusters — from
//! CAPD's `in-memory` ClusterClass, one control-plane machine through KubeadmControlPlane and one
//! worker — to `Available` on the local control plane, and delete it again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use capi_cli::generate::{Inputs, render};
use capi_testing::envtest::ControlPlane;
use capi_testing::upstream::{UpstreamAssets, UpstreamPeer};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const NAMESPACE: &str = "upstream-peer";
const CLUSTER: &str = "peer";
const AVAILABLE_WITHIN: Duration = Duration::from_secs(300);
const DELETED_WITHIN: Duration = Duration::from_secs(180);

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_brings_its_own_in_memory_cluster_to_available() {
    let assets = UpstreamAssets::locate().unwrap_or_else(|e| panic!("{e}"));
    let control_plane = ControlPlane::start().await.unwrap();
    let mut peer = UpstreamPeer::start(&control_plane, &assets)
        .await
        .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));
    let client = control_plane.client().await.unwrap();
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&Default::default(), &namespace)
        .await
        .unwrap();

    // Upstream's own documents, rendered with clusterctl's variables and applied with strict field
    // validation: every field they set is one upstream's CRDs declare.
    let inputs = Inputs {
        cluster_name: CLUSTER.into(),
        namespace: Some(NAMESPACE.into()),
        kubernetes_version: Some("v1.35.0".into()),
        control_plane_machine_count: Some(1),
        worker_machine_count: Some(1),
        ..Inputs::default()
    };
    let mut objects = Vec::new();
    for template in [
        "clusterclass-in-memory.yaml",
        "cluster-template-in-memory.yaml",
    ] {
        let text = assets.template(template).unwrap();
        let yaml = render(&text, &inputs, |_| None).unwrap();
        objects.extend(capi_cli::apply::parse(&yaml).unwrap());
    }
    capi_cli::apply::apply(&client, &objects, Some(NAMESPACE), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));

    let clusters = api(&client, "cluster.x-k8s.io", "Cluster");
    let started = Instant::now();
    loop {
        peer.check()
            .unwrap_or_else(|e| panic!("an upstream manager exited: {e}"));
        let cluster = clusters.get(CLUSTER).await.unwrap();
        let available = condition(&cluster, "Available");
        if available.as_ref().is_some_and(|c| c["status"] == "True") {
            break;
        }
        assert!(
            started.elapsed() < AVAILABLE_WITHIN,
            "the cluster is not Available after {AVAILABLE_WITHIN:?}: {:#}\n{}",
            cluster.data["status"],
            peer.log_tails()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!("Available after {:.1?}", started.elapsed());

    // What Available stands for: the control plane through KubeadmControlPlane and one worker.
    let control_planes = api(
        &client,
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
    );
    let kcp = control_planes.list(&ListParams::default()).await.unwrap();
    assert_eq!(kcp.items.len(), 1);
    assert_eq!(kcp.items[0].data["status"]["readyReplicas"], 1);
    let machines = api(&client, "cluster.x-k8s.io", "Machine")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(
        machines.items.len(),
        2,
        "one control-plane machine, one worker"
    );
    for machine in &machines.items {
        assert_eq!(machine.data["status"]["phase"], "Running");
        assert_eq!(
            machine.data["spec"]["infrastructureRef"]["kind"],
            "DevMachine"
        );
    }

    clusters
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    let started = Instant::now();
    while clusters.get_opt(CLUSTER).await.unwrap().is_some() {
        assert!(
            started.elapsed() < DELETED_WITHIN,
            "the cluster is still there after {DELETED_WITHIN:?}\n{}",
            peer.log_tails()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let left = api(&client, "cluster.x-k8s.io", "Machine")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(left.items.is_empty(), "machines deleted with the cluster");
}
