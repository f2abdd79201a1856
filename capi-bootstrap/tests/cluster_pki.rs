//! A cluster's stored PKI on a real API server, written by `cluster_pki::ensure_new` by a writer
//! that expects none: nothing read first, nothing generated twice, a stored PKI read instead, and
//! a user's partial PKI never completed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use capi_bootstrap::cluster_pki;
use capi_core::api::Cluster;
use capi_testing::TestEnv;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const SECRETS: [&str; 5] = [
    "demo-ca",
    "demo-etcd",
    "demo-proxy",
    "demo-sa",
    "demo-kubeconfig",
];
const SERVER: &str = "https://10.0.0.10:6443";

/// A client of `env` that records the method of each request for a Secret.
async fn recording_client(env: &TestEnv) -> (Client, Arc<Mutex<Vec<http::Method>>>) {
    let seen: Arc<Mutex<Vec<http::Method>>> = Arc::default();
    let record = Arc::clone(&seen);
    let layer =
        tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            if request.uri().path().contains("/secrets") {
                record.lock().unwrap().push(request.method().clone());
            }
            request
        });
    let config = env.control_plane().config().await.unwrap();
    let client = kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build();
    (client, seen)
}

async fn environment() -> (TestEnv, String, Cluster) {
    let env = TestEnv::start_with_crds(&capi_core::crd::core())
        .await
        .unwrap();
    let ns = env.namespace().await.unwrap();
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "demo"},
        "spec": {"controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443}}
    }))
    .unwrap();
    let cluster = Api::<Cluster>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    (env, ns, cluster)
}

fn counts(seen: &Mutex<Vec<http::Method>>) -> (usize, usize) {
    let seen = seen.lock().unwrap();
    let reads = seen.iter().filter(|m| **m == http::Method::GET).count();
    let creates = seen.iter().filter(|m| **m == http::Method::POST).count();
    (reads, creates)
}

async fn stored(secrets: &Api<Secret>) -> Vec<Option<Secret>> {
    let mut found = Vec::new();
    for name in SECRETS {
        found.push(secrets.get_opt(name).await.unwrap());
    }
    found
}

#[tokio::test]
async fn a_new_pki_is_created_without_a_read_first_and_kept() {
    let (env, ns, cluster) = environment().await;
    let (client, seen) = recording_client(&env).await;
    let secrets: Api<Secret> = Api::namespaced(client, &ns);

    cluster_pki::ensure_new(&secrets, &cluster, SERVER)
        .await
        .unwrap();
    assert_eq!(
        counts(&seen),
        (0, 5),
        "four CA Secrets and the kubeconfig created, nothing read first"
    );
    let admin: Api<Secret> = Api::namespaced(env.client(), &ns);
    let first = stored(&admin).await;
    assert!(first.iter().all(Option::is_some), "every Secret stored");

    // The reader that needs its keys loads the same PKI; nothing is generated again.
    cluster_pki::ensure(&admin, &cluster, SERVER).await.unwrap();
    assert_eq!(stored(&admin).await, first);
}

#[tokio::test]
async fn a_pki_stored_already_is_read_not_generated_again() {
    let (env, ns, cluster) = environment().await;
    let admin: Api<Secret> = Api::namespaced(env.client(), &ns);
    // Stored by another writer.
    cluster_pki::ensure(&admin, &cluster, SERVER).await.unwrap();
    let first = stored(&admin).await;

    let (client, seen) = recording_client(&env).await;
    let secrets: Api<Secret> = Api::namespaced(client, &ns);
    cluster_pki::ensure_new(&secrets, &cluster, SERVER)
        .await
        .unwrap();
    assert_eq!(
        counts(&seen),
        (5, 1),
        "the first CA Secret was tried, then the stored PKI and kubeconfig read: {seen:?}"
    );
    assert_eq!(stored(&admin).await, first, "what was stored is kept");
}

#[tokio::test]
async fn a_partial_pki_of_the_users_is_never_completed_and_nothing_of_a_new_one_is_left() {
    let (env, ns, cluster) = environment().await;
    let admin: Api<Secret> = Api::namespaced(env.client(), &ns);
    // The user's own etcd, proxy and service-account keys, without a cluster CA.
    cluster_pki::ensure(&admin, &cluster, SERVER).await.unwrap();
    admin
        .delete("demo-ca", &DeleteParams::default())
        .await
        .unwrap();
    let users = stored(&admin).await;

    let Err(error) = cluster_pki::ensure_new(&admin, &cluster, SERVER).await else {
        panic!("a partial PKI is refused");
    };
    assert!(
        matches!(error, cluster_pki::EnsureError::Pending(ref why) if why.contains("3 of")),
        "{error}"
    );
    assert_eq!(
        stored(&admin).await,
        users,
        "the CA Secret made before meeting the user's Secrets was deleted again; theirs are untouched"
    );
}
