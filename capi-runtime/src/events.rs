//! Events for `kubectl describe`: an [`EventRecorder`] publishes `events.k8s.io/v1` Events for
//! one controller and folds repeats into a series, in memory that does not grow with the number
//! of objects.
//!
//! Guarantees:
//! - an event that repeats one published less than [`SERIES_WINDOW`] before — same object, type,
//!   reason, action and note — is one PATCH of the earlier event's `series` (count and last
//!   observed time), not a new Event; anything else, or a repeat whose earlier Event is gone
//!   (the API server expires them), is a new Event;
//! - at most [`SERIES_REMEMBERED`] series are remembered, the least recently published going
//!   first (as client-go's event correlator bounds its caches): a forgotten series costs a new
//!   Event at its next repeat, never an error; each remembered series costs about a hundred
//!   bytes, whatever the object or the note;
//! - publishing never fails a caller: the answer is returned for the caller to log, and nothing
//!   is retried.
//!
//! Memory is bounded by the number of series, not by the number of objects or events: no cache
//! of whole events is kept and nothing is swept at publish time.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use hashlink::LruCache;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// How long after its last occurrence an event's repeat still joins its series (client-go's and
/// kube-runtime's six minutes).
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// How many series one recorder remembers (client-go's event correlator keeps 4096 entries).
pub const SERIES_REMEMBERED: usize = 4096;

/// What to publish about an object.
#[derive(Clone, Copy, Debug)]
pub struct Occurrence<'a> {
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// Why (a `CamelCase` reason).
    pub reason: &'a str,
    /// What the controller was doing (`Reconcile`).
    pub action: &'a str,
    /// What happened, for a human; at most 1 KiB (the API refuses longer notes).
    pub note: &'a str,
}

/// Publishes the events of one controller (its `reportingController`); cloning shares the
/// remembered series. See the module documentation.
#[derive(Clone)]
pub struct EventRecorder {
    client: Client,
    controller: String,
    series: Arc<Mutex<Remembered>>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

/// The series a recorder remembers, by a hash of what makes events the same.
struct Remembered {
    series: LruCache<u64, Series>,
    hasher: std::collections::hash_map::RandomState,
}

/// One published event that repeats join.
#[derive(Clone, Debug, PartialEq)]
struct Series {
    /// The Event's name (in the regarded object's namespace).
    name: String,
    /// Occurrences so far (1: the Event alone, no `series` yet).
    count: i32,
    last_observed: Timestamp,
}

/// What publishing an occurrence takes: a new Event, or a PATCH of the series of `name`.
#[derive(Debug, PartialEq)]
enum Step {
    Create,
    Repeat { name: String, count: i32 },
}

impl Remembered {
    fn with_capacity(capacity: usize) -> Self {
        Self {
            series: LruCache::new(capacity),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    /// The key of an occurrence about `regarding` (64 bits: two different events share one with
    /// odds of about 10⁻¹² among 4096; the cost would be a count on the wrong note).
    fn key(&self, regarding: &ObjectReference, occurrence: &Occurrence<'_>) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        (
            &regarding.uid,
            &regarding.kind,
            &regarding.namespace,
            &regarding.name,
        )
            .hash(&mut hasher);
        (
            occurrence.warning,
            occurrence.reason,
            occurrence.action,
            occurrence.note,
        )
            .hash(&mut hasher);
        hasher.finish()
    }

    /// What publishing the occurrence of `key` at `now` takes. A series past its window is
    /// forgotten.
    fn step(&mut self, key: u64, now: Timestamp) -> Step {
        match self.series.get(&key) {
            Some(series) if series.last_observed + SERIES_WINDOW > now => Step::Repeat {
                name: series.name.clone(),
                count: series.count + 1,
            },
            Some(_) => {
                self.series.remove(&key);
                Step::Create
            }
            None => Step::Create,
        }
    }

    /// Remembers that the Event `name` has been seen `count` times, the last at `now`.
    fn observed(&mut self, key: u64, name: String, count: i32, now: Timestamp) {
        self.series.insert(
            key,
            Series {
                name,
                count,
                last_observed: now,
            },
        );
    }

    fn forget(&mut self, key: u64) {
        self.series.remove(&key);
    }
}

impl EventRecorder {
    /// A recorder publishing through `client` as `controller` (`reportingController` and
    /// `reportingInstance`).
    pub fn new(client: Client, controller: impl Into<String>) -> Self {
        Self::with_capacity(client, controller, SERIES_REMEMBERED)
    }

    fn with_capacity(client: Client, controller: impl Into<String>, capacity: usize) -> Self {
        Self {
            client,
            controller: controller.into(),
            series: Arc::new(Mutex::new(Remembered::with_capacity(capacity.max(1)))),
        }
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, Remembered> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes `occurrence` about `regarding`: a new Event in its namespace (`default` for a
    /// cluster-scoped object), or one more in the series of the same event published less than
    /// [`SERIES_WINDOW`] ago.
    ///
    /// # Errors
    ///
    /// The API server's answer when it refused the Event (e.g. no RBAC for `events.k8s.io`).
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        occurrence: &Occurrence<'_>,
    ) -> Result<(), kube::Error> {
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let now = Timestamp::now();
        let (key, step) = {
            let mut remembered = self.remembered();
            let key = remembered.key(regarding, occurrence);
            (key, remembered.step(key, now))
        };
        if let Step::Repeat { name, count } = step {
            let patch = json!({
                "series": EventSeries { count, last_observed_time: MicroTime(now) },
            });
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.remembered().observed(key, name, count, now);
                    return Ok(());
                }
                // Expired (or deleted): a new Event starts a new series.
                Err(kube::Error::Api(status)) if status.is_not_found() => {
                    self.remembered().forget(key);
                }
                Err(error) => return Err(error),
            }
        }
        let event = self.event(regarding, occurrence, now);
        let name = event.metadata.name.clone().unwrap_or_default();
        events.create(&PostParams::default(), &event).await?;
        self.remembered().observed(key, name, 1, now);
        Ok(())
    }

    fn event(
        &self,
        regarding: &ObjectReference,
        occurrence: &Occurrence<'_>,
        now: Timestamp,
    ) -> Event {
        let object = regarding.name.as_deref().unwrap_or(&self.controller);
        Event {
            metadata: ObjectMeta {
                name: Some(event_name(object, now)),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some(occurrence.action.to_string()),
            reason: Some(occurrence.reason.to_string()),
            note: Some(occurrence.note.to_string()),
            type_: Some(
                if occurrence.warning {
                    "Warning"
                } else {
                    "Normal"
                }
                .to_string(),
            ),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.controller.clone()),
            ..Event::default()
        }
    }
}

/// The longest object name an Event's name starts with: the name is at most 253 characters, and
/// the dot and up to 16 hexadecimal digits follow.
const EVENT_NAME_PREFIX_LIMIT: usize = 253 - 17;

/// `<object>.<nanoseconds in hex>`, the object's name cut to fit an object name's 253 characters.
fn event_name(object: &str, now: Timestamp) -> String {
    let mut end = object.len().min(EVENT_NAME_PREFIX_LIMIT);
    while !object.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}.{:x}", &object[..end], now.as_nanosecond())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regarding(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Machine".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    fn occurrence(note: &str) -> Occurrence<'_> {
        Occurrence {
            warning: false,
            reason: "Created",
            action: "Reconcile",
            note,
        }
    }

    #[test]
    fn a_repeat_within_the_window_joins_the_series() {
        let mut remembered = Remembered::with_capacity(8);
        let t0 = Timestamp::UNIX_EPOCH;
        let key = remembered.key(&regarding("a"), &occurrence("made"));
        assert_eq!(remembered.step(key, t0), Step::Create);
        remembered.observed(key, "a.1".into(), 1, t0);
        let later = t0 + SignedDuration::from_mins(5);
        assert_eq!(
            remembered.step(key, later),
            Step::Repeat {
                name: "a.1".into(),
                count: 2
            }
        );
        remembered.observed(key, "a.1".into(), 2, later);
        // The window runs from the last occurrence, not the first.
        let much_later = later + SignedDuration::from_mins(5);
        assert_eq!(
            remembered.step(key, much_later),
            Step::Repeat {
                name: "a.1".into(),
                count: 3
            }
        );
        // Past the window: a new Event, and the old series is forgotten.
        let past = much_later + SERIES_WINDOW;
        assert_eq!(remembered.step(key, past), Step::Create);
        assert!(remembered.series.is_empty());
    }

    #[test]
    fn another_object_type_reason_or_note_is_another_event() {
        let remembered = Remembered::with_capacity(8);
        let key = remembered.key(&regarding("a"), &occurrence("made"));
        assert_ne!(key, remembered.key(&regarding("b"), &occurrence("made")));
        assert_ne!(key, remembered.key(&regarding("a"), &occurrence("other")));
        let warning = Occurrence {
            warning: true,
            ..occurrence("made")
        };
        assert_ne!(key, remembered.key(&regarding("a"), &warning));
        let reason = Occurrence {
            reason: "Deleted",
            ..occurrence("made")
        };
        assert_ne!(key, remembered.key(&regarding("a"), &reason));
        assert_eq!(key, remembered.key(&regarding("a"), &occurrence("made")));
    }

    #[test]
    fn an_event_name_fits_whatever_the_object_name() {
        let now = Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000);
        let long = "m".repeat(253);
        let name = event_name(&long, now);
        assert!(name.len() <= 253, "{}", name.len());
        assert!(name.starts_with(&"m".repeat(EVENT_NAME_PREFIX_LIMIT)));
        assert_eq!(event_name("a", now), format!("a.{:x}", now.as_nanosecond()));
    }

    #[test]
    fn memory_is_bounded_and_the_least_recent_series_goes_first() {
        let mut remembered = Remembered::with_capacity(3);
        let now = Timestamp::UNIX_EPOCH;
        let keys: Vec<u64> = (0..4)
            .map(|i| remembered.key(&regarding(&format!("m{i}")), &occurrence("made")))
            .collect();
        for (i, key) in keys.iter().take(3).enumerate() {
            remembered.observed(*key, format!("m{i}.1"), 1, now);
        }
        // m0 is published again: m1 is now the least recent.
        assert!(matches!(remembered.step(keys[0], now), Step::Repeat { .. }));
        remembered.observed(keys[3], "m3.1".into(), 1, now);
        assert_eq!(remembered.series.len(), 3);
        assert_eq!(remembered.step(keys[1], now), Step::Create, "m1 forgotten");
        assert!(matches!(remembered.step(keys[0], now), Step::Repeat { .. }));
        assert!(matches!(remembered.step(keys[3], now), Step::Repeat { .. }));
    }

    #[tokio::test]
    async fn publishes_events_and_series_on_the_api_server()
    -> Result<(), Box<dyn std::error::Error>> {
        let env = capi_testing::TestEnv::start().await?;
        let ns = env.namespace().await?;
        let client = env.client();
        let recorder = EventRecorder::with_capacity(client.clone(), "test-controller", 2);
        let object = ObjectReference {
            namespace: Some(ns.clone()),
            ..regarding("a")
        };
        let made = occurrence("made");
        recorder.publish(&object, &made).await?;
        recorder.publish(&object, &made).await?;
        recorder.publish(&object, &occurrence("other")).await?;
        let events: Api<Event> = Api::namespaced(client.clone(), &ns);
        let listed = events.list(&Default::default()).await?.items;
        assert_eq!(listed.len(), 2, "{listed:#?}");
        let series = listed
            .iter()
            .find(|e| e.note.as_deref() == Some("made"))
            .and_then(|e| e.series.as_ref())
            .map(|s| s.count);
        assert_eq!(series, Some(2));
        let first = listed
            .iter()
            .find(|e| e.note.as_deref() == Some("made"))
            .and_then(|e| e.metadata.name.clone())
            .unwrap_or_default();
        assert_eq!(
            listed[0].reporting_controller.as_deref(),
            Some("test-controller")
        );
        // The Event expired (deleted here): the next repeat starts a new one.
        events.delete(&first, &Default::default()).await?;
        recorder.publish(&object, &made).await?;
        let listed = events.list(&Default::default()).await?.items;
        let made_events: Vec<_> = listed
            .iter()
            .filter(|e| e.note.as_deref() == Some("made"))
            .collect();
        assert_eq!(made_events.len(), 1);
        assert!(made_events[0].series.is_none(), "a new Event, no series");
        assert_ne!(
            made_events[0].metadata.name.as_deref(),
            Some(first.as_str())
        );
        Ok(())
    }
}
