//! When the loop reconciles an object again: jittered requeues, per-object exponential backoff
//! for failures, short retries for writes that met a newer version of the object, and how a failed
//! watch is retried.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use crate::controller::Action;
use capi_core::ActuatorError;
use kube::runtime::utils::Backoff;

use crate::cache::resync::Resyncs;
use crate::plan::Next;

/// How the loop spaces its retries. The defaults suit cloud APIs; tests shorten them.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// The delay after the first transient failure of an object; it doubles with each further
    /// failure in a row.
    pub backoff_base: Duration,
    /// The longest delay between two attempts after failures.
    pub backoff_cap: Duration,
    /// Relative jitter applied to every delay (0.1 = ±10 %), so that objects that failed together
    /// do not retry together.
    pub jitter: f64,
    /// How often to look again while waiting for something no watch reports (an owner that is not
    /// in the API yet, a bootstrap Secret that does not exist yet).
    pub poll: Duration,
    /// How often a provisioned object is reconciled without any change, to notice drift in the
    /// cloud (an instance deleted behind our back).
    pub resync: Duration,
    /// The delay after a reconcile whose write the API server refused with 409 (the object changed
    /// since the cache showed it, or a create found it already there). Such a reconcile has not
    /// failed: its cache was behind, and the watch brings the newer version within moments. The
    /// delay doubles with each such refusal in a row, up to [`Self::conflict_cap`], and does not
    /// count toward [`Self::backoff_base`]'s failure streak.
    pub conflict_base: Duration,
    /// The longest delay between two attempts that met 409s: bounds the cost of two writers that
    /// keep refusing each other while never leaving an object waiting long.
    pub conflict_cap: Duration,
    /// How long an object found invalid (its configuration cannot work at its generation) waits
    /// before the cloud is asked again without a spec change: the cloud may have changed (an
    /// image uploaded, a flavor created, a quota raised). A spec change retries at once.
    pub invalid_retry: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(300),
            jitter: 0.1,
            poll: Duration::from_secs(5),
            resync: Duration::from_secs(600),
            conflict_base: Duration::from_millis(250),
            conflict_cap: Duration::from_secs(5),
            invalid_retry: Duration::from_secs(600),
        }
    }
}

impl RetryPolicy {
    /// `delay` with the policy's jitter applied.
    pub fn jittered(&self, delay: Duration) -> Duration {
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 + jitter * (fastrand::f64() * 2.0 - 1.0);
        delay.mul_f64(factor)
    }

    /// The delay before the next attempt after `failures` failures in a row (at least 1): base ×
    /// 2^(failures−1), capped, jittered.
    pub fn backoff(&self, failures: u32) -> Duration {
        self.jittered(doubled(self.backoff_base, self.backoff_cap, failures))
    }

    /// The delay before the next attempt after `conflicts` reconciles in a row (at least 1) ended
    /// with a 409: conflict base × 2^(conflicts−1), capped, jittered.
    pub fn conflict_backoff(&self, conflicts: u32) -> Duration {
        self.jittered(doubled(self.conflict_base, self.conflict_cap, conflicts))
    }
}

/// `base` × 2^(n−1) for n ≥ 1, at most `cap`.
fn doubled(base: Duration, cap: Duration, n: u32) -> Duration {
    let exponent = n.saturating_sub(1).min(31);
    base.saturating_mul(1u32 << exponent).min(cap)
}

/// How a failed watch is retried: after 0.5 s, doubling up to 5 s (±20 %), and from 0.5 s again
/// after anything the watch delivers (kube-runtime resets it on every event). Used for every
/// watch, and the default of every controller's trigger streams (each paced on its own errors;
/// see [`crate::controller::Controller::trigger_backoff`]).
///
/// kube-runtime's default (client-go's: up to 30 s plus as much again in jitter, reset only after
/// two quiet minutes) left every controller blind for over a minute after an API server restart:
/// each watch fails while the server is down, then gets 410 Gone for its stale resource version,
/// and the delays add up before the re-list. With a 5 s cap a manager of a dozen watches sends a
/// struggling API server about two requests a second, and is back within seconds of its return.
#[derive(Clone, Debug)]
pub struct WatchBackoff {
    policy: RetryPolicy,
    failures: u32,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self {
            policy: RetryPolicy {
                backoff_base: Duration::from_millis(500),
                backoff_cap: Duration::from_secs(5),
                jitter: 0.2,
                ..RetryPolicy::default()
            },
            failures: 0,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        Some(self.policy.backoff(self.failures))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Counts failures in a row per object. Reset by the object's next success.
#[derive(Debug, Default)]
pub(crate) struct FailureCounts {
    counts: Mutex<HashMap<String, u32>>,
}

impl FailureCounts {
    /// Records one more failure and returns how many there were in a row.
    pub(crate) fn record_failure(&self, key: &str) -> u32 {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = counts.entry(key.to_string()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    /// Forgets the failures of `key`.
    pub(crate) fn reset(&self, key: &str) {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        counts.remove(key);
    }

    fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|key, _| keep(key));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact() -> RetryPolicy {
        RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn a_failed_watch_is_retried_within_seconds_and_starts_over_after_an_event() {
        let mut backoff = WatchBackoff::default();
        let delays: Vec<Duration> = backoff.by_ref().take(8).collect();
        assert!(delays[0] <= Duration::from_millis(600), "{delays:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(6)),
            "{delays:?}"
        );
        assert!(delays[7] >= Duration::from_secs(4), "{delays:?}");
        backoff.reset();
        assert!(backoff.next() <= Some(Duration::from_millis(600)));
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let policy = exact();
        assert_eq!(policy.backoff(1), Duration::from_secs(1));
        assert_eq!(policy.backoff(2), Duration::from_secs(2));
        assert_eq!(policy.backoff(5), Duration::from_secs(16));
        assert_eq!(policy.backoff(20), Duration::from_secs(300));
        assert_eq!(policy.backoff(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let policy = RetryPolicy {
            jitter: 0.2,
            ..RetryPolicy::default()
        };
        for _ in 0..1000 {
            let delay = policy.jittered(Duration::from_secs(10));
            assert!(
                delay >= Duration::from_secs(8) && delay <= Duration::from_secs(12),
                "{delay:?}"
            );
        }
    }

    #[test]
    fn a_conflict_is_retried_shortly_and_leaves_the_failure_streak_alone() {
        let state = RetryState::new(exact());
        let mut object = k8s_openapi::api::core::v1::ConfigMap::default();
        object.metadata.name = Some("m".into());
        let after = |conflict: bool| state.back_off(&object, &"refused", conflict);
        let millis = |ms: u64| Action::requeue(Duration::from_millis(ms));

        assert_eq!(after(false), millis(1000));
        assert_eq!(after(false), millis(2000));
        assert_eq!(after(true), millis(250));
        assert_eq!(after(true), millis(500));
        for _ in 0..20 {
            after(true);
        }
        assert_eq!(after(true), millis(5000), "capped however many");
        assert_eq!(after(false), millis(4000), "the failure streak went on");

        assert!(state.next_action(&object, Next::AwaitChange).is_ok());
        assert_eq!(after(true), millis(250), "a success resets conflicts");
        assert_eq!(after(false), millis(1000), "and failures");
    }

    fn object(uid: &str, generation: i64) -> k8s_openapi::api::core::v1::ConfigMap {
        let mut object = k8s_openapi::api::core::v1::ConfigMap::default();
        object.metadata.name = Some("m".into());
        object.metadata.namespace = Some("ns".into());
        object.metadata.uid = Some(uid.into());
        object.metadata.generation = Some(generation);
        object
    }

    #[tokio::test]
    async fn an_invalid_configuration_is_remembered_per_uid_and_looked_at_again_later() {
        let state = RetryState::new(RetryPolicy {
            invalid_retry: Duration::from_millis(50),
            ..exact()
        });
        let first = object("uid-1", 3);
        let action = state.next_action(&first, Next::InvalidConfiguration);
        assert_eq!(
            action.ok(),
            Some(Action::requeue(Duration::from_millis(50)))
        );
        assert_eq!(state.invalid_at(&first), Some(3));
        // Skipped reconciles keep the memo and its age.
        state.next_action(&first, Next::InvalidConfiguration).ok();
        assert_eq!(
            state.invalid_at(&object("uid-2", 3)),
            None,
            "a recreated object of the same name is not the old one"
        );
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(state.invalid_at(&first), None, "the cloud is asked again");
    }

    #[test]
    fn a_working_configuration_clears_the_memo() {
        let state = RetryState::new(exact());
        let object = object("uid-1", 3);
        state.next_action(&object, Next::InvalidConfiguration).ok();
        assert_eq!(state.invalid_at(&object), Some(3));
        state.next_action(&object, Next::Resync).ok();
        assert_eq!(state.invalid_at(&object), None);
    }

    #[tokio::test]
    async fn a_converged_object_is_left_to_the_sweep_while_one_runs_and_requeued_otherwise() {
        use futures::StreamExt;
        let memory = Arc::new(RetryMemory::default());
        let state = RetryState::with_memory(exact(), Arc::clone(&memory));
        let object = object("uid-1", 1);
        let requeued = Some(Action::requeue(Duration::from_secs(600)));
        // No sweep: a timer of the controller's own, as before.
        assert_eq!(state.next_action(&object, Next::Resync).ok(), requeued);
        let (store, _writer) =
            kube::runtime::reflector::store::<k8s_openapi::api::core::v1::ConfigMap>();
        let mut sweep = Box::pin(crate::cache::resync::sweep(
            Arc::clone(&memory.resyncs),
            store,
            Duration::from_secs(600),
        ));
        // Made but not polled yet: still a timer.
        assert_eq!(state.next_action(&object, Next::Resync).ok(), requeued);
        assert_eq!(memory.resyncs.len(), 0);
        assert!(futures::FutureExt::now_or_never(sweep.next()).is_none());
        assert_eq!(
            state.next_action(&object, Next::Resync).ok(),
            Some(Action::await_change())
        );
        assert_eq!(memory.resyncs.len(), 1, "scheduled with the sweep");
        // A reconcile that starts takes the schedule out; what it ends with decides.
        state.starting(&object);
        assert_eq!(memory.resyncs.len(), 0);
        state.next_action(&object, Next::Resync).ok();
        assert_eq!(memory.resyncs.len(), 1);
        // The sweep gone: timers again, and nothing left scheduled.
        drop(sweep);
        assert_eq!(memory.resyncs.len(), 0);
        assert_eq!(state.next_action(&object, Next::Resync).ok(), requeued);
    }

    #[test]
    fn failures_count_per_object_and_reset() {
        let counts = FailureCounts::default();
        assert_eq!(counts.record_failure("a"), 1);
        assert_eq!(counts.record_failure("a"), 2);
        assert_eq!(counts.record_failure("b"), 1);
        counts.reset("a");
        assert_eq!(counts.record_failure("a"), 1);
    }
}

/// The per-controller retry state: the policy, failure counts and invalid generations, and the
/// translation of a plan's [`Next`] into the controller's [`Action`].
#[derive(Debug)]
pub struct RetryState {
    /// The policy the controller retries with (its `poll` is how often a controller looks again
    /// while waiting for something no watch reports).
    pub policy: RetryPolicy,
    memory: Arc<RetryMemory>,
}

/// What a controller remembers per object between reconciles: failures and conflicts in a row,
/// configurations found invalid. Shared by the reconciles and the watch that triggers them, which
/// forgets every object the controller's store no longer holds at each deletion and each
/// re-list: the memory holds the objects that exist, plus at most the ones whose reconcile ended
/// after their deletion was seen, until the next deletion.
#[derive(Debug, Default)]
pub(crate) struct RetryMemory {
    failures: FailureCounts,
    conflicts: FailureCounts,
    invalid: InvalidGenerations,
    /// When converged objects are due again, while the controller's trigger sweeps for them
    /// ([`crate::cache::resync`]); not pruned by the watch: an entry goes when its object's next
    /// reconcile starts, or when it comes due (whether or not the object still exists).
    pub(crate) resyncs: Arc<Resyncs>,
}

impl RetryMemory {
    /// Forgets every object of which `exists` (given its `namespace/name` key and, for the
    /// invalid-configuration memo, its UID) says it is gone.
    pub(crate) fn retain(
        &self,
        exists_by_name: impl Fn(&str) -> bool,
        exists_by_uid: impl Fn(&str) -> bool,
    ) {
        self.failures.retain(&exists_by_name);
        self.conflicts.retain(&exists_by_name);
        self.invalid.retain(&exists_by_uid);
    }

    /// How many objects are remembered (by any of the three).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.failures.len() + self.conflicts.len() + self.invalid.len()
    }
}

impl RetryState {
    #[cfg(test)]
    pub(crate) fn new(policy: RetryPolicy) -> Self {
        Self::with_memory(policy, Arc::default())
    }

    /// The state over `memory`, which the watch of the controller's kind prunes.
    pub(crate) fn with_memory(policy: RetryPolicy, memory: Arc<RetryMemory>) -> Self {
        Self { policy, memory }
    }

    /// The generation at which this very object (by UID: a deleted and recreated object of the
    /// same name starts afresh) was found invalid, while that finding is younger than
    /// [`RetryPolicy::invalid_retry`]; after that the cloud is asked again.
    pub fn invalid_at<K: kube::Resource>(&self, object: &K) -> Option<i64> {
        self.memory
            .invalid
            .get(&memo_key(object), self.policy.invalid_retry)
    }

    /// A reconcile of `object` starts: what it ends with decides what comes next, so a resync
    /// scheduled for it is taken out (a change and a resync then reconcile it once, not twice).
    pub(crate) fn starting<K: kube::Resource>(&self, object: &K) {
        self.memory.resyncs.cancel(object.meta());
    }

    /// What the controller does after a reconcile that ended with `next`. A failure is returned
    /// as an error, for [`Self::back_off`]; anything else resets the failure count.
    pub(crate) fn next_action<K: kube::Resource>(
        &self,
        object: &K,
        next: Next,
    ) -> Result<Action, ActuatorError> {
        let key = object_key(object);
        let action = match next {
            Next::Failed(error) => return Err(error),
            Next::AwaitChange => Action::await_change(),
            Next::Requeue(delay) => Action::requeue(self.policy.jittered(delay)),
            Next::Resync if self.memory.resyncs.swept() => {
                let after = self.policy.jittered(self.policy.resync);
                self.memory.resyncs.schedule(object.meta(), after);
                Action::await_change()
            }
            Next::Resync => Action::requeue(self.policy.jittered(self.policy.resync)),
            Next::InvalidConfiguration => {
                if let Some(generation) = object.meta().generation {
                    self.memory.invalid.set(&memo_key(object), generation);
                }
                // A spec change comes back through the watch; otherwise look again later.
                self.memory.failures.reset(&key);
                self.memory.conflicts.reset(&key);
                return Ok(Action::requeue(
                    self.policy.jittered(self.policy.invalid_retry),
                ));
            }
        };
        // Anything but an invalid configuration: the configuration worked (or the object is
        // gone), so the memo goes.
        self.memory.invalid.clear(&memo_key(object));
        self.memory.failures.reset(&key);
        self.memory.conflicts.reset(&key);
        Ok(action)
    }

    /// The requeue after a reconcile that ended with `error`. A 409 from the API server
    /// (`conflict`) means the cache was behind: a short retry, logged at debug level, that leaves
    /// the failure streak alone. Anything else is a failure: exponential in the failures in a row,
    /// capped, and logged as a warning.
    pub(crate) fn back_off<K: kube::Resource, E: std::fmt::Display>(
        &self,
        object: &K,
        error: &E,
        conflict: bool,
    ) -> Action {
        let key = object_key(object);
        if conflict {
            let conflicts = self.memory.conflicts.record_failure(&key);
            let delay = self.policy.conflict_backoff(conflicts);
            tracing::debug!(object = %key, conflicts, retry_in = ?delay, %error, "write met a newer version; retrying");
            return Action::requeue(delay);
        }
        let failures = self.memory.failures.record_failure(&key);
        let delay = self.policy.backoff(failures);
        tracing::warn!(object = %key, failures, retry_in = ?delay, %error, "reconcile failed");
        Action::requeue(delay)
    }
}

/// Remembers at which generation an object's configuration was found invalid, so that the cloud is
/// not asked again until the generation changes. Lost on restart, which costs one extra call.
#[derive(Debug, Default)]
pub(crate) struct InvalidGenerations {
    /// By object UID: the generation found invalid and when it first was.
    generations: Mutex<HashMap<String, (i64, std::time::Instant)>>,
}

impl InvalidGenerations {
    /// The generation memoised for `key`, unless the memo is older than `ttl`.
    pub(crate) fn get(&self, key: &str, ttl: Duration) -> Option<i64> {
        let memo = self
            .generations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        memo.get(key)
            .filter(|(_, since)| since.elapsed() < ttl)
            .map(|(generation, _)| *generation)
    }

    /// Memoises `generation` as invalid, keeping when it was first found for the same generation.
    pub(crate) fn set(&self, key: &str, generation: i64) {
        let mut memo = self
            .generations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match memo.get(key) {
            Some((known, _)) if *known == generation => {}
            _ => {
                memo.insert(key.to_string(), (generation, std::time::Instant::now()));
            }
        }
    }

    pub(crate) fn clear(&self, key: &str) {
        self.generations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(key);
    }

    fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.generations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|key, _| keep(key));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.generations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }
}

/// The key of the invalid-configuration memo: the object's UID, so that a deleted and recreated
/// object of the same name is not taken for the old one (`namespace/name` without a UID).
fn memo_key<K: kube::Resource>(object: &K) -> String {
    match object.meta().uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => object_key(object),
    }
}

/// The key under which per-object retry state is kept: `namespace/name`.
pub(crate) fn object_key<K: kube::Resource>(object: &K) -> String {
    let meta = object.meta();
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// The namespace (empty for a cluster-scoped object) and name of an [`object_key`].
pub(crate) fn split_object_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}
