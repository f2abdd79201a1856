//! The phases of a MachinePool pass, in the order [`super::reconcile_once`] runs them. A phase
//! that returns `Break` ends the pass with what comes next; `Continue` goes on to the next one.

use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;

use capi_core::api::{Cluster, ContractVersionedObjectReference};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{MACHINE_POOL_FINALIZER, Scope};
use crate::machine::status::Step;
use crate::references::{ReferenceError, initialization_flag};
use crate::{ownership, replicas};
use capi_runtime::ReconcileError;
use capi_runtime::plan::Next;
use capi_runtime::reasons;
use capi_runtime::write;

/// The finalizer, the cluster-name label and the Cluster as an owner (a plain one, as upstream),
/// in one patch guarded by the version read; a pass that writes them ends (the watch brings the
/// updated pool back).
pub(super) async fn ensure_metadata(
    scope: &Scope<'_>,
    cluster: &Cluster,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let pool = scope.pool;
    let has_finalizer = pool
        .finalizers()
        .iter()
        .any(|f| f == MACHINE_POOL_FINALIZER);
    let labelled = labels::cluster_name(&pool.metadata) == Some(cluster.name_any().as_str());
    let cluster_uid = cluster.uid().unwrap_or_default();
    let owned = ownership::is_owned_by(&pool.metadata, &cluster_uid);
    if has_finalizer && labelled && owned {
        return Ok(Continue(()));
    }
    let mut finalizers = pool.finalizers().to_vec();
    if !has_finalizer {
        finalizers.push(MACHINE_POOL_FINALIZER.to_string());
    }
    let mut owners = pool.owner_references().to_vec();
    if !owned && let Some(mut owner) = cluster.controller_owner_ref(&()) {
        owner.controller = None;
        owners.push(owner);
    }
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "labels": {labels::CLUSTER_NAME: cluster.name_any()},
        "ownerReferences": owners,
        "resourceVersion": pool.resource_version(),
    }});
    write::patch(&scope.pools, &pool.name_any(), patch).await?;
    Ok(Break(Next::AwaitChange))
}

/// A paused pool (or one of a paused cluster) records `Paused` and changes nothing else.
pub(super) async fn honour_pause(
    scope: &mut Scope<'_>,
    cluster: &Cluster,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let pool = scope.pool;
    if !cluster.is_paused() && !labels::has_paused_annotation(&pool.metadata) {
        return Ok(Continue(()));
    }
    let wanted = DesiredCondition::new(condition::PAUSED, ConditionStatus::True, reasons::PAUSED)
        .message("reconciliation is paused")
        .observed_generation(pool.metadata.generation);
    if condition::set(&mut scope.status.conditions, wanted) {
        let value = json!({"conditions": scope.status.conditions});
        write::patch_status_guarded(&scope.pools, pool, value).await?;
    }
    Ok(Break(Next::AwaitChange))
}

/// An absent `spec.replicas` is defaulted and written back, from the cluster autoscaler's size
/// annotations as for a MachineDeployment (see [`crate::replicas`]); malformed annotations are
/// recorded on `ScalingUp` and stop the pass.
pub(super) async fn default_replicas(
    scope: &mut Scope<'_>,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let pool = scope.pool;
    let current = pool.status.as_ref().and_then(|s| s.replicas);
    match replicas::defaulted(pool.spec.replicas, pool.annotations(), current) {
        Ok(Some(replicas)) => {
            replicas::write(&scope.pools, pool, replicas).await?;
            Ok(Break(Next::AwaitChange))
        }
        Ok(None) => Ok(Continue(())),
        Err(message) => {
            let wanted = DesiredCondition::new(
                condition::SCALING_UP,
                ConditionStatus::False,
                reasons::INVALID_SPEC,
            )
            .message(message)
            .observed_generation(pool.metadata.generation);
            if condition::set(&mut scope.status.conditions, wanted) {
                let value = json!({"conditions": scope.status.conditions});
                write::patch_status_guarded(&scope.pools, pool, value).await?;
            }
            Ok(Break(Next::AwaitChange))
        }
    }
}

/// A referenced object, owned by the pool and labelled with its cluster, or the step that says
/// why there is none.
async fn owned_reference(
    scope: &Scope<'_>,
    reference: &ContractVersionedObjectReference,
) -> Result<Result<Arc<DynamicObject>, Step>, ReconcileError> {
    let deps = scope.deps();
    let object = match deps.references.get(reference, &scope.namespace).await {
        Ok(object) => object,
        Err(
            error @ (ReferenceError::UnknownKind { .. } | ReferenceError::NotAProviderKind { .. }),
        ) => {
            return Ok(Err(Step::waiting(
                reasons::REFERENCE_KIND_UNKNOWN,
                error.to_string(),
            )));
        }
        Err(error) => return Err(error.into()),
    };
    let Some(object) = object else {
        return Ok(Err(Step::waiting(
            reasons::REFERENCE_NOT_FOUND,
            format!("waiting for {} {:?}", reference.kind, reference.name),
        )));
    };
    if let Some(owner) = ownership::as_blocking_controller(scope.pool) {
        ownership::ensure_owner(
            &deps.references,
            reference,
            &scope.namespace,
            &object,
            owner,
            &scope.pool.spec.cluster_name,
        )
        .await?;
    }
    Ok(Ok(object))
}

/// The `BootstrapConfigReady` step: the bootstrap config owned, and the name of its data Secret
/// copied to `spec.template.spec.bootstrap.dataSecretName` whenever it differs (a config that
/// renews its data may name another Secret); a pool naming its data Secret directly is ready.
pub(super) async fn reconcile_bootstrap(scope: &mut Scope<'_>) -> Result<Step, ReconcileError> {
    let bootstrap = &scope.pool.spec.template.spec.bootstrap;
    let Some(reference) = &bootstrap.config_ref else {
        return Ok(if bootstrap.data_secret_name.is_some() {
            Step::done(reasons::BOOTSTRAP_DATA_READY)
        } else {
            Step::waiting(
                reasons::INVALID_SPEC,
                "spec.template.spec.bootstrap needs a configRef or a dataSecretName",
            )
        });
    };
    let config = match owned_reference(scope, reference).await? {
        Ok(config) => config,
        Err(step) => return Ok(step),
    };
    let secret = config.data["status"]["dataSecretName"]
        .as_str()
        .filter(|name| !name.is_empty());
    let created = initialization_flag(&config, "dataSecretCreated")
        || config.data["status"]["ready"].as_bool() == Some(true);
    match secret {
        Some(name) if created => {
            if bootstrap.data_secret_name.as_deref() != Some(name) {
                scope.spec_changes.insert(
                    "template".into(),
                    json!({"spec": {"bootstrap": {"dataSecretName": name}}}),
                );
            }
            Ok(Step::done(reasons::BOOTSTRAP_DATA_READY))
        }
        _ => Ok(Step::waiting(
            reasons::WAITING_FOR_BOOTSTRAP_DATA,
            format!(
                "waiting for {} {:?} to create the bootstrap data Secret",
                reference.kind, reference.name
            ),
        )),
    }
}

/// What the infrastructure pool reports.
pub(super) struct Infrastructure {
    /// `InfrastructureReady`.
    pub(super) step: Step,
    /// `status.initialization.provisioned` (or a `v1beta1` provider's `status.ready`).
    pub(super) provisioned: bool,
    /// `status.replicas`: the instances the scale set has.
    pub(super) replicas: Option<i32>,
    /// The object, when it exists.
    pub(super) object: Option<Arc<DynamicObject>>,
}

/// The infrastructure pool owned and read: whether it is provisioned, how many instances it has,
/// and its provider IDs — copied to `spec.providerIDList` whenever they differ, whether or not
/// the pool is ready (a list that followed readiness would freeze whenever a condition turned
/// false). An empty list from a pool that reports instances is not copied: the provider has not
/// listed them yet.
pub(super) async fn reconcile_infrastructure(
    scope: &mut Scope<'_>,
) -> Result<Infrastructure, ReconcileError> {
    let reference = scope.pool.spec.template.spec.infrastructure_ref.clone();
    let object = match owned_reference(scope, &reference).await? {
        Ok(object) => object,
        Err(step) => {
            return Ok(Infrastructure {
                step,
                provisioned: false,
                replicas: None,
                object: None,
            });
        }
    };
    let provisioned = initialization_flag(&object, "provisioned")
        || object.data["status"]["ready"].as_bool() == Some(true);
    let replicas = object.data["status"]["replicas"]
        .as_i64()
        .and_then(|r| i32::try_from(r).ok());
    let provider_ids: Vec<String> = object.data["spec"]["providerIDList"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|id| id.as_str())
                .filter(|id| !id.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let not_listed_yet = provider_ids.is_empty() && replicas.unwrap_or(0) != 0;
    if !not_listed_yet && provider_ids != scope.pool.spec.provider_id_list {
        scope
            .spec_changes
            .insert("providerIDList".into(), json!(provider_ids));
        scope.provider_ids = provider_ids;
    }
    let step = if object.metadata.deletion_timestamp.is_some() {
        Step::waiting(
            reasons::DELETING,
            format!("{} {:?} is being deleted", reference.kind, reference.name),
        )
    } else {
        mirror_ready(&object, provisioned, &reference)
    };
    Ok(Infrastructure {
        step,
        provisioned,
        replicas,
        object: Some(object),
    })
}

/// `InfrastructureReady` as the infrastructure pool's own `Ready` condition says it, else from
/// whether it is provisioned.
fn mirror_ready(
    object: &DynamicObject,
    provisioned: bool,
    reference: &ContractVersionedObjectReference,
) -> Step {
    let ready = object.data["status"]["conditions"]
        .as_array()
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == condition::READY));
    let status = ready
        .and_then(|c| c["status"].as_str())
        .and_then(ConditionStatus::parse);
    match (status, ready) {
        (Some(ConditionStatus::True), _) => Step::done(reasons::INFRASTRUCTURE_READY),
        (Some(status), Some(ready)) => {
            let message = ready["message"].as_str().unwrap_or_default();
            let message = if message.is_empty() {
                format!("{} {:?} is not ready", reference.kind, reference.name)
            } else {
                message.to_string()
            };
            Step {
                status,
                reason: reasons::WAITING_FOR_INFRASTRUCTURE,
                message,
            }
        }
        _ if provisioned => Step::done(reasons::INFRASTRUCTURE_READY),
        _ => Step::waiting(
            reasons::WAITING_FOR_INFRASTRUCTURE,
            format!(
                "{} {:?} is not provisioned yet",
                reference.kind, reference.name
            ),
        ),
    }
}

/// The spec fields the pass copied (bootstrap data Secret, provider IDs), in one merge patch
/// guarded by the version read: a copy from a stale pool fails and the pass runs again.
pub(super) async fn write_spec(scope: &Scope<'_>) -> Result<(), ReconcileError> {
    if scope.spec_changes.is_empty() {
        return Ok(());
    }
    let pool = scope.pool;
    let patch = json!({
        "metadata": {"resourceVersion": pool.resource_version()},
        "spec": scope.spec_changes,
    });
    write::patch(&scope.pools, &pool.name_any(), patch).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1beta2", "kind": "InMemoryMachinePool",
            "metadata": {"name": "p"}, "status": status}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn infrastructure_ready_mirrors_the_pools_ready_condition_else_provisioned() {
        let reference = ContractVersionedObjectReference {
            api_group: "infrastructure.capi-rs.dev".into(),
            kind: "InMemoryMachinePool".into(),
            name: "p".into(),
        };
        let quiet = object(json!({}));
        assert_eq!(
            mirror_ready(&quiet, true, &reference).status,
            ConditionStatus::True
        );
        assert_eq!(
            mirror_ready(&quiet, false, &reference).status,
            ConditionStatus::False
        );
        let told = object(json!({"conditions": [{"type": "Ready", "status": "False",
            "reason": "ScaleSetReplicas", "message": "2 of 3 instances running"}]}));
        let step = mirror_ready(&told, true, &reference);
        assert_eq!(step.status, ConditionStatus::False);
        assert_eq!(step.message, "2 of 3 instances running");
    }
}
