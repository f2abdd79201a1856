//! Writing a [`Plan`]: provider ID first, then status (only if it changed), then the finalizer, then
//! events.

use std::time::Duration;

use capi_core::condition;
use capi_core::infra::{InfraInitialization, InfraMachine, InfraMachineStatus};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::decide::{FinalizerChange, INFRA_MACHINE_FINALIZER, Plan};

/// How often a write that meets a conflict (409) is retried before the reconcile fails.
const CONFLICT_RETRIES: u32 = 5;

/// Writes the plan for `infra`.
pub(crate) async fn record<M: InfraMachine>(
    client: &Client,
    recorder: &Recorder,
    infra: &M,
    plan: &Plan,
) -> Result<(), kube::Error> {
    let name = infra.name_any();
    let params = PatchParams::default();
    let api: Api<M> = Api::namespaced(client.clone(), &infra.namespace().unwrap_or_default());

    // 1. The provider ID, before anything else: once it is stored, no later pass can lose track of
    //    the instance. A conflict is retried here and never answered by another create.
    if let Some(provider_id) = &plan.provider_id
        && infra.provider_id() != Some(provider_id.as_str())
    {
        let patch = Patch::Merge(json!({"spec": {"providerID": provider_id}}));
        with_conflict_retries(|| api.patch(&name, &params, &patch)).await?;
    }

    // 2. The finalizer, when added: before the status write, with the resource version we read, so
    //    that a concurrent change fails the patch instead of being overwritten.
    if plan.finalizer == FinalizerChange::Add {
        let mut finalizers = infra.finalizers().to_vec();
        finalizers.push(INFRA_MACHINE_FINALIZER.to_string());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": infra.resource_version()}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }

    // 3. Status, only when it changed: an unchanged pass writes nothing and so triggers nothing.
    if plan.finalizer != FinalizerChange::Remove {
        let current = infra.infra_status().cloned().unwrap_or_default();
        let desired = desired_status(&current, plan);
        if desired != current {
            let patch = Patch::Merge(json!({"status": {
                "initialization": desired.initialization,
                "addresses": desired.addresses,
                "conditions": desired.conditions,
            }}));
            match with_conflict_retries(|| api.patch_status(&name, &params, &patch)).await {
                Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(()),
                other => {
                    other?;
                }
            }
        }
    }

    // 4. The finalizer, when removed: a JSON patch that tests the list first, so that only our
    //    entry goes and only if nobody changed the list meanwhile.
    if plan.finalizer == FinalizerChange::Remove {
        let current = infra.finalizers().to_vec();
        let remaining: Vec<&String> = current
            .iter()
            .filter(|f| *f != INFRA_MACHINE_FINALIZER)
            .collect();
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "replace", "path": "/metadata/finalizers", "value": remaining},
        ]))
        .map_err(kube::Error::SerdeError)?;
        match api
            .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
        {
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            other => {
                other?;
            }
        }
    }

    // 5. Events, best effort: a user-facing nicety must not fail the reconcile.
    let reference = infra.object_ref(&());
    for note in &plan.events {
        let event = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.to_string(),
            note: Some(note.note.clone()),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        if let Err(error) = recorder.publish(&event, &reference).await {
            tracing::debug!(%error, reason = note.reason, "could not publish an event");
        }
    }
    Ok(())
}

/// The status after applying the plan to `current`; timestamps of unchanged conditions are kept.
pub(crate) fn desired_status(current: &InfraMachineStatus, plan: &Plan) -> InfraMachineStatus {
    let mut desired = current.clone();
    for wanted in &plan.conditions {
        condition::set(&mut desired.conditions, wanted.clone());
    }
    if let Some(addresses) = &plan.addresses {
        desired.addresses = addresses.clone();
    }
    if plan.provisioned {
        desired.initialization = Some(InfraInitialization {
            provisioned: Some(true),
        });
    }
    desired
}

async fn with_conflict_retries<T, F, Fut>(mut write: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match write().await {
            Err(kube::Error::Api(status)) if status.is_conflict() && attempt < CONFLICT_RETRIES => {
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            }
            other => return other,
        }
    }
}
