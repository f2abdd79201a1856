//! The writes every reconciler makes, each in the form that cannot clobber someone else's change:
//! merge patches for contract fields (retried on conflict), a resource-version-guarded patch to add
//! a finalizer, a tested JSON patch to remove one, best-effort events.

use std::fmt::Debug;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::events::{EventRecorder, Occurrence};
use crate::plan::{EventNote, FinalizerChange};

/// How often a write that meets a conflict (409) is retried before the reconcile fails.
const CONFLICT_RETRIES: u32 = 5;

/// Merge-patches the object (`{"spec": …}` or `{"metadata": …}`), retrying conflicts — unless
/// the patch is guarded by `metadata.resourceVersion`: a guarded patch that meets a conflict was
/// computed from a copy that is no longer current, and sending it again cannot succeed, so the
/// conflict is returned at once (the reconcile runs again on the newer copy).
pub async fn patch<K>(api: &Api<K>, name: &str, patch: Value) -> Result<(), kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
{
    patch_returning(api, name, patch).await.map(drop)
}

/// [`patch`], returning the object as written, so that a later guarded write in the same pass
/// starts from it.
pub async fn patch_returning<K>(api: &Api<K>, name: &str, patch: Value) -> Result<K, kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
{
    let guarded = patch.pointer("/metadata/resourceVersion").is_some();
    let patch = Patch::Merge(patch);
    let params = PatchParams::default();
    if guarded {
        return api.patch(name, &params, &patch).await;
    }
    with_conflict_retries(|| api.patch(name, &params, &patch)).await
}

/// Merge-patches the status subresource, retrying conflicts. A vanished object is not an error.
pub async fn patch_status<K>(api: &Api<K>, name: &str, status: Value) -> Result<(), kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
{
    let patch = Patch::Merge(json!({ "status": status }));
    let params = PatchParams::default();
    match with_conflict_retries(|| api.patch_status(name, &params, &patch)).await {
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        other => other.map(drop),
    }
}

/// Merge-patches the status subresource from `current` to `desired` unless they are equal (an
/// unchanged pass writes nothing, and so triggers nothing). A field `current` has and `desired`
/// has not — a list emptied and so left out, an optional field gone — is removed ([`merge_patch`]).
pub async fn patch_status_if_changed<K, S>(
    api: &Api<K>,
    name: &str,
    current: Option<&S>,
    desired: &S,
) -> Result<(), kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
    S: serde::Serialize + PartialEq,
{
    if current == Some(desired) {
        return Ok(());
    }
    let desired = serde_json::to_value(desired).map_err(kube::Error::SerdeError)?;
    let current = match current {
        Some(current) => serde_json::to_value(current).map_err(kube::Error::SerdeError)?,
        None => Value::Null,
    };
    patch_status(api, name, merge_patch(&current, &desired)).await
}

/// The JSON merge patch (RFC 7386) that turns `current` into `desired`: `desired` itself, with
/// `null` for each field of an object in `current` that the same object in `desired` lacks, at
/// any depth. (`desired` alone would leave such fields in place: a list serialized only when
/// not empty could never be emptied.) Lists and scalars are replaced whole.
pub fn merge_patch(current: &Value, desired: &Value) -> Value {
    match (current, desired) {
        (Value::Object(current), Value::Object(desired)) => {
            let mut patch: serde_json::Map<String, Value> = current
                .keys()
                .filter(|key| !desired.contains_key(*key))
                .map(|key| (key.clone(), Value::Null))
                .collect();
            for (key, value) in desired {
                let field = match current.get(key) {
                    Some(was) => merge_patch(was, value),
                    None => value.clone(),
                };
                patch.insert(key.clone(), field);
            }
            Value::Object(patch)
        }
        _ => desired.clone(),
    }
}

/// Requests deletion; an object already gone is not an error.
pub async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &kube::api::DeleteParams::default()).await {
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        other => other.map(drop),
    }
}

/// Applies a plan's finalizer change.
pub async fn change_finalizer<K>(
    api: &Api<K>,
    object: &K,
    change: FinalizerChange,
    finalizer: &str,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match change {
        FinalizerChange::Add => add_finalizer_and_annotate(api, object, finalizer, &[]).await,
        FinalizerChange::Remove => remove_finalizer(api, object, finalizer).await,
        FinalizerChange::Keep => Ok(()),
    }
}

/// Adds `finalizer` and sets `annotations` in one write, guarded by the resource version that
/// was read: a concurrent change makes the patch fail (and the reconcile retry) instead of being
/// overwritten. With the finalizer already there, only annotations that differ are written (no
/// write when none does).
pub async fn add_finalizer_and_annotate<K>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
    annotations: &[(&str, &str)],
) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut metadata = serde_json::Map::new();
    let mut finalizers = object.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == finalizer) {
        finalizers.push(finalizer.to_string());
        metadata.insert("finalizers".into(), json!(finalizers));
    }
    let current = object.annotations();
    let changed: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .filter(|(k, v)| current.get(*k).map(String::as_str) != Some(*v))
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    if !changed.is_empty() {
        metadata.insert("annotations".into(), serde_json::Value::Object(changed));
    }
    if metadata.is_empty() {
        return Ok(());
    }
    metadata.insert("resourceVersion".into(), json!(object.resource_version()));
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&json!({ "metadata": metadata })),
    )
    .await
    .map(drop)
}

/// Removes `finalizer` with a JSON patch that first tests the list, so that only our entry goes and
/// only if nobody changed the list meanwhile. A vanished object is not an error.
async fn remove_finalizer<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let current = object.finalizers().to_vec();
    if !current.iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let remaining: Vec<&String> = current.iter().filter(|f| *f != finalizer).collect();
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": current},
        {"op": "replace", "path": "/metadata/finalizers", "value": remaining},
    ]))
    .map_err(kube::Error::SerdeError)?;
    match api
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        other => other.map(drop),
    }
}

/// The most an event's note may hold (`events.k8s.io/v1` refuses longer ones).
const EVENT_NOTE_LIMIT: usize = 1024;

/// Publishes events, best effort: a user-facing nicety must not fail the reconcile.
///
/// Notes of the same reason and type in one call are published as **one** event whose note
/// lists them (in order, cut at the API's 1 KiB with the number left out): one write for a
/// MachineSet creating 100 machines, not a hundred. Across calls, the recorder folds an event
/// that repeats (same object, reason, type and note) within a few minutes into the earlier
/// one's series.
pub async fn publish<K: Resource<DynamicType = ()>>(
    recorder: &EventRecorder,
    object: &K,
    events: &[EventNote],
) {
    if events.is_empty() {
        return;
    }
    let reference = object.object_ref(&());
    for note in fold_events(events) {
        let occurrence = Occurrence {
            warning: note.warning,
            reason: note.reason,
            action: "Reconcile",
            note: &note.note,
        };
        if let Err(error) = recorder.publish(&reference, &occurrence).await {
            tracing::debug!(%error, reason = note.reason, "could not publish an event");
        }
    }
}

/// One note per reason and type, in the order each first appears; see [`publish`].
fn fold_events(events: &[EventNote]) -> Vec<EventNote> {
    let mut folded: Vec<(EventNote, usize)> = Vec::new();
    for event in events {
        let same = folded
            .iter_mut()
            .find(|(f, _)| f.reason == event.reason && f.warning == event.warning);
        match same {
            None => folded.push((event.clone(), 0)),
            Some((first, left_out)) => {
                let fits = first.note.len() + 2 + event.note.len() <= EVENT_NOTE_LIMIT - 32;
                if *left_out == 0 && fits {
                    first.note.push_str("; ");
                    first.note.push_str(&event.note);
                } else {
                    *left_out += 1;
                }
            }
        }
    }
    folded
        .into_iter()
        .map(|(mut event, left_out)| {
            if left_out > 0 {
                event.note.push_str(&format!("; and {left_out} more"));
            }
            if event.note.len() > EVENT_NOTE_LIMIT {
                let mut end = EVENT_NOTE_LIMIT - 3;
                while !event.note.is_char_boundary(end) {
                    end -= 1;
                }
                event.note.truncate(end);
                event.note.push('…');
            }
            event
        })
        .collect()
}

async fn with_conflict_retries<T, F, Fut>(mut write: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match write().await {
            Err(kube::Error::Api(status)) if status.is_conflict() && attempt < CONFLICT_RETRIES => {
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            }
            other => return other,
        }
    }
}

/// Merge-patches the status subresource guarded by the resource version `object` was read at:
/// a status other controllers also write (conditions of a `Machine`) is never overwritten from a
/// stale copy — the write fails with a conflict and the reconcile runs again on fresh data. A
/// vanished object is not an error (`None`); otherwise the object as written is returned, so that
/// a later guarded write in the same pass starts from it.
pub async fn patch_status_guarded<K>(
    api: &Api<K>,
    object: &K,
    status: Value,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch = Patch::Merge(json!({
        "metadata": {"resourceVersion": object.resource_version()},
        "status": status,
    }));
    match api
        .patch_status(&object.name_any(), &PatchParams::default(), &patch)
        .await
    {
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(None),
        other => other.map(Some),
    }
}

/// The versions this controller's own writes replaced, so that a reconcile of a copy its cache
/// still holds from before such a write does not write from it again — that write would meet a
/// 409 (guarded) or undo the newer one (unguarded). Keyed by UID; an object's record goes as soon
/// as a version not replaced by our writes is seen, or when the caller forgets the object: at
/// most one record (of a few versions) per object, and never more than 4096 records (past that,
/// all are dropped).
#[derive(Debug, Default)]
pub struct OwnWrites {
    replaced: std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>,
}

/// The versions remembered per object: a reconcile writes at most a few times in a row.
const REPLACED_KEPT: usize = 4;

/// Objects past which every record is dropped: records of objects deleted before a newer
/// version was seen (a kind without a finalizer, whose deletion no reconcile sees) would
/// otherwise stay. Losing a record costs at most one redundant write or a 409.
const OBJECTS_KEPT: usize = 4096;

impl OwnWrites {
    /// Records that a write made from `object` succeeded: its version is now out of date (as are
    /// those earlier writes of ours replaced, until a newer version is seen).
    pub fn wrote<K: Resource>(&self, object: &K) {
        if let (Some(uid), Some(version)) = (&object.meta().uid, &object.meta().resource_version) {
            let mut replaced = self.lock();
            if replaced.len() >= OBJECTS_KEPT && !replaced.contains_key(uid) {
                replaced.clear();
            }
            let versions = replaced.entry(uid.clone()).or_default();
            if !versions.contains(version) {
                if versions.len() == REPLACED_KEPT {
                    versions.remove(0);
                }
                versions.push(version.clone());
            }
        }
    }

    /// Whether `object` is a copy one of this controller's own writes already replaced: the cache
    /// has not caught up yet (look again in a moment, the newer version is on its way). Any other
    /// copy clears the record.
    pub fn is_stale<K: Resource>(&self, object: &K) -> bool {
        let Some(uid) = &object.meta().uid else {
            return false;
        };
        let mut replaced = self.lock();
        let Some(versions) = replaced.get(uid) else {
            return false;
        };
        if object
            .meta()
            .resource_version
            .as_ref()
            .is_some_and(|v| versions.contains(v))
        {
            return true;
        }
        replaced.remove(uid);
        false
    }

    /// Drops what is known of `object` (it is being deleted).
    pub fn forget<K: Resource>(&self, object: &K) {
        if let Some(uid) = &object.meta().uid {
            self.lock().remove(uid);
        }
    }

    /// How many objects have a record.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no object has a record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Vec<String>>> {
        self.replaced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// An API whose every request is answered 409 Conflict, and how many it was sent.
    fn always_conflicting() -> (Api<ConfigMap>, Arc<AtomicU32>) {
        let sent = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&sent);
        let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            counter.fetch_add(1, Ordering::Relaxed);
            let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "message": "the object has been modified", "reason": "Conflict",
                              "code": 409});
            async move {
                http::Response::builder()
                    .status(409)
                    .body(kube::client::Body::from(body.to_string().into_bytes()))
            }
        });
        let client = kube::Client::new(service, "default");
        (Api::namespaced(client, "default"), sent)
    }

    #[test]
    fn a_merge_patch_removes_what_the_desired_object_left_out() {
        let current = json!({"nodeRefs": [{"name": "a"}], "replicas": 1,
                             "deprecated": {"v1beta1": {"readyReplicas": 1, "keep": 2}}});
        let desired = json!({"replicas": 0, "deprecated": {"v1beta1": {"keep": 2}}});
        assert_eq!(
            merge_patch(&current, &desired),
            json!({"nodeRefs": null, "replicas": 0,
                   "deprecated": {"v1beta1": {"readyReplicas": null, "keep": 2}}})
        );
        assert_eq!(
            merge_patch(&Value::Null, &desired),
            desired,
            "nothing to remove"
        );
        assert_eq!(
            merge_patch(&json!({"list": [1, 2]}), &json!({"list": [2]})),
            json!({"list": [2]}),
            "lists are replaced whole"
        );
    }

    /// A status whose list is left out when empty, as the API types serialize theirs.
    #[derive(serde::Serialize, PartialEq)]
    struct Summary {
        #[serde(skip_serializing_if = "Vec::is_empty")]
        refs: Vec<String>,
        replicas: i32,
    }

    #[tokio::test]
    async fn a_status_written_from_a_longer_one_clears_the_emptied_list() {
        let sent = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
        let bodies = Arc::clone(&sent);
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let bodies = Arc::clone(&bodies);
            async move {
                let bytes = http_body_util::BodyExt::collect(request.into_body())
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                bodies
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(body);
                let answer = json!({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "c", "namespace": "default"}});
                http::Response::builder()
                    .status(200)
                    .body(kube::client::Body::from(answer.to_string().into_bytes()))
            }
        });
        let api: Api<ConfigMap> = Api::namespaced(kube::Client::new(service, "default"), "default");
        let current = Summary {
            refs: vec!["node-a".into()],
            replicas: 1,
        };
        let desired = Summary {
            refs: Vec::new(),
            replicas: 0,
        };
        patch_status_if_changed(&api, "c", Some(&current), &desired)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let sent = sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        assert_eq!(
            sent,
            vec![json!({"status": {"refs": null, "replicas": 0}})],
            "the emptied list is removed, not left as it was"
        );
    }

    #[test]
    fn own_write_records_are_bounded() {
        let own = OwnWrites::default();
        for i in 0..OBJECTS_KEPT {
            own.wrote(&config_map(&i.to_string(), "1"));
        }
        assert_eq!(own.len(), OBJECTS_KEPT);
        own.wrote(&config_map("0", "2"));
        assert_eq!(own.len(), OBJECTS_KEPT, "a known object adds no record");
        own.wrote(&config_map("one more", "1"));
        assert_eq!(own.len(), 1, "past the bound, the old records go");
    }

    #[tokio::test]
    async fn a_guarded_patch_that_meets_a_conflict_is_sent_once() {
        let (api, sent) = always_conflicting();
        let guarded = json!({"metadata": {"resourceVersion": "7", "labels": {"a": "b"}}});
        let result = patch(&api, "c", guarded).await;
        assert!(
            matches!(&result, Err(kube::Error::Api(status)) if status.is_conflict()),
            "{result:?}"
        );
        assert_eq!(
            sent.load(Ordering::Relaxed),
            1,
            "a doomed write was sent again"
        );
    }

    fn note(reason: &'static str, warning: bool, text: &str) -> EventNote {
        EventNote {
            warning,
            reason,
            note: text.to_string(),
        }
    }

    #[test]
    fn notes_of_one_reason_become_one_event_that_names_them_all() {
        let folded = fold_events(&[
            note("SuccessfulCreate", false, "created machine a"),
            note("SuccessfulDelete", false, "deleted machine x"),
            note("SuccessfulCreate", false, "created machine b"),
            note("SuccessfulCreate", true, "could not create machine c"),
        ]);
        assert_eq!(
            folded,
            vec![
                note(
                    "SuccessfulCreate",
                    false,
                    "created machine a; created machine b"
                ),
                note("SuccessfulDelete", false, "deleted machine x"),
                note("SuccessfulCreate", true, "could not create machine c"),
            ]
        );
    }

    #[test]
    fn a_folded_note_stays_within_the_apis_limit_and_counts_what_it_left_out() {
        let many: Vec<EventNote> = (0..1000)
            .map(|i| {
                note(
                    "SuccessfulCreate",
                    false,
                    &format!("created machine m-{i:04}"),
                )
            })
            .collect();
        let folded = fold_events(&many);
        assert_eq!(folded.len(), 1);
        let text = &folded[0].note;
        assert!(text.len() <= EVENT_NOTE_LIMIT, "{} bytes", text.len());
        assert!(text.starts_with("created machine m-0000; created machine m-0001"));
        let kept = text.matches("created machine").count();
        assert!(
            text.ends_with(&format!("; and {} more", 1000 - kept)),
            "{text}"
        );
        let long = fold_events(&[note("Failed", true, &"é".repeat(2000))]);
        assert!(long[0].note.len() <= EVENT_NOTE_LIMIT);
        assert!(long[0].note.ends_with('…'));
    }

    fn config_map(uid: &str, version: &str) -> ConfigMap {
        serde_json::from_value(
            json!({"metadata": {"name": "c", "uid": uid, "resourceVersion": version}}),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_copy_an_own_write_replaced_is_stale_until_a_newer_one_is_seen() {
        let own = OwnWrites::default();
        assert!(!own.is_stale(&config_map("u", "7")));
        own.wrote(&config_map("u", "7"));
        assert!(
            own.is_stale(&config_map("u", "7")),
            "the copy the write was made from"
        );
        assert!(!own.is_stale(&config_map("other", "7")));
        assert!(!own.is_stale(&config_map("u", "9")), "the cache caught up");
        assert!(own.is_empty(), "the record went with it");
        assert!(!own.is_stale(&config_map("u", "7")));
        own.wrote(&config_map("u", "9"));
        own.forget(&config_map("u", "9"));
        assert!(own.is_empty());
        // Two writes in a row: both copies they were made from are stale.
        own.wrote(&config_map("u", "10"));
        own.wrote(&config_map("u", "11"));
        assert!(own.is_stale(&config_map("u", "10")));
        assert!(own.is_stale(&config_map("u", "11")));
        assert!(!own.is_stale(&config_map("u", "12")));
    }

    #[tokio::test]
    async fn an_unguarded_patch_that_meets_a_conflict_is_retried() {
        let (api, sent) = always_conflicting();
        let result = patch(&api, "c", json!({"metadata": {"labels": {"a": "b"}}})).await;
        assert!(result.is_err());
        assert_eq!(sent.load(Ordering::Relaxed), CONFLICT_RETRIES);
    }
}
