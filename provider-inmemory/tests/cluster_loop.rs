//! The generic cluster loop driving the in-memory provider against a real kube-apiserver: the
//! endpoint and failure domains are recorded, and deletion waits for the cluster's machines before
//! removing the load balancer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use capi_actuator::cluster::{self, InfraClusterReconciler};
use capi_core::api::{Cluster, Machine};
use capi_core::{condition, labels};
use capi_runtime::ReconcilerOptions;
use common::{eventually, fixture, policy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::{InMemoryCluster, InMemoryClusterSpec};
use provider_inmemory::cloud::CloudConfig;
use serde_json::json;

#[tokio::test]
async fn cluster_infrastructure_is_recorded_and_deleted_after_the_machines() {
    let f = fixture(CloudConfig::default()).await;
    let client = f.env.client();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &f.ns);
    let cluster = clusters.get("demo").await.unwrap();
    let infra: Api<InMemoryCluster> = Api::namespaced(client.clone(), &f.ns);
    let mut object = InMemoryCluster::new("demo", InMemoryClusterSpec::default());
    object.metadata.labels = Some(BTreeMap::from([(
        labels::CLUSTER_NAME.to_string(),
        "demo".to_string(),
    )]));
    object.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        name: "demo".into(),
        uid: cluster.uid().unwrap(),
        ..OwnerReference::default()
    }]);
    infra.create(&PostParams::default(), &object).await.unwrap();

    let actuator =
        InMemoryActuator::new(f.cloud.clone(), f.cloud.clone(), Duration::from_millis(50));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let reconciler = InfraClusterReconciler::new(client.clone(), Arc::new(actuator)).options(
        ReconcilerOptions::default()
            .namespace(&f.ns)
            .retry_policy(policy()),
    );
    let task = tokio::spawn(cluster::run(reconciler, async move {
        let _ = stopped.await;
    }));

    eventually("the infrastructure to be provisioned", || async {
        infra
            .get("demo")
            .await
            .is_ok_and(|c| c.status.as_ref().is_some_and(|s| s.contract.provisioned()))
    })
    .await;
    let provisioned = infra.get("demo").await.unwrap();
    let endpoint = provisioned.spec.control_plane_endpoint.clone().unwrap();
    assert!(endpoint.is_valid(), "{endpoint:?}");
    let status = provisioned.status.unwrap();
    let balancers = f.cloud.load_balancers();
    assert_eq!(
        status.load_balancer_id.as_deref(),
        balancers.first().map(|lb| lb.id.as_str()),
        "the provider's own status names the load balancer"
    );
    let status = status.contract;
    assert_eq!(
        status
            .failure_domains
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        ["zone-a", "zone-b", "zone-c"]
    );
    assert!(condition::is_true(&status.conditions, condition::READY));
    assert_eq!(f.cloud.load_balancers().len(), 1);

    // A machine of the cluster still exists: deletion waits for it.
    let machines: Api<Machine> = Api::namespaced(client.clone(), &f.ns);
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "m-0", "labels": {labels::CLUSTER_NAME: "demo"}},
        "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "x"},
                 "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": "m-0"}}
    }))
    .unwrap();
    machines
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    infra
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    eventually("deletion to wait for the machine", || async {
        infra.get("demo").await.is_ok_and(|c| {
            c.status.as_ref().is_some_and(|s| {
                s.contract
                    .conditions
                    .iter()
                    .any(|c| c.reason == capi_runtime::reasons::WAITING_FOR_MACHINES_DELETION)
            })
        })
    })
    .await;
    assert_eq!(
        f.cloud.load_balancers().len(),
        1,
        "deleted before the machines were gone"
    );

    machines
        .delete("m-0", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the infrastructure to be gone", || async {
        infra.get_opt("demo").await.is_ok_and(|c| c.is_none())
    })
    .await;
    assert!(f.cloud.load_balancers().is_empty(), "load balancer leaked");
    let _ = stop.send(());
    task.await.unwrap();
}
