//! Retrying one cloud call through a transient fault (a 5xx, a timeout, a reset connection)
//! before it fails the reconcile, as the official cloud SDKs do on their own: a few attempts,
//! exponential backoff with full jitter, capped.
//!
//! A call fails the reconcile only when every attempt failed (with three attempts at a 30 % fault
//! rate, 2.7 % of calls), so a reconcile of several calls rarely falls back on the per-object
//! backoff, which is minutes after a few failures in a row.
//!
//! Only calls that are safe to repeat may be retried: reads, deletes, and creates that carry an
//! idempotency token the cloud honours. A create the cloud cannot deduplicate is retried by
//! looking its result up first (see the in-memory provider's `create`).

use std::future::Future;
use std::time::Duration;

/// How a provider retries one cloud call; see the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub struct CallRetry {
    /// Attempts in all, the first included (1: no retry).
    pub attempts: u32,
    /// The wait before the second attempt is drawn from `[0, base]`, before the third from
    /// `[0, 2 × base]`, and so on.
    pub base: Duration,
    /// The longest wait between two attempts.
    pub cap: Duration,
}

impl Default for CallRetry {
    /// Three attempts, waits drawn from up to 100 ms, 200 ms (at most 2 s): a failed call costs
    /// at most about 300 ms more than it did.
    fn default() -> Self {
        Self {
            attempts: 3,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
        }
    }
}

impl CallRetry {
    /// No retries: every call is made once.
    pub fn none() -> Self {
        Self {
            attempts: 1,
            ..Self::default()
        }
    }

    /// Makes `call` until it succeeds, fails with an error `transient` does not accept, or the
    /// attempts are used up; returns the last outcome.
    pub async fn run<T, E, F, Fut>(
        &self,
        transient: impl Fn(&E) -> bool,
        mut call: F,
    ) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut attempt = 1;
        loop {
            match call().await {
                Err(error) if attempt < self.attempts && transient(&error) => {
                    tokio::time::sleep(self.wait(attempt)).await;
                    attempt += 1;
                }
                outcome => return outcome,
            }
        }
    }

    /// The wait after the `attempt`-th attempt failed (at least 1): full jitter over
    /// base × 2^(attempt−1), capped.
    pub fn wait(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(31);
        let ceiling = self.base.saturating_mul(1u32 << exponent).min(self.cap);
        ceiling.mul_f64(fastrand::f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn quick(attempts: u32) -> CallRetry {
        CallRetry {
            attempts,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(2),
        }
    }

    #[tokio::test]
    async fn a_transient_failure_is_retried_until_the_call_succeeds() {
        let calls = AtomicU32::new(0);
        let outcome: Result<u32, &str> = quick(3)
            .run(
                |_| true,
                || async {
                    match calls.fetch_add(1, Ordering::SeqCst) {
                        0 | 1 => Err("503"),
                        n => Ok(n),
                    }
                },
            )
            .await;
        assert_eq!(outcome, Ok(2));
    }

    #[tokio::test]
    async fn attempts_are_bounded_and_a_permanent_error_is_not_retried() {
        let calls = AtomicU32::new(0);
        let outcome: Result<(), &str> = quick(3)
            .run(
                |_| true,
                || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err("503")
                },
            )
            .await;
        assert_eq!((outcome, calls.load(Ordering::SeqCst)), (Err("503"), 3));

        calls.store(0, Ordering::SeqCst);
        let outcome: Result<(), &str> = quick(3)
            .run(
                |e: &&str| *e != "400",
                || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err("400")
                },
            )
            .await;
        assert_eq!((outcome, calls.load(Ordering::SeqCst)), (Err("400"), 1));
        assert_eq!(CallRetry::none().attempts, 1);
    }

    #[test]
    fn waits_are_jittered_below_a_doubling_capped_ceiling() {
        let retry = CallRetry::default();
        for _ in 0..1000 {
            assert!(retry.wait(1) <= Duration::from_millis(100));
            assert!(retry.wait(2) <= Duration::from_millis(200));
            assert!(retry.wait(40) <= Duration::from_secs(2));
        }
    }
}
