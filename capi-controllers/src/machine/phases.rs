//! The phases of a Machine pass, in the order [`super::reconcile_once`] runs them. A phase that
//! returns `Break` ends the pass with what comes next; `Continue` goes on to the next one.

use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{Cluster, Machine, MachineAddress, MachineDeployment};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::status::{self, Facts, Step};
use super::{MachineController, Scope};
use crate::ownership;
use crate::references::{ReferenceError, initialization_flag};
use crate::workload::CachedNode;
use capi_runtime::ReconcileError;
use capi_runtime::plan::Next;
use capi_runtime::reasons;
use capi_runtime::write;

/// The machine's Cluster (from the cache, else read fresh), if it exists.
pub(super) async fn find_cluster(
    scope: &Scope<'_>,
) -> Result<Option<Arc<Cluster>>, ReconcileError> {
    let machine = scope.machine;
    Ok(match scope.deps().clusters.get() {
        Some(store) => {
            crate::find_cluster(
                store,
                &scope.context.client,
                &machine.spec.cluster_name,
                &scope.namespace,
            )
            .await?
        }
        None => None,
    })
}

/// A paused machine (or one of a paused cluster) records `Paused` and changes nothing else.
pub(super) async fn honour_pause(
    scope: &Scope<'_>,
    cluster: &Cluster,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let machine = scope.machine;
    let paused = cluster.is_paused() || labels::has_paused_annotation(&machine.metadata);
    if !paused {
        return Ok(Continue(()));
    }
    let mut status = machine.status.clone().unwrap_or_default();
    let wanted = DesiredCondition::new(condition::PAUSED, ConditionStatus::True, reasons::PAUSED)
        .message("reconciliation is paused")
        .observed_generation(machine.metadata.generation);
    if condition::set(&mut status.conditions, wanted) {
        let value = json!({"conditions": status.conditions});
        write::patch_status_guarded(&scope.api, machine.as_ref(), value).await?;
    }
    Ok(Break(Next::AwaitChange))
}

/// The finalizer, the cluster-name label and (on a machine nothing controls) the Cluster owner
/// reference, before anything else; a pass that writes them ends (the watch brings the updated
/// object back).
pub(super) async fn ensure_metadata(
    scope: &Scope<'_>,
    cluster: &Cluster,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let machine = scope.machine.as_ref();
    if write_metadata(&scope.api, machine, cluster).await? {
        scope.deps().own_writes.wrote(machine);
        return Ok(Break(Next::AwaitChange));
    }
    Ok(Continue(()))
}

/// `BootstrapConfigReady` and whether the machine has its bootstrap data.
pub(super) struct Bootstrap {
    step: Step,
    data: bool,
}

/// The bootstrap config owned by the machine, and its data secret's name copied to
/// `spec.bootstrap.dataSecretName` once the config has one (the Machine as written kept in the
/// scope: the status is guarded by its version).
pub(super) async fn reconcile_bootstrap(
    scope: &mut Scope<'_>,
) -> Result<Bootstrap, ReconcileError> {
    let (step, data, written) = bootstrap_step(
        &scope.api,
        scope.machine,
        &scope.namespace,
        scope.owner.clone(),
        scope.deps(),
    )
    .await?;
    scope.written = written;
    Ok(Bootstrap { step, data })
}

/// The provider ID, before anything else is recorded: the node is found by it. A pass that
/// copies it from the infrastructure machine ends there.
pub(super) async fn ensure_provider_id(
    scope: &Scope<'_>,
    infra: &Infrastructure,
) -> Result<ControlFlow<Next>, ReconcileError> {
    let machine = scope.machine.as_ref();
    let Some(provider_id) = &infra.provider_id else {
        return Ok(Continue(()));
    };
    if machine.spec.provider_id.as_deref() == Some(provider_id.as_str()) {
        return Ok(Continue(()));
    }
    let patch = json!({"spec": {"providerID": provider_id}});
    write::patch(&scope.api, &machine.name_any(), patch).await?;
    let own_writes = &scope.deps().own_writes;
    own_writes.wrote(machine);
    own_writes.wrote(scope.current());
    Ok(Break(Next::AwaitChange))
}

/// What the machine's node says: its name, `NodeReady`, and whether to poll for it.
pub(super) struct Node {
    name: Option<String>,
    step: Step,
    poll: bool,
}

/// Reads (writes nothing) the node with the machine's provider ID from the workload cluster.
pub(super) async fn observe_node(scope: &Scope<'_>, cluster: &Cluster) -> Node {
    let machine = scope.machine.as_ref();
    match &machine.spec.provider_id {
        None => Node {
            name: None,
            step: Step::unknown(
                reasons::WAITING_FOR_NODE,
                "waiting for the infrastructure provider to report a provider ID",
            ),
            poll: false,
        },
        Some(provider_id) => {
            let (name, step, poll) = find_node(
                machine,
                cluster,
                provider_id,
                &scope.namespace,
                scope.deps(),
            )
            .await;
            Node { name, step, poll }
        }
    }
}

/// A machine fresh from a creator that has yet to create its references writes no status (see
/// [`awaiting_references_of_its_creator`]) and looks again after [`REFERENCE_GRACE`].
pub(super) fn await_creator(
    scope: &Scope<'_>,
    bootstrap: &Bootstrap,
    infra: &Infrastructure,
) -> ControlFlow<Next> {
    let machine = scope.machine.as_ref();
    if !awaiting_references_of_its_creator(machine, &bootstrap.step, &infra.step) {
        return Continue(());
    }
    // Its creator (a MachineSet, a control plane) creates them right after the Machine;
    // their watch brings the machine back. A status saying "not found" now would be a
    // write (and a race with the next one) for a few milliseconds' truth.
    if scope.written.is_some() {
        scope.deps().own_writes.wrote(machine);
    }
    Break(Next::Requeue(REFERENCE_GRACE))
}

/// The status from what this pass found, written once (guarded by the version of the Machine as
/// last written, and paced: a change within the pacer's interval, or one that only informs
/// within its hold, goes with the next ones — see [`status::change`]).
/// Returns what comes next: polling for the node, or waiting for `minReadySeconds`.
pub(super) async fn write_status(
    scope: &Scope<'_>,
    bootstrap: Bootstrap,
    infra: Infrastructure,
    node: Node,
) -> Result<Next, ReconcileError> {
    let (machine, deps) = (scope.machine.as_ref(), scope.deps());
    let mut next = Next::AwaitChange;
    if node.poll {
        next = Next::Requeue(deps.settings.poll);
    }
    let up_to_date = match &infra.outdated {
        // The instance cannot be changed in place: only replacing the machine applies the spec.
        Some(why) => Step::waiting(
            reasons::NEEDS_ROLLOUT,
            format!(
                "{} {:?} no longer matches its instance ({why}); a rollout (replacing the machine) is needed",
                machine.spec.infrastructure_ref.kind, machine.spec.infrastructure_ref.name
            ),
        ),
        None => up_to_date(machine, deps.deployments.get(), &scope.namespace),
    };
    let facts = Facts {
        up_to_date,
        generation: machine.metadata.generation,
        bootstrap_data: bootstrap.data,
        bootstrap: bootstrap.step,
        infrastructure_provisioned: infra.provisioned,
        infrastructure: infra.step,
        node_name: node.name,
        node: node.step,
        addresses: infra.addresses,
        min_ready: Duration::from_secs(
            u64::try_from(machine.spec.min_ready_seconds.unwrap_or(0)).unwrap_or(0),
        ),
        readiness_gates: machine.spec.readiness_gates.clone(),
    };
    // A referenced object made without an owner (by hand, by another tool) wakes no machine when
    // it appears: one that is missing is looked for again, never waited for forever.
    if [&facts.bootstrap, &facts.infrastructure]
        .iter()
        .any(|step| step.reason == reasons::REFERENCE_NOT_FOUND)
    {
        next = next.due_within(deps.settings.poll);
    }
    let current = machine.status.clone().unwrap_or_default();
    let (desired, available_in) = status::desired(&current, &facts, Time(jiff::Timestamp::now()));
    if let Some(wait) = available_in {
        next = Next::Requeue(wait);
    }
    if desired != current {
        match deps
            .pacer
            .wait_for(machine, status::change(&current, &desired))
        {
            // Written a moment ago, or a change that only informs: it goes with the next ones,
            // at the interval's or the hold's end (steps that follow each other closely — data,
            // instance — are one write, and go with the node when it comes).
            Some(wait) => next = next.due_within(wait),
            None => {
                let value = serde_json::to_value(&desired).map_err(kube::Error::SerdeError)?;
                write::patch_status_guarded(&scope.api, scope.current(), value).await?;
                deps.own_writes.wrote(scope.current());
                deps.pacer.wrote(machine);
            }
        }
    }
    if scope.written.is_some() {
        deps.own_writes.wrote(machine);
    }
    Ok(next)
}

/// How long after its creation a controlled Machine's missing references are taken for ones its
/// creator is still creating (and how soon it looks again).
const REFERENCE_GRACE: Duration = Duration::from_secs(2);

/// Whether the machine is fresh from a controller that creates its bootstrap config and
/// infrastructure machine after it, has no status yet, and misses one of them: nothing worth a
/// status write yet. Past [`REFERENCE_GRACE`], a missing reference is reported as usual.
pub(super) fn awaiting_references_of_its_creator(
    machine: &Machine,
    bootstrap: &Step,
    infra: &Step,
) -> bool {
    let missing = [bootstrap, infra]
        .iter()
        .any(|s| s.reason == reasons::REFERENCE_NOT_FOUND);
    let controlled = machine
        .owner_references()
        .iter()
        .any(|r| r.controller == Some(true));
    let fresh = machine
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| Duration::try_from(jiff::Timestamp::now().duration_since(t.0)).ok())
        .is_some_and(|age| age < REFERENCE_GRACE);
    let no_status = machine.status.as_ref().is_none_or(|s| {
        s.conditions
            .iter()
            .all(|c| c.type_ == condition::HEALTH_CHECK_SUCCEEDED)
    });
    missing && controlled && fresh && no_status
}

/// Puts the finalizer, the cluster-name label and (on a machine nothing controls) the Cluster
/// owner reference on the Machine (one guarded patch); returns whether it wrote.
async fn write_metadata(
    api: &Api<Machine>,
    machine: &Machine,
    cluster: &Cluster,
) -> Result<bool, kube::Error> {
    let has_finalizer = machine
        .finalizers()
        .iter()
        .any(|f| f == labels::MACHINE_FINALIZER);
    let labelled = labels::cluster_name(&machine.metadata) == Some(cluster.name_any().as_str());
    let cluster_uid = cluster.uid().unwrap_or_default();
    let owned = !needs_cluster_owner(machine, &cluster_uid);
    if has_finalizer && labelled && owned {
        return Ok(false);
    }
    let mut finalizers = machine.finalizers().to_vec();
    if !has_finalizer {
        finalizers.push(labels::MACHINE_FINALIZER.to_string());
    }
    let mut owners = machine.owner_references().to_vec();
    if !owned && let Some(mut owner) = cluster.controller_owner_ref(&()) {
        // A plain owner, never the controller: a MachineSet may still adopt the machine.
        owner.controller = None;
        owners.push(owner);
    }
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "labels": {labels::CLUSTER_NAME: cluster.name_any()},
        "ownerReferences": owners,
        "resourceVersion": machine.resource_version(),
    }});
    write::patch(api, &machine.name_any(), patch).await?;
    Ok(true)
}

/// Whether the Cluster must be added as the machine's owner: as upstream, the Cluster adopts only
/// a stand-alone machine; one a MachineSet or a control plane controls is the Cluster's through
/// its controller (and patching it would be a write per machine for nothing).
pub(super) fn needs_cluster_owner(machine: &Machine, cluster_uid: &str) -> bool {
    let controlled = machine
        .owner_references()
        .iter()
        .any(|r| r.controller == Some(true));
    !controlled && !ownership::is_owned_by(&machine.metadata, cluster_uid)
}

/// The `BootstrapConfigReady` step, whether `spec.bootstrap.dataSecretName` is set (copying
/// it from the config's status when the config has one, after taking ownership of the config),
/// and the Machine as written when this copied it.
async fn bootstrap_step(
    api: &Api<Machine>,
    machine: &Machine,
    namespace: &str,
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    deps: &MachineController,
) -> Result<(Step, bool, Option<Machine>), ReconcileError> {
    if machine.spec.bootstrap.data_secret_name.is_some() {
        // Ensure the config (if any) is owned even when the data is already known.
        if let (Some(reference), Some(owner)) = (&machine.spec.bootstrap.config_ref, owner)
            && let Ok(Some(config)) = deps.references.get(reference, namespace).await
        {
            ownership::ensure_owner(
                &deps.references,
                reference,
                namespace,
                &config,
                owner,
                &machine.spec.cluster_name,
            )
            .await?;
        }
        return Ok((Step::done(reasons::BOOTSTRAP_DATA_READY), true, None));
    }
    let Some(reference) = &machine.spec.bootstrap.config_ref else {
        return Ok((
            Step::waiting(
                reasons::INVALID_SPEC,
                "spec.bootstrap needs a configRef or a dataSecretName",
            ),
            false,
            None,
        ));
    };
    let config = match deps.references.get(reference, namespace).await {
        Ok(config) => config,
        Err(
            error @ (ReferenceError::UnknownKind { .. } | ReferenceError::NotAProviderKind { .. }),
        ) => {
            return Ok((
                Step::waiting(reasons::REFERENCE_KIND_UNKNOWN, error.to_string()),
                false,
                None,
            ));
        }
        Err(error) => return Err(error.into()),
    };
    let Some(config) = config else {
        return Ok((
            Step::waiting(
                reasons::REFERENCE_NOT_FOUND,
                format!("waiting for {} {:?}", reference.kind, reference.name),
            ),
            false,
            None,
        ));
    };
    if let Some(owner) = owner
        && ownership::ensure_owner(
            &deps.references,
            reference,
            namespace,
            &config,
            owner,
            &machine.spec.cluster_name,
        )
        .await?
    {
        return Ok((
            Step::waiting(
                reasons::WAITING_FOR_BOOTSTRAP_DATA,
                "took ownership of the config",
            ),
            false,
            None,
        ));
    }
    let secret = config.data["status"]["dataSecretName"].as_str();
    match secret {
        Some(name) if initialization_flag(&config, "dataSecretCreated") || !name.is_empty() => {
            let patch = json!({"spec": {"bootstrap": {"dataSecretName": name}}});
            let written = write::patch_returning(api, &machine.name_any(), patch).await?;
            Ok((
                Step::done(reasons::BOOTSTRAP_DATA_READY),
                true,
                Some(written),
            ))
        }
        _ => Ok((
            Step::waiting(
                reasons::WAITING_FOR_BOOTSTRAP_DATA,
                format!(
                    "waiting for {} {:?} to produce bootstrap data",
                    reference.kind, reference.name
                ),
            ),
            false,
            None,
        )),
    }
}

/// What the infrastructure machine reports.
pub(super) struct Infrastructure {
    step: Step,
    provisioned: bool,
    provider_id: Option<String>,
    addresses: Option<Vec<MachineAddress>>,
    /// Why the provider says the instance no longer matches its spec (its `UpToDate=False`: an
    /// immutable field changed), when it does.
    outdated: Option<String>,
}

/// What the infrastructure machine reports, after taking ownership of it.
pub(super) async fn reconcile_infrastructure(
    scope: &Scope<'_>,
) -> Result<Infrastructure, ReconcileError> {
    let (machine, namespace, deps) = (
        scope.machine.as_ref(),
        scope.namespace.as_str(),
        scope.deps(),
    );
    let owner = scope.owner.clone();
    let reference = &machine.spec.infrastructure_ref;
    let waiting = |step| Infrastructure {
        step,
        provisioned: false,
        provider_id: None,
        addresses: None,
        outdated: None,
    };
    let object = match deps.references.get(reference, namespace).await {
        Ok(object) => object,
        Err(
            error @ (ReferenceError::UnknownKind { .. } | ReferenceError::NotAProviderKind { .. }),
        ) => {
            return Ok(waiting(Step::waiting(
                reasons::REFERENCE_KIND_UNKNOWN,
                error.to_string(),
            )));
        }
        Err(error) => return Err(error.into()),
    };
    let Some(object) = object else {
        return Ok(waiting(Step::waiting(
            reasons::REFERENCE_NOT_FOUND,
            format!("waiting for {} {:?}", reference.kind, reference.name),
        )));
    };
    if let Some(owner) = owner {
        ownership::ensure_owner(
            &deps.references,
            reference,
            namespace,
            &object,
            owner,
            &machine.spec.cluster_name,
        )
        .await?;
    }
    let provisioned = initialization_flag(&object, "provisioned");
    let provider_id = object.data["spec"]["providerID"]
        .as_str()
        .map(str::to_string);
    // Addresses that do not parse are left out rather than failing the machine.
    let addresses = object.data["status"]["addresses"].as_array().map(|list| {
        list.iter()
            .filter_map(|a| serde_json::from_value::<MachineAddress>(a.clone()).ok())
            .collect()
    });
    let step = if provisioned {
        Step::done(reasons::PROVISIONED)
    } else {
        // The provider's own Ready condition says why, when it has one.
        let message = object.data["status"]["conditions"]
            .as_array()
            .and_then(|conditions| {
                conditions
                    .iter()
                    .find(|c| c["type"] == "Ready")
                    .and_then(|c| c["message"].as_str())
            })
            .filter(|m| !m.is_empty())
            .map_or_else(
                || {
                    format!(
                        "{} {:?} is not provisioned yet",
                        reference.kind, reference.name
                    )
                },
                str::to_string,
            );
        Step::waiting(reasons::WAITING_FOR_INFRASTRUCTURE, message)
    };
    let outdated = object.data["status"]["conditions"]
        .as_array()
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|c| c["type"] == condition::UP_TO_DATE && c["status"] == "False")
        })
        .map(|c| c["message"].as_str().unwrap_or_default().to_string());
    Ok(Infrastructure {
        step,
        provisioned,
        provider_id,
        addresses,
        outdated,
    })
}

/// The node of the machine: its name, the `NodeReady` step, and whether to poll (the workload
/// cluster cannot be reached yet, so no watch reports the node).
async fn find_node(
    machine: &Machine,
    cluster: &Cluster,
    provider_id: &str,
    namespace: &str,
    deps: &MachineController,
) -> (Option<String>, Step, bool) {
    let workload = match deps.workloads.get(namespace, &cluster.name_any()).await {
        Ok(workload) => workload,
        Err(error) => {
            let step = Step::unknown(reasons::WAITING_FOR_WORKLOAD_CLUSTER, error.to_string());
            return (None, step, true);
        }
    };
    match workload.node_by_provider_id(provider_id) {
        Some(node) => {
            let (step, _) = node_readiness(&node);
            (Some(node.name.to_string()), step, false)
        }
        None if workload.synced()
            && machine
                .status
                .as_ref()
                .is_some_and(|s| s.node_ref.is_some()) =>
        {
            (
                None,
                Step::waiting(
                    reasons::NODE_NOT_FOUND,
                    "the machine's node no longer exists",
                ),
                false,
            )
        }
        None => (
            None,
            Step::unknown(
                reasons::WAITING_FOR_NODE,
                format!("waiting for a node with provider ID {provider_id}"),
            ),
            !workload.synced(),
        ),
    }
}

/// The `NodeReady` step from the node's own `Ready` condition, and that condition's status.
fn node_readiness(node: &CachedNode) -> (Step, Option<String>) {
    let ready = node.conditions.iter().find(|c| &*c.type_ == "Ready");
    match ready {
        Some(c) if &*c.status == "True" => {
            (Step::done(reasons::NODE_READY), Some(c.status.to_string()))
        }
        Some(c) => (
            Step::waiting(
                reasons::NODE_NOT_READY,
                c.message
                    .as_deref()
                    .map_or_else(|| format!("node Ready={}", c.status), str::to_string),
            ),
            Some(c.status.to_string()),
        ),
        None => (
            Step::unknown(
                reasons::NODE_NOT_READY,
                "the node reports no Ready condition yet",
            ),
            None,
        ),
    }
}

/// `UpToDate`: whether the machine was made from its MachineDeployment's current template
/// (machines of no deployment are up to date by definition).
fn up_to_date(
    machine: &Machine,
    deployments: Option<&Store<MachineDeployment>>,
    namespace: &str,
) -> Step {
    let Some(name) = machine.labels().get(labels::MACHINE_DEPLOYMENT_NAME) else {
        return Step::done(reasons::UP_TO_DATE);
    };
    let deployment = deployments.and_then(|s| s.get(&ObjectRef::new(name).within(namespace)));
    let Some(deployment) = deployment else {
        return Step::done(reasons::UP_TO_DATE);
    };
    let current = crate::machine_deployment::template_hash(&deployment.spec.template);
    if machine.labels().get(crate::TEMPLATE_HASH_LABEL) == Some(&current) {
        Step::done(reasons::UP_TO_DATE)
    } else {
        Step::waiting(
            reasons::NEEDS_ROLLOUT,
            format!("MachineDeployment {name}'s template changed; the machine is to be replaced"),
        )
    }
}
