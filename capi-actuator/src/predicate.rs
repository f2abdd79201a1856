//! Which changes of a reconciled object are worth a reconcile.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use capi_core::api::Cluster;
use futures::Stream;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};

/// A hash of what makes an object worth reconciling again: not its status (which the loop writes
/// itself, and must not be triggered by) but its spec (generation), deletion, finalizers, owners,
/// labels and annotations.
pub fn reconcile_relevant<K: Resource>(object: &K) -> Option<u64> {
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

/// A hash of what the objects of a cluster (machines, their infrastructure and bootstrap configs,
/// machine sets, deployments, health checks) read from their `Cluster`: what
/// [`reconcile_relevant`] covers (spec, pause annotation, deletion), its UID, and the milestones of
/// its status — `initialization` and `failureDomains`. Not the replica counts and conditions that
/// the Cluster controller rewrites as each machine changes: handing each of those to every object
/// of the cluster made building N machines cost O(N²) reconciles (a cluster of 1000 machines
/// spent most of its API server's time on them).
pub fn cluster_as_its_objects_see_it(cluster: &Cluster) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    reconcile_relevant(cluster).hash(&mut hasher);
    cluster.metadata.uid.hash(&mut hasher);
    if let Some(status) = &cluster.status {
        if let Some(initialization) = &status.initialization {
            initialization.infrastructure_provisioned.hash(&mut hasher);
            initialization.control_plane_initialized.hash(&mut hasher);
        }
        for domain in &status.failure_domains {
            serde_json::to_string(domain).ok().hash(&mut hasher);
        }
    }
    Some(hasher.finish())
}

/// The changes of `api`'s Clusters that matter to the cluster's objects (see
/// [`cluster_as_its_objects_see_it`]), for `Controller::watches_stream`.
pub fn cluster_changes(
    api: Api<Cluster>,
) -> impl Stream<Item = Result<Cluster, watcher::Error>> + Send + 'static {
    watcher(api, watcher::Config::default())
        .backoff(crate::retry::WatchBackoff::default())
        .touched_objects()
        .predicate_filter(cluster_as_its_objects_see_it, Default::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_core::api::{ClusterInitializationStatus, ClusterStatus, FailureDomain};
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn a_cluster_counts_for_its_objects_by_spec_metadata_and_milestones_not_by_counters() {
        let mut cluster: Cluster = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c", "uid": "u1", "generation": 1},
            "spec": {}
        }))
        .unwrap_or_else(|error| panic!("{error}"));
        let seen = |c: &Cluster| cluster_as_its_objects_see_it(c);
        let first = seen(&cluster);

        cluster.status = Some(
            serde_json::from_value(serde_json::json!({
                "observedGeneration": 1,
                "workers": {"desiredReplicas": 3, "readyReplicas": 1},
                "conditions": [{"type": "Available", "status": "False", "reason": "Waiting",
                                "message": "", "lastTransitionTime": "2026-11-22T00:00:00Z"}]
            }))
            .unwrap_or_else(|error| panic!("{error}")),
        );
        cluster.metadata.resource_version = Some("7".into());
        assert_eq!(seen(&cluster), first, "conditions and counters");

        let status = cluster.status.get_or_insert_with(ClusterStatus::default);
        status.initialization = Some(ClusterInitializationStatus {
            infrastructure_provisioned: Some(true),
            ..Default::default()
        });
        let provisioned = seen(&cluster);
        assert_ne!(provisioned, first, "infrastructure provisioned");

        let status = cluster.status.get_or_insert_with(ClusterStatus::default);
        status.failure_domains.push(FailureDomain {
            name: "az-1".into(),
            ..Default::default()
        });
        let with_domain = seen(&cluster);
        assert_ne!(with_domain, provisioned, "a failure domain");

        cluster.metadata.generation = Some(2);
        assert_ne!(seen(&cluster), with_domain, "the spec");
        let respecced = seen(&cluster);
        cluster.metadata.uid = Some("u2".into());
        assert_ne!(seen(&cluster), respecced, "another cluster of that name");
    }

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
