//! The resync of provisioned objects, without a timer per object.
//!
//! A reconcile that ends converged ([`Next::Resync`](crate::plan::Next::Resync)) is looked at
//! again after the resync period (jittered), to notice drift no watch reports. Left to
//! kube-runtime's scheduler, that is a delay-queue entry per object (its reference twice, with
//! name, namespace, UID and resource version: ≈ 0.5–1 KB each, all of them held for the whole
//! period). Here a controller's [`Resyncs`] keep, per object, a 128-bit hash of its identity and
//! when it is due (≈ 40 bytes), and its [`sweep`] — merged into the controller's trigger —
//! looks every tick (a hundred-and-twentieth of the period, 0.1–30 s: 5 s for 600 s) for what
//! is due and hands those objects, from the controller's store, to the controller as if they had
//! changed.
//!
//! Guarantees:
//! - an object scheduled for `after` is handed to its controller once `after` has passed, within
//!   about one tick (plus 0.2 s of rounding, and the time the sweep takes to hand over what came
//!   due before it); the controller's queue and concurrency limit then apply as to any change;
//! - a reconcile that starts for any other reason takes the object's schedule out (what it ends
//!   with schedules the next step), so a change and a resync do not reconcile it twice;
//! - an object the store no longer holds when it comes due is dropped from the schedule (a
//!   deleted object's entry lives at most one jittered resync period and a tick);
//! - while no sweep runs (before its stream is first polled, or after it is dropped) the
//!   controller requeues converged objects with a timer each, as kube-runtime does, and nothing
//!   is added to the schedule;
//! - the scheduler's own queue no longer holds an entry per converged object (it still holds
//!   requeues for waits, backoffs, conflicts and invalid configurations).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use futures::Stream;
use kube::Resource;
use kube::api::ObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

use crate::cache::predicate::identity;

/// How many ticks a resync period is cut into: each tick hands over the objects due within
/// 1/120 of the period, so resyncs arrive spread out rather than in one burst.
const TICKS_PER_PERIOD: u32 = 120;

/// When each converged object of one controller is due to be reconciled again. Shared by the
/// controller's reconciles (which schedule and cancel) and its [`sweep`] (which takes what is
/// due).
#[derive(Debug)]
pub(crate) struct Resyncs {
    /// Due time (tenths of a second since `epoch`) by object identity.
    due: Mutex<HashMap<(u64, u64), u32>>,
    epoch: Instant,
    /// A sweep runs for these resyncs: without one, the reconciles requeue as before.
    swept: AtomicBool,
}

impl Default for Resyncs {
    fn default() -> Self {
        Self {
            due: Mutex::default(),
            epoch: Instant::now(),
            swept: AtomicBool::new(false),
        }
    }
}

impl Resyncs {
    /// Whether a [`sweep`] serves these resyncs.
    pub(crate) fn swept(&self) -> bool {
        self.swept.load(Ordering::Relaxed)
    }

    /// The object of `meta` is due again `after` from now (replacing any earlier schedule).
    pub(crate) fn schedule(&self, meta: &ObjectMeta, after: Duration) {
        let due = self.tenths(Instant::now() + after);
        self.lock().insert(identity(meta), due);
    }

    /// The object of `meta` is no longer scheduled (a reconcile of it starts, and what it ends with
    /// decides what comes next).
    pub(crate) fn cancel(&self, meta: &ObjectMeta) {
        let mut due = self.lock();
        if !due.is_empty() {
            due.remove(&identity(meta));
        }
    }

    /// Takes every object due at `now` out of the schedule.
    fn take_due(&self, now: Instant) -> HashSet<(u64, u64)> {
        // One tenth less than `now` rounded up: never later than `now` itself.
        let now = self.tenths(now).saturating_sub(1);
        let mut taken = HashSet::new();
        self.lock().retain(|identity, due| {
            let is_due = *due <= now;
            if is_due {
                taken.insert(*identity);
            }
            !is_due
        });
        taken
    }

    /// How many objects are scheduled.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// `instant` in tenths of a second since `epoch` (13 years fit), rounded up so that nothing
    /// comes due early.
    fn tenths(&self, instant: Instant) -> u32 {
        let elapsed = instant.saturating_duration_since(self.epoch);
        let tenths = elapsed.as_millis().div_ceil(100);
        u32::try_from(tenths).unwrap_or(u32::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, u64), u32>> {
        self.due.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How often a sweep looks for due objects, for a resync `period`: a hundred-and-twentieth of it,
/// 0.1–30 s.
pub(crate) fn tick(period: Duration) -> Duration {
    (period / TICKS_PER_PERIOD).clamp(Duration::from_millis(100), Duration::from_secs(30))
}

/// The objects of `store` as `resyncs` make them due, every [`tick`] of `period`, as a trigger
/// stream (never ends, never fails). `resyncs` counts as swept from the stream's first poll until
/// it is dropped; dropping it also empties the schedule.
pub(crate) fn sweep<K>(
    resyncs: Arc<Resyncs>,
    store: Store<K>,
    period: Duration,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let every = tick(period);
    let state = Sweep {
        resyncs: SweepGuard(resyncs),
        store,
        ready: Vec::new(),
    };
    futures::stream::unfold(state, move |mut state| async move {
        // Polled: the sweep runs (until it is dropped, see `SweepGuard`).
        state.resyncs.0.swept.store(true, Ordering::Relaxed);
        loop {
            // Copied only as it is handed over (the store keeps its own).
            if let Some(object) = state.ready.pop() {
                return Some((Ok(Arc::unwrap_or_clone(object)), state));
            }
            tokio::time::sleep(every).await;
            let due = state.resyncs.0.take_due(Instant::now());
            if due.is_empty() {
                continue;
            }
            state.ready = state
                .store
                .state()
                .into_iter()
                .filter(|object| due.contains(&identity(object.meta())))
                .collect();
        }
    })
}

/// What a sweep holds between polls.
struct Sweep<K: Resource<DynamicType = ()> + Clone + 'static> {
    resyncs: SweepGuard,
    store: Store<K>,
    /// Due objects not handed over yet.
    ready: Vec<Arc<K>>,
}

/// Marks its resyncs as no longer swept, and empties their schedule, when the sweep is dropped:
/// from then on the controller's reconciles requeue with timers, and nothing is left that no one
/// would take.
struct SweepGuard(Arc<Resyncs>);

impl Drop for SweepGuard {
    fn drop(&mut self) {
        self.0.swept.store(false, Ordering::Relaxed);
        self.0.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;

    fn config_map(name: &str, uid: &str) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.namespace = Some("ns".into());
        object.metadata.name = Some(name.into());
        object.metadata.uid = Some(uid.into());
        object
    }

    #[test]
    fn ticks_are_a_hundred_and_twentieth_of_the_period_within_bounds() {
        assert_eq!(tick(Duration::from_secs(600)), Duration::from_secs(5));
        assert_eq!(tick(Duration::from_secs(60)), Duration::from_millis(500));
        assert_eq!(tick(Duration::from_secs(1)), Duration::from_millis(100));
        assert_eq!(tick(Duration::from_secs(36_000)), Duration::from_secs(30));
    }

    #[test]
    fn what_is_due_is_taken_once_and_a_cancelled_object_never() {
        let resyncs = Resyncs::default();
        let (a, b, c) = (
            config_map("a", "1"),
            config_map("b", "2"),
            config_map("c", "3"),
        );
        resyncs.schedule(&a.metadata, Duration::from_secs(5));
        resyncs.schedule(&b.metadata, Duration::from_secs(50));
        resyncs.schedule(&c.metadata, Duration::from_secs(5));
        resyncs.cancel(&c.metadata);
        let start = resyncs.epoch;
        assert!(resyncs.take_due(start + Duration::from_secs(4)).is_empty());
        let due = resyncs.take_due(start + Duration::from_secs(7));
        assert_eq!(due, HashSet::from([identity(&a.metadata)]));
        assert!(resyncs.take_due(start + Duration::from_secs(8)).is_empty());
        // A later schedule replaces an earlier one.
        resyncs.schedule(&b.metadata, Duration::from_secs(100));
        assert!(resyncs.take_due(start + Duration::from_secs(60)).is_empty());
        assert_eq!(resyncs.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweep_hands_over_due_objects_from_the_store_and_drops_gone_ones() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let (a, b, gone) = (
            config_map("a", "1"),
            config_map("b", "2"),
            config_map("gone", "3"),
        );
        writer.apply_watcher_event(&watcher::Event::Apply(a.clone()));
        writer.apply_watcher_event(&watcher::Event::Apply(b.clone()));
        let resyncs = Arc::new(Resyncs::default());
        let mut swept = Box::pin(sweep(Arc::clone(&resyncs), store, Duration::from_secs(60)));
        assert!(!resyncs.swept(), "not before its first poll");
        resyncs.schedule(&a.metadata, Duration::from_secs(15));
        resyncs.schedule(&gone.metadata, Duration::from_secs(15));
        let first = tokio::time::timeout(Duration::from_secs(60), swept.next()).await;
        let Ok(Some(Ok(object))) = first else {
            panic!("nothing swept: {first:?}");
        };
        assert_eq!(object.metadata.name.as_deref(), Some("a"));
        assert!(resyncs.swept());
        assert_eq!(resyncs.len(), 0, "the gone object's entry is dropped too");
        // b was never scheduled: nothing more.
        let more = tokio::time::timeout(Duration::from_secs(600), swept.next()).await;
        assert!(more.is_err(), "swept again: {more:?}");
        resyncs.schedule(&b.metadata, Duration::from_secs(15));
        drop(swept);
        assert!(!resyncs.swept(), "no sweep once it is dropped");
        assert_eq!(resyncs.len(), 0, "and nothing left that no one would take");
    }
}
