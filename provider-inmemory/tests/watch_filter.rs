//! Two managers over one management cluster, each started with a watch filter of its own
//! (upstream's `--watch-filter`, `ReconcilerOptions::watch_filter`) and a cloud of its own: each
//! reconciles only the objects labelled `cluster.x-k8s.io/watch-filter` with its value — the
//! machines of its teams' MachineDeployments are instances in its cloud and never in the other's
//! — and a cluster labelled for neither is touched by neither.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use capi_actuator::InfrastructureControllers;
use capi_controllers::{CoreControllers, CoreSettings};
use capi_core::api::{Cluster, Machine, MachineDeployment, MachineSet};
use capi_core::labels;
use capi_runtime::manager::Manager;
use capi_testing::{TestEnv, manifest};
use common::{eventually, manager_config};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use provider_inmemory::actuator::{InMemoryActuator, PROVIDER_ID_PREFIX};
use provider_inmemory::api::{InMemoryCluster, InMemoryMachine, InMemoryMachineTemplate};
use provider_inmemory::cloud::{CloudConfig, SimulatedCloud};

/// A cluster `name` with a MachineDeployment of `replicas`, every object (and the deployment's
/// machine template) labelled with `filter` when there is one.
fn team(name: &str, filter: Option<&str>, replicas: i32) -> String {
    let label = filter
        .map(|value| format!("{}: {value}", labels::WATCH_FILTER))
        .unwrap_or_default();
    let template_labels = match filter {
        Some(_) => format!("pool: {name}, {label}"),
        None => format!("pool: {name}"),
    };
    format!(
        r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {{name: {name}, labels: {{{label}}}}}
spec:
  clusterNetwork: {{pods: {{cidrBlocks: [192.168.0.0/16]}}}}
  infrastructureRef: {{apiGroup: infrastructure.capi-rs.dev, kind: InMemoryCluster, name: {name}}}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryCluster
metadata: {{name: {name}, labels: {{{label}}}}}
spec: {{}}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachineTemplate
metadata: {{name: {name}, labels: {{{label}}}}}
spec: {{template: {{spec: {{flavor: small}}}}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: {name}-bootstrap}}
stringData: {{value: "#cloud-config\n"}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {{name: {name}, labels: {{{label}}}}}
spec:
  clusterName: {name}
  replicas: {replicas}
  selector: {{matchLabels: {{pool: {name}}}}}
  template:
    metadata: {{labels: {{{template_labels}}}}}
    spec:
      clusterName: {name}
      version: v1.33.0
      bootstrap: {{dataSecretName: {name}-bootstrap}}
      infrastructureRef: {{apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachineTemplate, name: {name}}}
"##
    )
}

/// A manager reconciling only objects labelled with `filter`, with the core controllers and the
/// in-memory provider over `cloud`.
async fn start(env: &TestEnv, ns: &str, filter: &str, cloud: Arc<SimulatedCloud>) {
    let mut config = manager_config(ns);
    config.reconciler = config.reconciler.watch_filter(filter);
    let mut manager = Manager::new(env.control_plane().config().await.unwrap(), config)
        .await
        .unwrap();
    let actuator = Arc::new(InMemoryActuator::new(
        cloud.clone(),
        cloud,
        Duration::from_millis(50),
    ));
    manager.add_machine_reconciler(actuator.clone());
    manager.add_machine_template_reconciler::<InMemoryMachineTemplate, InMemoryCluster>(
        actuator.clone(),
    );
    manager.add_cluster_reconciler::<InMemoryCluster>(actuator);
    manager.add(CoreControllers::new(CoreSettings {
        poll: Duration::from_millis(200),
        ..CoreSettings::default()
    }));
    tokio::spawn(async move {
        let _ = manager.run_until(std::future::pending()).await;
    });
}

/// The instance IDs of the machines of cluster `cluster` that have a provider ID.
async fn instances_of(machines: &Api<Machine>, cluster: &str) -> BTreeSet<String> {
    machines
        .list(&ListParams::default().labels(&format!("{}={cluster}", labels::CLUSTER_NAME)))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|m| m.spec.provider_id)
        .filter_map(|id| id.strip_prefix(PROVIDER_ID_PREFIX).map(str::to_string))
        .collect()
}

fn cloud_ids(cloud: &SimulatedCloud) -> BTreeSet<String> {
    cloud.instances().into_iter().map(|i| i.id).collect()
}

#[tokio::test]
async fn two_managers_with_different_watch_filters_each_take_only_their_own() {
    let _ = capi_runtime::telemetry::init_logging(capi_runtime::telemetry::LogFormat::Text);
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let text = [
        team("red-1", Some("red"), 2),
        team("red-2", Some("red"), 1),
        team("blue-1", Some("blue"), 2),
        team("nobody", None, 2),
    ]
    .join("---\n");
    manifest::create_all(&env.client(), &ns, &manifest::parse(&text).unwrap())
        .await
        .unwrap();
    let red = Arc::new(SimulatedCloud::new(CloudConfig::default()));
    let blue = Arc::new(SimulatedCloud::new(CloudConfig::default()));
    start(&env, &ns, "red", red.clone()).await;
    start(&env, &ns, "blue", blue.clone()).await;

    let machines: Api<Machine> = Api::namespaced(env.client(), &ns);
    let expected = [("red-1", 2), ("red-2", 1), ("blue-1", 2)];
    eventually("every labelled machine has its instance", || {
        let machines = machines.clone();
        async move {
            for (cluster, replicas) in expected {
                if instances_of(&machines, cluster).await.len() != replicas {
                    return false;
                }
            }
            true
        }
    })
    .await;

    let mut reds = instances_of(&machines, "red-1").await;
    reds.extend(instances_of(&machines, "red-2").await);
    assert_eq!(
        cloud_ids(&red),
        reds,
        "red's cloud holds red's machines, and only them"
    );
    assert_eq!(
        cloud_ids(&blue),
        instances_of(&machines, "blue-1").await,
        "blue's cloud holds blue's machines, and only them"
    );

    // The cluster labelled for neither manager: no finalizer, no MachineSet, no machine.
    let clusters: Api<Cluster> = Api::namespaced(env.client(), &ns);
    let nobody = clusters.get("nobody").await.unwrap();
    assert!(nobody.finalizers().is_empty(), "{:?}", nobody.finalizers());
    assert!(nobody.status.is_none(), "{:?}", nobody.status);
    let infra: Api<InMemoryCluster> = Api::namespaced(env.client(), &ns);
    assert!(infra.get("nobody").await.unwrap().finalizers().is_empty());
    let sets: Api<MachineSet> = Api::namespaced(env.client(), &ns);
    let of_nobody = ListParams::default().labels(&format!("{}=nobody", labels::CLUSTER_NAME));
    assert!(sets.list(&of_nobody).await.unwrap().items.is_empty());
    assert!(machines.list(&of_nobody).await.unwrap().items.is_empty());
    let deployment = Api::<MachineDeployment>::namespaced(env.client(), &ns)
        .get("nobody")
        .await
        .unwrap();
    assert!(deployment.status.is_none(), "{:?}", deployment.status);

    // What each manager made carries its filter: the other never had a trigger for it.
    for machine in machines.list(&ListParams::default()).await.unwrap().items {
        let cluster = machine.spec.cluster_name.clone();
        let filter = machine.labels().get(labels::WATCH_FILTER).cloned();
        assert_eq!(
            filter.as_deref(),
            Some(cluster.split('-').next().unwrap()),
            "{}",
            machine.name_any()
        );
        let infra = Api::<InMemoryMachine>::namespaced(env.client(), &ns)
            .get(&machine.name_any())
            .await
            .unwrap();
        assert_eq!(infra.labels().get(labels::WATCH_FILTER), filter.as_ref());
    }
}
