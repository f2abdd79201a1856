//! A tenant names a service principal that is not its own. The operator keeps an
//! `AzureClusterIdentity` and its Secret in the operator's namespace and admits namespaces with
//! `allowedNamespaces`; the namespace's owner — a ServiceAccount with only
//! `config/tenant-role.yaml` — writes its AzureCluster naming it. A namespace the identity does
//! not admit gets `NamespaceNotAllowedByIdentity` naming the identity and the namespace, and no
//! request (not even for a token) reaches Azure; an identity the tenant writes itself cannot hand
//! out another namespace's Secret.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use capi_core::ActuatorErrorKind;
use capi_testing::TestEnv;
use common::arm_server::{ArmServer, CLIENT, SECRET, TENANT};
use common::model_checker::ModelChecker;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use provider_azure::api::{AzureCluster, AzureClusterIdentity};
use provider_azure::arm::ResourceId;
use provider_azure::connector::{
    Connector, Endpoints, NAMESPACE_NOT_ALLOWED_BY_IDENTITY, SecretConnector,
};
use serde_json::json;

const SUBSCRIPTION: &str = "7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c";

fn identity(
    name: &str,
    secret: serde_json::Value,
    allowed: serde_json::Value,
) -> AzureClusterIdentity {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureClusterIdentity",
        "metadata": {"name": name},
        "spec": {"type": "ServicePrincipal", "tenantID": TENANT, "clientID": CLIENT,
                 "clientSecret": secret, "allowedNamespaces": allowed},
    }))
    .unwrap()
}

/// The tenant's AzureCluster `demo` naming `identity_ref`, created as the tenant.
async fn tenant_cluster(
    tenant: &Client,
    ns: &str,
    identity_ref: serde_json::Value,
) -> AzureCluster {
    let cluster: AzureCluster = serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureCluster",
        "metadata": {"name": "demo"},
        "spec": {"subscriptionID": SUBSCRIPTION, "location": "westeurope",
                 "identityRef": identity_ref},
    }))
    .unwrap();
    Api::<AzureCluster>::namespaced(tenant.clone(), ns)
        .patch(
            "demo",
            &PatchParams::apply("tenant").force(),
            &Patch::Apply(&cluster),
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn an_identity_admits_only_the_namespaces_it_lists_and_hands_out_only_its_own_secret() {
    let mut crds = capi_core::crd::core();
    crds.extend(provider_azure::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let operator_ns = env.namespace().await.unwrap();
    let role = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/tenant-role.yaml"),
    )
    .unwrap();
    let tenant = capi_testing::deployed::tenant_client(&env, &ns, &role, "cluster-api-tenant")
        .await
        .unwrap();
    let server = ArmServer::start(Arc::new(ModelChecker::start())).await;
    let connector = SecretConnector::new(env.client(), server.client()).with_endpoints(Endpoints {
        resource_manager: Some(server.url.clone()),
        authority_host: Some(server.url.clone()),
    });

    // The operator's service principal, for namespaces labelled team=blue.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "shared-sp"}, "stringData": {"clientSecret": SECRET},
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client(), &operator_ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    Api::<AzureClusterIdentity>::namespaced(env.client(), &operator_ns)
        .create(
            &PostParams::default(),
            &identity(
                "shared",
                json!({"name": "shared-sp"}),
                json!({"selector": {"matchLabels": {"team": "blue"}}}),
            ),
        )
        .await
        .unwrap();
    let cluster = tenant_cluster(
        &tenant,
        &ns,
        json!({"kind": "AzureClusterIdentity", "name": "shared", "namespace": operator_ns}),
    )
    .await;

    let denied = connector.connect(&cluster).await.err().unwrap();
    assert_eq!(denied.reason(), NAMESPACE_NOT_ALLOWED_BY_IDENTITY);
    assert_eq!(denied.kind(), ActuatorErrorKind::InvalidConfiguration);
    let message = denied.to_string();
    assert!(
        message.contains(&format!("AzureClusterIdentity {operator_ns}/shared"))
            && message.contains(&ns),
        "{message}"
    );
    assert!(!message.contains(SECRET), "{message}");

    // Admitted by its label: the identity's service principal reaches Azure.
    Api::<Namespace>::all(env.client())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "blue"}}})),
        )
        .await
        .unwrap();
    let group = ResourceId::resource_group(SUBSCRIPTION, "demo");
    {
        let world = server.world.lock().unwrap();
        assert_eq!(
            (world.tokens_issued, world.requests.len()),
            (0, 0),
            "a request reached Azure before the namespace was admitted"
        );
    }
    let admitted = connector.connect(&cluster).await.unwrap();
    admitted.get(&group).await.unwrap();
    assert_eq!(server.world.lock().unwrap().tokens_issued, 1);
    assert_eq!(connector.cached_clients(), 1);

    // Revoked: refused again (the client stays for namespaces still admitted).
    Api::<Namespace>::all(env.client())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": null}}})),
        )
        .await
        .unwrap();
    let revoked = connector.connect(&cluster).await.err().unwrap();
    assert_eq!(revoked.reason(), NAMESPACE_NOT_ALLOWED_BY_IDENTITY);

    // The tenant writes an identity of its own naming the operator's Secret: refused, unread.
    Api::<AzureClusterIdentity>::namespaced(tenant.clone(), &ns)
        .create(
            &PostParams::default(),
            &identity(
                "mine",
                json!({"name": "shared-sp", "namespace": operator_ns}),
                json!({}),
            ),
        )
        .await
        .unwrap();
    let cluster = tenant_cluster(
        &tenant,
        &ns,
        json!({"kind": "AzureClusterIdentity", "name": "mine"}),
    )
    .await;
    let stolen = connector.connect(&cluster).await.err().unwrap();
    assert_eq!(stolen.reason(), "InvalidIdentity");
    assert!(
        stolen.to_string().contains("identity's own namespace"),
        "{stolen}"
    );
    // And the tenant cannot read it either.
    let read = Api::<Secret>::namespaced(tenant.clone(), &operator_ns)
        .get("shared-sp")
        .await
        .unwrap_err();
    assert!(matches!(read, kube::Error::Api(s) if s.code == 403));
    assert_eq!(
        server.world.lock().unwrap().tokens_issued,
        1,
        "no new token"
    );
}
