//! The init lock against a real API server: of three concurrent control-plane machines exactly one
//! initialises, and a lock whose holder was deleted is taken over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_bootstrap::init_lock::{InitLock, LockState};
use capi_core::api::Machine;
use capi_testing::TestEnv;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};

#[tokio::test]
async fn exactly_one_of_three_concurrent_machines_gets_the_lock_and_a_dead_holders_lock_is_broken()
{
    let env = TestEnv::start().await.unwrap();
    let ns = env.namespace().await.unwrap();
    let machines: Api<Machine> = Api::namespaced(env.client(), &ns);
    let mut uids = Vec::new();
    for i in 0..3 {
        let machine: Machine = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": format!("cp-{i}")},
            "spec": {"clusterName": "demo", "bootstrap": {},
                     "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": format!("cp-{i}")}}
        }))
        .unwrap();
        uids.push(
            machines
                .create(&PostParams::default(), &machine)
                .await
                .unwrap()
                .uid()
                .unwrap(),
        );
    }

    let attempts = (0..3).map(|i| {
        let lock = InitLock::new(env.client(), &ns, "demo");
        let uid = uids[i].clone();
        async move { lock.try_acquire(&format!("cp-{i}"), &uid).await.unwrap() }
    });
    let results = futures::future::join_all(attempts).await;
    let winners: Vec<usize> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| **r == LockState::Acquired)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = winners[0];
    let lock = InitLock::new(env.client(), &ns, "demo");
    assert_eq!(
        lock.try_acquire(&format!("cp-{winner}"), &uids[winner])
            .await
            .unwrap(),
        LockState::Acquired,
        "idempotent for the holder"
    );

    // The holder is deleted before it initialised: the next machine takes over.
    machines
        .delete(&format!("cp-{winner}"), &DeleteParams::default())
        .await
        .unwrap();
    let next = (winner + 1) % 3;
    assert_eq!(
        lock.try_acquire(&format!("cp-{next}"), &uids[next])
            .await
            .unwrap(),
        LockState::Acquired
    );
    let other = (winner + 2) % 3;
    assert_eq!(
        lock.try_acquire(&format!("cp-{other}"), &uids[other])
            .await
            .unwrap(),
        LockState::HeldBy(format!("cp-{next}"))
    );

    // Released by its holder only.
    lock.release(&uids[other]).await.unwrap();
    assert_eq!(
        lock.try_acquire(&format!("cp-{other}"), &uids[other])
            .await
            .unwrap(),
        LockState::HeldBy(format!("cp-{next}"))
    );
    lock.release(&uids[next]).await.unwrap();
    assert_eq!(
        lock.try_acquire(&format!("cp-{other}"), &uids[other])
            .await
            .unwrap(),
        LockState::Acquired
    );
}
