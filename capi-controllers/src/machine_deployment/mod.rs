//! The MachineDeployment controller: one MachineSet per distinct template (named after a stable
//! hash of it), rolled out by RollingUpdate or OnDelete, with revision annotations.
//!
//! RollingUpdate scales the new set up and the old ones down by
//! [`rolling_update_step`] with upstream's rounding of
//! `maxSurge` (up) and `maxUnavailable` (down), so that at no time fewer than
//! `replicas − maxUnavailable` machines are available and no more than `replicas + maxSurge` exist.
//! OnDelete never deletes a machine itself: old sets shrink only as the user deletes their machines,
//! and the new set grows by as much. A paused deployment only reports status. Old sets at zero
//! machines are deleted.

pub mod rollout;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use capi_core::api::{
    Cluster, MachineDeployment, MachineDeploymentPhase, MachineDeploymentStatus, MachineSet,
    MachineSetSpec, MachineTemplateSpec, RolloutStrategyType, TemplateMetadata,
};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{ListParams, PostParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use self::rollout::{SetState, resolve_fenceposts, rolling_update_step};
use crate::{
    CoreSettings, cache, cluster_cache, find_cluster, of_cluster, ownership, replicas, selector,
    synced,
};
use capi_runtime::pace::{self, StatusPacer};
use capi_runtime::plan::{EventNote, FinalizerChange, Next};
use capi_runtime::reasons;
use capi_runtime::write;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// The finalizer that makes a deleted MachineDeployment delete its MachineSets first.
pub const MACHINE_DEPLOYMENT_FINALIZER: &str = "machinedeployment.cluster.x-k8s.io";
/// The label carrying the template hash on a deployment's MachineSets and their machines.
pub const TEMPLATE_HASH_LABEL: &str = "machine-template-hash";

/// What the MachineDeployment controller works with besides the client.
pub(crate) struct DeploymentController {
    sets: OnceLock<Store<MachineSet>>,
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

fn revision(set: &MachineSet) -> i64 {
    set.annotations()
        .get(labels::REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

async fn reconcile_once(
    deployment: &MachineDeployment,
    context: &Context<DeploymentController>,
) -> Result<Next, ReconcileError> {
    let deps = &context.state;
    let namespace = deployment.namespace().unwrap_or_default();
    let api: Api<MachineDeployment> = Api::namespaced(context.client.clone(), &namespace);
    let sets_api: Api<MachineSet> = Api::namespaced(context.client.clone(), &namespace);
    let uid = deployment.uid().unwrap_or_default();
    let name = deployment.name_any();
    let has_finalizer = deployment
        .finalizers()
        .iter()
        .any(|f| f == MACHINE_DEPLOYMENT_FINALIZER);

    if deployment.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Next::AwaitChange);
        }
        let selector = format!("{}={name}", labels::MACHINE_DEPLOYMENT_NAME);
        let owned: Vec<MachineSet> = sets_api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .into_iter()
            .filter(|s| ownership::is_controlled_by(&s.metadata, &uid))
            .collect();
        if owned.is_empty() {
            write::change_finalizer(
                &api,
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
            write::delete(&sets_api, &set.name_any()).await?;
        }
        return Ok(Next::Requeue(deps.settings.poll));
    }
    if !has_finalizer {
        write::change_finalizer(
            &api,
            deployment,
            FinalizerChange::Add,
            MACHINE_DEPLOYMENT_FINALIZER,
        )
        .await?;
        return Ok(Next::AwaitChange);
    }
    let mut status = deployment.status.clone().unwrap_or_default();
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
        &mut status.conditions,
        mismatch,
        deployment.metadata.generation,
    ) {
        write::patch_status_if_changed(&api, &name, deployment.status.as_ref(), &status).await?;
        return Ok(Next::AwaitChange);
    }
    let cluster = match deps.clusters.get() {
        Some(store) => {
            find_cluster(
                store,
                &context.client,
                &deployment.spec.cluster_name,
                &namespace,
            )
            .await?
        }
        None => None,
    };
    let Some(cluster) = cluster else {
        return Ok(Next::Requeue(deps.settings.poll));
    };
    let Some(store) = synced(&deps.sets) else {
        return Ok(Next::Requeue(deps.settings.poll));
    };
    let mut sets: Vec<Arc<MachineSet>> = store
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|s| ownership::is_controlled_by(&s.metadata, &uid))
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .collect();
    sets.sort_by_key(|s| (revision(s), s.name_any()));
    let hash = template_hash(&deployment.spec.template);
    let new_set = sets
        .iter()
        .find(|s| s.labels().get(TEMPLATE_HASH_LABEL) == Some(&hash))
        .cloned();
    let old_sets: Vec<Arc<MachineSet>> = sets
        .iter()
        .filter(|s| s.labels().get(TEMPLATE_HASH_LABEL) != Some(&hash))
        .cloned()
        .collect();

    let paused_cluster = cluster.is_paused() || labels::has_paused_annotation(&deployment.metadata);
    let paused = paused_cluster || deployment.spec.paused.unwrap_or(false);
    set_condition(
        &mut status,
        deployment,
        condition::PAUSED,
        if paused {
            (
                ConditionStatus::True,
                reasons::PAUSED,
                "rollout is paused".to_string(),
            )
        } else {
            (ConditionStatus::False, reasons::NOT_PAUSED, String::new())
        },
    );
    // As upstream's admission defaulting: whatever the rollout's pause, not while the cluster is.
    if !paused_cluster {
        let current = (!sets.is_empty()).then(|| {
            sets.iter()
                .map(|s| s.spec.replicas.unwrap_or(0))
                .sum::<i32>()
        });
        match replicas::defaulted(deployment.spec.replicas, deployment.annotations(), current) {
            Ok(None) => {}
            Ok(Some(replicas)) => {
                replicas::write(&api, deployment, replicas).await?;
                return Ok(Next::AwaitChange);
            }
            Err(message) => {
                summarise(
                    &mut status,
                    deployment,
                    &sets,
                    None,
                    current.unwrap_or(0),
                    0,
                );
                set_condition(
                    &mut status,
                    deployment,
                    condition::AVAILABLE,
                    (ConditionStatus::False, reasons::INVALID_SPEC, message),
                );
                write::patch_status_if_changed(
                    &api,
                    &deployment.name_any(),
                    deployment.status.as_ref(),
                    &status,
                )
                .await?;
                return Ok(Next::AwaitChange);
            }
        }
    }
    let desired = deployment.spec.replicas.unwrap_or(1);
    let strategy = deployment
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.strategy.clone())
        .unwrap_or_default();
    let rolling = strategy.rolling_update.clone().unwrap_or_default();
    let fenceposts = resolve_fenceposts(
        rolling.max_surge.as_ref(),
        rolling.max_unavailable.as_ref(),
        desired,
    );
    let (surge, unavailable) = match fenceposts {
        Ok(pair) => pair,
        Err(error) => {
            summarise(&mut status, deployment, &sets, None, desired, 0);
            set_condition(
                &mut status,
                deployment,
                condition::AVAILABLE,
                (
                    ConditionStatus::False,
                    reasons::INVALID_SPEC,
                    error.to_string(),
                ),
            );
            write::patch_status_if_changed(
                &api,
                &deployment.name_any(),
                deployment.status.as_ref(),
                &status,
            )
            .await?;
            return Ok(Next::AwaitChange);
        }
    };
    let mut events = Vec::new();
    let mut next = Next::AwaitChange;
    if !paused {
        // Old sets of an OnDelete rollout never create: a machine the user deletes is replaced
        // from the new set only, however late this controller shrinks the old one. Gated before
        // the new set exists, so no replacement can race its creation.
        let on_delete = strategy.type_ == RolloutStrategyType::OnDelete;
        for old in &old_sets {
            gate_creation(&sets_api, old, on_delete).await?;
        }
        let olds: Vec<SetState> = old_sets.iter().map(|s| state(s)).collect();
        match &new_set {
            None => {
                let new_name = format!("{name}-{hash}");
                let replicas = match strategy.type_ {
                    RolloutStrategyType::RollingUpdate => {
                        let fresh = SetState {
                            name: new_name.clone(),
                            replicas: 0,
                            available: 0,
                        };
                        let steps = rolling_update_step(desired, &fresh, &olds, surge, unavailable);
                        steps
                            .iter()
                            .find(|s| s.name == new_name)
                            .map_or(0, |s| s.replicas)
                    }
                    RolloutStrategyType::OnDelete => {
                        (desired - olds.iter().map(|s| s.replicas).sum::<i32>()).max(0)
                    }
                };
                let next_revision = old_sets.iter().map(|s| revision(s)).max().unwrap_or(0) + 1;
                let set = new_machine_set(deployment, &new_name, &hash, replicas, next_revision);
                match sets_api.create(&PostParams::default(), &set).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.is_already_exists() => {}
                    Err(error) => return Err(error.into()),
                }
                events.push(EventNote {
                    warning: false,
                    reason: reasons::MACHINE_SET_SCALED,
                    note: format!(
                        "created MachineSet {new_name} (revision {next_revision}) with {replicas} replicas"
                    ),
                });
            }
            Some(new) => {
                // A template that comes back is the newest revision again.
                let newest = old_sets.iter().map(|s| revision(s)).max().unwrap_or(0);
                if revision(new) <= newest {
                    let patch = json!({"metadata": {"annotations": {
                        labels::REVISION: (newest + 1).to_string(),
                        labels::DISABLE_MACHINE_CREATE: "false",
                    }}});
                    write::patch(&sets_api, &new.name_any(), patch).await?;
                } else {
                    gate_creation(&sets_api, new, false).await?;
                }
                let scales = match strategy.type_ {
                    RolloutStrategyType::RollingUpdate => {
                        rolling_update_step(desired, &state(new), &olds, surge, unavailable)
                    }
                    RolloutStrategyType::OnDelete => on_delete_step(desired, new, &old_sets),
                };
                for scale in scales {
                    let current = sets
                        .iter()
                        .find(|s| s.name_any() == scale.name)
                        .and_then(|s| s.spec.replicas);
                    if current == Some(scale.replicas) {
                        continue;
                    }
                    let patch = json!({"spec": {"replicas": scale.replicas}});
                    write::patch(&sets_api, &scale.name, patch).await?;
                    events.push(EventNote {
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
                for old in &old_sets {
                    let empty = old.spec.replicas == Some(0)
                        && old.status.as_ref().and_then(|s| s.replicas).unwrap_or(0) == 0;
                    if empty {
                        write::delete(&sets_api, &old.name_any()).await?;
                    }
                }
                if old_sets.is_empty() && new.spec.replicas == Some(desired) {
                    next = Next::Resync;
                }
            }
        }
    }
    let available_floor = desired - unavailable;
    summarise(
        &mut status,
        deployment,
        &sets,
        new_set.as_deref(),
        desired,
        available_floor,
    );
    let next = pace::patch_status(
        &deps.pacer,
        &api,
        deployment,
        deployment.status.as_ref(),
        &status,
        next,
    )
    .await?;
    write::publish(&context.recorder, deployment, &events).await;
    Ok(next)
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
fn on_delete_step(
    desired: i32,
    new: &MachineSet,
    olds: &[Arc<MachineSet>],
) -> Vec<crate::machine_deployment::rollout::Scale> {
    let mut scales = Vec::new();
    let mut remaining_old = 0;
    for old in olds {
        let spec = old.spec.replicas.unwrap_or(0);
        let actual = old.status.as_ref().and_then(|s| s.replicas).unwrap_or(spec);
        let keep = spec.min(actual);
        remaining_old += keep;
        scales.push(crate::machine_deployment::rollout::Scale {
            name: old.name_any(),
            replicas: keep,
        });
    }
    scales.push(crate::machine_deployment::rollout::Scale {
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
            finalizers: Some(vec![super::machine_set::MACHINE_SET_FINALIZER.to_string()]),
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

fn summarise(
    status: &mut MachineDeploymentStatus,
    deployment: &MachineDeployment,
    sets: &[Arc<MachineSet>],
    new_set: Option<&MachineSet>,
    desired: i32,
    available_floor: i32,
) {
    let sum =
        |f: &dyn Fn(&MachineSet) -> Option<i32>| sets.iter().filter_map(|s| f(s)).sum::<i32>();
    let replicas = sum(&|s| s.status.as_ref().and_then(|st| st.replicas));
    let available = sum(&|s| s.status.as_ref().and_then(|st| st.available_replicas));
    status.replicas = Some(replicas);
    status.ready_replicas = Some(sum(&|s| s.status.as_ref().and_then(|st| st.ready_replicas)));
    status.available_replicas = Some(available);
    status.up_to_date_replicas = Some(
        new_set
            .and_then(|s| s.status.as_ref())
            .and_then(|s| s.replicas)
            .unwrap_or(0),
    );
    status.phase = Some(if replicas < desired {
        MachineDeploymentPhase::ScalingUp
    } else if replicas > desired {
        MachineDeploymentPhase::ScalingDown
    } else {
        MachineDeploymentPhase::Running
    });
    status.selector = Some(selector::to_string(&deployment.spec.selector));
    status.observed_generation = deployment.metadata.generation;
    let value = if available >= available_floor {
        (
            ConditionStatus::True,
            reasons::MACHINE_AVAILABLE,
            String::new(),
        )
    } else {
        (
            ConditionStatus::False,
            reasons::MACHINE_NOT_READY,
            format!("{available} available machines, at least {available_floor} needed"),
        )
    };
    set_condition(status, deployment, condition::AVAILABLE, value);
}

fn set_condition(
    status: &mut MachineDeploymentStatus,
    deployment: &MachineDeployment,
    type_: &str,
    (state, reason, message): (ConditionStatus, &str, String),
) {
    condition::set(
        &mut status.conditions,
        DesiredCondition::new(type_, state, reason)
            .message(message)
            .observed_generation(deployment.metadata.generation),
    );
}

#[cfg(test)]
mod tests {
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
