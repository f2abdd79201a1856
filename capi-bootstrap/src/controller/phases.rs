//! The phases of a `KubeadmConfig` pass, in the order [`super::reconcile::reconcile_once`] runs
//! them. A phase that returns `Break` ends the decisions (the status planned so far is written);
//! `Continue` goes on to the next one; a [`Failure`] is recorded on `Ready`.

use std::ops::ControlFlow::{self, Break, Continue};

use crate::api::KubeadmConfig;
use crate::init_lock::InitLock;
use capi_core::condition::{self, ConditionStatus};
use capi_core::labels;
use capi_runtime::plan::Next;
use capi_runtime::reasons;
use kube::{Resource, ResourceExt};

use super::bootstrap_data::{self, DataSecret, earlier_data, keep_existing};
use super::reconcile::{Failure, OwnedBy, Owner, Owners, Scope};

/// How soon a config whose cached copy predates this controller's own last write is looked at
/// again.
const OWN_WRITE_CATCH_UP: std::time::Duration = std::time::Duration::from_millis(250);

/// A copy older than this controller's own last status write ends the pass: computed from it,
/// the status would repeat (or undo) the one just written. A deleted config is forgotten.
pub(super) fn await_own_write(config: &KubeadmConfig, owners: &Owners) -> ControlFlow<Next> {
    if config.meta().deletion_timestamp.is_some() {
        owners.own_writes.forget(config);
    } else if owners.own_writes.is_stale(config) {
        return Break(Next::Requeue(OWN_WRITE_CATCH_UP));
    }
    Continue(())
}

/// The owning Machine or MachinePool (by UID) and its Cluster, from the caches (else read
/// fresh). A config nothing owns yet says so on `Ready`; a missing owner or Cluster is waited
/// for.
pub(super) async fn find_owner(scope: &mut Scope<'_>) -> Result<ControlFlow<(), Owner>, Failure> {
    let (config, owners) = (scope.config, scope.owners);
    let Some(reference) = config
        .owner_references()
        .iter()
        .find(|r| {
            (r.kind == "Machine" || r.kind == "MachinePool")
                && r.api_version.starts_with("cluster.x-k8s.io/")
        })
        .cloned()
    else {
        scope.plan.condition(
            condition::READY,
            ConditionStatus::False,
            reasons::WAITING_FOR_OWNER,
            "waiting for a Machine or MachinePool to own this config",
        );
        return Ok(Break(()));
    };
    let same = |uid: Option<&str>| uid == Some(reference.uid.as_str());
    let (owned_by, cluster_name) = if reference.kind == "Machine" {
        let machine = owners
            .machines
            .get(&scope.namespace, &reference.name)
            .await?
            .filter(|m| same(m.metadata.uid.as_deref()));
        let Some(machine) = machine else {
            return Err(Failure::Waiting(
                reasons::WAITING_FOR_OWNER,
                format!("waiting for Machine {:?}", reference.name),
            ));
        };
        let cluster_name = machine.spec.cluster_name.clone();
        (OwnedBy::Machine(machine), cluster_name)
    } else {
        let pool = owners
            .pools
            .get(&scope.namespace, &reference.name)
            .await?
            .filter(|p| same(p.metadata.uid.as_deref()));
        let Some(pool) = pool else {
            return Err(Failure::Waiting(
                reasons::WAITING_FOR_OWNER,
                format!("waiting for MachinePool {:?}", reference.name),
            ));
        };
        let cluster_name = pool.spec.cluster_name.clone();
        (OwnedBy::Pool(pool), cluster_name)
    };
    let Some(cluster) = owners.clusters.get(&scope.namespace, &cluster_name).await? else {
        return Err(Failure::Waiting(
            reasons::WAITING_FOR_CLUSTER,
            format!("waiting for Cluster {cluster_name:?}"),
        ));
    };
    Ok(Continue(Owner {
        uid: reference.uid,
        owned_by,
        cluster,
    }))
}

/// `Paused` recorded; a paused config (or one of a paused cluster) changes nothing else.
pub(super) fn honour_pause(scope: &mut Scope<'_>, owner: &Owner) -> ControlFlow<()> {
    let paused = owner.cluster.is_paused() || labels::has_paused_annotation(&scope.config.metadata);
    if scope.plan.paused(paused) {
        return Break(());
    }
    Continue(())
}

/// A deleted config releases the cluster's init lock if its machine holds it: the lock never
/// outlives a machine that never initialised.
pub(super) async fn release_init_lock(
    scope: &Scope<'_>,
    owner: &Owner,
) -> Result<ControlFlow<()>, Failure> {
    if scope.config.meta().deletion_timestamp.is_none() {
        return Ok(Continue(()));
    }
    InitLock::new(
        scope.context.client.clone(),
        &scope.namespace,
        &owner.cluster.name_any(),
    )
    .release(&owner.uid)
    .await?;
    Ok(Break(()))
}

/// Data is rendered once: a machine may already have booted from it. A config whose status
/// records its data is done (as upstream, the status is trusted: no Secret read per pass), its
/// join token kept valid until the machine joins.
pub(super) async fn keep_recorded_data(
    scope: &mut Scope<'_>,
    owner: &Owner,
) -> Result<ControlFlow<()>, Failure> {
    let recorded = scope
        .config
        .status
        .as_ref()
        .filter(|s| {
            s.initialization
                .as_ref()
                .and_then(|i| i.data_secret_created)
                .unwrap_or(false)
        })
        .and_then(|s| s.data_secret_name.clone());
    let Some(recorded) = recorded else {
        return Ok(Continue(()));
    };
    keep_existing(scope, owner, DataSecret::Recorded(recorded)).await?;
    Ok(Break(()))
}

/// A machine being deleted gets no new data, and a config whose name another config's Secret
/// took (as its last status says) is not rendered again until that Secret is gone: both look
/// once for data an earlier render left, and keep it if it is theirs.
pub(super) async fn recover_earlier_data(
    scope: &mut Scope<'_>,
    owner: &Owner,
) -> Result<ControlFlow<()>, Failure> {
    let conflicted = scope.config.status.as_ref().is_some_and(|s| {
        condition::get(&s.conditions, condition::READY)
            .is_some_and(|c| c.reason == reasons::DATA_SECRET_CONFLICT)
    });
    let deleting = owner.deleting();
    scope.looked = deleting || conflicted;
    if scope.looked
        && let Some(earlier) = earlier_data(scope).await?
    {
        keep_existing(scope, owner, earlier).await?;
        return Ok(Break(()));
    }
    Ok(Continue(()))
}

/// A machine (or pool) being deleted gets no data: data rendered now could outlive the
/// owner's deletion, which removes it.
pub(super) fn withhold_from_deleting_machine(
    scope: &mut Scope<'_>,
    owner: &Owner,
) -> ControlFlow<()> {
    if !owner.deleting() {
        return Continue(());
    }
    scope.plan.condition(
        condition::READY,
        ConditionStatus::False,
        reasons::DELETING,
        format!(
            "{} {:?} is being deleted; no bootstrap data is rendered for it",
            match owner.owned_by {
                OwnedBy::Machine(_) => "Machine",
                OwnedBy::Pool(_) => "MachinePool",
            },
            owner.name()
        ),
    );
    Break(())
}

/// The config's data rendered into its Secret (see [`bootstrap_data::render`]). A render that
/// leaves no data (it waits, or cannot be made) still keeps data an earlier render left (a
/// machine may have booted from it), whatever this one met: a fresh config that renders costs no
/// read, one that cannot render one look at most per pass.
pub(super) async fn render_or_keep_earlier(
    scope: &mut Scope<'_>,
    owner: &Owner,
) -> Result<(), Failure> {
    let rendered = bootstrap_data::render(scope, owner).await;
    if scope.data_secret_name.is_some() {
        return rendered;
    }
    match rendered {
        Err(Failure::Api(error)) => Err(Failure::Api(error)),
        // Looked already this pass (before rendering, or when the create met the name taken).
        Err(conflict @ Failure::Waiting(reasons::DATA_SECRET_CONFLICT, _)) => Err(conflict),
        other if scope.looked => other,
        other => match earlier_data(scope).await? {
            Some(earlier) => keep_existing(scope, owner, earlier).await,
            None => other,
        },
    }
}
