//! The example operator (`capi_examples::tenant_cluster`), on `capi-runtime` alone, against a real
//! API server: a `TenantCluster` renders its `Cluster`, follows a spec change and the cluster's
//! phase, never touches a `Cluster` that is not its own, and deletes its cluster before it goes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use capi_core::api::Cluster;
use capi_examples::tenant_cluster::{FINALIZER, TenantCluster, TenantClusters};
use capi_runtime::manager::{Manager, ManagerConfig};
use capi_testing::TestEnv;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, CustomResourceExt, ResourceExt};
use serde_json::json;

async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A local API server with the Cluster API CRDs and the `TenantCluster` CRD.
async fn start_env() -> TestEnv {
    let mut crds = capi_core::crd::core();
    crds.push(TenantCluster::crd());
    TestEnv::start_with_crds(&crds).await.unwrap()
}

/// The operator on the runtime's Manager, reconciling `ns`, until the task is aborted.
async fn start_operator(
    client: &kube::Client,
    ns: &str,
) -> tokio::task::JoinHandle<Result<(), capi_runtime::manager::ManagerError>> {
    let config = ManagerConfig {
        reconciler: capi_runtime::ReconcilerOptions::default().namespace(ns),
        http_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        ..ManagerConfig::default()
    };
    let mut manager = Manager::with_client(client.clone(), config).await.unwrap();
    manager.add(TenantClusters);
    tokio::spawn(async move { manager.run_until(std::future::pending()).await })
}

fn tenant(name: &str, workers: i32) -> TenantCluster {
    serde_json::from_value(json!({
        "apiVersion": "tenancy.example.com/v1alpha1",
        "kind": "TenantCluster",
        "metadata": {"name": name},
        "spec": {"class": "quick-start", "version": "v1.33.0", "workers": workers},
    }))
    .unwrap()
}

fn workers(cluster: &Cluster) -> Option<i32> {
    let topology = cluster.spec.topology.as_ref()?;
    topology
        .workers
        .as_ref()?
        .machine_deployments
        .first()?
        .replicas
}

fn phase(tenant: &TenantCluster) -> Option<&str> {
    tenant.status.as_ref()?.phase.as_deref()
}

#[tokio::test]
async fn a_tenant_cluster_renders_its_cluster_follows_it_and_deletes_it() {
    let env = start_env().await;
    let ns = env.namespace().await.unwrap();
    let client = env.client();
    let running = start_operator(&client, &ns).await;

    let tenants: Api<TenantCluster> = Api::namespaced(client.clone(), &ns);
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    tenants
        .create(&PostParams::default(), &tenant("team-a", 2))
        .await
        .unwrap();

    // Rendered: the topology asked for, owned by the tenant; the status says Pending.
    let cluster = eventually("the cluster rendered", || async {
        clusters.get_opt("team-a").await.ok()?
    })
    .await;
    let topology = cluster.spec.topology.as_ref().unwrap();
    assert_eq!(topology.class_ref.name, "quick-start");
    assert_eq!(topology.version, "v1.33.0");
    assert_eq!(workers(&cluster), Some(2));
    let owner = &cluster.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("TenantCluster", Some(true))
    );
    let status = eventually("the status", || async {
        let tenant = tenants.get("team-a").await.ok()?;
        (phase(&tenant) == Some("Pending")).then_some(tenant.status?)
    })
    .await;
    assert_eq!(status.cluster_name.as_deref(), Some("team-a"));
    assert!(
        tenants
            .get("team-a")
            .await
            .unwrap()
            .finalizers()
            .contains(&FINALIZER.to_string())
    );

    // A spec change reaches the cluster; a field another writer owns stays.
    let labels = json!({"metadata": {"labels": {"team": "a"}}});
    clusters
        .patch("team-a", &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .unwrap();
    let scale = json!({"spec": {"workers": 5}});
    tenants
        .patch("team-a", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    let cluster = eventually("the workers scaled", || async {
        let cluster = clusters.get("team-a").await.ok()?;
        (workers(&cluster) == Some(5)).then_some(cluster)
    })
    .await;
    assert_eq!(cluster.labels().get("team").map(String::as_str), Some("a"));

    // The cluster's phase is reported back.
    let provisioned = json!({"status": {"phase": "Provisioned"}});
    clusters
        .patch_status(
            "team-a",
            &PatchParams::default(),
            &Patch::Merge(&provisioned),
        )
        .await
        .unwrap();
    eventually("the phase followed", || async {
        let tenant = tenants.get("team-a").await.ok()?;
        (phase(&tenant) == Some("Provisioned")).then_some(())
    })
    .await;

    // Deleting the tenant deletes its cluster first.
    tenants
        .delete("team-a", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the tenant and its cluster gone", || async {
        let tenant = tenants.get_opt("team-a").await.ok()?;
        let cluster = clusters.get_opt("team-a").await.ok()?;
        (tenant.is_none() && cluster.is_none()).then_some(())
    })
    .await;
    running.abort();
}

#[tokio::test]
async fn a_cluster_that_is_not_the_tenants_is_never_touched() {
    let env = start_env().await;
    let ns = env.namespace().await.unwrap();
    let client = env.client();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    let foreign: Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "taken", "labels": {"owner": "someone-else"}},
        "spec": {"paused": true},
    }))
    .unwrap();
    clusters
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let running = start_operator(&client, &ns).await;

    let tenants: Api<TenantCluster> = Api::namespaced(client.clone(), &ns);
    tenants
        .create(&PostParams::default(), &tenant("taken", 1))
        .await
        .unwrap();
    let status = eventually("blocked", || async {
        let tenant = tenants.get("taken").await.ok()?;
        (phase(&tenant) == Some("Blocked")).then_some(tenant.status?)
    })
    .await;
    assert!(
        status
            .message
            .unwrap()
            .contains("does not belong to this TenantCluster")
    );
    let cluster = clusters.get("taken").await.unwrap();
    assert!(cluster.spec.topology.is_none(), "not rendered over");
    assert!(cluster.owner_references().is_empty());

    // Deleting the tenant leaves the foreign cluster alone.
    tenants
        .delete("taken", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the tenant gone", || async {
        tenants.get_opt("taken").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(clusters.get_opt("taken").await.unwrap().is_some());

    // Once the name is free, a new tenant of that name renders its own.
    clusters
        .delete("taken", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the foreign cluster gone", || async {
        clusters
            .get_opt("taken")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    tenants
        .create(&PostParams::default(), &tenant("taken", 1))
        .await
        .unwrap();
    eventually("rendered once the name is free", || async {
        let cluster = clusters.get_opt("taken").await.ok()??;
        (workers(&cluster) == Some(1)).then_some(())
    })
    .await;
    running.abort();
}
