//! Which changes of a reconciled object are worth a reconcile, and the stream filter that lets
//! only those through ([`changed`]).

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use capi_core::api::Cluster;
use futures::{Stream, StreamExt};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};

/// How long [`changed`] remembers an object it has not seen since: as kube-runtime's
/// `predicate_filter`, an hour; an object seen again after that passes as new.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(3600);

/// `stream` without the objects whose `predicate` hash is the one last seen for that object (by
/// namespace, name and UID — a recreated object is another): the first sighting of an object
/// passes, a changed hash passes, an object for which `predicate` gives no hash passes, errors
/// pass. An object not seen for [`REMEMBERED_FOR`] is forgotten (so a deleted object's entry
/// goes), and passes when seen again.
///
/// The contract of kube-runtime's `predicate_filter` with its default configuration, at about a
/// sixth of its memory per object: the filter keeps a 128-bit hash of each object's identity, its
/// predicate hash and when it was seen (32 bytes), not a copy of its name, namespace and UID.
pub fn changed<K, S, P>(stream: S, predicate: P) -> impl Stream<Item = S::Item> + Send + 'static
where
    K: Resource + Send + 'static,
    S: Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    P: Fn(&K) -> Option<u64> + Send + 'static,
{
    let mut seen = Seen::new(REMEMBERED_FOR);
    stream.filter_map(move |item| {
        let pass = match &item {
            Ok(object) => match predicate(object) {
                Some(hash) => seen.changed(object.meta(), hash, Instant::now()),
                None => true,
            },
            Err(_) => true,
        };
        std::future::ready(pass.then_some(item))
    })
}

/// The predicate hashes [`changed`] last saw, by object identity.
#[derive(Debug)]
struct Seen {
    by_identity: HashMap<(u64, u64), Sighting>,
    /// Sighting times are whole seconds since this instant (`u32`: 136 years).
    epoch: Instant,
    remembered_for: u32,
    /// When (seconds since `epoch`) entries older than `remembered_for` were last dropped.
    last_evicted: u32,
}

#[derive(Debug, Clone, Copy)]
struct Sighting {
    hash: u64,
    at: u32,
}

impl Seen {
    fn new(remembered_for: Duration) -> Self {
        Self {
            by_identity: HashMap::new(),
            epoch: Instant::now(),
            remembered_for: u32::try_from(remembered_for.as_secs()).unwrap_or(u32::MAX),
            last_evicted: 0,
        }
    }

    /// Whether the object of `meta` with predicate hash `hash`, seen at `now`, passes; records
    /// the sighting.
    fn changed(&mut self, meta: &kube::api::ObjectMeta, hash: u64, now: Instant) -> bool {
        let at =
            u32::try_from(now.saturating_duration_since(self.epoch).as_secs()).unwrap_or(u32::MAX);
        let remembered_for = self.remembered_for;
        if at.saturating_sub(self.last_evicted) >= remembered_for {
            self.by_identity
                .retain(|_, sighting| at.saturating_sub(sighting.at) < remembered_for);
            self.last_evicted = at;
        }
        let identity = identity(meta);
        let previous = self.by_identity.insert(identity, Sighting { hash, at });
        match previous {
            Some(previous) => {
                previous.hash != hash || at.saturating_sub(previous.at) >= remembered_for
            }
            None => true,
        }
    }
}

/// A 128-bit hash of an object's namespace, name and UID: two SipHashes of them (the standard
/// library's fixed keys, told apart by a leading seed byte), so that two of the objects a manager
/// watches share one only by a coincidence of both.
pub(crate) fn identity(meta: &kube::api::ObjectMeta) -> (u64, u64) {
    let half = |seed: u8| {
        let mut hasher = DefaultHasher::new();
        seed.hash(&mut hasher);
        meta.namespace.hash(&mut hasher);
        meta.name.hash(&mut hasher);
        meta.uid.hash(&mut hasher);
        hasher.finish()
    };
    (half(0), half(1))
}

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
    let changes = watcher(api, watcher::Config::default())
        .backoff(crate::retry::WatchBackoff::default())
        .touched_objects();
    changed(changes, cluster_as_its_objects_see_it)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_core::api::{ClusterInitializationStatus, ClusterStatus, FailureDomain};
    use k8s_openapi::api::core::v1::ConfigMap;

    fn config_map(namespace: &str, name: &str, uid: &str, generation: i64) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.namespace = Some(namespace.into());
        object.metadata.name = Some(name.into());
        object.metadata.uid = Some(uid.into());
        object.metadata.generation = Some(generation);
        object
    }

    #[test]
    fn the_change_filter_passes_new_objects_and_changed_hashes_only() {
        let mut seen = Seen::new(REMEMBERED_FOR);
        let now = Instant::now();
        let a = config_map("ns", "a", "u1", 1);
        let hash = |o: &ConfigMap| reconcile_relevant(o).unwrap_or_default();
        assert!(seen.changed(&a.metadata, hash(&a), now), "first sighting");
        assert!(!seen.changed(&a.metadata, hash(&a), now), "same hash");
        let a2 = config_map("ns", "a", "u1", 2);
        assert!(seen.changed(&a2.metadata, hash(&a2), now), "new generation");
        // Another object of the same hash, by name, namespace or UID, is not the first one.
        for other in [
            config_map("ns", "b", "u1", 2),
            config_map("other", "a", "u1", 2),
            config_map("ns", "a", "u2", 2),
        ] {
            assert!(
                seen.changed(&other.metadata, hash(&other), now),
                "{:?}",
                other.metadata
            );
        }
        assert_eq!(seen.by_identity.len(), 4);
    }

    #[test]
    fn the_change_filter_forgets_what_it_has_not_seen_for_its_memory() {
        let mut seen = Seen::new(Duration::from_secs(10));
        let start = seen.epoch;
        let a = config_map("ns", "a", "u1", 1);
        let b = config_map("ns", "b", "u2", 1);
        let hash = reconcile_relevant(&a).unwrap_or_default();
        assert!(seen.changed(&a.metadata, hash, start));
        assert!(seen.changed(&b.metadata, hash, start + Duration::from_secs(5)));
        // Eleven seconds on, `a` is forgotten (and passes again), `b` is kept.
        assert!(seen.changed(&a.metadata, hash, start + Duration::from_secs(11)));
        assert_eq!(seen.by_identity.len(), 2, "a (again) and b");
        assert!(!seen.changed(&b.metadata, hash, start + Duration::from_secs(12)));
        // Twenty-five seconds on, nothing seen within ten: the eviction drops both.
        let c = config_map("ns", "c", "u3", 1);
        assert!(seen.changed(&c.metadata, hash, start + Duration::from_secs(25)));
        assert_eq!(seen.by_identity.len(), 1, "only c");
    }

    #[test]
    fn the_change_filter_lets_an_entry_kept_by_an_eviction_expire_on_its_own() {
        let mut seen = Seen::new(Duration::from_secs(10));
        let start = seen.epoch;
        let a = config_map("ns", "a", "u1", 1);
        let b = config_map("ns", "b", "u2", 1);
        let hash = reconcile_relevant(&a).unwrap_or_default();
        assert!(seen.changed(&a.metadata, hash, start + Duration::from_secs(5)));
        // The eviction at eleven seconds keeps `a` (seen six seconds ago)…
        assert!(seen.changed(&b.metadata, hash, start + Duration::from_secs(11)));
        assert_eq!(seen.by_identity.len(), 2);
        // …and at sixteen, before the next eviction, `a` unseen for eleven seconds passes again.
        assert!(seen.changed(&a.metadata, hash, start + Duration::from_secs(16)));
    }

    #[tokio::test]
    async fn the_change_filter_as_a_stream_passes_errors_and_unhashed_objects() {
        let a = config_map("ns", "a", "u1", 1);
        let items: Vec<Result<ConfigMap, watcher::Error>> = vec![
            Ok(a.clone()),
            Ok(a.clone()),
            Err(watcher::Error::NoResourceVersion),
            Ok(config_map("ns", "a", "u1", 2)),
        ];
        let passed: Vec<_> = changed(
            futures::stream::iter(items),
            reconcile_relevant::<ConfigMap>,
        )
        .collect()
        .await;
        assert_eq!(passed.len(), 3, "the repeat is dropped");
        assert!(passed[1].is_err());
        let unhashed: Vec<_> = changed(
            futures::stream::iter(vec![Ok::<_, watcher::Error>(a.clone()), Ok(a)]),
            |_: &ConfigMap| None,
        )
        .collect()
        .await;
        assert_eq!(unhashed.len(), 2);
    }

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
