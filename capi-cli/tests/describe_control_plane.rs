//! `capictl describe cluster` shows a control plane provider's object (a KubeadmControlPlane) in
//! the tree, by its `Available` condition, with the machines it controls below it — not among the
//! workers or a machine-based control plane group.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_cli::describe::{TreeNode, tree};
use capi_control_plane::api::KubeadmControlPlane;
use capi_testing::{TestEnv, manifest};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const CLUSTER: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo}
spec:
  controlPlaneRef: {apiGroup: controlplane.cluster.x-k8s.io, kind: KubeadmControlPlane, name: demo-cp}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata: {name: demo-cp}
spec:
  replicas: 1
  version: v1.34.1
  machineTemplate:
    spec:
      infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachineTemplate, name: cp}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: worker-0
spec:
  clusterName: demo
  bootstrap: {dataSecretName: worker}
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachine, name: worker-0}
"#;

fn labels(nodes: &[TreeNode]) -> Vec<&str> {
    nodes.iter().map(|n| n.label.as_str()).collect()
}

#[tokio::test]
async fn a_control_plane_provider_and_its_machines_are_shown() {
    let mut crds = capi_core::crd::core();
    crds.extend(capi_control_plane::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    manifest::create_all(&env.client(), &ns, &manifest::parse(CLUSTER).unwrap())
        .await
        .unwrap();
    let kcps: Api<KubeadmControlPlane> = Api::namespaced(env.client(), &ns);
    kcps.patch_status(
        "demo-cp",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [{
            "type": "Available", "status": "True", "reason": "Available", "message": "",
            "lastTransitionTime": "2026-11-23T10:00:00Z",
        }]}})),
    )
    .await
    .unwrap();
    let kcp = kcps.get("demo-cp").await.unwrap();
    let machine = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {
            "name": "demo-cp-x7k2q",
            "labels": {"cluster.x-k8s.io/control-plane": ""},
            "ownerReferences": [{
                "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
                "name": "demo-cp", "uid": kcp.metadata.uid.unwrap(), "controller": true,
            }],
        },
        "spec": {
            "clusterName": "demo",
            "bootstrap": {"dataSecretName": "cp"},
            "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": "demo-cp-x7k2q"},
        },
    });
    manifest::create_all(
        &env.client(),
        &ns,
        &manifest::parse(&machine.to_string()).unwrap(),
    )
    .await
    .unwrap();

    let root = tree(&env.client(), &ns, "demo").await.unwrap();
    assert_eq!(
        labels(&root.children),
        ["ControlPlane - KubeadmControlPlane/demo-cp", "Workers"]
    );
    let control_plane = &root.children[0];
    assert_eq!(
        (control_plane.ready.as_str(), control_plane.reason.as_str()),
        ("True", "Available")
    );
    assert_eq!(labels(&control_plane.children), ["Machine/demo-cp-x7k2q"]);
    assert_eq!(labels(&root.children[1].children), ["Machine/worker-0"]);

    // A control plane that does not exist is shown as such.
    kcps.delete("demo-cp", &Default::default()).await.unwrap();
    let root = tree(&env.client(), &ns, "demo").await.unwrap();
    let missing = &root.children[0];
    assert_eq!(missing.label, "ControlPlane - KubeadmControlPlane/demo-cp");
    assert_eq!(
        (missing.ready.as_str(), missing.reason.as_str()),
        ("False", "NotFound")
    );
}
