//! Exactly one instance per Machine, through what moto alone cannot do — with the fault-injecting
//! proxy of `common::proxy` in front of it: EC2 answering a replayed `ClientToken` with the first
//! instance, the answer to a launch lost after the instance was made, new instances invisible to
//! lookups for a while (eventual consistency), and throttled answers. (The mock variant of the
//! same story is `machine::tests::a_lost_launch_answer_and_a_restart_end_with_exactly_one_instance`.)
#![cfg(feature = "sdk")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use capi_core::{Actuator, ActuatorErrorKind};
use common::proxy::FaultProxy;
use common::world::{bootstrap, recorded, world};
use common::{Moto, fresh_account};

/// The "lost create response, then a restart", through the proxy: the launch reaches
/// moto and its answer is lost; the manager restarts (a new actuator: nothing remembered) while
/// EC2 does not show the instance yet; the replayed launch carries the same `ClientToken`, which
/// EC2 (the proxy, as AWS does) answers with the first instance. One instance in the end.
#[tokio::test]
async fn a_lost_launch_answer_and_a_restart_end_with_exactly_one_instance() {
    let proxy = FaultProxy::start().await;
    let world = world(Moto::at(&proxy.url, &fresh_account())).await;
    let image = world.moto.any_image().await;
    let scope = world.scope(
        "demo-md-0-once",
        "uid-once",
        serde_json::json!({"instanceType": "t3.large", "ami": {"id": image}}),
    );
    let key = scope.idempotency_key.to_string();
    {
        let mut faults = proxy.faults.lock().unwrap();
        faults.honour_client_tokens = true;
        faults.lose_next_launch_answer = true;
    }
    let before = world.actuator();
    assert_eq!(before.exists(&scope).await.unwrap(), None);
    let lost = before.create(&scope, &bootstrap()).await.unwrap_err();
    assert_eq!(lost.kind(), ActuatorErrorKind::Transient, "{lost}");
    assert_eq!(
        world.instances_of(&key).await.len(),
        1,
        "the launch happened"
    );

    // The restart, with EC2 behind: the next two lookups show nothing.
    proxy.faults.lock().unwrap().hidden_describes = 2;
    let after = world.actuator();
    assert_eq!(after.exists(&scope).await.unwrap(), None, "not visible yet");
    let created = after.create(&scope, &bootstrap()).await.unwrap();
    assert_eq!(
        proxy.faults.lock().unwrap().launches_forwarded,
        1,
        "the replay was answered from the token, never launched again"
    );
    let live = world.instances_of(&key).await;
    assert_eq!(live.len(), 1, "exactly one instance");
    assert!(
        created
            .provider_id
            .ends_with(live[0].instance_id().unwrap())
    );

    let scope = recorded(scope, &created.provider_id);
    let found = after.exists(&scope).await.unwrap().unwrap();
    assert_eq!(found.reported.provider_id, created.provider_id);
    let _ = after.delete(&scope).await.unwrap_err();
    after.delete(&scope).await.unwrap();
    assert!(world.instances_of(&key).await.is_empty());
}

/// A throttled answer is a wait, not a failure: RequeueAfter with the region budget's backoff
/// (5 s ± 20 %, doubling while throttled answers follow one another), and nothing launched.
#[tokio::test]
async fn throttled_answers_become_waits_that_grow() {
    let proxy = FaultProxy::start().await;
    let world = world(Moto::at(&proxy.url, &fresh_account())).await;
    let image = world.moto.any_image().await;
    let actuator = world.actuator();
    let scope = world.scope(
        "demo-md-0-slow",
        "uid-slow",
        serde_json::json!({"instanceType": "t3.large", "ami": {"id": image}}),
    );
    proxy.faults.lock().unwrap().throttled = 2;
    let first = actuator.create(&scope, &bootstrap()).await.unwrap_err();
    assert_eq!(first.kind(), ActuatorErrorKind::RequeueAfter, "{first}");
    assert_eq!(first.reason(), "Throttled");
    let first_wait = first.requeue_delay().unwrap();
    assert!(
        (Duration::from_secs(4)..=Duration::from_secs(6)).contains(&first_wait),
        "{first_wait:?}"
    );
    let second = actuator.create(&scope, &bootstrap()).await.unwrap_err();
    let second_wait = second.requeue_delay().unwrap();
    assert!(
        (Duration::from_secs(8)..=Duration::from_secs(12)).contains(&second_wait),
        "doubled: {second_wait:?}"
    );
    assert_eq!(proxy.faults.lock().unwrap().launches_forwarded, 0);
    actuator.create(&scope, &bootstrap()).await.unwrap();
    assert_eq!(
        world
            .instances_of(scope.idempotency_key.as_str())
            .await
            .len(),
        1
    );
}
