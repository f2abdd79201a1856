//! Helpers shared by the in-memory provider's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use capi_actuator::retry::RetryPolicy;
use capi_core::api::Cluster;
use capi_testing::TestEnv;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use provider_inmemory::cloud::{CloudConfig, SimulatedCloud};
use serde_json::json;

pub(crate) const TIMEOUT: Duration = Duration::from_secs(90);

pub(crate) struct Fixture {
    pub(crate) env: TestEnv,
    pub(crate) ns: String,
    pub(crate) cloud: Arc<SimulatedCloud>,
}

pub(crate) async fn fixture(config: CloudConfig) -> Fixture {
    let mut crds = capi_core::crd::core();
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let clusters: Api<Cluster> = Api::namespaced(env.client(), &ns);
    let mut cluster = Cluster::new("demo", Default::default());
    cluster.metadata.namespace = Some(ns.clone());
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let ready = json!({"status": {"initialization": {"infrastructureProvisioned": true}}});
    clusters
        .patch_status("demo", &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .unwrap();
    Fixture {
        env,
        ns,
        cloud: Arc::new(SimulatedCloud::new(config)),
    }
}

pub(crate) fn policy() -> RetryPolicy {
    RetryPolicy {
        backoff_base: Duration::from_millis(20),
        backoff_cap: Duration::from_millis(500),
        jitter: 0.1,
        poll: Duration::from_millis(100),
        resync: Duration::from_secs(60),
    }
}

pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
