//! What the controller loop's queue costs: N keys (1000, 10 000) triggered together, each
//! triggered again while queued, reconciled by a reconcile that returns at once, 16 at a time,
//! until every key ran — through this workspace's `capi_runtime::controller::Controller` (oldest
//! first) and, for comparison, kube-runtime 5's `Controller` (which it replaces). The figure is
//! the loop's own time per pass over N keys, on one thread, without an API server.
#![allow(missing_docs)]
// The comparison needs the controller the workspace bans.
#![allow(clippy::disallowed_types)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

const CONCURRENCY: u16 = 16;

fn store(n: usize) -> (Store<ConfigMap>, Vec<ObjectRef<ConfigMap>>) {
    let mut writer = Writer::<ConfigMap>::default();
    writer.apply_watcher_event(&watcher::Event::Init);
    let mut keys = Vec::with_capacity(n);
    for i in 0..n {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(format!("machine-{i}"));
        object.metadata.namespace = Some("default".into());
        keys.push(ObjectRef::from_obj(&object));
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (writer.as_reader(), keys)
}

/// Every key twice (the second while the first is queued), then waits until `n` reconciles ran.
fn requests(
    keys: &[ObjectRef<ConfigMap>],
) -> impl futures::Stream<Item = ObjectRef<ConfigMap>> + Send + 'static {
    futures::stream::iter(keys.iter().chain(keys.iter()).cloned().collect::<Vec<_>>())
        .chain(futures::stream::pending())
}

async fn ours(store: Store<ConfigMap>, keys: &[ObjectRef<ConfigMap>]) {
    use capi_runtime::controller::{Action, Config, Controller};
    let done = Arc::new(AtomicUsize::new(0));
    let n = keys.len();
    let results = Controller::for_stream(futures::stream::pending(), store)
        .with_config(Config::default().concurrency(CONCURRENCY))
        .reconcile_on(requests(keys))
        .run(
            |_, done: Arc<AtomicUsize>| async move {
                done.fetch_add(1, Ordering::Relaxed);
                Ok::<_, std::convert::Infallible>(Action::await_change())
            },
            |_, _, _| Action::await_change(),
            Arc::clone(&done),
        );
    let mut results = std::pin::pin!(results);
    while done.load(Ordering::Relaxed) < n {
        results.next().await;
    }
}

async fn kube_runtime(store: Store<ConfigMap>, keys: &[ObjectRef<ConfigMap>]) {
    use kube::runtime::controller::{Action, Config, Controller};
    let done = Arc::new(AtomicUsize::new(0));
    let n = keys.len();
    let results = Controller::for_stream(futures::stream::pending(), store)
        .with_config(Config::default().concurrency(CONCURRENCY))
        .reconcile_on(requests(keys))
        .run(
            |_, done: Arc<AtomicUsize>| async move {
                done.fetch_add(1, Ordering::Relaxed);
                Ok::<_, std::convert::Infallible>(Action::await_change())
            },
            |_, _, _| Action::await_change(),
            Arc::clone(&done),
        );
    let mut results = std::pin::pin!(results);
    while done.load(Ordering::Relaxed) < n {
        results.next().await;
    }
}

fn scheduling(c: &mut Criterion) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    else {
        eprintln!("no tokio runtime: nothing measured");
        return;
    };
    let mut group = c.benchmark_group("controller loop, N keys each triggered twice");
    group.sample_size(10);
    for n in [1000, 10_000] {
        let (store, keys) = store(n);
        group.bench_with_input(BenchmarkId::new("capi-runtime", n), &n, |b, _| {
            b.iter(|| runtime.block_on(ours(store.clone(), &keys)));
        });
        group.bench_with_input(BenchmarkId::new("kube-runtime", n), &n, |b, _| {
            b.iter(|| runtime.block_on(kube_runtime(store.clone(), &keys)));
        });
    }
    group.finish();
}

criterion_group!(benches, scheduling);
criterion_main!(benches);
