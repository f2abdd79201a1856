//! When the loop reconciles an object again: jittered requeues, and per-object exponential backoff
//! for failures.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

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
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(300),
            jitter: 0.1,
            poll: Duration::from_secs(5),
            resync: Duration::from_secs(600),
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
        let exponent = failures.saturating_sub(1).min(31);
        let raw = self.backoff_base.saturating_mul(1u32 << exponent);
        self.jittered(raw.min(self.backoff_cap))
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
    fn failures_count_per_object_and_reset() {
        let counts = FailureCounts::default();
        assert_eq!(counts.record_failure("a"), 1);
        assert_eq!(counts.record_failure("a"), 2);
        assert_eq!(counts.record_failure("b"), 1);
        counts.reset("a");
        assert_eq!(counts.record_failure("a"), 1);
    }
}
