//! The MachineDeployment controller: one MachineSet per distinct template (named after a stable
//! hash of it), rolled out by RollingUpdate or OnDelete, with revision annotations.
//!
//! Watches: MachineDeployments; the MachineSets they control; their Cluster.
//!
//! Phases (`reconcile_once`, in `phases`): a deleted deployment deletes its sets and drops
//! its finalizer once the API server has none left; otherwise the finalizer first, then the
//! selector checked against the template, the cluster found, the sets read from a synced cache,
//! pause recorded, `spec.replicas` defaulted (not while the cluster is paused), the rollout's
//! fenceposts resolved, and, unless paused, the rollout stepped; status written once, at the end
//! (`status`).
//!
//! RollingUpdate scales the new set up and the old ones down by
//! [`rolling_update_step`](rollout::rolling_update_step) with upstream's rounding of
//! `maxSurge` (up) and `maxUnavailable` (down), so that at no time fewer than
//! `replicas − maxUnavailable` machines are available and no more than `replicas + maxSurge` exist.
//! OnDelete never deletes a machine itself: old sets shrink only as the user deletes their machines,
//! and the new set grows by as much. A paused deployment only reports status. Old sets at zero
//! machines are deleted.

mod phases;
pub mod rollout;
mod status;

use std::ops::ControlFlow::{Break, Continue};
use std::sync::{Arc, OnceLock};

use capi_core::api::{
    Cluster, MachineDeployment, MachineDeploymentStatus, MachineSet, MachineTemplateSpec,
};
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};

use crate::{CoreSettings, cache, cluster_cache, of_cluster, ownership};
use capi_runtime::cache::informer::Informer;
use capi_runtime::pace::StatusPacer;
use capi_runtime::plan::{EventNote, Next};
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// The finalizer that makes a deleted MachineDeployment delete its MachineSets first.
pub const MACHINE_DEPLOYMENT_FINALIZER: &str = "machinedeployment.cluster.x-k8s.io";
/// The label carrying the template hash on a deployment's MachineSets and their machines.
pub const TEMPLATE_HASH_LABEL: &str = "machine-template-hash";

/// What the MachineDeployment controller works with besides the client.
pub(crate) struct DeploymentController {
    sets: OnceLock<Informer<MachineSet>>,
    clusters: OnceLock<Store<Cluster>>,
    /// Spaces this summary's status writes (see [`capi_runtime::pace`]).
    pacer: StatusPacer,
    settings: CoreSettings,
}

impl DeploymentController {
    pub(crate) fn new(settings: CoreSettings) -> Self {
        Self {
            sets: OnceLock::new(),
            clusters: OnceLock::new(),
            pacer: StatusPacer::default(),
            settings,
        }
    }
}

/// Runs until `shutdown` completes; in-flight reconciles finish first.
pub(crate) async fn run(
    reconciler: Reconciler<MachineDeployment, DeploymentController>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, deployments) = reconciler.trigger();
    let (sets, set_changes) = cache(reconciler.informer::<MachineSet>());
    let (clusters, cluster_changes) = cluster_cache(reconciler.informer::<Cluster>());
    let _ = reconciler.state().sets.set(sets);
    let _ = reconciler.state().clusters.set(clusters);
    let concurrency = reconciler.concurrency();
    let by_cluster = deployments.clone();
    let context = reconciler.into_context(|deps, _, _| deps);
    let results = Controller::for_stream(trigger, deployments)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .watches_stream(set_changes, |set| {
            let namespace = set.namespace().unwrap_or_default();
            ownership::controller_of(&set.metadata)
                .filter(|o| o.kind == "MachineDeployment")
                .map(|o| ObjectRef::new(&o.name).within(&namespace))
        })
        .watches_stream(
            cluster_changes,
            of_cluster(by_cluster, |d: &MachineDeployment| &d.spec.cluster_name),
        )
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_deployment,
            back_off::<MachineDeployment, DeploymentController>,
            context,
        );
    drain(results).await;
}

#[tracing::instrument(skip_all, fields(namespace = %deployment.namespace().unwrap_or_default(), name = %deployment.name_any()))]
async fn reconcile_deployment(
    deployment: Arc<MachineDeployment>,
    context: Arc<Context<DeploymentController>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(deployment.as_ref(), reconcile_once(&deployment, &context))
        .await
}

/// A stable hash of a machine template (FNV-1a over its JSON form): equal templates, equal hash,
/// on every platform and release.
pub fn template_hash(template: &MachineTemplateSpec) -> String {
    let text = serde_json::to_string(template).unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:08x}", hash as u32 ^ (hash >> 32) as u32)
}

/// Whether a deployment rolls out, and if not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Paused {
    /// Not paused: the rollout proceeds.
    No,
    /// `spec.paused`: status only.
    Rollout,
    /// The cluster (or the deployment's paused annotation): status only, and no defaulting.
    Cluster,
}

/// What one pass over a deployment works with: what it read, and the status it computes, written
/// once.
struct Scope<'a> {
    deployment: &'a MachineDeployment,
    context: &'a Context<DeploymentController>,
    namespace: String,
    uid: String,
    name: String,
    api: Api<MachineDeployment>,
    sets_api: Api<MachineSet>,
    /// The status being computed from the one last written.
    status: MachineDeploymentStatus,
    /// The hash of the deployment's template: the new set's label.
    hash: String,
    /// The deployment's sets not being deleted, oldest revision first (none until read).
    sets: Vec<Arc<MachineSet>>,
    /// The set of the current template, if it exists.
    new_set: Option<Arc<MachineSet>>,
    /// The sets of other templates, oldest revision first.
    old_sets: Vec<Arc<MachineSet>>,
    paused: Paused,
    /// The events this pass publishes.
    events: Vec<EventNote>,
}

impl<'a> Scope<'a> {
    fn new(deployment: &'a MachineDeployment, context: &'a Context<DeploymentController>) -> Self {
        let namespace = deployment.namespace().unwrap_or_default();
        Self {
            deployment,
            context,
            api: Api::namespaced(context.client.clone(), &namespace),
            sets_api: Api::namespaced(context.client.clone(), &namespace),
            namespace,
            uid: deployment.uid().unwrap_or_default(),
            name: deployment.name_any(),
            status: deployment.status.clone().unwrap_or_default(),
            hash: template_hash(&deployment.spec.template),
            sets: Vec::new(),
            new_set: None,
            old_sets: Vec::new(),
            paused: Paused::No,
            events: Vec::new(),
        }
    }

    fn deps(&self) -> &'a DeploymentController {
        &self.context.state
    }
}

/// One pass over a deployment: each phase either goes on or ends the pass with what comes next.
async fn reconcile_once(
    deployment: &MachineDeployment,
    context: &Context<DeploymentController>,
) -> Result<Next, ReconcileError> {
    let mut scope = Scope::new(deployment, context);
    if deployment.metadata.deletion_timestamp.is_some() {
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
    if let Break(next) = phases::observe_sets(&mut scope) {
        return Ok(next);
    }
    phases::record_pause(&mut scope, &cluster);
    if let Break(next) = phases::default_replicas(&mut scope).await? {
        return Ok(next);
    }
    let (surge, unavailable) = match phases::resolve_fenceposts(&mut scope).await? {
        Continue(fenceposts) => fenceposts,
        Break(next) => return Ok(next),
    };
    let next = match scope.paused {
        Paused::No => phases::roll_out(&mut scope, surge, unavailable).await?,
        Paused::Rollout | Paused::Cluster => Next::AwaitChange,
    };
    status::write(&mut scope, unavailable, next).await
}

#[cfg(test)]
mod tests {
    use super::phases::on_delete_step;
    use super::*;
    use capi_core::api::MachineSpec;

    #[test]
    fn template_hash_is_stable_and_tracks_changes() {
        let mut template = MachineTemplateSpec {
            metadata: None,
            spec: MachineSpec {
                cluster_name: "demo".into(),
                version: Some("v1.33.0".into()),
                ..MachineSpec::default()
            },
        };
        let first = template_hash(&template);
        assert_eq!(first, template_hash(&template.clone()));
        assert_eq!(first.len(), 8);
        template.spec.version = Some("v1.33.1".into());
        assert_ne!(first, template_hash(&template));
    }

    #[test]
    fn on_delete_never_grows_old_sets() {
        let mut old = MachineSet::default();
        old.metadata.name = Some("old".into());
        old.spec.replicas = Some(3);
        old.status = Some(capi_core::api::MachineSetStatus {
            replicas: Some(2),
            ..Default::default()
        });
        let mut new = MachineSet::default();
        new.metadata.name = Some("new".into());
        let scales = on_delete_step(3, &new, &[Arc::new(old)]);
        assert_eq!(
            scales[0].replicas, 2,
            "the deleted machine is not recreated"
        );
        assert_eq!(scales[1].replicas, 1, "the new set makes up the difference");
    }
}
