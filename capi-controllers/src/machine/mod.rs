//! The Machine controller: bootstrap data → infrastructure → node → Running, and deletion
//! (drain, infrastructure and bootstrap objects, node, finalizer).
//!
//! Watches: Machines; their Cluster; their MachineDeployment's template; the bootstrap configs
//! and infrastructure machines they own; the workload cluster's nodes, by provider ID.
//!
//! Phases (`reconcile_once`, in `phases`): a deleted machine is taken apart by `deletion`;
//! otherwise a cached copy older than this controller's own last write waits for the cache, the
//! cluster is found, pause honoured, then the finalizer, cluster label and owner first, the
//! bootstrap config owned and its data secret's name copied, the infrastructure machine owned and
//! read, the provider ID recorded before anything else that follows, the node observed; a fresh
//! machine whose creator has yet to create its references waits quietly; the status is computed
//! from what the pass found (`status`) and written once.

mod deletion;
pub(crate) use deletion::delete_bootstrap_secret;
mod drain;
mod phases;
pub(crate) mod status;

use std::hash::{Hash, Hasher};
use std::ops::ControlFlow::Break;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use capi_core::api::{Cluster, Machine, MachineDeployment};
use capi_core::labels;
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use futures::{Stream, StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::references::{ReferenceWatches, References};
use crate::workload::{NodeChange, WorkloadClusters};
use crate::{CoreSettings, cache, cluster_cache, of_cluster, receiver_stream, take};
use capi_runtime::pace::StatusPacer;
use capi_runtime::plan::Next;
use capi_runtime::write;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// How soon a Machine whose cached copy predates this controller's own last write is looked at
/// again.
const OWN_WRITE_CATCH_UP: Duration = Duration::from_millis(250);

/// What the Machine controller works with besides the client.
pub(crate) struct MachineController {
    references: References,
    reference_changes: Mutex<Option<mpsc::UnboundedReceiver<Arc<DynamicObject>>>>,
    workloads: Arc<WorkloadClusters>,
    node_changes: Mutex<Option<mpsc::UnboundedReceiver<NodeChange>>>,
    clusters: OnceLock<Store<Cluster>>,
    deployments: OnceLock<Store<MachineDeployment>>,
    /// The Machine versions this controller's own writes replaced (see [`write::OwnWrites`]).
    own_writes: write::OwnWrites,
    /// Spaces the status writes of each machine (see [`capi_runtime::pace`]).
    pacer: StatusPacer,
    settings: CoreSettings,
}

impl MachineController {
    /// The controller's dependencies; node changes of `workloads` arrive on `node_changes`.
    pub(crate) fn new(
        watches: &Arc<ReferenceWatches>,
        client: kube::Client,
        namespace: Option<String>,
        workloads: Arc<WorkloadClusters>,
        node_changes: mpsc::UnboundedReceiver<NodeChange>,
        settings: CoreSettings,
    ) -> Self {
        let (references, reference_changes) = References::sharing(watches, client, namespace);
        Self {
            references,
            reference_changes: Mutex::new(Some(reference_changes)),
            workloads,
            node_changes: Mutex::new(Some(node_changes)),
            clusters: OnceLock::new(),
            deployments: OnceLock::new(),
            own_writes: write::OwnWrites::default(),
            pacer: StatusPacer::default(),
            settings,
        }
    }
}

/// Runs until `shutdown` completes; in-flight reconciles finish first.
pub(crate) async fn run(
    reconciler: Reconciler<Machine, MachineController>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, machines) = reconciler.trigger();
    let (clusters, cluster_changes) = cluster_cache(reconciler.informer::<Cluster>());
    let _ = reconciler.state().clusters.set(clusters);
    let (deployments, deployment_changes) = cache(reconciler.informer::<MachineDeployment>());
    let deployment_changes = template_changes(deployment_changes, deployments.store());
    let _ = reconciler.state().deployments.set(deployments.store());
    let by_deployment = machines.clone();
    let reference_changes = take(&reconciler.state().reference_changes);
    let node_changes = take(&reconciler.state().node_changes);
    let concurrency = reconciler.concurrency();
    let by_cluster = machines.clone();
    let by_node = machines.clone();
    // An infrastructure machine or bootstrap config changed: its owner Machine looks again.
    let owners = receiver_stream(reference_changes).flat_map(|object| {
        let namespace = object.namespace().unwrap_or_default();
        let owners: Vec<ObjectRef<Machine>> = object
            .owner_references()
            .iter()
            .filter(|r| r.kind == "Machine" && r.api_version.starts_with("cluster.x-k8s.io/"))
            .map(|r| ObjectRef::new(&r.name).within(&namespace))
            .collect();
        stream::iter(owners)
    });
    // A node changed: the machine with its provider ID looks again.
    let nodes = receiver_stream(node_changes).flat_map(move |change| {
        let found: Vec<ObjectRef<Machine>> = by_node
            .state()
            .into_iter()
            .filter(|m| {
                m.namespace().as_deref() == Some(change.namespace.as_str())
                    && m.spec.cluster_name == change.cluster
                    && change.provider_id.is_some()
                    && m.spec.provider_id == change.provider_id
            })
            .map(|m| ObjectRef::from_obj(m.as_ref()))
            .collect();
        stream::iter(found)
    });
    let context = reconciler.into_context(|deps, _, _| deps);
    let results = Controller::for_stream(trigger, machines)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        // A Cluster changed (paused, infrastructure ready, deleting): its machines look again.
        .watches_stream(
            cluster_changes,
            of_cluster(by_cluster, |m: &Machine| &m.spec.cluster_name),
        )
        // A MachineDeployment's template changed: its machines say whether they are up to date.
        .watches_stream(deployment_changes, move |deployment| {
            let name = deployment.name_any();
            let namespace = deployment.namespace();
            by_deployment
                .state()
                .into_iter()
                .filter(|m| {
                    m.namespace() == namespace
                        && m.labels().get(labels::MACHINE_DEPLOYMENT_NAME) == Some(&name)
                })
                .map(|m| ObjectRef::from_obj(m.as_ref()))
                .collect::<Vec<_>>()
        })
        .reconcile_on(stream::select(owners, nodes))
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_machine,
            back_off::<Machine, MachineController>,
            context,
        );
    drain(results).await;
}

/// The changes of MachineDeployments that matter to their machines (what `up_to_date` reads): a
/// new template, and the deployment's going (`deployments`, the store the changes come from, no
/// longer holds it). Not the status, which changes with every one of the deployment's machines:
/// building N machines costs O(N) machine reconciles, not O(N²), and a new machine's first
/// reconcile does not wait behind its siblings'.
fn template_changes(
    changes: impl Stream<Item = Result<MachineDeployment, watcher::Error>> + Send + 'static,
    deployments: Store<MachineDeployment>,
) -> impl Stream<Item = Result<MachineDeployment, watcher::Error>> + Send + 'static {
    capi_runtime::cache::predicate::changed(changes, move |deployment: &MachineDeployment| {
        // Gone (the store takes an event before its subscribers see it): no hash, so it passes.
        deployments.get(&ObjectRef::from_obj(deployment))?;
        let mut hasher = std::hash::DefaultHasher::new();
        super::machine_deployment::template_hash(&deployment.spec.template).hash(&mut hasher);
        Some(hasher.finish())
    })
}

#[tracing::instrument(skip_all, fields(namespace = %machine.namespace().unwrap_or_default(), name = %machine.name_any()))]
async fn reconcile_machine(
    machine: Arc<Machine>,
    context: Arc<Context<MachineController>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(machine.as_ref(), reconcile_once(&machine, &context))
        .await
}

/// What one pass over a machine works with.
struct Scope<'a> {
    machine: &'a Arc<Machine>,
    context: &'a Context<MachineController>,
    namespace: String,
    api: Api<Machine>,
    /// The reference that makes the machine the owner of its bootstrap config and
    /// infrastructure machine.
    owner: Option<OwnerReference>,
    /// The Machine as this pass wrote its spec (the bootstrap data secret's name), if it did.
    written: Option<Machine>,
}

impl<'a> Scope<'a> {
    fn new(machine: &'a Arc<Machine>, context: &'a Context<MachineController>) -> Self {
        let namespace = machine.namespace().unwrap_or_default();
        Self {
            machine,
            context,
            api: Api::namespaced(context.client.clone(), &namespace),
            namespace,
            owner: crate::ownership::as_blocking_controller(machine.as_ref()),
            written: None,
        }
    }

    fn deps(&self) -> &'a MachineController {
        &self.context.state
    }

    /// The Machine as last written: a write guarded by a version uses this one.
    fn current(&self) -> &Machine {
        self.written.as_ref().unwrap_or(self.machine.as_ref())
    }
}

/// One pass over a machine: each phase either goes on or ends the pass with what comes next.
async fn reconcile_once(
    machine: &Arc<Machine>,
    context: &Context<MachineController>,
) -> Result<Next, ReconcileError> {
    let deps = &context.state;
    let mut scope = Scope::new(machine, context);
    let cluster = phases::find_cluster(&scope).await?;
    if machine.meta().deletion_timestamp.is_some() {
        deps.own_writes.forget(machine.as_ref());
        return deletion::delete(machine, cluster.as_deref(), context).await;
    }
    if deps.own_writes.is_stale(machine.as_ref()) {
        // Our own last write replaced this copy and the cache has not caught up: writing from it
        // would meet a 409. Look again in a moment (the newer version is on its way; a status
        // change alone may not trigger a reconcile, so the requeue does).
        return Ok(Next::Requeue(OWN_WRITE_CATCH_UP));
    }
    let Some(cluster) = cluster else {
        return Ok(Next::Requeue(deps.settings.poll));
    };
    if let Break(next) = phases::honour_pause(&scope, &cluster).await? {
        return Ok(next);
    }
    if let Break(next) = phases::ensure_metadata(&scope, &cluster).await? {
        return Ok(next);
    }
    let bootstrap = phases::reconcile_bootstrap(&mut scope).await?;
    let infra = phases::reconcile_infrastructure(&scope).await?;
    if let Break(next) = phases::ensure_provider_id(&scope, &infra).await? {
        return Ok(next);
    }
    let node = phases::observe_node(&scope, &cluster).await;
    if let Break(next) = phases::await_creator(&scope, &bootstrap, &infra) {
        return Ok(next);
    }
    phases::write_status(&scope, bootstrap, infra, node).await
}

#[cfg(test)]
mod tests {
    use super::phases::{awaiting_references_of_its_creator, needs_cluster_owner};
    use super::status::Step;
    use super::*;
    use capi_runtime::reasons;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    #[test]
    fn machines_hear_of_their_deployments_new_template_not_of_its_status() {
        let mut deployment = MachineDeployment::default();
        deployment.metadata.name = Some("md".into());
        deployment.metadata.namespace = Some("ns".into());
        deployment.metadata.uid = Some("md-uid".into());
        deployment.spec.template.spec.version = Some("v1.33.0".into());
        let mut counted = deployment.clone();
        counted.status = Some(capi_core::api::MachineDeploymentStatus {
            replicas: Some(3),
            ..Default::default()
        });
        let mut scaled = counted.clone();
        scaled.spec.replicas = Some(5);
        let mut rolled = scaled.clone();
        rolled.spec.template.spec.version = Some("v1.33.1".into());
        let rolled_again = rolled.clone();
        let mut relabelled = rolled.clone();
        relabelled.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        // The store the changes come from: each is applied before it is passed on, and the last
        // is the deployment's deletion (same template).
        let (store, mut writer) = kube::runtime::reflector::store();
        let changes = stream::iter([
            watcher::Event::Apply(deployment),
            watcher::Event::Apply(counted),
            watcher::Event::Apply(scaled),
            watcher::Event::Apply(rolled),
            watcher::Event::Apply(relabelled),
            watcher::Event::Delete(rolled_again),
        ])
        .map(move |event| {
            writer.apply_watcher_event(&event);
            match event {
                watcher::Event::Apply(d) | watcher::Event::Delete(d) => Ok(d),
                _ => unreachable!("only applies and deletions are sent"),
            }
        });
        let passed =
            futures::executor::block_on(template_changes(changes, store).collect::<Vec<_>>());
        let seen: Vec<_> = passed
            .into_iter()
            .map(|d| d.ok().and_then(|d| d.spec.template.spec.version))
            .collect();
        let version = |v: &str| Some(v.to_string());
        assert_eq!(
            seen,
            [version("v1.33.0"), version("v1.33.1"), version("v1.33.1")],
            "the first sighting, the new template and the deletion"
        );
    }

    fn machine(owners: serde_json::Value) -> Machine {
        serde_json::from_value(json!({
            "metadata": {"name": "m", "namespace": "ns", "ownerReferences": owners},
            "spec": {"clusterName": "c", "bootstrap": {}, "infrastructureRef": {
                "apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": "m"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn owner(kind: &str, uid: &str, controller: bool) -> serde_json::Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "name": "o", "uid": uid,
               "controller": controller})
    }

    #[test]
    fn a_fresh_controlled_machine_waits_quietly_for_the_references_its_creator_makes() {
        let missing = Step::waiting(reasons::REFERENCE_NOT_FOUND, "waiting for X");
        let found = Step::waiting(reasons::WAITING_FOR_BOOTSTRAP_DATA, "waiting");
        let now = Time(jiff::Timestamp::now());
        let mut fresh = machine(json!([owner("MachineSet", "set-uid", true)]));
        fresh.metadata.creation_timestamp = Some(now.clone());
        assert!(awaiting_references_of_its_creator(&fresh, &missing, &found));
        assert!(awaiting_references_of_its_creator(&fresh, &found, &missing));
        assert!(
            !awaiting_references_of_its_creator(&fresh, &found, &found),
            "nothing missing: its status is written"
        );
        let mut stand_alone = machine(json!([]));
        stand_alone.metadata.creation_timestamp = Some(now);
        assert!(
            !awaiting_references_of_its_creator(&stand_alone, &missing, &found),
            "no controller creates a stand-alone machine's references: say they are missing"
        );
        let mut old = fresh.clone();
        old.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::now() - jiff::SignedDuration::from_secs(30),
        ));
        assert!(
            !awaiting_references_of_its_creator(&old, &missing, &found),
            "past the grace, a missing reference is reported"
        );
        let mut reported = fresh;
        let status: capi_core::api::MachineStatus = serde_json::from_value(json!({"conditions": [
            {"type": "Ready", "status": "False", "reason": "R", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
        .unwrap_or_else(|e| panic!("{e}"));
        reported.status = Some(status);
        assert!(
            !awaiting_references_of_its_creator(&reported, &missing, &found),
            "a machine with a status keeps it current"
        );
    }

    #[test]
    fn only_a_stand_alone_machine_is_adopted_by_its_cluster() {
        assert!(needs_cluster_owner(&machine(json!([])), "cluster-uid"));
        assert!(!needs_cluster_owner(
            &machine(json!([owner("KubeadmControlPlane", "kcp-uid", true)])),
            "cluster-uid"
        ));
        assert!(!needs_cluster_owner(
            &machine(json!([owner("Cluster", "cluster-uid", false)])),
            "cluster-uid"
        ));
        assert!(needs_cluster_owner(
            &machine(json!([owner("MachineSet", "set-uid", false)])),
            "cluster-uid"
        ));
    }
}
