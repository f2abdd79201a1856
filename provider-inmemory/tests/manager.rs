//! The Manager running the in-memory provider's reconcilers: health, readiness and
//! controller-runtime metrics over HTTP, graceful stop, and leader election between replicas.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use capi_actuator::InfrastructureControllers;
use capi_runtime::ReconcilerOptions;
use capi_runtime::manager::{LeaderElectionConfig, Manager, ManagerConfig, ManagerError};
use common::{Fixture, add_machine, eventually, machine_fixture, policy};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
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
    manager.add_machine_reconciler(actuator.clone());
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
    let f = machine_fixture(CloudConfig::default()).await;
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
    let f = machine_fixture(CloudConfig::default()).await;
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
    let f = machine_fixture(CloudConfig::default()).await;
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

/// One write of [`writer`]: who wrote, when it was sent and when it was answered (`None`: cut
/// off in flight).
#[derive(Clone, Debug)]
struct Write {
    by: &'static str,
    sent: tokio::time::Instant,
    answered: Option<tokio::time::Instant>,
}

/// Creates the ConfigMap `writes` the [`writer`]s write into.
async fn writes_configmap(f: &Fixture) -> Api<ConfigMap> {
    let configmaps: Api<ConfigMap> = Api::namespaced(f.env.client(), &f.ns);
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "writes"}})).unwrap(),
        )
        .await
        .unwrap();
    configmaps
}

/// A controller that writes its replica's name into the ConfigMap `writes` every 50 ms (a busy
/// reconciler), noting each write, until the manager stops it — or, if `stubborn`, until it is
/// aborted (a reconcile that takes long to drain).
fn writer(
    client: Client,
    ns: String,
    by: &'static str,
    log: Arc<std::sync::Mutex<Vec<Write>>>,
    stubborn: bool,
) -> impl FnOnce(capi_runtime::manager::Shutdown) -> futures::future::BoxFuture<'static, ()> {
    move |shutdown| {
        Box::pin(async move {
            let api: Api<ConfigMap> = Api::namespaced(client, &ns);
            let writes = async {
                for n in 0u64.. {
                    let index = {
                        let mut log = log.lock().unwrap();
                        log.push(Write {
                            by,
                            sent: tokio::time::Instant::now(),
                            answered: None,
                        });
                        log.len() - 1
                    };
                    let patch = serde_json::json!({"data": {"writer": by, "n": n.to_string()}});
                    let _ = api
                        .patch("writes", &PatchParams::default(), &Patch::Merge(patch))
                        .await;
                    log.lock().unwrap()[index].answered = Some(tokio::time::Instant::now());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            };
            if stubborn {
                writes.await;
            } else {
                tokio::select! {
                    () = writes => {}
                    () = shutdown.wait() => {}
                }
            }
        })
    }
}

async fn elected_writer(
    f: &Fixture,
    client: Client,
    identity: &'static str,
    log: Arc<std::sync::Mutex<Vec<Write>>>,
) -> JoinHandle<Result<(), ManagerError>> {
    let config = ManagerConfig {
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        leader_election: Some(election(&f.ns, identity)),
        ..ManagerConfig::default()
    };
    let mut manager = Manager::with_client(client.clone(), config).await.unwrap();
    manager.add_controller(writer(client, f.ns.clone(), identity, log, false));
    tokio::spawn(manager.run_until(std::future::pending()))
}

#[tokio::test]
async fn a_leader_whose_renewals_hang_stops_writing_before_another_replica_starts() {
    let f = machine_fixture(CloudConfig::default()).await;
    let configmaps = writes_configmap(&f).await;
    // What the API server saw, in order: the writer of every version of the ConfigMap.
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watching = {
        let seen = seen.clone();
        let stream = kube::runtime::watcher(
            configmaps.clone(),
            kube::runtime::watcher::Config::default().fields("metadata.name=writes"),
        );
        tokio::spawn(async move {
            use futures::StreamExt;
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(kube::runtime::watcher::Event::Apply(cm)) = event
                    && let Some(by) = cm.data.and_then(|d| d.get("writer").cloned())
                {
                    seen.lock().unwrap().push(by);
                }
            }
        })
    };

    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Replica a reaches the API server through a proxy that can stall its lease requests; its
    // other requests go through.
    let faults = capi_testing::faults::ApiFaults::default();
    let client_a = faults
        .client(f.env.control_plane().kubeconfig_yaml())
        .await
        .unwrap();
    let task_a = elected_writer(&f, client_a, "replica-a", log.clone()).await;
    eventually("replica a to write", || async {
        log.lock().unwrap().iter().any(|w| w.answered.is_some())
    })
    .await;
    let task_b = elected_writer(&f, f.env.client(), "replica-b", log.clone()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    faults.stall("/leases/");
    eventually("replica b to write", || async {
        log.lock().unwrap().iter().any(|w| w.by == "replica-b")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    task_b.abort();
    watching.abort();
    let log = log.lock().unwrap().clone();
    let first_b = log.iter().find(|w| w.by == "replica-b").unwrap().sent;
    for write in log.iter().filter(|w| w.by == "replica-a") {
        // A write cut off in flight may still land: count it as lasting a second.
        let end = write
            .answered
            .unwrap_or(write.sent + Duration::from_secs(1));
        assert!(
            end < first_b,
            "replica a wrote until {:?} after replica b began",
            end - first_b
        );
    }
    let seen = seen.lock().unwrap().clone();
    let handed_over = seen.iter().position(|by| by == "replica-b").unwrap();
    assert!(
        seen[handed_over..].iter().all(|by| by == "replica-b"),
        "the API server saw replica a write after replica b: {seen:?}"
    );
    assert!(seen[..handed_over].iter().any(|by| by == "replica-a"));
    let result = tokio::time::timeout(Duration::from_secs(10), task_a)
        .await
        .expect("replica a stopped")
        .unwrap();
    assert!(
        matches!(result, Err(ManagerError::LeadershipLost)),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_leader_draining_after_a_stop_stops_writing_once_its_lease_is_lost() {
    let f = machine_fixture(CloudConfig::default()).await;
    writes_configmap(&f).await;
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let faults = capi_testing::faults::ApiFaults::default();
    let client = faults
        .client(f.env.control_plane().kubeconfig_yaml())
        .await
        .unwrap();
    let election = election(&f.ns, "replica-a");
    let lease_duration = election.lease_duration;
    let config = ManagerConfig {
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        leader_election: Some(election),
        // Far longer than a lease lasts unrenewed: the drain must not outlive the lease.
        shutdown_timeout: Duration::from_secs(120),
        ..ManagerConfig::default()
    };
    let mut manager = Manager::with_client(client.clone(), config).await.unwrap();
    manager.add_controller(writer(client, f.ns.clone(), "replica-a", log.clone(), true));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(manager.run_until(async {
        stopped.await.ok();
    }));
    eventually("the leader to write", || async {
        log.lock().unwrap().iter().any(|w| w.answered.is_some())
    })
    .await;

    // A normal stop: the controller drains (here: never finishes), and meanwhile the lease
    // requests stall.
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    faults.stall("/leases/");
    let stalled_at = tokio::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the manager gave up its controllers when it could not renew during the drain")
        .unwrap();
    assert!(
        matches!(result, Err(ManagerError::LeadershipLost)),
        "{result:?}"
    );
    let writes = log.lock().unwrap().len();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), writes, "the drained controller was aborted");
    let last = log.last().unwrap().sent;
    assert!(
        last < stalled_at + lease_duration,
        "a write was sent {:?} after the lease could have expired",
        last - (stalled_at + lease_duration)
    );
}

#[tokio::test]
async fn reconcile_traffic_at_the_rate_limit_does_not_delay_renewals() {
    let f = machine_fixture(CloudConfig::default()).await;
    let config = ManagerConfig {
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        leader_election: Some(election(&f.ns, "replica-a")),
        qps: 2.0,
        burst: 1,
        ..ManagerConfig::default()
    };
    let mut manager = Manager::new(f.env.control_plane().config().await.unwrap(), config)
        .await
        .unwrap();
    // A controller that keeps the rate-limited client saturated.
    let client = manager.client();
    let ns = f.ns.clone();
    manager.add_controller(move |shutdown| async move {
        let api: Api<ConfigMap> = Api::namespaced(client, &ns);
        let busy = futures::future::join_all((0..8).map(|_| async {
            loop {
                let _ = api.list(&kube::api::ListParams::default()).await;
            }
        }));
        tokio::select! {
            _ = busy => {}
            () = shutdown.wait() => {}
        }
    });
    let task = tokio::spawn(manager.run_until(std::future::pending()));
    let leases: Api<Lease> = Api::namespaced(f.env.client(), &f.ns);
    eventually("replica a to lead", || async {
        leases
            .get_opt("inmemory-provider")
            .await
            .ok()
            .flatten()
            .is_some_and(|l| l.spec.and_then(|s| s.holder_identity).as_deref() == Some("replica-a"))
    })
    .await;
    // Three times the renew deadline with every reconcile request queued behind the limit: the
    // API server sees a renewal every retry period or so, never one late by the renew deadline.
    let mut renewals = Vec::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(6);
    while tokio::time::Instant::now() < until {
        let renewed = leases
            .get("inmemory-provider")
            .await
            .unwrap()
            .spec
            .and_then(|s| s.renew_time)
            .unwrap()
            .0;
        if renewals.last() != Some(&renewed) {
            renewals.push(renewed);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    renewals.push(jiff::Timestamp::now());
    let longest = renewals
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .max()
        .unwrap_or_default();
    assert!(
        longest < jiff::SignedDuration::from_secs(2),
        "renewals {longest:?} apart behind the rate limit"
    );
    assert!(
        !task.is_finished(),
        "the leader gave up its lease: {:?}",
        task.await
    );
    task.abort();
}

/// A family of controllers that keeps its client saturated with LISTs and counts the answers.
struct Saturating {
    namespace: String,
    answered: Arc<std::sync::atomic::AtomicUsize>,
}

impl capi_runtime::manager::Controllers for Saturating {
    fn register(self, manager: &mut Manager) {
        let client = manager.client();
        manager.add_controller(move |shutdown| async move {
            let api: Api<ConfigMap> = Api::namespaced(client, &self.namespace);
            let busy = futures::future::join_all((0..8).map(|_| async {
                loop {
                    if api.list(&kube::api::ListParams::default()).await.is_ok() {
                        self.answered
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }));
            tokio::select! {
                _ = busy => {}
                () = shutdown.wait() => {}
            }
        });
    }
}

#[tokio::test]
async fn each_family_of_controllers_has_a_rate_limit_of_its_own() {
    let f = machine_fixture(CloudConfig::default()).await;
    let config = ManagerConfig {
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        qps: 2.0,
        burst: 1,
        ..ManagerConfig::default()
    };
    let mut manager = Manager::new(f.env.control_plane().config().await.unwrap(), config)
        .await
        .unwrap();
    let counters: Vec<Arc<std::sync::atomic::AtomicUsize>> =
        (0..2).map(|_| Arc::default()).collect();
    for answered in &counters {
        manager.add(Saturating {
            namespace: f.ns.clone(),
            answered: Arc::clone(answered),
        });
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(manager.run_until(async {
        let _ = stopped.await;
    }));
    tokio::time::sleep(Duration::from_secs(4)).await;
    let answered: Vec<usize> = counters
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    let _ = stop.send(());
    task.await.unwrap().unwrap();
    // One shared budget of 2/s (burst 1) answers at most 9 in 4 s between the two families, so
    // one of them would get 4 or fewer; each with its own gets about 9.
    assert!(
        answered.iter().all(|n| *n >= 6),
        "answers per family in 4 s at 2/s each: {answered:?}"
    );
    // And each stays within its own budget.
    assert!(
        answered.iter().all(|n| *n <= 12),
        "answers per family in 4 s at 2/s each: {answered:?}"
    );
}
