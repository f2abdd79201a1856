//! The provider's ARM client against the ARM test server over TLS, with tokens from the server's
//! Entra ID endpoint: operations handed back and polled, never awaited; throttling, conflicts,
//! lost answers, failed and vanished operations as ARM shows them; ARM's remaining budget
//! honoured; every body checked against Azure's models — and a malformed one caught.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use capi_provider::support::redact::Redaction;
use common::arm_server::{ArmServer, CLIENT, SECRET, TENANT, Target};
use common::model_checker::ModelChecker;
use provider_azure::arm::{Arm, ArmClient, Deletion, ErrorClass, Poll, ResourceId, ResourceType};
use provider_azure::credentials::ClientCredentials;
use provider_azure::token::EntraTokens;
use serde_json::json;

const SUB: &str = "7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c";

async fn setup() -> (Arc<ArmServer>, ArmClient) {
    let server = ArmServer::start(Arc::new(ModelChecker::start())).await;
    let credentials = ClientCredentials::new(TENANT, CLIENT, SECRET);
    let tokens = EntraTokens::new(&credentials, &server.url, &server.url, server.client()).unwrap();
    let client = ArmClient::new(
        &server.url,
        Arc::new(tokens),
        server.client(),
        credentials.redaction(),
    )
    .unwrap();
    (server, client)
}

fn group() -> ResourceId {
    ResourceId::resource_group(SUB, "rg-demo")
}

fn vnet() -> ResourceId {
    ResourceId::new(SUB, "rg-demo", ResourceType::VirtualNetwork, "demo-vnet")
}

fn vnet_body() -> serde_json::Value {
    json!({"location": "westeurope", "properties": {"addressSpace": {"addressPrefixes": ["10.0.0.0/8"]}}})
}

async fn until_done(client: &ArmClient, url: &str) -> Poll {
    for _ in 0..50 {
        match client.poll(url).await.unwrap() {
            Poll::InProgress { retry_after } => {
                assert_eq!(retry_after, Some(Duration::from_secs(1)));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            done => return done,
        }
    }
    panic!("the operation never ended");
}

#[tokio::test]
async fn a_put_and_a_delete_are_handed_back_as_operations_and_polled() {
    let (server, client) = setup().await;
    let made = client
        .put(&group(), &json!({"location": "westeurope"}))
        .await
        .unwrap();
    assert_eq!(made.body["properties"]["provisioningState"], "Succeeded");
    assert!(made.operation.is_none(), "a resource group is made at once");

    let accepted = client.put(&vnet(), &vnet_body()).await.unwrap();
    assert_eq!(accepted.body["properties"]["provisioningState"], "Creating");
    let operation = accepted.operation.expect("an operation to follow");
    assert!(operation.polling_url.starts_with(&server.url));
    assert_eq!(
        client.poll(&operation.polling_url).await.unwrap(),
        Poll::InProgress {
            retry_after: Some(Duration::from_secs(1))
        }
    );
    assert_eq!(
        until_done(&client, &operation.polling_url).await,
        Poll::Succeeded
    );
    let read = client.get(&vnet()).await.unwrap().unwrap();
    assert_eq!(read["properties"]["provisioningState"], "Succeeded");
    assert_eq!(read["id"], vnet().to_string());

    let Deletion::Started(deleting) = client.delete(&vnet()).await.unwrap() else {
        panic!("a network's deletion is an operation");
    };
    assert_eq!(
        until_done(&client, &deleting.polling_url).await,
        Poll::Succeeded
    );
    assert_eq!(client.get(&vnet()).await.unwrap(), None);
    assert_eq!(client.delete(&vnet()).await.unwrap(), Deletion::Gone);
    // One token for all of it.
    assert_eq!(server.world.lock().unwrap().tokens_issued, 1);
    server.assert_clean();
    assert!(
        server.checked() >= 8,
        "bodies checked: {}",
        server.checked()
    );
}

#[tokio::test]
async fn throttling_conflicts_and_budgets_are_told_to_the_reconcile() {
    let (server, client) = setup().await;
    client
        .put(&group(), &json!({"location": "westeurope"}))
        .await
        .unwrap();
    server.faults(|f| f.throttle.push((Target::any(), 1)));
    let throttled = client.get(&vnet()).await.unwrap_err();
    assert_eq!(
        throttled.class(),
        ErrorClass::Throttled(Duration::from_secs(1))
    );

    server.faults(|f| {
        f.conflict
            .push((Target::of("PUT", ResourceType::VirtualNetwork), 1));
    });
    let conflict = client.put(&vnet(), &vnet_body()).await.unwrap_err();
    assert_eq!(conflict.class(), ErrorClass::Conflict);
    assert_eq!(conflict.code, "AnotherOperationInProgress");

    // ARM says 3 writes are left: the next write waits instead of spending them.
    server.faults(|f| f.remaining_writes = Some(3));
    client.put(&vnet(), &vnet_body()).await.unwrap();
    let held = client.put(&vnet(), &vnet_body()).await.unwrap_err();
    assert!(matches!(held.class(), ErrorClass::Throttled(_)), "{held}");
    assert_eq!(held.code, "SubscriptionBudgetLow");
    // Reads are not held back.
    assert!(client.get(&vnet()).await.unwrap().is_some());
    server.assert_clean();
}

#[tokio::test]
async fn a_lost_answer_failed_and_vanished_operations_are_seen_for_what_they_are() {
    let (server, client) = setup().await;
    client
        .put(&group(), &json!({"location": "westeurope"}))
        .await
        .unwrap();

    server.faults(|f| {
        f.lose_response
            .push(Target::of("PUT", ResourceType::VirtualNetwork));
    });
    let lost = client.put(&vnet(), &vnet_body()).await.unwrap_err();
    assert_eq!(lost.status, None, "{lost}");
    assert_eq!(lost.class(), ErrorClass::Transient);
    // It happened all the same: the network is there.
    assert!(client.get(&vnet()).await.unwrap().is_some());

    let nsg = ResourceId::new(
        SUB,
        "rg-demo",
        ResourceType::NetworkSecurityGroup,
        "demo-nsg",
    );
    let nsg_body = json!({"location": "westeurope", "properties": {"securityRules": []}});
    server.faults(|f| {
        f.fail_operation
            .push(Target::of("PUT", ResourceType::NetworkSecurityGroup));
    });
    let accepted = client.put(&nsg, &nsg_body).await.unwrap();
    let Poll::Failed(error) = until_done(&client, &accepted.operation.unwrap().polling_url).await
    else {
        panic!("the operation was to fail");
    };
    assert_eq!(error.code, "InternalOperationError");
    let read = client.get(&nsg).await.unwrap().unwrap();
    assert_eq!(read["properties"]["provisioningState"], "Failed");

    server.faults(|f| {
        f.vanish_operation
            .push(Target::of("PUT", ResourceType::NetworkSecurityGroup));
    });
    let accepted = client.put(&nsg, &nsg_body).await.unwrap();
    assert_eq!(
        client
            .poll(&accepted.operation.unwrap().polling_url)
            .await
            .unwrap(),
        Poll::Vanished
    );
    // A polling URL elsewhere is never followed (the token does not go there).
    let before = server.world.lock().unwrap().requests.len();
    assert_eq!(
        client
            .poll("https://evil.example/subscriptions/x/operations/1")
            .await
            .unwrap(),
        Poll::Vanished
    );
    assert_eq!(server.world.lock().unwrap().requests.len(), before);
    server.assert_clean();
}

#[tokio::test]
async fn dependent_resources_cannot_be_deleted_and_references_must_exist() {
    let (server, client) = setup().await;
    client
        .put(&group(), &json!({"location": "westeurope"}))
        .await
        .unwrap();
    client.put(&vnet(), &vnet_body()).await.unwrap();
    let subnet = vnet().child(ResourceType::Subnet, "node-subnet");
    client
        .put(
            &subnet,
            &json!({"properties": {"addressPrefixes": ["10.1.0.0/16"]}}),
        )
        .await
        .unwrap();
    let nic = ResourceId::new(SUB, "rg-demo", ResourceType::NetworkInterface, "m-0-nic");
    let nic_body = json!({"location": "westeurope", "properties": {"ipConfigurations": [
        {"name": "pipConfig", "properties": {"subnet": {"id": subnet.to_string()}, "privateIPAllocationMethod": "Dynamic", "primary": true}}
    ]}});
    client.put(&nic, &nic_body).await.unwrap();
    let refused = client.delete(&subnet).await.unwrap_err();
    assert_eq!(refused.code, "InUseSubnetCannotBeDeleted");
    assert_eq!(refused.class(), ErrorClass::Conflict);
    let read = client.get(&subnet).await.unwrap().unwrap();
    assert_eq!(
        read["properties"]["ipConfigurations"][0]["id"],
        format!("{nic}/ipConfigurations/pipConfig")
    );

    let missing = ResourceId::new(SUB, "rg-demo", ResourceType::NetworkInterface, "m-1-nic");
    let dangling = json!({"location": "westeurope", "properties": {"ipConfigurations": [
        {"name": "pipConfig", "properties": {"subnet": {"id": vnet().child(ResourceType::Subnet, "nope").to_string()}, "privateIPAllocationMethod": "Dynamic"}}
    ]}});
    let refused = client.put(&missing, &dangling).await.unwrap_err();
    assert_eq!(refused.code, "InvalidResourceReference");
    // Retried: what it refers to may yet be made.
    assert_eq!(refused.class(), ErrorClass::Transient);
    server.assert_clean();
}

#[tokio::test]
async fn a_malformed_request_fails_the_model_check() {
    let (server, client) = setup().await;
    client
        .put(&group(), &json!({"location": "westeurope"}))
        .await
        .unwrap();
    // `addressPrefixes` where ARM has `addressSpace.addressPrefixes`, and a read-only property.
    let malformed = json!({"location": "westeurope", "properties": {
        "addressPrefixes": ["10.0.0.0/8"],
        "provisioningState": "Succeeded"
    }});
    let refused = client.put(&vnet(), &malformed).await.unwrap_err();
    assert_eq!(refused.code, "ModelViolation");
    let violations = server.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].contains("addressPrefixes"), "{violations:?}");
    assert!(
        violations[0].contains("provisioningState"),
        "{violations:?}"
    );
    assert_eq!(client.get(&vnet()).await.unwrap(), None, "nothing was made");
}

#[tokio::test]
async fn only_https_and_only_issued_tokens() {
    let (server, _) = setup().await;
    let credentials = ClientCredentials::new(TENANT, CLIENT, SECRET);
    let tokens = EntraTokens::new(&credentials, &server.url, &server.url, server.client()).unwrap();
    let insecure = ArmClient::new(
        "http://127.0.0.1:1",
        Arc::new(tokens),
        server.client(),
        Redaction::default(),
    )
    .unwrap_err();
    assert_eq!(insecure.code, "InsecureEndpoint");

    let wrong = ClientCredentials::new(TENANT, CLIENT, "not-the-secret-at-all");
    let tokens = EntraTokens::new(&wrong, &server.url, &server.url, server.client()).unwrap();
    let client = ArmClient::new(
        &server.url,
        Arc::new(tokens),
        server.client(),
        wrong.redaction(),
    )
    .unwrap();
    let refused = client.get(&group()).await.unwrap_err();
    assert_eq!(refused.code, "CredentialsRefused");
    // The token endpoint echoes what it was sent; the error must not.
    assert!(refused.to_string().contains("AADSTS7000215"), "{refused}");
    assert!(!refused.to_string().contains("not-the-secret-at-all"));
    server.assert_clean();
}

#[tokio::test]
async fn an_operation_followed_by_its_location_alone_ends_as_arm_says() {
    let (server, client) = setup().await;
    client
        .put(&group(), &json!({"location": "westeurope"}))
        .await
        .unwrap();
    server.faults(|f| f.location_only = true);
    let accepted = client.put(&vnet(), &vnet_body()).await.unwrap();
    let url = accepted.operation.unwrap().polling_url;
    assert!(url.contains("/operationResults/"), "{url}");
    assert_eq!(
        client.poll(&url).await.unwrap(),
        Poll::InProgress {
            retry_after: Some(Duration::from_secs(1))
        }
    );
    assert_eq!(until_done(&client, &url).await, Poll::Succeeded);

    server.faults(|f| {
        f.fail_operation
            .push(Target::of("PUT", ResourceType::NetworkSecurityGroup));
    });
    let nsg = ResourceId::new(
        SUB,
        "rg-demo",
        ResourceType::NetworkSecurityGroup,
        "demo-nsg",
    );
    let accepted = client
        .put(
            &nsg,
            &json!({"location": "westeurope", "properties": {"securityRules": []}}),
        )
        .await
        .unwrap();
    let Poll::Failed(error) = until_done(&client, &accepted.operation.unwrap().polling_url).await
    else {
        panic!("the operation was to fail");
    };
    assert_eq!(error.code, "InternalOperationError");

    let Deletion::Started(deleting) = client.delete(&vnet()).await.unwrap() else {
        panic!("deleting");
    };
    assert_eq!(
        until_done(&client, &deleting.polling_url).await,
        Poll::Succeeded
    );
    assert_eq!(client.get(&vnet()).await.unwrap(), None);
    server.assert_clean();
}
