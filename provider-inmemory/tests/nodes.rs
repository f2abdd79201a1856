//! Simulated kubelets: a running instance registers a Ready `Node` with its provider ID in the
//! workload API server, and the node goes with the instance.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use capi_testing::envtest::ControlPlane;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use provider_inmemory::actuator::provider_id;
use provider_inmemory::cloud::{Compute, InstanceRequest, SimulatedCloud};
use provider_inmemory::nodes::NodeRegistrar;

#[tokio::test]
async fn running_instances_become_ready_nodes_and_go_with_them() {
    let workload = ControlPlane::start().await.unwrap();
    let client = workload.client().await.unwrap();
    let cloud = Arc::new(SimulatedCloud::default());
    let request = InstanceRequest {
        tag: "t".into(),
        flavor: "small".into(),
        zone: Some("zone-a".into()),
        user_data_len: 0,
        user_data: None,
        etcd_cluster: None,
        client_token: None,
        cluster: None,
    };
    let instance = cloud.create_instance(request).await.unwrap();

    let mut registrar = NodeRegistrar::new(client.clone(), cloud.clone());
    registrar.sync().await.unwrap();
    let node = Api::<Node>::all(client.clone())
        .get(&instance.id)
        .await
        .unwrap();
    assert_eq!(
        node.spec.unwrap().provider_id,
        Some(provider_id(&instance.id))
    );
    let status = node.status.unwrap();
    let ready = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    assert!(
        status
            .addresses
            .unwrap_or_default()
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == instance.address)
    );

    // A restarted registrar adopts what exists and removes the node of a deleted instance.
    cloud.delete_instance(&instance.id).await.unwrap();
    let mut restarted = NodeRegistrar::new(client.clone(), cloud);
    restarted.sync().await.unwrap();
    assert!(
        Api::<Node>::all(client)
            .get_opt(&instance.id)
            .await
            .unwrap()
            .is_none()
    );
}
