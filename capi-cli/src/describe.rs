//! `capictl describe cluster`: a cluster as a tree — Cluster → infrastructure cluster → control
//! plane (a control plane provider's object such as a `KubeadmControlPlane` with its machines, by
//! its `Available` condition, or control-plane machines of MachineDeployments) →
//! MachineDeployments → MachineSets → Machines, and MachinePools → their infrastructure pool and
//! Machines — with each object's readiness, reason, age and message, like `clusterctl describe
//! cluster`.

use std::sync::Arc;

use capi_core::api::{
    Cluster, ContractVersionedObjectReference, Machine, MachineDeployment, MachinePool, MachineSet,
};
use capi_core::condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt};

/// One line of the tree and what is below it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TreeNode {
    /// `Kind/name`, or a group's title.
    pub label: String,
    /// `True`, `False` or `Unknown` (empty for a group).
    pub ready: String,
    /// The readiness condition's reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// When it last changed (or the object was created).
    pub since: Option<jiff::Timestamp>,
    /// Every condition, for `--show-conditions`.
    pub conditions: Vec<Condition>,
    /// What is below.
    pub children: Vec<TreeNode>,
}

fn from_conditions(
    label: String,
    conditions: &[Condition],
    type_: &str,
    created: Option<jiff::Timestamp>,
) -> TreeNode {
    let found = condition::get(conditions, type_);
    TreeNode {
        label,
        ready: found.map_or_else(|| "Unknown".to_string(), |c| c.status.clone()),
        reason: found.map(|c| c.reason.clone()).unwrap_or_default(),
        message: found.map(|c| c.message.clone()).unwrap_or_default(),
        since: found.map(|c| c.last_transition_time.0).or(created),
        conditions: conditions.to_vec(),
        children: Vec::new(),
    }
}

fn group(label: &str, children: Vec<TreeNode>) -> TreeNode {
    TreeNode {
        label: label.to_string(),
        children,
        ..TreeNode::default()
    }
}

async fn referenced(
    client: &Client,
    reference: &ContractVersionedObjectReference,
    namespace: &str,
) -> Option<DynamicObject> {
    let group = kube::discovery::group(client, &reference.api_group)
        .await
        .ok()?;
    let (resource, _) = group.recommended_kind(&reference.kind)?;
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource)
        .get_opt(&reference.name)
        .await
        .ok()
        .flatten()
}

/// The node of an object the cluster refers to (its infrastructure cluster, its control plane),
/// labelled `<title> - Kind/name`, with the object's `condition` as its readiness; a missing
/// object shows as `NotFound`. Returns the object's UID too, to find what it controls.
async fn referenced_node(
    client: &Client,
    reference: &ContractVersionedObjectReference,
    namespace: &str,
    title: &str,
    condition: &str,
) -> (TreeNode, Option<String>) {
    let label = format!("{title} - {}/{}", reference.kind, reference.name);
    match referenced(client, reference, namespace).await {
        Some(object) => {
            let conditions: Vec<Condition> =
                serde_json::from_value(object.data["status"]["conditions"].clone())
                    .unwrap_or_default();
            let node = from_conditions(
                label,
                &conditions,
                condition,
                object.metadata.creation_timestamp.as_ref().map(|t| t.0),
            );
            (node, object.metadata.uid)
        }
        None => (
            TreeNode {
                label,
                ready: "False".into(),
                reason: "NotFound".into(),
                ..TreeNode::default()
            },
            None,
        ),
    }
}

fn machine_node(machine: &Machine) -> TreeNode {
    let conditions = machine
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut node = from_conditions(
        format!("Machine/{}", machine.name_any()),
        &conditions,
        condition::READY,
        machine.metadata.creation_timestamp.as_ref().map(|t| t.0),
    );
    if machine.metadata.deletion_timestamp.is_some() {
        node.reason = "Deleting".into();
    }
    node
}

/// Reads the cluster `name` in `namespace` and everything below it.
pub async fn tree(client: &Client, namespace: &str, name: &str) -> Result<TreeNode, kube::Error> {
    let cluster = Api::<Cluster>::namespaced(client.clone(), namespace)
        .get(name)
        .await?;
    let conditions = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut root = from_conditions(
        format!("Cluster/{name}"),
        &conditions,
        condition::AVAILABLE,
        cluster.metadata.creation_timestamp.as_ref().map(|t| t.0),
    );
    if let Some(reference) = &cluster.spec.infrastructure_ref {
        let (node, _) = referenced_node(
            client,
            reference,
            namespace,
            "ClusterInfrastructure",
            condition::READY,
        )
        .await;
        root.children.push(node);
    }
    let list = ListParams::default();
    let in_cluster = |c: &str| c == name;
    let deployments: Vec<MachineDeployment> =
        Api::<MachineDeployment>::namespaced(client.clone(), namespace)
            .list(&list)
            .await?
            .items
            .into_iter()
            .filter(|d| in_cluster(&d.spec.cluster_name))
            .collect();
    let sets: Vec<MachineSet> = Api::<MachineSet>::namespaced(client.clone(), namespace)
        .list(&list)
        .await?
        .items
        .into_iter()
        .filter(|s| in_cluster(&s.spec.cluster_name))
        .collect();
    let pools: Vec<MachinePool> = Api::<MachinePool>::namespaced(client.clone(), namespace)
        .list(&list)
        .await?
        .items
        .into_iter()
        .filter(|p| in_cluster(&p.spec.cluster_name))
        .collect();
    let mut machines: Vec<Arc<Machine>> = Api::<Machine>::namespaced(client.clone(), namespace)
        .list(&list)
        .await?
        .items
        .into_iter()
        .filter(|m| in_cluster(&m.spec.cluster_name))
        .map(Arc::new)
        .collect();
    machines.sort_by_key(|m| m.name_any());
    let controlled_by = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                         uid: &Option<String>| {
        meta.owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
    };
    let set_node = |set: &MachineSet| {
        let status = set.status.clone().unwrap_or_default();
        let (ready, replicas) = (
            status.ready_replicas.unwrap_or(0),
            status.replicas.unwrap_or(0),
        );
        let mut node = TreeNode {
            label: format!("MachineSet/{}", set.name_any()),
            ready: if ready == replicas && set.spec.replicas == Some(replicas) {
                "True".into()
            } else {
                "False".into()
            },
            reason: format!("{ready}/{} ready", set.spec.replicas.unwrap_or(0)),
            since: set.metadata.creation_timestamp.as_ref().map(|t| t.0),
            conditions: status.conditions.clone(),
            ..TreeNode::default()
        };
        node.children = machines
            .iter()
            .filter(|m| controlled_by(&m.metadata, &set.metadata.uid))
            .map(|m| machine_node(m))
            .collect();
        node
    };
    // A control plane provider's object (a KubeadmControlPlane), with the machines it controls.
    let mut provider_control_plane = None;
    if let Some(reference) = &cluster.spec.control_plane_ref {
        let (mut node, uid) = referenced_node(
            client,
            reference,
            namespace,
            "ControlPlane",
            condition::AVAILABLE,
        )
        .await;
        node.children = machines
            .iter()
            .filter(|m| controlled_by(&m.metadata, &uid))
            .map(|m| machine_node(m))
            .collect();
        provider_control_plane = Some((node, uid));
    }
    let control_plane_uid = provider_control_plane
        .as_ref()
        .and_then(|(_, uid)| uid.clone());
    let mut control_plane = Vec::new();
    let mut workers = Vec::new();
    for deployment in &deployments {
        let conditions = deployment
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let mut node = from_conditions(
            format!("MachineDeployment/{}", deployment.name_any()),
            &conditions,
            condition::AVAILABLE,
            deployment.metadata.creation_timestamp.as_ref().map(|t| t.0),
        );
        node.children = sets
            .iter()
            .filter(|s| controlled_by(&s.metadata, &deployment.metadata.uid))
            .map(set_node)
            .collect();
        let is_control_plane = deployment.spec.template.metadata.as_ref().is_some_and(|m| {
            m.labels
                .contains_key(capi_core::labels::MACHINE_CONTROL_PLANE)
        });
        if is_control_plane {
            control_plane.push(node);
        } else {
            workers.push(node);
        }
    }
    for set in sets.iter().filter(|s| {
        !deployments
            .iter()
            .any(|d| controlled_by(&s.metadata, &d.metadata.uid))
    }) {
        workers.push(set_node(set));
    }
    for pool in &pools {
        let conditions = pool
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let mut node = from_conditions(
            format!("MachinePool/{}", pool.name_any()),
            &conditions,
            condition::AVAILABLE,
            pool.metadata.creation_timestamp.as_ref().map(|t| t.0),
        );
        let status = pool.status.clone().unwrap_or_default();
        if node.message.is_empty() {
            node.message = format!(
                "{}/{} ready",
                status.ready_replicas.unwrap_or(0),
                pool.desired_replicas()
            );
        }
        let (infrastructure, _) = referenced_node(
            client,
            &pool.spec.template.spec.infrastructure_ref,
            namespace,
            "MachinePoolInfrastructure",
            condition::READY,
        )
        .await;
        node.children.push(infrastructure);
        node.children.extend(
            machines
                .iter()
                .filter(|m| controlled_by(&m.metadata, &pool.metadata.uid))
                .map(|m| machine_node(m)),
        );
        workers.push(node);
    }
    for machine in machines.iter().filter(|m| {
        !sets
            .iter()
            .any(|s| controlled_by(&m.metadata, &s.metadata.uid))
            && !pools
                .iter()
                .any(|p| controlled_by(&m.metadata, &p.metadata.uid))
            && !controlled_by(&m.metadata, &control_plane_uid)
    }) {
        if machine.is_control_plane() {
            control_plane.push(machine_node(machine));
        } else {
            workers.push(machine_node(machine));
        }
    }
    if let Some((node, _)) = provider_control_plane {
        root.children.push(node);
    }
    if !control_plane.is_empty() {
        root.children.push(group("ControlPlane", control_plane));
    }
    if !workers.is_empty() {
        root.children.push(group("Workers", workers));
    }
    Ok(root)
}

/// How the tree is printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// ANSI colours for readiness.
    pub color: bool,
    /// A line per condition below each object.
    pub show_conditions: bool,
}

fn age(since: Option<jiff::Timestamp>, now: jiff::Timestamp) -> String {
    let Some(since) = since else {
        return String::new();
    };
    let seconds = now.duration_since(since).as_secs().max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// The tree as text, `now` giving the ages.
pub fn render(root: &TreeNode, now: jiff::Timestamp, style: Style) -> String {
    let mut rows: Vec<[String; 5]> = Vec::new();
    fn walk(
        node: &TreeNode,
        prefix: &str,
        last: bool,
        root: bool,
        now: jiff::Timestamp,
        style: Style,
        rows: &mut Vec<[String; 5]>,
    ) {
        let branch = if root {
            String::new()
        } else if last {
            format!("{prefix}└─")
        } else {
            format!("{prefix}├─")
        };
        rows.push([
            format!("{branch}{}", node.label),
            node.ready.clone(),
            node.reason.clone(),
            age(node.since, now),
            node.message.lines().next().unwrap_or_default().to_string(),
        ]);
        let inner = if root {
            String::new()
        } else if last {
            format!("{prefix}  ")
        } else {
            format!("{prefix}│ ")
        };
        if style.show_conditions {
            for (i, c) in node.conditions.iter().enumerate() {
                let more = i + 1 < node.conditions.len() || !node.children.is_empty();
                rows.push([
                    format!("{inner}{} {}", if more { "├" } else { "└" }, c.type_),
                    c.status.clone(),
                    c.reason.clone(),
                    age(Some(c.last_transition_time.0), now),
                    c.message.lines().next().unwrap_or_default().to_string(),
                ]);
            }
        }
        for (i, child) in node.children.iter().enumerate() {
            walk(
                child,
                &inner,
                i + 1 == node.children.len(),
                false,
                now,
                style,
                rows,
            );
        }
    }
    walk(root, "", true, true, now, style, &mut rows);
    let header = ["NAME", "READY", "REASON", "SINCE", "MESSAGE"].map(String::from);
    let width = |i: usize| {
        rows.iter()
            .chain(std::iter::once(&header))
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths = [width(0), width(1), width(2), width(3)];
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let ready = if style.color {
            let code = match row[1].as_str() {
                "True" => "32",
                "False" => "31",
                "Unknown" => "33",
                _ => "0",
            };
            format!("\x1b[{code}m{:<w$}\x1b[0m", row[1], w = widths[1])
        } else {
            format!("{:<w$}", row[1], w = widths[1])
        };
        let pad = widths[0].saturating_sub(row[0].chars().count());
        let line = format!(
            "{}{}  {ready}  {:<w2$}  {:<w3$}  {}",
            row[0],
            " ".repeat(pad),
            row[2],
            row[3],
            row[4],
            w2 = widths[2],
            w3 = widths[3],
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_tree_with_branches_and_ages() {
        let now = jiff::Timestamp::from_second(10_000).unwrap_or_default();
        let at = |s: i64| Some(jiff::Timestamp::from_second(s).unwrap_or_default());
        let machine = |name: &str, ready: &str| TreeNode {
            label: format!("Machine/{name}"),
            ready: ready.into(),
            since: at(9_990),
            ..TreeNode::default()
        };
        let root = TreeNode {
            label: "Cluster/demo".into(),
            ready: "True".into(),
            since: at(10_000 - 300),
            children: vec![
                TreeNode {
                    label: "ClusterInfrastructure - InMemoryCluster/demo".into(),
                    ready: "True".into(),
                    since: at(10_000 - 7200),
                    ..TreeNode::default()
                },
                group(
                    "Workers",
                    vec![TreeNode {
                        label: "MachineDeployment/md".into(),
                        ready: "False".into(),
                        reason: "NotReady".into(),
                        message: "1 available machines, at least 2 needed\nmore".into(),
                        children: vec![machine("a", "True"), machine("b", "False")],
                        ..TreeNode::default()
                    }],
                ),
            ],
            ..TreeNode::default()
        };
        let text = render(&root, now, Style::default());
        let expected = "\
NAME                                            READY  REASON    SINCE  MESSAGE
Cluster/demo                                    True             5m
├─ClusterInfrastructure - InMemoryCluster/demo  True             2h
└─Workers
  └─MachineDeployment/md                        False  NotReady         1 available machines, at least 2 needed
    ├─Machine/a                                 True             10s
    └─Machine/b                                 False            10s
";
        assert_eq!(text, expected);
        assert!(
            render(
                &root,
                now,
                Style {
                    color: true,
                    show_conditions: false
                }
            )
            .contains("\x1b[32mTrue")
        );
    }
}
