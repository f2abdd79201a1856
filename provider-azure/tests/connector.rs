//! The production connector against a real API server and the ARM test server: the identityRef
//! Secret read from the cluster's namespace, one client (and one token) shared by every
//! reconcile while the Secret is unchanged, a new client with a new token once it changes, none
//! once it is deleted; a
//! missing Secret or a missing key retried with a message naming what to fix, never the secret.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use capi_core::ActuatorErrorKind;
use capi_testing::TestEnv;
use common::arm_server::{ArmServer, CLIENT, SECRET, TENANT};
use common::model_checker::ModelChecker;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use provider_azure::api::AzureCluster;
use provider_azure::arm::ResourceId;
use provider_azure::connector::{Connector, Endpoints, SecretConnector};
use serde_json::json;

fn cluster(namespace: &str) -> AzureCluster {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureCluster",
        "metadata": {"name": "demo", "namespace": namespace},
        "spec": {"subscriptionID": "7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c",
                 "location": "westeurope",
                 "identityRef": {"name": "azure-sp", "kind": "Secret"}},
    }))
    .unwrap()
}

#[tokio::test]
async fn one_client_per_secret_version_and_a_new_token_when_it_changes() {
    let env = TestEnv::start().await.unwrap();
    let namespace = env.namespace().await.unwrap();
    let server = ArmServer::start(Arc::new(ModelChecker::start())).await;
    let connector = SecretConnector::new(env.client(), server.client()).with_endpoints(Endpoints {
        resource_manager: Some(server.url.clone()),
        authority_host: Some(server.url.clone()),
    });
    let cluster = cluster(&namespace);

    let missing = connector.connect(&cluster).await.err().unwrap();
    assert_eq!(missing.kind(), ActuatorErrorKind::Transient);
    assert!(missing.to_string().contains("azure-sp"), "{missing}");

    let secrets: Api<Secret> = Api::namespaced(env.client(), &namespace);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "azure-sp"},
        "stringData": {"tenantID": TENANT, "clientID": CLIENT},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let incomplete = connector.connect(&cluster).await.err().unwrap();
    assert!(
        incomplete.to_string().contains("clientSecret"),
        "{incomplete}"
    );

    secrets
        .patch(
            "azure-sp",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"clientSecret": SECRET}})),
        )
        .await
        .unwrap();
    let group = ResourceId::resource_group("7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c", "demo");
    let first = connector.connect(&cluster).await.unwrap();
    first.get(&group).await.unwrap();
    let again = connector.connect(&cluster).await.unwrap();
    again.get(&group).await.unwrap();
    assert!(
        Arc::ptr_eq(&first, &again),
        "one client while the Secret is unchanged"
    );
    assert_eq!(
        server.world.lock().unwrap().tokens_issued,
        1,
        "one token for both"
    );

    // The Secret changes (a rotated secret): a new client, a new token.
    secrets
        .patch(
            "azure-sp",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"rotated": "1"}}})),
        )
        .await
        .unwrap();
    let rotated = connector.connect(&cluster).await.unwrap();
    assert!(!Arc::ptr_eq(&first, &rotated));
    rotated.get(&group).await.unwrap();
    assert_eq!(server.world.lock().unwrap().tokens_issued, 2);

    // A secret Entra ID refuses: retried, never shown.
    secrets
        .patch(
            "azure-sp",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"clientSecret": "not-the-secret-1234"}})),
        )
        .await
        .unwrap();
    let refused = connector.connect(&cluster).await.unwrap();
    let error = refused.get(&group).await.unwrap_err();
    assert_eq!(error.code, "CredentialsRefused");
    let shown = error.into_actuator("reading the resource group");
    assert_eq!(shown.kind(), ActuatorErrorKind::Transient);
    assert!(!shown.to_string().contains("not-the-secret-1234"));
    assert_eq!(
        connector.cached_clients(),
        1,
        "only the current version's client"
    );

    // The Secret is deleted: its client (and token) go with it.
    secrets
        .delete("azure-sp", &Default::default())
        .await
        .unwrap();
    let gone = connector.connect(&cluster).await.err().unwrap();
    assert_eq!(gone.kind(), ActuatorErrorKind::Transient);
    assert_eq!(
        connector.cached_clients(),
        0,
        "nothing of the deleted Secret is kept"
    );

    let mut without = cluster.clone();
    without.spec.identity_ref = None;
    let error = connector.connect(&without).await.err().unwrap();
    assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
    server.assert_clean();
}
