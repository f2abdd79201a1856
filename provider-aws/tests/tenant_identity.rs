//! A tenant names an AWS identity an operator did not hand to its namespace. The namespace's
//! owner — a ServiceAccount with only `config/tenant-role.yaml` — writes its Cluster and
//! AWSCluster; the operator's cluster-scoped identities (which the tenant cannot create) say
//! which namespaces may use them. A cluster its identity does not admit gets
//! `PrincipalUsageUnauthorized` (or `SourcePrincipalUsageUnauthorized` for the identity a role's
//! credentials come from) naming the identity and the namespace, and **no request** reaches AWS:
//! every request goes through a recording proxy in front of moto, and its log stays empty. An
//! admitted cluster reaches AWS; a revoked one stops at its next reconcile.
#![cfg(feature = "sdk")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use capi_actuator::cluster::{self, InfraClusterReconciler};
use capi_runtime::ReconcilerOptions;
use capi_runtime::retry::RetryPolicy;
use capi_testing::{TestEnv, manifest};
use common::proxy::FaultProxy;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use provider_aws::api::{
    AWSCluster, AWSClusterRoleIdentity, AWSClusterStaticIdentity, AWSClusterStaticIdentitySpec,
};
use provider_aws::cluster::AwsClusterActuator;
use provider_aws::connector::SecretConnector;
use serde_json::json;

const ACCESS_KEY: &str = "AKIAQX3TENANTNEVER7Z";
const SECRET_KEY: &str = "operator/only+secret-0a1b2c3d4e5f60718293";

/// The test's world: the API server, the tenant's namespace and client, the manager's
/// namespace (where static identities' Secrets live), the proxy in front of moto.
struct World {
    env: TestEnv,
    ns: String,
    tenant: Client,
    manager_ns: String,
    proxy: FaultProxy,
}

impl World {
    async fn new() -> Self {
        let mut crds = capi_core::crd::core();
        crds.extend(provider_aws::api::crds());
        let env = TestEnv::start_with_crds(&crds).await.unwrap();
        let ns = env.namespace().await.unwrap();
        let manager_ns = env.namespace().await.unwrap();
        let role = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/tenant-role.yaml"),
        )
        .unwrap();
        let tenant = capi_testing::deployed::tenant_client(&env, &ns, &role, "cluster-api-tenant")
            .await
            .unwrap();
        let proxy = FaultProxy::start().await;
        Self {
            env,
            ns,
            tenant,
            manager_ns,
            proxy,
        }
    }

    /// The tenant's Cluster and AWSCluster `demo`, naming `identity_ref`.
    async fn tenant_cluster(&self, identity_ref: serde_json::Value) {
        let cluster = r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo}
spec:
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: AWSCluster, name: demo}
"#;
        let created =
            manifest::create_all(&self.tenant, &self.ns, &manifest::parse(cluster).unwrap())
                .await
                .unwrap();
        let uid = created[0].metadata.uid.clone().unwrap();
        let infra: AWSCluster = serde_json::from_value(json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSCluster",
            "metadata": {"name": "demo", "labels": {"cluster.x-k8s.io/cluster-name": "demo"},
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2",
                             "kind": "Cluster", "name": "demo", "uid": uid, "controller": true}]},
            "spec": {"region": common::REGION, "identityRef": identity_ref},
        }))
        .unwrap();
        Api::<AWSCluster>::namespaced(self.tenant.clone(), &self.ns)
            .create(&PostParams::default(), &infra)
            .await
            .unwrap();
    }

    /// The operator's Secret `name` of static credentials in the manager's namespace.
    async fn operator_secret(&self, name: &str) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name},
            "stringData": {"AccessKeyID": ACCESS_KEY, "SecretAccessKey": SECRET_KEY},
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.env.client(), &self.manager_ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// The AWSCluster reconciler of the tenant's namespace, as the manager runs it.
    fn reconcile(&self) -> tokio::task::JoinHandle<()> {
        let connector = SecretConnector::new(self.env.client())
            .with_endpoint_url(&self.proxy.url)
            .with_identity_namespace(&self.manager_ns);
        let actuator = Arc::new(AwsClusterActuator::new(Arc::new(connector)));
        let reconciler = InfraClusterReconciler::<AWSCluster>::new(self.env.client(), actuator)
            .options(
                ReconcilerOptions::default()
                    .namespace(&self.ns)
                    .retry_policy(RetryPolicy {
                        backoff_base: Duration::from_millis(50),
                        backoff_cap: Duration::from_millis(300),
                        // A refusal is an invalid configuration (the tenant or the operator must
                        // act): looked at again after this long, without a spec change.
                        invalid_retry: Duration::from_millis(300),
                        ..RetryPolicy::default()
                    }),
            );
        tokio::spawn(cluster::run(reconciler, std::future::pending()))
    }

    /// The AWSCluster's status once it holds every needle (read as the tenant).
    async fn status_with(&self, needles: &[&str]) -> String {
        let clusters: Api<AWSCluster> = Api::namespaced(self.tenant.clone(), &self.ns);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let status =
                serde_json::to_string(&clusters.get("demo").await.unwrap().status).unwrap();
            if needles.iter().all(|n| status.contains(n)) {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no status with {needles:?}; last: {status}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn received(&self) -> Vec<String> {
        self.proxy.faults.lock().unwrap().received.clone()
    }

    async fn label_namespace(&self, labels: serde_json::Value) {
        Api::<Namespace>::all(self.env.client())
            .patch(
                &self.ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": labels}})),
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn an_identity_that_does_not_admit_the_namespace_lets_no_request_reach_aws() {
    let world = World::new().await;
    // A tenant cannot hand itself an identity: the kinds are cluster-scoped.
    let forged = AWSClusterStaticIdentity::new(
        "mine",
        AWSClusterStaticIdentitySpec {
            allowed_namespaces: Some(capi_core::api::AllowedNamespaces::all()),
            secret_ref: "operator-credentials".into(),
        },
    );
    let refused = Api::<AWSClusterStaticIdentity>::all(world.tenant.clone())
        .create(&PostParams::default(), &forged)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(status) if status.code == 403),
        "{refused}"
    );

    // The operator's identity, for namespaces labelled team=blue only.
    world.operator_secret("operator-credentials").await;
    let identity: AWSClusterStaticIdentity = serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSClusterStaticIdentity",
        "metadata": {"name": "shared"},
        "spec": {"secretRef": "operator-credentials",
                 "allowedNamespaces": {"list": ["team-blue-prod"],
                                       "selector": {"matchLabels": {"team": "blue"}}}},
    }))
    .unwrap();
    Api::<AWSClusterStaticIdentity>::all(world.env.client())
        .create(&PostParams::default(), &identity)
        .await
        .unwrap();
    // Were a request to go out, AWS would refuse it: nothing is made in moto either way.
    world.proxy.faults.lock().unwrap().refuse_all = Some((
        "AuthFailure".into(),
        "AWS was not able to validate the provided access credentials".into(),
    ));
    world
        .tenant_cluster(json!({"kind": "AWSClusterStaticIdentity", "name": "shared"}))
        .await;
    let running = world.reconcile();

    let denied = world
        .status_with(&[
            "PrincipalUsageUnauthorized",
            "AWSClusterStaticIdentity shared",
            &world.ns,
        ])
        .await;
    // Retried a while (the identity may change): still no request.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        world.received(),
        Vec::<String>::new(),
        "a request reached AWS"
    );
    let operator_secret = || async {
        Api::<Secret>::namespaced(world.env.client(), &world.manager_ns)
            .get("operator-credentials")
            .await
            .unwrap()
    };
    assert_eq!(
        operator_secret().await.metadata.owner_references,
        None,
        "a refused cluster's reconcile changed the operator's Secret"
    );

    // The operator admits the namespace by its label: the next reconcile reaches AWS.
    world.label_namespace(json!({"team": "blue"})).await;
    world.status_with(&["AuthenticationFailed"]).await;
    assert!(!world.received().is_empty());
    // The identity in use owns its Secret (as CAPA's does), so that `clusterctl move`, which
    // carries a provider namespace's Secret only with an object that owns it, carries it with the
    // identity.
    let uid = Api::<AWSClusterStaticIdentity>::all(world.env.client())
        .get("shared")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let owners = operator_secret().await.metadata.owner_references.unwrap();
    assert!(
        owners
            .iter()
            .any(|o| o.uid == uid && o.kind == "AWSClusterStaticIdentity" && o.name == "shared"),
        "{owners:?}"
    );

    // And revokes it: no request after the cluster says so.
    world.label_namespace(json!({"team": null})).await;
    world.status_with(&["PrincipalUsageUnauthorized"]).await;
    let before = world.received().len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        world.received().len(),
        before,
        "a request after the revocation"
    );
    assert!(!running.is_finished(), "the reconciler stopped");
    running.abort();
    for credential in [ACCESS_KEY, SECRET_KEY] {
        assert!(!denied.contains(credential), "{denied}");
    }
}

#[tokio::test]
async fn without_identity_ref_a_cluster_needs_the_controller_identity_to_admit_it() {
    let world = World::new().await;
    world.proxy.faults.lock().unwrap().refuse_all = Some((
        "AuthFailure".into(),
        "AWS was not able to validate the provided access credentials".into(),
    ));
    world.tenant_cluster(serde_json::Value::Null).await;
    let running = world.reconcile();
    world
        .status_with(&[
            "IdentityNotFound",
            "AWSClusterControllerIdentity default does not exist",
        ])
        .await;

    // The controller identity for other namespaces only.
    let identity = |allowed: serde_json::Value| {
        serde_json::from_value::<provider_aws::api::AWSClusterControllerIdentity>(json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1",
            "kind": "AWSClusterControllerIdentity",
            "metadata": {"name": "default"},
            "spec": {"allowedNamespaces": allowed},
        }))
        .unwrap()
    };
    let identities =
        Api::<provider_aws::api::AWSClusterControllerIdentity>::all(world.env.client());
    identities
        .create(
            &PostParams::default(),
            &identity(json!({"list": ["elsewhere"]})),
        )
        .await
        .unwrap();
    world
        .status_with(&[
            "PrincipalUsageUnauthorized",
            "AWSClusterControllerIdentity default",
        ])
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        world.received(),
        Vec::<String>::new(),
        "a request reached AWS"
    );

    // A singleton whose spec cannot change: the API server says so.
    let changed = identities
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"allowedNamespaces": {"list": [world.ns]}}})),
        )
        .await
        .unwrap_err();
    assert!(changed.to_string().contains("immutable"), "{changed}");
    let mut other = identity(json!({}));
    other.metadata.name = Some("another".into());
    let named = identities
        .create(&PostParams::default(), &other)
        .await
        .unwrap_err();
    assert!(named.to_string().contains("singleton"), "{named}");

    // Recreated for every namespace: the manager's own credentials are used — here the SDK's
    // default chain, which finds none in this test process, so the cluster says so.
    identities
        .delete("default", &Default::default())
        .await
        .unwrap();
    identities
        .create(&PostParams::default(), &identity(json!({})))
        .await
        .unwrap();
    world
        .status_with(&["CloudAPIError", "loading credentials"])
        .await;
    running.abort();
}

#[tokio::test]
async fn a_role_identity_assumes_its_role_with_a_source_that_must_admit_the_namespace_too() {
    let world = World::new().await;
    // The role lives in an account of its own: moto runs what the assumed credentials do there.
    let account = common::fresh_account();
    world.operator_secret("operator-credentials").await;
    let source: AWSClusterStaticIdentity = serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSClusterStaticIdentity",
        "metadata": {"name": "source"},
        "spec": {"secretRef": "operator-credentials", "allowedNamespaces": {"list": [world.ns]}},
    }))
    .unwrap();
    let sources = Api::<AWSClusterStaticIdentity>::all(world.env.client());
    sources
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    let role: AWSClusterRoleIdentity = serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSClusterRoleIdentity",
        "metadata": {"name": "team-role"},
        "spec": {"roleARN": format!("arn:aws:iam::{account}:role/capi-rs-tenant"),
                 "externalID": "capi-rs-test",
                 "allowedNamespaces": {},
                 "sourceIdentityRef": {"kind": "AWSClusterStaticIdentity", "name": "source"}},
    }))
    .unwrap();
    Api::<AWSClusterRoleIdentity>::all(world.env.client())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    world
        .tenant_cluster(json!({"kind": "AWSClusterRoleIdentity", "name": "team-role"}))
        .await;
    let running = world.reconcile();

    // The cluster's VPC appears in the role's account: the calls ran with assumed credentials.
    let moto = common::Moto::in_account(&account);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let vpcs = moto.ec2.describe_vpcs().send().await.unwrap();
        let ours = vpcs.vpcs().iter().any(|vpc| {
            vpc.tags()
                .iter()
                .any(|t| t.key() == Some("Name") && t.value().is_some_and(|v| v.contains("demo")))
        });
        if ours {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no VPC in the role's account; requests: {:?}",
            world.received()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let received = world.received();
    assert_eq!(
        received.first().map(String::as_str),
        Some("AssumeRole"),
        "{received:?}"
    );

    // The source no longer admits the namespace: the role cannot be used either.
    sources
        .patch(
            "source",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"allowedNamespaces": {"list": ["elsewhere"]}}})),
        )
        .await
        .unwrap();
    world
        .status_with(&[
            "SourcePrincipalUsageUnauthorized",
            "AWSClusterStaticIdentity source",
        ])
        .await;
    let before = world.received().len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        world.received().len(),
        before,
        "a request after the revocation"
    );
    running.abort();
}
