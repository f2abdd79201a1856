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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_ec2::types::Filter;
use capi_core::api::Cluster;
use capi_testing::conformance::{CloudInventory, ClusterSuite, MachineSuite, Settings};
use common::{FixedCluster, FixedConnector, Moto, provider_clients};
use provider_aws::api::{AWSCluster, AWSMachine};
use provider_aws::cluster::AwsClusterActuator;
use provider_aws::machine::AwsMachineActuator;

const NAMESPACE: &str = "conformance";
const CLUSTER: &str = "gamma";

/// Everything of the cluster in the test's moto account, by kind and ID.
struct Inventory {
    moto: Moto,
}

fn owned() -> Filter {
    Filter::builder()
        .name("tag:capi-rs.dev/cluster")
        .values(format!("{NAMESPACE}/{CLUSTER}"))
        .build()
}

#[async_trait]
impl CloudInventory for Inventory {
    async fn instances(&self) -> Result<BTreeSet<String>, String> {
        let answer = self
            .moto
            .ec2
            .describe_instances()
            .filters(owned())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) != Some("terminated"))
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect())
    }

    async fn resources(&self) -> Result<BTreeSet<String>, String> {
        let ec2 = &self.moto.ec2;
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let mut all: BTreeSet<String> = self
            .instances()
            .await?
            .into_iter()
            .map(|id| format!("instance/{id}"))
            .collect();
        let vpcs = ec2
            .describe_vpcs()
            .filters(owned())
            .send()
            .await
            .map_err(|e| text(&e))?;
        all.extend(
            vpcs.vpcs()
                .iter()
                .filter_map(|v| v.vpc_id())
                .map(|id| format!("vpc/{id}")),
        );
        let subnets = ec2
            .describe_subnets()
            .filters(owned())
            .send()
            .await
            .map_err(|e| text(&e))?;
        all.extend(
            subnets
                .subnets()
                .iter()
                .filter_map(|s| s.subnet_id())
                .map(|id| format!("subnet/{id}")),
        );
        let gateways = ec2
            .describe_internet_gateways()
            .filters(owned())
            .send()
            .await
            .map_err(|e| text(&e))?;
        all.extend(
            gateways
                .internet_gateways()
                .iter()
                .filter_map(|g| g.internet_gateway_id())
                .map(|id| format!("igw/{id}")),
        );
        let nats = ec2
            .describe_nat_gateways()
            .filter(owned())
            .send()
            .await
            .map_err(|e| text(&e))?;
        all.extend(
            nats.nat_gateways()
                .iter()
                .filter(|n| n.state().map(|s| s.as_str()) != Some("deleted"))
                .filter_map(|n| n.nat_gateway_id())
                .map(|id| format!("nat/{id}")),
        );
        let tables = ec2
            .describe_route_tables()
            .filters(owned())
            .send()
            .await
            .map_err(|e| text(&e))?;
        all.extend(
            tables
                .route_tables()
                .iter()
                .filter_map(|t| t.route_table_id())
                .map(|id| format!("rtb/{id}")),
        );
        let groups = ec2
            .describe_security_groups()
            .filters(owned())
            .send()
            .await
            .map_err(|e| text(&e))?;
        all.extend(
            groups
                .security_groups()
                .iter()
                .filter_map(|g| g.group_id())
                .map(|id| format!("sg/{id}")),
        );
        let addresses = ec2
            .describe_addresses()
            .filters(owned())
            .send()
            .await
            .map_err(|e| text(&e))?;
        all.extend(
            addresses
                .addresses()
                .iter()
                .filter_map(|a| a.allocation_id())
                .map(|id| format!("eip/{id}")),
        );
        // The account is the test's own: every load balancer and target group in it is the
        // cluster's.
        let balancers = self
            .moto
            .elb
            .describe_load_balancers()
            .send()
            .await
            .map_err(|e| text(&e))?;
        all.extend(
            balancers
                .load_balancers()
                .iter()
                .filter_map(|l| l.load_balancer_arn())
                .map(|arn| format!("lb/{arn}")),
        );
        let target_groups = self
            .moto
            .elb
            .describe_target_groups()
            .send()
            .await
            .map_err(|e| text(&e))?;
        all.extend(
            target_groups
                .target_groups()
                .iter()
                .filter_map(|g| g.target_group_arn())
                .map(|arn| format!("tg/{arn}")),
        );
        Ok(all)
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
    // The machines see the AWSCluster with the status its actuator reported.
    let seen = Arc::new(Mutex::new(infra_cluster.clone()));
    let machines = MachineSuite::new(
        Arc::new(AwsMachineActuator::new(
            connector.clone(),
            Arc::new(FixedCluster(seen.clone())),
        )),
        inventory.clone(),
        infra_machine,
    )
    .cluster(cluster.clone())
    .settings(settings.clone());
    let report = ClusterSuite::new(
        Arc::new(AwsClusterActuator::new(connector)),
        inventory.clone(),
        infra_cluster,
    )
    .cluster(cluster)
    .settings(settings)
    .run_with(|reported| {
        {
            let mut cluster = seen.lock().unwrap();
            let status = serde_json::Value::Object(reported.provider_status.fields().clone());
            cluster.status = Some(serde_json::from_value(status).unwrap());
        }
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
