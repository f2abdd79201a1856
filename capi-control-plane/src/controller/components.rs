//! The components phase of a pass: reads each control-plane node's static pods through the
//! workload cluster (one LIST per node, `kube-system` pods bound to it), judges them and the
//! node's etcd member ([`crate::components`]), and writes the judgements as the machine's
//! conditions when they changed.

use capi_core::api::{Cluster, Machine};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_runtime::write;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::machines::node_name;
use crate::components::{self, Judgement, NodeView};
use crate::etcd::EtcdClusterStatus;
use crate::workload::WorkloadClients;

/// The judgements of each machine, in `machines`' order: empty for a machine without a node or
/// being deleted. `etcd` is what etcd said, or why it could not be read.
pub(super) async fn observe(
    workloads: &WorkloadClients,
    management: &kube::Client,
    cluster: &Cluster,
    machines: &[Machine],
    etcd: Result<&EtcdClusterStatus, &str>,
) -> Vec<Vec<Judgement>> {
    let judged: Vec<(usize, &str)> = machines
        .iter()
        .enumerate()
        .filter(|(_, m)| m.metadata.deletion_timestamp.is_none())
        .filter_map(|(i, m)| Some((i, node_name(m)?)))
        .collect();
    let mut out = vec![Vec::new(); machines.len()];
    if judged.is_empty() {
        return out;
    }
    let pods = match workloads.for_cluster(management, cluster).await {
        Ok(workload) => Ok(Api::<Pod>::namespaced(workload, "kube-system")),
        Err(error) => Err(error.to_string()),
    };
    for (i, node) in judged {
        let listed = match &pods {
            Ok(pods) => pods
                .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
                .await
                .map(|l| l.items)
                .map_err(|e| format!("listing the pods of node {node}: {e}")),
            Err(why) => Err(why.clone()),
        };
        let reporting = machines[i]
            .status
            .as_ref()
            .and_then(|s| condition::status(&s.conditions, condition::NODE_READY))
            != Some(ConditionStatus::Unknown);
        // The etcd pod is judged with the rest: this control plane runs stacked etcd.
        let mut judgements = match &listed {
            Ok(pods) => components::judge_node(node, NodeView::Read { reporting, pods }, true),
            Err(why) => components::judge_node(node, NodeView::Unreadable(why), true),
        };
        judgements.push(components::judge_member(node, etcd.map(|s| s.member(node))));
        out[i] = judgements;
    }
    out
}

/// Writes each machine's judgements as its conditions where they changed (a guarded write: a
/// conflict fails the pass, which runs again on fresh data), replacing the machine with what was
/// written so that later writes of the pass start from it.
pub(super) async fn record(
    machines_api: &Api<Machine>,
    machines: &mut [Machine],
    judgements: &[Vec<Judgement>],
) -> Result<(), kube::Error> {
    for (machine, judged) in machines.iter_mut().zip(judgements) {
        if judged.is_empty() {
            continue;
        }
        let mut conditions = machine
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let mut changed = false;
        for j in judged {
            changed |= condition::set(
                &mut conditions,
                DesiredCondition::new(j.type_, j.status, j.reason)
                    .message(j.message.clone())
                    .observed_generation(machine.metadata.generation),
            );
        }
        if changed {
            tracing::debug!(machine = %machine.name_any(), "component conditions changed");
            if let Some(written) = write::patch_status_guarded(
                machines_api,
                machine,
                json!({"conditions": conditions}),
            )
            .await?
            {
                *machine = written;
            }
        }
    }
    Ok(())
}
