//! The example provider (`capi_examples::toy`) brings a cluster to Running with the SDK's core
//! controllers on a real API server — cluster infrastructure provisioned, two machines of a
//! MachineDeployment Running with nodes, the template's capacity published — and deletes it with
//! nothing left in its cloud.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use capi_actuator::InfrastructureControllers;
use capi_controllers::{CoreControllers, CoreSettings};
use capi_core::api::{Cluster, Machine, MachinePhase};
use capi_examples::toy::{Toy, ToyCluster, ToyMachine, ToyMachineTemplate, crds};
use capi_examples::toy_cloud::ToyCloud;
use capi_runtime::manager::{Manager, ManagerConfig};
use capi_testing::envtest::ControlPlane;
use capi_testing::{TestEnv, manifest};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use provider_inmemory::nodes::{NodeRegistration, register};
use serde_json::json;

const MANIFESTS: &str = r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo}
spec:
  infrastructureRef: {apiGroup: infrastructure.toy.example, kind: ToyCluster, name: demo}
---
apiVersion: infrastructure.toy.example/v1alpha1
kind: ToyCluster
metadata: {name: demo}
spec: {}
---
apiVersion: infrastructure.toy.example/v1alpha1
kind: ToyMachineTemplate
metadata: {name: workers, labels: {cluster.x-k8s.io/cluster-name: demo}}
spec: {template: {spec: {size: small}}}
---
apiVersion: v1
kind: Secret
metadata: {name: workers-bootstrap}
stringData: {value: "#cloud-config\n"}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: workers}
spec:
  clusterName: demo
  replicas: 2
  selector: {matchLabels: {pool: workers}}
  template:
    metadata: {labels: {pool: workers}}
    spec:
      clusterName: demo
      version: v1.33.0
      bootstrap: {dataSecretName: workers-bootstrap}
      infrastructureRef: {apiGroup: infrastructure.toy.example, kind: ToyMachineTemplate, name: workers}
"##;

async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The kubelets of the toy cloud: every machine with a provider ID gets its node.
async fn kubelets(machines: Api<Machine>, nodes: Api<Node>) {
    loop {
        for machine in machines.list(&ListParams::default()).await.unwrap().items {
            let Some(provider_id) = machine.spec.provider_id.clone() else {
                continue;
            };
            let name = machine.name_any();
            if nodes.get_opt(&name).await.unwrap().is_none() {
                let node = NodeRegistration {
                    name,
                    provider_id,
                    internal_ip: "10.0.0.1".into(),
                    zone: None,
                    kubelet_port: None,
                    control_plane: false,
                    cluster: None,
                };
                register(&nodes, &node).await.unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_toy_provider_brings_a_cluster_to_running_and_deletes_it() {
    let mut all_crds = capi_core::crd::core();
    all_crds.extend(crds());
    let env = TestEnv::start_with_crds(&all_crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let client = env.client();
    let workload = ControlPlane::start().await.unwrap();
    let kubeconfig: Secret = serde_json::from_value(json!({
        "metadata": {"name": "demo-kubeconfig", "labels": {"cluster.x-k8s.io/cluster-name": "demo"}},
        "stringData": {"value": workload.kubeconfig_yaml()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &kubeconfig)
        .await
        .unwrap();

    // The manager as the binary builds it, with the core controllers (standalone mode).
    let cloud = Arc::new(ToyCloud::default());
    let toy = Arc::new(Toy(cloud.clone()));
    let config = ManagerConfig {
        reconciler: capi_runtime::ReconcilerOptions::default().namespace(&ns),
        http_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        ..ManagerConfig::default()
    };
    let mut manager = Manager::with_client(client.clone(), config).await.unwrap();
    manager.add_cluster_reconciler::<ToyCluster>(toy.clone());
    manager.add_machine_reconciler::<ToyMachine, ToyCluster, Toy>(toy.clone());
    manager.add_machine_template_reconciler::<ToyMachineTemplate, ToyCluster>(toy);
    manager.add(CoreControllers::new(CoreSettings {
        poll: Duration::from_millis(200),
        ..CoreSettings::default()
    }));
    let running = tokio::spawn(async move { manager.run_until(std::future::pending()).await });
    let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
    let nodes = tokio::spawn(kubelets(
        machines.clone(),
        Api::all(workload.client().await.unwrap()),
    ));

    manifest::create_all(&client, &ns, &manifest::parse(MANIFESTS).unwrap())
        .await
        .unwrap();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    eventually("the cluster infrastructure provisioned", || async {
        let cluster = clusters.get("demo").await.ok()?;
        cluster.infrastructure_provisioned().then_some(())
    })
    .await;
    eventually("two Running machines with nodes", || async {
        let list = machines.list(&ListParams::default()).await.ok()?.items;
        let running = list.iter().filter(|m| {
            m.phase() == Some(MachinePhase::Running)
                && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
        });
        (list.len() == 2 && running.count() == 2).then_some(())
    })
    .await;
    let templates: Api<ToyMachineTemplate> = Api::namespaced(client.clone(), &ns);
    eventually("the template's capacity", || async {
        let status = templates.get("workers").await.ok()?.status?;
        (status.capacity.get("cpu").map(|q| q.0.as_str()) == Some("1")).then_some(())
    })
    .await;
    assert_eq!(
        cloud.resources().len(),
        3,
        "a load balancer and two instances"
    );

    clusters
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the cluster gone", || async {
        clusters.get_opt("demo").await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(
        cloud.resources(),
        Vec::<String>::new(),
        "nothing left in the cloud"
    );
    running.abort();
    nodes.abort();
}

/// What the conformance suite sees of the toy cloud.
struct Inventory(Arc<ToyCloud>);

#[async_trait::async_trait]
impl capi_testing::conformance::CloudInventory for Inventory {
    async fn instances(&self) -> Result<std::collections::BTreeSet<String>, String> {
        let all = self.0.resources().into_iter();
        Ok(all.filter(|id| !id.starts_with("lb-")).collect())
    }
    async fn resources(&self) -> Result<std::collections::BTreeSet<String>, String> {
        Ok(self.0.resources().into_iter().collect())
    }
}

/// The example provider keeps the contract's guarantees, as a vendor checks theirs.
#[tokio::test]
async fn the_toy_provider_passes_the_conformance_suite() {
    use capi_testing::conformance::{ClusterSuite, MachineSuite};
    let cloud = Arc::new(ToyCloud::default());
    let toy = Arc::new(Toy(cloud.clone()));
    let inventory = Arc::new(Inventory(cloud));
    let spec = capi_examples::toy::ToyMachineSpec {
        provider_id: None,
        size: "small".into(),
    };
    let machine = ToyMachine::new("template", spec);
    let cluster = ToyCluster::new("demo", Default::default());
    let machines = MachineSuite::new(toy.clone(), inventory.clone(), machine, cluster.clone());
    let report = ClusterSuite::new(toy, inventory, cluster)
        .run_with(|_| machines.run())
        .await;
    report.assert_conforms();
}
