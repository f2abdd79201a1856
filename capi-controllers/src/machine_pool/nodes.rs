//! A pool's nodes in its workload cluster, matched to its instances by provider ID: the node
//! references and ready/available counts, the annotations upstream puts on a pool's nodes, and
//! the nodes of instances that left the pool deleted.

use std::collections::BTreeSet;
use std::time::Duration;

use capi_core::api::{Cluster, MachinePool};
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::Scope;
use crate::workload::{CachedNode, Workload};
use capi_runtime::ReconcileError;

/// Upstream's annotations on a node: its cluster, and the object that owns it.
const CLUSTER_NAME_ANNOTATION: &str = "cluster.x-k8s.io/cluster-name";
const CLUSTER_NAMESPACE_ANNOTATION: &str = "cluster.x-k8s.io/cluster-namespace";
const OWNER_KIND_ANNOTATION: &str = "cluster.x-k8s.io/owner-kind";
const OWNER_NAME_ANNOTATION: &str = "cluster.x-k8s.io/owner-name";

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
        annotate_new(&workload, pool, &previous, &nodes.refs).await?;
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

/// Puts upstream's annotations (cluster, namespace, owner kind and name) on the nodes the pool
/// references for the first time.
async fn annotate_new(
    workload: &Workload,
    pool: &MachinePool,
    previous: &[ObjectReference],
    refs: &[ObjectReference],
) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(workload.client.clone());
    let patch = json!({"metadata": {"annotations": {
        CLUSTER_NAME_ANNOTATION: pool.spec.cluster_name,
        CLUSTER_NAMESPACE_ANNOTATION: pool.namespace().unwrap_or_default(),
        OWNER_KIND_ANNOTATION: "MachinePool",
        OWNER_NAME_ANNOTATION: pool.name_any(),
    }}});
    for reference in refs.iter().filter(|r| !previous.contains(r)) {
        let Some(name) = reference.name.as_deref() else {
            continue;
        };
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            other => {
                other?;
            }
        }
    }
    Ok(())
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
}
