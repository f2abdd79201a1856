//! Every branch of the cluster actuator over a mocked ARM (`crate::fake_arm`).

use std::sync::Mutex;

use capi_core::ActuatorErrorKind;
use capi_core::api::Cluster;
use serde_json::json;

use super::*;
use crate::arm::{ArmError, MockArm, Poll, ResourceType};
use crate::connector::MockConnector;
use crate::fake_arm::{State, fake};

const SUB: &str = "7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c";

fn azure_cluster(status: serde_json::Value) -> AzureCluster {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureCluster",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {"subscriptionID": SUB, "location": "westeurope",
                 "identityRef": {"name": "creds", "kind": "Secret"},
                 "additionalTags": {"team": "a"}},
        "status": status,
    }))
    .unwrap_or_default()
}

fn scope_of(infra: AzureCluster) -> ClusterScope<AzureCluster> {
    let mut cluster = Cluster::default();
    cluster.metadata.name = Some("demo".into());
    cluster.metadata.namespace = Some("ns".into());
    ClusterScope {
        cluster: Arc::new(cluster),
        infra_cluster: Arc::new(infra),
    }
}

fn actuator(arm: MockArm) -> AzureClusterActuator {
    let arm: Arc<dyn Arm> = Arc::new(arm);
    let mut connector = MockConnector::new();
    connector
        .expect_connect()
        .returning(move |_| Ok(arm.clone()));
    AzureClusterActuator::new(Arc::new(connector))
}

fn ctx() -> Ctx {
    let (arm, _) = fake();
    Ctx::new(
        Arc::new(arm),
        Arc::new(azure_cluster(json!({}))),
        "demo",
        6443,
    )
}

fn lock(state: &Arc<Mutex<State>>) -> std::sync::MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs reconciles until provisioned (at most `passes`), answering every poll `Succeeded` and
/// marking every resource done between passes, as ARM would.
async fn settle(
    actuator: &AzureClusterActuator,
    state: &Arc<Mutex<State>>,
    passes: usize,
) -> ClusterInfrastructure {
    let mut infra = azure_cluster(json!({}));
    for _ in 0..passes {
        let reported = actuator.reconcile(&scope_of(infra.clone())).await;
        let reported = match reported {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        if reported.provisioned {
            return reported;
        }
        let status = serde_json::Value::Object(reported.provider_status.fields().clone());
        infra.status = serde_json::from_value(status).ok();
        let mut st = lock(state);
        st.poll = Some(Poll::Succeeded);
        for body in st.resources.values_mut() {
            body["properties"]["provisioningState"] = json!("Succeeded");
            if let Some(label) = body["properties"]["dnsSettings"]["domainNameLabel"].as_str() {
                let fqdn = format!("{label}.westeurope.cloudapp.azure.com");
                body["properties"]["dnsSettings"]["fqdn"] = json!(fqdn);
                body["properties"]["ipAddress"] = json!("20.1.2.3");
            }
        }
    }
    panic!("not provisioned after {passes} passes");
}

#[tokio::test]
async fn the_first_pass_starts_everything_that_does_not_wait_on_something_else() {
    let (arm, state) = fake();
    lock(&state).put_state = "Creating".into();
    let reported = actuator(arm)
        .reconcile(&scope_of(azure_cluster(json!({}))))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!reported.provisioned);
    assert_eq!(reported.control_plane_endpoint, None);
    // The group (made at once here as well: Creating is what the fake answers) blocks the rest.
    assert_eq!(lock(&state).calls("PUT"), vec!["demo"]);
    let operations = &reported.provider_status.fields()["longRunningOperationStates"];
    assert_eq!(operations[0]["serviceName"], "group");
    assert_eq!(operations[0]["type"], "PUT");

    // Once the group is there: network, both security groups and the public IP in one pass.
    let (arm, state) = fake();
    {
        let mut st = lock(&state);
        st.put_state = "Creating".into();
        let c = ctx();
        st.insert(&c.group_id(), {
            let mut g = c.group_body();
            g["properties"] = json!({"provisioningState": "Succeeded"});
            g
        });
    }
    let reported = actuator(arm)
        .reconcile(&scope_of(azure_cluster(json!({}))))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        lock(&state).calls("PUT"),
        vec![
            "demo-vnet",
            "pip-demo-node-natgw",
            "demo-controlplane-nsg",
            "demo-node-nsg",
            "pip-demo-apiserver"
        ]
    );
    let operations = reported.provider_status.fields()["longRunningOperationStates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(operations.len(), 5);
    assert!(
        reported
            .conditions
            .iter()
            .all(|c| c.status == ConditionStatus::False)
    );
}

#[tokio::test]
async fn operations_under_way_are_neither_read_nor_put_again() {
    let (arm, state) = fake();
    let c = ctx();
    {
        let mut st = lock(&state);
        st.insert(&c.group_id(), c.group_body());
        st.poll = Some(Poll::InProgress {
            retry_after: Some(std::time::Duration::from_secs(3)),
        });
    }
    let recorded = json!({"longRunningOperationStates": [{
        "type": "PUT", "serviceName": "vnet", "name": "demo-vnet", "resourceGroup": "demo",
        "pollingURL": "https://arm.test/operations/demo-vnet",
        "startedAt": jiff::Timestamp::now().to_string(),
    }]});
    let reported = actuator(arm)
        .reconcile(&scope_of(azure_cluster(recorded)))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let st = lock(&state);
    assert!(!st.calls("GET").contains(&"demo-vnet".to_string()));
    assert!(!st.calls("PUT").contains(&"demo-vnet".to_string()));
    // Unrelated resources went on meanwhile.
    assert!(st.calls("PUT").contains(&"demo-node-nsg".to_string()));
    assert_eq!(
        reported.provider_status.fields()["longRunningOperationStates"][0]["name"],
        "demo-vnet"
    );
}

#[tokio::test]
async fn a_cluster_settles_with_the_public_ips_name_as_its_endpoint() {
    let (arm, state) = fake();
    lock(&state).put_state = "Creating".into();
    let actuator = actuator(arm);
    let reported = settle(&actuator, &state, 6).await;
    let c = ctx();
    let endpoint = reported.control_plane_endpoint.clone().unwrap_or_default();
    assert_eq!(
        endpoint.host,
        format!(
            "{}.westeurope.cloudapp.azure.com",
            c.naming.dns_label(&c.cluster)
        )
    );
    assert_eq!(endpoint.port, 6443);
    let network = &reported.provider_status.fields()["network"];
    assert_eq!(network["apiServerLB"]["publicIP"], "20.1.2.3");
    assert_eq!(network["subnets"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        reported.provider_status.fields()["longRunningOperationStates"],
        json!([])
    );
    assert_eq!(reported.failure_domains.len(), 3);
    let st = lock(&state);
    let lb = st.get(&c.load_balancer_id()).cloned().unwrap_or_default();
    assert_eq!(
        lb["properties"]["loadBalancingRules"][0]["properties"]["backendAddressPool"]["id"],
        backend_pool_id(&c)
    );
    let subnet = st
        .get(&c.subnet_id(SubnetRole::ControlPlane))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        subnet["properties"]["networkSecurityGroup"]["id"],
        c.security_group_id(SubnetRole::ControlPlane).to_string()
    );
    // The nodes' outbound path: the NAT gateway on their subnet, none on the control plane's.
    let node_subnet = st
        .get(&c.subnet_id(SubnetRole::Node))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        node_subnet["properties"]["natGateway"]["id"],
        c.nat_gateway_id().to_string()
    );
    assert!(subnet["properties"]["natGateway"].is_null());
    let nat = st.get(&c.nat_gateway_id()).cloned().unwrap_or_default();
    assert_eq!(
        nat["properties"]["publicIpAddresses"][0]["id"],
        c.nat_gateway_ip_id().to_string()
    );
    let nsg = st
        .get(&c.security_group_id(SubnetRole::ControlPlane))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        nsg["properties"]["securityRules"][1]["properties"]["destinationPortRange"],
        "6443"
    );
    assert_eq!(nsg["tags"]["team"], "a");
    assert_eq!(nsg["tags"][crate::naming::CLUSTER_TAG], "ns/demo");
}

#[tokio::test]
async fn a_settled_cluster_is_read_not_written() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    let first = settle(&actuator, &state, 4).await;
    assert!(first.provisioned);
    let puts = lock(&state).calls("PUT").len();
    let again = actuator
        .reconcile(&scope_of(azure_cluster(json!({}))))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(again.provisioned);
    assert_eq!(
        lock(&state).calls("PUT").len(),
        puts,
        "nothing was put again"
    );
}

#[tokio::test]
async fn a_failed_operation_is_cleared_and_its_resource_put_again() {
    let (arm, state) = fake();
    let c = ctx();
    {
        let mut st = lock(&state);
        st.insert(&c.group_id(), c.group_body());
        let mut vnet = c.vnet_body();
        vnet["properties"]["provisioningState"] = json!("Failed");
        st.insert(&c.vnet_id(), vnet);
        st.poll = Some(Poll::Failed(ArmError::new(
            Some(200),
            "InternalServerError",
            "it broke",
        )));
    }
    let recorded = json!({"longRunningOperationStates": [{
        "type": "PUT", "serviceName": "vnet", "name": "demo-vnet",
        "pollingURL": "https://arm.test/operations/demo-vnet",
        "startedAt": jiff::Timestamp::now().to_string(),
    }]});
    let reported = actuator(arm)
        .reconcile(&scope_of(azure_cluster(recorded)))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(lock(&state).calls("PUT").contains(&"demo-vnet".to_string()));
    let network = reported
        .conditions
        .iter()
        .find(|c| c.type_ == "NetworkInfrastructureReady")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(network.contains("it broke"), "{network}");
}

#[tokio::test]
async fn throttling_and_invalid_requests_reach_the_loop_as_such() {
    let (arm, state) = fake();
    lock(&state).errors.insert(
        ("GET".into(), "*".into()),
        ArmError::new(Some(429), "TooManyRequests", "slow down")
            .retry_after(Some(std::time::Duration::from_secs(7))),
    );
    let error = actuator(arm)
        .reconcile(&scope_of(azure_cluster(json!({}))))
        .await
        .err()
        .unwrap_or_else(|| panic!("throttled"));
    assert_eq!(
        error.requeue_delay(),
        Some(std::time::Duration::from_secs(7))
    );

    let (arm, state) = fake();
    lock(&state).errors.insert(
        ("PUT".into(), "*".into()),
        ArmError::new(
            Some(400),
            "LocationNotAvailableForResourceGroup",
            "The provided location 'mars' is not available",
        ),
    );
    let error = actuator(arm)
        .reconcile(&scope_of(azure_cluster(json!({}))))
        .await
        .err()
        .unwrap_or_else(|| panic!("refused"));
    assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
    assert!(error.to_string().contains("'mars' is not available"));
}

#[tokio::test]
async fn an_owned_group_is_deleted_whole_and_waited_for() {
    let (arm, state) = fake();
    let c = ctx();
    {
        let mut st = lock(&state);
        st.insert(&c.group_id(), c.group_body());
        st.slow_delete = true;
    }
    let actuator = actuator(arm);
    let error = actuator
        .delete(&scope_of(azure_cluster(json!({}))))
        .await
        .err()
        .unwrap_or_else(|| panic!("deleting"));
    assert_eq!(error.kind(), ActuatorErrorKind::RequeueAfter);
    assert_eq!(lock(&state).calls("DELETE"), vec!["demo"]);
    lock(&state).resources.clear();
    assert!(
        actuator
            .delete(&scope_of(azure_cluster(json!({}))))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn in_a_group_it_does_not_own_it_deletes_its_own_resources_and_says_what_is_left() {
    let (arm, state) = fake();
    let c = ctx();
    {
        let mut st = lock(&state);
        st.insert(&c.group_id(), json!({"location": "westeurope", "tags": {}}));
        for (id, body) in [
            (c.vnet_id(), c.vnet_body()),
            (
                c.subnet_id(SubnetRole::Node),
                c.subnet_body(SubnetRole::Node),
            ),
            (
                c.security_group_id(SubnetRole::Node),
                c.security_group_body(SubnetRole::Node),
            ),
            (c.public_ip_id(), c.public_ip_body()),
            (c.load_balancer_id(), c.load_balancer_body()),
            (c.nat_gateway_ip_id(), c.nat_gateway_ip_body()),
            (c.nat_gateway_id(), c.nat_gateway_body()),
        ] {
            st.insert(&id, body);
        }
        st.errors.insert(
            (
                "DELETE".into(),
                c.subnet_id(SubnetRole::Node).to_string().to_lowercase(),
            ),
            ArmError::new(Some(400), "InUseSubnetCannotBeDeleted", "in use by m-0-nic"),
        );
    }
    let actuator = actuator(arm);
    let error = actuator
        .delete(&scope_of(azure_cluster(json!({}))))
        .await
        .err()
        .unwrap_or_else(|| panic!("a subnet is in use"));
    assert!(error.to_string().contains("in use by m-0-nic"), "{error}");
    {
        let st = lock(&state);
        let deleted = st.calls("DELETE");
        assert!(deleted.contains(&"demo-public-lb".to_string()));
        assert!(deleted.contains(&"pip-demo-apiserver".to_string()));
        // Past the refusal: the security groups too, but not the network its subnet holds.
        assert!(deleted.contains(&"demo-node-nsg".to_string()));
        assert!(!deleted.contains(&"demo-vnet".to_string()));
        assert!(
            !deleted.contains(&"demo-node-natgw".to_string()),
            "still on its subnet"
        );
        assert!(
            !deleted.contains(&"demo".to_string()),
            "never the group it does not own"
        );
    }
    assert!(
        actuator
            .delete(&scope_of(azure_cluster(json!({}))))
            .await
            .is_ok()
    );
    let st = lock(&state);
    assert_eq!(
        st.resources.len(),
        1,
        "only the group is left: {:?}",
        st.resources.keys()
    );
}

#[test]
fn the_default_bodies_match_capz() {
    let c = ctx();
    assert_eq!(
        c.vnet_body()["properties"]["addressSpace"]["addressPrefixes"],
        json!(["10.0.0.0/8"])
    );
    assert_eq!(
        c.subnet_body(SubnetRole::Node)["properties"]["addressPrefixes"],
        json!(["10.1.0.0/16"])
    );
    let lb = c.load_balancer_body();
    assert_eq!(lb["sku"]["name"], "Standard");
    assert_eq!(
        lb["properties"]["probes"][0]["properties"]["requestPath"],
        "/readyz"
    );
    assert_eq!(
        lb["properties"]["loadBalancingRules"][0]["properties"]["idleTimeoutInMinutes"],
        DEFAULT_IDLE_TIMEOUT
    );
    assert!(c.security_rules(SubnetRole::Node).is_empty());
    let _ = ResourceType::ALL;
}

#[tokio::test]
async fn a_same_named_clusters_resources_in_another_namespace_are_refused() {
    let (arm, state) = fake();
    let other = ClusterNaming::new("other", "demo");
    let c = ctx();
    {
        let mut st = lock(&state);
        let mut group = c.group_body();
        group["tags"] = serde_json::to_value(other.tags(
            crate::naming::Role::Common,
            "demo",
            &Default::default(),
        ))
        .unwrap_or_default();
        st.insert(&c.group_id(), group);
    }
    let error = actuator(arm)
        .reconcile(&scope_of(azure_cluster(json!({}))))
        .await
        .err()
        .unwrap_or_else(|| panic!("another cluster's"));
    assert_eq!(error.reason(), "ResourceOfAnotherCluster");
    assert!(error.to_string().contains("other/demo"), "{error}");
    assert!(lock(&state).calls("PUT").is_empty());
}

#[tokio::test]
async fn in_a_network_it_does_not_own_it_makes_no_subnet_or_security_group_and_deletes_nothing_of_it()
 {
    let (arm, state) = fake();
    let c = ctx();
    {
        let mut st = lock(&state);
        st.insert(&c.group_id(), c.group_body());
        st.insert(
            &c.vnet_id(),
            json!({"location": "westeurope", "tags": {}, "properties": {"addressSpace": {"addressPrefixes": ["10.0.0.0/8"]}}}),
        );
        st.insert(
            &c.subnet_id(SubnetRole::ControlPlane),
            json!({"properties": {"addressPrefix": "10.0.0.0/16"}}),
        );
    }
    let actuator = actuator(arm);
    let reported = actuator
        .reconcile(&scope_of(azure_cluster(json!({}))))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!reported.provisioned);
    let network = reported
        .conditions
        .iter()
        .find(|c| c.type_ == "NetworkInfrastructureReady")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        network.contains("demo-node-subnet does not exist"),
        "{network}"
    );
    let puts = lock(&state).calls("PUT");
    assert!(
        !puts
            .iter()
            .any(|p| p.ends_with("-subnet") || p.ends_with("-nsg") || p == "demo-vnet"),
        "{puts:?}"
    );
    assert_eq!(
        reported.provider_status.fields()["network"]["subnets"][0]["cidrBlocks"],
        json!(["10.0.0.0/16"])
    );
    // Teardown: the owned group goes whole; the user's network is never touched on its own.
    lock(&state).slow_delete = false;
    let _ = actuator.delete(&scope_of(azure_cluster(json!({})))).await;
    let deleted = lock(&state).calls("DELETE");
    assert!(
        !deleted
            .iter()
            .any(|d| d == "demo-vnet" || d.ends_with("-subnet")),
        "{deleted:?}"
    );
}

#[tokio::test]
async fn a_rule_others_added_is_kept_and_does_not_make_the_group_drift() {
    let (arm, state) = fake();
    let c = ctx();
    let id = c.security_group_id(SubnetRole::Node);
    {
        let mut st = lock(&state);
        st.insert(&c.group_id(), c.group_body());
        let mut nsg = c.security_group_body(SubnetRole::ControlPlane);
        if let Some(rules) = nsg["properties"]["securityRules"].as_array_mut() {
            rules.push(json!({"name": "k8s-azure-lb_allow_IPv4_80", "properties": {
                "protocol": "Tcp", "access": "Allow", "priority": 500, "direction": "Inbound",
                "provisioningState": "Succeeded"}}));
        }
        nsg["properties"]["provisioningState"] = json!("Succeeded");
        st.insert(&c.security_group_id(SubnetRole::ControlPlane), nsg);
        // The node group lacks a rule the spec wants: put, with the added one kept.
        let mut node = c.security_group_body(SubnetRole::Node);
        node["properties"]["securityRules"] = json!([{"name": "k8s-azure-lb_allow_IPv4_443",
            "properties": {"protocol": "Tcp", "access": "Allow", "priority": 501,
                           "direction": "Inbound", "provisioningState": "Succeeded"}}]);
        st.insert(&id, node);
    }
    let mut cluster = azure_cluster(json!({}));
    cluster.spec.network_spec.subnets = vec![crate::api::SubnetSpec {
        name: "demo-node-subnet".into(),
        role: SubnetRole::Node,
        security_group: Some(crate::api::SecurityGroup {
            security_rules: vec![crate::api::SecurityRule {
                name: "allow_node_port".into(),
                priority: Some(2300),
                destination_ports: Some("30000-32767".into()),
                ..crate::api::SecurityRule::default()
            }],
            ..crate::api::SecurityGroup::default()
        }),
        ..crate::api::SubnetSpec::default()
    }];
    let _ = actuator(arm).reconcile(&scope_of(cluster)).await;
    let st = lock(&state);
    let puts = st.calls("PUT");
    assert!(
        !puts.contains(&"demo-controlplane-nsg".to_string()),
        "{puts:?}"
    );
    assert!(puts.contains(&"demo-node-nsg".to_string()), "{puts:?}");
    let node = st.get(&id).cloned().unwrap_or_default();
    let names: Vec<&str> = node["properties"]["securityRules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        names,
        vec!["allow_node_port", "k8s-azure-lb_allow_IPv4_443"]
    );
    assert!(node["properties"]["securityRules"][1]["properties"]["provisioningState"].is_null());
}
