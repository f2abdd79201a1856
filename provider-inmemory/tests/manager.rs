//! The Manager running the in-memory provider's reconcilers: health, readiness and
//! controller-runtime metrics over HTTP, graceful stop, and leader election between replicas.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use capi_actuator::ReconcilerOptions;
use capi_actuator::manager::{LeaderElectionConfig, Manager, ManagerConfig, ManagerError};
use common::{Fixture, add_machine, eventually, fixture, policy};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::InMemoryMachine;
use provider_inmemory::cloud::CloudConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

async fn is_provisioned(client: &Client, ns: &str, name: &str) -> bool {
    Api::<InMemoryMachine>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .is_ok_and(|m| m.status.as_ref().is_some_and(|s| s.contract.provisioned()))
}

async fn start_manager(
    f: &Fixture,
    leader_election: Option<LeaderElectionConfig>,
) -> (
    SocketAddr,
    JoinHandle<Result<(), ManagerError>>,
    oneshot::Sender<()>,
) {
    let config = ManagerConfig {
        reconciler: ReconcilerOptions::default()
            .namespace(&f.ns)
            .retry_policy(policy()),
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        leader_election,
        ..ManagerConfig::default()
    };
    let mut manager = Manager::new(f.env.control_plane().config().await.unwrap(), config)
        .await
        .unwrap();
    let actuator = Arc::new(InMemoryActuator::new(
        f.cloud.clone(),
        f.cloud.clone(),
        Duration::from_millis(50),
    ));
    manager.add_machine_reconciler::<InMemoryMachine>(actuator.clone());
    manager.add_cluster_reconciler::<provider_inmemory::api::InMemoryCluster>(actuator);
    let addr = manager.http_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(manager.run_until(async move {
        let _ = stopped.await;
    }));
    (addr, task, stop)
}

#[tokio::test]
async fn manager_serves_health_readiness_and_controller_runtime_metrics() {
    let f = fixture(CloudConfig::default()).await;
    let client = f.env.client();
    let (addr, task, stop) = start_manager(&f, None).await;

    assert_eq!(get(addr, "/healthz").await, (200, "ok".to_string()));
    eventually("readyz", || async { get(addr, "/readyz").await.0 == 200 }).await;
    assert_eq!(get(addr, "/nothing").await.0, 404);

    add_machine(&client, &f.ns, "m-0").await;
    add_machine(&client, &f.ns, "m-1").await;
    eventually("both machines provisioned", || async {
        is_provisioned(&client, &f.ns, "m-0").await && is_provisioned(&client, &f.ns, "m-1").await
    })
    .await;

    let (status, metrics) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    for expected in [
        r#"capi_actuator_calls_total{controller="inmemorymachine",method="create",result="ok"} 2"#,
        r#"controller_runtime_reconcile_total{controller="inmemorymachine",result="requeue_after"}"#,
        r#"controller_runtime_reconcile_time_seconds_count{controller="inmemorymachine"}"#,
        r#"capi_actuator_call_duration_seconds_count{controller="inmemorymachine",method="exists"}"#,
    ] {
        assert!(
            metrics.contains(expected),
            "missing {expected} in\n{metrics}"
        );
    }

    let _ = stop.send(());
    task.await.unwrap().unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the HTTP server stopped with the manager"
    );
}

fn election(ns: &str, identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig {
        identity: identity.to_string(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(200),
        ..LeaderElectionConfig::new(ns, "inmemory-provider")
    }
}

#[tokio::test]
async fn only_the_leader_reconciles_and_a_successor_takes_over() {
    let f = fixture(CloudConfig::default()).await;
    let client = f.env.client();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &f.ns);
    let holder = || async {
        leases
            .get_opt("inmemory-provider")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec.and_then(|s| s.holder_identity))
    };

    let (addr_a, task_a, stop_a) = start_manager(&f, Some(election(&f.ns, "replica-a"))).await;
    eventually("replica a to lead", || async {
        holder().await.as_deref() == Some("replica-a")
    })
    .await;
    let (addr_b, task_b, stop_b) = start_manager(&f, Some(election(&f.ns, "replica-b"))).await;

    add_machine(&client, &f.ns, "m-0").await;
    eventually("m-0 provisioned by the leader", || async {
        is_provisioned(&client, &f.ns, "m-0").await
    })
    .await;
    assert!(
        get(addr_a, "/metrics")
            .await
            .1
            .contains("controller_runtime_reconcile_total")
    );
    assert!(
        !get(addr_b, "/metrics")
            .await
            .1
            .contains("controller_runtime_reconcile_total{"),
        "the standby reconciled"
    );
    assert_eq!(holder().await.as_deref(), Some("replica-a"));

    // The leader stops gracefully and releases the lease: the standby takes over at once.
    let _ = stop_a.send(());
    task_a.await.unwrap().unwrap();
    eventually("replica b to lead", || async {
        holder().await.as_deref() == Some("replica-b")
    })
    .await;
    add_machine(&client, &f.ns, "m-1").await;
    eventually("m-1 provisioned by the successor", || async {
        is_provisioned(&client, &f.ns, "m-1").await
    })
    .await;
    assert!(get(addr_b, "/metrics").await.1.contains(
        r#"capi_actuator_calls_total{controller="inmemorymachine",method="create",result="ok"} 1"#
    ));
    assert_eq!(f.cloud.instance_count(), 2);

    let _ = stop_b.send(());
    task_b.await.unwrap().unwrap();
}

#[tokio::test]
async fn losing_the_lease_stops_the_controllers_and_says_so() {
    let f = fixture(CloudConfig::default()).await;
    let leases: Api<Lease> = Api::namespaced(f.env.client(), &f.ns);
    let (_addr, task, _stop) = start_manager(&f, Some(election(&f.ns, "replica-a"))).await;
    eventually("replica a to lead", || async {
        leases
            .get_opt("inmemory-provider")
            .await
            .ok()
            .flatten()
            .is_some_and(|l| l.spec.and_then(|s| s.holder_identity).as_deref() == Some("replica-a"))
    })
    .await;

    // Another replica takes the lease (as after a network partition): this one must stop.
    let mut lease = leases.get("inmemory-provider").await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".into());
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        jiff::Timestamp::now(),
    ));
    leases
        .replace(
            "inmemory-provider",
            &kube::api::PostParams::default(),
            &lease,
        )
        .await
        .unwrap();

    let result = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the manager stopped")
        .unwrap();
    assert!(
        matches!(result, Err(ManagerError::LeadershipLost)),
        "{result:?}"
    );
}
