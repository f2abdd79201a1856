//! Credentials that are missing, incomplete or refused, through the generic loop on a real API
//! server with the production connector (identity Secrets read from the API server) and AWS
//! behind the fault-injecting proxy: each ends in a `Ready=False` condition that names the Secret
//! and what to fix, the reconciler keeps running, and no credential value — access key ID, secret
//! key, session token — reaches the status, an event or a log line (all captured at TRACE, with
//! the SDK targets the manager silences silenced), even when AWS's answer quotes the signed
//! request as `SignatureDoesNotMatch` does.
#![cfg(feature = "sdk")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capi_actuator::cluster::{self, InfraClusterReconciler};
use capi_core::api::Cluster;
use capi_runtime::ReconcilerOptions;
use capi_runtime::retry::RetryPolicy;
use capi_testing::TestEnv;
use common::proxy::FaultProxy;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use provider_aws::api::AWSCluster;
use provider_aws::cluster::AwsClusterActuator;
use provider_aws::connector::SecretConnector;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

const ACCESS_KEY: &str = "AKIAQX3NEVERSHOWN7Z";
const SECRET_KEY: &str = "never/shown+secret-9c1d2e3f4a5b6c7d8e9f";
const SESSION_TOKEN: &str = "IQoJb3JpZ2luX2VjNEVERSHOWNtoken0123456789abcdef";

/// Every log line of this test process.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn status_with(api: &Api<AWSCluster>, needles: &[&str]) -> String {
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

async fn put_secret(secrets: &Api<Secret>, data: serde_json::Value) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "demo-aws-credentials"}, "stringData": data,
    }))
    .unwrap();
    match secrets.get_opt("demo-aws-credentials").await.unwrap() {
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
                .replace("demo-aws-credentials", &PostParams::default(), &secret)
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn wrong_credentials_end_in_conditions_and_no_credential_is_ever_shown() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish()
        .with(capi_runtime::telemetry::without_body_traces(
            provider_aws::cloud::SDK_LOG_TARGETS.to_vec(),
        ))
        .try_init()
        .unwrap();

    let mut crds = capi_core::crd::core();
    crds.extend(provider_aws::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "demo"},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev",
                                       "kind": "AWSCluster", "name": "demo"}}
    }))
    .unwrap();
    let cluster = Api::<Cluster>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let infra: AWSCluster = serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSCluster",
        "metadata": {
            "name": "demo",
            "labels": {"cluster.x-k8s.io/cluster-name": "demo"},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                 "name": "demo", "uid": cluster.uid().unwrap(), "controller": true}]
        },
        "spec": {"region": "us-east-1",
                 "identityRef": {"kind": "Secret", "name": "demo-aws-credentials"}}
    }))
    .unwrap();
    let clusters: Api<AWSCluster> = Api::namespaced(env.client(), &ns);
    clusters
        .create(&PostParams::default(), &infra)
        .await
        .unwrap();

    let proxy = FaultProxy::start().await;
    proxy.faults.lock().unwrap().refuse_all = Some((
        "SignatureDoesNotMatch".into(),
        format!(
            "The request signature we calculated does not match the signature you provided. \
             The Canonical String for this request should have been 'POST / \
             x-amz-security-token:{SESSION_TOKEN} Credential={ACCESS_KEY}/20261126/us-east-1/ec2' \
             and secret {SECRET_KEY}"
        ),
    ));
    let connector = SecretConnector::new(env.client()).with_endpoint_url(&proxy.url);
    let actuator = Arc::new(AwsClusterActuator::new(Arc::new(connector)));
    let reconciler = InfraClusterReconciler::<AWSCluster>::new(env.client(), actuator).options(
        ReconcilerOptions::default()
            .namespace(&ns)
            .retry_policy(RetryPolicy {
                backoff_base: Duration::from_millis(50),
                backoff_cap: Duration::from_millis(500),
                ..RetryPolicy::default()
            }),
    );
    let running = tokio::spawn(cluster::run(reconciler, std::future::pending()));

    let missing = status_with(
        &clusters,
        &[
            "CredentialsSecretNotFound",
            "demo-aws-credentials",
            "does not exist",
        ],
    )
    .await;

    let secrets: Api<Secret> = Api::namespaced(env.client(), &ns);
    put_secret(&secrets, json!({"AccessKeyID": ACCESS_KEY})).await;
    let incomplete = status_with(&clusters, &["InvalidCredentials", "SecretAccessKey"]).await;

    put_secret(
        &secrets,
        json!({"AccessKeyID": ACCESS_KEY, "SecretAccessKey": SECRET_KEY,
               "SessionToken": SESSION_TOKEN}),
    )
    .await;
    let refused = status_with(
        &clusters,
        &["AuthenticationFailed", "AWS refused the credentials"],
    )
    .await;
    assert!(!running.is_finished(), "the reconciler stopped");
    running.abort();

    let events = Api::<Event>::namespaced(env.client(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let logs = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    assert!(
        logs.contains("SignatureDoesNotMatch"),
        "the refusal was logged (by its code)"
    );
    for (what, text) in [
        ("status", format!("{missing}{incomplete}{refused}")),
        ("events", serde_json::to_string(&events.items).unwrap()),
        ("logs", logs),
    ] {
        for credential in [ACCESS_KEY, SECRET_KEY, SESSION_TOKEN] {
            let line = text.lines().find(|l| l.contains(credential));
            assert!(line.is_none(), "{credential} in the {what}: {line:?}");
        }
    }
}

#[tokio::test]
async fn the_clients_of_a_deleted_identity_secret_are_dropped() {
    use provider_aws::connector::Connector;
    let env = TestEnv::start_with_crds(&provider_aws::api::crds())
        .await
        .unwrap();
    let ns = env.namespace().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(env.client(), &ns);
    put_secret(
        &secrets,
        json!({"AccessKeyID": "AKIAEXAMPLE", "SecretAccessKey": "not-a-real-key-1234"}),
    )
    .await;
    let mut infra: AWSCluster = serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSCluster",
        "metadata": {"name": "demo"},
        "spec": {"region": "us-east-1",
                 "identityRef": {"kind": "Secret", "name": "demo-aws-credentials"}}
    }))
    .unwrap();
    infra.metadata.namespace = Some(ns.clone());
    // No call reaches AWS: connecting only reads the Secret and builds the clients.
    let connector = SecretConnector::new(env.client()).with_endpoint_url("http://127.0.0.1:9");
    connector.connect(&infra).await.unwrap();
    connector.connect(&infra).await.unwrap();
    assert_eq!(connector.cached_clients(), 1);
    secrets
        .delete("demo-aws-credentials", &Default::default())
        .await
        .unwrap();
    let error = connector.connect(&infra).await.err().unwrap();
    assert!(error.to_string().contains("does not exist"), "{error}");
    assert_eq!(
        connector.cached_clients(),
        0,
        "nothing made from the deleted credentials is kept"
    );
}
