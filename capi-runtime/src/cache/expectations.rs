//! Expectations: what a controller created or deleted and has not yet seen in its cache.
//!
//! A cache lags behind the controller's own writes. A MachineSet that counted its machines from a
//! cache that has not yet seen the three it just created would create three more, and a
//! KubeadmControlPlane a second etcd member; upstream guards this for deletions only in some
//! paths. A controller that counts from a cache records every create and delete here, and does
//! not scale an owner again until its cache shows all of them (or they expire after
//! [`EXPECTATION_TTL`], in case an event was missed).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long an expectation is waited for before it is dropped.
pub const EXPECTATION_TTL: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Pending {
    creates: HashSet<String>,
    deletes: HashSet<String>,
    since: Instant,
}

/// Pending creates and deletes per owner (keyed by the owner's UID).
#[derive(Debug, Default)]
pub struct Expectations {
    owners: Mutex<HashMap<String, Pending>>,
}

impl Expectations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn entry<R>(&self, owner: &str, change: impl FnOnce(&mut Pending) -> R) -> R {
        let mut owners = self.lock();
        let pending = owners.entry(owner.to_string()).or_insert_with(|| Pending {
            creates: HashSet::new(),
            deletes: HashSet::new(),
            since: Instant::now(),
        });
        pending.since = Instant::now();
        change(pending)
    }

    /// Records that `owner` created the object `name`.
    pub fn created(&self, owner: &str, name: &str) {
        self.entry(owner, |p| p.creates.insert(name.to_string()));
    }

    /// Records that `owner` deleted the object `name`.
    pub fn deleted(&self, owner: &str, name: &str) {
        self.entry(owner, |p| p.deletes.insert(name.to_string()));
    }

    /// Forgets a create that failed.
    pub fn create_failed(&self, owner: &str, name: &str) {
        self.entry(owner, |p| p.creates.remove(name));
    }

    /// Whether the cache of `owner`'s objects — `present` says whether a name is there (and not
    /// being deleted) — shows every recorded change. Observed changes are forgotten; expired ones
    /// too.
    pub fn satisfied(&self, owner: &str, present: impl Fn(&str) -> bool) -> bool {
        let mut owners = self.lock();
        let Some(pending) = owners.get_mut(owner) else {
            return true;
        };
        pending.creates.retain(|name| !present(name));
        pending.deletes.retain(|name| present(name));
        let done = pending.creates.is_empty() && pending.deletes.is_empty();
        if done || pending.since.elapsed() > EXPECTATION_TTL {
            owners.remove(owner);
            return true;
        }
        false
    }

    /// Forgets everything about `owner` (it was deleted).
    pub fn forget(&self, owner: &str) {
        self.lock().remove(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_wait_until_seen_and_deletes_until_gone() {
        let expectations = Expectations::default();
        assert!(expectations.satisfied("ms", |_| false), "nothing pending");
        expectations.created("ms", "a");
        expectations.deleted("ms", "b");
        assert!(
            !expectations.satisfied("ms", |n| n == "b"),
            "a not seen yet"
        );
        assert!(
            !expectations.satisfied("ms", |n| n == "a" || n == "b"),
            "b still there"
        );
        assert!(expectations.satisfied("ms", |n| n == "a"));
        assert!(
            expectations.satisfied("ms", |_| false),
            "forgotten once seen"
        );
    }

    #[test]
    fn a_failed_create_is_not_waited_for() {
        let expectations = Expectations::default();
        expectations.created("ms", "a");
        expectations.create_failed("ms", "a");
        assert!(expectations.satisfied("ms", |_| false));
    }

    #[test]
    fn owners_are_independent() {
        let expectations = Expectations::default();
        expectations.created("one", "a");
        assert!(expectations.satisfied("two", |_| false));
        expectations.forget("one");
        assert!(expectations.satisfied("one", |_| false));
    }
}
