//! The core Cluster API controllers, for standalone mode: with them the workspace runs a complete
//! management plane and needs no Go controllers. Register them with
//! [`Manager::add_core_controllers`](crate::manager::Manager::add_core_controllers); leave them
//! out when upstream Cluster API core runs beside the manager.
//!
//! - [`cluster`](self#cluster): infrastructure and control plane references, phases, the control
//!   plane endpoint and failure domains copied from the infrastructure cluster, deletion in order
//!   (deployments, sets and machines first, then the control plane and infrastructure objects,
//!   then the Secrets the cluster owns);
//! - machines: owner references on the bootstrap config and the infrastructure machine, bootstrap
//!   data and provider ID copied, the workload `Node` found by provider ID, phases and conditions;
//!   deletion cordons and drains the node (eviction API, PodDisruptionBudgets respected, bounded by
//!   `spec.deletion.nodeDrainTimeoutSeconds`), deletes the infrastructure and bootstrap objects, then
//!   the node;
//! - machine sets: machines created from the template (the Machine first, then its bootstrap config
//!   and infrastructure machine, named after it and owned by it, so that a crash in between leaks
//!   nothing and the next pass completes it), surplus deleted by priority, orphans adopted,
//!   machines marked by a health check replaced (a machine being deleted keeps its slot until it
//!   is gone, as upstream counts it); expectations of in-flight creates and deletes keep a stale
//!   cache from causing duplicates;
//! - machine deployments: RollingUpdate (upstream's rounding of `maxSurge`/`maxUnavailable`) and
//!   OnDelete, revision annotations, one MachineSet per template, `paused`;
//! - machine health checks: node startup timeout, unhealthy node and machine conditions with
//!   timeouts, `unhealthyLessThanOrEqualTo`/`unhealthyInRange` short-circuits, remediation by
//!   marking machines (`OwnerRemediated=False`) for their MachineSet to replace.
//!
//! Where upstream has known flaws this does better: nothing latches in a failed state (a
//! `Failed` phase is never written; conditions say what is wrong and clear when it is fixed), a
//! machine set never creates from a cache that has not seen its own previous creates, and
//! deletion does not depend on the garbage collector (it deletes what the cluster owns itself, so
//! that a management cluster without one still ends clean).

mod cluster;
mod expectations;
mod health_check;
mod machine;
mod machine_deployment;
mod machine_set;
mod ownership;
mod references;
pub mod selector;
mod workload;

use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use capi_core::api::Cluster;
use futures::{Stream, stream};
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

pub use machine_deployment::{MACHINE_DEPLOYMENT_FINALIZER, TEMPLATE_HASH_LABEL, template_hash};
pub use machine_set::MACHINE_SET_FINALIZER;
pub use references::ReferenceError;
pub use workload::{SECRET_RECHECK, WorkloadError};

pub(crate) use cluster::ClusterController;
pub(crate) use health_check::HealthCheckController;
pub(crate) use machine::MachineController;
pub(crate) use machine_deployment::DeploymentController;
pub(crate) use machine_set::MachineSetController;
pub(crate) use workload::WorkloadClusters;

/// Settings of the core controllers.
#[derive(Clone, Debug, PartialEq)]
pub struct CoreSettings {
    /// How long draining a node may take when the Machine does not say
    /// (`spec.deletion.nodeDrainTimeoutSeconds`); `None` waits as long as it takes, like upstream.
    pub node_drain_timeout: Option<Duration>,
    /// How long deleting the `Node` may fail before the Machine goes without it, when the Machine
    /// does not say (`spec.deletion.nodeDeletionTimeoutSeconds`; upstream's default is 10 s).
    pub node_deletion_timeout: Duration,
    /// How often a machine or cluster looks again while waiting for something no watch reports
    /// (the workload cluster's kubeconfig Secret, a draining node).
    pub poll: Duration,
    /// How many objects a MachineSet creates or deletes at once.
    pub machine_set_parallelism: usize,
}

impl Default for CoreSettings {
    fn default() -> Self {
        Self {
            node_drain_timeout: None,
            node_deletion_timeout: Duration::from_secs(10),
            poll: Duration::from_secs(5),
            machine_set_parallelism: 16,
        }
    }
}

/// The `Cluster` named `name` in `namespace`: from the cache, else from the API server (the cache
/// may not have seen it yet).
async fn find_cluster(
    store: &Store<Cluster>,
    client: &kube::Client,
    name: &str,
    namespace: &str,
) -> Result<Option<Arc<Cluster>>, kube::Error> {
    if let Some(found) = store.get(&ObjectRef::new(name).within(namespace)) {
        return Ok(Some(found));
    }
    let api: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(name).await?.map(Arc::new))
}

/// The cache in `slot` once it holds everything the API server had at its first list — never a
/// partial view. A controller that counted machines in a cache still filling after a restart would
/// see too few and create more than the user asked for; so every decision that counts from a cache
/// asks here first and requeues on `None` (which only happens after a restart or at start-up). It
/// never waits: a worker is not held while the first list is under way.
fn synced<K>(slot: &std::sync::OnceLock<Store<K>>) -> Option<&Store<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    use futures::FutureExt;
    let store = slot.get()?;
    match store.wait_until_ready().now_or_never() {
        Some(Ok(())) => Some(store),
        _ => None,
    }
}

/// A cache of every object `api` sees, and the stream of changes that fills it (hand it to
/// `Controller::watches_stream`, which drives it).
fn cache<K>(
    api: Api<K>,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let changes = watcher(api, watcher::Config::default())
        .backoff(crate::retry::WatchBackoff::default())
        .reflect(writer)
        .touched_objects();
    (store, changes)
}

/// [`cache`] for Clusters: the store sees every change, the stream passes on only those the
/// cluster's objects read ([`crate::predicate::cluster_as_its_objects_see_it`]).
fn cluster_cache(
    api: Api<Cluster>,
) -> (
    Store<Cluster>,
    impl Stream<Item = Result<Cluster, watcher::Error>> + Send + 'static,
) {
    let (store, changes) = cache(api);
    let relevant = changes.predicate_filter(
        crate::predicate::cluster_as_its_objects_see_it,
        Default::default(),
    );
    (store, relevant)
}

/// Maps a changed Cluster to the objects of `store` that belong to it (same namespace,
/// `cluster_name` naming it).
fn of_cluster<K>(
    store: Store<K>,
    cluster_name: fn(&K) -> &str,
) -> impl Fn(Cluster) -> Vec<ObjectRef<K>> + Send + Sync + 'static
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Send + Sync + 'static,
{
    move |cluster| {
        let name = cluster.name_any();
        let namespace = cluster.namespace();
        store
            .state()
            .into_iter()
            .filter(|o| o.namespace() == namespace && cluster_name(o) == name)
            .map(|o| ObjectRef::from_obj(o.as_ref()))
            .collect()
    }
}

/// Takes a receiver out of its slot (once; later calls get none).
fn take<T>(slot: &Mutex<Option<mpsc::UnboundedReceiver<T>>>) -> Option<mpsc::UnboundedReceiver<T>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// A receiver as a stream; an absent one never yields.
fn receiver_stream<T: Send + 'static>(
    receiver: Option<mpsc::UnboundedReceiver<T>>,
) -> impl Stream<Item = T> + Send + 'static {
    use futures::StreamExt;
    match receiver {
        Some(receiver) => stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|item| (item, receiver))
        })
        .left_stream(),
        None => stream::pending().right_stream(),
    }
}
