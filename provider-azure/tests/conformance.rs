//! The provider contract's conformance suite (`capi_testing::conformance`) against the Azure
//! provider's actuators on the ARM test server: the cluster infrastructure (resource group,
//! network, security groups, subnets, public IP, load balancer) provisioned, reconciled again
//! and deleted, and inside it machines created, re-created after lost responses and after
//! `create` was stopped at each of its await points (a restart in the middle of a VM's
//! creation), updated and deleted; and the pool rules for scale sets in such a cluster — with
//! every resource in the server accounted for, and every body checked against Azure's models.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::ClusterInfrastructure;
use capi_core::api::Cluster;
use capi_testing::conformance::{
    CloudInventory, ClusterSuite, MachineSuite, POOL_CREATE_IS_FOUND, POOL_CREATE_IS_IDEMPOTENT,
    POOL_CREATE_SURVIVES_CRASHES, POOL_DELETE_RETURNS_ONLY_WHEN_GONE, POOL_EXISTS_NEVER_CREATES,
    POOL_HOLDS_ITS_CAPACITY, POOL_LAUNCHES_THE_CURRENT_REVISION, POOL_REMOVES_ONLY_THE_NAMED,
    PoolSuite, Report, Settings,
};
use common::arm_server::ArmServer;
use common::model_checker::ModelChecker;
use common::{FixedConnector, arm_client};
use provider_azure::api::{AzureCluster, AzureMachine, AzureMachinePool};
use provider_azure::arm::ResourceType;
use provider_azure::cluster::AzureClusterActuator;
use provider_azure::machine::AzureMachineActuator;
use provider_azure::pool::AzurePoolActuator;

const NAMESPACE: &str = "conformance";
const CLUSTER: &str = "gamma";
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

/// A test server whose operations take 100 ms, everything in it, a connector to it, and an
/// `AzureCluster` named `name` with its `Cluster`, as the suites start from.
struct Setup {
    server: Arc<ArmServer>,
    inventory: Arc<Inventory>,
    connector: Arc<FixedConnector>,
    infra_cluster: AzureCluster,
    cluster: Cluster,
}

async fn setup(name: &str) -> Setup {
    let server = ArmServer::start(Arc::new(ModelChecker::start())).await;
    server.faults(|f| f.operation_time = Duration::from_millis(100));
    let inventory = Arc::new(Inventory(server.clone()));
    let connector = Arc::new(FixedConnector(arm_client(&server)));
    let mut infra_cluster: AzureCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureCluster",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "subscriptionID": SUBSCRIPTION,
            "location": "westeurope",
            "identityRef": {"name": "azure-credentials", "kind": "Secret"},
        },
    }))
    .unwrap();
    infra_cluster.metadata.uid = Some(format!("uid-{name}-{}", std::process::id()));
    let mut cluster = Cluster::default();
    cluster.metadata.name = Some(name.into());
    cluster.metadata.namespace = Some(NAMESPACE.into());
    cluster.metadata.uid = infra_cluster.metadata.uid.clone();
    Setup {
        server,
        inventory,
        connector,
        infra_cluster,
        cluster,
    }
}

/// `infra_cluster` as the loop reads it once the cluster suite provisioned it.
fn provisioned(mut infra_cluster: AzureCluster, reported: &ClusterInfrastructure) -> AzureCluster {
    let status = serde_json::Value::Object(reported.provider_status.fields().clone());
    infra_cluster.status = Some(serde_json::from_value(status).unwrap());
    infra_cluster
}

/// Fails unless the suites conformed and left nothing in the server.
async fn assert_conformed(report: Report, setup: &Setup) {
    report.assert_conforms();
    for note in &report.notes {
        println!("conformance note: {note}");
    }
    assert!(report.checked.len() >= 10, "{:?}", report.checked);
    assert!(
        setup.inventory.resources().await.unwrap().is_empty(),
        "nothing is left: {:?}",
        setup.inventory.resources().await.unwrap()
    );
    setup.server.assert_clean();
    println!(
        "bodies checked against Azure's models: {}",
        setup.server.checked()
    );
}

fn settings(crash_points: usize) -> Settings {
    Settings {
        deadline: Duration::from_secs(120),
        max_wait: Duration::from_millis(150),
        crash_points,
        poll_gap: Duration::from_millis(20),
        restart_delay: Duration::from_millis(50),
    }
}

#[tokio::test]
async fn the_azure_provider_conforms_on_the_arm_test_server() {
    let setup = setup(CLUSTER).await;
    let Setup {
        inventory,
        connector,
        infra_cluster,
        cluster,
        ..
    } = &setup;
    let settings = settings(16);
    let infra_machine: AzureMachine = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureMachine",
        "metadata": {"name": "template"},
        "spec": {
            "vmSize": "Standard_D2s_v3",
            "image": {"marketplace": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": "latest"}},
            "osDisk": {"osType": "Linux", "diskSizeGB": 128, "managedDisk": {"storageAccountType": "Premium_LRS"}},
            "dataDisks": [{"nameSuffix": "etcddisk", "diskSizeGB": 256, "lun": 0}],
        },
    }))
    .unwrap();
    let machines = Arc::new(AzureMachineActuator::new(connector.clone()));
    let report = ClusterSuite::new(
        Arc::new(AzureClusterActuator::new(connector.clone())),
        inventory.clone(),
        infra_cluster.clone(),
    )
    .cluster(cluster.clone())
    .settings(settings.clone())
    .run_with(|reported| {
        // The machines' scope holds the AzureCluster as the loop reads it: provisioned.
        let suite = MachineSuite::new(
            machines,
            inventory.clone(),
            infra_machine,
            provisioned(infra_cluster.clone(), &reported),
        )
        .cluster(cluster.clone())
        .settings(settings);
        async move { suite.run().await }
    })
    .await;
    assert_conformed(report, &setup).await;
}

/// The pool rules: a scale set made exactly once (also when `create` is stopped at each of its
/// await points, and when answers are lost), holding its capacity, losing only the VMs named,
/// launching the current model, and deleted with nothing left.
#[tokio::test]
async fn azure_pools_conform_on_the_arm_test_server() {
    let setup = setup("delta").await;
    let Setup {
        inventory,
        connector,
        infra_cluster,
        cluster,
        ..
    } = &setup;
    let settings = settings(12);
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
        Arc::new(AzureClusterActuator::new(connector.clone())),
        inventory.clone(),
        infra_cluster.clone(),
    )
    .cluster(cluster.clone())
    .settings(settings.clone())
    .run_with(|reported| {
        let suite = PoolSuite::new(
            pools,
            inventory.clone(),
            infra_pool,
            provisioned(infra_cluster.clone(), &reported),
        )
        .cluster(cluster.clone())
        .settings(settings);
        async move { suite.run().await }
    })
    .await;
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
    assert_conformed(report, &setup).await;
}
