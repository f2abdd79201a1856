//! An operator of its own kind, built on `capi-runtime` alone: a namespaced `TenantCluster` that a
//! platform team hands to its tenants. Each one renders a Cluster API `Cluster` from a
//! `ClusterClass` (the topology: class, version, worker count) in its namespace and reports the
//! cluster's phase back. Nothing of the infrastructure reconcilers is involved; this is what
//! embedding the loop in an operator of one's own looks like.
//!
//! # Guarantees
//!
//! - The `Cluster` is named like its `TenantCluster`, lives in the same namespace and carries a
//!   controller owner reference to it. It is written with server-side apply under the field
//!   manager [`FIELD_MANAGER`], so fields other writers own (the topology controller's, a user's
//!   labels) are kept.
//! - A `Cluster` of that name that is not this `TenantCluster`'s is never changed or deleted: the
//!   status says `Blocked` and why, and the operator looks again when that cluster changes or
//!   goes away.
//! - Deleting a `TenantCluster` deletes its `Cluster` first (the finalizer [`FINALIZER`] holds it
//!   until the cluster is gone), whether or not a garbage collector runs.
//! - Status is written only when it changed, so the operator's own writes never trigger it.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use capi_examples::tenant_cluster::TenantClusters;
//! use capi_runtime::manager::{Manager, ManagerConfig};
//!
//! let mut manager = Manager::new(kube::Config::infer().await?, ManagerConfig::default()).await?;
//! manager.add(TenantClusters);
//! manager.run().await?;
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{Cluster, ClusterPhase};
use capi_runtime::cache::lookup::Cached;
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use capi_runtime::manager::{Controllers, Manager};
use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::rbac::{READ, rule};
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain, write};
use futures::Future;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The finalizer that holds a `TenantCluster` until its `Cluster` is gone.
pub const FINALIZER: &str = "tenancy.example.com/cluster";
/// The field manager of the operator's server-side applies.
pub const FIELD_MANAGER: &str = "tenant-cluster-operator";
/// How often a deleting `TenantCluster` looks again while its `Cluster` is still there (the
/// cluster's deletion also triggers it).
const DELETION_POLL: Duration = Duration::from_secs(5);

/// What a tenant asks for: a cluster of `class`, at `version`, with `workers` worker machines.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tenancy.example.com",
    version = "v1alpha1",
    kind = "TenantCluster",
    namespaced,
    status = "TenantClusterStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TenantClusterSpec {
    /// The `ClusterClass` (in the same namespace) the cluster is made from.
    #[schemars(length(min = 1))]
    pub class: String,
    /// The Kubernetes version of the cluster, e.g. `v1.33.0`.
    #[schemars(length(min = 1))]
    pub version: String,
    /// How many worker machines the cluster has.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub workers: i32,
}

/// What the operator reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantClusterStatus {
    /// The rendered cluster's phase (`Pending` until it reports one), or `Blocked` when the
    /// cluster cannot be rendered (see `message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The name of the rendered `Cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// Why the cluster cannot be rendered, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The `TenantCluster` controller as a family for [`Manager::add`].
#[derive(Clone, Copy, Debug, Default)]
pub struct TenantClusters;

impl Controllers for TenantClusters {
    fn register(self, manager: &mut Manager) {
        let reconciler: TenantClusterReconciler = manager.reconciler(Arc::new(()));
        manager.add_controller(move |shutdown| run(reconciler, shutdown.wait()));
    }
}

/// The reconciler of `TenantCluster`s.
pub type TenantClusterReconciler = Reconciler<TenantCluster, ()>;

/// The permissions the operator needs (for its ClusterRole, with
/// [`capi_runtime::rbac::manager`]).
pub fn rbac() -> Vec<PolicyRule> {
    vec![
        rule(
            "tenancy.example.com",
            &["tenantclusters"],
            &["get", "list", "watch", "patch"],
        ),
        rule(
            "tenancy.example.com",
            &["tenantclusters/status"],
            &["patch"],
        ),
        rule(capi_core::api::GROUP, &["clusters"], READ),
        rule(capi_core::api::GROUP, &["clusters"], &["patch", "delete"]),
    ]
}

/// Runs `reconciler` until `shutdown` completes; in-flight reconciles finish first.
pub async fn run(
    reconciler: TenantClusterReconciler,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, store) = reconciler.trigger();
    let (clusters, cluster_stream) = reconciler.cached::<Cluster>();
    let clusters = Arc::new(clusters);
    let concurrency = reconciler.concurrency();
    let context = reconciler.into_context(|state, _, _| state);
    let results = Controller::for_stream(trigger, store)
        .with_config(ControllerConfig::default().concurrency(concurrency))
        // A Cluster changes (its phase, its deletion, a foreign one going away): reconcile the
        // TenantCluster of the same name.
        .watches_stream(cluster_stream, |cluster| {
            let namespace = cluster.namespace()?;
            Some(ObjectRef::<TenantCluster>::new(&cluster.name_any()).within(&namespace))
        })
        .graceful_shutdown_on(shutdown)
        .run(
            move |tenant, context| reconcile(tenant, context, Arc::clone(&clusters)),
            back_off::<TenantCluster, ()>,
            context,
        );
    drain(results).await;
}

#[tracing::instrument(skip_all, fields(namespace = %tenant.namespace().unwrap_or_default(), name = %tenant.name_any()))]
async fn reconcile(
    tenant: Arc<TenantCluster>,
    context: Arc<Context<()>>,
    clusters: Arc<Cached<Cluster>>,
) -> Result<Action, ReconcileError> {
    let once = reconcile_once(&tenant, &context, &clusters);
    context.reconcile(tenant.as_ref(), once).await
}

/// One reconcile: deletion, else finalizer → cluster → status.
async fn reconcile_once(
    tenant: &TenantCluster,
    context: &Context<()>,
    clusters: &Cached<Cluster>,
) -> Result<Next, ReconcileError> {
    let namespace = tenant.namespace().unwrap_or_default();
    let tenants: Api<TenantCluster> = Api::namespaced(context.client.clone(), &namespace);
    let existing = clusters.get(&namespace, &tenant.name_any()).await?;
    if tenant.meta().deletion_timestamp.is_some() {
        return delete_cluster(tenant, &tenants, existing.as_deref(), context).await;
    }
    write::change_finalizer(&tenants, tenant, FinalizerChange::Add, FINALIZER).await?;
    let status = match existing.as_deref() {
        Some(cluster) if !owned_by(cluster, tenant) => blocked(tenant),
        _ => rendered(&apply_cluster(tenant, context).await?, tenant),
    };
    let current = tenant.status.as_ref();
    write::patch_status_if_changed(&tenants, &tenant.name_any(), current, &status).await?;
    Ok(Next::AwaitChange)
}

/// Deletion: the cluster first (only if it is this tenant's), then the finalizer.
async fn delete_cluster(
    tenant: &TenantCluster,
    tenants: &Api<TenantCluster>,
    existing: Option<&Cluster>,
    context: &Context<()>,
) -> Result<Next, ReconcileError> {
    if let Some(cluster) = existing.filter(|cluster| owned_by(cluster, tenant)) {
        let api: Api<Cluster> = Api::namespaced(
            context.client.clone(),
            &tenant.namespace().unwrap_or_default(),
        );
        write::delete(&api, &cluster.name_any()).await?;
        if api.get_opt(&cluster.name_any()).await?.is_some() {
            return Ok(Next::Requeue(DELETION_POLL));
        }
    }
    write::change_finalizer(tenants, tenant, FinalizerChange::Remove, FINALIZER).await?;
    Ok(Next::AwaitChange)
}

/// Whether `cluster` has `tenant` as its controller.
fn owned_by(cluster: &Cluster, tenant: &TenantCluster) -> bool {
    let uid = tenant.uid();
    cluster
        .owner_references()
        .iter()
        .any(|owner| owner.controller == Some(true) && Some(&owner.uid) == uid.as_ref())
}

/// Applies the cluster `tenant` asks for and returns it as the API server has it now.
async fn apply_cluster(
    tenant: &TenantCluster,
    context: &Context<()>,
) -> Result<Cluster, ReconcileError> {
    let name = tenant.name_any();
    let api: Api<Cluster> = Api::namespaced(
        context.client.clone(),
        &tenant.namespace().unwrap_or_default(),
    );
    let owner = tenant.controller_owner_ref(&());
    let desired = json!({
        "apiVersion": Cluster::api_version(&()),
        "kind": Cluster::kind(&()),
        "metadata": {"name": name, "ownerReferences": [owner]},
        "spec": {"topology": {
            "classRef": {"name": tenant.spec.class},
            "version": tenant.spec.version,
            "workers": {"machineDeployments": [
                {"class": "default-worker", "name": "md-0", "replicas": tenant.spec.workers}
            ]},
        }},
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    Ok(api.patch(&name, &params, &Patch::Apply(&desired)).await?)
}

/// The status of a tenant whose cluster is `cluster`.
fn rendered(cluster: &Cluster, tenant: &TenantCluster) -> TenantClusterStatus {
    let phase = cluster.status.as_ref().and_then(|status| status.phase);
    let phase = serde_json::to_value(phase.unwrap_or(ClusterPhase::Pending)).ok();
    TenantClusterStatus {
        phase: phase.and_then(|phase| phase.as_str().map(str::to_string)),
        cluster_name: Some(cluster.name_any()),
        message: None,
        observed_generation: tenant.meta().generation,
    }
}

/// The status of a tenant whose cluster's name is taken by a cluster that is not its own.
fn blocked(tenant: &TenantCluster) -> TenantClusterStatus {
    TenantClusterStatus {
        phase: Some("Blocked".to_string()),
        cluster_name: None,
        message: Some(format!(
            "a Cluster named {} already exists in this namespace and does not belong to this \
             TenantCluster; rename one of them",
            tenant.name_any()
        )),
        observed_generation: tenant.meta().generation,
    }
}
