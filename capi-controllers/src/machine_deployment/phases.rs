//! The phases of a MachineDeployment pass, in the order [`super::reconcile_once`] runs them. A
//! phase that returns `Break` ends the pass with what comes next; `Continue` goes on to the next
//! one.

use std::collections::BTreeMap;
use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;

use capi_core::api::{
    Cluster, MachineDeployment, MachineDeploymentRolloutStrategy, MachineSet, MachineSetSpec,
    MachineTemplateSpec, RolloutStrategyType, TemplateMetadata,
};
use capi_core::condition::{self, ConditionStatus};
use capi_core::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{ListParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::rollout::{self, SetState, rolling_update_step};
use super::status::{set_condition, summarise};
use super::{MACHINE_DEPLOYMENT_FINALIZER, Paused, Scope, TEMPLATE_HASH_LABEL};
use crate::{ownership, replicas, selector, synced};
use capi_runtime::ReconcileError;
use capi_runtime::plan::{EventNote, FinalizerChange, Next};
use capi_runtime::reasons;
use capi_runtime::write;

/// A deleted deployment: its sets (listed fresh from the API server) deleted, then its finalizer
/// dropped once none is left.
pub(super) async fn reconcile_delete(scope: &Scope<'_>) -> Result<Next, ReconcileError> {
    let deployment = scope.deployment;
    if !has_finalizer(deployment) {
        return Ok(Next::AwaitChange);
    }
    let selector = format!("{}={}", labels::MACHINE_DEPLOYMENT_NAME, scope.name);
    let owned: Vec<MachineSet> = scope
        .sets_api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|s| ownership::is_controlled_by(&s.metadata, &scope.uid))
        .collect();
    if owned.is_empty() {
        write::change_finalizer(
            &scope.api,
            deployment,
            FinalizerChange::Remove,
            MACHINE_DEPLOYMENT_FINALIZER,
        )
        .await?;
        return Ok(Next::AwaitChange);
    }
    for set in owned
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
    {
        write::delete(&scope.sets_api, &set.name_any()).await?;
    }
    Ok(Next::Requeue(scope.deps().settings.poll))
}

fn has_finalizer(deployment: &MachineDeployment) -> bool {
    deployment
        .finalizers()
        .iter()
        .any(|f| f == MACHINE_DEPLOYMENT_FINALIZER)
}

/// The finalizer, before anything else: a deployment that creates sets is never deleted without
/// deleting them.
pub(super) async fn ensure_finalizer(
    scope: &Scope<'_>,
) -> Result<ControlFlow<Next>, ReconcileError> {
    if has_finalizer(scope.deployment) {
        return Ok(Continue(()));
    }
    write::change_finalizer(
        &scope.api,
        scope.deployment,
        FinalizerChange::Add,
        MACHINE_DEPLOYMENT_FINALIZER,
    )
    .await?;
    Ok(Break(Next::AwaitChange))
}

/// A selector that does not match the template's labels is recorded as a condition, and nothing
/// is rolled out from it.
pub(super) async fn check_selector(
    scope: &mut Scope<'_>,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let deployment = scope.deployment;
    let mismatch = selector::template_mismatch(
        "MachineDeployment",
        &deployment.spec.selector,
        deployment
            .spec
            .template
            .metadata
            .as_ref()
            .map(|m| &m.labels),
    );
    if selector::record_mismatch(
        &mut scope.status.conditions,
        mismatch,
        deployment.metadata.generation,
    ) {
        patch_status(scope).await?;
        return Ok(Break(Next::AwaitChange));
    }
    Ok(Continue(()))
}

/// The deployment's Cluster (from the cache, else read fresh); without it the deployment waits.
pub(super) async fn find_cluster(
    scope: &Scope<'_>,
) -> Result<ControlFlow<Next, Arc<Cluster>>, ReconcileError> {
    let deps = scope.deps();
    let name = &scope.deployment.spec.cluster_name;
    let client = &scope.context.client;
    let poll = deps.settings.poll;
    Ok(crate::cache::cluster_or_wait(&deps.clusters, client, name, &scope.namespace, poll).await?)
}

/// Reads (writes nothing) the deployment's sets from a synced cache into the scope, oldest
/// revision first, split into the new set (of the current template) and the old ones; an unsynced
/// cache ends the pass, never counted from.
pub(super) fn observe_sets(scope: &mut Scope<'_>) -> ControlFlow<Next> {
    let deps = scope.deps();
    let Some(store) = synced(&deps.sets) else {
        return Break(Next::Requeue(deps.settings.poll));
    };
    let mut sets: Vec<Arc<MachineSet>> = store
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(scope.namespace.as_str()))
        .filter(|s| ownership::is_controlled_by(&s.metadata, &scope.uid))
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .collect();
    sets.sort_by_key(|s| (revision(s), s.name_any()));
    let hash = &scope.hash;
    scope.new_set = sets
        .iter()
        .find(|s| s.labels().get(TEMPLATE_HASH_LABEL) == Some(hash))
        .cloned();
    scope.old_sets = sets
        .iter()
        .filter(|s| s.labels().get(TEMPLATE_HASH_LABEL) != Some(hash))
        .cloned()
        .collect();
    scope.sets = sets;
    Continue(())
}

/// `Paused` recorded, and whether (and why) the rollout is paused noted in the scope.
pub(super) fn record_pause(scope: &mut Scope<'_>, cluster: &Cluster) {
    let deployment = scope.deployment;
    scope.paused = if cluster.is_paused() || labels::has_paused_annotation(&deployment.metadata) {
        Paused::Cluster
    } else if deployment.spec.paused.unwrap_or(false) {
        Paused::Rollout
    } else {
        Paused::No
    };
    set_condition(
        &mut scope.status,
        deployment,
        condition::PAUSED,
        if scope.paused == Paused::No {
            (ConditionStatus::False, reasons::NOT_PAUSED, String::new())
        } else {
            (
                ConditionStatus::True,
                reasons::PAUSED,
                "rollout is paused".to_string(),
            )
        },
    );
}

/// An absent `spec.replicas` is defaulted and written back (see [`replicas`]) — as upstream's
/// admission defaulting, whatever the rollout's pause, but not while the cluster is paused;
/// malformed autoscaler annotations are recorded on `Available` and stop the pass.
pub(super) async fn default_replicas(
    scope: &mut Scope<'_>,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let deployment = scope.deployment;
    if scope.paused == Paused::Cluster {
        return Ok(Continue(()));
    }
    let current = (!scope.sets.is_empty()).then(|| {
        scope
            .sets
            .iter()
            .map(|s| s.spec.replicas.unwrap_or(0))
            .sum::<i32>()
    });
    match replicas::defaulted(deployment.spec.replicas, deployment.annotations(), current) {
        Ok(None) => Ok(Continue(())),
        Ok(Some(replicas)) => {
            replicas::write(&scope.api, deployment, replicas).await?;
            Ok(Break(Next::AwaitChange))
        }
        Err(message) => {
            summarise(
                &mut scope.status,
                deployment,
                &scope.sets,
                None,
                current.unwrap_or(0),
                0,
            );
            set_condition(
                &mut scope.status,
                deployment,
                condition::AVAILABLE,
                (ConditionStatus::False, reasons::INVALID_SPEC, message),
            );
            patch_status(scope).await?;
            Ok(Break(Next::AwaitChange))
        }
    }
}

/// `maxSurge` and `maxUnavailable` resolved against `spec.replicas`; values that cannot be used
/// are recorded on `Available` and stop the pass.
pub(super) async fn resolve_fenceposts(
    scope: &mut Scope<'_>,
) -> Result<ControlFlow<Next, (i32, i32)>, ReconcileError> {
    let deployment = scope.deployment;
    let desired = desired(deployment);
    let rolling = strategy(deployment).rolling_update.unwrap_or_default();
    let fenceposts = rollout::resolve_fenceposts(
        rolling.max_surge.as_ref(),
        rolling.max_unavailable.as_ref(),
        desired,
    );
    match fenceposts {
        Ok(pair) => Ok(Continue(pair)),
        Err(error) => {
            summarise(&mut scope.status, deployment, &scope.sets, None, desired, 0);
            set_condition(
                &mut scope.status,
                deployment,
                condition::AVAILABLE,
                (
                    ConditionStatus::False,
                    reasons::INVALID_SPEC,
                    error.to_string(),
                ),
            );
            patch_status(scope).await?;
            Ok(Break(Next::AwaitChange))
        }
    }
}

/// One step of the rollout: old sets gated (an OnDelete rollout's old sets never create), then the
/// new set created at its first step's size, or every set scaled to this step and emptied old sets
/// deleted. Returns what comes next once status is written: a resync once the new set alone has
/// `spec.replicas`.
pub(super) async fn roll_out(
    scope: &mut Scope<'_>,
    surge: i32,
    unavailable: i32,
) -> Result<Next, ReconcileError> {
    let strategy = strategy(scope.deployment);
    // Old sets of an OnDelete rollout never create: a machine the user deletes is replaced
    // from the new set only, however late this controller shrinks the old one. Gated before
    // the new set exists, so no replacement can race its creation.
    let on_delete = strategy.type_ == RolloutStrategyType::OnDelete;
    for old in &scope.old_sets {
        gate_creation(&scope.sets_api, old, on_delete).await?;
    }
    let olds: Vec<SetState> = scope.old_sets.iter().map(|s| state(s)).collect();
    match scope.new_set.clone() {
        None => {
            create_new_set(scope, &strategy, &olds, surge, unavailable).await?;
            Ok(Next::AwaitChange)
        }
        Some(new) => scale_sets(scope, &strategy, &new, &olds, surge, unavailable).await,
    }
}

/// The set of the current template, created with the replicas of its first step and the next
/// revision.
async fn create_new_set(
    scope: &mut Scope<'_>,
    strategy: &MachineDeploymentRolloutStrategy,
    olds: &[SetState],
    surge: i32,
    unavailable: i32,
) -> Result<(), ReconcileError> {
    let deployment = scope.deployment;
    let desired = desired(deployment);
    let new_name = format!("{}-{}", scope.name, scope.hash);
    let replicas = match strategy.type_ {
        RolloutStrategyType::RollingUpdate => {
            let fresh = SetState {
                name: new_name.clone(),
                replicas: 0,
                available: 0,
            };
            let steps = rolling_update_step(desired, &fresh, olds, surge, unavailable);
            steps
                .iter()
                .find(|s| s.name == new_name)
                .map_or(0, |s| s.replicas)
        }
        RolloutStrategyType::OnDelete => {
            (desired - olds.iter().map(|s| s.replicas).sum::<i32>()).max(0)
        }
    };
    let next_revision = scope
        .old_sets
        .iter()
        .map(|s| revision(s))
        .max()
        .unwrap_or(0)
        + 1;
    let set = new_machine_set(deployment, &new_name, &scope.hash, replicas, next_revision);
    match scope.sets_api.create(&PostParams::default(), &set).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_already_exists() => {}
        Err(error) => return Err(error.into()),
    }
    scope.events.push(EventNote {
        warning: false,
        reason: reasons::MACHINE_SET_SCALED,
        note: format!(
            "created MachineSet {new_name} (revision {next_revision}) with {replicas} replicas"
        ),
    });
    Ok(())
}

/// The new set made the newest revision (a template that comes back is the newest again) and
/// open to creation, every set scaled to this step, and old sets with no machine left deleted.
async fn scale_sets(
    scope: &mut Scope<'_>,
    strategy: &MachineDeploymentRolloutStrategy,
    new: &MachineSet,
    olds: &[SetState],
    surge: i32,
    unavailable: i32,
) -> Result<Next, ReconcileError> {
    let desired = desired(scope.deployment);
    let sets_api = &scope.sets_api;
    let newest = scope
        .old_sets
        .iter()
        .map(|s| revision(s))
        .max()
        .unwrap_or(0);
    if revision(new) <= newest {
        let patch = json!({"metadata": {"annotations": {
            labels::REVISION: (newest + 1).to_string(),
            labels::DISABLE_MACHINE_CREATE: "false",
        }}});
        write::patch(sets_api, &new.name_any(), patch).await?;
    } else {
        gate_creation(sets_api, new, false).await?;
    }
    let scales = match strategy.type_ {
        RolloutStrategyType::RollingUpdate => {
            rolling_update_step(desired, &state(new), olds, surge, unavailable)
        }
        RolloutStrategyType::OnDelete => on_delete_step(desired, new, &scope.old_sets),
    };
    for scale in scales {
        let current = scope
            .sets
            .iter()
            .find(|s| s.name_any() == scale.name)
            .and_then(|s| s.spec.replicas);
        if current == Some(scale.replicas) {
            continue;
        }
        let patch = json!({"spec": {"replicas": scale.replicas}});
        write::patch(sets_api, &scale.name, patch).await?;
        scope.events.push(EventNote {
            warning: false,
            reason: reasons::MACHINE_SET_SCALED,
            note: format!(
                "scaled MachineSet {} from {} to {}",
                scale.name,
                current.unwrap_or(0),
                scale.replicas
            ),
        });
    }
    // Old sets with no machine left are done with.
    for old in &scope.old_sets {
        let empty = old.spec.replicas == Some(0)
            && old.status.as_ref().and_then(|s| s.replicas).unwrap_or(0) == 0;
        if empty {
            write::delete(sets_api, &old.name_any()).await?;
        }
    }
    if scope.old_sets.is_empty() && new.spec.replicas == Some(desired) {
        return Ok(Next::Resync);
    }
    Ok(Next::AwaitChange)
}

/// Writes the status computed so far, if it changed (the pass ends after it).
async fn patch_status(scope: &Scope<'_>) -> Result<(), kube::Error> {
    let deployment = scope.deployment;
    write::patch_status_if_changed(
        &scope.api,
        &scope.name,
        deployment.status.as_ref(),
        &scope.status,
    )
    .await
}

/// `spec.replicas`, 1 when unset.
pub(super) fn desired(deployment: &MachineDeployment) -> i32 {
    deployment.spec.replicas.unwrap_or(1)
}

fn strategy(deployment: &MachineDeployment) -> MachineDeploymentRolloutStrategy {
    deployment
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.strategy.clone())
        .unwrap_or_default()
}

fn revision(set: &MachineSet) -> i64 {
    set.annotations()
        .get(labels::REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Sets the set's [`labels::DISABLE_MACHINE_CREATE`] annotation to `disabled`, writing only when
/// it differs.
async fn gate_creation(
    api: &Api<MachineSet>,
    set: &MachineSet,
    disabled: bool,
) -> Result<(), ReconcileError> {
    let value = if disabled { "true" } else { "false" };
    if set
        .annotations()
        .get(labels::DISABLE_MACHINE_CREATE)
        .map(String::as_str)
        == Some(value)
    {
        return Ok(());
    }
    let patch = json!({"metadata": {"annotations": {labels::DISABLE_MACHINE_CREATE: value}}});
    write::patch(api, &set.name_any(), patch).await?;
    Ok(())
}

fn state(set: &MachineSet) -> SetState {
    SetState {
        name: set.name_any(),
        replicas: set.spec.replicas.unwrap_or(0),
        available: set
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0),
    }
}

/// OnDelete: old sets shrink to the machines they still have (never grow back), the new set
/// makes up the difference.
pub(super) fn on_delete_step(
    desired: i32,
    new: &MachineSet,
    olds: &[Arc<MachineSet>],
) -> Vec<rollout::Scale> {
    let mut scales = Vec::new();
    let mut remaining_old = 0;
    for old in olds {
        let spec = old.spec.replicas.unwrap_or(0);
        let actual = old.status.as_ref().and_then(|s| s.replicas).unwrap_or(spec);
        let keep = spec.min(actual);
        remaining_old += keep;
        scales.push(rollout::Scale {
            name: old.name_any(),
            replicas: keep,
        });
    }
    scales.push(rollout::Scale {
        name: new.name_any(),
        replicas: (desired - remaining_old).max(0),
    });
    scales
}

fn new_machine_set(
    deployment: &MachineDeployment,
    name: &str,
    hash: &str,
    replicas: i32,
    revision: i64,
) -> MachineSet {
    let deployment_name = deployment.name_any();
    let mut template: MachineTemplateSpec = deployment.spec.template.clone();
    let mut template_metadata = template.metadata.take().unwrap_or_default();
    template_metadata
        .labels
        .insert(TEMPLATE_HASH_LABEL.into(), hash.into());
    template_metadata.labels.insert(
        labels::MACHINE_DEPLOYMENT_NAME.into(),
        deployment_name.clone(),
    );
    template.metadata = Some(TemplateMetadata {
        labels: template_metadata.labels.clone(),
        annotations: template_metadata.annotations,
    });
    let mut match_labels = deployment
        .spec
        .selector
        .match_labels
        .clone()
        .unwrap_or_default();
    match_labels.insert(TEMPLATE_HASH_LABEL.into(), hash.into());
    let mut set_labels: BTreeMap<String, String> = template_metadata.labels;
    set_labels.insert(
        labels::CLUSTER_NAME.into(),
        deployment.spec.cluster_name.clone(),
    );
    MachineSet {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: deployment.namespace(),
            labels: Some(set_labels),
            annotations: Some(BTreeMap::from([
                (labels::REVISION.to_string(), revision.to_string()),
                (
                    labels::DISABLE_MACHINE_CREATE.to_string(),
                    "false".to_string(),
                ),
            ])),
            owner_references: deployment.controller_owner_ref(&()).map(|o| vec![o]),
            finalizers: Some(vec![crate::machine_set::MACHINE_SET_FINALIZER.to_string()]),
            ..ObjectMeta::default()
        },
        spec: MachineSetSpec {
            cluster_name: deployment.spec.cluster_name.clone(),
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(match_labels),
                match_expressions: deployment.spec.selector.match_expressions.clone(),
            },
            template,
            deletion: deployment.spec.deletion.clone(),
            machine_naming: deployment.spec.machine_naming.clone(),
        },
        status: None,
    }
}
