//! The provider contract's conformance suite (`capi_testing::conformance`) against the AWS
//! provider's actuators on real `moto_server` (no proxy): the cluster infrastructure (VPC,
//! subnets in three zones, gateways, route tables, security groups, a network load balancer)
//! provisioned, reconciled again and deleted, and inside it machines created, re-created after
//! lost responses and after `create` was stopped at each of its first await points, updated and
//! deleted — with every instance and cluster resource of the account accounted for. moto ignores
//! `ClientToken` and is never behind, so what keeps a machine single here is the lookup by
//! idempotency-key tag; the token replay and eventual consistency are the unit tests'.
#![cfg(feature = "sdk")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::api::Cluster;
use capi_testing::conformance::{CloudInventory, ClusterSuite, MachineSuite, Settings};
use common::{FixedConnector, Moto, provider_clients};
use provider_aws::api::{AWSCluster, AWSMachine};
use provider_aws::cluster::AwsClusterActuator;
use provider_aws::machine::AwsMachineActuator;

const NAMESPACE: &str = "conformance";
const CLUSTER: &str = "gamma";

/// Everything of the cluster in the test's moto account, by kind and ID.
struct Inventory {
    moto: Moto,
}

fn cluster() -> String {
    format!("{NAMESPACE}/{CLUSTER}")
}

#[async_trait]
impl CloudInventory for Inventory {
    async fn instances(&self) -> Result<BTreeSet<String>, String> {
        common::census::live_instances(&self.moto.ec2, &cluster()).await
    }

    async fn resources(&self) -> Result<BTreeSet<String>, String> {
        common::census::resources(&self.moto.ec2, &self.moto.elb, &cluster()).await
    }
}

#[tokio::test]
async fn the_aws_provider_conforms_on_moto() {
    let inventory = Arc::new(Inventory { moto: Moto::new() });
    let image = inventory.moto.any_image().await;
    let connector = Arc::new(FixedConnector(provider_clients(&inventory.moto)));
    let mut infra_cluster: AWSCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSCluster",
        "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
        "spec": {"region": common::REGION},
    }))
    .unwrap();
    infra_cluster.metadata.uid = Some(format!("uid-{CLUSTER}-{}", std::process::id()));
    let mut cluster = Cluster::default();
    cluster.metadata.name = Some(CLUSTER.into());
    cluster.metadata.namespace = Some(NAMESPACE.into());
    cluster.metadata.uid = infra_cluster.metadata.uid.clone();

    let settings = Settings {
        deadline: Duration::from_secs(120),
        max_wait: Duration::from_millis(200),
        crash_points: 8,
        poll_gap: Duration::from_millis(20),
        restart_delay: Duration::from_millis(50),
    };
    let infra_machine: AWSMachine = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSMachine",
        "metadata": {"name": "template"},
        "spec": {"instanceType": "t3.medium", "ami": {"id": image}},
    }))
    .unwrap();
    let machine_actuator = Arc::new(AwsMachineActuator::new(connector.clone()));
    let report = ClusterSuite::new(
        Arc::new(AwsClusterActuator::new(connector)),
        inventory.clone(),
        infra_cluster.clone(),
    )
    .cluster(cluster.clone())
    .settings(settings.clone())
    .run_with(|reported| {
        // The machines' AWSCluster carries the status its actuator reported.
        let mut provisioned = infra_cluster;
        let status = serde_json::Value::Object(reported.provider_status.fields().clone());
        provisioned.status = Some(serde_json::from_value(status).unwrap());
        let machines = MachineSuite::new(
            machine_actuator,
            inventory.clone(),
            infra_machine,
            provisioned,
        )
        .cluster(cluster)
        .settings(settings);
        async move { machines.run().await }
    })
    .await;
    report.assert_conforms();
    for note in &report.notes {
        println!("conformance note: {note}");
    }
    assert!(report.checked.len() >= 10, "{:?}", report.checked);
    assert!(
        inventory.resources().await.unwrap().is_empty(),
        "nothing of the cluster is left"
    );
}
