//! The resync of provisioned objects, without a timer per object.
//!
//! A reconcile that ends converged ([`Next::Resync`](crate::plan::Next::Resync)) is looked at
//! again after the resync period (jittered), to notice drift no watch reports. Left to
//! kube-runtime's scheduler, that is a delay-queue entry per object (its reference twice, with
//! name, namespace, UID and resource version: ≈ 0.5–1 KB each, all of them held for the whole
//! period). Here a controller's [`Resyncs`] keep, per object, a 128-bit hash of its identity and
//! when it is due (≈ 40 bytes), and its [`sweep`] — merged into the controller's trigger —
//! looks every tick (a sixtieth of the period, 0.1–30 s) for what is due and hands those objects,
//! from the controller's store, to the controller as if they had changed.
//!
//! Guarantees:
//! - an object scheduled for `after` is reconciled again between `after` and `after` + one tick
//!   later, unless it is reconciled earlier for another reason (any reconcile's outcome replaces
//!   or cancels its schedule);
//! - an object the store no longer holds when it comes due is dropped from the schedule (a
//!   deleted object's entry lives at most one resync period);
//! - the scheduler's own queue then holds only what is due soon (requeues for waits, backoffs,
//!   conflicts), so a manager's memory per converged object no longer grows with the number of
//!   controllers that resync it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use futures::Stream;
use kube::Resource;
use kube::api::ObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

use crate::predicate::identity;

/// How many ticks a resync period is cut into.
const TICKS_PER_PERIOD: u32 = 60;

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

    /// The object of `meta` is no longer scheduled (its reconcile ended otherwise).
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

/// How often a sweep looks for due objects, for a resync `period`: a sixtieth of it, 0.1–30 s.
pub(crate) fn tick(period: Duration) -> Duration {
    (period / TICKS_PER_PERIOD).clamp(Duration::from_millis(100), Duration::from_secs(30))
}

/// The objects of `store` as `resyncs` make them due, every [`tick`] of `period`, as a trigger
/// stream (never ends, never fails). Marks `resyncs` as swept.
pub(crate) fn sweep<K>(
    resyncs: std::sync::Arc<Resyncs>,
    store: Store<K>,
    period: Duration,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    resyncs.swept.store(true, Ordering::Relaxed);
    let every = tick(period);
    let ready: Vec<K> = Vec::new();
    futures::stream::unfold(
        (resyncs, store, ready),
        move |(resyncs, store, mut ready)| async move {
            loop {
                if let Some(object) = ready.pop() {
                    return Some((Ok(object), (resyncs, store, ready)));
                }
                tokio::time::sleep(every).await;
                let due = resyncs.take_due(Instant::now());
                if due.is_empty() {
                    continue;
                }
                ready = store
                    .state()
                    .into_iter()
                    .filter(|object| due.contains(&identity(object.meta())))
                    .map(std::sync::Arc::unwrap_or_clone)
                    .collect();
            }
        },
    )
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
    fn ticks_are_a_sixtieth_of_the_period_within_bounds() {
        assert_eq!(tick(Duration::from_secs(600)), Duration::from_secs(10));
        assert_eq!(tick(Duration::from_secs(60)), Duration::from_secs(1));
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
        let resyncs = std::sync::Arc::new(Resyncs::default());
        assert!(!resyncs.swept());
        let swept = sweep(
            std::sync::Arc::clone(&resyncs),
            store,
            Duration::from_secs(60),
        );
        assert!(resyncs.swept());
        resyncs.schedule(&a.metadata, Duration::from_secs(15));
        resyncs.schedule(&gone.metadata, Duration::from_secs(15));
        futures::pin_mut!(swept);
        let first = tokio::time::timeout(Duration::from_secs(60), swept.next()).await;
        let Ok(Some(Ok(object))) = first else {
            panic!("nothing swept: {first:?}");
        };
        assert_eq!(object.metadata.name.as_deref(), Some("a"));
        assert_eq!(resyncs.len(), 0, "the gone object's entry is dropped too");
        // b was never scheduled: nothing more.
        let more = tokio::time::timeout(Duration::from_secs(600), swept.next()).await;
        assert!(more.is_err(), "swept again: {more:?}");
    }
}
