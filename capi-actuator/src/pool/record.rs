//! Writing a pool [`Plan`]: the scale set's identifier and the provider ID list first, then the
//! finalizer (when added) with the idempotency key, then status (only if it changed), then the
//! machines standing for the instances, then the finalizer (when removed: after the machines, so
//! that none is left holding a finalizer nobody will remove), then events.

use capi_core::api::Machine;
use capi_core::infra::{InfraInitialization, InfraMachinePool, InfraMachinePoolStatus};
use capi_core::{condition, labels};
use capi_runtime::events::EventRecorder;
use kube::api::PostParams;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::decide::{INFRA_MACHINE_POOL_FINALIZER, Plan};
use super::members::POOL_MACHINE_FINALIZER;
use capi_runtime::plan::FinalizerChange;
use capi_runtime::write;

/// Writes the plan for `infra`.
pub(crate) async fn record<P: InfraMachinePool>(
    client: &Client,
    recorder: &EventRecorder,
    infra: &P,
    plan: &Plan<P::Machine>,
) -> Result<(), kube::Error> {
    let name = infra.name_any();
    let namespace = infra.namespace().unwrap_or_default();
    let api: Api<P> = Api::namespaced(client.clone(), &namespace);

    // What the scale set is and which instances it has, before anything else: the `MachinePool`
    // controller reads the list from here, whatever the conditions say.
    let mut generation = infra.meta().generation;
    if let Some(report) = &plan.record.report {
        let ids = &plan.record.provider_ids;
        if infra.provider_id() != Some(report.provider_id.as_str())
            || infra.provider_id_list() != ids.as_slice()
        {
            let patch = json!({"spec": {"providerID": report.provider_id, "providerIDList": ids}});
            let written = write::patch_returning(&api, &name, patch).await?;
            let next = generation.map(|g| g + 1);
            if written.meta().generation == next {
                generation = next;
            }
        }
    }
    match (&plan.record.idempotency_key, plan.finalizer) {
        (Some(key), FinalizerChange::Add) => {
            write::add_finalizer_and_annotate(
                &api,
                infra,
                INFRA_MACHINE_POOL_FINALIZER,
                &[(labels::IDEMPOTENCY_KEY, key.as_str())],
            )
            .await?;
        }
        (Some(key), FinalizerChange::Keep) => {
            let patch =
                json!({"metadata": {"annotations": {labels::IDEMPOTENCY_KEY: key.as_str()}}});
            write::patch_returning(&api, &name, patch).await?;
        }
        (_, FinalizerChange::Add) => {
            write::change_finalizer(
                &api,
                infra,
                FinalizerChange::Add,
                INFRA_MACHINE_POOL_FINALIZER,
            )
            .await?;
        }
        (_, FinalizerChange::Keep | FinalizerChange::Remove) => {}
    }
    if plan.finalizer != FinalizerChange::Remove {
        let current = infra.pool_status().cloned().unwrap_or_default();
        let desired = desired_status::<P>(&current, plan, generation);
        let stored = serde_json::to_value(infra)
            .ok()
            .and_then(|o| o.get("status").cloned())
            .unwrap_or_default();
        let provider_changes = plan
            .record
            .report
            .as_ref()
            .map(|r| r.provider_status.changes_from(&stored))
            .unwrap_or_default();
        if desired != current || !provider_changes.is_empty() {
            let mut status = provider_changes;
            for (field, value) in [
                ("initialization", json!(desired.initialization)),
                ("ready", json!(desired.ready)),
                ("replicas", json!(desired.replicas)),
                (
                    "infrastructureMachineKind",
                    json!(desired.infrastructure_machine_kind),
                ),
                ("conditions", json!(desired.conditions)),
            ] {
                status.insert(field.to_string(), value);
            }
            write::patch_status(&api, &name, serde_json::Value::Object(status)).await?;
        }
    }
    record_members::<P>(client, &namespace, plan).await?;
    if plan.finalizer == FinalizerChange::Remove {
        write::change_finalizer(
            &api,
            infra,
            FinalizerChange::Remove,
            INFRA_MACHINE_POOL_FINALIZER,
        )
        .await?;
    }
    write::publish(recorder, infra, &plan.events).await;
    Ok(())
}

/// The writes of the machines standing for the pool's instances.
async fn record_members<P: InfraMachinePool>(
    client: &Client,
    namespace: &str,
    plan: &Plan<P::Machine>,
) -> Result<(), kube::Error> {
    let members = &plan.record.members;
    let api: Api<P::Machine> = Api::namespaced(client.clone(), namespace);
    for member in &members.create {
        match api.create(&PostParams::default(), member).await {
            // Made by an earlier pass whose write the watch has not shown yet.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            other => drop(other?),
        }
    }
    for (name, status) in &members.status {
        let patch = json!({
            "initialization": status.initialization,
            "addresses": status.addresses,
            "failureDomain": status.failure_domain,
            "conditions": status.conditions,
        });
        write::patch_status(&api, name, patch).await?;
    }
    let machines: Api<Machine> = Api::namespaced(client.clone(), namespace);
    for name in &members.delete_machines {
        write::delete(&machines, name).await?;
    }
    for name in &members.delete_members {
        write::delete(&api, name).await?;
    }
    for member in &members.release_finalizer {
        write::change_finalizer(
            &api,
            member.as_ref(),
            FinalizerChange::Remove,
            POOL_MACHINE_FINALIZER,
        )
        .await?;
    }
    Ok(())
}

/// The pool's status after applying the plan to `current`; timestamps of unchanged conditions
/// are kept.
fn desired_status<P: InfraMachinePool>(
    current: &InfraMachinePoolStatus,
    plan: &Plan<P::Machine>,
    generation: Option<i64>,
) -> InfraMachinePoolStatus {
    let mut desired = current.clone();
    for wanted in &plan.conditions {
        let mut wanted = wanted.clone();
        if wanted.observed_generation == plan.generation() {
            wanted.observed_generation = generation;
        }
        condition::set(&mut desired.conditions, wanted);
    }
    if plan.record.report.is_some() {
        desired.initialization = Some(InfraInitialization {
            provisioned: Some(true),
        });
        desired.ready = Some(true);
        desired.replicas = Some(i32::try_from(plan.record.provider_ids.len()).unwrap_or(i32::MAX));
        desired.infrastructure_machine_kind =
            Some(<P::Machine as Resource>::kind(&()).into_owned());
    }
    desired
}
