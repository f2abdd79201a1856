//! Values a reconcile would otherwise read from the API server every time although they hardly
//! ever change — a cluster's PKI, a client of its workload cluster, when a join token was last
//! extended, that a cluster's PKI Secrets were found complete — kept for a while by key, shared by
//! the reconciles of a controller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Values kept for `ttl` after they were put, by key: a value is never handed out once its `ttl`
/// has passed. Bounded: once it holds 256 entries, each `put` drops the expired ones (so it holds
/// at most the keys put within one `ttl`, plus 256).
#[derive(Debug)]
pub struct Memo<T> {
    ttl: Duration,
    entries: Mutex<HashMap<String, (Instant, Arc<T>)>>,
}

/// Entries past which expired ones are dropped.
const PRUNE_ABOVE: usize = 256;

impl<T> Memo<T> {
    /// A memo whose values are good for `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The value put under `key` less than `ttl` ago.
    pub fn get(&self, key: &str) -> Option<Arc<T>> {
        let mut entries = self.lock();
        match entries.get(key) {
            Some((at, value)) if at.elapsed() < self.ttl => Some(Arc::clone(value)),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` under `key` from now on, and returns it.
    pub fn put(&self, key: String, value: T) -> Arc<T> {
        let value = Arc::new(value);
        let mut entries = self.lock();
        if entries.len() >= PRUNE_ABOVE {
            let ttl = self.ttl;
            entries.retain(|_, (at, _)| at.elapsed() < ttl);
        }
        entries.insert(key, (Instant::now(), Arc::clone(&value)));
        value
    }

    /// Forgets what is kept under `key` (it proved wrong).
    pub fn remove(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<T>)>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_value_is_kept_for_its_time_and_no_longer() {
        let memo = Memo::new(Duration::from_secs(60));
        assert!(memo.get("a").is_none());
        memo.put("a".into(), 1);
        assert_eq!(memo.get("a").as_deref(), Some(&1));
        assert!(memo.get("b").is_none());
        memo.remove("a");
        assert!(memo.get("a").is_none());
        let short = Memo::new(Duration::from_millis(1));
        short.put("a".into(), 1);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(short.get("a").is_none(), "expired");
    }

    #[tokio::test]
    async fn expired_entries_are_dropped_as_it_grows() {
        let memo = Memo::new(Duration::from_millis(1));
        for i in 0..PRUNE_ABOVE {
            memo.put(i.to_string(), ());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        memo.put("last".into(), ());
        assert_eq!(memo.lock().len(), 1);
    }
}
