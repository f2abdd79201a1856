//! The KubeadmControlPlane controller: keeps a control plane of `spec.replicas` machines, made
//! from `spec.machineTemplate` and `spec.kubeadmConfigSpec`, with one etcd member per machine.
//!
//! Watches: KubeadmControlPlanes; the machines each controls (created, ready, deleting, gone);
//! the Cluster whose `controlPlaneRef` names it (infrastructure ready, failure domains, paused,
//! deleting).
//!
//! Phases (`reconcile_once`, in `phases.rs`): the owning Cluster found (the Cluster controller
//! makes it the owner) and the machines read; a deleted control plane waits for the cluster's
//! other machines, then deletes its own and drops its finalizer once none is left
//! (`deletion.rs`); otherwise the Cluster awaited, pause honoured, the finalizer added, the
//! cluster's infrastructure and endpoint awaited, the cluster PKI and kubeconfig ensured
//! ([`capi_bootstrap::cluster_pki`]), the machines' configs and infrastructure read (what is
//! outdated), etcd read once initialised, the nodes' components judged onto the machines'
//! conditions, departing machines' members let go at the pre-terminate hook `kcp-cleanup` and
//! members without a machine removed (`membership.rs`), half-made machines completed, marked
//! machines remediated, then the one step [`crate::rollout::next_step`] decides taken — create a
//! machine, hand etcd leadership over and delete one, or wait (`step.rs`); status computed and
//! written once, at the end ([`status`], `report.rs`) — except after creating a machine: that
//! status would not count the machine, whose appearance in the watch brings the next pass.
//!
//! Guarantees: outside deletion, at most one machine is created or deleted per pass (a remediation
//! included); an etcd member is removed only while etcd keeps its quorum without it, a leader
//! handing its leadership to a healthy member of a staying machine first when there is one; a
//! departing machine's pre-terminate hook goes only once its member has left (or etcd has none for
//! it); the control plane's machines are deleted only after the cluster's other machines; at
//! most one status write per pass, the events published after it.
//!
//! ```no_run
//! # fn demo(manager: &mut capi_runtime::Manager, etcd: std::sync::Arc<dyn capi_control_plane::etcd::EtcdAccess>) {
//! use capi_control_plane::controller::{ControlPlaneSettings, KubeadmControlPlanes};
//!
//! manager.add(KubeadmControlPlanes::new(ControlPlaneSettings::new(etcd)));
//! # }
//! ```

mod components;
mod deletion;
mod machines;
mod membership;
mod phases;
mod reconcile;
mod remediate;
mod report;
pub mod status;
mod step;

use std::sync::Arc;
use std::time::Duration;

use capi_bootstrap::api::KubeadmConfig;
use capi_controllers::references::{ReferenceWatches, References};
use capi_core::api::{Cluster, Machine};
use capi_core::labels;
use capi_runtime::cache::lookup::Cached;
use capi_runtime::cache::{Expectations, Informer};
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use capi_runtime::manager::{Controllers, Manager};
use capi_runtime::rbac::{READ, rule};
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use capi_runtime::cache::memo::Memo;

use crate::api::KubeadmControlPlane;
use crate::etcd::EtcdAccess;
use crate::workload::WorkloadClients;

/// The finalizer that makes a deleted control plane delete its machines first.
pub const FINALIZER: &str = "kubeadm.controlplane.cluster.x-k8s.io";
/// The pre-terminate hook on every control-plane machine: its etcd member leaves before its
/// infrastructure goes.
pub const CLEANUP_HOOK: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io/kcp-cleanup";

/// How long a cluster's PKI Secrets and kubeconfig, once found complete, are not read again (a
/// deleted kubeconfig is written again within this long).
const PKI_RECHECK: Duration = Duration::from_secs(60);

/// Settings of the control plane controller.
#[derive(Clone)]
pub struct ControlPlaneSettings {
    /// How the controller reaches each cluster's etcd.
    pub etcd: Arc<dyn EtcdAccess>,
    /// How often a control plane looks again while it waits for something no watch reports (etcd
    /// health, a joining member).
    pub poll: Duration,
}

impl ControlPlaneSettings {
    /// Settings reaching etcd through `etcd`, polling every 5 s while waiting.
    pub fn new(etcd: Arc<dyn EtcdAccess>) -> Self {
        Self {
            etcd,
            poll: Duration::from_secs(5),
        }
    }
}

impl std::fmt::Debug for ControlPlaneSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlaneSettings")
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

/// The KubeadmControlPlane controller as a family for [`Manager::add`].
#[derive(Debug)]
pub struct KubeadmControlPlanes {
    settings: ControlPlaneSettings,
}

impl KubeadmControlPlanes {
    /// The controller with `settings`.
    pub fn new(settings: ControlPlaneSettings) -> Self {
        Self { settings }
    }
}

/// What the controller works with besides the client.
pub(crate) struct ControlPlaneController {
    settings: ControlPlaneSettings,
    references: References,
    workloads: WorkloadClients,
    /// The clusters (UID and endpoint) whose PKI Secrets and kubeconfig were found complete a
    /// moment ago: each pass would otherwise read five Secrets to learn that again.
    pki_complete: Memo<()>,
    /// Clusters, from the controller's own watch (set when it runs).
    clusters: std::sync::OnceLock<Cached<Cluster>>,
    /// Every Machine, from the manager's shared watch (set when it runs): a pass counts its
    /// machines here, once `expectations` says the watch shows its own creates and deletes.
    machines: std::sync::OnceLock<Informer<Machine>>,
    /// Control-plane KubeadmConfigs, from a watch of those alone (set when it runs); a config
    /// not seen yet is read from the API server.
    configs: std::sync::OnceLock<Cached<KubeadmConfig>>,
    /// The machines each control plane (by UID) created or deleted that `machines` has not
    /// shown yet: no machine is created or deleted before the last one shows, so a lagging
    /// watch never brings a second etcd member.
    expectations: Expectations,
}

impl Controllers for KubeadmControlPlanes {
    fn register(self, manager: &mut Manager) {
        let client = manager.client();
        let namespace = manager.reconciler_options().namespace.clone();
        // Changes of infrastructure machines reach the control plane through their Machines.
        let watches = ReferenceWatches::of(&manager.informers());
        let (references, _) = References::sharing(&watches, client, namespace);
        let reconciler: Reconciler<KubeadmControlPlane, ControlPlaneController> = manager
            .reconciler(Arc::new(ControlPlaneController {
                settings: self.settings,
                references,
                workloads: WorkloadClients::default(),
                pki_complete: Memo::new(PKI_RECHECK),
                clusters: std::sync::OnceLock::new(),
                machines: std::sync::OnceLock::new(),
                configs: std::sync::OnceLock::new(),
                expectations: Expectations::default(),
            }));
        manager.add_controller(move |shutdown| run(reconciler, shutdown.wait()));
    }
}

async fn run(
    reconciler: Reconciler<KubeadmControlPlane, ControlPlaneController>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, reader) = reconciler.trigger();
    reconciler.offer_as_referenced();
    // The manager's shared watch of Machines (the core controllers' too).
    let machines = reconciler.informer::<Machine>();
    let _ = reconciler.state().machines.set(machines.clone());
    let machine_changes = machines.changes();
    let configs = reconciler.selected_informer::<KubeadmConfig>(labels::MACHINE_CONTROL_PLANE);
    let _ = reconciler
        .state()
        .configs
        .set(Cached::of(configs, reconciler.client().clone()));
    let (clusters, cluster_stream) = reconciler.cached::<Cluster>();
    let _ = reconciler.state().clusters.set(clusters);
    let concurrency = reconciler.concurrency();
    let context = reconciler.into_context(|state, _, _| state);
    let results = Controller::for_stream(trigger, reader)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        // A machine of a control plane changed (created, ready, deleting, gone).
        .watches_stream(machine_changes, |machine| {
            let owner = machine
                .owner_references()
                .iter()
                .find(|r| r.controller == Some(true) && r.kind == "KubeadmControlPlane")?;
            Some(
                ObjectRef::<KubeadmControlPlane>::new(&owner.name)
                    .within(&machine.namespace().unwrap_or_default()),
            )
        })
        // A cluster changed (infrastructure ready, failure domains, paused, deleting).
        .watches_stream(
            capi_runtime::cache::predicate::changed(
                cluster_stream,
                capi_runtime::cache::predicate::cluster_as_its_objects_see_it,
            ),
            |cluster| {
                let reference = cluster.spec.control_plane_ref.as_ref()?;
                (reference.kind == "KubeadmControlPlane").then(|| {
                    ObjectRef::<KubeadmControlPlane>::new(&reference.name)
                        .within(&cluster.namespace().unwrap_or_default())
                })
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_control_plane,
            back_off::<KubeadmControlPlane, ControlPlaneController>,
            context,
        );
    drain(results).await;
}

#[tracing::instrument(skip_all, fields(namespace = %kcp.namespace().unwrap_or_default(), name = %kcp.name_any()))]
async fn reconcile_control_plane(
    kcp: Arc<KubeadmControlPlane>,
    context: Arc<Context<ControlPlaneController>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(kcp.as_ref(), reconcile::reconcile_once(&kcp, &context))
        .await
}

/// The permissions this controller needs in the management cluster, for a provider whose
/// infrastructure machines (and templates) are `infra_plurals` in `infra_group` — exactly the
/// verbs its code uses (see `capi_runtime::rbac`).
pub fn rbac(infra_group: &str, infra_plurals: &[&str]) -> Vec<PolicyRule> {
    use kube::Resource;
    let control_plane = KubeadmControlPlane::group(&());
    let bootstrap = capi_bootstrap::api::KubeadmConfig::group(&());
    const CORE: &str = capi_core::api::GROUP;
    vec![
        rule(
            &control_plane,
            &["kubeadmcontrolplanes"],
            &["get", "list", "watch", "patch"],
        ),
        rule(&control_plane, &["kubeadmcontrolplanes/status"], &["patch"]),
        rule(CORE, &["clusters"], READ),
        rule(
            CORE,
            &["machines"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(
            &bootstrap,
            &["kubeadmconfigs"],
            &["get", "list", "watch", "create"],
        ),
        rule(
            infra_group,
            infra_plurals,
            &["get", "list", "watch", "create"],
        ),
        // By name only: a PKI this controller started is deleted again when part of another
        // exists (`cluster_pki::ensure_new`).
        rule("", &["secrets"], &["get", "create", "delete"]),
        // Whether a referenced infrastructure template is a provider's (its CRD's contract label).
        rule(
            "apiextensions.k8s.io",
            &["customresourcedefinitions"],
            &["get"],
        ),
    ]
}
