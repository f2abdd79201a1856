//! Resyncs read the cloud a cluster at a time: a running machine's periodic check that its
//! instance still runs is answered from one listing of its cluster's instances
//! ([`Compute::cluster_instances`](crate::cloud::Compute::cluster_instances)) taken at most
//! [`ClusterListings::ttl`] ago, instead of one call per machine — 1000 machines resyncing every
//! 600 s (±10 %) are a handful of calls per period, not 1000.
//!
//! What a listing may answer is deliberately narrow: only "this instance was running when the
//! cluster was listed". Anything else — not listed (a list lags behind creates, or the instance
//! is gone), listed in another state — is not an answer, and the caller asks the cloud for that
//! one instance as before. So a listing can only delay noticing that a running instance stopped,
//! by at most its age; it never makes an instance look missing (which could lead to a second one)
//! and never reports one that was never there.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::cloud::{Instance, InstanceStatus};

/// How long one listing of a cluster answers for its running instances by default: short against
/// the 600 s resync period, long enough that the resyncs of one period share a few listings.
pub const DEFAULT_LISTING_TTL: Duration = Duration::from_secs(30);

/// Listings of clusters' instances, each shared by the resyncs of that cluster's machines while it
/// is younger than the TTL. Concurrent lookups of one cluster wait for one listing (single flight);
/// expired listings are dropped when another cluster is listed, so memory follows the clusters
/// that resync, not every cluster ever seen.
#[derive(Debug)]
pub struct ClusterListings {
    ttl: Duration,
    by_cluster: Mutex<HashMap<String, Slot>>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Listing>>>;

#[derive(Debug)]
struct Listing {
    taken: Instant,
    /// The running instances, by ID (sorted; looked up by binary search): the listing itself,
    /// without a copy of each ID as a key or a hash table's spare room.
    running: Vec<Instance>,
}

impl ClusterListings {
    /// Listings that answer for `ttl` after they are taken (zero: every lookup lists again).
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            by_cluster: Mutex::default(),
        }
    }

    /// How long a listing answers after it was taken.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Instance `id` of `cluster` if a listing at most [`ttl`](Self::ttl) old shows it running,
    /// taking a new listing with `list` (one call) when the last one is older. `None` means the
    /// listing cannot say (not listed, or not running): ask the cloud for the instance itself.
    /// A failed `list` is returned as it is and leaves no listing behind.
    pub async fn running<E, F, Fut>(
        &self,
        cluster: &str,
        id: &str,
        list: F,
    ) -> Result<Option<Instance>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<Instance>, E>>,
    {
        let slot = self.slot(cluster);
        let mut listing = slot.lock().await;
        let fresh = listing
            .as_ref()
            .is_some_and(|l| l.taken.elapsed() < self.ttl);
        if !fresh {
            // The stale listing goes first, so that the new one never sits beside it.
            *listing = None;
            let taken = Instant::now();
            let mut running = list().await?;
            running.retain(|i| i.status == InstanceStatus::Active);
            running.sort_unstable_by(|a, b| a.id.cmp(&b.id));
            running.shrink_to_fit();
            *listing = Some(Listing { taken, running });
        }
        Ok(listing.as_ref().and_then(|l| {
            l.running
                .binary_search_by(|i| i.id.as_str().cmp(id))
                .ok()
                .and_then(|at| l.running.get(at).cloned())
        }))
    }

    /// The slot of `cluster`, made on first use; making one drops the expired listings no lookup
    /// is using.
    fn slot(&self, cluster: &str) -> Slot {
        let mut slots = self
            .by_cluster
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get(cluster) {
            return Arc::clone(slot);
        }
        let ttl = self.ttl;
        slots.retain(|_, slot| match slot.try_lock() {
            Ok(listing) => listing.as_ref().is_some_and(|l| l.taken.elapsed() < ttl),
            Err(_) => true,
        });
        Arc::clone(slots.entry(cluster.to_string()).or_default())
    }

    /// How many clusters have a slot (for tests).
    #[cfg(test)]
    fn clusters(&self) -> usize {
        self.by_cluster
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Default for ClusterListings {
    fn default() -> Self {
        Self::new(DEFAULT_LISTING_TTL)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn instance(id: &str, status: InstanceStatus) -> Instance {
        Instance {
            id: id.into(),
            tag: format!("tag-{id}"),
            flavor: "small".into(),
            zone: None,
            address: "10.0.0.1".into(),
            status,
            control_plane: false,
            cluster: Some("ns.c".into()),
            scale_set: None,
            revision: None,
        }
    }

    fn world() -> Vec<Instance> {
        vec![
            instance("i-1", InstanceStatus::Active),
            instance("i-2", InstanceStatus::Active),
            instance("i-3", InstanceStatus::Building),
        ]
    }

    async fn look(
        listings: &ClusterListings,
        calls: &AtomicUsize,
        cluster: &str,
        id: &str,
    ) -> Option<Instance> {
        listings
            .running(cluster, id, || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ()>(world())
            })
            .await
            .ok()
            .flatten()
    }

    #[tokio::test(start_paused = true)]
    async fn one_listing_answers_a_cluster_until_it_expires() {
        let listings = ClusterListings::new(Duration::from_secs(30));
        let calls = AtomicUsize::new(0);
        assert_eq!(
            look(&listings, &calls, "ns.c", "i-1").await.map(|i| i.id),
            Some("i-1".to_string())
        );
        assert!(look(&listings, &calls, "ns.c", "i-2").await.is_some());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(look(&listings, &calls, "ns.c", "i-1").await.is_some());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn only_running_instances_are_answered_for() {
        let listings = ClusterListings::default();
        let calls = AtomicUsize::new(0);
        // Building: the caller must ask for the instance itself.
        assert!(look(&listings, &calls, "ns.c", "i-3").await.is_none());
        // Not listed (too new for the list, or gone): likewise.
        assert!(look(&listings, &calls, "ns.c", "i-9").await.is_none());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_listing_is_returned_and_not_kept() {
        let listings = ClusterListings::default();
        let failed = listings
            .running("ns.c", "i-1", || async { Err::<Vec<Instance>, _>("boom") })
            .await;
        assert_eq!(failed, Err("boom"));
        let calls = AtomicUsize::new(0);
        assert!(look(&listings, &calls, "ns.c", "i-1").await.is_some());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_lookups_of_one_cluster_share_one_listing() {
        let listings = ClusterListings::default();
        let calls = AtomicUsize::new(0);
        let lookups = (0..16).map(|_| async {
            listings
                .running("ns.c", "i-1", || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok::<_, ()>(world())
                })
                .await
        });
        let answers = futures::future::join_all(lookups).await;
        assert!(answers.iter().all(|a| matches!(a, Ok(Some(_)))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn expired_listings_of_other_clusters_are_dropped() {
        let listings = ClusterListings::new(Duration::from_secs(30));
        let calls = AtomicUsize::new(0);
        for cluster in ["ns.a", "ns.b", "ns.c"] {
            look(&listings, &calls, cluster, "i-1").await;
        }
        assert_eq!(listings.clusters(), 3);
        tokio::time::advance(Duration::from_secs(31)).await;
        look(&listings, &calls, "ns.d", "i-1").await;
        assert_eq!(listings.clusters(), 1);
    }
}
