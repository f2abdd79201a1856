//! The generic machine loop driving the in-memory provider against a real kube-apiserver:
//! create → provisioned → delete, exactly one instance per machine through cloud failures,
//! controller crashes and API conflicts, and nothing left behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use capi_actuator::machine;
use capi_runtime::ReconcilerOptions;

use capi_testing::faults::ApiFaults;
use common::{add_machine, eventually, machine_fixture, policy};
use kube::api::DeleteParams;
use kube::{Api, Client, ResourceExt};
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::InMemoryMachine;
use provider_inmemory::cloud::{CloudConfig, Faults, SimulatedCloud};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Creates `n` Machines `m-0`…`m-{n-1}` with bootstrap data and their InMemoryMachines.
async fn add_machines(client: &Client, ns: &str, n: usize) {
    for i in 0..n {
        add_machine(client, ns, &format!("m-{i}")).await;
    }
}

/// Starts the reconciler; the returned sender stops it gracefully.
fn start(
    client: Client,
    ns: &str,
    cloud: &Arc<SimulatedCloud>,
) -> (JoinHandle<()>, oneshot::Sender<()>) {
    let actuator = InMemoryActuator::new(cloud.clone(), cloud.clone(), Duration::from_millis(50));
    let (stop, stopped) = oneshot::channel::<()>();
    let reconciler = machine::reconciler(client, Arc::new(actuator)).options(
        ReconcilerOptions::default()
            .namespace(ns)
            .retry_policy(policy())
            .concurrency(8),
    );
    let handle = tokio::spawn(machine::run(reconciler, async move {
        let _ = stopped.await;
    }));
    (handle, stop)
}

async fn provisioned(client: &Client, ns: &str) -> usize {
    let infra: Api<InMemoryMachine> = Api::namespaced(client.clone(), ns);
    infra
        .list(&Default::default())
        .await
        .map(|list| {
            list.items
                .iter()
                .filter(|m| {
                    m.status.as_ref().is_some_and(|s| s.contract.provisioned())
                        && m.spec.provider_id.is_some()
                })
                .count()
        })
        .unwrap_or(0)
}

async fn delete_all_and_wait(client: &Client, ns: &str) {
    let infra: Api<InMemoryMachine> = Api::namespaced(client.clone(), ns);
    for machine in infra.list(&Default::default()).await.unwrap() {
        infra
            .delete(&machine.name_any(), &DeleteParams::default())
            .await
            .unwrap();
    }
    eventually("every InMemoryMachine to be gone", || async {
        infra
            .list(&Default::default())
            .await
            .map(|l| l.items.is_empty())
            .unwrap_or(false)
    })
    .await;
}

#[tokio::test]
async fn n_machines_get_exactly_n_instances_and_deletion_leaves_none() {
    const N: usize = 10;
    let f = machine_fixture(CloudConfig {
        boot_time: Duration::from_millis(300),
        delete_time: Duration::from_millis(200),
        ..CloudConfig::default()
    })
    .await;
    let client = f.env.client();
    add_machines(&client, &f.ns, N).await;
    let (task, stop) = start(client.clone(), &f.ns, &f.cloud);

    eventually("all machines provisioned", || async {
        provisioned(&client, &f.ns).await == N
    })
    .await;
    assert_eq!(f.cloud.instance_count(), N);
    assert_eq!(
        f.cloud.max_created_per_tag(),
        1,
        "an idempotency key was used twice"
    );

    // Recorded state: provider ID, addresses, Ready.
    let infra: Api<InMemoryMachine> = Api::namespaced(client.clone(), &f.ns);
    let m0 = infra.get("m-0").await.unwrap();
    let status = m0.status.clone().unwrap();
    assert!(
        m0.spec
            .provider_id
            .clone()
            .unwrap()
            .starts_with("inmemory:///")
    );
    assert_eq!(status.contract.addresses.len(), 2);
    assert!(capi_core::condition::is_true(
        &status.contract.conditions,
        capi_core::condition::READY
    ));
    // The provider's own status and the failure domain the instance landed in.
    let instance_id = m0
        .spec
        .provider_id
        .as_deref()
        .and_then(|p| p.strip_prefix("inmemory:///"));
    assert_eq!(status.instance_id.as_deref(), instance_id);
    assert_eq!(status.instance_state.as_deref(), Some("Active"));
    let zone = f
        .cloud
        .instances()
        .into_iter()
        .find(|i| Some(i.id.as_str()) == instance_id)
        .and_then(|i| i.zone);
    assert_eq!(status.contract.failure_domain, zone, "{status:?}");
    assert!(
        m0.metadata
            .finalizers
            .unwrap()
            .contains(&capi_actuator::machine::INFRA_MACHINE_FINALIZER.to_string())
    );

    delete_all_and_wait(&client, &f.ns).await;
    assert_eq!(f.cloud.instance_count(), 0, "instances leaked");
    let _ = stop.send(());
    task.await.unwrap();
}

/// With the controller's resync sweep in place of a timer per object (capi-actuator's `resync`;
/// its unit tests show the reconciles leave converged objects to it), provisioned machines are
/// still looked at in the cloud again once per resync period with nothing changed — and not
/// before it.
#[tokio::test]
async fn converged_machines_are_looked_at_again_each_resync_period_with_nothing_changed() {
    use provider_inmemory::cloud::{CloudServer, RemoteCloud};
    const N: usize = 3;
    let f = machine_fixture(CloudConfig {
        boot_time: Duration::from_millis(100),
        ..CloudConfig::default()
    })
    .await;
    let client = f.env.client();
    add_machines(&client, &f.ns, N).await;
    let resync = Duration::from_secs(8);
    // Through the cloud's HTTP API, which counts the calls; no listing shared between resyncs:
    // each resync of each machine asks the cloud itself.
    let server = CloudServer::start(f.cloud.clone(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let remote = Arc::new(RemoteCloud::new(server.url()));
    let actuator = InMemoryActuator::new(remote.clone(), remote, Duration::from_millis(50))
        .with_listing_ttl(Duration::ZERO);
    let (stop, stopped) = oneshot::channel::<()>();
    let reconciler = machine::reconciler(client.clone(), Arc::new(actuator)).options(
        ReconcilerOptions::default()
            .namespace(&f.ns)
            .retry_policy(capi_runtime::retry::RetryPolicy {
                resync,
                jitter: 0.0,
                ..policy()
            })
            .concurrency(8),
    );
    let task = tokio::spawn(machine::run(reconciler, async move {
        let _ = stopped.await;
    }));
    eventually("all machines provisioned", || async {
        provisioned(&client, &f.ns).await == N
    })
    .await;
    // Let the reconciles that follow the last status writes settle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let settled = f.cloud.api_calls();
    let versions = |list: Vec<InMemoryMachine>| {
        list.into_iter()
            .map(|m| m.resource_version().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let infra: Api<InMemoryMachine> = Api::namespaced(client.clone(), &f.ns);
    let before = versions(infra.list(&Default::default()).await.unwrap().items);
    // Less than a period after the last reconciles (provisioned within about 3 s of one
    // another): nothing asked.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let early = f.cloud.api_calls() - settled;
    // Two more periods: each machine is looked at again (about twice), and no hot loop.
    tokio::time::sleep(2 * resync).await;
    let resynced = f.cloud.api_calls() - settled;
    let after = versions(infra.list(&Default::default()).await.unwrap().items);
    assert_eq!(before, after, "nothing changed the machines meanwhile");
    assert_eq!(early, 0, "asked the cloud before the resync period");
    assert!(
        (N as u64..=10 * N as u64).contains(&resynced),
        "{resynced} cloud calls for {N} machines over two resync periods"
    );
    let _ = stop.send(());
    task.await.unwrap();
}

#[tokio::test]
async fn twenty_percent_cloud_failures_still_converge_to_exactly_n() {
    const N: usize = 10;
    let f = machine_fixture(CloudConfig {
        boot_time: Duration::from_millis(200),
        faults: Faults {
            error_rate: 0.2,
            lost_create_response_rate: 0.2,
            ..Faults::default()
        },
        ..CloudConfig::default()
    })
    .await;
    let client = f.env.client();
    add_machines(&client, &f.ns, N).await;
    let (task, stop) = start(client.clone(), &f.ns, &f.cloud);

    eventually("all machines provisioned despite failures", || async {
        provisioned(&client, &f.ns).await == N
    })
    .await;
    assert_eq!(f.cloud.instance_count(), N);
    assert_eq!(f.cloud.max_created_per_tag(), 1);

    delete_all_and_wait(&client, &f.ns).await;
    assert_eq!(f.cloud.instance_count(), 0);
    let _ = stop.send(());
    task.await.unwrap();
}

#[tokio::test]
async fn a_crash_between_create_and_the_status_write_creates_no_second_instance() {
    let f = machine_fixture(CloudConfig::default()).await;
    let client = f.env.client();
    add_machines(&client, &f.ns, 1).await;

    // The cloud creates the instance, then the controller dies before hearing back.
    f.cloud.hold_creates(true);
    let (crashed, _stop) = start(client.clone(), &f.ns, &f.cloud);
    eventually("the instance to exist", || async {
        f.cloud.instance_count() == 1
    })
    .await;
    crashed.abort();
    let _ = crashed.await;
    f.cloud.hold_creates(false);
    let infra: Api<InMemoryMachine> = Api::namespaced(client.clone(), &f.ns);
    assert!(
        infra.get("m-0").await.unwrap().spec.provider_id.is_none(),
        "nothing was recorded before the crash"
    );

    // A new controller finds it by its idempotency key.
    let (task, stop) = start(client.clone(), &f.ns, &f.cloud);
    eventually("the machine to be provisioned", || async {
        provisioned(&client, &f.ns).await == 1
    })
    .await;
    assert_eq!(f.cloud.instance_count(), 1);
    assert_eq!(
        f.cloud.create_calls(),
        1,
        "the restarted controller created again"
    );
    let _ = stop.send(());
    task.await.unwrap();
}

#[tokio::test]
async fn conflicts_on_the_provider_id_write_are_retried_never_answered_with_a_create() {
    let f = machine_fixture(CloudConfig::default()).await;
    let faults = ApiFaults::default();
    let client = faults
        .client(f.env.control_plane().kubeconfig_yaml())
        .await
        .unwrap();
    add_machines(&f.env.client(), &f.ns, 1).await;

    f.cloud.hold_creates(true);
    let (task, stop) = start(client.clone(), &f.ns, &f.cloud);
    eventually("the instance to exist", || async {
        f.cloud.instance_count() == 1
    })
    .await;
    // More conflicts than one reconcile retries: at least one reconcile fails after create.
    faults.fail_next(http::Method::PATCH, "/inmemorymachines/m-0", 409, 7);
    f.cloud.hold_creates(false);

    eventually("the machine to be provisioned", || async {
        provisioned(&f.env.client(), &f.ns).await == 1
    })
    .await;
    assert_eq!(faults.injected(), 7);
    assert_eq!(
        f.cloud.create_calls(),
        1,
        "a conflict was answered with a second create"
    );
    assert_eq!(f.cloud.instance_count(), 1);
    let _ = stop.send(());
    task.await.unwrap();
}

#[tokio::test]
async fn a_cloud_in_its_own_process_keeps_state_across_manager_restarts() {
    use provider_inmemory::cloud::{CloudServer, RemoteCloud};
    const N: usize = 5;
    let f = machine_fixture(CloudConfig {
        boot_time: Duration::from_millis(300),
        ..CloudConfig::default()
    })
    .await;
    let server = CloudServer::start(f.cloud.clone(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = f.env.client();
    add_machines(&client, &f.ns, N).await;

    let run = |remote: RemoteCloud| {
        let remote = Arc::new(remote);
        let actuator = InMemoryActuator::new(remote.clone(), remote, Duration::from_millis(50));
        let options = ReconcilerOptions::default()
            .namespace(&f.ns)
            .retry_policy(policy());
        let reconciler = machine::reconciler(client.clone(), Arc::new(actuator)).options(options);
        tokio::spawn(machine::run(reconciler, std::future::pending()))
    };
    // The first manager is killed part-way; the second one, with a new client, finishes the job.
    let first = run(RemoteCloud::new(server.url()));
    eventually("the first instances", || async {
        f.cloud.instance_count() >= 2
    })
    .await;
    first.abort();
    let _ = first.await;
    let second = run(RemoteCloud::new(server.url()));
    eventually("all machines provisioned", || async {
        provisioned(&client, &f.ns).await == N
    })
    .await;
    let seen = RemoteCloud::new(server.url()).inspect().await.unwrap();
    assert_eq!(seen.instances.len(), N);
    assert_eq!(seen.max_created_per_tag, 1);
    second.abort();
}
