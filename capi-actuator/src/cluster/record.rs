//! Writing a cluster [`Plan`]: the control plane endpoint, the finalizer, status (only if it
//! changed), events.

use capi_core::condition;
use capi_core::infra::{InfraCluster, InfraClusterStatus, InfraInitialization};
use capi_runtime::events::EventRecorder;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::decide::{INFRA_CLUSTER_FINALIZER, Plan};
use capi_runtime::plan::FinalizerChange;
use capi_runtime::write;

/// Writes the plan for `infra`.
pub(crate) async fn record<C: InfraCluster>(
    client: &Client,
    recorder: &EventRecorder,
    infra: &C,
    plan: &Plan,
) -> Result<(), kube::Error> {
    let name = infra.name_any();
    let api: Api<C> = Api::namespaced(client.clone(), &infra.namespace().unwrap_or_default());
    if let Some(endpoint) = &plan.record.control_plane_endpoint
        && infra.control_plane_endpoint() != Some(endpoint)
    {
        write::patch(
            &api,
            &name,
            json!({"spec": {"controlPlaneEndpoint": endpoint}}),
        )
        .await?;
    }
    write::change_finalizer(&api, infra, plan.finalizer, INFRA_CLUSTER_FINALIZER).await?;
    if plan.finalizer != FinalizerChange::Remove {
        let current = infra.infra_status().cloned().unwrap_or_default();
        let desired = desired_status(&current, plan);
        let stored = serde_json::to_value(infra)
            .ok()
            .and_then(|o| o.get("status").cloned())
            .unwrap_or_default();
        let provider_changes = plan.record.provider_status.changes_from(&stored);
        if desired != current || !provider_changes.is_empty() {
            let mut status = provider_changes;
            for (field, value) in [
                ("initialization", json!(desired.initialization)),
                ("failureDomains", json!(desired.failure_domains)),
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
pub(crate) fn desired_status(current: &InfraClusterStatus, plan: &Plan) -> InfraClusterStatus {
    let mut desired = current.clone();
    for wanted in &plan.conditions {
        condition::set(&mut desired.conditions, wanted.clone());
    }
    if let Some(domains) = &plan.record.failure_domains {
        let mut domains = domains.clone();
        domains.sort_by(|a, b| a.name.cmp(&b.name));
        desired.failure_domains = domains;
    }
    if plan.record.provisioned {
        desired.initialization = Some(InfraInitialization {
            provisioned: Some(true),
        });
    }
    desired
}
