//! Deleting a Machine, in upstream's order: wait for the pre-drain hooks, drain the node (unless
//! the whole cluster is going), wait for the pre-terminate hooks, delete the infrastructure machine and the bootstrap config and wait until they are gone,
//! delete the bootstrap data Secret the config owned, delete the node, drop the finalizer.

use std::time::Duration;

use capi_core::api::{Cluster, Machine, MachinePhase};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::MachineController;
use super::drain::{DrainStatus, drain};
use crate::references::Confirm;
use capi_runtime::plan::{EventNote, FinalizerChange, Next};
use capi_runtime::reasons;
use capi_runtime::write;
use capi_runtime::{Context, ReconcileError};

/// One pass of deleting `machine`.
pub(super) async fn delete(
    machine: &Machine,
    cluster: Option<&Cluster>,
    context: &Context<MachineController>,
) -> Result<Next, ReconcileError> {
    let has_finalizer = machine
        .finalizers()
        .iter()
        .any(|f| f == labels::MACHINE_FINALIZER);
    if !has_finalizer {
        return Ok(Next::AwaitChange);
    }
    let deps = &context.state;
    let namespace = machine.namespace().unwrap_or_default();
    let api: Api<Machine> = Api::namespaced(context.client.clone(), &namespace);
    let cluster_going = cluster.is_none_or(|c| c.metadata.deletion_timestamp.is_some());
    let node_name = machine
        .status
        .as_ref()
        .and_then(|s| s.node_ref.as_ref())
        .map(|n| n.name.clone());
    let now = jiff::Timestamp::now();

    if let Some(next) = wait_for_hooks(
        machine,
        &api,
        labels::PRE_DRAIN_HOOK_PREFIX,
        reasons::WAITING_FOR_PRE_DRAIN_HOOK,
        deps.settings.poll,
    )
    .await?
    {
        return Ok(next);
    }

    if let Some(node) = &node_name
        && !cluster_going
    {
        let drain_started = machine
            .status
            .as_ref()
            .and_then(|s| s.deletion.as_ref())
            .and_then(|d| d.node_drain_start_time.clone());
        let Some(started) = drain_started else {
            let status = deleting_status(machine, reasons::DRAINING_NODE, "draining the node");
            let mut value = status;
            value["deletion"] = json!({"nodeDrainStartTime": Time(now)});
            write::patch_status_guarded(&api, machine, value).await?;
            // The loop ignores its own status writes: look again right away.
            return Ok(Next::Requeue(Duration::ZERO));
        };
        let timeout = machine
            .spec
            .deletion
            .as_ref()
            .and_then(|d| d.node_drain_timeout_seconds)
            .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
            .filter(|d| !d.is_zero())
            .or(deps.settings.node_drain_timeout);
        let elapsed = Duration::try_from(now.duration_since(started.0)).unwrap_or_default();
        let timed_out = timeout.is_some_and(|t| elapsed >= t);
        if !timed_out {
            let workload = deps
                .workloads
                .get(&namespace, &machine.spec.cluster_name)
                .await;
            // A workload cluster that cannot be reached cannot be drained: upstream goes on.
            if let Err(error) = &workload {
                tracing::info!(node, %error, "cannot reach the workload cluster; not draining");
            }
            if let Ok(workload) = workload {
                let result = drain(&workload.client, node).await;
                tracing::debug!(node, ?result, "drained");
                match result {
                    Ok(DrainStatus::Drained) => {}
                    Ok(DrainStatus::Waiting(message)) => {
                        let status = deleting_status(machine, reasons::DRAINING_NODE, &message);
                        write::patch_status_guarded(&api, machine, status).await?;
                        return Ok(Next::Requeue(deps.settings.poll));
                    }
                    Err(error) => {
                        deps.workloads
                            .recheck(&namespace, &machine.spec.cluster_name);
                        let message = format!("draining node {node} failed: {error}");
                        let status = deleting_status(machine, reasons::DRAINING_NODE, &message);
                        write::patch_status_guarded(&api, machine, status).await?;
                        return Err(error.into());
                    }
                }
            }
        } else {
            let note = EventNote {
                warning: true,
                reason: reasons::DRAIN_TIMEOUT,
                note: format!(
                    "draining node {node} took longer than {}s; deleting the machine anyway",
                    timeout.unwrap_or_default().as_secs()
                ),
            };
            write::publish(&context.recorder, machine, &[note]).await;
        }
    }

    if let Some(next) = wait_for_hooks(
        machine,
        &api,
        labels::PRE_TERMINATE_HOOK_PREFIX,
        reasons::WAITING_FOR_PRE_TERMINATE_HOOK,
        deps.settings.poll,
    )
    .await?
    {
        return Ok(next);
    }

    // The infrastructure and bootstrap objects, and wait until they are gone: as the caches see
    // it on every pass, confirmed by the API server once, when the caches say both went.
    let mut references = vec![&machine.spec.infrastructure_ref];
    references.extend(&machine.spec.bootstrap.config_ref);
    let mut left = Vec::new();
    for confirm in [Confirm::Nothing, Confirm::Absence] {
        for reference in &references {
            if deps
                .references
                .delete(reference, &namespace, confirm)
                .await?
            {
                left.push(format!("{} {:?}", reference.kind, reference.name));
            }
        }
        if !left.is_empty() {
            break;
        }
    }
    if !left.is_empty() {
        let message = format!("waiting for {} to be deleted", left.join(" and "));
        let status = deleting_status(
            machine,
            reasons::WAITING_FOR_INFRASTRUCTURE_DELETION,
            &message,
        );
        if Some(&status) != current_deleting(machine).as_ref() {
            write::patch_status_guarded(&api, machine, status).await?;
        }
        return Ok(Next::Requeue(deps.settings.poll));
    }

    // Once its config is gone (no new data can be rendered into it), the data Secret.
    delete_bootstrap_secret(&machine.spec.bootstrap, &namespace, &context.client).await?;

    // The node, unless the whole cluster is going.
    if let Some(node) = &node_name
        && !cluster_going
    {
        let result = match deps
            .workloads
            .get(&namespace, &machine.spec.cluster_name)
            .await
        {
            Ok(workload) => write::delete(&Api::<Node>::all(workload.client), node)
                .await
                .map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        if let Err(message) = result {
            let timeout = machine
                .spec
                .deletion
                .as_ref()
                .and_then(|d| d.node_deletion_timeout_seconds)
                .map_or(deps.settings.node_deletion_timeout, |s| {
                    Duration::from_secs(u64::try_from(s).unwrap_or(0))
                });
            let since = machine
                .metadata
                .deletion_timestamp
                .as_ref()
                .map_or(now, |t| t.0);
            let elapsed = Duration::try_from(now.duration_since(since)).unwrap_or_default();
            if elapsed < timeout {
                deps.workloads
                    .recheck(&namespace, &machine.spec.cluster_name);
                let status = deleting_status(machine, reasons::NODE_DELETION_FAILED, &message);
                write::patch_status_guarded(&api, machine, status).await?;
                return Ok(Next::Requeue(deps.settings.poll));
            }
            let note = EventNote {
                warning: true,
                reason: reasons::NODE_DELETION_FAILED,
                note: format!(
                    "could not delete node {node} within {}s: {message}",
                    timeout.as_secs()
                ),
            };
            write::publish(&context.recorder, machine, &[note]).await;
        }
    }
    write::change_finalizer(
        &api,
        machine,
        FinalizerChange::Remove,
        labels::MACHINE_FINALIZER,
    )
    .await?;
    Ok(Next::AwaitChange)
}

/// While hooks with `prefix` are on the machine, says so in its `Deleting` condition and waits
/// (the hook's owner removes the annotation; the change triggers the next pass, the poll is a
/// safety net).
async fn wait_for_hooks(
    machine: &Machine,
    api: &Api<Machine>,
    prefix: &str,
    reason: &str,
    poll: Duration,
) -> Result<Option<Next>, ReconcileError> {
    let hooks: Vec<&str> = labels::deletion_hooks(&machine.metadata, prefix).collect();
    if hooks.is_empty() {
        return Ok(None);
    }
    let message = format!("waiting for hooks {} to be removed", hooks.join(", "));
    let status = deleting_status(machine, reason, &message);
    if Some(&status) != current_deleting(machine).as_ref() {
        write::patch_status_guarded(api, machine, status).await?;
    }
    Ok(Some(Next::Requeue(poll)))
}

/// The bootstrap data Secret of `bootstrap` (a machine's, or a pool's) goes with its owner when
/// its config owned it (no garbage collector is needed for that).
pub(crate) async fn delete_bootstrap_secret(
    bootstrap: &capi_core::api::Bootstrap,
    namespace: &str,
    client: &kube::Client,
) -> Result<(), kube::Error> {
    let Some(config) = &bootstrap.config_ref else {
        return Ok(());
    };
    // An owner deleted before it recorded its data Secret may still have one: the bootstrap
    // provider names it after the config. Only a Secret the config owns is ever deleted.
    let name = bootstrap
        .data_secret_name
        .as_deref()
        .unwrap_or(config.name.as_str());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let Some(secret) = secrets.get_metadata_opt(name).await? else {
        return Ok(());
    };
    let owned_by_config = secret
        .owner_references()
        .iter()
        .any(|r| r.kind == config.kind && r.name == config.name);
    if owned_by_config {
        write::delete(&secrets, name).await?;
    }
    Ok(())
}

/// The status patch of a deleting machine: phase `Deleting` and the `Deleting` condition.
fn deleting_status(machine: &Machine, reason: &str, message: &str) -> serde_json::Value {
    let mut conditions = machine
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    condition::set(
        &mut conditions,
        DesiredCondition::new(condition::DELETING, ConditionStatus::True, reason)
            .message(message)
            .observed_generation(machine.metadata.generation),
    );
    json!({"phase": MachinePhase::Deleting, "conditions": conditions})
}

/// The status patch that would change nothing about deletion.
fn current_deleting(machine: &Machine) -> Option<serde_json::Value> {
    let status = machine.status.as_ref()?;
    Some(json!({"phase": status.phase, "conditions": status.conditions}))
}
