//! The objects Cluster API objects refer to by `{apiGroup, kind, name}` — infrastructure machines
//! and clusters, bootstrap configs, their templates — whose kinds are known only at run time.
//!
//! A reference may name only a Cluster API provider's kind, as upstream's contract resolution
//! requires: a CRD carrying a contract label (`cluster.x-k8s.io/v1beta2`, or `…/v1beta1` of a
//! provider on the previous contract) with a version. Anything else —
//! a built-in kind such as `Secret`, another operator's CRD — is
//! [`ReferenceError::NotAProviderKind`], and nothing of it is read, watched or written, so a
//! tenant cannot make the manager watch, cache or patch kinds outside the contract.
//!
//! A [`References`] resolves a reference's version through discovery (once per group and kind),
//! keeps a cache of every referenced kind fed by one watch per kind (started the first time the
//! kind is referenced), and reports each change of such an object on a channel, so that the
//! controller owning it reconciles again. Reads come from the cache once its first list is in,
//! and from the API server before that.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use capi_core::api::ContractVersionedObjectReference;
use capi_runtime::cache::informer::{DynamicView, DynamicViews, Informers};
use capi_runtime::cache::packed::{PackError, PackedStore, Read};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery;

use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Why a referenced object could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// The API server serves no such kind: the provider's CRDs are not installed.
    #[error(
        "the API server serves no kind {kind:?} in group {group:?}; install the CRDs of the provider that owns it"
    )]
    UnknownKind {
        /// The API group.
        group: String,
        /// The kind.
        kind: String,
    },
    /// The kind is served, but is not a Cluster API provider's: its CRD does not carry the
    /// contract label (`cluster.x-k8s.io/v1beta2`), or it is not a CRD at all (a built-in kind
    /// such as `Secret`). Nothing of it is read, watched or written.
    #[error(
        "kind {kind:?} in group {group:?} is not a Cluster API provider's: its CustomResourceDefinition must carry the label {label}"
    )]
    NotAProviderKind {
        /// The API group.
        group: String,
        /// The kind.
        kind: String,
        /// The label it lacks.
        label: String,
    },
    /// A template that machines are cloned from does not exist.
    #[error("{kind} {name:?} does not exist; create it or correct the template reference")]
    TemplateNotFound {
        /// The template's kind.
        kind: String,
        /// The template's name.
        name: String,
    },
    /// A request failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
}

impl From<ReferenceError> for capi_runtime::ReconcileError {
    fn from(error: ReferenceError) -> Self {
        match error {
            // A plain API failure stays one: it backs off (or retries a conflict) like any other.
            ReferenceError::Kube(error) => Self::Kube(error),
            other => Self::Controller(Box::new(other)),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Watched {
    resource: ApiResource,
    cache: Cache,
}

/// Where a referenced kind's objects are read from.
enum Cache {
    /// The manager's typed watch of the kind (its controller runs in this manager), seen as
    /// `DynamicObject`s: no second watch, no second copy.
    Typed(DynamicView),
    /// A watch of its own, the objects kept compressed.
    Own {
        store: Arc<PackedStore>,
        synced: Arc<AtomicBool>,
    },
}

impl Watched {
    /// Whether the cache holds everything the API server had at its first list.
    fn synced(&self) -> bool {
        match &self.cache {
            Cache::Typed(view) => view.listed(),
            Cache::Own { synced, .. } => synced.load(Ordering::Acquire),
        }
    }

    /// Whether the cache holds the object, once it is filled (`None` before); nothing is
    /// converted or parsed.
    fn holds(&self, namespace: &str, name: &str) -> Option<bool> {
        if !self.synced() {
            return None;
        }
        Some(match &self.cache {
            Cache::Typed(view) => view.contains(Some(namespace), name),
            Cache::Own { store, .. } => store.contains(namespace, name),
        })
    }

    /// The object from the cache, once it is filled (`None` before).
    fn read(&self, namespace: &str, name: &str) -> Option<Read> {
        if !self.synced() {
            return None;
        }
        Some(match &self.cache {
            Cache::Typed(view) => match view.get(Some(namespace), name) {
                Some(Ok(object)) => Read::Found(Arc::new(object)),
                Some(Err(error)) => Read::Unreadable(PackError::decode(
                    &self.resource.kind,
                    namespace,
                    name,
                    &error,
                )),
                None => Read::Absent,
            },
            Cache::Own { store, .. } => store.get(namespace, name),
        })
    }
}

/// The watches of referenced kinds, shared by every [`References`] made from them: one watch and
/// one store per kind (and namespace) for all the controllers of a manager — the manager's own
/// typed watch of the kind when a controller of the manager offers it (decided the first time
/// the kind is referenced), else one of their own — each change passed to every handle's
/// receiver. Their own watches stop when the last handle is dropped.
#[derive(Default)]
pub struct ReferenceWatches {
    /// The manager's typed watches offered to readers of run-time kinds.
    views: std::sync::OnceLock<DynamicViews>,
    kinds: Mutex<HashMap<WatchKey, Arc<Watched>>>,
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<Arc<DynamicObject>>>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// Namespace (none: all), API group, kind.
type WatchKey = (Option<String>, String, String);

impl ReferenceWatches {
    /// The watches shared by every controller of the manager whose informers are `informers`;
    /// a referenced kind that a controller of the manager watches already (offered through
    /// [`DynamicViews`]) is read from that watch.
    pub fn of(informers: &Informers) -> Arc<Self> {
        let watches = informers.shared::<Self>();
        watches.views.get_or_init(|| informers.dynamic_views());
        watches
    }
}

impl std::fmt::Debug for ReferenceWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds = lock(&self.kinds).len();
        f.debug_struct("ReferenceWatches")
            .field("kinds", &kinds)
            .finish_non_exhaustive()
    }
}

impl Drop for ReferenceWatches {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }
}

/// Referenced objects of kinds known at run time; see the module documentation.
pub struct References {
    client: Client,
    namespace: Option<String>,
    watches: Arc<ReferenceWatches>,
}

impl References {
    /// References read through `client` (within `namespace` when set), with watches of their
    /// own; changes of watched objects arrive on the returned receiver.
    pub fn new(
        client: Client,
        namespace: Option<String>,
    ) -> (Self, mpsc::UnboundedReceiver<Arc<DynamicObject>>) {
        Self::sharing(&Arc::default(), client, namespace)
    }

    /// References read and written through `client` (within `namespace` when set) whose caches
    /// are `watches`' — shared with every other handle made from them. Changes of any watched
    /// kind arrive on the returned receiver (a dropped receiver is forgotten at the next change).
    pub fn sharing(
        watches: &Arc<ReferenceWatches>,
        client: Client,
        namespace: Option<String>,
    ) -> (Self, mpsc::UnboundedReceiver<Arc<DynamicObject>>) {
        // Unbounded, and still bounded in practice: the watch tasks cannot wait on a full channel
        // (a dropped change would be a missed reconcile), and the receiver is the controller's
        // trigger stream, drained as fast as changes come into its scheduler, which keeps one
        // entry per object however many changes it gets: the queue holds what arrives between
        // two polls, never a backlog that grows with slow reconciles.
        let (changes, receiver) = mpsc::unbounded_channel();
        lock(&watches.subscribers).push(changes);
        let references = Self {
            client,
            namespace,
            watches: Arc::clone(watches),
        };
        (references, receiver)
    }

    /// The kind's resource, discovered once, with its cache (whose watch starts now if it had not).
    async fn watched(&self, group: &str, kind: &str) -> Result<Arc<Watched>, ReferenceError> {
        let key = (self.namespace.clone(), group.to_string(), kind.to_string());
        if let Some(found) = lock(&self.watches.kinds).get(&key) {
            return Ok(Arc::clone(found));
        }
        let unknown = || ReferenceError::UnknownKind {
            group: group.to_string(),
            kind: kind.to_string(),
        };
        let resource = match discovery::group(&self.client, group).await {
            Ok(api_group) => api_group
                .recommended_kind(kind)
                .map(|(resource, _)| resource)
                .ok_or_else(unknown)?,
            Err(kube::Error::Api(status)) if status.is_not_found() => return Err(unknown()),
            Err(kube::Error::Discovery(_)) => return Err(unknown()),
            Err(error) => return Err(error.into()),
        };
        self.require_contract_label(&resource).await?;
        let mut kinds = lock(&self.watches.kinds);
        if let Some(found) = kinds.get(&key) {
            return Ok(Arc::clone(found));
        }
        let api: Api<DynamicObject> = match &self.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let offered = self
            .watches
            .views
            .get()
            .and_then(|views| views.get(api.resource_url()));
        let subscribers = Arc::clone(&self.watches.subscribers);
        let report = move |object: DynamicObject| {
            let object = Arc::new(object);
            // A receiver is gone only when its controller stopped.
            lock(&subscribers).retain(|subscriber| subscriber.send(Arc::clone(&object)).is_ok());
        };
        let cache = match offered {
            Some(view) => {
                tracing::debug!(%group, %kind, "referenced kind read from the manager's typed watch");
                let changes = view.changes();
                let task = tokio::spawn(changes.for_each(move |object| {
                    report(object);
                    std::future::ready(())
                }));
                lock(&self.watches.tasks).push(task);
                Cache::Typed(view)
            }
            None => {
                tracing::info!(%group, %kind, url = %api.resource_url(),
                    "referenced kind watched on its own: no controller of this manager offers a watch of it");
                let store = Arc::new(PackedStore::default());
                let writer = Arc::clone(&store);
                // Managed fields are often the bulk of an object, and nothing reads them.
                let slim = |object: &mut DynamicObject| object.metadata.managed_fields = None;
                let (synced, task) =
                    crate::cache::spawn_cache(api, slim, move |event| writer.apply(event), report);
                lock(&self.watches.tasks).push(task);
                Cache::Own { store, synced }
            }
        };
        let watched = Arc::new(Watched { resource, cache });
        kinds.insert(key, Arc::clone(&watched));
        Ok(watched)
    }

    /// Refuses a kind whose CRD (`<plural>.<group>`) does not carry the contract label, or that
    /// has no CRD (a built-in kind).
    async fn require_contract_label(&self, resource: &ApiResource) -> Result<(), ReferenceError> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let label = capi_core::labels::contract_label_key();
        let refused = || ReferenceError::NotAProviderKind {
            group: resource.group.clone(),
            kind: resource.kind.clone(),
            label: label.clone(),
        };
        // As upstream: the current contract's label, or the previous contract's (a provider not
        // yet on v1beta2), with a version in its value.
        let labels = [
            label.clone(),
            format!("{}v1beta1", capi_core::labels::CONTRACT_LABEL_PREFIX),
        ];
        if resource.group.is_empty() {
            return Err(refused());
        }
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let crd = crds
            .get_metadata_opt(&format!("{}.{}", resource.plural, resource.group))
            .await?
            .ok_or_else(refused)?;
        let carried = crd.metadata.labels.as_ref().is_some_and(|found| {
            labels
                .iter()
                .any(|key| found.get(key).is_some_and(|value| !value.is_empty()))
        });
        if carried { Ok(()) } else { Err(refused()) }
    }

    /// The API of the referenced kind in `namespace`.
    pub async fn api(
        &self,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
    ) -> Result<Api<DynamicObject>, ReferenceError> {
        let watched = self.watched(&reference.api_group, &reference.kind).await?;
        Ok(Api::namespaced_with(
            self.client.clone(),
            namespace,
            &watched.resource,
        ))
    }

    /// The `apiVersion` (group/version) the kind is served at.
    pub async fn api_version(
        &self,
        reference: &ContractVersionedObjectReference,
    ) -> Result<String, ReferenceError> {
        let watched = self.watched(&reference.api_group, &reference.kind).await?;
        Ok(watched.resource.api_version.clone())
    }

    /// The referenced object, from the cache once it is filled (from the API server before).
    pub async fn get(
        &self,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
    ) -> Result<Option<Arc<DynamicObject>>, ReferenceError> {
        let watched = self.watched(&reference.api_group, &reference.kind).await?;
        match watched.read(namespace, &reference.name) {
            Some(Read::Found(object)) => return Ok(Some(object)),
            Some(Read::Absent) => return Ok(None),
            Some(Read::Unreadable(error)) => {
                tracing::warn!(kind = %reference.kind, name = %reference.name, %error,
                    "a cached object could not be read back; reading it from the API server");
            }
            None => {}
        }
        self.get_fresh(reference, namespace).await
    }

    /// Whether the referenced object exists, as the cache says once it is filled (then without
    /// reading or converting the object), else as the API server says.
    pub async fn exists(
        &self,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
    ) -> Result<bool, ReferenceError> {
        let watched = self.watched(&reference.api_group, &reference.kind).await?;
        match watched.holds(namespace, &reference.name) {
            Some(held) => Ok(held),
            None => Ok(self.get_fresh(reference, namespace).await?.is_some()),
        }
    }

    /// The referenced object, read from the API server.
    pub async fn get_fresh(
        &self,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
    ) -> Result<Option<Arc<DynamicObject>>, ReferenceError> {
        let api = self.api(reference, namespace).await?;
        Ok(api.get_opt(&reference.name).await?.map(Arc::new))
    }

    /// Whether the cache of the kind is filled (so that a missing object is really missing).
    pub async fn synced(
        &self,
        reference: &ContractVersionedObjectReference,
    ) -> Result<bool, ReferenceError> {
        let watched = self.watched(&reference.api_group, &reference.kind).await?;
        Ok(watched.synced())
    }

    /// Merge-patches the referenced object.
    pub async fn patch(
        &self,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
        patch: &Value,
    ) -> Result<(), ReferenceError> {
        let api = self.api(reference, namespace).await?;
        api.patch(
            &reference.name,
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
        Ok(())
    }

    /// Creates `object` of the referenced kind; an object of that name that exists already is
    /// not an error (creates are retried after crashes).
    pub async fn create(
        &self,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
        object: &DynamicObject,
    ) -> Result<(), ReferenceError> {
        let api = self.api(reference, namespace).await?;
        match api.create(&PostParams::default(), object).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Requests deletion of the referenced object; returns whether it still exists (it may be
    /// held by finalizers). An unknown kind counts as gone: nothing of it can exist.
    ///
    /// Read from the kind's cache once it is filled: an object it shows deleting costs no
    /// request (its watch reports when it goes), one it shows alive one DELETE. An object the
    /// cache does not hold is looked up on the API server when `confirm` is [`Confirm::Absence`]
    /// — the authoritative answer before a caller takes "gone" for true — and taken for gone
    /// with [`Confirm::Nothing`] (a caller that confirms later, once, when everything it waits
    /// for looks gone).
    pub async fn delete(
        &self,
        reference: &ContractVersionedObjectReference,
        namespace: &str,
        confirm: Confirm,
    ) -> Result<bool, ReferenceError> {
        let watched = match self.watched(&reference.api_group, &reference.kind).await {
            Ok(watched) => watched,
            // Nothing of a kind that is not served, or not a provider's, is deleted: a Cluster or
            // Machine naming one goes without it.
            Err(ReferenceError::UnknownKind { .. } | ReferenceError::NotAProviderKind { .. }) => {
                return Ok(false);
            }
            Err(error) => return Err(error),
        };
        let api = self.api(reference, namespace).await?;
        let deleting = match watched.read(namespace, &reference.name) {
            Some(Read::Found(object)) => object.metadata.deletion_timestamp.is_some(),
            Some(Read::Absent) if confirm == Confirm::Nothing => return Ok(false),
            // Not in the cache, or not readable from it: the API server says.
            _ => match api.get_metadata_opt(&reference.name).await? {
                None => return Ok(false),
                Some(object) => object.metadata.deletion_timestamp.is_some(),
            },
        };
        if deleting {
            return Ok(true);
        }
        match api
            .delete(&reference.name, &DeleteParams::background())
            .await
        {
            // Left: the object as it is now (held by finalizers, or deleted gracefully): still
            // there for now, its watch says when it goes; right: deleted outright.
            Ok(outcome) => Ok(outcome.is_left()),
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(false),
            Err(error) => Err(error.into()),
        }
    }
}

/// Whether [`References::delete`] confirms on the API server that an object its cache does not
/// hold is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confirm {
    /// Ask the API server.
    Absence,
    /// Trust the (filled) cache.
    Nothing,
}

/// Annotation upstream puts on objects cloned from templates: the template's name.
pub const CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";
/// Annotation upstream puts on objects cloned from templates: the template's `Kind.group`.
pub const CLONED_FROM_GROUP_KIND: &str = "cluster.x-k8s.io/cloned-from-groupkind";

/// The reference to the object named `name` made from `template`: the template's kind without
/// its `Template` suffix, in the same group.
pub fn instance_of(
    template: &ContractVersionedObjectReference,
    name: &str,
) -> ContractVersionedObjectReference {
    let kind = template
        .kind
        .strip_suffix("Template")
        .unwrap_or(&template.kind);
    ContractVersionedObjectReference::new(&template.api_group, kind, name)
}

impl References {
    /// Creates `target` from `spec.template` of the template `template_ref`, as upstream does:
    /// the template's labels and annotations plus `labels`, the cloned-from annotations, and
    /// `owner` (with `blockOwnerDeletion`). An object of that name that exists already is left
    /// as it is (a crash may have come between its creation and its owner's next step).
    pub async fn clone_template(
        &self,
        template_ref: &ContractVersionedObjectReference,
        target: &ContractVersionedObjectReference,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        owner: Option<OwnerReference>,
    ) -> Result<(), ReferenceError> {
        let Some(template) = self.get(template_ref, namespace).await? else {
            return Err(ReferenceError::TemplateNotFound {
                kind: template_ref.kind.clone(),
                name: template_ref.name.clone(),
            });
        };
        let api_version = self.api_version(target).await?;
        let inner = &template.data["spec"]["template"];
        let mut object_labels: BTreeMap<String, String> =
            serde_json::from_value(inner["metadata"]["labels"].clone()).unwrap_or_default();
        object_labels.extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut annotations: BTreeMap<String, String> =
            serde_json::from_value(inner["metadata"]["annotations"].clone()).unwrap_or_default();
        annotations.insert(CLONED_FROM_NAME.into(), template_ref.name.clone());
        annotations.insert(
            CLONED_FROM_GROUP_KIND.into(),
            format!("{}.{}", template_ref.kind, template_ref.api_group),
        );
        let owner = owner.map(|mut owner| {
            owner.block_owner_deletion = Some(true);
            owner
        });
        let object = DynamicObject {
            types: Some(kube::core::TypeMeta {
                api_version,
                kind: target.kind.clone(),
            }),
            metadata: ObjectMeta {
                name: Some(target.name.clone()),
                namespace: Some(namespace.to_string()),
                labels: Some(object_labels),
                annotations: Some(annotations),
                owner_references: owner.map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            data: json!({"spec": inner["spec"].clone()}),
        };
        self.create(target, namespace, &object).await
    }
}

/// `status.initialization.<field>` of an object following the Cluster API contract.
pub fn initialization_flag(object: &DynamicObject, field: &str) -> bool {
    object.data["status"]["initialization"][field]
        .as_bool()
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use capi_core::api::Cluster;
    use capi_testing::TestEnv;
    use kube::runtime::watcher;

    use super::*;

    fn reference(name: &str) -> ContractVersionedObjectReference {
        ContractVersionedObjectReference {
            api_group: "cluster.x-k8s.io".into(),
            kind: "Cluster".into(),
            name: name.into(),
        }
    }

    /// The object `name`, once the references' cache holds it.
    async fn cached(
        references: &References,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<DynamicObject>, Box<dyn std::error::Error>> {
        for _ in 0..200 {
            if references.synced(&reference(name)).await?
                && let Some(found) = references.get(&reference(name), namespace).await?
            {
                return Ok(found);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("{name} never reached the cache").into())
    }

    /// The core CRDs, `Cluster` labelled as a provider's kind would be, to be referenced.
    fn crds() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>{
        capi_core::crd::core()
            .into_iter()
            .map(|crd| match crd.spec.names.kind.as_str() {
                "Cluster" => capi_core::crd::with_contract_version(crd, "v1beta2"),
                _ => crd,
            })
            .collect()
    }

    #[tokio::test]
    async fn only_a_kind_whose_crd_carries_the_contract_label_is_read()
    -> Result<(), Box<dyn std::error::Error>> {
        let env = TestEnv::start_with_crds(&crds()).await?;
        let ns = env.namespace().await?;
        let client = env.client();
        let (references, _changes) = References::new(client.clone(), None);
        for (group, kind) in [
            ("", "Secret"),
            ("", "ConfigMap"),
            ("apps", "Deployment"),
            ("cluster.x-k8s.io", "Machine"),
        ] {
            let named = ContractVersionedObjectReference {
                api_group: group.into(),
                kind: kind.into(),
                name: "x".into(),
            };
            let error = references.get(&named, &ns).await.err();
            assert!(
                matches!(&error, Some(ReferenceError::NotAProviderKind { .. })),
                "{group}/{kind}: {error:?}"
            );
            assert!(references.api(&named, &ns).await.is_err(), "{kind}");
            assert!(
                !references.delete(&named, &ns, Confirm::Absence).await?,
                "{kind}: nothing to delete, so that its owner's deletion ends"
            );
        }
        assert!(
            lock(&references.watches.kinds).is_empty(),
            "no watch was started"
        );
        assert!(references.get(&reference("a"), &ns).await?.is_none());
        Ok(())
    }

    #[tokio::test]
    async fn a_kind_a_controller_of_the_manager_watches_is_read_from_that_watch()
    -> Result<(), Box<dyn std::error::Error>> {
        let env = TestEnv::start_with_crds(&crds()).await?;
        let ns = env.namespace().await?;
        let client = env.client();
        let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
        let cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": "a", "labels": {"l": "v"}},
            "spec": {"paused": true},
        }))?;
        clusters.create(&PostParams::default(), &cluster).await?;

        // A manager whose Cluster controller offers its watch.
        let informers = Informers::default();
        let typed = informers.informer(
            Api::<Cluster>::all(client.clone()),
            watcher::Config::default(),
        );
        informers.dynamic_views().offer(&typed);
        let (references, mut changes) =
            References::sharing(&ReferenceWatches::of(&informers), client.clone(), None);
        let found = cached(&references, &ns, "a").await?;
        let watched = references.watched("cluster.x-k8s.io", "Cluster").await?;
        assert!(
            matches!(watched.cache, Cache::Typed(_)),
            "read from the typed watch, not a second one"
        );
        assert_eq!(
            found
                .types
                .as_ref()
                .map(|t| (t.api_version.as_str(), t.kind.as_str())),
            Some(("cluster.x-k8s.io/v1beta2", "Cluster"))
        );
        assert_eq!(
            found
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("l"))
                .map(String::as_str),
            Some("v")
        );
        assert_eq!(found.data.pointer("/spec/paused"), Some(&Value::Bool(true)));
        assert!(
            references.get(&reference("b"), &ns).await?.is_none(),
            "absent"
        );
        assert!(references.exists(&reference("a"), &ns).await?);
        assert!(!references.exists(&reference("b"), &ns).await?);
        // Its changes reach the references' receiver.
        clusters
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"l": "w"}}})),
            )
            .await?;
        let changed = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(object) = changes.recv().await {
                let label = object
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("l"))
                    .cloned();
                if label.as_deref() == Some("w") {
                    return Some(object);
                }
            }
            None
        })
        .await?;
        assert!(changed.is_some(), "the change was reported");

        // A manager without that controller watches the kind itself, and reads the same.
        let (own, _changes) = References::new(client.clone(), None);
        let found = cached(&own, &ns, "a").await?;
        let watched = own.watched("cluster.x-k8s.io", "Cluster").await?;
        assert!(matches!(watched.cache, Cache::Own { .. }));
        assert!(
            own.exists(&reference("a"), &ns).await? && !own.exists(&reference("b"), &ns).await?
        );
        assert_eq!(found.data.pointer("/spec/paused"), Some(&Value::Bool(true)));
        Ok(())
    }
}
