//! The floor of the **many single-node clusters** scenario: the least any correct set of
//! controllers must write to bring N clusters — each a `Cluster`, its `InMemoryCluster`, an
//! `InMemoryMachineTemplate` and a `KubeadmControlPlane` of one replica, the documents the
//! scenario applies — from nothing to `Available`, each family of controllers on a client of its
//! own at the manager's limits, against the same API server in the same run.
//!
//! Per cluster, in causal order (the reference is upstream Cluster API v1.14: the core
//! reconcilers `core/reconcilers/{cluster,machine}`, the KubeadmControlPlane's
//! `controlplane/kubeadm/reconcilers/kubeadmcontrolplane`, the kubeadm bootstrap's
//! `bootstrap/kubeadm/reconcilers/kubeadmconfig`, and the infrastructure provider contract):
//!
//! - the user (not a family, no rate limit, as the scenario's driver): create the four
//!   documents (4);
//! - core: the `Cluster`'s finalizer (its deletion must wait for what it owns); the `Cluster`
//!   owner reference on the `InMemoryCluster` and on the `KubeadmControlPlane` (the
//!   infrastructure cluster contract and the control plane both wait for their owner) (3);
//! - control plane: the `KubeadmControlPlane`'s finalizer (its machines and certificates must
//!   go first) (1);
//! - infrastructure: the `InMemoryCluster`'s finalizer (before its load balancer may exist),
//!   its `spec.controlPlaneEndpoint`, then its status (`initialization.provisioned`) (3);
//! - core: the `Cluster`'s `spec.controlPlaneEndpoint` and its status
//!   (`initialization.infrastructureProvisioned`, `InfrastructureReady`): the control plane and
//!   the bootstrap provider wait for both (2);
//! - control plane: the cluster's four certificate authorities (`-ca`, `-etcd`, `-proxy`, `-sa`
//!   Secrets), then the first machine: its `Machine` (finalizer, labels and controller owner set
//!   at creation), `KubeadmConfig` (init configuration) and `InMemoryMachine`, both owned by the
//!   `Machine` (7);
//! - bootstrap: the init lock (a ConfigMap: a bootstrap config may be created by anyone, not only
//!   by a control plane that creates one machine at a time, so only the lock keeps a second
//!   `kubeadm init` out), the bootstrap data `Secret`, then the `KubeadmConfig` status (3);
//! - core: the `Machine`'s `spec.bootstrap.dataSecretName` (1);
//! - infrastructure: the `InMemoryMachine`'s finalizer, `spec.providerID`, status (3);
//! - core: the `Machine`'s `spec.providerID`, then its status (Running, node reference) (2);
//! - control plane: its status — initialized, one replica ready and available, `Available`
//!   (1);
//! - core: the `Cluster`'s status — control plane initialized and available, `Available` (1).
//!
//! That is 27 writes by the families and 4 by the user per cluster; no events, no status step
//! the next controller does not read. The `<cluster>-kubeconfig` Secret is not written: the
//! scenario writes it before its clock (it points at the simulated workload API server). Like
//! the controllers, the floor holds a watch on each kind it writes for its whole run; nothing is
//! read back: every write is made from what the floor wrote before. The scenario's time to every
//! cluster `Available` divided by this one says what the SDK's machinery costs on top of the
//! contract's own writes at the limits.

use std::sync::Arc;

use anyhow::{Context, Result};
use capi_bootstrap::api::KubeadmConfig;
use capi_control_plane::api::KubeadmControlPlane;
use capi_core::api::{Cluster, Machine};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client};
use provider_inmemory::api::{InMemoryCluster, InMemoryMachine};
use serde_json::{Value, json};

use super::super::Options;
use super::super::rig::{Rig, create};
use super::super::stack::{KUBERNETES_VERSION, Workers, generated_cluster_with};
use super::{Floor, FloorEnd, NAMESPACE, family_client, in_workers, patch, patch_status, watch};
use crate::command::step;

/// The families' writes per cluster.
pub(crate) const FAMILY_WRITES_PER_CLUSTER: u32 = 27;
/// The user's creates per cluster.
const USER_WRITES_PER_CLUSTER: u32 = 4;

/// One client per family of controllers, each with the manager's rate limit.
#[derive(Clone)]
struct Families {
    user: Client,
    core: Client,
    control_plane: Client,
    bootstrap: Client,
    infrastructure: Client,
}

/// Runs the floor program for `clusters` clusters (the manager must not be running: it would
/// reconcile these objects).
pub(crate) async fn run(rig: &Rig, options: &Options, clusters: u32) -> Result<Floor> {
    step(&format!(
        "Floor program: the writes the contract requires for {clusters} single-node clusters ({FAMILY_WRITES_PER_CLUSTER} by the families and {USER_WRITES_PER_CLUSTER} by the user per cluster), {} workers, qps {} burst {} per family, with watches",
        options.manager.concurrency, options.manager.qps, options.manager.burst
    ));
    let admin = rig.client.clone();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let config = rig.management.config().await?;
    let family = || family_client(&config, options);
    let families = Families {
        user: admin.clone(),
        core: family()?,
        control_plane: family()?,
        bootstrap: family()?,
        infrastructure: family()?,
    };
    let watches = vec![
        watch::<Cluster>(&families.core, NAMESPACE),
        watch::<Machine>(&families.core, NAMESPACE),
        watch::<KubeadmControlPlane>(&families.control_plane, NAMESPACE),
        watch::<KubeadmConfig>(&families.bootstrap, NAMESPACE),
        watch::<Secret>(&families.bootstrap, NAMESPACE),
        watch::<ConfigMap>(&families.bootstrap, NAMESPACE),
        watch::<InMemoryCluster>(&families.infrastructure, NAMESPACE),
        watch::<InMemoryMachine>(&families.infrastructure, NAMESPACE),
    ];
    // Payloads of a realistic size: a certificate authority's PEM certificate and key, and the
    // init data of a first control-plane machine (a cloud-config carrying them).
    let pem = "-----BEGIN CERTIFICATE-----\n".to_string() + &"A".repeat(1400);
    let init_data = "#cloud-config\n".to_string() + &"# kubeadm init …\n".repeat(600);

    let (pem, init_data): (Arc<str>, Arc<str>) = (pem.into(), init_data.into());
    let (seconds, writes) = in_workers(&admin, options.manager.concurrency, clusters, move |i| {
        let families = families.clone();
        let (pem, init_data) = (Arc::clone(&pem), Arc::clone(&init_data));
        async move { one_cluster(&families, i, &pem, &init_data).await }
    })
    .await?;
    for watch in watches {
        watch.abort();
    }
    println!("    {clusters} clusters written in {seconds:.1}s ({writes:.0} writes)");
    Ok(Floor {
        seconds,
        writes,
        end: FloorEnd::ClustersAvailable,
    })
}

/// A condition as the floor writes it: true, now.
fn condition(kind: &str) -> Value {
    json!({"type": kind, "status": "True", "reason": kind, "message": "",
           "lastTransitionTime": "2026-11-25T00:00:00Z"})
}

/// An owner reference to `object`, a controller's when `controller`.
fn owner(object: &Value, controller: bool) -> Value {
    json!([{
        "apiVersion": object["apiVersion"], "kind": object["kind"],
        "name": object["metadata"]["name"], "uid": object["metadata"]["uid"],
        "controller": controller, "blockOwnerDeletion": true,
    }])
}

/// The writes of one cluster.
async fn one_cluster(families: &Families, i: u32, pem: &str, init_data: &str) -> Result<()> {
    let name = format!("f{i:05}");
    let control_plane_name = format!("{name}-control-plane");
    let machine_name = format!("{control_plane_name}-0");
    let labels = json!({"cluster.x-k8s.io/cluster-name": name});

    // The user: the scenario's documents of this cluster.
    let mut created: Vec<Value> = Vec::new();
    for object in generated_cluster_with(
        &name,
        NAMESPACE,
        0,
        Workers::Deployment { health_check: true },
        KUBERNETES_VERSION,
    )? {
        let types = object.types.as_ref().context("an object without a kind")?;
        let gvk = GroupVersionKind::try_from(types)?;
        let api: Api<DynamicObject> = Api::namespaced_with(
            families.user.clone(),
            NAMESPACE,
            &ApiResource::from_gvk(&gvk),
        );
        created.push(serde_json::to_value(
            api.create(&PostParams::default(), &object).await?,
        )?);
    }
    let of_kind = |kind: &str| -> Result<&Value> {
        created
            .iter()
            .find(|o| o["kind"] == kind)
            .with_context(|| format!("the scenario's documents have no {kind}"))
    };
    let cluster = of_kind("Cluster")?;
    let kcp = of_kind("KubeadmControlPlane")?;

    let core = &families.core;
    let control_plane = &families.control_plane;
    let bootstrap = &families.bootstrap;
    let infrastructure = &families.infrastructure;
    patch::<Cluster>(
        core,
        &name,
        json!({"metadata": {"finalizers": ["cluster.cluster.x-k8s.io"]}}),
    )
    .await?;
    patch::<InMemoryCluster>(
        core,
        &name,
        json!({"metadata": {"ownerReferences": owner(cluster, false), "labels": labels}}),
    )
    .await?;
    patch::<KubeadmControlPlane>(
        core,
        &control_plane_name,
        json!({"metadata": {"ownerReferences": owner(cluster, false), "labels": labels}}),
    )
    .await?;
    patch::<KubeadmControlPlane>(
        control_plane,
        &control_plane_name,
        json!({"metadata": {"finalizers": ["kubeadm.controlplane.cluster.x-k8s.io"]}}),
    )
    .await?;

    let host = format!("10.1.{}.{}", i / 250, i % 250 + 1);
    let endpoint = json!({"host": host, "port": 6443});
    patch::<InMemoryCluster>(
        infrastructure,
        &name,
        json!({"metadata": {"finalizers": ["inmemorycluster.infrastructure.capi-rs.dev"]}}),
    )
    .await?;
    patch::<InMemoryCluster>(
        infrastructure,
        &name,
        json!({"spec": {"controlPlaneEndpoint": endpoint}}),
    )
    .await?;
    patch_status::<InMemoryCluster>(
        infrastructure,
        &name,
        json!({"status": {"initialization": {"provisioned": true}, "loadBalancerID": format!("lb-{name}"),
                          "conditions": [condition("Ready")]}}),
    )
    .await?;
    patch::<Cluster>(
        core,
        &name,
        json!({"spec": {"controlPlaneEndpoint": endpoint}}),
    )
    .await?;
    patch_status::<Cluster>(
        core,
        &name,
        json!({"status": {"initialization": {"infrastructureProvisioned": true},
                          "conditions": [condition("InfrastructureReady")]}}),
    )
    .await?;

    for authority in ["ca", "etcd", "proxy", "sa"] {
        create::<Secret>(
            control_plane,
            NAMESPACE,
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{name}-{authority}"), "labels": labels,
                             "ownerReferences": owner(kcp, true)},
                "type": "cluster.x-k8s.io/secret",
                "stringData": {"tls.crt": pem, "tls.key": pem}
            }),
        )
        .await?;
    }
    let machine_labels = json!({"cluster.x-k8s.io/cluster-name": name,
                                "cluster.x-k8s.io/control-plane": "",
                                "cluster.x-k8s.io/control-plane-name": control_plane_name});
    let machine = create::<Machine>(
        control_plane,
        NAMESPACE,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": machine_name, "labels": machine_labels,
                         "finalizers": ["machine.cluster.x-k8s.io"],
                         "ownerReferences": owner(kcp, true)},
            "spec": {"clusterName": name, "version": KUBERNETES_VERSION,
                     "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": machine_name}},
                     "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": machine_name}}
        }),
    )
    .await?;
    let machine = serde_json::to_value(machine)?;
    create::<KubeadmConfig>(
        control_plane,
        NAMESPACE,
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {"name": machine_name, "labels": machine_labels,
                         "ownerReferences": owner(&machine, true)},
            "spec": {"format": "cloud-config",
                     "initConfiguration": {"nodeRegistration": {"name": machine_name}},
                     "clusterConfiguration": {"controlPlaneEndpoint": format!("{host}:6443")}}
        }),
    )
    .await?;
    create::<InMemoryMachine>(
        control_plane,
        NAMESPACE,
        json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "InMemoryMachine",
            "metadata": {"name": machine_name, "labels": machine_labels,
                         "ownerReferences": owner(&machine, true)},
            "spec": {"flavor": "medium"}
        }),
    )
    .await?;

    create::<ConfigMap>(
        bootstrap,
        NAMESPACE,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-lock"), "labels": labels},
            "data": {"lock-information": format!("{{\"machineName\":\"{machine_name}\"}}")}
        }),
    )
    .await?;
    create::<Secret>(
        bootstrap,
        NAMESPACE,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": machine_name, "labels": labels},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": init_data, "format": "cloud-config"}
        }),
    )
    .await?;
    patch_status::<KubeadmConfig>(
        bootstrap,
        &machine_name,
        json!({"status": {"dataSecretName": machine_name, "initialization": {"dataSecretCreated": true}}}),
    )
    .await?;
    patch::<Machine>(
        core,
        &machine_name,
        json!({"spec": {"bootstrap": {"dataSecretName": machine_name}}}),
    )
    .await?;

    let provider_id = format!("inmemory:///floor/{machine_name}");
    patch::<InMemoryMachine>(
        infrastructure,
        &machine_name,
        json!({"metadata": {"finalizers": ["inmemorymachine.infrastructure.capi-rs.dev"]}}),
    )
    .await?;
    patch::<InMemoryMachine>(
        infrastructure,
        &machine_name,
        json!({"spec": {"providerID": provider_id}}),
    )
    .await?;
    patch_status::<InMemoryMachine>(
        infrastructure,
        &machine_name,
        json!({"status": {"initialization": {"provisioned": true},
                          "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                          "conditions": [condition("Ready")]}}),
    )
    .await?;
    patch::<Machine>(
        core,
        &machine_name,
        json!({"spec": {"providerID": provider_id}}),
    )
    .await?;
    patch_status::<Machine>(
        core,
        &machine_name,
        json!({"status": {"phase": "Running", "observedGeneration": 1, "nodeRef": {"name": machine_name},
                          "initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true},
                          "conditions": [condition("Ready")]}}),
    )
    .await?;

    patch_status::<KubeadmControlPlane>(
        control_plane,
        &control_plane_name,
        json!({"status": {"initialization": {"controlPlaneInitialized": true},
                          "replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "upToDateReplicas": 1,
                          "observedGeneration": 1, "version": KUBERNETES_VERSION,
                          "conditions": [condition("Initialized"), condition("Available")]}}),
    )
    .await?;
    patch_status::<Cluster>(
        core,
        &name,
        json!({"status": {"initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": true},
                          "conditions": [condition("InfrastructureReady"), condition("ControlPlaneInitialized"),
                                         condition("ControlPlaneAvailable"), condition("WorkersAvailable"),
                                         condition("RemoteConnectionProbe"), condition("Available")]}}),
    )
    .await?;
    Ok(())
}
