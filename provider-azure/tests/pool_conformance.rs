//! The conformance suite's pool rules (`capi_testing::conformance::PoolSuite`) against the
//! `AzureMachinePool` actuator on the ARM test server, inside a cluster the `AzureCluster`
//! actuator provisioned there: a scale set created exactly once (also when `create` is stopped
//! at each of its await points, and when answers are lost), holding its capacity, losing only
//! the VMs named, launching the current model, and deleted with nothing left — every body
//! checked against Azure's models.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::api::Cluster;
use capi_testing::conformance::{
    CloudInventory, ClusterSuite, POOL_CREATE_IS_FOUND, POOL_CREATE_IS_IDEMPOTENT,
    POOL_CREATE_SURVIVES_CRASHES, POOL_DELETE_RETURNS_ONLY_WHEN_GONE, POOL_EXISTS_NEVER_CREATES,
    POOL_HOLDS_ITS_CAPACITY, POOL_LAUNCHES_THE_CURRENT_REVISION, POOL_REMOVES_ONLY_THE_NAMED,
    PoolSuite, Settings,
};
use common::arm_server::ArmServer;
use common::model_checker::ModelChecker;
use common::{FixedConnector, arm_client};
use provider_azure::api::{AzureCluster, AzureMachinePool};
use provider_azure::arm::ResourceType;
use provider_azure::cluster::AzureClusterActuator;
use provider_azure::pool::AzurePoolActuator;

const NAMESPACE: &str = "conformance";
const CLUSTER: &str = "delta";
const SUBSCRIPTION: &str = "7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c";

/// Everything in the ARM test server.
struct Inventory(Arc<ArmServer>);

#[async_trait]
impl CloudInventory for Inventory {
    async fn instances(&self) -> Result<BTreeSet<String>, String> {
        let world = self.0.world.lock().unwrap();
        Ok(world
            .of_kind(ResourceType::VirtualMachine)
            .into_iter()
            .map(|r| r.id.clone())
            .collect())
    }

    async fn resources(&self) -> Result<BTreeSet<String>, String> {
        Ok(self.0.world.lock().unwrap().census().into_iter().collect())
    }
}

#[tokio::test]
async fn azure_pools_conform_on_the_arm_test_server() {
    let server = ArmServer::start(Arc::new(ModelChecker::start())).await;
    server.faults(|f| f.operation_time = Duration::from_millis(100));
    let inventory = Arc::new(Inventory(server.clone()));
    let connector = Arc::new(FixedConnector(arm_client(&server)));
    let mut infra_cluster: AzureCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureCluster",
        "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
        "spec": {
            "subscriptionID": SUBSCRIPTION,
            "location": "westeurope",
            "identityRef": {"name": "azure-credentials", "kind": "Secret"},
        },
    }))
    .unwrap();
    infra_cluster.metadata.uid = Some(format!("uid-{CLUSTER}-{}", std::process::id()));
    let mut cluster = Cluster::default();
    cluster.metadata.name = Some(CLUSTER.into());
    cluster.metadata.namespace = Some(NAMESPACE.into());
    cluster.metadata.uid = infra_cluster.metadata.uid.clone();

    let settings = Settings {
        deadline: Duration::from_secs(120),
        max_wait: Duration::from_millis(150),
        crash_points: 12,
        poll_gap: Duration::from_millis(20),
        restart_delay: Duration::from_millis(50),
    };
    let infra_pool: AzureMachinePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureMachinePool",
        "metadata": {"name": "template"},
        "spec": {
            "additionalTags": {"cost-center": "42"},
            "template": {
                "vmSize": "Standard_D2s_v3",
                "image": {"marketplace": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": "latest"}},
                "osDisk": {"osType": "Linux", "diskSizeGB": 64, "managedDisk": {"storageAccountType": "Premium_LRS"}},
            },
        },
    }))
    .unwrap();
    let pools = Arc::new(AzurePoolActuator::new(connector.clone()));
    let report = ClusterSuite::new(
        Arc::new(AzureClusterActuator::new(connector)),
        inventory.clone(),
        infra_cluster.clone(),
    )
    .cluster(cluster.clone())
    .settings(settings.clone())
    .run_with(|reported| {
        // The pools' scope holds the AzureCluster as the loop reads it: provisioned.
        let mut provisioned = infra_cluster;
        let status = serde_json::Value::Object(reported.provider_status.fields().clone());
        provisioned.status = Some(serde_json::from_value(status).unwrap());
        let suite = PoolSuite::new(pools, inventory.clone(), infra_pool, provisioned)
            .cluster(cluster)
            .settings(settings);
        async move { suite.run().await }
    })
    .await;
    report.assert_conforms();
    for note in &report.notes {
        println!("conformance note: {note}");
    }
    for rule in [
        POOL_EXISTS_NEVER_CREATES,
        POOL_CREATE_IS_FOUND,
        POOL_CREATE_IS_IDEMPOTENT,
        POOL_CREATE_SURVIVES_CRASHES,
        POOL_HOLDS_ITS_CAPACITY,
        POOL_REMOVES_ONLY_THE_NAMED,
        POOL_LAUNCHES_THE_CURRENT_REVISION,
        POOL_DELETE_RETURNS_ONLY_WHEN_GONE,
    ] {
        assert!(report.checked.contains(&rule), "{rule:?} was not checked");
    }
    assert!(
        inventory.resources().await.unwrap().is_empty(),
        "nothing is left: {:?}",
        inventory.resources().await.unwrap()
    );
    server.assert_clean();
    println!(
        "bodies checked against Azure's models: {}",
        server.checked()
    );
}
