//! Writing a machine [`Plan`]: provider ID first, then the finalizer (when added), then status
//! (only if it changed), then the finalizer (when removed), then events.

use capi_core::infra::{InfraInitialization, InfraMachine, InfraMachineStatus};
use capi_core::{condition, labels};
use capi_runtime::events::EventRecorder;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::decide::{INFRA_MACHINE_FINALIZER, Plan};
use capi_runtime::plan::FinalizerChange;
use capi_runtime::write;

/// Writes the plan for `infra`.
pub(crate) async fn record<M: InfraMachine>(
    client: &Client,
    recorder: &EventRecorder,
    infra: &M,
    plan: &Plan,
) -> Result<(), kube::Error> {
    let name = infra.name_any();
    let api: Api<M> = Api::namespaced(client.clone(), &infra.namespace().unwrap_or_default());

    // The provider ID, before anything else: once it is stored, no later pass can lose track of
    // the instance. A conflict is retried here and never answered by another create.
    let mut generation = infra.meta().generation;
    if let Some(provider_id) = &plan.record.provider_id
        && infra.provider_id() != Some(provider_id.as_str())
    {
        let patch = json!({"spec": {"providerID": provider_id}});
        // A spec change: the generation moves on, and the status written below observes the
        // new one (else the next pass would write it again only to say so).
        let written = write::patch_returning(&api, &name, patch).await?;
        // Only the step this patch made: a spec someone else changed meanwhile was not decided
        // on, and its generation is observed by the pass it triggers, not claimed here.
        let next = generation.map(|g| g + 1);
        if written.meta().generation == next {
            generation = next;
        }
    }
    // The finalizer with the idempotency key, in one write (the key alone for an object that
    // has the finalizer from before keys were recorded).
    match (&plan.record.idempotency_key, plan.finalizer) {
        (Some(key), FinalizerChange::Add) => {
            write::add_finalizer_and_annotate(
                &api,
                infra,
                INFRA_MACHINE_FINALIZER,
                &[(labels::IDEMPOTENCY_KEY, key.as_str())],
            )
            .await?;
        }
        (Some(key), FinalizerChange::Keep) => {
            let patch =
                json!({"metadata": {"annotations": {labels::IDEMPOTENCY_KEY: key.as_str()}}});
            write::patch_returning(&api, &name, patch).await?;
        }
        (_, change) => {
            write::change_finalizer(&api, infra, change, INFRA_MACHINE_FINALIZER).await?;
        }
    }
    // Status, only when it changed: an unchanged pass writes nothing and so triggers nothing.
    // (Not for an object whose finalizer just went: it is about to disappear.)
    if plan.finalizer != FinalizerChange::Remove {
        let current = infra.infra_status().cloned().unwrap_or_default();
        let desired = desired_status(&current, plan, generation);
        let stored = serde_json::to_value(infra)
            .ok()
            .and_then(|o| o.get("status").cloned())
            .unwrap_or_default();
        let provider_changes = plan.record.provider_status.changes_from(&stored);
        if desired != current || !provider_changes.is_empty() {
            let mut status = provider_changes;
            for (field, value) in [
                ("initialization", json!(desired.initialization)),
                ("addresses", json!(desired.addresses)),
                ("failureDomain", json!(desired.failure_domain)),
                ("conditions", json!(desired.conditions)),
            ] {
                status.insert(field.to_string(), value);
            }
            write::patch_status(&api, &name, serde_json::Value::Object(status)).await?;
        }
    }
    write::publish(recorder, infra, &plan.events).await;
    Ok(())
}

/// The status after applying the plan to `current`; timestamps of unchanged conditions are kept.
/// Conditions the plan stamped with the generation it was decided at observe `generation`, the
/// object's generation once the plan's own spec write (the provider ID) is in.
pub(crate) fn desired_status(
    current: &InfraMachineStatus,
    plan: &Plan,
    generation: Option<i64>,
) -> InfraMachineStatus {
    let mut desired = current.clone();
    for wanted in &plan.conditions {
        let mut wanted = wanted.clone();
        if wanted.observed_generation == plan.generation() {
            wanted.observed_generation = generation;
        }
        condition::set(&mut desired.conditions, wanted);
    }
    if let Some(addresses) = &plan.record.addresses {
        desired.addresses = addresses.clone();
    }
    if plan.record.failure_domain.is_some() {
        desired.failure_domain = plan.record.failure_domain.clone();
    }
    if plan.record.provisioned {
        desired.initialization = Some(InfraInitialization {
            provisioned: Some(true),
        });
    }
    desired
}
