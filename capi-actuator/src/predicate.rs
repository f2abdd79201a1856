//! Which changes of a reconciled object are worth a reconcile.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use kube::Resource;

/// A hash of what makes an object worth reconciling again: not its status (which the loop writes
/// itself, and must not be triggered by) but its spec (generation), deletion, finalizers, owners,
/// labels and annotations.
pub(crate) fn reconcile_relevant<K: Resource>(object: &K) -> Option<u64> {
    let meta = object.meta();
    let mut hasher = DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.owner_references
        .as_ref()
        .map(|refs| refs.iter().map(|r| r.uid.clone()).collect::<Vec<_>>())
        .hash(&mut hasher);
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn status_writes_do_not_count_but_spec_and_metadata_do() {
        let mut object = ConfigMap::default();
        object.metadata.generation = Some(1);
        object.metadata.resource_version = Some("1".into());
        let before = reconcile_relevant(&object);
        object.metadata.resource_version = Some("2".into()); // a status write
        assert_eq!(reconcile_relevant(&object), before);
        object.metadata.generation = Some(2);
        assert_ne!(reconcile_relevant(&object), before);
        let generation_two = reconcile_relevant(&object);
        object.metadata.finalizers = Some(vec!["x".into()]);
        assert_ne!(reconcile_relevant(&object), generation_two);
    }
}
