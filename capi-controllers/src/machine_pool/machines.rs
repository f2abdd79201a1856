//! MachinePool Machines: when the infrastructure pool names the kind of the machines it makes for
//! its instances (`status.infrastructureMachineKind`), each such machine labelled with the pool's
//! and cluster's names gets a `Machine` of the same name, controlled by the pool, so that each
//! instance is drained, health-checked and deleted as any machine is.
//!
//! The `Machine` is named after the infrastructure machine, so a create retried after a crash or
//! from a cache that has not seen the last one meets the existing object, never a second one. A
//! machine already being deleted gets none (it would only wait for it). Machines are deleted by
//! the infrastructure provider (it chooses which instances leave) or with the pool.

use std::collections::HashSet;
use std::sync::Arc;

use capi_core::api::{ContractVersionedObjectReference, Machine, MachinePool};
use capi_core::labels;
use kube::ResourceExt;
use kube::api::{DynamicObject, ListParams, PostParams};

use super::Scope;
use super::phases::Infrastructure;
use crate::references::ReferenceError;
use crate::{ownership, synced};
use capi_runtime::ReconcileError;
use capi_runtime::plan::EventNote;
use capi_runtime::reasons;
use capi_runtime::write;
use serde_json::json;

/// The pool's Machines, as far as the pass knows them.
#[derive(Debug, Default)]
pub(super) enum Members {
    /// Its infrastructure pool makes no machines for its instances.
    #[default]
    None,
    /// The Machine cache is still filling: the counts stay as they were.
    Unknown,
    /// The pool's Machines.
    Machines(Vec<Arc<Machine>>),
}

/// The label selector of the objects made for `pool`'s instances (upstream's).
pub(super) fn selector(pool: &MachinePool) -> String {
    format!(
        "{}={},{}={}",
        labels::MACHINE_POOL_NAME,
        labels::label_value(&pool.name_any()),
        labels::CLUSTER_NAME,
        pool.spec.cluster_name
    )
}

/// Whether `machine` (in the pool's namespace) is one of `pool`'s: labelled with its names and
/// controlled by it or by nothing.
pub(super) fn is_member(pool: &MachinePool, uid: &str, machine: &Machine) -> bool {
    let object_labels = machine.labels();
    object_labels
        .get(labels::MACHINE_POOL_NAME)
        .map(String::as_str)
        == Some(&*labels::label_value(&pool.name_any()))
        && object_labels.get(labels::CLUSTER_NAME) == Some(&pool.spec.cluster_name)
        && ownership::controller_of(&machine.metadata).is_none_or(|owner| owner.uid == uid)
}

/// Makes the missing Machines, adopts those of the pool nothing controls (restored from a backup,
/// or made before a crash wrote their owner), and returns the pool's Machines as the cache shows
/// them.
pub(super) async fn reconcile(
    scope: &mut Scope<'_>,
    infra: &Infrastructure,
) -> Result<Members, ReconcileError> {
    let Some(object) = &infra.object else {
        return Ok(Members::None);
    };
    let Some(reference) = machine_kind(object) else {
        return Ok(Members::None);
    };
    let deps = scope.deps();
    let Some(store) = synced(&deps.machines) else {
        return Ok(Members::Unknown);
    };
    let pool = scope.pool;
    let ours: Vec<Arc<Machine>> = store
        .state()
        .into_iter()
        .filter(|m| {
            m.namespace().as_deref() == Some(scope.namespace.as_str())
                && is_member(pool, &scope.uid, m)
        })
        .collect();
    let api = match deps.references.api(&reference, &scope.namespace).await {
        Ok(api) => api,
        Err(
            error @ (ReferenceError::UnknownKind { .. } | ReferenceError::NotAProviderKind { .. }),
        ) => {
            tracing::warn!(%error, "the infrastructure pool names a machine kind that is not a provider's; no Machines are made for its instances");
            return Ok(Members::Machines(ours));
        }
        Err(error) => return Err(error.into()),
    };
    for orphan in ours
        .iter()
        .filter(|m| ownership::controller_of(&m.metadata).is_none())
    {
        let mut owners = orphan.owner_references().to_vec();
        owners.extend(ownership::as_blocking_controller(pool));
        let patch = json!({"metadata": {
            "ownerReferences": owners,
            "resourceVersion": orphan.resource_version(),
        }});
        write::patch(&scope.machines, &orphan.name_any(), patch).await?;
    }
    let made: HashSet<&str> = ours
        .iter()
        .map(|m| m.spec.infrastructure_ref.name.as_str())
        .collect();
    let listed = api
        .list_metadata(&ListParams::default().labels(&selector(pool)))
        .await?;
    let mut created = 0;
    for member in listed.items.iter().filter(|member| {
        member.metadata.deletion_timestamp.is_none()
            && member
                .metadata
                .name
                .as_deref()
                .is_some_and(|name| !made.contains(name))
    }) {
        let machine = machine_for(pool, &reference, &member.name_any());
        match scope
            .machines
            .create(&PostParams::default(), &machine)
            .await
        {
            Ok(_) => created += 1,
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(error) => return Err(error.into()),
        }
    }
    if created > 0 {
        scope.events.push(EventNote {
            warning: false,
            reason: reasons::MACHINE_CREATED,
            note: format!("Created {created} Machines for the pool's instances"),
        });
    }
    Ok(Members::Machines(ours))
}

/// The kind (and group) of the machines the infrastructure pool makes, from its status; the
/// group is the pool's own.
fn machine_kind(object: &DynamicObject) -> Option<ContractVersionedObjectReference> {
    let kind = object.data["status"]["infrastructureMachineKind"]
        .as_str()
        .filter(|kind| !kind.is_empty())?;
    let api_version = object.types.as_ref()?.api_version.as_str();
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    Some(ContractVersionedObjectReference {
        api_group: group.to_string(),
        kind: kind.to_string(),
        name: String::new(),
    })
}

/// The Machine standing for the infrastructure machine `name` of `pool`: named after it,
/// controlled by the pool, labelled with the template's labels and the pool's and cluster's
/// names, with the template's annotations, and no bootstrap data of its own (the instance got
/// the pool's), as upstream makes it.
fn machine_for(
    pool: &MachinePool,
    reference: &ContractVersionedObjectReference,
    name: &str,
) -> Machine {
    let template = pool.spec.template.metadata.clone().unwrap_or_default();
    let mut machine = Machine::default();
    machine.metadata.name = Some(name.to_string());
    machine.metadata.namespace = pool.namespace();
    let mut machine_labels = template.labels;
    machine_labels.insert(
        labels::MACHINE_POOL_NAME.to_string(),
        labels::label_value(&pool.name_any()).into_owned(),
    );
    machine_labels.insert(
        labels::CLUSTER_NAME.to_string(),
        pool.spec.cluster_name.clone(),
    );
    machine.metadata.labels = Some(machine_labels);
    if !template.annotations.is_empty() {
        machine.metadata.annotations = Some(template.annotations);
    }
    machine.metadata.owner_references =
        ownership::as_blocking_controller(pool).map(|owner| vec![owner]);
    machine.spec.cluster_name = pool.spec.cluster_name.clone();
    machine.spec.bootstrap.data_secret_name = Some(String::new());
    machine.spec.infrastructure_ref = ContractVersionedObjectReference {
        name: name.to_string(),
        ..reference.clone()
    };
    machine
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool() -> MachinePool {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
            "metadata": {"name": "workers", "namespace": "ns", "uid": "pool-uid"},
            "spec": {"clusterName": "c", "template": {
                "metadata": {"labels": {"team": "a"}, "annotations": {"note": "n"}},
                "spec": {"clusterName": "c", "bootstrap": {"dataSecretName": "s"},
                    "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev",
                        "kind": "InMemoryMachinePool", "name": "workers"}}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_machine_kind_is_the_pools_group_and_the_kind_it_reports() {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1beta2", "kind": "InMemoryMachinePool",
            "metadata": {"name": "workers"},
            "status": {"infrastructureMachineKind": "InMemoryMachine"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let reference = machine_kind(&object).unwrap_or_else(|| panic!("a kind"));
        assert_eq!(reference.api_group, "infrastructure.capi-rs.dev");
        assert_eq!(reference.kind, "InMemoryMachine");
        let mut silent = object;
        silent.data = json!({"status": {}});
        assert!(
            machine_kind(&silent).is_none(),
            "no kind: no MachinePool Machines"
        );
    }

    #[test]
    fn a_pool_machine_is_named_after_its_infrastructure_machine_and_controlled_by_the_pool() {
        let pool = pool();
        let reference = ContractVersionedObjectReference {
            api_group: "infrastructure.capi-rs.dev".into(),
            kind: "InMemoryMachine".into(),
            name: String::new(),
        };
        let machine = machine_for(&pool, &reference, "workers-i-1");
        assert_eq!(machine.name_any(), "workers-i-1");
        assert_eq!(machine.spec.infrastructure_ref.name, "workers-i-1");
        assert_eq!(machine.spec.infrastructure_ref.kind, "InMemoryMachine");
        assert_eq!(machine.spec.bootstrap.data_secret_name.as_deref(), Some(""));
        assert!(ownership::is_controlled_by(&machine.metadata, "pool-uid"));
        assert_eq!(machine.labels()["team"], "a");
        assert_eq!(machine.labels()[labels::MACHINE_POOL_NAME], "workers");
        assert_eq!(machine.labels()[labels::CLUSTER_NAME], "c");
        assert_eq!(machine.annotations()["note"], "n");
        assert!(is_member(&pool, "pool-uid", &machine));
        let mut foreign = machine.clone();
        if let Some(owners) = foreign.metadata.owner_references.as_mut() {
            owners[0].uid = "other".into();
        }
        assert!(
            !is_member(&pool, "pool-uid", &foreign),
            "another controller's machine is not the pool's"
        );
        assert_eq!(
            selector(&pool),
            "cluster.x-k8s.io/pool-name=workers,cluster.x-k8s.io/cluster-name=c"
        );
    }
}
