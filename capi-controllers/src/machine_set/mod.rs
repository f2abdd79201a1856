//! The MachineSet controller: keeps `spec.replicas` machines made from the template.
//!
//! Each pass: adopt orphans matching the selector; wait until the cache shows this controller's
//! own previous creates and deletes (`Expectations`); delete machines a health check marked for
//! remediation; complete machines whose bootstrap config or infrastructure machine is missing (a
//! crash between creating the Machine and cloning its templates); create the missing machines or
//! delete the surplus by [`deletion_priority`]; write status.

pub mod deletion_priority;
mod expectations;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use capi_core::api::{
    Cluster, ContractVersionedObjectReference, Machine, MachineSet, MachineSetStatus,
};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ListParams, PostParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use self::deletion_priority::{MachineFacts, select_for_deletion};
use self::expectations::Expectations;
use crate::machine::status::{HEALTH_CHECK_SUCCEEDED, OWNER_REMEDIATED};
use crate::references::{ReferenceWatches, References, instance_of};
use crate::{
    CoreSettings, cache, cluster_cache, find_cluster, of_cluster, ownership, replicas, selector,
    synced,
};
use capi_runtime::pace::{self, StatusPacer};
use capi_runtime::plan::{EventNote, FinalizerChange, Next};
use capi_runtime::reasons;
use capi_runtime::write;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// The finalizer that makes a deleted MachineSet delete its machines first.
pub const MACHINE_SET_FINALIZER: &str = "machineset.cluster.x-k8s.io";

/// What the MachineSet controller works with besides the client.
pub(crate) struct MachineSetController {
    references: References,
    expectations: Expectations,
    machines: OnceLock<Store<Machine>>,
    clusters: OnceLock<Store<Cluster>>,
    /// Spaces this summary's status writes (see [`capi_runtime::pace`]).
    pacer: StatusPacer,
    settings: CoreSettings,
}

impl MachineSetController {
    pub(crate) fn new(
        watches: &Arc<ReferenceWatches>,
        client: kube::Client,
        namespace: Option<String>,
        settings: CoreSettings,
    ) -> Self {
        // Changes of referenced objects do not concern sets: the receiver is dropped.
        let (references, _) = References::sharing(watches, client, namespace);
        Self {
            references,
            expectations: Expectations::default(),
            machines: OnceLock::new(),
            clusters: OnceLock::new(),
            pacer: StatusPacer::default(),
            settings,
        }
    }
}

/// Runs until `shutdown` completes; in-flight reconciles finish first.
pub(crate) async fn run(
    reconciler: Reconciler<MachineSet, MachineSetController>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, sets) = reconciler.trigger();
    let (machines, machine_changes) = cache(reconciler.informer::<Machine>());
    let (clusters, cluster_changes) = cluster_cache(reconciler.informer::<Cluster>());
    let _ = reconciler.state().machines.set(machines);
    let _ = reconciler.state().clusters.set(clusters);
    let concurrency = reconciler.concurrency();
    let for_machines = sets.clone();
    let for_clusters = sets.clone();
    let context = reconciler.into_context(|deps, _, _| deps);
    let results = Controller::for_stream(trigger, sets)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        // A machine changed: its set (or, for an orphan, the sets that would adopt it).
        .watches_stream(machine_changes, move |machine| {
            let namespace = machine.namespace();
            if let Some(owner) = ownership::controller_of(&machine.metadata) {
                return if owner.kind == "MachineSet" {
                    vec![ObjectRef::new(&owner.name).within(&namespace.unwrap_or_default())]
                } else {
                    Vec::new()
                };
            }
            for_machines
                .state()
                .into_iter()
                .filter(|s| {
                    s.namespace() == namespace
                        && s.spec.cluster_name == machine.spec.cluster_name
                        && selector::matches(&s.spec.selector, machine.metadata.labels.as_ref())
                })
                .map(|s| ObjectRef::from_obj(s.as_ref()))
                .collect()
        })
        .watches_stream(
            cluster_changes,
            of_cluster(for_clusters, |s: &MachineSet| &s.spec.cluster_name),
        )
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_set,
            back_off::<MachineSet, MachineSetController>,
            context,
        );
    drain(results).await;
}

#[tracing::instrument(skip_all, fields(namespace = %set.namespace().unwrap_or_default(), name = %set.name_any()))]
async fn reconcile_set(
    set: Arc<MachineSet>,
    context: Arc<Context<MachineSetController>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(set.as_ref(), reconcile_once(&set, &context))
        .await
}

/// Whether the API server (read fresh, metadata only, a page at a time) still has a machine of
/// set `name` controlled by `uid`.
async fn owned_machine_left(
    machines: &Api<Machine>,
    name: &str,
    uid: &str,
) -> Result<bool, kube::Error> {
    let selector = format!("{}={name}", labels::MACHINE_SET_NAME);
    let mut params = ListParams::default().labels(&selector).limit(100);
    loop {
        let page = machines.list_metadata(&params).await?;
        if page
            .items
            .iter()
            .any(|m| ownership::is_controlled_by(&m.metadata, uid))
        {
            return Ok(true);
        }
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(false),
        }
    }
}

async fn reconcile_once(
    set: &MachineSet,
    context: &Context<MachineSetController>,
) -> Result<Next, ReconcileError> {
    let deps = &context.state;
    let namespace = set.namespace().unwrap_or_default();
    let sets: Api<MachineSet> = Api::namespaced(context.client.clone(), &namespace);
    let machines_api: Api<Machine> = Api::namespaced(context.client.clone(), &namespace);
    let uid = set.uid().unwrap_or_default();
    let has_finalizer = set.finalizers().iter().any(|f| f == MACHINE_SET_FINALIZER);

    if set.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Next::AwaitChange);
        }
        // The machines from the cache (each pass of a deletion reads no more than that: a list of
        // thousands of machines per pass is most of a manager's memory at scale); each one gone
        // brings the set back here.
        let Some(store) = synced(&deps.machines) else {
            return Ok(Next::Requeue(deps.settings.poll));
        };
        let owned: Vec<Arc<Machine>> = store
            .state()
            .into_iter()
            .filter(|m| {
                m.namespace().as_deref() == Some(namespace.as_str())
                    && ownership::is_controlled_by(&m.metadata, &uid)
            })
            .collect();
        if owned.is_empty() {
            // The cache may not show yet a machine created just before the deletion: the finalizer
            // goes only once the API server, read fresh (metadata only), has none either.
            if owned_machine_left(&machines_api, &set.name_any(), &uid).await? {
                return Ok(Next::Requeue(deps.settings.poll));
            }
            deps.expectations.forget(&uid);
            write::change_finalizer(&sets, set, FinalizerChange::Remove, MACHINE_SET_FINALIZER)
                .await?;
            return Ok(Next::AwaitChange);
        }
        for machine in owned
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
        {
            write::delete(&machines_api, &machine.name_any()).await?;
        }
        return Ok(Next::Requeue(deps.settings.poll));
    }
    if !has_finalizer {
        write::change_finalizer(&sets, set, FinalizerChange::Add, MACHINE_SET_FINALIZER).await?;
        return Ok(Next::AwaitChange);
    }
    let mut status = set.status.clone().unwrap_or_default();
    let mismatch = selector::template_mismatch(
        "MachineSet",
        &set.spec.selector,
        set.spec.template.metadata.as_ref().map(|m| &m.labels),
    );
    if selector::record_mismatch(&mut status.conditions, mismatch, set.metadata.generation) {
        write::patch_status_if_changed(&sets, &set.name_any(), set.status.as_ref(), &status)
            .await?;
        return Ok(Next::AwaitChange);
    }
    let cluster = match deps.clusters.get() {
        Some(store) => {
            find_cluster(store, &context.client, &set.spec.cluster_name, &namespace).await?
        }
        None => None,
    };
    let Some(cluster) = cluster else {
        return Ok(Next::Requeue(deps.settings.poll));
    };
    let paused = cluster.is_paused() || labels::has_paused_annotation(&set.metadata);
    set_condition(&mut status, set, condition::PAUSED, paused);
    if paused {
        write::patch_status_if_changed(&sets, &set.name_any(), set.status.as_ref(), &status)
            .await?;
        return Ok(Next::AwaitChange);
    }
    let current = set.status.as_ref().and_then(|s| s.replicas);
    match replicas::defaulted(set.spec.replicas, set.annotations(), current) {
        Ok(Some(replicas)) => {
            replicas::write(&sets, set, replicas).await?;
            return Ok(Next::AwaitChange);
        }
        Ok(None) => status
            .conditions
            .retain(|c| !(c.type_ == condition::SCALING_UP && c.reason == reasons::INVALID_SPEC)),
        Err(message) => {
            condition::set(
                &mut status.conditions,
                DesiredCondition::new(
                    condition::SCALING_UP,
                    ConditionStatus::False,
                    reasons::INVALID_SPEC,
                )
                .message(message)
                .observed_generation(set.metadata.generation),
            );
            write::patch_status_if_changed(&sets, &set.name_any(), set.status.as_ref(), &status)
                .await?;
            return Ok(Next::AwaitChange);
        }
    }

    let Some(store) = synced(&deps.machines) else {
        return Ok(Next::Requeue(deps.settings.poll));
    };
    let candidates: Vec<Arc<Machine>> = store
        .state()
        .into_iter()
        .filter(|m| m.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|m| {
            ownership::is_controlled_by(&m.metadata, &uid)
                || (ownership::controller_of(&m.metadata).is_none()
                    && m.metadata.deletion_timestamp.is_none()
                    && m.spec.cluster_name == set.spec.cluster_name
                    && selector::matches(&set.spec.selector, m.metadata.labels.as_ref()))
        })
        .collect();
    // Adopt orphans; the watch brings them back owned.
    let mut adopted = false;
    for orphan in candidates
        .iter()
        .filter(|m| !ownership::is_controlled_by(&m.metadata, &uid))
    {
        if let Some(owner) = set.controller_owner_ref(&()) {
            let mut owners = orphan.owner_references().to_vec();
            owners.push(owner);
            let patch = json!({"metadata": {
                "ownerReferences": owners,
                "labels": {labels::MACHINE_SET_NAME: set.name_any()},
                "resourceVersion": orphan.resource_version(),
            }});
            write::patch(&machines_api, &orphan.name_any(), patch).await?;
            adopted = true;
        }
    }
    if adopted {
        return Ok(Next::AwaitChange);
    }
    let present = |name: &str| {
        candidates
            .iter()
            .any(|m| m.name_any() == name && m.metadata.deletion_timestamp.is_none())
    };
    if !deps.expectations.satisfied(&uid, present) {
        // The machine watch triggers the next pass as soon as the cache catches up.
        return Ok(Next::Requeue(deps.settings.poll));
    }

    let mut events = Vec::new();
    let mut active: Vec<Arc<Machine>> = candidates
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();
    // Machines a health check marked: deleted, and replaced below.
    let remediate: Vec<String> = active
        .iter()
        .filter(|m| remediation_requested(m))
        .map(|m| m.name_any())
        .collect();
    for name in &remediate {
        deps.expectations.deleted(&uid, name);
        write::delete(&machines_api, name).await?;
        events.push(note(
            reasons::MACHINE_DELETED,
            format!("deleted machine {name} for remediation"),
        ));
    }
    active.retain(|m| !remediate.contains(&m.name_any()));

    for machine in &active {
        complete_machine(set, machine, &namespace, deps).await?;
    }

    let desired = usize::try_from(set.spec.replicas.unwrap_or(1)).unwrap_or(0);
    // A machine on its way out still holds its slot (and its instance) until it is gone, as
    // upstream counts it: never more instances than replicas, and an OnDelete deployment has time
    // to shrink the old set before a user-deleted machine would be replaced from it.
    let leaving = candidates
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_some())
        .count()
        + remediate.len();
    let mut next = Next::AwaitChange;
    let creation_disabled = set
        .annotations()
        .get(labels::DISABLE_MACHINE_CREATE)
        .is_some_and(|v| v == "true");
    // An old set of an OnDelete rollout creates nothing: its deployment shrinks it to what is left.
    let missing = if creation_disabled {
        0
    } else {
        desired.saturating_sub(active.len() + leaving)
    };
    if missing > 0 {
        let created = stream::iter(0..missing)
            .map(|_| create_machine(set, &cluster, &namespace, context))
            .buffer_unordered(deps.settings.machine_set_parallelism.max(1))
            .collect::<Vec<_>>()
            .await;
        let mut failure = None;
        for result in created {
            match result {
                Ok(name) => events.push(note(
                    reasons::MACHINE_CREATED,
                    format!("created machine {name}"),
                )),
                Err(error) => failure = Some(error),
            }
        }
        if let Some(error) = failure {
            write::publish(&context.recorder, set, &events).await;
            return Err(error);
        }
    } else if active.len() > desired {
        let facts: Vec<MachineFacts> = active.iter().map(|m| machine_facts(m)).collect();
        let order = set
            .spec
            .deletion
            .as_ref()
            .and_then(|d| d.order)
            .unwrap_or_default();
        for name in select_for_deletion(&facts, active.len() - desired, order) {
            deps.expectations.deleted(&uid, &name);
            write::delete(&machines_api, &name).await?;
            events.push(note(
                reasons::MACHINE_DELETED,
                format!("deleted machine {name}"),
            ));
        }
    } else if leaving == 0 {
        next = Next::Resync;
    }

    let count = |f: &dyn Fn(&Machine) -> bool| {
        i32::try_from(active.iter().filter(|m| f(m)).count()).unwrap_or(i32::MAX)
    };
    status.replicas = Some(count(&|_| true));
    status.ready_replicas = Some(count(&|m| machine_condition(m, condition::READY)));
    status.available_replicas = Some(count(&|m| machine_condition(m, condition::AVAILABLE)));
    status.up_to_date_replicas = Some(count(&|m| machine_condition(m, condition::UP_TO_DATE)));
    status.selector = Some(selector::to_string(&set.spec.selector));
    status.observed_generation = set.metadata.generation;
    let next =
        pace::patch_status(&deps.pacer, &sets, set, set.status.as_ref(), &status, next).await?;
    write::publish(&context.recorder, set, &events).await;
    Ok(next)
}

fn note(reason: &'static str, text: String) -> EventNote {
    EventNote {
        warning: false,
        reason,
        note: text,
    }
}

fn set_condition(status: &mut MachineSetStatus, set: &MachineSet, type_: &str, value: bool) {
    let (state, reason) = if value {
        (ConditionStatus::True, reasons::PAUSED)
    } else {
        (ConditionStatus::False, reasons::NOT_PAUSED)
    };
    condition::set(
        &mut status.conditions,
        DesiredCondition::new(type_, state, reason).observed_generation(set.metadata.generation),
    );
}

fn machine_condition(machine: &Machine, type_: &str) -> bool {
    machine
        .status
        .as_ref()
        .is_some_and(|s| condition::is_true(&s.conditions, type_))
}

/// Marked by a health check for its owner to replace (`OwnerRemediated=False`).
fn remediation_requested(machine: &Machine) -> bool {
    machine.status.as_ref().is_some_and(|s| {
        condition::status(&s.conditions, OWNER_REMEDIATED) == Some(ConditionStatus::False)
    })
}

fn machine_facts(machine: &Machine) -> MachineFacts {
    let annotated = machine.annotations().contains_key(labels::DELETE_MACHINE);
    let unhealthy = remediation_requested(machine)
        || machine.status.as_ref().is_none_or(|s| {
            s.node_ref.is_none()
                || condition::status(&s.conditions, HEALTH_CHECK_SUCCEEDED)
                    == Some(ConditionStatus::False)
        });
    MachineFacts {
        name: machine.name_any(),
        created: machine
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second()),
        marked_for_deletion: annotated || machine.metadata.deletion_timestamp.is_some(),
        unhealthy,
    }
}

/// The object a template reference stands for: same group, kind without `Template`, named after
/// the machine.
/// Creates one machine: the Machine first (its references name objects that do not exist yet),
/// then its bootstrap config and infrastructure machine, owned by it. Returns its name.
async fn create_machine(
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
async fn complete_machine(
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
    let copied: BTreeMap<String, String> = [
        labels::CLUSTER_NAME,
        labels::MACHINE_SET_NAME,
        labels::MACHINE_DEPLOYMENT_NAME,
    ]
    .into_iter()
    .filter_map(|key| Some((key.to_string(), machine.labels().get(key)?.clone())))
    .collect();
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
