//! A cluster's stored PKI on a real API server, written by `cluster_pki::ensure_stored` from what
//! a watch of the namespace's Secrets shows: nothing read that the watch answers, nothing written
//! twice, and a Secret the watch missed read rather than generated again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use capi_bootstrap::cluster_pki;
use capi_core::api::Cluster;
use capi_testing::TestEnv;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
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
async fn a_pki_the_watch_does_not_show_is_created_without_a_read_and_one_it_shows_is_left_alone() {
    let (env, ns, cluster) = environment().await;
    let (client, seen) = recording_client(&env).await;
    let secrets: Api<Secret> = Api::namespaced(client, &ns);

    cluster_pki::ensure_stored(&secrets, &cluster, SERVER, |_| Some(false))
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

    seen.lock().unwrap().clear();
    cluster_pki::ensure_stored(&secrets, &cluster, SERVER, |_| Some(true))
        .await
        .unwrap();
    assert_eq!(counts(&seen), (0, 0), "what the watch shows is not read");

    // The PKI is usable by the reader that needs its keys, and is the one just created.
    let loaded = cluster_pki::ensure(&admin, &cluster, SERVER).await.unwrap();
    drop(loaded);
    assert_eq!(stored(&admin).await, first, "nothing was generated again");
}

#[tokio::test]
async fn a_pki_a_lagging_watch_misses_is_read_not_generated_again() {
    let (env, ns, cluster) = environment().await;
    let admin: Api<Secret> = Api::namespaced(env.client(), &ns);
    // Stored by another writer; the watch has not shown it yet.
    cluster_pki::ensure(&admin, &cluster, SERVER).await.unwrap();
    let first = stored(&admin).await;

    let (client, seen) = recording_client(&env).await;
    let secrets: Api<Secret> = Api::namespaced(client, &ns);
    cluster_pki::ensure_stored(&secrets, &cluster, SERVER, |_| Some(false))
        .await
        .unwrap();
    let (reads, creates) = counts(&seen);
    assert_eq!(creates, 1, "only the first CA Secret was tried: {seen:?}");
    assert_eq!(
        reads, 5,
        "the stored PKI and kubeconfig were read instead: {seen:?}"
    );
    assert_eq!(stored(&admin).await, first, "what was stored is kept");

    // A watch that cannot tell yet: read as before.
    seen.lock().unwrap().clear();
    cluster_pki::ensure_stored(&secrets, &cluster, SERVER, |_| None)
        .await
        .unwrap();
    assert_eq!(counts(&seen), (5, 0));
}
