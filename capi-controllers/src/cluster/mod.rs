//! The Cluster controller: owner references on the infrastructure cluster and control plane,
//! their readiness in `status.initialization`, the control plane endpoint and failure domains
//! copied from the infrastructure cluster, phases, replica summaries; and deletion in order.
//!
//! With a control plane provider (`spec.controlPlaneRef`), the v1beta2 control-plane contract:
//! `status.initialization.controlPlaneInitialized`, `spec.controlPlaneEndpoint` and the replica
//! counters are read from the control plane object, and its `Available` condition is mirrored as
//! `ControlPlaneAvailable` (see `control_plane.rs`). Without one the control plane counts as
//! initialised once a control-plane machine has a node, as upstream does for machine-based
//! control planes.

mod control_plane;

use std::sync::{Arc, Mutex, OnceLock};

use capi_core::api::{
    ApiEndpoint, Cluster, ClusterInitializationStatus, ClusterPhase, ClusterStatus, FailureDomain,
    Machine, MachineDeployment, MachineHealthCheck, MachineSet, ReplicaSummary,
};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DynamicObject, ListParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::mpsc;

use crate::references::{
    Confirm, ReferenceError, ReferenceWatches, References, initialization_flag,
};
use crate::workload::WorkloadClusters;
use crate::{CoreSettings, cache, ownership, receiver_stream, synced, take};
use capi_runtime::pace::{self, StatusPacer};
use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::reasons;
use capi_runtime::write;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// What the Cluster controller works with besides the client.
pub(crate) struct ClusterController {
    references: References,
    reference_changes: Mutex<Option<mpsc::UnboundedReceiver<Arc<DynamicObject>>>>,
    workloads: Arc<WorkloadClusters>,
    machines: OnceLock<Store<Machine>>,
    /// A deleting cluster's objects, from watches: each pass of a deletion reads these instead
    /// of listing every object of the namespace (one authoritative list per kind comes last,
    /// before the finalizer goes).
    deployments: OnceLock<Store<MachineDeployment>>,
    sets: OnceLock<Store<MachineSet>>,
    health_checks: OnceLock<Store<MachineHealthCheck>>,
    /// Spaces this summary's status writes (see [`capi_runtime::pace`]).
    pacer: StatusPacer,
    settings: CoreSettings,
}

impl ClusterController {
    pub(crate) fn new(
        watches: &Arc<ReferenceWatches>,
        client: kube::Client,
        namespace: Option<String>,
        workloads: Arc<WorkloadClusters>,
        settings: CoreSettings,
    ) -> Self {
        let (references, reference_changes) = References::sharing(watches, client, namespace);
        Self {
            references,
            reference_changes: Mutex::new(Some(reference_changes)),
            workloads,
            machines: OnceLock::new(),
            deployments: OnceLock::new(),
            sets: OnceLock::new(),
            health_checks: OnceLock::new(),
            pacer: StatusPacer::default(),
            settings,
        }
    }
}

/// Runs until `shutdown` completes; in-flight reconciles finish first.
pub(crate) async fn run(
    reconciler: Reconciler<Cluster, ClusterController>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, clusters) = reconciler.trigger();
    let (machines, machine_changes) = cache(reconciler.informer::<Machine>());
    let _ = reconciler.state().machines.set(machines);
    let (deployments, deployment_changes) = cache(reconciler.informer::<MachineDeployment>());
    let _ = reconciler.state().deployments.set(deployments);
    let (sets, set_changes) = cache(reconciler.informer::<MachineSet>());
    let _ = reconciler.state().sets.set(sets);
    let (health_checks, health_check_changes) = cache(reconciler.informer::<MachineHealthCheck>());
    let _ = reconciler.state().health_checks.set(health_checks);
    // A referenced object changed: the clusters that own it, and those that name it (a control
    // plane created after its cluster is not owned yet — the cluster takes ownership when it
    // sees it).
    let referring = clusters.clone();
    let owners =
        receiver_stream(take(&reconciler.state().reference_changes)).flat_map(move |object| {
            let namespace = object.namespace().unwrap_or_default();
            let name = object.name_any();
            let mut clusters: Vec<ObjectRef<Cluster>> = object
                .owner_references()
                .iter()
                .filter(|r| r.kind == "Cluster" && r.api_version.starts_with("cluster.x-k8s.io/"))
                .map(|r| ObjectRef::new(&r.name).within(&namespace))
                .collect();
            // The changes of every referenced kind of the manager arrive here (the watches are
            // shared): an object another controller owns (a Machine's infrastructure machine or
            // bootstrap config) is no cluster's reference; the others are matched by kind, group
            // and name.
            let owned_elsewhere = object
                .owner_references()
                .iter()
                .any(|r| r.controller == Some(true) && r.kind != "Cluster");
            let (kind, api_version) = object
                .types
                .as_ref()
                .map(|t| (t.kind.clone(), t.api_version.clone()))
                .unwrap_or_default();
            let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
            if !owned_elsewhere {
                clusters.extend(
                    referring
                        .state()
                        .iter()
                        .filter(|c| c.namespace().as_deref() == Some(namespace.as_str()))
                        .filter(|c| {
                            [&c.spec.control_plane_ref, &c.spec.infrastructure_ref]
                                .into_iter()
                                .flatten()
                                .any(|r| r.name == name && r.kind == kind && r.api_group == group)
                        })
                        .map(|c| ObjectRef::from_obj(c.as_ref())),
                );
            }
            stream::iter(clusters)
        });
    let concurrency = reconciler.concurrency();
    let context = reconciler.into_context(|deps, _, _| deps);
    let results = Controller::for_stream(trigger, clusters)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .watches_stream(machine_changes, |machine| {
            let namespace = machine.namespace().unwrap_or_default();
            Some(ObjectRef::new(&machine.spec.cluster_name).within(&namespace))
        })
        // A deployment, set or health check going away: its deleting cluster looks again at
        // once (their other changes are none of the cluster's business).
        .watches_stream(deployment_changes, |d| {
            leaving(&d.metadata, &d.spec.cluster_name)
        })
        .watches_stream(set_changes, |s| leaving(&s.metadata, &s.spec.cluster_name))
        .watches_stream(health_check_changes, |h| {
            leaving(&h.metadata, &h.spec.cluster_name)
        })
        .reconcile_on(owners)
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_cluster,
            back_off::<Cluster, ClusterController>,
            context,
        );
    drain(results).await;
}

/// The cluster of an object being deleted (or gone), for the cluster's deletion to go on.
fn leaving(
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    cluster: &str,
) -> Option<ObjectRef<Cluster>> {
    metadata.deletion_timestamp.as_ref()?;
    Some(ObjectRef::new(cluster).within(metadata.namespace.as_deref().unwrap_or_default()))
}

#[tracing::instrument(skip_all, fields(namespace = %cluster.namespace().unwrap_or_default(), name = %cluster.name_any()))]
async fn reconcile_cluster(
    cluster: Arc<Cluster>,
    context: Arc<Context<ClusterController>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(cluster.as_ref(), reconcile_once(&cluster, &context))
        .await
}

async fn reconcile_once(
    cluster: &Cluster,
    context: &Context<ClusterController>,
) -> Result<Next, ReconcileError> {
    let deps = &context.state;
    let namespace = cluster.namespace().unwrap_or_default();
    let api: Api<Cluster> = Api::namespaced(context.client.clone(), &namespace);
    let has_finalizer = cluster
        .finalizers()
        .iter()
        .any(|f| f == labels::CLUSTER_FINALIZER);
    if cluster.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Next::AwaitChange);
        }
        return delete(cluster, &namespace, context).await;
    }
    if !has_finalizer {
        write::change_finalizer(
            &api,
            cluster,
            FinalizerChange::Add,
            labels::CLUSTER_FINALIZER,
        )
        .await?;
        return Ok(Next::AwaitChange);
    }
    let mut status = cluster.status.clone().unwrap_or_default();
    let generation = cluster.metadata.generation;
    let set = |status: &mut ClusterStatus, type_: &str, state, reason: &str, message: String| {
        condition::set(
            &mut status.conditions,
            DesiredCondition::new(type_, state, reason)
                .message(message)
                .observed_generation(generation),
        );
    };
    let paused = cluster.is_paused();
    condition::set(
        &mut status.conditions,
        reasons::paused_condition(paused, generation),
    );
    if paused {
        write::patch_status_if_changed(&api, &cluster.name_any(), cluster.status.as_ref(), &status)
            .await?;
        return Ok(Next::AwaitChange);
    }
    let owner = cluster.controller_owner_ref(&());

    // A topology is stored, not acted on: say so where upstream reports on it.
    match &cluster.spec.topology {
        Some(topology) => set(
            &mut status,
            TOPOLOGY_RECONCILED,
            ConditionStatus::False,
            reasons::TOPOLOGY_NOT_SUPPORTED,
            format!(
                "spec.topology (ClusterClass {:?}) is stored but not acted on: this workspace's core \
                 controllers have no topology controller; run upstream Cluster API's core manager \
                 for ClusterClass clusters, or describe the cluster with controlPlaneRef, \
                 infrastructureRef and MachineDeployments",
                topology.class_ref.name
            ),
        ),
        None => {
            condition::remove(&mut status.conditions, TOPOLOGY_RECONCILED);
        }
    }

    // Infrastructure.
    let mut endpoint: Option<ApiEndpoint> = None;
    let (infra_provisioned, infra_reason, infra_message) = match &cluster.spec.infrastructure_ref {
        None => (true, reasons::PROVISIONED, String::new()),
        Some(reference) => match deps.references.get(reference, &namespace).await {
            Err(error @ ReferenceError::UnknownKind { .. }) => {
                (false, reasons::REFERENCE_KIND_UNKNOWN, error.to_string())
            }
            Err(error) => return Err(error.into()),
            Ok(None) => (
                false,
                reasons::REFERENCE_NOT_FOUND,
                format!("waiting for {} {:?}", reference.kind, reference.name),
            ),
            Ok(Some(infra)) => {
                if let Some(owner) = owner.clone() {
                    ownership::ensure_owner(
                        &deps.references,
                        reference,
                        &namespace,
                        &infra,
                        owner,
                        &cluster.name_any(),
                    )
                    .await?;
                }
                endpoint = endpoint_of(&infra);
                if let Ok(domains) = serde_json::from_value::<Vec<FailureDomain>>(
                    infra.data["status"]["failureDomains"].clone(),
                ) {
                    status.failure_domains = domains;
                }
                if initialization_flag(&infra, "provisioned") {
                    (true, reasons::PROVISIONED, String::new())
                } else {
                    (
                        false,
                        reasons::PROVISIONING,
                        format!(
                            "{} {:?} is being provisioned",
                            reference.kind, reference.name
                        ),
                    )
                }
            }
        },
    };
    set(
        &mut status,
        condition::INFRASTRUCTURE_READY,
        if infra_provisioned {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        infra_reason,
        infra_message,
    );

    // Control plane.
    let machines: Vec<Arc<Machine>> = synced(&deps.machines)
        .map(|store| {
            store
                .state()
                .into_iter()
                .filter(|m| {
                    m.namespace().as_deref() == Some(namespace.as_str())
                        && m.spec.cluster_name == cluster.name_any()
                })
                .collect()
        })
        .unwrap_or_default();
    // The control plane object, when the cluster names one and it exists.
    let mut control_plane_object = None;
    let reported_initialized = match &cluster.spec.control_plane_ref {
        Some(reference) => match deps.references.get(reference, &namespace).await {
            Err(ReferenceError::UnknownKind { .. }) | Ok(None) => false,
            Err(error) => return Err(error.into()),
            Ok(Some(control_plane)) => {
                if let Some(owner) = owner.clone() {
                    ownership::ensure_owner(
                        &deps.references,
                        reference,
                        &namespace,
                        &control_plane,
                        owner,
                        &cluster.name_any(),
                    )
                    .await?;
                }
                if endpoint.is_none() {
                    endpoint = endpoint_of(&control_plane);
                }
                let initialized = initialization_flag(&control_plane, "controlPlaneInitialized");
                control_plane_object = Some(control_plane);
                initialized
            }
        },
        None => machines.iter().any(|m| {
            m.is_control_plane() && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
        }),
    };
    // Once initialized, always initialized (as upstream): a control plane that goes away later is
    // reported as deleted, not as never having existed.
    let control_plane_initialized = reported_initialized
        || cluster
            .status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.control_plane_initialized)
            == Some(true);
    if let Some(reference) = &cluster.spec.control_plane_ref {
        let verdict = control_plane::available(
            &reference.kind,
            control_plane_object.as_deref(),
            control_plane_initialized,
            cluster.metadata.deletion_timestamp.is_some(),
        );
        set(
            &mut status,
            control_plane::CONTROL_PLANE_AVAILABLE,
            verdict.status,
            &verdict.reason,
            verdict.message,
        );
    }
    set(
        &mut status,
        condition::CONTROL_PLANE_INITIALIZED,
        if control_plane_initialized {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        if control_plane_initialized {
            "Initialized"
        } else {
            "WaitingForControlPlane"
        },
        String::new(),
    );
    let current_endpoint = cluster
        .spec
        .control_plane_endpoint
        .clone()
        .unwrap_or_default();
    if let Some(found) = endpoint.filter(|e| e.is_valid())
        && !current_endpoint.is_valid()
    {
        let patch = json!({"spec": {"controlPlaneEndpoint": found}});
        write::patch(&api, &cluster.name_any(), patch).await?;
    }
    let endpoint_valid = current_endpoint.is_valid()
        || cluster.spec.infrastructure_ref.is_none() && cluster.spec.control_plane_ref.is_none();

    status.initialization = Some(ClusterInitializationStatus {
        infrastructure_provisioned: Some(infra_provisioned),
        control_plane_initialized: Some(control_plane_initialized),
    });
    status.phase = Some(if infra_provisioned && endpoint_valid {
        ClusterPhase::Provisioned
    } else if cluster.spec.infrastructure_ref.is_some() {
        ClusterPhase::Provisioning
    } else {
        ClusterPhase::Pending
    });
    let (available, reason, message) = match (infra_provisioned, control_plane_initialized) {
        (true, true) => (
            ConditionStatus::True,
            reasons::MACHINE_AVAILABLE,
            String::new(),
        ),
        (false, _) => (
            ConditionStatus::False,
            reasons::PROVISIONING,
            "the infrastructure is not provisioned yet".to_string(),
        ),
        (true, false) => (
            ConditionStatus::False,
            reasons::PROVISIONING,
            "the control plane is not initialized yet".to_string(),
        ),
    };
    set(
        &mut status,
        condition::AVAILABLE,
        available,
        reason,
        message,
    );
    let summary = |control_plane: bool| {
        let group: Vec<&Arc<Machine>> = machines
            .iter()
            .filter(|m| m.is_control_plane() == control_plane)
            .collect();
        let count = |f: &dyn Fn(&Machine) -> bool| {
            i32::try_from(group.iter().filter(|m| f(m)).count()).unwrap_or(i32::MAX)
        };
        let has = |type_: &'static str| {
            move |m: &Machine| {
                m.status
                    .as_ref()
                    .is_some_and(|s| condition::is_true(&s.conditions, type_))
            }
        };
        ReplicaSummary {
            desired_replicas: None,
            replicas: Some(count(&|_| true)),
            ready_replicas: Some(count(&has(condition::READY))),
            available_replicas: Some(count(&has(condition::AVAILABLE))),
            up_to_date_replicas: None,
            versions: versions(group.iter().filter_map(|m| m.spec.version.as_deref())),
            upgrade_plan: Vec::new(),
        }
    };
    // A control plane provider reports its own counters; machines are counted only without one.
    status.control_plane = Some(match &control_plane_object {
        Some(object) => control_plane::replicas(object),
        None => summary(true),
    });
    status.workers = Some(summary(false));
    status.observed_generation = generation;
    let next = if infra_provisioned {
        Next::AwaitChange
    } else {
        Next::Requeue(deps.settings.poll)
    };
    Ok(pace::patch_status(
        &deps.pacer,
        &api,
        cluster,
        cluster.status.as_ref(),
        &status,
        next,
    )
    .await?)
}

/// `spec.controlPlaneEndpoint` of an infrastructure cluster or control plane, if it has one.
fn endpoint_of(object: &DynamicObject) -> Option<ApiEndpoint> {
    serde_json::from_value(object.data["spec"]["controlPlaneEndpoint"].clone()).ok()
}

/// One pass of deleting a cluster: deployments, sets, health checks and machines first; then the
/// control plane and infrastructure objects; then the Secrets and ConfigMaps the cluster owns;
/// then the finalizer.
async fn delete(
    cluster: &Cluster,
    namespace: &str,
    context: &Context<ClusterController>,
) -> Result<Next, ReconcileError> {
    let deps = &context.state;
    let client = &context.client;
    let name = cluster.name_any();
    let api: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    let mut status = cluster.status.clone().unwrap_or_default();
    status.phase = Some(ClusterPhase::Deleting);

    let mut left = Vec::new();
    let of_cluster = Seen {
        client,
        namespace,
        cluster: &name,
    };
    let deployments = of_cluster
        .delete_all(&deps.deployments, |d: &MachineDeployment| {
            &d.spec.cluster_name
        })
        .await?;
    let sets = of_cluster
        .delete_all(&deps.sets, |s: &MachineSet| &s.spec.cluster_name)
        .await?;
    of_cluster
        .delete_all(&deps.health_checks, |h: &MachineHealthCheck| {
            &h.spec.cluster_name
        })
        .await?;
    // Machines of sets go with their sets; the others now — except a control plane provider's,
    // which it deletes itself once it is deleted (after the workers, as upstream).
    let ours = |m: &Machine| cluster.spec.control_plane_ref.is_none() || !m.is_control_plane();
    let machines = if deployments + sets == 0 {
        of_cluster
            .delete_all_where(&deps.machines, |m: &Machine| &m.spec.cluster_name, ours)
            .await?
    } else {
        of_cluster
            .objects(&deps.machines, |m: &Machine| &m.spec.cluster_name)
            .await?
            .iter()
            .filter(|m| ours(m))
            .count()
    };
    for (count, what) in [
        (deployments, "MachineDeployments"),
        (sets, "MachineSets"),
        (machines, "Machines"),
    ] {
        if count > 0 {
            left.push(format!("{count} {what}"));
        }
    }
    // Then the control plane, and only once it is gone the infrastructure (its load balancer
    // fronts the control plane to the end).
    for reference in [
        &cluster.spec.control_plane_ref,
        &cluster.spec.infrastructure_ref,
    ]
    .into_iter()
    .flatten()
    {
        if !left.is_empty() {
            break;
        }
        if deps
            .references
            .delete(reference, namespace, Confirm::Absence)
            .await?
        {
            left.push(format!("{} {:?}", reference.kind, reference.name));
        }
    }
    if !left.is_empty() {
        let message = format!("waiting for {} to be deleted", left.join(", "));
        condition::set(
            &mut status.conditions,
            DesiredCondition::new(
                condition::DELETING,
                ConditionStatus::True,
                reasons::DELETING,
            )
            .message(message)
            .observed_generation(cluster.metadata.generation),
        );
        // Paced: the count of what is left changes with every machine that goes.
        return Ok(pace::patch_status(
            &deps.pacer,
            &api,
            cluster,
            cluster.status.as_ref(),
            &status,
            Next::Requeue(deps.settings.poll),
        )
        .await?);
    }
    // The caches said nothing is left: make sure, from the API server, before letting go.
    let remaining =
        list_of_cluster::<MachineDeployment>(client, namespace, &name, |d| &d.spec.cluster_name)
            .await?
            .len()
            + list_of_cluster::<MachineSet>(client, namespace, &name, |s| &s.spec.cluster_name)
                .await?
                .len()
            + list_of_cluster::<MachineHealthCheck>(client, namespace, &name, |h| {
                &h.spec.cluster_name
            })
            .await?
            .len()
            + list_of_cluster::<Machine>(client, namespace, &name, |m| &m.spec.cluster_name)
                .await?
                .len();
    if remaining > 0 {
        return Ok(Next::Requeue(deps.settings.poll));
    }
    // What the cluster owns in the management cluster (PKI, kubeconfig, locks): deleted here, so
    // that nothing is left even without a garbage collector.
    let uid = cluster.uid().unwrap_or_default();
    delete_owned::<Secret>(client, namespace, &uid).await?;
    delete_owned::<ConfigMap>(client, namespace, &uid).await?;
    deps.workloads.forget(namespace, &name);
    write::change_finalizer(
        &api,
        cluster,
        FinalizerChange::Remove,
        labels::CLUSTER_FINALIZER,
    )
    .await?;
    Ok(Next::AwaitChange)
}

async fn list_of_cluster<K>(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    cluster_of: impl Fn(&K) -> &String,
) -> Result<Vec<K>, kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|o| cluster_of(o) == cluster)
        .collect())
}

/// Where a deletion pass reads a cluster's objects: the controller's caches once they hold a
/// full list, the API server (a list of the namespace) before that.
struct Seen<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
    cluster: &'a str,
}

impl Seen<'_> {
    /// The objects of the cluster.
    async fn objects<K>(
        &self,
        cache: &OnceLock<Store<K>>,
        cluster_of: impl Fn(&K) -> &String,
    ) -> Result<Vec<Arc<K>>, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        match synced(cache) {
            Some(store) => Ok(store
                .state()
                .into_iter()
                .filter(|o| {
                    o.namespace().as_deref() == Some(self.namespace)
                        && cluster_of(o) == self.cluster
                })
                .collect()),
            None => Ok(
                list_of_cluster(self.client, self.namespace, self.cluster, cluster_of)
                    .await?
                    .into_iter()
                    .map(Arc::new)
                    .collect(),
            ),
        }
    }

    /// Requests deletion of every object of the cluster; returns how many are left.
    async fn delete_all<K>(
        &self,
        cache: &OnceLock<Store<K>>,
        cluster_of: impl Fn(&K) -> &String,
    ) -> Result<usize, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        self.delete_all_where(cache, cluster_of, |_| true).await
    }

    /// [`Seen::delete_all`] of the objects `which` selects.
    async fn delete_all_where<K>(
        &self,
        cache: &OnceLock<Store<K>>,
        cluster_of: impl Fn(&K) -> &String,
        which: impl Fn(&K) -> bool,
    ) -> Result<usize, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace);
        let objects: Vec<Arc<K>> = self
            .objects(cache, cluster_of)
            .await?
            .into_iter()
            .filter(|o| which(o))
            .collect();
        for object in objects
            .iter()
            .filter(|o| o.meta().deletion_timestamp.is_none())
        {
            write::delete(&api, &object.name_any()).await?;
        }
        Ok(objects.len())
    }
}

/// Deletes the objects of kind `K` in `namespace` owned by the object with this UID.
async fn delete_owned<K>(
    client: &kube::Client,
    namespace: &str,
    owner_uid: &str,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    for object in api.list_metadata(&ListParams::default()).await?.items {
        if ownership::is_owned_by(&object.metadata, owner_uid) {
            write::delete(&api, &object.metadata.name.unwrap_or_default()).await?;
        }
    }
    Ok(())
}

/// The condition upstream's topology controller keeps on a Cluster with a `spec.topology`.
pub const TOPOLOGY_RECONCILED: &str = "TopologyReconciled";

/// How many machines run each Kubernetes version, by version (deterministic, so that the status
/// does not change from one pass to the next).
fn versions<'a>(of: impl Iterator<Item = &'a str>) -> Vec<capi_core::api::StatusVersion> {
    let mut counts = std::collections::BTreeMap::<&str, i32>::new();
    for version in of {
        *counts.entry(version).or_default() += 1;
    }
    counts
        .into_iter()
        .take(32)
        .map(|(version, n)| capi_core::api::StatusVersion {
            version: version.to_string(),
            replicas: Some(n),
        })
        .collect()
}
