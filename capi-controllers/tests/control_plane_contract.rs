//! The Cluster controller reads a control plane provider's object through the v1beta2
//! control-plane contract, on a real API server: `ControlPlaneAvailable` mirrors the control
//! plane's `Available` condition (or says the object does not exist, or was deleted under a live
//! cluster), `status.initialization.controlPlaneInitialized` follows the object and never goes back,
//! and `status.controlPlane` carries the object's replica counters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use capi_control_plane::api::KubeadmControlPlane;
use capi_controllers::{CoreControllers, CoreSettings};
use capi_core::api::Cluster;
use capi_core::condition;
use capi_runtime::ReconcilerOptions;
use capi_runtime::manager::{Manager, ManagerConfig};
use capi_runtime::retry::RetryPolicy;
use capi_testing::TestEnv;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn control_plane_available(cluster: &Cluster) -> Option<(String, String, String)> {
    let status = cluster.status.as_ref()?;
    condition::get(&status.conditions, "ControlPlaneAvailable")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn the_cluster_reads_its_control_plane_through_the_contract() {
    let mut crds = capi_core::crd::core();
    crds.extend(capi_control_plane::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let config = ManagerConfig {
        http_addr: ([127, 0, 0, 1], 0).into(),
        reconciler: ReconcilerOptions::default()
            .namespace(&ns)
            .retry_policy(RetryPolicy {
                poll: Duration::from_millis(200),
                backoff_base: Duration::from_millis(50),
                ..RetryPolicy::default()
            }),
        ..ManagerConfig::default()
    };
    let mut manager = Manager::with_client(env.client(), config).await.unwrap();
    manager.add(CoreControllers::new(CoreSettings {
        poll: Duration::from_millis(200),
        ..CoreSettings::default()
    }));
    let running = tokio::spawn(manager.run_until(std::future::pending()));

    let clusters: Api<Cluster> = Api::namespaced(env.client(), &ns);
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "demo"},
        "spec": {"controlPlaneRef": {
            "apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "demo-cp",
        }},
    }))
    .unwrap();
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let read = || async { clusters.get("demo").await.unwrap() };

    eventually("a missing control plane is reported", || async {
        control_plane_available(&read().await)
            == Some((
                "False".into(),
                "DoesNotExist".into(),
                "KubeadmControlPlane does not exist".into(),
            ))
    })
    .await;

    // The control plane appears and reports itself initialized and available.
    let kcps: Api<KubeadmControlPlane> = Api::namespaced(env.client(), &ns);
    let kcp: KubeadmControlPlane = serde_json::from_value(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": {"name": "demo-cp"},
        "spec": {
            "replicas": 3, "version": "v1.34.1",
            "machineTemplate": {"spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachineTemplate", "name": "cp",
            }}},
        },
    }))
    .unwrap();
    kcps.create(&PostParams::default(), &kcp).await.unwrap();
    let report = |available: &str, reason: &str, message: &str| {
        json!({"status": {
            "initialization": {"controlPlaneInitialized": true},
            "replicas": 3, "readyReplicas": 2, "availableReplicas": 2, "upToDateReplicas": 3,
            "conditions": [{
                "type": "Available", "status": available, "reason": reason, "message": message,
                "lastTransitionTime": "2026-11-23T10:00:00Z",
            }],
        }})
    };
    kcps.patch_status(
        "demo-cp",
        &PatchParams::default(),
        &Patch::Merge(report("True", "Available", "")),
    )
    .await
    .unwrap();
    eventually(
        "the control plane's availability and counters reach the cluster",
        || async {
            let cluster = read().await;
            let status = cluster.status.clone().unwrap_or_default();
            let counters = status.control_plane.unwrap_or_default();
            control_plane_available(&cluster)
                == Some(("True".into(), "Available".into(), String::new()))
                && status
                    .initialization
                    .and_then(|i| i.control_plane_initialized)
                    == Some(true)
                && (
                    counters.desired_replicas,
                    counters.replicas,
                    counters.ready_replicas,
                    counters.available_replicas,
                    counters.up_to_date_replicas,
                ) == (Some(3), Some(3), Some(2), Some(2), Some(3))
        },
    )
    .await;
    let owned = kcps.get("demo-cp").await.unwrap();
    assert!(
        owned
            .metadata
            .owner_references
            .unwrap_or_default()
            .iter()
            .any(|o| o.kind == "Cluster" && o.name == "demo"),
        "the cluster owns its control plane"
    );

    // What the control plane says is mirrored, reason and message included.
    kcps.patch_status(
        "demo-cp",
        &PatchParams::default(),
        &Patch::Merge(report(
            "False",
            "EtcdQuorumLost",
            "2 of 3 etcd members are down",
        )),
    )
    .await
    .unwrap();
    eventually("an unavailable control plane is mirrored", || async {
        control_plane_available(&read().await)
            == Some((
                "False".into(),
                "EtcdQuorumLost".into(),
                "2 of 3 etcd members are down".into(),
            ))
    })
    .await;

    // Gone under a live cluster: deleted, and still initialized.
    kcps.delete("demo-cp", &Default::default()).await.unwrap();
    eventually("a deleted control plane is reported as deleted", || async {
        let cluster = read().await;
        control_plane_available(&cluster)
            == Some((
                "False".into(),
                "Deleted".into(),
                "KubeadmControlPlane has been deleted while the cluster still exists".into(),
            ))
            && cluster
                .status
                .and_then(|s| s.initialization)
                .and_then(|i| i.control_plane_initialized)
                == Some(true)
    })
    .await;
    running.abort();
}
