//! A config's status, written once per pass from what the phases planned: `Ready`, `Paused`,
//! the data Secret's name and the observed generation.

use crate::api::{KubeadmConfig, KubeadmConfigInitialization, KubeadmConfigStatus};
use capi_core::condition::{self, ConditionStatus};
use capi_runtime::ReconcileError;
use capi_runtime::plan::Next;
use capi_runtime::reasons;
use capi_runtime::write;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::reconcile::{Failure, Scope};

/// What comes next after the phases `decided`: the plan's own next step, a poll for a config that
/// waits, nothing until a change for an invalid one (with a warning event). An API failure fails
/// the pass before any status is written.
pub(super) fn conclude(
    scope: &mut Scope<'_>,
    decided: Result<(), Failure>,
) -> Result<Next, ReconcileError> {
    let plan = &mut scope.plan;
    Ok(match decided {
        Ok(()) => std::mem::replace(&mut plan.next, Next::AwaitChange),
        Err(Failure::Waiting(reason, message)) => {
            plan.condition(condition::READY, ConditionStatus::False, reason, message);
            Next::Requeue(scope.context.retry.policy.poll)
        }
        Err(Failure::Invalid(reason, message)) => {
            plan.condition(
                condition::READY,
                ConditionStatus::False,
                reason,
                message.clone(),
            );
            plan.event(true, reasons::INVALID_CONFIGURATION, message);
            Next::InvalidConfiguration
        }
        Err(Failure::Api(error)) => return Err(ReconcileError::Kube(error)),
    })
}

/// The planned status written if it changed (remembered as this controller's own write), then
/// the pass's events published.
pub(super) async fn write(scope: &Scope<'_>) -> Result<(), ReconcileError> {
    let config = scope.config;
    if patch(scope).await? {
        scope.owners.own_writes.wrote(config);
    }
    write::publish(&scope.context.recorder, config, &scope.plan.events).await;
    Ok(())
}

async fn patch(scope: &Scope<'_>) -> Result<bool, kube::Error> {
    let (config, plan) = (scope.config, &scope.plan);
    let current = config.status.clone().unwrap_or_default();
    let mut desired: KubeadmConfigStatus = current.clone();
    for wanted in &plan.conditions {
        condition::set(&mut desired.conditions, wanted.clone());
    }
    if let Some(name) = scope.data_secret_name.clone() {
        desired.data_secret_name = Some(name);
        desired.initialization = Some(KubeadmConfigInitialization {
            data_secret_created: Some(true),
        });
    }
    desired.observed_generation = config.metadata.generation;
    if desired == current {
        return Ok(false);
    }
    let api: Api<KubeadmConfig> = Api::namespaced(
        scope.context.client.clone(),
        &config.namespace().unwrap_or_default(),
    );
    let status = json!({
        "initialization": desired.initialization,
        "dataSecretName": desired.data_secret_name,
        "observedGeneration": desired.observed_generation,
        "conditions": desired.conditions,
    });
    write::patch_status(&api, &config.name_any(), status).await?;
    Ok(true)
}
