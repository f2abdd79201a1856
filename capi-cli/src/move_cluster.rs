//! `capictl move`: a cluster's objects from one management cluster to another, without touching
//! its infrastructure.
//!
//! 1. **Pause** the Cluster in the source (its controllers stop acting on it).
//! 2. **Copy** every object that belongs to it — found through the cluster-name label,
//!    `spec.clusterName`, owner references, `{apiGroup, kind, name}` references and
//!    `dataSecretName`s, across the Cluster API groups, every `infrastructure.*` group, Secrets and
//!    ConfigMaps — owners first, owner references rewritten to the new UIDs, status copied where
//!    the API has a status subresource. Each copy carries the source UID in an annotation, so an
//!    interrupted move run again reuses what it already created.
//! 3. **Unpause** the Cluster in the target (if the move paused it).
//! 4. **Delete** the objects from the source with their finalizers removed first, so that no
//!    source controller deletes infrastructure the target now manages.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

/// The annotation on a copy naming the UID of the object it was copied from.
pub const MOVED_FROM: &str = "capictl.capi-rs.dev/moved-from-uid";
/// The annotation marking a Cluster the move paused (and so unpauses).
pub const PAUSED_BY_MOVE: &str = "capictl.capi-rs.dev/paused-by-move";

/// Why a move failed. Every step can be run again: the move resumes where it stopped.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// The source has no such Cluster (a finished move, or a typo).
    #[error("cluster {namespace}/{name} does not exist in the source management cluster")]
    NoCluster {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// Reading or writing one of the management clusters failed.
    #[error("{what}")]
    Api {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: kube::Error,
    },
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> MoveError {
    let what = what.into();
    move |source| MoveError::Api { what, source }
}

/// One object to move and the resource it belongs to.
#[derive(Clone, Debug)]
pub struct Movable {
    /// Its resource.
    pub resource: ApiResource,
    /// The object as read from the source.
    pub object: DynamicObject,
}

impl Movable {
    /// `Kind/name`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.resource.kind, self.object.name_any())
    }
}

fn moved_group(group: &str) -> bool {
    group == "cluster.x-k8s.io"
        || group.ends_with(".cluster.x-k8s.io")
        || group.starts_with("infrastructure.")
}

/// Every object in `namespace` of the kinds a move considers.
async fn candidates(client: &Client, namespace: &str) -> Result<Vec<Movable>, MoveError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(api_error("discovering the source's API groups"))?;
    let mut found = Vec::new();
    for group in discovery.groups() {
        let name = group.name();
        if !(moved_group(name) || name.is_empty()) {
            continue;
        }
        for (resource, capabilities) in group.recommended_resources() {
            let wanted = if name.is_empty() {
                resource.kind == "Secret" || resource.kind == "ConfigMap"
            } else {
                capabilities.scope == Scope::Namespaced
                    && capabilities.supports_operation(verbs::LIST)
            };
            if !wanted {
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(api_error(format!("listing {}", resource.plural)))?;
            found.extend(list.items.into_iter().map(|object| Movable {
                resource: resource.clone(),
                object,
            }));
        }
    }
    Ok(found)
}

/// Every `{apiGroup?, kind, name}` and `dataSecretName` an object's JSON refers to.
fn references(value: &Value, kinds_names: &mut BTreeSet<(String, String)>) {
    match value {
        Value::Object(map) => {
            if let (Some(Value::String(kind)), Some(Value::String(name))) =
                (map.get("kind"), map.get("name"))
            {
                kinds_names.insert((kind.clone(), name.clone()));
            }
            if let Some(Value::String(secret)) = map.get("dataSecretName") {
                kinds_names.insert(("Secret".into(), secret.clone()));
            }
            for inner in map.values() {
                references(inner, kinds_names);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, kinds_names)),
        _ => {}
    }
}

/// The objects of cluster `name`, owners before what they own.
pub async fn objects_of(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<Movable>, MoveError> {
    let all = candidates(client, namespace).await?;
    let mut included: BTreeSet<usize> = BTreeSet::new();
    loop {
        let uids: BTreeSet<String> = included
            .iter()
            .filter_map(|i| all[*i].object.uid())
            .collect();
        let mut referenced = BTreeSet::new();
        for i in &included {
            references(&all[*i].object.data, &mut referenced);
        }
        let before = included.len();
        for (i, item) in all.iter().enumerate() {
            let object = &item.object;
            let belongs = (item.resource.kind == "Cluster"
                && item.resource.group == "cluster.x-k8s.io"
                && object.name_any() == name)
                || object
                    .labels()
                    .get("cluster.x-k8s.io/cluster-name")
                    .map(String::as_str)
                    == Some(name)
                || object.data["spec"]["clusterName"].as_str() == Some(name)
                || object
                    .owner_references()
                    .iter()
                    .any(|o| uids.contains(&o.uid))
                || referenced.contains(&(item.resource.kind.clone(), object.name_any()));
            if belongs {
                included.insert(i);
            }
        }
        if included.len() == before {
            break;
        }
    }
    let mut chosen: Vec<Movable> = included.into_iter().map(|i| all[i].clone()).collect();
    // Owners first: depth of the owner chain within the moved set.
    let by_uid: HashMap<String, usize> = chosen
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.object.uid().map(|u| (u, i)))
        .collect();
    fn depth(i: usize, chosen: &[Movable], by_uid: &HashMap<String, usize>, seen: usize) -> usize {
        if seen > chosen.len() {
            return seen; // a cycle; cannot happen with valid owners
        }
        chosen[i]
            .object
            .owner_references()
            .iter()
            .filter_map(|o| by_uid.get(&o.uid))
            .map(|owner| 1 + depth(*owner, chosen, by_uid, seen + 1))
            .max()
            .unwrap_or(0)
    }
    let depths: Vec<usize> = (0..chosen.len())
        .map(|i| depth(i, &chosen, &by_uid, 0))
        .collect();
    let mut order: Vec<usize> = (0..chosen.len()).collect();
    order.sort_by_key(|i| (depths[*i], chosen[*i].label()));
    let sorted = order.into_iter().map(|i| chosen[i].clone()).collect();
    chosen.clear();
    Ok(sorted)
}

fn cluster_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Pauses the Cluster in the source (noting that the move did, unless it was paused already).
pub async fn pause(source: &Client, namespace: &str, name: &str) -> Result<(), MoveError> {
    let clusters = cluster_api(source, namespace);
    let cluster = clusters
        .get_opt(name)
        .await
        .map_err(api_error("reading the Cluster"))?
        .ok_or_else(|| MoveError::NoCluster {
            namespace: namespace.into(),
            name: name.into(),
        })?;
    if cluster.data["spec"]["paused"].as_bool() == Some(true) {
        return Ok(());
    }
    let patch =
        json!({"metadata": {"annotations": {PAUSED_BY_MOVE: "true"}}, "spec": {"paused": true}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api_error("pausing the Cluster in the source"))?;
    Ok(())
}

/// Copies `objects` (from [`objects_of`]) into `target`; returns how many were created (the
/// others existed from an earlier, interrupted run).
pub async fn copy(
    target: &Client,
    namespace: &str,
    objects: &[Movable],
    mut progress: impl FnMut(&str),
) -> Result<usize, MoveError> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(target.clone());
    if namespaces
        .get_opt(namespace)
        .await
        .map_err(api_error("reading the target namespace"))?
        .is_none()
    {
        let ns = json!({"metadata": {"name": namespace}});
        let ns = serde_json::from_value(ns).map_err(|e| MoveError::Api {
            what: "creating the target namespace".into(),
            source: kube::Error::SerdeError(e),
        })?;
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .map_err(api_error("creating the target namespace"))?;
    }
    // Source UID → target UID, for owner references.
    let mut new_uids: BTreeMap<String, String> = BTreeMap::new();
    let mut created = 0;
    for item in objects {
        let label = item.label();
        let api: Api<DynamicObject> =
            Api::namespaced_with(target.clone(), namespace, &item.resource);
        let source_uid = item.object.uid().unwrap_or_default();
        let mut copy = item.object.clone();
        let meta = &mut copy.metadata;
        meta.uid = None;
        meta.resource_version = None;
        meta.creation_timestamp = None;
        meta.deletion_timestamp = None;
        meta.deletion_grace_period_seconds = None;
        meta.generation = None;
        meta.managed_fields = None;
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(MOVED_FROM.into(), source_uid.clone());
        meta.owner_references = meta.owner_references.take().map(|owners| {
            owners
                .into_iter()
                .filter_map(|mut o| {
                    o.uid = new_uids.get(&o.uid)?.clone();
                    Some(o)
                })
                .collect()
        });
        let status = copy.data.get("status").cloned();
        if let Some(data) = copy.data.as_object_mut() {
            data.remove("status");
        }
        let stored =
            match crate::apply::create_strict(target, &item.resource, Some(namespace), &copy).await
            {
                Ok(stored) => {
                    created += 1;
                    progress(&format!("copied {label}"));
                    stored
                }
                Err(kube::Error::Api(e)) if e.is_already_exists() => {
                    progress(&format!("{label} was copied before"));
                    api.get(&item.object.name_any())
                        .await
                        .map_err(api_error(format!("reading {label} in the target")))?
                }
                Err(source) => {
                    return Err(MoveError::Api {
                        what: format!("copying {label}"),
                        source,
                    });
                }
            };
        new_uids.insert(source_uid, stored.uid().unwrap_or_default());
        let has_status_subresource = !item.resource.group.is_empty();
        if let (Some(status), true) = (status, has_status_subresource) {
            api.patch_status(
                &item.object.name_any(),
                &PatchParams::default().validation_strict(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .map_err(api_error(format!("copying the status of {label}")))?;
        }
    }
    Ok(created)
}

/// Unpauses the Cluster in the target, if the move paused it.
pub async fn unpause(target: &Client, namespace: &str, name: &str) -> Result<(), MoveError> {
    let clusters = cluster_api(target, namespace);
    let Some(cluster) = clusters
        .get_opt(name)
        .await
        .map_err(api_error("reading the Cluster in the target"))?
    else {
        return Ok(());
    };
    if cluster.annotations().contains_key(PAUSED_BY_MOVE) {
        let patch =
            json!({"metadata": {"annotations": {PAUSED_BY_MOVE: null}}, "spec": {"paused": null}});
        clusters
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error("unpausing the Cluster in the target"))?;
    }
    Ok(())
}

/// Deletes `objects` from the source, finalizers first (what they guarded is the target's now).
pub async fn delete_source(
    source: &Client,
    namespace: &str,
    objects: &[Movable],
    mut progress: impl FnMut(&str),
) -> Result<(), MoveError> {
    for item in objects.iter().rev() {
        let label = item.label();
        let api: Api<DynamicObject> =
            Api::namespaced_with(source.clone(), namespace, &item.resource);
        let name = item.object.name_any();
        let patch = json!({"metadata": {"finalizers": null}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.is_not_found() => continue,
            Err(source) => {
                return Err(MoveError::Api {
                    what: format!("releasing {label} in the source"),
                    source,
                });
            }
        }
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => progress(&format!("deleted {label} from the source")),
            Err(kube::Error::Api(e)) if e.is_not_found() => {}
            Err(source) => {
                return Err(MoveError::Api {
                    what: format!("deleting {label} from the source"),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// The whole move; safe to run again after an interruption.
pub async fn move_cluster(
    source: &Client,
    target: &Client,
    namespace: &str,
    name: &str,
    mut progress: impl FnMut(&str),
) -> Result<usize, MoveError> {
    pause(source, namespace, name).await?;
    progress(&format!("paused cluster {namespace}/{name} in the source"));
    let objects = objects_of(source, namespace, name).await?;
    progress(&format!("{} objects to move", objects.len()));
    copy(target, namespace, &objects, &mut progress).await?;
    unpause(target, namespace, name).await?;
    progress(&format!(
        "unpaused cluster {namespace}/{name} in the target"
    ));
    delete_source(source, namespace, &objects, &mut progress).await?;
    Ok(objects.len())
}
