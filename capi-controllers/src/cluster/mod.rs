//! The Cluster controller: owner references on the infrastructure cluster and control plane,
//! their readiness in `status.initialization`, the control plane endpoint and failure domains
//! copied from the infrastructure cluster, phases, replica summaries; and deletion in order.
//!
//! With a control plane provider (`spec.controlPlaneRef`), the v1beta2 control-plane contract:
//! `status.initialization.controlPlaneInitialized`, `spec.controlPlaneEndpoint` and the replica
//! counters are read from the control plane object, and its `Available` condition is mirrored as
//! `ControlPlaneAvailable` (see `control_plane.rs`). Without one the control plane counts as
//! initialised once a control-plane machine has a node, as upstream does for machine-based
//! control planes.
//!
//! Watches: Clusters; their machines; their deployments, sets, pools and health checks going away (for
//! a deletion to go on); the infrastructure clusters and control planes they own or name.
//!
//! Phases (`reconcile_once`, in `phases`): a deleted cluster is taken apart in order by
//! `deletion`; otherwise the finalizer first, then pause honoured, topology reported, the
//! infrastructure cluster owned and read, the machines observed, the control plane owned and read,
//! the control plane endpoint copied; status computed and written once, at the end (`status`).

mod control_plane;
mod deletion;
mod phases;
mod status;

use std::ops::ControlFlow::Break;
use std::sync::{Arc, Mutex, OnceLock};

use capi_core::api::{
    ApiEndpoint, Cluster, ClusterStatus, Machine, MachineDeployment, MachineHealthCheck,
    MachinePool, MachineSet,
};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::references::{ReferenceWatches, References};
use crate::workload::WorkloadClusters;
use crate::{CoreSettings, cache, receiver_stream, take};
use capi_runtime::cache::informer::Informer;
use capi_runtime::pace::StatusPacer;
use capi_runtime::plan::Next;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// What the Cluster controller works with besides the client.
pub(crate) struct ClusterController {
    references: References,
    reference_changes: Mutex<Option<mpsc::UnboundedReceiver<Arc<DynamicObject>>>>,
    workloads: Arc<WorkloadClusters>,
    machines: OnceLock<Informer<Machine>>,
    /// A deleting cluster's objects, from watches: each pass of a deletion reads these instead
    /// of listing every object of the namespace (one authoritative list per kind comes last,
    /// before the finalizer goes).
    deployments: OnceLock<Informer<MachineDeployment>>,
    sets: OnceLock<Informer<MachineSet>>,
    pools: OnceLock<Informer<MachinePool>>,
    health_checks: OnceLock<Informer<MachineHealthCheck>>,
    /// Spaces this summary's status writes (see [`capi_runtime::pace`]).
    pacer: StatusPacer,
    settings: CoreSettings,
}

impl ClusterController {
    pub(crate) fn new(
        watches: &Arc<ReferenceWatches>,
        client: kube::Client,
        namespace: Option<String>,
        workloads: Arc<WorkloadClusters>,
        settings: CoreSettings,
    ) -> Self {
        let (references, reference_changes) = References::sharing(watches, client, namespace);
        Self {
            references,
            reference_changes: Mutex::new(Some(reference_changes)),
            workloads,
            machines: OnceLock::new(),
            deployments: OnceLock::new(),
            sets: OnceLock::new(),
            pools: OnceLock::new(),
            health_checks: OnceLock::new(),
            pacer: StatusPacer::default(),
            settings,
        }
    }
}

/// Runs until `shutdown` completes; in-flight reconciles finish first.
pub(crate) async fn run(
    reconciler: Reconciler<Cluster, ClusterController>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, clusters) = reconciler.trigger();
    let (machines, machine_changes) = cache(reconciler.informer::<Machine>());
    let _ = reconciler.state().machines.set(machines);
    let (deployments, deployment_changes) = cache(reconciler.informer::<MachineDeployment>());
    let _ = reconciler.state().deployments.set(deployments);
    let (sets, set_changes) = cache(reconciler.informer::<MachineSet>());
    let _ = reconciler.state().sets.set(sets);
    let (pools, pool_changes) = cache(reconciler.informer::<MachinePool>());
    let _ = reconciler.state().pools.set(pools);
    let (health_checks, health_check_changes) = cache(reconciler.informer::<MachineHealthCheck>());
    let _ = reconciler.state().health_checks.set(health_checks);
    // A referenced object changed: the clusters that own it, and those that name it (a control
    // plane created after its cluster is not owned yet — the cluster takes ownership when it
    // sees it).
    let referring = clusters.clone();
    let owners =
        receiver_stream(take(&reconciler.state().reference_changes)).flat_map(move |object| {
            let namespace = object.namespace().unwrap_or_default();
            let name = object.name_any();
            let mut clusters: Vec<ObjectRef<Cluster>> = object
                .owner_references()
                .iter()
                .filter(|r| r.kind == "Cluster" && r.api_version.starts_with("cluster.x-k8s.io/"))
                .map(|r| ObjectRef::new(&r.name).within(&namespace))
                .collect();
            // The changes of every referenced kind of the manager arrive here (the watches are
            // shared): an object another controller owns (a Machine's infrastructure machine or
            // bootstrap config) is no cluster's reference; the others are matched by kind, group
            // and name.
            let owned_elsewhere = object
                .owner_references()
                .iter()
                .any(|r| r.controller == Some(true) && r.kind != "Cluster");
            let (kind, api_version) = object
                .types
                .as_ref()
                .map(|t| (t.kind.clone(), t.api_version.clone()))
                .unwrap_or_default();
            let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
            if !owned_elsewhere {
                clusters.extend(
                    referring
                        .state()
                        .iter()
                        .filter(|c| c.namespace().as_deref() == Some(namespace.as_str()))
                        .filter(|c| {
                            [&c.spec.control_plane_ref, &c.spec.infrastructure_ref]
                                .into_iter()
                                .flatten()
                                .any(|r| r.name == name && r.kind == kind && r.api_group == group)
                        })
                        .map(|c| ObjectRef::from_obj(c.as_ref())),
                );
            }
            stream::iter(clusters)
        });
    let concurrency = reconciler.concurrency();
    let context = reconciler.into_context(|deps, _, _| deps);
    let results = Controller::for_stream(trigger, clusters)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .watches_stream(machine_changes, |machine| {
            let namespace = machine.namespace().unwrap_or_default();
            Some(ObjectRef::new(&machine.spec.cluster_name).within(&namespace))
        })
        // A deployment, set or health check going away: its deleting cluster looks again at
        // once (their other changes are none of the cluster's business).
        .watches_stream(deployment_changes, |d| {
            leaving(&d.metadata, &d.spec.cluster_name)
        })
        .watches_stream(set_changes, |s| leaving(&s.metadata, &s.spec.cluster_name))
        .watches_stream(pool_changes, |p| leaving(&p.metadata, &p.spec.cluster_name))
        .watches_stream(health_check_changes, |h| {
            leaving(&h.metadata, &h.spec.cluster_name)
        })
        .reconcile_on(owners)
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_cluster,
            back_off::<Cluster, ClusterController>,
            context,
        );
    drain(results).await;
}

/// The cluster of an object being deleted (or gone), for the cluster's deletion to go on.
fn leaving(
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    cluster: &str,
) -> Option<ObjectRef<Cluster>> {
    metadata.deletion_timestamp.as_ref()?;
    Some(ObjectRef::new(cluster).within(metadata.namespace.as_deref().unwrap_or_default()))
}

#[tracing::instrument(skip_all, fields(namespace = %cluster.namespace().unwrap_or_default(), name = %cluster.name_any()))]
async fn reconcile_cluster(
    cluster: Arc<Cluster>,
    context: Arc<Context<ClusterController>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(cluster.as_ref(), reconcile_once(&cluster, &context))
        .await
}

/// The condition upstream's topology controller keeps on a Cluster with a `spec.topology`.
pub const TOPOLOGY_RECONCILED: &str = "TopologyReconciled";

/// What one pass over a cluster works with: what its phases found, and the status it computes,
/// written once.
struct Scope<'a> {
    cluster: &'a Cluster,
    context: &'a Context<ClusterController>,
    namespace: String,
    api: Api<Cluster>,
    /// The reference that makes the cluster the owner of its infrastructure and control plane.
    owner: Option<OwnerReference>,
    /// The status being computed from the one last written.
    status: ClusterStatus,
    /// The endpoint the infrastructure cluster (else the control plane) reports.
    endpoint: Option<ApiEndpoint>,
    infra_provisioned: bool,
    /// The cluster's machines, from the cache.
    machines: Vec<Arc<Machine>>,
    /// The control plane object, when the cluster names one and it exists.
    control_plane: Option<Arc<DynamicObject>>,
    control_plane_initialized: bool,
}

impl<'a> Scope<'a> {
    fn new(cluster: &'a Cluster, context: &'a Context<ClusterController>) -> Self {
        let namespace = cluster.namespace().unwrap_or_default();
        Self {
            cluster,
            context,
            api: Api::namespaced(context.client.clone(), &namespace),
            namespace,
            owner: cluster.controller_owner_ref(&()),
            status: cluster.status.clone().unwrap_or_default(),
            endpoint: None,
            infra_provisioned: false,
            machines: Vec::new(),
            control_plane: None,
            control_plane_initialized: false,
        }
    }

    fn deps(&self) -> &'a ClusterController {
        &self.context.state
    }

    /// Sets a condition of the status being computed, at the cluster's generation.
    fn set(&mut self, type_: &str, state: ConditionStatus, reason: &str, message: String) {
        condition::set(
            &mut self.status.conditions,
            DesiredCondition::new(type_, state, reason)
                .message(message)
                .observed_generation(self.cluster.metadata.generation),
        );
    }
}

fn has_finalizer(cluster: &Cluster) -> bool {
    cluster
        .finalizers()
        .iter()
        .any(|f| f == labels::CLUSTER_FINALIZER)
}

/// One pass over a cluster: each phase either goes on or ends the pass with what comes next.
async fn reconcile_once(
    cluster: &Cluster,
    context: &Context<ClusterController>,
) -> Result<Next, ReconcileError> {
    let mut scope = Scope::new(cluster, context);
    if cluster.metadata.deletion_timestamp.is_some() {
        if !has_finalizer(cluster) {
            return Ok(Next::AwaitChange);
        }
        return deletion::delete(cluster, &scope.namespace, context).await;
    }
    if let Break(next) = phases::ensure_finalizer(&scope).await? {
        return Ok(next);
    }
    if let Break(next) = phases::honour_pause(&mut scope).await? {
        return Ok(next);
    }
    phases::record_topology(&mut scope);
    phases::reconcile_infrastructure(&mut scope).await?;
    phases::observe_machines(&mut scope);
    phases::reconcile_control_plane(&mut scope).await?;
    phases::ensure_endpoint(&scope).await?;
    status::write(&mut scope).await
}
