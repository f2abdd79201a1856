//! The cluster actuator's decisions over mocked clouds: what moto cannot show — network
//! interfaces that outlive a deleted load balancer and hold subnets and groups
//! (`DependencyViolation`), throttling in the middle of a teardown, a load balancer name taken by
//! another owner — and the security group rules.

use std::collections::BTreeMap;
use std::time::Duration;

use capi_core::ActuatorErrorKind;
use capi_provider::support::redact::Redaction;

use super::*;
use crate::api::{SecurityGroupRole, Tags};
use crate::cloud::{
    LoadBalancer, MockCompute, MockLoadBalancing, MockNetwork, NetworkInterface, Permission,
    PermissionSource, SecurityGroup, Subnet, Vpc,
};

fn aws_cluster(spec: serde_json::Value) -> AWSCluster {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSCluster",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": spec,
    }))
    .unwrap()
}

fn ctx(network: MockNetwork, load_balancing: MockLoadBalancing, spec: serde_json::Value) -> Ctx {
    Ctx {
        clients: Clients {
            compute: Arc::new(MockCompute::new()),
            network: Arc::new(network),
            load_balancing: Arc::new(load_balancing),
            secrets: Arc::new(crate::cloud::MockSecrets::new()),
            scaling: Arc::new(crate::cloud::MockScaling::new()),
            redaction: Redaction::default(),
        },
        cluster: Arc::new(aws_cluster(spec)),
        naming: ClusterNaming::new("ns", "demo"),
        name: "demo".into(),
        additional: Tags::new(),
        api_server_port: DEFAULT_API_SERVER_PORT,
    }
}

fn region() -> serde_json::Value {
    serde_json::json!({"region": "us-east-1"})
}

fn dependency_violation(operation: &str) -> CloudError {
    CloudError::new(
        operation,
        Some("DependencyViolation".into()),
        "resource has a dependent object",
    )
}

/// Nothing of the cluster in the kinds a test does not look at.
fn nothing_else(network: &mut MockNetwork) {
    network.expect_route_tables().returning(|_| Ok(vec![]));
    network.expect_nat_gateways().returning(|_| Ok(vec![]));
    network.expect_internet_gateways().returning(|_| Ok(vec![]));
    network.expect_addresses().returning(|_| Ok(vec![]));
}

#[tokio::test]
async fn a_teardown_removes_service_load_balancers_and_detached_interfaces_and_names_the_rest() {
    let mut network = MockNetwork::new();
    network.expect_vpcs().returning(|_| {
        Ok(vec![Vpc {
            id: "vpc-1".into(),
            ..Vpc::default()
        }])
    });
    network.expect_security_groups().returning(|_| {
        Ok(vec![SecurityGroup {
            id: "sg-node".into(),
            name: "demo-node".into(),
            ingress: vec![Permission {
                protocol: "tcp".into(),
                from_port: 10250,
                to_port: 10250,
                source: PermissionSource::Group("sg-cp".into()),
                description: String::new(),
            }],
            ..SecurityGroup::default()
        }])
    });
    network
        .expect_revoke_ingress()
        .times(1)
        .withf(|group, rules| group == "sg-node" && rules.len() == 1)
        .returning(|_, _| Ok(()));
    network
        .expect_delete_security_group()
        .returning(|_| Err(dependency_violation("DeleteSecurityGroup")));
    network.expect_network_interfaces().returning(|filters| {
        let by_group = filters.iter().any(|f| f.name == "group-id");
        let mut found = vec![NetworkInterface {
            id: "eni-held".into(),
            status: "in-use".into(),
            description: "ELB net/k8s-svc/0123".into(),
            group_ids: vec!["sg-node".into()],
        }];
        if by_group {
            found.push(NetworkInterface {
                id: "eni-left".into(),
                status: "available".into(),
                ..NetworkInterface::default()
            });
        }
        Ok(found)
    });
    network
        .expect_delete_network_interface()
        .times(1)
        .withf(|id| id == "eni-left")
        .returning(|_| Ok(()));
    network.expect_subnets().returning(|_| {
        Ok(vec![Subnet {
            id: "subnet-1".into(),
            ..Subnet::default()
        }])
    });
    network
        .expect_delete_subnet()
        .returning(|_| Err(dependency_violation("DeleteSubnet")));
    network.expect_delete_vpc().never();
    nothing_else(&mut network);

    let mut load_balancing = MockLoadBalancing::new();
    load_balancing
        .expect_load_balancers_named()
        .returning(|_| Ok(vec![]));
    load_balancing.expect_load_balancers().returning(|| {
        Ok(["svc", "elsewhere"]
            .into_iter()
            .map(|name| LoadBalancer {
                arn: format!("arn:{name}"),
                name: name.into(),
                vpc_id: "vpc-1".into(),
                ..LoadBalancer::default()
            })
            .collect())
    });
    load_balancing.expect_tags().returning(|_| {
        Ok(BTreeMap::from([
            (
                "arn:svc".to_string(),
                Tags::from([(
                    "kubernetes.io/cluster/demo".to_string(),
                    "owned".to_string(),
                )]),
            ),
            ("arn:elsewhere".to_string(), Tags::new()),
        ]))
    });
    load_balancing
        .expect_delete_load_balancer()
        .times(1)
        .withf(|arn| arn == "arn:svc")
        .returning(|_| Ok(()));
    load_balancing
        .expect_target_groups_named()
        .returning(|_| Ok(vec![]));

    let ctx = ctx(network, load_balancing, region());
    let error = teardown::run(&ctx).await.unwrap_err();
    assert_eq!(error.kind(), ActuatorErrorKind::RequeueAfter);
    assert_eq!(error.reason(), "DeletingInfrastructure");
    for named in [
        "security group demo-node (in use by eni-held: ELB net/k8s-svc/0123)",
        "subnet subnet-1 (in use by eni-held: ELB net/k8s-svc/0123)",
        "VPC vpc-1 (its subnets first)",
    ] {
        assert!(error.message().contains(named), "{named} in {error}");
    }
}

#[tokio::test]
async fn a_throttled_answer_stops_the_teardown_with_the_budgets_wait() {
    let mut network = MockNetwork::new();
    network.expect_vpcs().returning(|_| {
        Ok(vec![Vpc {
            id: "vpc-1".into(),
            ..Vpc::default()
        }])
    });
    network.expect_security_groups().never();
    network.expect_subnets().never();
    let mut load_balancing = MockLoadBalancing::new();
    load_balancing
        .expect_load_balancers_named()
        .returning(|name| {
            Ok(vec![LoadBalancer {
                arn: "arn:api".into(),
                name: name.into(),
                vpc_id: "vpc-1".into(),
                ..LoadBalancer::default()
            }])
        });
    load_balancing.expect_tags().returning(|arns| {
        let naming = ClusterNaming::new("ns", "demo");
        Ok(arns
            .iter()
            .map(|arn| (arn.clone(), naming.ownership().into_iter().collect()))
            .collect())
    });
    load_balancing
        .expect_load_balancers()
        .returning(|| Ok(vec![]));
    load_balancing.expect_delete_load_balancer().returning(|_| {
        Err(CloudError::new(
            "DeleteLoadBalancer",
            Some("Throttling".into()),
            "Rate exceeded",
        )
        .with_retry_after(Duration::from_secs(23)))
    });
    let ctx = ctx(network, load_balancing, region());
    let error = teardown::run(&ctx).await.unwrap_err();
    assert_eq!(error.reason(), "Throttled");
    assert_eq!(error.requeue_delay(), Some(Duration::from_secs(23)));
}

#[tokio::test]
async fn a_load_balancer_name_taken_by_another_owner_is_the_users_to_fix_and_never_deleted() {
    let mut load_balancing = MockLoadBalancing::new();
    load_balancing
        .expect_load_balancers_named()
        .returning(|name| {
            Ok(vec![LoadBalancer {
                arn: "arn:theirs".into(),
                name: name.into(),
                ..LoadBalancer::default()
            }])
        });
    load_balancing.expect_tags().returning(|_| {
        Ok(BTreeMap::from([(
            "arn:theirs".to_string(),
            Tags::from([("team".to_string(), "b".to_string())]),
        )]))
    });
    load_balancing.expect_delete_load_balancer().never();
    let ctx = ctx(MockNetwork::new(), load_balancing, region());
    let error = load_balancer::owned_named(&ctx, "demo-apiserver")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
    assert_eq!(error.reason(), "LoadBalancerNameTaken");
}

fn ids() -> BTreeMap<SecurityGroupRole, String> {
    SecurityGroupRole::ALL
        .into_iter()
        .map(|r| (r, format!("sg-{}", r.as_str())))
        .collect()
}

fn has(rules: &[Permission], protocol: &str, from: i32, source: PermissionSource) -> bool {
    rules
        .iter()
        .any(|r| r.protocol == protocol && r.from_port == from && r.source == source)
}

#[test]
fn each_role_gets_capas_rules_with_calico_when_no_cni_is_named() {
    let ctx = ctx(MockNetwork::new(), MockLoadBalancing::new(), region());
    let group = |id: &str| PermissionSource::Group(id.to_string());
    let anywhere = PermissionSource::Cidr("0.0.0.0/0".into());
    let cp = security_groups::desired(&ctx, SecurityGroupRole::ControlPlane, &ids());
    assert!(has(&cp, "tcp", 6443, group("sg-apiserver-lb")));
    assert!(has(&cp, "tcp", 6443, group("sg-node")));
    assert!(has(&cp, "tcp", 2379, group("sg-controlplane")));
    assert!(has(&cp, "tcp", 2380, group("sg-controlplane")));
    assert!(has(&cp, "tcp", 179, group("sg-node")));
    assert!(has(&cp, "4", -1, group("sg-controlplane")));
    assert!(
        !has(&cp, "tcp", 2379, group("sg-node")),
        "etcd is not for nodes"
    );
    let node = security_groups::desired(&ctx, SecurityGroupRole::Node, &ids());
    assert!(has(&node, "tcp", 30000, anywhere.clone()));
    assert!(has(&node, "tcp", 10250, group("sg-controlplane")));
    let lb = security_groups::desired(&ctx, SecurityGroupRole::ApiServerLb, &ids());
    assert_eq!(lb.len(), 1);
    assert!(has(&lb, "tcp", 6443, anywhere));
    assert!(security_groups::desired(&ctx, SecurityGroupRole::Lb, &ids()).is_empty());
}

#[test]
fn the_specs_cni_and_additional_rules_replace_and_extend_the_defaults() {
    let ctx = ctx(
        MockNetwork::new(),
        MockLoadBalancing::new(),
        serde_json::json!({"region": "us-east-1", "network": {
            "cni": {"cniIngressRules": [
                {"description": "vxlan", "protocol": "udp", "fromPort": 4789, "toPort": 4789}]},
            "additionalNodeIngressRules": [
                {"description": "ssh", "protocol": "tcp", "fromPort": 22, "toPort": 22,
                 "sourceSecurityGroupRoles": ["controlplane"]}]}}),
    );
    let node = security_groups::desired(&ctx, SecurityGroupRole::Node, &ids());
    let group = |id: &str| PermissionSource::Group(id.to_string());
    assert!(has(&node, "udp", 4789, group("sg-node")));
    assert!(!has(&node, "tcp", 179, group("sg-node")), "no Calico");
    assert!(has(&node, "tcp", 22, group("sg-controlplane")));
    let cp = security_groups::desired(&ctx, SecurityGroupRole::ControlPlane, &ids());
    assert!(!has(&cp, "tcp", 22, group("sg-controlplane")), "nodes only");
}
