//! `capictl describe cluster` shows a MachinePool among the workers, by its `Available`
//! condition, with its infrastructure pool and the Machines it controls below it — not among the
//! stand-alone machines.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_cli::describe::{TreeNode, tree};
use capi_core::api::MachinePool;
use capi_testing::{TestEnv, manifest};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const CLUSTER: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo}
spec: {paused: false}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachinePool
metadata: {name: workers}
spec: {flavor: small}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachinePool
metadata: {name: workers}
spec:
  clusterName: demo
  replicas: 2
  template:
    spec:
      clusterName: demo
      bootstrap: {dataSecretName: workers}
      infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachinePool, name: workers}
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
async fn a_pool_its_infrastructure_and_its_machines_are_shown() {
    let mut crds = capi_core::crd::core();
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    manifest::create_all(&env.client(), &ns, &manifest::parse(CLUSTER).unwrap())
        .await
        .unwrap();
    let pools: Api<MachinePool> = Api::namespaced(env.client(), &ns);
    pools
        .patch_status(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 1, "conditions": [{
                "type": "Available", "status": "False", "reason": "NotAvailable", "message": "",
                "lastTransitionTime": "2026-11-30T10:00:00Z",
            }]}})),
        )
        .await
        .unwrap();
    let pool = pools.get("workers").await.unwrap();
    let machine = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {
            "name": "workers-i-1",
            "labels": {"cluster.x-k8s.io/pool-name": "workers"},
            "ownerReferences": [{
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
                "name": "workers", "uid": pool.metadata.uid.unwrap(), "controller": true,
            }],
        },
        "spec": {
            "clusterName": "demo",
            "bootstrap": {"dataSecretName": ""},
            "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": "workers-i-1"},
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
    assert_eq!(labels(&root.children), ["Workers"]);
    let workers = &root.children[0];
    assert_eq!(
        labels(&workers.children),
        ["MachinePool/workers", "Machine/worker-0"]
    );
    let pool = &workers.children[0];
    assert_eq!(
        (
            pool.ready.as_str(),
            pool.reason.as_str(),
            pool.message.as_str()
        ),
        ("False", "NotAvailable", "1/2 ready")
    );
    assert_eq!(
        labels(&pool.children),
        [
            "MachinePoolInfrastructure - InMemoryMachinePool/workers",
            "Machine/workers-i-1"
        ]
    );
}
