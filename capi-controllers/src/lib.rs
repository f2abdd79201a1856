//! The core Cluster API controllers: with them the workspace runs a complete management plane and
//! needs no Go controllers ("standalone mode"). Register them with a
//! [`Manager`] through [`CoreControllers`]; leave them out when upstream
//! Cluster API core runs beside the manager.
//!
//! ```no_run
//! # async fn demo(manager: &mut capi_runtime::Manager) {
//! use capi_controllers::{CoreControllers, CoreSettings};
//!
//! manager.add(CoreControllers::new(CoreSettings::default()));
//! # }
//! ```
//!
//! Each controller is a module named after its kind, with its pure decisions beside it:
//!
//! - [`cluster`]: infrastructure and control plane references, phases, the control
//!   plane endpoint and failure domains copied from the infrastructure cluster, deletion in order
//!   (deployments, sets and machines first, then the control plane and infrastructure objects,
//!   then the Secrets the cluster owns);
//! - [`machine`]: owner references on the bootstrap config and the infrastructure machine, bootstrap
//!   data and provider ID copied, the workload `Node` found by provider ID, phases and conditions;
//!   deletion cordons and drains the node (eviction API, PodDisruptionBudgets respected, bounded by
//!   `spec.deletion.nodeDrainTimeoutSeconds`), deletes the infrastructure and bootstrap objects, then
//!   the node;
//! - [`machine_set`]: machines created from the template (the Machine first, then its bootstrap config
//!   and infrastructure machine, named after it and owned by it, so that a crash in between leaks
//!   nothing and the next pass completes it), surplus deleted by priority, orphans adopted,
//!   machines marked by a health check replaced (a machine being deleted keeps its slot until it
//!   is gone, as upstream counts it); expectations of in-flight creates and deletes keep a stale
//!   cache from causing duplicates;
//! - [`machine_deployment`]: RollingUpdate (upstream's rounding of `maxSurge`/`maxUnavailable`) and
//!   OnDelete, revision annotations, one MachineSet per template, `paused`;
//! - [`machine_pool`]: a pool's bootstrap config and infrastructure pool owned, the data
//!   secret's name and the instances' provider IDs copied, a `Machine` per machine the
//!   infrastructure makes for an instance, the workload nodes matched by provider ID (those of
//!   instances that left deleted), upstream's phases and conditions; deletion takes the
//!   infrastructure first, then what it left;
//! - [`machine_health_check`]: node startup timeout, unhealthy node and machine conditions with
//!   timeouts, `unhealthyLessThanOrEqualTo`/`unhealthyInRange` short-circuits, remediation by
//!   marking machines (`OwnerRemediated=False`) for their MachineSet to replace.
//!
//! Their decisions are pure functions with their own tests: [`machine_deployment::rollout`]
//! (fenceposts and rolling-update steps, simulated in golden files under `tests/golden/`),
//! [`machine_set::deletion_priority`] (which machines go first),
//! [`machine_health_check::verdict`] (health verdicts and remediation short-circuits). What the
//! controllers share: objects referenced by `{apiGroup, kind, name}` ([`ReferenceError`]), the
//! workload clusters reached through their kubeconfig Secrets ([`WorkloadError`]), label
//! [`selector`]s, and the permissions they need ([`rbac`]). They run on `capi-actuator`'s
//! machinery: `Reconciler`, `Context`, plans, guarded writes, backoff and metrics.
//!
//! Where upstream has known flaws this does better: nothing latches in a failed state (a
//! `Failed` phase is never written; conditions say what is wrong and clear when it is fixed), a
//! machine set never creates from a cache that has not seen its own previous creates, and
//! deletion does not depend on the garbage collector (it deletes what the cluster owns itself, so
//! that a management cluster without one still ends clean).

pub mod cluster;
pub mod machine;
pub mod machine_deployment;
pub mod machine_health_check;
pub mod machine_pool;
pub mod machine_set;
pub mod naming;

mod cache;
mod ownership;
mod percentage;
pub mod references;
mod replicas;
pub mod selector;
mod workload;

use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{
    Cluster, Machine, MachineDeployment, MachineHealthCheck, MachinePool, MachineSet,
};
use capi_runtime::manager::{Controllers, Manager};
use capi_runtime::rbac::rule;
use k8s_openapi::api::rbac::v1::PolicyRule;

pub use machine_deployment::{MACHINE_DEPLOYMENT_FINALIZER, TEMPLATE_HASH_LABEL, template_hash};
pub use machine_pool::MACHINE_POOL_FINALIZER;
pub use machine_set::MACHINE_SET_FINALIZER;
pub use references::ReferenceError;
pub use workload::{SECRET_RECHECK, WorkloadError, client_from_secret};

pub(crate) use cache::{
    cache, cluster_cache, find_cluster, of_cluster, receiver_stream, synced, take,
};
use cluster::ClusterController;
use machine::MachineController;
use machine_deployment::DeploymentController;
use machine_health_check::HealthCheckController;
use machine_pool::MachinePoolController;
use machine_set::MachineSetController;
use references::ReferenceWatches;
use workload::WorkloadClusters;

/// Five random characters for the name of an object made from a template, from the alphabet
/// Kubernetes' name generator uses (no vowels, no look-alike digits): `my-set-4xkq9`.
pub fn random_suffix() -> String {
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    std::iter::repeat_with(|| char::from(CHARS[fastrand::usize(..CHARS.len())]))
        .take(5)
        .collect()
}

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

/// The six core controllers as one family for [`Manager::add`]: they share the workload
/// clusters' caches (one connection and one `Node` watch per workload cluster).
#[derive(Clone, Debug, Default)]
pub struct CoreControllers {
    settings: CoreSettings,
}

impl CoreControllers {
    /// The core controllers with `settings`.
    pub fn new(settings: CoreSettings) -> Self {
        Self { settings }
    }
}

impl Controllers for CoreControllers {
    fn register(self, manager: &mut Manager) {
        let settings = self.settings;
        let client = manager.client();
        let namespace = manager.reconciler_options().namespace.clone();
        let (workloads, node_changes) = WorkloadClusters::new(client.clone());
        let workloads = Arc::new(workloads);
        // One cache per referenced kind for the whole manager (the control plane's too).
        let watches = ReferenceWatches::of(&manager.informers());
        let cluster = manager.reconciler::<Cluster, _>(Arc::new(ClusterController::new(
            &watches,
            client.clone(),
            namespace.clone(),
            Arc::clone(&workloads),
            settings.clone(),
        )));
        let machine = manager.reconciler::<Machine, _>(Arc::new(MachineController::new(
            &watches,
            client.clone(),
            namespace.clone(),
            Arc::clone(&workloads),
            node_changes,
            settings.clone(),
        )));
        let pool = manager.reconciler::<MachinePool, _>(Arc::new(MachinePoolController::new(
            &watches,
            client.clone(),
            namespace.clone(),
            Arc::clone(&workloads),
            settings.clone(),
        )));
        let set = manager.reconciler::<MachineSet, _>(Arc::new(MachineSetController::new(
            &watches,
            client,
            namespace,
            settings.clone(),
        )));
        let deployment = manager.reconciler::<MachineDeployment, _>(Arc::new(
            DeploymentController::new(settings.clone()),
        ));
        let health = manager.reconciler::<MachineHealthCheck, _>(Arc::new(
            HealthCheckController::new(workloads, settings),
        ));
        manager
            .add_controller(move |shutdown| cluster::run(cluster, shutdown.wait()))
            .add_controller(move |shutdown| machine::run(machine, shutdown.wait()))
            .add_controller(move |shutdown| machine_set::run(set, shutdown.wait()))
            .add_controller(move |shutdown| machine_pool::run(pool, shutdown.wait()))
            .add_controller(move |shutdown| machine_deployment::run(deployment, shutdown.wait()))
            .add_controller(move |shutdown| machine_health_check::run(health, shutdown.wait()));
    }
}

/// The permissions the core controllers need in the management cluster — exactly the verbs their
/// code uses — for a provider whose referenced kinds (infrastructure machines, clusters and their
/// templates) are `infra_plurals` in `infra_group`; for a least-privilege ClusterRole (see
/// `capi_runtime::rbac`).
pub fn rbac(infra_group: &str, infra_plurals: &[&str]) -> Vec<PolicyRule> {
    const BOOTSTRAP: &str = "bootstrap.cluster.x-k8s.io";
    const CORE: &str = capi_core::api::GROUP;
    vec![
        rule(CORE, &["clusters"], &["get", "list", "watch", "patch"]),
        rule(
            CORE,
            &["machines", "machinesets"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(
            CORE,
            &["machinedeployments"],
            &["get", "list", "watch", "patch", "delete"],
        ),
        rule(
            CORE,
            &["machinehealthchecks"],
            &["get", "list", "watch", "delete"],
        ),
        rule(
            CORE,
            &["machinepools"],
            &["get", "list", "watch", "patch", "delete"],
        ),
        rule(
            CORE,
            &[
                "clusters/status",
                "machines/status",
                "machinesets/status",
                "machinedeployments/status",
                "machinehealthchecks/status",
                "machinepools/status",
            ],
            &["patch"],
        ),
        // Referenced objects: read, owned (patch), cloned from templates (create), deleted.
        rule(
            BOOTSTRAP,
            &["kubeadmconfigs", "kubeadmconfigtemplates"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(
            infra_group,
            infra_plurals,
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        // A Cluster's control plane (`controlPlaneRef`): read its status, own it, delete it with
        // the Cluster. The KubeadmControlPlane only: to run these controllers with another
        // control-plane provider, grant its kind these verbs in a ClusterRole bound to the
        // manager — never a wildcard over the group.
        rule(
            "controlplane.cluster.x-k8s.io",
            &["kubeadmcontrolplanes"],
            &["get", "list", "watch", "patch", "delete"],
        ),
        // Whether a referenced kind is a provider's: its CRD's contract label.
        rule(
            "apiextensions.k8s.io",
            &["customresourcedefinitions"],
            &["get"],
        ),
        // Kubeconfigs of workload clusters; what a deleted cluster owned, by name
        // (`capi_core::cluster_objects`): no list.
        rule("", &["secrets", "configmaps"], &["get", "delete"]),
    ]
}
