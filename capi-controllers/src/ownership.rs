//! Owner references between Cluster API objects: who controls what, and adding an owner without
//! clobbering the ones that are there.

use capi_core::api::ContractVersionedObjectReference;
use capi_core::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::DynamicObject;
use serde_json::json;

use crate::references::{ReferenceError, References};

/// The controller owner reference of `meta`, if any.
pub(crate) fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// Whether the object is controlled by the object with this UID.
pub(crate) fn is_controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    controller_of(meta).is_some_and(|r| r.uid == uid)
}

/// Whether any owner reference of `meta` names the object with this UID.
pub(crate) fn is_owned_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references.iter().flatten().any(|r| r.uid == uid)
}

/// The reference that makes `object` the controller of what it creates or adopts, blocking the
/// owner's foreground deletion until they are gone.
pub(crate) fn as_blocking_controller<K: kube::Resource<DynamicType = ()>>(
    object: &K,
) -> Option<OwnerReference> {
    object.controller_owner_ref(&()).map(|mut owner| {
        owner.block_owner_deletion = Some(true);
        owner
    })
}

/// Whether the API server (read fresh, metadata only, a page at a time) still has a Machine
/// matching label `selector` that the object with this UID controls — what a deleting owner
/// checks before its finalizer goes, since its cache may not show a Machine made just before.
pub(crate) async fn controlled_machine_left(
    machines: &kube::Api<capi_core::api::Machine>,
    selector: &str,
    uid: &str,
) -> Result<bool, kube::Error> {
    let mut params = kube::api::ListParams::default().labels(selector).limit(100);
    loop {
        let page = machines.list_metadata(&params).await?;
        if page
            .items
            .iter()
            .any(|m| is_controlled_by(&m.metadata, uid))
        {
            return Ok(true);
        }
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(false),
        }
    }
}

/// Makes `owner` an owner of the referenced `object` (its controller, unless something else
/// controls it already) and labels it with its cluster's name, as upstream does for the objects
/// a Machine or Cluster refers to (controllers find them by that label). The patch is guarded by
/// the resource version that was read, so that a concurrent change of the lists fails the write
/// instead of being overwritten. Returns whether anything was written.
pub(crate) async fn ensure_owner(
    references: &References,
    reference: &ContractVersionedObjectReference,
    namespace: &str,
    object: &DynamicObject,
    mut owner: OwnerReference,
    cluster_name: &str,
) -> Result<bool, ReferenceError> {
    let owned = is_owned_by(&object.metadata, &owner.uid);
    let labelled = labels::cluster_name(&object.metadata) == Some(cluster_name);
    if owned && labelled {
        return Ok(false);
    }
    let mut owners = object.metadata.owner_references.clone().unwrap_or_default();
    if !owned {
        if controller_of(&object.metadata).is_some() {
            owner.controller = None;
        }
        owners.push(owner);
    }
    let patch = json!({"metadata": {
        "ownerReferences": owners,
        "labels": {labels::CLUSTER_NAME: cluster_name},
        "resourceVersion": object.metadata.resource_version,
    }});
    references.patch(reference, namespace, &patch).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            uid: uid.into(),
            controller: Some(controller),
            ..OwnerReference::default()
        }
    }

    #[test]
    fn controller_and_owner_lookups() {
        let meta = ObjectMeta {
            owner_references: Some(vec![owner("a", false), owner("b", true)]),
            ..ObjectMeta::default()
        };
        assert_eq!(controller_of(&meta).map(|r| r.uid.as_str()), Some("b"));
        assert!(is_controlled_by(&meta, "b"));
        assert!(!is_controlled_by(&meta, "a"));
        assert!(is_owned_by(&meta, "a"));
        assert!(!is_owned_by(&meta, "c"));
        assert!(controller_of(&ObjectMeta::default()).is_none());
    }
}
