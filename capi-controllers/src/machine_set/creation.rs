//! How a set's machine is made from its template: the Machine first, then the bootstrap config
//! and infrastructure machine cloned from the template's references, owned by the Machine.

use std::collections::BTreeMap;

use capi_core::api::{Cluster, ContractVersionedObjectReference, Machine, MachineSet};
use capi_core::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};

use super::MachineSetController;
use crate::references::instance_of;
use capi_runtime::{Context, ReconcileError};

/// Creates one machine: the Machine first (its references name objects that do not exist yet),
/// then its bootstrap config and infrastructure machine, owned by it. Returns its name.
pub(super) async fn create_machine(
    set: &MachineSet,
    cluster: &Cluster,
    namespace: &str,
    context: &Context<MachineSetController>,
) -> Result<String, ReconcileError> {
    let deps = &context.state;
    let uid = set.uid().unwrap_or_default();
    let set_name = set.name_any();
    let template = set
        .spec
        .machine_naming
        .as_ref()
        .and_then(|n| n.template.as_deref())
        .unwrap_or("{{ .machineSet.name }}-{{ .random }}");
    let name = crate::naming::machine_name(
        template,
        &[
            (".machineSet.name", &set_name),
            (".cluster.name", &set.spec.cluster_name),
        ],
    )
    .map_err(|why| ReconcileError::Controller(why.into()))?;
    let template = &set.spec.template;
    let mut spec = template.spec.clone();
    spec.cluster_name = set.spec.cluster_name.clone();
    spec.provider_id = None;
    spec.infrastructure_ref = instance_of(&template.spec.infrastructure_ref, &name);
    spec.bootstrap.config_ref = template
        .spec
        .bootstrap
        .config_ref
        .as_ref()
        .map(|r| instance_of(r, &name));
    let mut machine_labels: BTreeMap<String, String> = template
        .metadata
        .as_ref()
        .map(|m| m.labels.clone())
        .unwrap_or_default();
    machine_labels.insert(labels::MACHINE_SET_NAME.into(), set.name_any());
    machine_labels.insert(labels::CLUSTER_NAME.into(), cluster.name_any());
    let mut owners: Vec<OwnerReference> = set.controller_owner_ref(&()).into_iter().collect();
    owners.extend(cluster.controller_owner_ref(&()).map(|mut r| {
        r.controller = None;
        r
    }));
    let machine = Machine {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.to_string()),
            labels: Some(machine_labels),
            annotations: template
                .metadata
                .as_ref()
                .map(|m| m.annotations.clone())
                .filter(|a| !a.is_empty()),
            finalizers: Some(vec![labels::MACHINE_FINALIZER.to_string()]),
            owner_references: Some(owners),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    };
    let api: Api<Machine> = Api::namespaced(context.client.clone(), namespace);
    deps.expectations.created(&uid, &name);
    let created = match api.create(&PostParams::default(), &machine).await {
        Ok(created) => created,
        Err(error) => {
            deps.expectations.create_failed(&uid, &name);
            return Err(error.into());
        }
    };
    // Fresh: nothing to look up, the objects cannot exist yet (a create that finds one is fine).
    for (template_ref, target) in cloned_from(set, &created) {
        clone_template(template_ref, target, &created, namespace, deps).await?;
    }
    Ok(name)
}

/// The (template, object) pairs of a machine that this set's templates stand for.
fn cloned_from<'a>(
    set: &'a MachineSet,
    machine: &'a Machine,
) -> impl Iterator<
    Item = (
        &'a ContractVersionedObjectReference,
        &'a ContractVersionedObjectReference,
    ),
> {
    let template = &set.spec.template.spec;
    let pairs = [
        Some((
            &template.infrastructure_ref,
            &machine.spec.infrastructure_ref,
        )),
        template
            .bootstrap
            .config_ref
            .as_ref()
            .zip(machine.spec.bootstrap.config_ref.as_ref()),
    ];
    pairs
        .into_iter()
        .flatten()
        .filter(|(template_ref, target)| instance_of(template_ref, &target.name) == **target)
}

/// Clones the templates of a machine that is not provisioned yet and lacks its bootstrap config
/// or infrastructure machine.
pub(super) async fn complete_machine(
    set: &MachineSet,
    machine: &Machine,
    namespace: &str,
    deps: &MachineSetController,
) -> Result<(), ReconcileError> {
    let provisioned = machine
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.infrastructure_provisioned)
        .unwrap_or(false);
    if provisioned || machine.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    for (template_ref, target) in cloned_from(set, machine) {
        // Whether the cache holds it (not the object itself: nothing to convert).
        let known = deps.references.synced(target).await?
            && deps.references.exists(target, namespace).await?;
        if !known
            && deps
                .references
                .get_fresh(target, namespace)
                .await?
                .is_none()
        {
            clone_template(template_ref, target, machine, namespace, deps).await?;
        }
    }
    Ok(())
}

async fn clone_template(
    template_ref: &ContractVersionedObjectReference,
    target: &ContractVersionedObjectReference,
    machine: &Machine,
    namespace: &str,
    deps: &MachineSetController,
) -> Result<(), ReconcileError> {
    // Every label of the machine, as upstream's MachineSet gives them to the objects it clones
    // for it (a watch filter among them: the manager that made the machine reconciles them).
    let copied: BTreeMap<String, String> = machine.labels().clone();
    deps.references
        .clone_template(
            template_ref,
            target,
            namespace,
            &copied,
            machine.controller_owner_ref(&()),
        )
        .await?;
    Ok(())
}
