//! Deleting a pool, a pass at a time: its infrastructure pool and bootstrap config first (the
//! infrastructure provider deletes the instances, their machines and `Machine`s), then the
//! bootstrap data Secret its config owned, then any `Machine` of the pool left, then its nodes,
//! then the finalizer.
//!
//! No `Machine` of the pool is deleted while its infrastructure pool exists: the provider would
//! take a deleted `Machine` for an instance to replace.

use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{Cluster, Machine, MachinePool, MachinePoolPhase};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, ResourceExt};

use super::machines::{is_member, selector};
use super::{MACHINE_POOL_FINALIZER, Scope};
use crate::references::Confirm;
use crate::{ownership, synced};
use capi_runtime::ReconcileError;
use capi_runtime::pace;
use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::reasons;
use capi_runtime::write;

/// One pass of deleting a pool; see the module documentation.
pub(super) async fn delete(
    scope: &mut Scope<'_>,
    cluster: Option<&Cluster>,
) -> Result<Next, ReconcileError> {
    let pool = scope.pool;
    let deps = scope.deps();
    if !pool
        .finalizers()
        .iter()
        .any(|f| f == MACHINE_POOL_FINALIZER)
    {
        return Ok(Next::AwaitChange);
    }
    let poll = deps.settings.poll;
    let template = &pool.spec.template.spec;
    let mut left = Vec::new();
    for reference in
        std::iter::once(&template.infrastructure_ref).chain(&template.bootstrap.config_ref)
    {
        if deps
            .references
            .delete(reference, &scope.namespace, Confirm::Absence)
            .await?
        {
            left.push(format!("{} {:?}", reference.kind, reference.name));
        }
    }
    if left.is_empty() {
        // Once its config is gone (no new data can be rendered into it), the data Secret.
        let client = scope.pools.clone().into_client();
        crate::machine::delete_bootstrap_secret(&template.bootstrap, &scope.namespace, &client)
            .await?;
        let Some(store) = synced(&deps.machines) else {
            return Ok(Next::Requeue(poll));
        };
        let ours: Vec<Arc<Machine>> = store
            .state()
            .into_iter()
            .filter(|m| {
                m.namespace().as_deref() == Some(scope.namespace.as_str())
                    && is_member(pool, &scope.uid, m)
                    && ownership::is_controlled_by(&m.metadata, &scope.uid)
            })
            .collect();
        for machine in ours
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
        {
            write::delete(&scope.machines, &machine.name_any()).await?;
        }
        if !ours.is_empty() {
            left.push(format!("{} Machines", ours.len()));
        } else if ownership::controlled_machine_left(&scope.machines, &selector(pool), &scope.uid)
            .await?
        {
            // The cache may not show a Machine made just before the deletion.
            left.push("Machines".to_string());
        }
    }
    if !left.is_empty() {
        let mut status = scope.status.clone();
        status.phase = Some(MachinePoolPhase::Deleting);
        condition::set(
            &mut status.conditions,
            DesiredCondition::new(
                condition::DELETING,
                ConditionStatus::True,
                reasons::DELETING,
            )
            .message(format!("waiting for {} to be deleted", left.join(", ")))
            .observed_generation(pool.metadata.generation),
        );
        return Ok(pace::patch_status(
            &deps.pacer,
            &scope.pools,
            pool,
            pool.status.as_ref(),
            &status,
            Next::Requeue(poll),
        )
        .await?);
    }
    if let Some(cluster) = cluster
        && !node_deletion_timed_out(pool)
    {
        delete_nodes(scope, cluster).await?;
    }
    write::change_finalizer(
        &scope.pools,
        pool,
        FinalizerChange::Remove,
        MACHINE_POOL_FINALIZER,
    )
    .await?;
    Ok(Next::AwaitChange)
}

/// Deletes the nodes the pool references (their instances are gone), each only if it is still
/// the node referenced (same UID). A workload cluster that cannot be reached has nothing to
/// delete from (its kubeconfig went with the cluster).
async fn delete_nodes(scope: &Scope<'_>, cluster: &Cluster) -> Result<(), ReconcileError> {
    let deps = scope.deps();
    let Ok(workload) = deps
        .workloads
        .get(&scope.namespace, &cluster.name_any())
        .await
    else {
        return Ok(());
    };
    let api: Api<Node> = Api::all(workload.client.clone());
    for reference in &scope.status.node_refs {
        if let Err(error) = super::nodes::delete_node(&api, reference).await {
            deps.workloads
                .recheck(&scope.namespace, &cluster.name_any());
            return Err(error.into());
        }
    }
    Ok(())
}

/// Whether `spec.template.spec.deletion.nodeDeletionTimeoutSeconds` (when set and not zero) has
/// passed since the deletion began: the nodes are left then, as upstream leaves them.
fn node_deletion_timed_out(pool: &MachinePool) -> bool {
    let timeout = pool
        .spec
        .template
        .spec
        .deletion
        .as_ref()
        .and_then(|d| d.node_deletion_timeout_seconds)
        .filter(|s| *s > 0);
    let (Some(timeout), Some(since)) = (timeout, &pool.metadata.deletion_timestamp) else {
        return false;
    };
    let elapsed = jiff::Timestamp::now().duration_since(since.0);
    Duration::try_from(elapsed)
        .is_ok_and(|elapsed| elapsed > Duration::from_secs(timeout.unsigned_abs().into()))
}
