//! EC2 is eventually consistent: an instance `RunInstances` just answered with may be missing
//! from `DescribeInstances` for a few seconds. What this process launched is remembered for a
//! bounded time, so that an instance not yet visible is waited for — never taken for gone (a
//! deletion would leak it, an `exists` would report it lost) — and the wait ends: after
//! [`GRACE`] the cloud's answer stands.
//!
//! The memory is this process's only: after a restart, a launch replayed with the same
//! `ClientToken` finds the first instance instead (the token is what stops a duplicate; this
//! only stops a wrong conclusion).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How long after a launch an instance that cannot be seen is waited for.
pub const GRACE: Duration = Duration::from_secs(120);

/// How soon a reconcile waiting for an instance to become visible looks again.
pub const RECHECK: Duration = Duration::from_secs(5);

/// Launches of this process, by idempotency key and by instance ID.
#[derive(Debug, Default)]
pub struct Visibility {
    launched: Mutex<HashMap<String, Instant>>,
}

impl Visibility {
    /// Remembers that `name` (an idempotency key, or the ID of an instance just launched) was
    /// launched now.
    pub fn launched(&self, name: &str) {
        let now = Instant::now();
        let mut launched = self.launched.lock().unwrap_or_else(PoisonError::into_inner);
        launched.retain(|_, at| now.saturating_duration_since(*at) < GRACE);
        launched.insert(name.to_string(), now);
    }

    /// Whether `name` was launched less than [`GRACE`] ago, so that not seeing it means "not
    /// yet".
    pub fn pending(&self, name: &str) -> bool {
        self.launched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .is_some_and(|at| at.elapsed() < GRACE)
    }

    /// `name` was seen: no more waiting for it.
    pub fn seen(&self, name: &str) {
        self.launched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_launch_is_waited_for_within_the_grace_and_not_after() {
        let visibility = Visibility::default();
        assert!(!visibility.pending("capi-1"));
        visibility.launched("capi-1");
        assert!(visibility.pending("capi-1"));
        tokio::time::advance(GRACE - Duration::from_secs(1)).await;
        assert!(visibility.pending("capi-1"));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!visibility.pending("capi-1"), "the wait ends");
        visibility.launched("i-2");
        visibility.seen("i-2");
        assert!(!visibility.pending("i-2"));
        tokio::time::advance(GRACE).await;
        visibility.launched("i-3");
        assert_eq!(
            visibility.launched.lock().unwrap().len(),
            1,
            "old launches are forgotten"
        );
    }
}
