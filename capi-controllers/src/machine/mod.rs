//! The Machine controller: bootstrap data → infrastructure → node → Running, and deletion
//! (drain, infrastructure and bootstrap objects, node, finalizer).

mod deletion;
mod drain;
pub(crate) mod status;

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use capi_core::api::{Cluster, Machine, MachineAddress, MachineDeployment};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use futures::{Stream, StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use self::status::{Facts, Step};
use crate::references::{ReferenceError, ReferenceWatches, References, initialization_flag};
use crate::workload::{CachedNode, NodeChange, WorkloadClusters};
use crate::{
    CoreSettings, cache, cluster_cache, find_cluster, of_cluster, ownership, receiver_stream, take,
};
use capi_runtime::pace::StatusPacer;
use capi_runtime::plan::Next;
use capi_runtime::reasons;
use capi_runtime::write;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// How soon a Machine whose cached copy predates this controller's own last write is looked at
/// again.
const OWN_WRITE_CATCH_UP: Duration = Duration::from_millis(250);

/// What the Machine controller works with besides the client.
pub(crate) struct MachineController {
    references: References,
    reference_changes: Mutex<Option<mpsc::UnboundedReceiver<Arc<DynamicObject>>>>,
    workloads: Arc<WorkloadClusters>,
    node_changes: Mutex<Option<mpsc::UnboundedReceiver<NodeChange>>>,
    clusters: OnceLock<Store<Cluster>>,
    deployments: OnceLock<Store<MachineDeployment>>,
    /// The Machine versions this controller's own writes replaced (see [`write::OwnWrites`]).
    own_writes: write::OwnWrites,
    /// Spaces the status writes of each machine (see [`capi_runtime::pace`]).
    pacer: StatusPacer,
    settings: CoreSettings,
}

impl MachineController {
    /// The controller's dependencies; node changes of `workloads` arrive on `node_changes`.
    pub(crate) fn new(
        watches: &Arc<ReferenceWatches>,
        client: kube::Client,
        namespace: Option<String>,
        workloads: Arc<WorkloadClusters>,
        node_changes: mpsc::UnboundedReceiver<NodeChange>,
        settings: CoreSettings,
    ) -> Self {
        let (references, reference_changes) = References::sharing(watches, client, namespace);
        Self {
            references,
            reference_changes: Mutex::new(Some(reference_changes)),
            workloads,
            node_changes: Mutex::new(Some(node_changes)),
            clusters: OnceLock::new(),
            deployments: OnceLock::new(),
            own_writes: write::OwnWrites::default(),
            pacer: StatusPacer::default(),
            settings,
        }
    }
}

/// Runs until `shutdown` completes; in-flight reconciles finish first.
pub(crate) async fn run(
    reconciler: Reconciler<Machine, MachineController>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, machines) = reconciler.trigger();
    let (clusters, cluster_changes) = cluster_cache(reconciler.informer::<Cluster>());
    let _ = reconciler.state().clusters.set(clusters);
    let (deployments, deployment_changes) = cache(reconciler.informer::<MachineDeployment>());
    let deployment_changes = template_changes(deployment_changes, deployments.clone());
    let _ = reconciler.state().deployments.set(deployments);
    let by_deployment = machines.clone();
    let reference_changes = take(&reconciler.state().reference_changes);
    let node_changes = take(&reconciler.state().node_changes);
    let concurrency = reconciler.concurrency();
    let by_cluster = machines.clone();
    let by_node = machines.clone();
    // An infrastructure machine or bootstrap config changed: its owner Machine looks again.
    let owners = receiver_stream(reference_changes).flat_map(|object| {
        let namespace = object.namespace().unwrap_or_default();
        let owners: Vec<ObjectRef<Machine>> = object
            .owner_references()
            .iter()
            .filter(|r| r.kind == "Machine" && r.api_version.starts_with("cluster.x-k8s.io/"))
            .map(|r| ObjectRef::new(&r.name).within(&namespace))
            .collect();
        stream::iter(owners)
    });
    // A node changed: the machine with its provider ID looks again.
    let nodes = receiver_stream(node_changes).flat_map(move |change| {
        let found: Vec<ObjectRef<Machine>> = by_node
            .state()
            .into_iter()
            .filter(|m| {
                m.namespace().as_deref() == Some(change.namespace.as_str())
                    && m.spec.cluster_name == change.cluster
                    && change.provider_id.is_some()
                    && m.spec.provider_id == change.provider_id
            })
            .map(|m| ObjectRef::from_obj(m.as_ref()))
            .collect();
        stream::iter(found)
    });
    let context = reconciler.into_context(|deps, _, _| deps);
    let results = Controller::for_stream(trigger, machines)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        // A Cluster changed (paused, infrastructure ready, deleting): its machines look again.
        .watches_stream(
            cluster_changes,
            of_cluster(by_cluster, |m: &Machine| &m.spec.cluster_name),
        )
        // A MachineDeployment's template changed: its machines say whether they are up to date.
        .watches_stream(deployment_changes, move |deployment| {
            let name = deployment.name_any();
            let namespace = deployment.namespace();
            by_deployment
                .state()
                .into_iter()
                .filter(|m| {
                    m.namespace() == namespace
                        && m.labels().get(labels::MACHINE_DEPLOYMENT_NAME) == Some(&name)
                })
                .map(|m| ObjectRef::from_obj(m.as_ref()))
                .collect::<Vec<_>>()
        })
        .reconcile_on(stream::select(owners, nodes))
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_machine,
            back_off::<Machine, MachineController>,
            context,
        );
    drain(results).await;
}

/// The changes of MachineDeployments that matter to their machines (what `up_to_date` reads): a
/// new template, and the deployment's going (`deployments`, the store the changes come from, no
/// longer holds it). Not the status, which changes with every one of the deployment's machines:
/// building N machines costs O(N) machine reconciles, not O(N²), and a new machine's first
/// reconcile does not wait behind its siblings'.
fn template_changes(
    changes: impl Stream<Item = Result<MachineDeployment, watcher::Error>> + Send + 'static,
    deployments: Store<MachineDeployment>,
) -> impl Stream<Item = Result<MachineDeployment, watcher::Error>> + Send + 'static {
    capi_runtime::cache::predicate::changed(changes, move |deployment: &MachineDeployment| {
        // Gone (the store takes an event before its subscribers see it): no hash, so it passes.
        deployments.get(&ObjectRef::from_obj(deployment))?;
        let mut hasher = std::hash::DefaultHasher::new();
        super::machine_deployment::template_hash(&deployment.spec.template).hash(&mut hasher);
        Some(hasher.finish())
    })
}

#[tracing::instrument(skip_all, fields(namespace = %machine.namespace().unwrap_or_default(), name = %machine.name_any()))]
async fn reconcile_machine(
    machine: Arc<Machine>,
    context: Arc<Context<MachineController>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(machine.as_ref(), reconcile_once(&machine, &context))
        .await
}

async fn reconcile_once(
    machine: &Arc<Machine>,
    context: &Context<MachineController>,
) -> Result<Next, ReconcileError> {
    let deps = &context.state;
    let namespace = machine.namespace().unwrap_or_default();
    let api: Api<Machine> = Api::namespaced(context.client.clone(), &namespace);
    let cluster = match deps.clusters.get() {
        Some(store) => {
            find_cluster(
                store,
                &context.client,
                &machine.spec.cluster_name,
                &namespace,
            )
            .await?
        }
        None => None,
    };
    if machine.meta().deletion_timestamp.is_some() {
        deps.own_writes.forget(machine.as_ref());
        return deletion::delete(machine, cluster.as_deref(), context).await;
    }
    if deps.own_writes.is_stale(machine.as_ref()) {
        // Our own last write replaced this copy and the cache has not caught up: writing from it
        // would meet a 409. Look again in a moment (the newer version is on its way; a status
        // change alone may not trigger a reconcile, so the requeue does).
        return Ok(Next::Requeue(OWN_WRITE_CATCH_UP));
    }
    let Some(cluster) = cluster else {
        return Ok(Next::Requeue(deps.settings.poll));
    };
    let paused = cluster.is_paused() || labels::has_paused_annotation(&machine.metadata);
    if paused {
        let mut status = machine.status.clone().unwrap_or_default();
        let wanted =
            DesiredCondition::new(condition::PAUSED, ConditionStatus::True, reasons::PAUSED)
                .message("reconciliation is paused")
                .observed_generation(machine.metadata.generation);
        if condition::set(&mut status.conditions, wanted) {
            let value = json!({"conditions": status.conditions});
            write::patch_status_guarded(&api, machine.as_ref(), value).await?;
        }
        return Ok(Next::AwaitChange);
    }
    if ensure_metadata(&api, machine, &cluster).await? {
        // The watch brings the updated object back.
        deps.own_writes.wrote(machine.as_ref());
        return Ok(Next::AwaitChange);
    }

    let owner = machine.controller_owner_ref(&()).map(|mut r| {
        r.block_owner_deletion = Some(true);
        r
    });
    let mut next = Next::AwaitChange;
    let (bootstrap, bootstrap_data, written) =
        observe_bootstrap(&api, machine, &namespace, owner.clone(), deps).await?;
    // The status below is guarded by the version it was computed from: after the spec patch
    // above, that is the patched object's, not the (now stale) one this pass started from.
    let current_machine = written.as_ref().unwrap_or(machine.as_ref());
    let infra = observe_infrastructure(machine, &namespace, owner, deps).await?;
    if let Some(provider_id) = &infra.provider_id
        && machine.spec.provider_id.as_deref() != Some(provider_id.as_str())
    {
        // Recorded before anything else: the node is found by it.
        let patch = json!({"spec": {"providerID": provider_id}});
        write::patch(&api, &machine.name_any(), patch).await?;
        deps.own_writes.wrote(machine.as_ref());
        deps.own_writes.wrote(current_machine);
        return Ok(Next::AwaitChange);
    }
    let (node_name, node) = match &machine.spec.provider_id {
        None => (
            None,
            Step::unknown(
                reasons::WAITING_FOR_NODE,
                "waiting for the infrastructure provider to report a provider ID",
            ),
        ),
        Some(provider_id) => {
            let (name, step, wait) =
                observe_node(machine, &cluster, provider_id, &namespace, deps).await;
            if wait {
                next = Next::Requeue(deps.settings.poll);
            }
            (name, step)
        }
    };
    let up_to_date = match &infra.outdated {
        // The instance cannot be changed in place: only replacing the machine applies the spec.
        Some(why) => Step::waiting(
            reasons::NEEDS_ROLLOUT,
            format!(
                "{} {:?} no longer matches its instance ({why}); a rollout (replacing the machine) is needed",
                machine.spec.infrastructure_ref.kind, machine.spec.infrastructure_ref.name
            ),
        ),
        None => up_to_date(machine, deps.deployments.get(), &namespace),
    };
    if awaiting_references_of_its_creator(machine, &bootstrap, &infra.step) {
        // Its creator (a MachineSet, a control plane) creates them right after the Machine;
        // their watch brings the machine back. A status saying "not found" now would be a
        // write (and a race with the next one) for a few milliseconds' truth.
        if written.is_some() {
            deps.own_writes.wrote(machine.as_ref());
        }
        return Ok(Next::Requeue(REFERENCE_GRACE));
    }
    let facts = Facts {
        up_to_date,
        generation: machine.metadata.generation,
        bootstrap_data,
        bootstrap,
        infrastructure_provisioned: infra.provisioned,
        infrastructure: infra.step,
        node_name,
        node,
        addresses: infra.addresses,
        min_ready: Duration::from_secs(
            u64::try_from(machine.spec.min_ready_seconds.unwrap_or(0)).unwrap_or(0),
        ),
        readiness_gates: machine.spec.readiness_gates.clone(),
    };
    let current = machine.status.clone().unwrap_or_default();
    let (desired, available_in) = status::desired(&current, &facts, Time(jiff::Timestamp::now()));
    if let Some(wait) = available_in {
        next = Next::Requeue(wait);
    }
    if desired != current {
        match deps.pacer.wait(machine.as_ref()) {
            // Written a moment ago: this change goes with the next ones, at the interval's end
            // (steps that follow each other closely — data, instance, node — are one write).
            Some(wait) => next = next.due_within(wait),
            None => {
                let value = serde_json::to_value(&desired).map_err(kube::Error::SerdeError)?;
                write::patch_status_guarded(&api, current_machine, value).await?;
                deps.own_writes.wrote(current_machine);
                deps.pacer.wrote(machine.as_ref());
            }
        }
    }
    if written.is_some() {
        deps.own_writes.wrote(machine.as_ref());
    }
    Ok(next)
}

/// How long after its creation a controlled Machine's missing references are taken for ones its
/// creator is still creating (and how soon it looks again).
const REFERENCE_GRACE: Duration = Duration::from_secs(2);

/// Whether the machine is fresh from a controller that creates its bootstrap config and
/// infrastructure machine after it, has no status yet, and misses one of them: nothing worth a
/// status write yet. Past [`REFERENCE_GRACE`], a missing reference is reported as usual.
fn awaiting_references_of_its_creator(machine: &Machine, bootstrap: &Step, infra: &Step) -> bool {
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
async fn ensure_metadata(
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
fn needs_cluster_owner(machine: &Machine, cluster_uid: &str) -> bool {
    let controlled = machine
        .owner_references()
        .iter()
        .any(|r| r.controller == Some(true));
    !controlled && !ownership::is_owned_by(&machine.metadata, cluster_uid)
}

/// The `BootstrapConfigReady` step, whether `spec.bootstrap.dataSecretName` is set (copying
/// it from the config's status when the config has one), and the Machine as written when this
/// copied it.
async fn observe_bootstrap(
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
        Err(error @ ReferenceError::UnknownKind { .. }) => {
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
struct Infrastructure {
    step: Step,
    provisioned: bool,
    provider_id: Option<String>,
    addresses: Option<Vec<MachineAddress>>,
    /// Why the provider says the instance no longer matches its spec (its `UpToDate=False`: an
    /// immutable field changed), when it does.
    outdated: Option<String>,
}

async fn observe_infrastructure(
    machine: &Machine,
    namespace: &str,
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    deps: &MachineController,
) -> Result<Infrastructure, ReconcileError> {
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
        Err(error @ ReferenceError::UnknownKind { .. }) => {
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
async fn observe_node(
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
    let current = super::machine_deployment::template_hash(&deployment.spec.template);
    if machine.labels().get(super::TEMPLATE_HASH_LABEL) == Some(&current) {
        Step::done(reasons::UP_TO_DATE)
    } else {
        Step::waiting(
            reasons::NEEDS_ROLLOUT,
            format!("MachineDeployment {name}'s template changed; the machine is to be replaced"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machines_hear_of_their_deployments_new_template_not_of_its_status() {
        let mut deployment = MachineDeployment::default();
        deployment.metadata.name = Some("md".into());
        deployment.metadata.namespace = Some("ns".into());
        deployment.metadata.uid = Some("md-uid".into());
        deployment.spec.template.spec.version = Some("v1.33.0".into());
        let mut counted = deployment.clone();
        counted.status = Some(capi_core::api::MachineDeploymentStatus {
            replicas: Some(3),
            ..Default::default()
        });
        let mut scaled = counted.clone();
        scaled.spec.replicas = Some(5);
        let mut rolled = scaled.clone();
        rolled.spec.template.spec.version = Some("v1.33.1".into());
        let rolled_again = rolled.clone();
        let mut relabelled = rolled.clone();
        relabelled.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        // The store the changes come from: each is applied before it is passed on, and the last
        // is the deployment's deletion (same template).
        let (store, mut writer) = kube::runtime::reflector::store();
        let changes = stream::iter([
            watcher::Event::Apply(deployment),
            watcher::Event::Apply(counted),
            watcher::Event::Apply(scaled),
            watcher::Event::Apply(rolled),
            watcher::Event::Apply(relabelled),
            watcher::Event::Delete(rolled_again),
        ])
        .map(move |event| {
            writer.apply_watcher_event(&event);
            match event {
                watcher::Event::Apply(d) | watcher::Event::Delete(d) => Ok(d),
                _ => unreachable!("only applies and deletions are sent"),
            }
        });
        let passed =
            futures::executor::block_on(template_changes(changes, store).collect::<Vec<_>>());
        let seen: Vec<_> = passed
            .into_iter()
            .map(|d| d.ok().and_then(|d| d.spec.template.spec.version))
            .collect();
        let version = |v: &str| Some(v.to_string());
        assert_eq!(
            seen,
            [version("v1.33.0"), version("v1.33.1"), version("v1.33.1")],
            "the first sighting, the new template and the deletion"
        );
    }

    fn machine(owners: serde_json::Value) -> Machine {
        serde_json::from_value(json!({
            "metadata": {"name": "m", "namespace": "ns", "ownerReferences": owners},
            "spec": {"clusterName": "c", "bootstrap": {}, "infrastructureRef": {
                "apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": "m"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn owner(kind: &str, uid: &str, controller: bool) -> serde_json::Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "name": "o", "uid": uid,
               "controller": controller})
    }

    #[test]
    fn a_fresh_controlled_machine_waits_quietly_for_the_references_its_creator_makes() {
        let missing = Step::waiting(reasons::REFERENCE_NOT_FOUND, "waiting for X");
        let found = Step::waiting(reasons::WAITING_FOR_BOOTSTRAP_DATA, "waiting");
        let now = Time(jiff::Timestamp::now());
        let mut fresh = machine(json!([owner("MachineSet", "set-uid", true)]));
        fresh.metadata.creation_timestamp = Some(now.clone());
        assert!(awaiting_references_of_its_creator(&fresh, &missing, &found));
        assert!(awaiting_references_of_its_creator(&fresh, &found, &missing));
        assert!(
            !awaiting_references_of_its_creator(&fresh, &found, &found),
            "nothing missing: its status is written"
        );
        let mut stand_alone = machine(json!([]));
        stand_alone.metadata.creation_timestamp = Some(now);
        assert!(
            !awaiting_references_of_its_creator(&stand_alone, &missing, &found),
            "no controller creates a stand-alone machine's references: say they are missing"
        );
        let mut old = fresh.clone();
        old.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::now() - jiff::SignedDuration::from_secs(30),
        ));
        assert!(
            !awaiting_references_of_its_creator(&old, &missing, &found),
            "past the grace, a missing reference is reported"
        );
        let mut reported = fresh;
        let status: capi_core::api::MachineStatus = serde_json::from_value(json!({"conditions": [
            {"type": "Ready", "status": "False", "reason": "R", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
        .unwrap_or_else(|e| panic!("{e}"));
        reported.status = Some(status);
        assert!(
            !awaiting_references_of_its_creator(&reported, &missing, &found),
            "a machine with a status keeps it current"
        );
    }

    #[test]
    fn only_a_stand_alone_machine_is_adopted_by_its_cluster() {
        assert!(needs_cluster_owner(&machine(json!([])), "cluster-uid"));
        assert!(!needs_cluster_owner(
            &machine(json!([owner("KubeadmControlPlane", "kcp-uid", true)])),
            "cluster-uid"
        ));
        assert!(!needs_cluster_owner(
            &machine(json!([owner("Cluster", "cluster-uid", false)])),
            "cluster-uid"
        ));
        assert!(needs_cluster_owner(
            &machine(json!([owner("MachineSet", "set-uid", false)])),
            "cluster-uid"
        ));
    }
}
