//! Cordoning and draining a workload cluster's node before its machine goes, as `kubectl drain`
//! does: the node is marked unschedulable, then every pod on it is evicted through the eviction
//! API, so that PodDisruptionBudgets are respected (an eviction they forbid is retried later).
//! DaemonSet pods and mirror (static) pods are left alone; they go with the node.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// Where a drain stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DrainStatus {
    /// No pod that must be evicted is left (or the node does not exist).
    Drained,
    /// Pods are still terminating or their eviction is refused; the message says which.
    Waiting(String),
}

/// One pass of draining `node`: cordons it, asks for the eviction of every pod not yet
/// terminating, and reports what is left.
pub(crate) async fn drain(client: &Client, node: &str) -> Result<DrainStatus, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let Some(found) = nodes.get_opt(node).await? else {
        return Ok(DrainStatus::Drained);
    };
    let cordoned = found
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    if !cordoned {
        let patch = json!({"spec": {"unschedulable": true}});
        nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let pods: Api<Pod> = Api::all(client.clone());
    let on_node = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    let mut terminating = 0;
    let mut refused = Vec::new();
    for pod in on_node.items.iter().filter(|p| must_evict(p)) {
        if pod.metadata.deletion_timestamp.is_some() {
            terminating += 1;
            continue;
        }
        let namespace = pod.namespace().unwrap_or_default();
        match evict(client, &namespace, &pod.name_any()).await {
            Ok(_) => terminating += 1,
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            // 429: a PodDisruptionBudget forbids it now.
            Err(kube::Error::Api(status)) if status.code == 429 => {
                refused.push(format!("{namespace}/{}", pod.name_any()));
            }
            Err(error) => return Err(error),
        }
    }
    if terminating == 0 && refused.is_empty() {
        return Ok(DrainStatus::Drained);
    }
    let mut message = format!("draining node {node}: ");
    if terminating > 0 {
        message.push_str(&format!("{terminating} pod(s) terminating"));
    }
    if !refused.is_empty() {
        if terminating > 0 {
            message.push_str("; ");
        }
        message.push_str(&format!(
            "eviction refused by a PodDisruptionBudget for {}",
            refused.join(", ")
        ));
    }
    Ok(DrainStatus::Waiting(message))
}

/// Asks for the eviction of a pod (`policy/v1`: every workload cluster version upstream Cluster
/// API v1.14 supports serves it).
async fn evict(client: &Client, namespace: &str, name: &str) -> Result<(), kube::Error> {
    post_eviction(client, namespace, name, "policy/v1").await
}

async fn post_eviction(
    client: &Client,
    namespace: &str,
    name: &str,
    version: &str,
) -> Result<(), kube::Error> {
    let body = json!({
        "apiVersion": version,
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    });
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(serde_json::to_vec(&body).map_err(kube::Error::SerdeError)?)
    .map_err(kube::Error::HttpError)?;
    client.request_text(request).await.map(drop)
}

/// Whether a drain must evict the pod: not a mirror pod, not a DaemonSet's.
fn must_evict(pod: &Pod) -> bool {
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    let daemon = pod
        .owner_references()
        .iter()
        .any(|r| r.kind == "DaemonSet" && r.controller == Some(true));
    !mirror && !daemon
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn daemon_set_and_mirror_pods_stay() {
        let mut pod = Pod::default();
        assert!(must_evict(&pod));
        pod.metadata.owner_references = Some(vec![OwnerReference {
            kind: "DaemonSet".into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        assert!(!must_evict(&pod));
        let mut mirror = Pod::default();
        mirror.metadata.annotations =
            Some([("kubernetes.io/config.mirror".to_string(), "x".to_string())].into());
        assert!(!must_evict(&mirror));
    }
}
