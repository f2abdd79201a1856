//! Wrong credentials, with no cloud involved: an `OpenStackCluster` whose `identityRef` names a
//! Secret that does not exist, then one whose `clouds.yaml` lacks the named cloud, then one that is
//! not YAML at all. Each ends in a `Ready=False` condition that names the Secret and what to fix; the
//! reconciler keeps running; and nothing of the Secret's content reaches the status or an event.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use capi_actuator::cluster::{self, InfraClusterReconciler};
use capi_core::api::Cluster;
use capi_runtime::ReconcilerOptions;
use capi_runtime::retry::RetryPolicy;
use capi_testing::TestEnv;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use provider_openstack::api::OpenStackCluster;
use provider_openstack::cluster::OpenStackClusterActuator;
use provider_openstack::connector::SecretConnector;
use serde_json::json;

const PASSWORD: &str = "never-shown-5f0c2a";

/// Waits until the OpenStackCluster's status holds every one of `needles`; returns the status.
async fn status_with(api: &Api<OpenStackCluster>, needles: &[&str]) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = serde_json::to_string(&api.get("demo").await.unwrap().status).unwrap();
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

/// Replaces the credentials Secret's `clouds.yaml`.
async fn put_clouds_yaml(secrets: &Api<Secret>, text: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "demo-cloud-config"},
        "stringData": {"clouds.yaml": text},
    }))
    .unwrap();
    match secrets.get_opt("demo-cloud-config").await.unwrap() {
        None => {
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .unwrap();
        }
        Some(existing) => {
            let mut secret = secret;
            secret.metadata.resource_version = existing.resource_version();
            secrets
                .replace("demo-cloud-config", &PostParams::default(), &secret)
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn wrong_credentials_end_in_a_condition_that_names_the_secret_and_never_its_content() {
    let mut crds = capi_core::crd::core();
    crds.extend(provider_openstack::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "demo"},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev",
                                       "kind": "OpenStackCluster", "name": "demo"}}
    }))
    .unwrap();
    let cluster = Api::<Cluster>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let infra: OpenStackCluster = serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackCluster",
        "metadata": {
            "name": "demo",
            "labels": {"cluster.x-k8s.io/cluster-name": "demo"},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                 "name": "demo", "uid": cluster.uid().unwrap(), "controller": true}]
        },
        "spec": {
            "identityRef": {"name": "demo-cloud-config", "cloudName": "openstack"},
            "managedSubnets": [{"cidr": "10.6.0.0/24"}]
        }
    }))
    .unwrap();
    let clusters: Api<OpenStackCluster> = Api::namespaced(env.client(), &ns);
    clusters
        .create(&PostParams::default(), &infra)
        .await
        .unwrap();

    let actuator = Arc::new(OpenStackClusterActuator::new(Arc::new(
        SecretConnector::new(env.client()),
    )));
    let reconciler = InfraClusterReconciler::<OpenStackCluster>::new(env.client(), actuator)
        .options(
            ReconcilerOptions::default()
                .namespace(&ns)
                .retry_policy(RetryPolicy {
                    backoff_base: Duration::from_millis(50),
                    backoff_cap: Duration::from_millis(500),
                    ..RetryPolicy::default()
                }),
        );
    let running = tokio::spawn(cluster::run(reconciler, std::future::pending()));

    status_with(
        &clusters,
        &[
            "CredentialsSecretNotFound",
            "demo-cloud-config",
            "does not exist",
        ],
    )
    .await;

    let secrets: Api<Secret> = Api::namespaced(env.client(), &ns);
    put_clouds_yaml(
        &secrets,
        &format!(
            "clouds:\n  staging:\n    auth:\n      auth_url: http://127.0.0.1:1/v3\n      \
             username: admin\n      password: {PASSWORD}\n      project_name: admin\n"
        ),
    )
    .await;
    let missing_cloud = status_with(
        &clusters,
        &["InvalidCredentials", "has no cloud", "\\\"openstack\\\""],
    )
    .await;

    put_clouds_yaml(&secrets, &format!("clouds: [{PASSWORD}\n")).await;
    let not_yaml = status_with(
        &clusters,
        &[
            "InvalidCredentials",
            "demo-cloud-config",
            "not a valid clouds.yaml",
        ],
    )
    .await;
    assert_ne!(missing_cloud, not_yaml, "each mistake is told apart");

    let events = Api::<Event>::namespaced(env.client(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    for text in [
        missing_cloud,
        not_yaml,
        serde_json::to_string(&events.items).unwrap(),
    ] {
        assert!(!text.contains(PASSWORD), "a credential leaked: {text}");
    }
    assert!(!running.is_finished(), "the reconciler stopped");
    running.abort();
}
