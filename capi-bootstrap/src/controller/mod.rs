//! The kubeadm bootstrap provider's controller: renders each `KubeadmConfig` owned by a `Machine`
//! into the bootstrap-data Secret of the contract, once — or, for a `MachinePool`'s config, with
//! a join token rotated as it ages (see `bootstrap_data.rs`).
//!
//! Watches: KubeadmConfigs; the Machine or MachinePool whose `bootstrap.configRef` names it
//! (created, deleted, joined); their Cluster (infrastructure ready, control plane initialised) reaches all its
//! configs.
//!
//! Phases (`reconcile_once`, in `phases.rs`): a copy older than this controller's own last status
//! write waits for the newer one; the owner `Machine` and its `Cluster` found; pause honoured; a
//! deleted config releases the init lock; data its status records kept; a deleting machine's or a
//! conflicted config's earlier data looked for once; no data for a machine being deleted; otherwise
//! rendered (`bootstrap_data.rs`): cluster infrastructure and endpoint awaited, the cluster PKI and
//! `<cluster>-kubeconfig` Secrets ensured (generated once), the role chosen — the first
//! control-plane machine to take the init lock runs `kubeadm init`, others wait for the control
//! plane and join with a bootstrap token made in the workload cluster (`join_token.rs`) — the
//! Secret created (owned by the config, labelled with the cluster); status written once, at the end
//! (`status.rs`).
//!
//! Guarantees: data is never re-rendered once its Secret exists (a machine may have booted from
//! it), and another config's Secret of the same name is never taken; a join token is made only
//! once the data is rendered and kept valid until its machine joins; the init lock never
//! outlives a machine that did not initialise; one status write per pass, none when the API
//! server fails.
//!
//! Register it with a [`Manager`] through [`KubeadmBootstrap`] (leave it
//! out when upstream's kubeadm bootstrap provider runs beside the manager):
//!
//! ```no_run
//! # fn demo(manager: &mut capi_runtime::Manager) {
//! use capi_bootstrap::controller::{BootstrapSettings, KubeadmBootstrap};
//!
//! manager.add(KubeadmBootstrap::new(BootstrapSettings::default()));
//! # }
//! ```

mod bootstrap_data;
mod join_token;
mod phases;
mod reconcile;
mod status;

use std::sync::Arc;
use std::time::Duration;

use crate::api::KubeadmConfig;
use crate::render::PlanFile;
use capi_core::api::{Cluster, Machine, MachinePool};
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use futures::Future;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use capi_runtime::cache::packed::Packed;
use capi_runtime::manager::{Controllers, Manager};
use capi_runtime::rbac::{READ, rule};
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};
use k8s_openapi::api::rbac::v1::PolicyRule;

/// Files a provider adds to every machine's bootstrap data — the OpenStack provider's `cloud.conf`
/// and CA bundle, for example — without forking the renderer.
#[async_trait::async_trait]
pub trait BootstrapFiles: Send + Sync {
    /// The files for `machine` of `cluster`. An error is reported on the config's `Ready`
    /// condition and retried; it must not contain secrets.
    async fn files(
        &self,
        client: &kube::Client,
        cluster: &Cluster,
        machine: &Machine,
    ) -> Result<Vec<PlanFile>, String>;
}

/// Settings of the bootstrap reconciler.
#[derive(Clone)]
pub struct BootstrapSettings {
    /// How long bootstrap tokens for joining machines are valid.
    pub token_ttl: Duration,
    /// How often a token is extended while its machine has not joined (its Machine has no
    /// `status.nodeRef` yet). Must be well below `token_ttl`.
    pub token_refresh: Duration,
    /// Provider hooks adding files, in order.
    pub extra_files: Vec<Arc<dyn BootstrapFiles>>,
}

impl std::fmt::Debug for BootstrapSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapSettings")
            .field("token_ttl", &self.token_ttl)
            .field("token_refresh", &self.token_refresh)
            .field("extra_files", &self.extra_files.len())
            .finish()
    }
}

impl Default for BootstrapSettings {
    fn default() -> Self {
        Self {
            token_ttl: Duration::from_secs(15 * 60),
            token_refresh: Duration::from_secs(5 * 60),
            extra_files: Vec::new(),
        }
    }
}

/// The reconciler of `KubeadmConfig`s.
pub type KubeadmConfigReconciler = Reconciler<KubeadmConfig, BootstrapSettings>;

/// The kubeadm bootstrap provider as a controller family for
/// [`Manager::add`](capi_runtime::Manager::add).
#[derive(Debug, Default)]
pub struct KubeadmBootstrap {
    settings: BootstrapSettings,
}

impl KubeadmBootstrap {
    /// The bootstrap controller with `settings`.
    pub fn new(settings: BootstrapSettings) -> Self {
        Self { settings }
    }
}

impl Controllers for KubeadmBootstrap {
    fn register(self, manager: &mut Manager) {
        let reconciler: KubeadmConfigReconciler = manager.reconciler(Arc::new(self.settings));
        manager.add_controller(move |shutdown| run(reconciler, shutdown.wait()));
    }
}

/// Runs `reconciler` until `shutdown` completes; in-flight reconciles finish first.
pub async fn run(
    reconciler: KubeadmConfigReconciler,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    // Packed: one cached config per machine, decoded only when reconciled.
    let (trigger, reader) = reconciler.packed_trigger();
    reconciler.offer_packed_as_referenced();
    let (machines, machine_stream) = reconciler.cached::<Machine>();
    let (pools, pool_stream) = reconciler.cached::<MachinePool>();
    let (clusters, cluster_stream) = reconciler.cached::<Cluster>();
    let token_refresh = reconciler.state().token_refresh;
    let token_ttl = reconciler.state().token_ttl;
    let owners = Arc::new(reconcile::Owners::new(
        machines,
        pools,
        clusters,
        token_refresh,
        token_ttl,
    ));
    let by_cluster = reader.clone();
    let concurrency = reconciler.concurrency();
    let context = reconciler.into_context(|settings, _, _| settings);
    let results = Controller::for_stream(trigger, reader)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        // A Machine or MachinePool changes (created, deleted): reconcile its config.
        .watches_stream(machine_stream, |machine| {
            config_of(&machine.spec.bootstrap, machine.namespace())
        })
        .watches_stream(pool_stream, |pool| {
            config_of(&pool.spec.template.spec.bootstrap, pool.namespace())
        })
        // A Cluster changes (infrastructure ready, control plane initialised): reconcile its configs.
        .watches_stream(
            capi_runtime::cache::predicate::changed(
                cluster_stream,
                capi_runtime::cache::predicate::cluster_as_its_objects_see_it,
            ),
            move |cluster| {
                let name = cluster.name_any();
                let namespace = cluster.namespace();
                by_cluster
                    .state()
                    .into_iter()
                    .filter(|c| {
                        c.namespace() == namespace && c.cluster_name() == Some(name.as_str())
                    })
                    .map(|c| ObjectRef::from_obj(c.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(
            move |config, context| reconcile_config(config, context, Arc::clone(&owners)),
            back_off::<Packed<KubeadmConfig>, BootstrapSettings>,
            context,
        );
    drain(results).await;
}

/// The config `bootstrap` names, when it is a `KubeadmConfig`.
fn config_of(
    bootstrap: &capi_core::api::Bootstrap,
    namespace: Option<String>,
) -> Option<ObjectRef<Packed<KubeadmConfig>>> {
    let reference = bootstrap.config_ref.as_ref()?;
    let ours =
        reference.kind == "KubeadmConfig" && reference.api_group == "bootstrap.cluster.x-k8s.io";
    ours.then(|| {
        ObjectRef::<Packed<KubeadmConfig>>::new(&reference.name)
            .within(&namespace.unwrap_or_default())
    })
}

/// The permissions this controller needs in the management cluster — exactly the verbs its code
/// uses — for a least-privilege ClusterRole (see `capi_runtime::rbac`).
pub fn rbac() -> Vec<PolicyRule> {
    use kube::Resource;
    let bootstrap = KubeadmConfig::group(&());
    const CORE: &str = capi_core::api::GROUP;
    vec![
        rule(
            &bootstrap,
            &["kubeadmconfigs"],
            &["get", "list", "watch", "patch"],
        ),
        rule(&bootstrap, &["kubeadmconfigs/status"], &["patch"]),
        rule(CORE, &["machines", "machinepools", "clusters"], READ),
        rule("", &["secrets"], &["get", "create", "patch"]),
        rule("", &["configmaps"], &["get", "create", "delete"]),
    ]
}

#[tracing::instrument(skip_all, fields(namespace = %config.namespace().unwrap_or_default(), name = %config.name_any()))]
async fn reconcile_config(
    config: Arc<Packed<KubeadmConfig>>,
    context: Arc<Context<BootstrapSettings>>,
    owners: Arc<reconcile::Owners>,
) -> Result<Action, ReconcileError> {
    let once = async {
        let config = Arc::new(config.unpack()?);
        reconcile::reconcile_once(&config, &context, &owners).await
    };
    context.reconcile(config.as_ref(), once).await
}
