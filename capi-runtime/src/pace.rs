//! Pacing the status writes of objects that summarise many others (a MachineSet's replica
//! counts, a MachineDeployment's, a Cluster's): while a thousand machines come up, each change
//! of one would otherwise be a status write of each summary — hundreds of writes a minute that
//! say what the next one says again. A paced status is written at most once per interval per
//! object; a change inside the interval is written at its end, by a requeue, from what the
//! caches hold then. Nothing is lost: the reconcile that writes recomputes the whole status.
//!
//! A change is either one some controller acts on ([`Change::ActedOn`]: a Machine's node
//! reference, a Cluster's initialization) or one that only informs a reader
//! ([`Change::Informs`]: a condition's reason, an intermediate phase). A change that only
//! informs is also held for the pacer's hold from when it was first seen unwritten, so that the
//! steps that follow it closely go in the same write — and a change acted on, when one comes,
//! takes it along at once.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::plan::Next;
use crate::write;

/// How far apart a summary's status writes are kept by default: a count lags the machines it
/// counts by at most this long.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// How long a change that only informs is held by default before it is written.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(5);

/// What a status change is to the controllers that read the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Some controller acts on it (it waits for it, or decides by it): written once the interval
    /// since the last write has passed.
    ActedOn,
    /// It only informs a reader: written once the interval since the last write has passed and
    /// the hold since it was first seen unwritten, whichever is later.
    Informs,
}

/// When each object's status was last written, to space the writes `interval` apart, and since
/// when a change that only informs has been held, to write it `hold` after. Bounded: once either
/// holds 256 records, each write drops those that can no longer hold anything back.
#[derive(Debug)]
pub struct StatusPacer {
    interval: Duration,
    hold: Duration,
    written: Mutex<HashMap<String, Instant>>,
    held: Mutex<Held>,
}

/// Since when each object's change that only informs has been held, and the size at which the
/// records are next pruned (twice what the last pruning kept, so that pruning stays rare however
/// many objects are held at once).
#[derive(Debug)]
struct Held {
    since: HashMap<String, Instant>,
    prune_at: usize,
}

impl Default for Held {
    fn default() -> Self {
        Self {
            since: HashMap::new(),
            prune_at: PRUNE_ABOVE,
        }
    }
}

impl Default for StatusPacer {
    fn default() -> Self {
        Self::new(DEFAULT_INTERVAL).holding(DEFAULT_HOLD)
    }
}

/// Records past which the pacer drops what is older than its interval.
const PRUNE_ABOVE: usize = 256;

impl StatusPacer {
    /// A pacer that keeps writes of one object `interval` apart (zero: never holds one back), and
    /// holds a change that only informs no longer than that.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            hold: Duration::ZERO,
            written: Mutex::new(HashMap::new()),
            held: Mutex::new(Held::default()),
        }
    }

    /// This pacer, holding a change that only informs for `hold` from when it is first seen
    /// unwritten.
    pub fn holding(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// How long until a `change` of `object`'s status may be written; `None`: now. The first
    /// call for a change that only informs starts its hold.
    pub fn wait_for<K: Resource>(&self, object: &K, change: Change) -> Option<Duration> {
        let spacing = self.wait(object);
        if change == Change::ActedOn || self.hold.is_zero() {
            return spacing;
        }
        let uid = object.meta().uid.as_ref()?;
        let since = {
            let mut held = lock(&self.held);
            if held.since.len() >= held.prune_at {
                // A record this old belongs to an object gone, a change undone or a status
                // written by another path.
                let stale = self.hold * 10;
                held.since.retain(|_, at| at.elapsed() < stale);
                held.prune_at = (held.since.len() * 2).max(PRUNE_ABOVE);
            }
            *held.since.entry(uid.clone()).or_insert_with(Instant::now)
        };
        let holding = self
            .hold
            .checked_sub(since.elapsed())
            .filter(|w| !w.is_zero());
        spacing.max(holding)
    }

    /// How long until `object`'s status may be written again; `None`: now.
    pub fn wait<K: Resource>(&self, object: &K) -> Option<Duration> {
        let uid = object.meta().uid.as_ref()?;
        let last = *self.lock().get(uid)?;
        self.interval
            .checked_sub(last.elapsed())
            .filter(|w| !w.is_zero())
    }

    /// Records that `object`'s status was written now.
    pub fn wrote<K: Resource>(&self, object: &K) {
        let Some(uid) = &object.meta().uid else {
            return;
        };
        lock(&self.held).since.remove(uid);
        let mut written = self.lock();
        if written.len() >= PRUNE_ABOVE {
            let interval = self.interval;
            written.retain(|_, at| at.elapsed() < interval);
        }
        written.insert(uid.clone(), Instant::now());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        lock(&self.written)
    }
}

fn lock<T>(records: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    records
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Merge-patches `object`'s status to `desired` when it differs from `current`, paced by
/// `pacer` as a change some controller acts on: inside the interval nothing is written and the
/// returned [`Next`] is `next` made due by the interval's end at the latest (an
/// [`Next::InvalidConfiguration`] or a failure, which cannot carry a requeue, is written at once
/// instead). Otherwise returns `next` unchanged.
pub async fn patch_status<K, S>(
    pacer: &StatusPacer,
    api: &Api<K>,
    object: &K,
    current: Option<&S>,
    desired: &S,
    next: Next,
) -> Result<Next, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    S: serde::Serialize + PartialEq,
{
    patch_status_as(pacer, api, object, current, desired, Change::ActedOn, next).await
}

/// [`patch_status`] for a `change` of the kind given: one that only informs is also held (see
/// [`StatusPacer::wait_for`]).
pub async fn patch_status_as<K, S>(
    pacer: &StatusPacer,
    api: &Api<K>,
    object: &K,
    current: Option<&S>,
    desired: &S,
    change: Change,
    next: Next,
) -> Result<Next, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    S: serde::Serialize + PartialEq,
{
    if current == Some(desired) {
        return Ok(next);
    }
    if let Some(wait) = pacer.wait_for(object, change)
        && matches!(next, Next::AwaitChange | Next::Resync | Next::Requeue(_))
    {
        return Ok(next.due_within(wait));
    }
    write::patch_status_if_changed(api, &object.name_any(), current, desired).await?;
    pacer.wrote(object);
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn object(uid: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "c", "uid": uid}}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_second_write_within_the_interval_waits_for_its_end() {
        let pacer = StatusPacer::new(Duration::from_secs(60));
        assert_eq!(pacer.wait(&object("a")), None, "never written: now");
        pacer.wrote(&object("a"));
        let wait = pacer.wait(&object("a"));
        assert!(
            wait.is_some_and(|w| w > Duration::from_secs(59) && w <= Duration::from_secs(60)),
            "{wait:?}"
        );
        assert_eq!(
            pacer.wait(&object("b")),
            None,
            "another object is not held back"
        );
    }

    #[tokio::test]
    async fn a_change_that_only_informs_is_held_from_when_it_was_first_seen_until_written() {
        let pacer = StatusPacer::new(Duration::from_secs(1)).holding(Duration::from_secs(60));
        let a = object("a");
        assert_eq!(
            pacer.wait_for(&a, Change::ActedOn),
            None,
            "a change acted on is written at once"
        );
        let first = pacer.wait_for(&a, Change::Informs);
        assert!(
            first.is_some_and(|w| w > Duration::from_secs(59)),
            "held: {first:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let again = pacer.wait_for(&a, Change::Informs);
        assert!(
            again.is_some_and(|w| w + Duration::from_millis(40) < first.unwrap_or_default()),
            "the hold runs from the first sight, not from each pass: {again:?} after {first:?}"
        );
        assert_eq!(
            pacer.wait_for(&a, Change::ActedOn),
            None,
            "a change acted on takes the held one along at once"
        );
        pacer.wrote(&a);
        let after = pacer.wait_for(&a, Change::Informs);
        assert!(
            after.is_some_and(|w| w > Duration::from_secs(59)),
            "a write ends the hold; the next change starts its own: {after:?}"
        );
        let unpaced = StatusPacer::new(Duration::ZERO);
        assert_eq!(
            unpaced.wait_for(&a, Change::Informs),
            None,
            "a pacer without a hold holds nothing"
        );
    }

    #[tokio::test]
    async fn a_write_after_the_interval_goes_at_once() {
        let pacer = StatusPacer::new(Duration::from_millis(1));
        pacer.wrote(&object("a"));
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(pacer.wait(&object("a")), None);
        let zero = StatusPacer::new(Duration::ZERO);
        zero.wrote(&object("a"));
        assert_eq!(
            zero.wait(&object("a")),
            None,
            "a zero interval paces nothing"
        );
    }

    /// An API answering every request with a ConfigMap, and how many it was sent.
    fn counting_api() -> (Api<ConfigMap>, std::sync::Arc<std::sync::atomic::AtomicU32>) {
        use std::sync::atomic::Ordering;
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = std::sync::Arc::clone(&sent);
        let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            counter.fetch_add(1, Ordering::Relaxed);
            let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                                          "metadata": {"name": "c", "uid": "a"}});
            async move {
                http::Response::builder()
                    .status(200)
                    .body(kube::client::Body::from(body.to_string().into_bytes()))
            }
        });
        let client = kube::Client::new(service, "default");
        (Api::namespaced(client, "default"), sent)
    }

    #[tokio::test]
    async fn a_paced_status_is_written_once_per_interval_and_the_rest_requeued() {
        use std::sync::atomic::Ordering;
        let (api, sent) = counting_api();
        let pacer = StatusPacer::new(Duration::from_secs(60));
        let cm = object("a");
        let next = patch_status(&pacer, &api, &cm, Some(&0), &1, Next::AwaitChange)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(next, Next::AwaitChange), "{next:?}");
        assert_eq!(sent.load(Ordering::Relaxed), 1);
        let next = patch_status(&pacer, &api, &cm, Some(&0), &2, Next::Resync)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(next, Next::Requeue(w) if w <= Duration::from_secs(60)),
            "{next:?}"
        );
        let next = patch_status(
            &pacer,
            &api,
            &cm,
            Some(&0),
            &2,
            Next::Requeue(Duration::from_secs(1)),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(next, Next::Requeue(w) if w == Duration::from_secs(1)),
            "{next:?}"
        );
        assert_eq!(sent.load(Ordering::Relaxed), 1, "held back");
        let next = patch_status(&pacer, &api, &cm, Some(&0), &2, Next::InvalidConfiguration)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(next, Next::InvalidConfiguration));
        assert_eq!(
            sent.load(Ordering::Relaxed),
            2,
            "a plan that cannot requeue writes at once"
        );
        let unchanged = patch_status(&pacer, &api, &cm, Some(&3), &3, Next::AwaitChange).await;
        assert!(matches!(unchanged, Ok(Next::AwaitChange)));
        assert_eq!(
            sent.load(Ordering::Relaxed),
            2,
            "nothing changed, nothing written"
        );
    }

    #[tokio::test]
    async fn records_older_than_the_interval_are_dropped_as_it_grows() {
        let pacer = StatusPacer::new(Duration::from_millis(1));
        for i in 0..PRUNE_ABOVE {
            pacer.wrote(&object(&i.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        pacer.wrote(&object("last"));
        assert_eq!(pacer.lock().len(), 1);
    }
}
