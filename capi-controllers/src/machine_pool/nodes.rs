//! A pool's nodes in its workload cluster, matched to its instances by provider ID: the node
//! references and ready/available counts, the annotations upstream puts on a pool's nodes, and
//! the nodes of instances that left the pool deleted.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};

use capi_core::api::{Cluster, MachinePool};
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::Scope;
use crate::workload::{
    CLUSTER_NAME_ANNOTATION, CLUSTER_NAMESPACE_ANNOTATION, CachedNode, NodeOwner,
    OWNER_KIND_ANNOTATION, OWNER_NAME_ANNOTATION, Workload,
};
use capi_runtime::ReconcileError;

/// How many node annotations a pass sends at once: a pool's first pass over a thousand new
/// nodes is a thousand round trips to the workload cluster, which one after another would hold
/// the pass (its Machines, its status) for tens of seconds.
const ANNOTATING_AT_ONCE: usize = 16;

/// What the pass found of the pool's nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Nodes {
    /// One reference per provider ID whose node exists, in the provider ID list's order.
    pub(super) refs: Vec<ObjectReference>,
    /// Those whose `Ready` condition is true.
    pub(super) ready: i32,
    /// Those ready for at least the template's `minReadySeconds`.
    pub(super) available: i32,
    /// When to look again: a ready node that becomes available later.
    pub(super) recheck: Option<Duration>,
}

/// The pool's nodes, or `None` while the workload cluster cannot be read (its kubeconfig not
/// there yet, its node cache filling): the status keeps what it said.
pub(super) async fn reconcile(
    scope: &mut Scope<'_>,
    cluster: &Cluster,
) -> Result<Option<Nodes>, ReconcileError> {
    let deps = scope.deps();
    let cluster_name = cluster.name_any();
    let workload = match deps.workloads.get(&scope.namespace, &cluster_name).await {
        Ok(workload) => workload,
        Err(error) => {
            tracing::debug!(%error, "the workload cluster cannot be read yet");
            return Ok(None);
        }
    };
    if !workload.synced() {
        return Ok(None);
    }
    let pool = scope.pool;
    let previous = scope.status.node_refs.clone();
    let result = async {
        delete_retired(&workload, pool, &previous, &scope.provider_ids).await?;
        let nodes = count(
            &scope.provider_ids,
            |id| workload.node_by_provider_id(id),
            min_ready(pool),
            jiff::Timestamp::now().as_second(),
        );
        annotate(&workload, pool, &nodes.refs).await?;
        Ok::<_, kube::Error>(nodes)
    }
    .await;
    match result {
        Ok(nodes) => Ok(Some(nodes)),
        Err(error) => {
            deps.workloads.recheck(&scope.namespace, &cluster_name);
            Err(error.into())
        }
    }
}

fn min_ready(pool: &MachinePool) -> i64 {
    i64::from(
        pool.spec
            .template
            .spec
            .min_ready_seconds
            .unwrap_or(0)
            .max(0),
    )
}

/// The node references and counts for `provider_ids`, with nodes found by `node_of`, at `now`
/// (seconds since the epoch).
fn count(
    provider_ids: &[String],
    node_of: impl Fn(&str) -> Option<std::sync::Arc<CachedNode>>,
    min_ready: i64,
    now: i64,
) -> Nodes {
    let mut nodes = Nodes::default();
    for node in provider_ids.iter().filter_map(|id| node_of(id)) {
        nodes.refs.push(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.name.to_string()),
            uid: node.uid.as_deref().map(str::to_string),
            ..ObjectReference::default()
        });
        let ready = node
            .conditions
            .iter()
            .find(|c| &*c.type_ == "Ready" && &*c.status == "True");
        let Some(ready) = ready else { continue };
        nodes.ready += 1;
        let since = ready.since.unwrap_or(now);
        let left = since + min_ready - now;
        if left <= 0 {
            nodes.available += 1;
        } else {
            let left = Duration::from_secs(left.unsigned_abs());
            nodes.recheck = Some(nodes.recheck.map_or(left, |r| r.min(left)));
        }
    }
    nodes
}

/// Deletes the nodes the pool referenced whose provider ID is no longer in its list (the
/// instance left the scale set) — not while the list is empty and the pool wants instances
/// (nothing was listed yet). Only the node referenced is deleted: one that took its name since
/// (another UID) stays.
async fn delete_retired(
    workload: &Workload,
    pool: &MachinePool,
    previous: &[ObjectReference],
    provider_ids: &[String],
) -> Result<(), kube::Error> {
    if provider_ids.is_empty() && pool.desired_replicas() != 0 {
        return Ok(());
    }
    let listed: BTreeSet<&str> = provider_ids.iter().map(String::as_str).collect();
    let api: Api<Node> = Api::all(workload.client.clone());
    for reference in previous {
        let Some(node) = reference
            .name
            .as_deref()
            .and_then(|name| workload.node(name))
        else {
            continue;
        };
        let same = reference.uid.as_deref() == node.uid.as_deref();
        let retired = node
            .provider_id
            .as_deref()
            .is_some_and(|id| !listed.contains(id));
        if same && retired {
            delete_node(&api, reference).await?;
        }
    }
    Ok(())
}

/// Deletes the node `reference` names, and only if it still has the referenced UID; a node
/// already gone, or replaced by another of its name, is not an error.
pub(super) async fn delete_node(
    api: &Api<Node>,
    reference: &ObjectReference,
) -> Result<(), kube::Error> {
    let Some(name) = reference.name.as_deref() else {
        return Ok(());
    };
    let params = DeleteParams {
        preconditions: reference.uid.clone().map(|uid| kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 409 => Ok(()),
        other => other.map(drop),
    }
}

/// Puts upstream's annotations (cluster, namespace, owner kind and name) on the pool's nodes
/// that do not carry them yet, as the node cache shows them (a pass after a restart, or over a
/// pool object not yet showing its last status, sends nothing for nodes already annotated),
/// [`ANNOTATING_AT_ONCE`] at a time.
async fn annotate(
    workload: &Workload,
    pool: &MachinePool,
    refs: &[ObjectReference],
) -> Result<(), kube::Error> {
    let namespace = pool.namespace().unwrap_or_default();
    let owner = NodeOwner::new(
        &namespace,
        &pool.spec.cluster_name,
        "MachinePool",
        &pool.name_any(),
    );
    let api: Api<Node> = Api::all(workload.client.clone());
    let patch = json!({"metadata": {"annotations": {
        CLUSTER_NAME_ANNOTATION: pool.spec.cluster_name,
        CLUSTER_NAMESPACE_ANNOTATION: namespace,
        OWNER_KIND_ANNOTATION: "MachinePool",
        OWNER_NAME_ANNOTATION: pool.name_any(),
    }}});
    let unannotated: Vec<String> = refs
        .iter()
        .filter_map(|reference| reference.name.clone())
        .filter(|name| {
            workload
                .node(name)
                .is_some_and(|node| node.owner.as_ref() != Some(&owner))
        })
        .collect();
    stream::iter(unannotated)
        .map(|name| annotate_node(&api, name, &patch))
        .buffer_unordered(ANNOTATING_AT_ONCE)
        .try_collect::<()>()
        .await
}

/// Merge-patches node `name` with `patch`; a node gone is not an error.
async fn annotate_node(api: &Api<Node>, name: String, patch: &Value) -> Result<(), kube::Error> {
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        other => other.map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::NodeReading;
    use std::sync::Arc;

    fn node(name: &str, ready_since: Option<i64>) -> Arc<CachedNode> {
        Arc::new(CachedNode {
            name: name.into(),
            uid: Some(format!("uid-{name}").into()),
            provider_id: Some(format!("p:///{name}").into()),
            conditions: ready_since
                .map(|since| NodeReading {
                    type_: "Ready".into(),
                    status: "True".into(),
                    since: Some(since),
                    message: None,
                })
                .into_iter()
                .collect(),
            owner: None,
        })
    }

    #[test]
    fn nodes_are_counted_ready_and_available_after_min_ready_seconds() {
        let nodes = [node("a", Some(100)), node("b", Some(190)), node("c", None)];
        let ids: Vec<String> = ["p:///a", "p:///b", "p:///c", "p:///gone"]
            .map(String::from)
            .to_vec();
        let found = count(
            &ids,
            |id| {
                nodes
                    .iter()
                    .find(|n| n.provider_id.as_deref() == Some(id))
                    .cloned()
            },
            30,
            200,
        );
        let names: Vec<_> = found
            .refs
            .iter()
            .filter_map(|r| r.name.as_deref())
            .collect();
        assert_eq!(
            names,
            ["a", "b", "c"],
            "a provider ID without a node has no reference"
        );
        assert_eq!(found.refs[0].uid.as_deref(), Some("uid-a"));
        assert_eq!(found.ready, 2);
        assert_eq!(
            found.available, 1,
            "b has been ready for 10 of its 30 seconds"
        );
        assert_eq!(found.recheck, Some(Duration::from_secs(20)));
    }

    /// A workload client that answers every request with an empty node after `delay`, and
    /// counts them, the most in flight at once too.
    fn counting_workload(
        nodes: &[Node],
        delay: Duration,
    ) -> (
        Workload,
        Arc<std::sync::atomic::AtomicUsize>,
        Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let sent = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (counter, most) = (Arc::clone(&sent), Arc::clone(&peak));
        let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            counter.fetch_add(1, Ordering::SeqCst);
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let in_flight = Arc::clone(&in_flight);
            async move {
                tokio::time::sleep(delay).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                http::Response::builder()
                    .status(200)
                    .body(kube::client::Body::from(
                        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
                            .to_string()
                            .into_bytes(),
                    ))
            }
        });
        let client = kube::Client::new(service, "default");
        (Workload::cached(client, nodes), sent, peak)
    }

    fn pool() -> MachinePool {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"clusterName": "c", "template": {"spec": {"clusterName": "c",
                "bootstrap": {}, "infrastructureRef":
                    {"apiGroup": "infrastructure.example.com", "kind": "X", "name": "x"}}}},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn workload_node(name: &str, annotated: bool) -> Node {
        let mut node = json!({"metadata": {"name": name, "uid": format!("uid-{name}")},
                              "spec": {"providerID": format!("p:///{name}")}});
        if annotated {
            node["metadata"]["annotations"] = json!({
                CLUSTER_NAMESPACE_ANNOTATION: "ns", CLUSTER_NAME_ANNOTATION: "c",
                OWNER_KIND_ANNOTATION: "MachinePool", OWNER_NAME_ANNOTATION: "p"});
        }
        serde_json::from_value(node).unwrap_or_else(|e| panic!("{e}"))
    }

    fn refs(names: &[String]) -> Vec<ObjectReference> {
        names
            .iter()
            .map(|name| ObjectReference {
                name: Some(name.clone()),
                ..ObjectReference::default()
            })
            .collect()
    }

    #[tokio::test]
    async fn nodes_already_annotated_are_not_annotated_again() {
        use std::sync::atomic::Ordering;
        let names: Vec<String> = (0..50).map(|i| format!("n-{i}")).collect();
        let mut nodes: Vec<Node> = names.iter().map(|n| workload_node(n, true)).collect();
        nodes[7] = workload_node("n-7", false);
        let (workload, sent, _) = counting_workload(&nodes, Duration::ZERO);
        annotate(&workload, &pool(), &refs(&names))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1,
            "only the node without the annotations is patched, whatever the pool's status said"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn new_nodes_are_annotated_several_at_a_time() {
        use std::sync::atomic::Ordering;
        let names: Vec<String> = (0..160).map(|i| format!("n-{i}")).collect();
        let nodes: Vec<Node> = names.iter().map(|n| workload_node(n, false)).collect();
        let (workload, sent, peak) = counting_workload(&nodes, Duration::from_millis(50));
        let started = tokio::time::Instant::now();
        annotate(&workload, &pool(), &refs(&names))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sent.load(Ordering::SeqCst), 160);
        assert_eq!(peak.load(Ordering::SeqCst), ANNOTATING_AT_ONCE);
        assert!(
            started.elapsed() <= Duration::from_millis(50 * 160 / ANNOTATING_AT_ONCE as u64 + 50),
            "{:?}: one round trip after another",
            started.elapsed()
        );
    }
}
