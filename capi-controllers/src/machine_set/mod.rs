//! The MachineSet controller: keeps `spec.replicas` machines made from the template.
//!
//! Watches: MachineSets; their machines (an orphan reaches the sets whose selector matches it);
//! their Cluster.
//!
//! Phases (`reconcile_once`, in `phases`): a deleted set deletes its machines and drops its
//! finalizer once the API server has none left; otherwise the finalizer first, then the selector
//! checked against the template, the cluster found, pause honoured, `spec.replicas` defaulted,
//! the machines read and orphans adopted, the cache awaited until it shows this controller's own
//! previous creates and deletes (`Expectations`), machines a health check marked deleted,
//! machines missing their bootstrap config or infrastructure machine completed (a crash between
//! creating the Machine and cloning its templates), the missing machines created or the surplus
//! deleted by `deletion_priority`; status written once, at the end (`status`).

mod creation;
pub mod deletion_priority;
mod phases;
mod status;

use std::ops::ControlFlow::{Break, Continue};
use std::sync::{Arc, OnceLock};

use capi_core::api::{Cluster, Machine, MachineSet, MachineSetStatus};
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};

use crate::references::{ReferenceWatches, References};
use crate::{CoreSettings, cache, cluster_cache, of_cluster, ownership, selector};
use capi_runtime::cache::Expectations;
use capi_runtime::cache::informer::Informer;
use capi_runtime::pace::StatusPacer;
use capi_runtime::plan::{EventNote, Next};
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// The finalizer that makes a deleted MachineSet delete its machines first.
pub const MACHINE_SET_FINALIZER: &str = "machineset.cluster.x-k8s.io";

/// What the MachineSet controller works with besides the client.
pub(crate) struct MachineSetController {
    references: References,
    expectations: Expectations,
    machines: OnceLock<Informer<Machine>>,
    clusters: OnceLock<Store<Cluster>>,
    /// Spaces this summary's status writes (see [`capi_runtime::pace`]).
    pacer: StatusPacer,
    settings: CoreSettings,
}

impl MachineSetController {
    pub(crate) fn new(
        watches: &Arc<ReferenceWatches>,
        client: kube::Client,
        namespace: Option<String>,
        settings: CoreSettings,
    ) -> Self {
        // Changes of referenced objects do not concern sets: the receiver is dropped.
        let (references, _) = References::sharing(watches, client, namespace);
        Self {
            references,
            expectations: Expectations::default(),
            machines: OnceLock::new(),
            clusters: OnceLock::new(),
            pacer: StatusPacer::default(),
            settings,
        }
    }
}

/// Runs until `shutdown` completes; in-flight reconciles finish first.
pub(crate) async fn run(
    reconciler: Reconciler<MachineSet, MachineSetController>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, sets) = reconciler.trigger();
    let (machines, machine_changes) = cache(reconciler.informer::<Machine>());
    let (clusters, cluster_changes) = cluster_cache(reconciler.informer::<Cluster>());
    let _ = reconciler.state().machines.set(machines);
    let _ = reconciler.state().clusters.set(clusters);
    let concurrency = reconciler.concurrency();
    let for_machines = sets.clone();
    let for_clusters = sets.clone();
    let context = reconciler.into_context(|deps, _, _| deps);
    let results = Controller::for_stream(trigger, sets)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        // A machine changed: its set (or, for an orphan, the sets that would adopt it).
        .watches_stream(machine_changes, move |machine| {
            let namespace = machine.namespace();
            if let Some(owner) = ownership::controller_of(&machine.metadata) {
                return if owner.kind == "MachineSet" {
                    vec![ObjectRef::new(&owner.name).within(&namespace.unwrap_or_default())]
                } else {
                    Vec::new()
                };
            }
            for_machines
                .state()
                .into_iter()
                .filter(|s| {
                    s.namespace() == namespace
                        && s.spec.cluster_name == machine.spec.cluster_name
                        && selector::matches(&s.spec.selector, machine.metadata.labels.as_ref())
                })
                .map(|s| ObjectRef::from_obj(s.as_ref()))
                .collect()
        })
        .watches_stream(
            cluster_changes,
            of_cluster(for_clusters, |s: &MachineSet| &s.spec.cluster_name),
        )
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_set,
            back_off::<MachineSet, MachineSetController>,
            context,
        );
    drain(results).await;
}

#[tracing::instrument(skip_all, fields(namespace = %set.namespace().unwrap_or_default(), name = %set.name_any()))]
async fn reconcile_set(
    set: Arc<MachineSet>,
    context: Arc<Context<MachineSetController>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(set.as_ref(), reconcile_once(&set, &context))
        .await
}

/// What one pass over a set works with: what it read, and the status it computes, written once.
struct Scope<'a> {
    set: &'a MachineSet,
    context: &'a Context<MachineSetController>,
    namespace: String,
    uid: String,
    sets: Api<MachineSet>,
    machines: Api<Machine>,
    /// The status being computed from the one last written.
    status: MachineSetStatus,
    /// The set's machines and the orphans it adopts, from the cache (none until read).
    candidates: Vec<Arc<Machine>>,
    /// The candidates neither being deleted nor deleted by this pass.
    active: Vec<Arc<Machine>>,
    /// The machines on their way out, which still hold their slot.
    leaving: usize,
    /// The events this pass publishes.
    events: Vec<EventNote>,
}

impl<'a> Scope<'a> {
    fn new(set: &'a MachineSet, context: &'a Context<MachineSetController>) -> Self {
        let namespace = set.namespace().unwrap_or_default();
        Self {
            set,
            context,
            sets: Api::namespaced(context.client.clone(), &namespace),
            machines: Api::namespaced(context.client.clone(), &namespace),
            namespace,
            uid: set.uid().unwrap_or_default(),
            status: set.status.clone().unwrap_or_default(),
            candidates: Vec::new(),
            active: Vec::new(),
            leaving: 0,
            events: Vec::new(),
        }
    }

    fn deps(&self) -> &'a MachineSetController {
        &self.context.state
    }
}

/// One pass over a set: each phase either goes on or ends the pass with what comes next.
async fn reconcile_once(
    set: &MachineSet,
    context: &Context<MachineSetController>,
) -> Result<Next, ReconcileError> {
    let mut scope = Scope::new(set, context);
    if set.metadata.deletion_timestamp.is_some() {
        return phases::reconcile_delete(&scope).await;
    }
    if let Break(next) = phases::ensure_finalizer(&scope).await? {
        return Ok(next);
    }
    if let Break(next) = phases::check_selector(&mut scope).await? {
        return Ok(next);
    }
    let cluster = match phases::find_cluster(&scope).await? {
        Continue(cluster) => cluster,
        Break(next) => return Ok(next),
    };
    if let Break(next) = phases::honour_pause(&mut scope, &cluster).await? {
        return Ok(next);
    }
    if let Break(next) = phases::default_replicas(&mut scope).await? {
        return Ok(next);
    }
    if let Break(next) = phases::observe_machines(&mut scope) {
        return Ok(next);
    }
    if let Break(next) = phases::adopt_orphans(&scope).await? {
        return Ok(next);
    }
    if let Break(next) = phases::await_expectations(&mut scope) {
        return Ok(next);
    }
    phases::remediate(&mut scope).await?;
    phases::complete_machines(&scope).await?;
    let next = phases::scale(&mut scope, &cluster).await?;
    status::write(&mut scope, next).await
}
