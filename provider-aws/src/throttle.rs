//! Keeping the provider's AWS calls under the account's API rate limits: one budget per region
//! shared by every reconcile (CAPA throttled itself at about 20 clusters, CAPA #1275, because
//! each reconcile retried on its own).
//!
//! A [`RegionBudget`] is a token bucket (`rate` calls per second on average, `burst` at once)
//! that every call takes a permit from before it is sent. When AWS answers a call with a
//! throttling error anyway, [`RegionBudget::throttled`] halves the bucket's rate for a minute and
//! says how long the reconcile should wait before it tries again: 5 s, doubling with every
//! throttled answer in a row, at most 2 minutes (with ±20 % jitter so that waiting reconciles
//! do not return together); a call that succeeds resets it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The default budget per region: well under EC2's default account limits for describe calls
/// (a bucket of 100 refilled at 20 per second) so that other tools of the account keep room.
pub const DEFAULT_RATE: f64 = 10.0;
/// The default burst per region.
pub const DEFAULT_BURST: u32 = 20;

/// The first wait after a throttled answer.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// The longest wait after throttled answers in a row.
pub const MAX_BACKOFF: Duration = Duration::from_secs(120);
/// How long a throttled answer halves the rate.
pub const SLOWDOWN: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
    throttled_in_a_row: u32,
    slowed_until: Option<Instant>,
}

/// One region's budget of AWS calls, shared by every reconcile (cheap to clone).
#[derive(Clone, Debug)]
pub struct RegionBudget {
    rate: f64,
    burst: f64,
    bucket: Arc<Mutex<Bucket>>,
}

impl RegionBudget {
    /// A budget of `rate` calls per second on average (at least one every ten seconds) and
    /// `burst` (at least 1) at once, full at the start.
    pub fn new(rate: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            rate: if rate.is_finite() {
                rate.max(0.1)
            } else {
                DEFAULT_RATE
            },
            burst,
            bucket: Arc::new(Mutex::new(Bucket {
                tokens: burst,
                updated: Instant::now(),
                throttled_in_a_row: 0,
                slowed_until: None,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.bucket.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The rate now: halved while a throttled answer is less than [`SLOWDOWN`] old.
    fn current_rate(&self, bucket: &Bucket, now: Instant) -> f64 {
        match bucket.slowed_until {
            Some(until) if now < until => self.rate / 2.0,
            _ => self.rate,
        }
    }

    /// Waits for a permit to make one call.
    pub async fn acquire(&self) {
        loop {
            let wait = {
                let mut bucket = self.lock();
                let now = Instant::now();
                let rate = self.current_rate(&bucket, now);
                let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
                bucket.tokens = (bucket.tokens + elapsed * rate).min(self.burst);
                bucket.updated = now;
                if bucket.tokens >= 1.0 {
                    bucket.tokens -= 1.0;
                    return;
                }
                Duration::from_secs_f64((1.0 - bucket.tokens) / rate)
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// AWS answered a call with a throttling error: the rate is halved for [`SLOWDOWN`], and the
    /// reconcile should wait the returned time before trying again.
    pub fn throttled(&self) -> Duration {
        let mut bucket = self.lock();
        bucket.throttled_in_a_row = bucket.throttled_in_a_row.saturating_add(1);
        bucket.slowed_until = Some(Instant::now() + SLOWDOWN);
        let doublings = bucket.throttled_in_a_row.saturating_sub(1).min(8);
        let backoff = FIRST_BACKOFF
            .saturating_mul(1 << doublings)
            .min(MAX_BACKOFF);
        backoff.mul_f64(0.8 + 0.4 * fastrand::f64())
    }

    /// A call succeeded: the next throttled answer waits [`FIRST_BACKOFF`] again.
    pub fn succeeded(&self) {
        self.lock().throttled_in_a_row = 0;
    }
}

/// The budgets of every region, created on first use with the same settings.
#[derive(Clone, Debug)]
pub struct Budgets {
    rate: f64,
    burst: u32,
    regions: Arc<Mutex<HashMap<String, RegionBudget>>>,
}

impl Default for Budgets {
    fn default() -> Self {
        Self::new(DEFAULT_RATE, DEFAULT_BURST)
    }
}

impl Budgets {
    /// Budgets of `rate` calls per second and `burst` per region.
    pub fn new(rate: f64, burst: u32) -> Self {
        Self {
            rate,
            burst,
            regions: Arc::default(),
        }
    }

    /// The budget of `region` (the same one for every caller).
    pub fn region(&self, region: &str) -> RegionBudget {
        self.regions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(region.to_string())
            .or_insert_with(|| RegionBudget::new(self.rate, self.burst))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn calls_beyond_the_burst_wait_for_the_rate() {
        let budget = RegionBudget::new(10.0, 5);
        let start = Instant::now();
        for _ in 0..5 {
            budget.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst goes at once");
        for _ in 0..10 {
            budget.acquire().await;
        }
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(990) && elapsed <= Duration::from_millis(1100),
            "{elapsed:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_answer_halves_the_rate_for_a_minute() {
        let budget = RegionBudget::new(10.0, 1);
        budget.acquire().await;
        let _ = budget.throttled();
        let start = Instant::now();
        for _ in 0..5 {
            budget.acquire().await;
        }
        let slowed = start.elapsed();
        assert!(slowed >= Duration::from_millis(990), "{slowed:?}");
        tokio::time::sleep(SLOWDOWN).await;
        let start = Instant::now();
        for _ in 0..6 {
            budget.acquire().await;
        }
        // One token was refilled while sleeping; five more at the full rate.
        assert!(
            start.elapsed() <= Duration::from_millis(510),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_is_capped_and_resets_after_a_success() {
        let budget = RegionBudget::new(10.0, 1);
        let waits: Vec<Duration> = (0..8).map(|_| budget.throttled()).collect();
        let within = |wait: Duration, nominal: Duration| {
            wait >= nominal.mul_f64(0.8) && wait <= nominal.mul_f64(1.2)
        };
        assert!(within(waits[0], FIRST_BACKOFF), "{waits:?}");
        assert!(within(waits[1], FIRST_BACKOFF * 2), "{waits:?}");
        assert!(within(waits[2], FIRST_BACKOFF * 4), "{waits:?}");
        assert!(within(waits[7], MAX_BACKOFF), "{waits:?}");
        budget.succeeded();
        assert!(within(budget.throttled(), FIRST_BACKOFF));
    }

    #[test]
    fn every_caller_of_a_region_shares_its_budget() {
        let budgets = Budgets::default();
        let one = budgets.region("eu-west-1");
        let same = budgets.region("eu-west-1");
        let other = budgets.region("us-east-1");
        assert!(Arc::ptr_eq(&one.bucket, &same.bucket));
        assert!(!Arc::ptr_eq(&one.bucket, &other.bucket));
    }
}
