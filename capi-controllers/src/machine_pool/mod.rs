//! The MachinePool controller: a pool's bootstrap data and infrastructure pool owned and read,
//! the provider IDs of its instances copied to `spec.providerIDList`, one `Machine` per machine
//! the infrastructure provider made for an instance ("MachinePool Machines"), the workload
//! cluster's nodes matched by provider ID, and deletion in an order that strands nothing.
//!
//! Watches: MachinePools; their Machines; their Cluster; the bootstrap configs and
//! infrastructure pools they own, and the infrastructure machines labelled with their names; the
//! workload cluster's nodes, by provider ID.
//!
//! Phases (`reconcile_once`, in `phases`): a deleted pool is taken apart by `deletion`;
//! otherwise the cluster is found, the finalizer, cluster-name label and Cluster owner written
//! first, pause honoured, an absent `spec.replicas` defaulted (from the cluster autoscaler's
//! size annotations as for a MachineDeployment), the bootstrap config owned and its data secret's name copied to the
//! template, the infrastructure pool owned and read (provisioned, replicas, provider IDs), a
//! `Machine` made for each infrastructure machine that has none (`machines`), the nodes matched
//! and those of instances no longer in the pool deleted (`nodes`); spec changes and the status
//! (`status`, upstream's phases and v1beta2 conditions) written once, at the end.
//!
//! Where upstream can go wrong this does not: a pool whose infrastructure is not ready still has
//! its provider IDs and nodes followed (the list never freezes on a condition), a deletion
//! deletes the infrastructure pool before any `Machine` (a `Machine` deleted first would make
//! the infrastructure replace its instance), and the finalizer goes only once the API server
//! holds no `Machine` of the pool.

mod deletion;
mod machines;
mod nodes;
mod phases;
mod status;

use std::ops::ControlFlow::Break;
use std::sync::{Arc, Mutex, OnceLock};

use capi_core::api::{Cluster, Machine, MachinePool, MachinePoolStatus};
use capi_core::labels;
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use futures::{StreamExt, stream};
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use tokio::sync::mpsc;

use crate::references::{ReferenceWatches, References};
use crate::workload::{NodeChange, WorkloadClusters};
use crate::{CoreSettings, cache, cluster_cache, of_cluster, receiver_stream, take};
use capi_runtime::cache::informer::Informer;
use capi_runtime::pace::StatusPacer;
use capi_runtime::plan::{EventNote, Next};
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// The finalizer that makes a deleted MachinePool delete its infrastructure, bootstrap config,
/// machines and nodes first (upstream's name).
pub const MACHINE_POOL_FINALIZER: &str = "machinepool.cluster.x-k8s.io";

/// What the MachinePool controller works with besides the client.
pub(crate) struct MachinePoolController {
    references: References,
    reference_changes: Mutex<Option<mpsc::UnboundedReceiver<Arc<DynamicObject>>>>,
    workloads: Arc<WorkloadClusters>,
    node_changes: Mutex<Option<mpsc::UnboundedReceiver<NodeChange>>>,
    machines: OnceLock<Informer<Machine>>,
    clusters: OnceLock<Store<Cluster>>,
    /// Spaces the status writes of each pool (see [`capi_runtime::pace`]).
    pacer: StatusPacer,
    settings: CoreSettings,
}

impl MachinePoolController {
    pub(crate) fn new(
        watches: &Arc<ReferenceWatches>,
        client: kube::Client,
        namespace: Option<String>,
        workloads: Arc<WorkloadClusters>,
        settings: CoreSettings,
    ) -> Self {
        let (references, reference_changes) = References::sharing(watches, client, namespace);
        let node_changes = workloads.subscribe();
        Self {
            references,
            reference_changes: Mutex::new(Some(reference_changes)),
            workloads,
            node_changes: Mutex::new(Some(node_changes)),
            machines: OnceLock::new(),
            clusters: OnceLock::new(),
            pacer: StatusPacer::default(),
            settings,
        }
    }
}

/// The pools of `store` in `namespace` that an object labelled `labels` (pool and cluster name)
/// belongs to.
fn pools_labelled(
    store: &Store<MachinePool>,
    namespace: Option<&str>,
    object_labels: &std::collections::BTreeMap<String, String>,
) -> Vec<ObjectRef<MachinePool>> {
    let (Some(pool), Some(cluster)) = (
        object_labels.get(labels::MACHINE_POOL_NAME),
        object_labels.get(labels::CLUSTER_NAME),
    ) else {
        return Vec::new();
    };
    store
        .state()
        .into_iter()
        .filter(|p| {
            p.namespace().as_deref() == namespace
                && &p.spec.cluster_name == cluster
                && labels::label_value(&p.name_any()) == pool.as_str()
        })
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// Runs until `shutdown` completes; in-flight reconciles finish first.
pub(crate) async fn run(
    reconciler: Reconciler<MachinePool, MachinePoolController>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, pools) = reconciler.trigger();
    let (machines, machine_changes) = cache(reconciler.informer::<Machine>());
    let (clusters, cluster_changes) = cluster_cache(reconciler.informer::<Cluster>());
    let _ = reconciler.state().machines.set(machines);
    let _ = reconciler.state().clusters.set(clusters);
    let reference_changes = take(&reconciler.state().reference_changes);
    let node_changes = take(&reconciler.state().node_changes);
    let concurrency = reconciler.concurrency();
    let by_cluster = pools.clone();
    let by_machine = pools.clone();
    let by_reference = pools.clone();
    let by_node = pools.clone();
    // A bootstrap config or infrastructure pool the pool owns changed, or an infrastructure
    // machine labelled with the pool's name: the pool looks again.
    let references = receiver_stream(reference_changes).flat_map(move |object| {
        let namespace = object.namespace();
        let mut found: Vec<ObjectRef<MachinePool>> = object
            .owner_references()
            .iter()
            .filter(|r| r.kind == "MachinePool" && r.api_version.starts_with("cluster.x-k8s.io/"))
            .map(|r| ObjectRef::new(&r.name).within(namespace.as_deref().unwrap_or_default()))
            .collect();
        found.extend(pools_labelled(
            &by_reference,
            namespace.as_deref(),
            object.labels(),
        ));
        stream::iter(found)
    });
    // A node changed: the pool listing its provider ID looks again.
    let nodes = receiver_stream(node_changes).flat_map(move |change| {
        let found: Vec<ObjectRef<MachinePool>> = match &change.provider_id {
            None => Vec::new(),
            Some(provider_id) => by_node
                .state()
                .into_iter()
                .filter(|p| {
                    p.namespace().as_deref() == Some(change.namespace.as_str())
                        && p.spec.cluster_name == change.cluster
                        && p.spec.provider_id_list.contains(provider_id)
                })
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect(),
        };
        stream::iter(found)
    });
    let context = reconciler.into_context(|deps, _, _| deps);
    let results = Controller::for_stream(trigger, pools)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        // A Machine of a pool changed (its conditions count in the pool's replicas).
        .watches_stream(machine_changes, move |machine| {
            pools_labelled(
                &by_machine,
                machine.namespace().as_deref(),
                machine.labels(),
            )
        })
        .watches_stream(
            cluster_changes,
            of_cluster(by_cluster, |p: &MachinePool| &p.spec.cluster_name),
        )
        .reconcile_on(stream::select(references, nodes))
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_pool,
            back_off::<MachinePool, MachinePoolController>,
            context,
        );
    drain(results).await;
}

#[tracing::instrument(skip_all, fields(namespace = %pool.namespace().unwrap_or_default(), name = %pool.name_any()))]
async fn reconcile_pool(
    pool: Arc<MachinePool>,
    context: Arc<Context<MachinePoolController>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(pool.as_ref(), reconcile_once(&pool, &context))
        .await
}

/// What one pass over a pool works with: what it read, the spec fields it copies and the status
/// it computes, each written once.
struct Scope<'a> {
    pool: &'a MachinePool,
    context: &'a Context<MachinePoolController>,
    namespace: String,
    uid: String,
    pools: Api<MachinePool>,
    machines: Api<Machine>,
    /// Spec fields this pass copies from the bootstrap config and the infrastructure pool
    /// (`template.spec.bootstrap.dataSecretName`, `providerIDList`), as a merge patch of `spec`.
    spec_changes: serde_json::Map<String, serde_json::Value>,
    /// The provider IDs as they are after this pass (copied or as they were).
    provider_ids: Vec<String>,
    /// The status being computed from the one last written.
    status: MachinePoolStatus,
    /// The events this pass publishes.
    events: Vec<EventNote>,
}

impl<'a> Scope<'a> {
    fn new(pool: &'a MachinePool, context: &'a Context<MachinePoolController>) -> Self {
        let namespace = pool.namespace().unwrap_or_default();
        Self {
            pool,
            context,
            pools: Api::namespaced(context.client.clone(), &namespace),
            machines: Api::namespaced(context.client.clone(), &namespace),
            namespace,
            uid: pool.uid().unwrap_or_default(),
            spec_changes: serde_json::Map::new(),
            provider_ids: pool.spec.provider_id_list.clone(),
            status: pool.status.clone().unwrap_or_default(),
            events: Vec::new(),
        }
    }

    fn deps(&self) -> &'a MachinePoolController {
        &self.context.state
    }
}

/// One pass over a pool: each phase either goes on or ends the pass with what comes next.
async fn reconcile_once(
    pool: &MachinePool,
    context: &Context<MachinePoolController>,
) -> Result<Next, ReconcileError> {
    let deps = &context.state;
    let mut scope = Scope::new(pool, context);
    let cluster = match deps.clusters.get() {
        Some(store) => {
            crate::find_cluster(
                store,
                &context.client,
                &pool.spec.cluster_name,
                &scope.namespace,
            )
            .await?
        }
        None => None,
    };
    if pool.metadata.deletion_timestamp.is_some() {
        // A paused pool deletes nothing either (a cluster being moved keeps its nodes).
        if let Some(cluster) = cluster.as_deref()
            && let Break(next) = phases::honour_pause(&mut scope, cluster).await?
        {
            return Ok(next);
        }
        return deletion::delete(&mut scope, cluster.as_deref()).await;
    }
    let Some(cluster) = cluster else {
        return Ok(Next::Requeue(deps.settings.poll));
    };
    if let Break(next) = phases::ensure_metadata(&scope, &cluster).await? {
        return Ok(next);
    }
    if let Break(next) = phases::honour_pause(&mut scope, &cluster).await? {
        return Ok(next);
    }
    if let Break(next) = phases::default_replicas(&mut scope).await? {
        return Ok(next);
    }
    let bootstrap = phases::reconcile_bootstrap(&mut scope).await?;
    let infra = phases::reconcile_infrastructure(&mut scope).await?;
    let members = machines::reconcile(&mut scope, &infra).await?;
    let nodes = nodes::reconcile(&mut scope, &cluster).await?;
    phases::write_spec(&scope).await?;
    let facts = status::Facts {
        bootstrap,
        infrastructure: infra.step,
        infrastructure_provisioned: infra.provisioned,
        replicas: infra.replicas,
        members,
        nodes,
    };
    status::write(&mut scope, facts).await
}
