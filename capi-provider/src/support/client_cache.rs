//! Cloud clients made from a credentials Secret, shared between reconciles, that never outlive
//! the credentials they were made from.
//!
//! A client (and the token it holds) is made once per key — an identity and whatever else
//! selects a client, such as a region or an endpoint — and the `resourceVersion` of the Secret it
//! was made from. Guarantees:
//! - [`get`](ClientCache::get) returns a client only for the version asked for; a client of
//!   another version (the Secret changed) is dropped there and then;
//! - [`forget`](ClientCache::forget) drops every client of an identity at once: call it when its
//!   Secret is gone, so that nothing made from deleted credentials stays in memory;
//! - a client not used for the idle period is dropped at the next insert or lookup, so that the
//!   clients of clusters that went away (or moved to other credentials) do not accumulate.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The reasons of a connector's error saying an identity's credentials are gone or unusable:
/// its identity or Secret does not exist, or holds no usable credentials.
pub const CREDENTIALS_GONE: [&str; 4] = [
    "IdentityNotFound",
    "CredentialsSecretNotFound",
    "InvalidCredentials",
    "InvalidIdentity",
];

/// Whether `error` (from resolving an identity) says its credentials are gone: then
/// [`ClientCache::forget`] its clients. A refused namespace or an API server that did not answer
/// says nothing about them, and one tenant's refusal must not cost another its clients.
pub fn credentials_gone(error: &capi_core::ActuatorError) -> bool {
    CREDENTIALS_GONE.contains(&error.reason())
}

/// How long an unused client is kept by default.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(30 * 60);

struct Entry<V> {
    version: String,
    client: V,
    used: Instant,
}

/// See the module documentation.
pub struct ClientCache<K, V> {
    entries: Mutex<HashMap<K, Entry<V>>>,
    idle: Duration,
}

impl<K, V> Default for ClientCache<K, V> {
    fn default() -> Self {
        Self::new(DEFAULT_IDLE)
    }
}

impl<K, V> std::fmt::Debug for ClientCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCache")
            .field("clients", &self.len())
            .field("idle", &self.idle)
            .finish()
    }
}

impl<K, V> ClientCache<K, V> {
    /// A cache dropping clients unused for `idle`.
    pub fn new(idle: Duration) -> Self {
        Self {
            entries: Mutex::default(),
            idle,
        }
    }

    /// How many clients are held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no client is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Entry<V>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Eq + Hash, V: Clone> ClientCache<K, V> {
    /// The client of `key` made from Secret version `version`, if one is held.
    pub fn get(&self, key: &K, version: &str) -> Option<V> {
        let mut entries = self.lock();
        self.sweep(&mut entries);
        match entries.get_mut(key) {
            Some(entry) if entry.version == version => {
                entry.used = Instant::now();
                Some(entry.client.clone())
            }
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `client`, made for `key` from Secret version `version`, replacing any other.
    pub fn insert(&self, key: K, version: String, client: V) {
        let mut entries = self.lock();
        self.sweep(&mut entries);
        entries.insert(
            key,
            Entry {
                version,
                client,
                used: Instant::now(),
            },
        );
    }

    /// Drops every client whose key `matches` (those of an identity whose Secret is gone).
    pub fn forget(&self, matches: impl Fn(&K) -> bool) {
        self.lock().retain(|key, _| !matches(key));
    }

    fn sweep(&self, entries: &mut HashMap<K, Entry<V>>) {
        let idle = self.idle;
        entries.retain(|_, entry| entry.used.elapsed() < idle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_returned_only_for_its_secret_version() {
        let cache: ClientCache<(&str, &str), u32> = ClientCache::default();
        cache.insert(("team-a/creds", "eu-west-1"), "7".into(), 1);
        assert_eq!(cache.get(&("team-a/creds", "eu-west-1"), "7"), Some(1));
        assert_eq!(cache.get(&("team-a/creds", "us-east-1"), "7"), None);
        assert_eq!(cache.get(&("team-a/creds", "eu-west-1"), "8"), None);
        assert!(cache.is_empty(), "the old version's client is dropped");
    }

    #[test]
    fn forgetting_an_identity_drops_all_of_its_clients() {
        let cache: ClientCache<(&str, &str), u32> = ClientCache::default();
        cache.insert(("team-a/creds", "eu-west-1"), "7".into(), 1);
        cache.insert(("team-a/creds", "us-east-1"), "7".into(), 2);
        cache.insert(("team-b/creds", "eu-west-1"), "3".into(), 3);
        cache.forget(|(identity, _)| *identity == "team-a/creds");
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(&("team-b/creds", "eu-west-1"), "3"), Some(3));
    }

    #[test]
    fn an_idle_client_is_dropped() {
        // Idle for zero time: every client is idle by the next call.
        let cache: ClientCache<&str, u32> = ClientCache::new(Duration::ZERO);
        cache.insert("a", "1".into(), 1);
        cache.insert("b", "1".into(), 2);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(&"a", "1"), None);
    }
}
