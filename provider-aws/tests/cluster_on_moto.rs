//! The `AWSCluster` actuator on its SDK adapters against real `moto_server` (no proxy): the
//! whole network in CAPA's order, found again (not made twice) by a second reconcile, and a
//! teardown that leaves nothing of the cluster — no load balancer, target group, security group,
//! subnet, gateway, route table, elastic address or VPC. moto changes states instantly and
//! never lingers, so the waits (NAT gateways pending, network interfaces of a deleted load
//! balancer holding subnets) are the unit tests' to show.
#![cfg(feature = "sdk")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use capi_core::api::Cluster;
use capi_core::{ActuatorErrorKind, ClusterActuator, ClusterScope};
use common::{FixedConnector, Moto, provider_clients};
use provider_aws::api::AWSCluster;
use provider_aws::cluster::AwsClusterActuator;

fn scope(spec: serde_json::Value) -> ClusterScope<AWSCluster> {
    let infra: AWSCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSCluster",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": spec,
    }))
    .unwrap();
    let mut cluster = Cluster::default();
    cluster.metadata.name = Some("demo".into());
    cluster.metadata.namespace = Some("ns".into());
    ClusterScope {
        cluster: Arc::new(cluster),
        infra_cluster: Arc::new(infra),
    }
}

/// Reconciles until the infrastructure is provisioned (a load balancer is `provisioning` when
/// created, in moto as in AWS); at most five passes.
async fn provisioned(
    actuator: &AwsClusterActuator,
    scope: &ClusterScope<AWSCluster>,
) -> capi_core::ClusterInfrastructure {
    for _ in 0..5 {
        let reported = actuator.reconcile(scope).await.unwrap();
        if reported.provisioned {
            return reported;
        }
        let waiting: Vec<&str> = reported
            .conditions
            .iter()
            .filter(|c| c.status == capi_core::condition::ConditionStatus::False)
            .map(|c| c.message.as_str())
            .collect();
        assert!(
            !waiting.is_empty(),
            "not provisioned, and no condition says why"
        );
    }
    panic!("not provisioned after five reconciles");
}

/// How many of each kind of the cluster's resources moto holds.
async fn census(moto: &Moto) -> Vec<(&'static str, usize)> {
    common::census::census(&moto.ec2, &moto.elb, "ns/demo")
        .await
        .unwrap()
}

#[tokio::test]
async fn a_cluster_network_is_made_once_and_torn_down_to_nothing() {
    let moto = Moto::new();
    let actuator = AwsClusterActuator::new(Arc::new(FixedConnector(provider_clients(&moto))));
    let scope =
        scope(serde_json::json!({"region": common::REGION, "additionalTags": {"team": "a"}}));

    let made = provisioned(&actuator, &scope).await;
    let endpoint = made.control_plane_endpoint.clone().unwrap();
    assert_eq!(endpoint.port, 6443);
    assert!(!endpoint.host.is_empty());
    let zones: Vec<&str> = made
        .failure_domains
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(zones, ["us-east-1a", "us-east-1b", "us-east-1c"]);
    let expected = vec![
        ("vpcs", 1),
        ("subnets", 6),
        ("internet gateways", 1),
        ("NAT gateways", 3),
        ("route tables", 6),
        ("security groups", 4),
        ("elastic IPs", 3),
        ("load balancers", 1),
        ("target groups", 1),
    ];
    assert_eq!(census(&moto).await, expected);

    let status = made.provider_status.fields();
    let network = &status["networkStatus"];
    assert_eq!(network["subnets"].as_array().unwrap().len(), 6);
    assert_eq!(network["securityGroups"].as_object().unwrap().len(), 4);
    assert_eq!(network["natGatewaysIPs"].as_array().unwrap().len(), 3);
    let elb = &network["apiServerElb"];
    assert_eq!(elb["dnsName"].as_str(), Some(endpoint.host.as_str()));

    // The node group's rules: NodePorts from anywhere, the kubelet from control planes and
    // nodes, Calico's BGP and IP-in-IP from both.
    let node = network["securityGroups"]["node"]["id"].as_str().unwrap();
    let groups = moto
        .ec2
        .describe_security_groups()
        .group_ids(node)
        .send()
        .await
        .unwrap();
    let rules: Vec<(String, i32)> = groups.security_groups()[0]
        .ip_permissions()
        .iter()
        .map(|p| {
            (
                p.ip_protocol().unwrap_or_default().to_string(),
                p.from_port().unwrap_or(-1),
            )
        })
        .collect();
    for wanted in [("tcp", 30000), ("tcp", 10250), ("tcp", 179), ("4", -1)] {
        assert!(
            rules.iter().any(|(p, f)| p == wanted.0 && *f == wanted.1),
            "{wanted:?} in {rules:?}"
        );
    }

    // A second reconcile finds everything and makes nothing.
    let again = actuator.reconcile(&scope).await.unwrap();
    assert_eq!(again.control_plane_endpoint, made.control_plane_endpoint);
    assert_eq!(again.provider_status, made.provider_status);
    assert_eq!(census(&moto).await, expected);

    // Teardown, a pass at a time, until nothing is left.
    let mut passes = 0;
    loop {
        passes += 1;
        match actuator.delete(&scope).await {
            Ok(()) => break,
            Err(error) => {
                assert_eq!(error.kind(), ActuatorErrorKind::RequeueAfter, "{error}");
                assert!(passes < 5, "still not gone after {passes} passes: {error}");
            }
        }
    }
    let nothing: Vec<(&str, usize)> = expected.iter().map(|(k, _)| (*k, 0)).collect();
    assert_eq!(census(&moto).await, nothing);
}

#[tokio::test]
async fn an_existing_vpc_is_used_and_never_deleted() {
    let moto = Moto::new();
    let (vpc, subnets) = moto.network().await;
    let actuator = AwsClusterActuator::new(Arc::new(FixedConnector(provider_clients(&moto))));
    let scope = scope(serde_json::json!({
        "region": common::REGION,
        "network": {"vpc": {"id": vpc},
                    "subnets": [{"id": subnets[0], "isPublic": true},
                                {"id": subnets[1], "isPublic": false}]},
        "controlPlaneLoadBalancer": {"scheme": "internal"},
    }));
    let made = provisioned(&actuator, &scope).await;
    let zones: Vec<&str> = made
        .failure_domains
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(zones, ["us-east-1b"], "machines go to private subnets");
    let counted = census(&moto).await;
    assert_eq!(
        counted,
        vec![
            ("vpcs", 0),
            ("subnets", 0),
            ("internet gateways", 0),
            ("NAT gateways", 0),
            ("route tables", 0),
            ("security groups", 4),
            ("elastic IPs", 0),
            ("load balancers", 1),
            ("target groups", 1),
        ]
    );
    let mut passes = 0;
    while actuator.delete(&scope).await.is_err() {
        passes += 1;
        assert!(passes < 5);
    }
    let still = moto.ec2.describe_vpcs().vpc_ids(&vpc).send().await.unwrap();
    assert_eq!(still.vpcs().len(), 1, "the user's VPC stays");
    let subnets_left = moto
        .ec2
        .describe_subnets()
        .subnet_ids(&subnets[0])
        .subnet_ids(&subnets[1])
        .send()
        .await
        .unwrap();
    assert_eq!(subnets_left.subnets().len(), 2, "the user's subnets stay");
    assert_eq!(census(&moto).await.iter().map(|(_, n)| n).sum::<usize>(), 0);
}
