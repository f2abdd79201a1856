//! A deleted control plane: after the cluster's other machines, all of its own at once (the
//! whole cluster goes; etcd membership no longer matters); its finalizer dropped once none is
//! left.

use capi_core::labels;
use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::{ReconcileError, write};
use kube::ResourceExt;
use kube::api::ListParams;

use super::FINALIZER;
use super::membership::remove_hook;
use super::reconcile::Scope;

/// Deletes the machines (see [`delete_machines`]) and writes the status; once none is left, the
/// finalizer goes and the cluster's workload clients and etcd access are forgotten.
pub(super) async fn reconcile_delete(scope: &mut Scope<'_>) -> Result<Next, ReconcileError> {
    let next = delete_machines(scope).await?;
    scope.write_status().await?;
    if matches!(next, Next::AwaitChange) {
        write::change_finalizer(&scope.kcps, scope.kcp, FinalizerChange::Remove, FINALIZER).await?;
        let state = scope.state();
        state
            .workloads
            .forget(&scope.namespace, &scope.cluster_name);
        state
            .settings
            .etcd
            .forget(&scope.namespace, &scope.cluster_name);
    }
    Ok(next)
}

/// The cluster's other machines waited for, then every machine of the control plane deleted (its
/// pre-terminate hook removed first). `AwaitChange` means done.
async fn delete_machines(scope: &mut Scope<'_>) -> Result<Next, ReconcileError> {
    let (kcp, cluster, poll) = (scope.kcp, &scope.cluster_name, scope.poll());
    if !kcp.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Next::AwaitChange);
    }
    let workers = scope
        .machines
        .list_metadata(&ListParams::default().labels(&format!(
            "{}={cluster},!{}",
            labels::CLUSTER_NAME,
            labels::MACHINE_CONTROL_PLANE
        )))
        .await?
        .items
        .len();
    if workers > 0 {
        scope.report.deleting = Some(format!(
            "waiting for the cluster's {workers} other machines to be deleted first"
        ));
        return Ok(Next::Requeue(poll));
    }
    for machine in &scope.owned {
        let name = machine.name_any();
        if machine.annotations().contains_key(super::CLEANUP_HOOK) {
            remove_hook(&scope.machines, &name).await?;
        }
        if machine.metadata.deletion_timestamp.is_none() {
            write::delete(&scope.machines, &name).await?;
        }
    }
    if scope.owned.is_empty() {
        return Ok(Next::AwaitChange);
    }
    scope.report.deleting = Some(format!(
        "waiting for {} machines to be deleted",
        scope.owned.len()
    ));
    Ok(Next::Requeue(poll))
}
