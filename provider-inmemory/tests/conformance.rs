//! The provider contract's conformance suite (`capi_testing::conformance`) against the in-memory
//! provider's actuators, over a simulated cloud that fails 10 % of calls and loses 30 % of create
//! responses (the instance is made, the answer never arrives) — as a vendor runs it against theirs.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_testing::conformance::{CloudInventory, ClusterSuite, MachineSuite, PoolSuite, Settings};
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::{
    InMemoryCluster, InMemoryMachine, InMemoryMachinePool, InMemoryMachinePoolSpec,
    InMemoryMachineSpec,
};
use provider_inmemory::cloud::{CloudConfig, Faults, SimulatedCloud};
use provider_inmemory::pool::InMemoryPoolActuator;

struct Inventory(Arc<SimulatedCloud>);

#[async_trait]
impl CloudInventory for Inventory {
    async fn instances(&self) -> Result<BTreeSet<String>, String> {
        Ok(self.0.instances().into_iter().map(|i| i.id).collect())
    }

    async fn resources(&self) -> Result<BTreeSet<String>, String> {
        let instances = self.0.instances().into_iter().map(|i| i.id);
        let balancers = self.0.load_balancers().into_iter().map(|lb| lb.id);
        let scale_sets = self.0.scale_sets().into_iter().map(|s| s.id);
        Ok(instances.chain(balancers).chain(scale_sets).collect())
    }
}

fn faulty_cloud() -> Arc<SimulatedCloud> {
    Arc::new(SimulatedCloud::new(CloudConfig {
        call_latency: Duration::from_millis(1),
        boot_time: Duration::from_millis(20),
        delete_time: Duration::from_millis(30),
        faults: Faults {
            error_rate: 0.1,
            lost_create_response_rate: 0.3,
            ..Faults::default()
        },
        ..CloudConfig::default()
    }))
}

fn settings() -> Settings {
    Settings {
        deadline: Duration::from_secs(30),
        max_wait: Duration::from_millis(50),
        crash_points: 12,
        poll_gap: Duration::from_millis(1),
        restart_delay: Duration::from_millis(2),
    }
}

#[tokio::test]
async fn the_in_memory_provider_conforms_through_faults_and_lost_responses() {
    let cloud = faulty_cloud();
    let actuator = Arc::new(InMemoryActuator::new(
        cloud.clone(),
        cloud.clone(),
        Duration::from_millis(10),
    ));
    let inventory = Arc::new(Inventory(cloud.clone()));
    let settings = settings();
    let infra_machine = InMemoryMachine::new(
        "template",
        InMemoryMachineSpec {
            provider_id: None,
            flavor: "small".into(),
        },
    );
    let infra_cluster = InMemoryCluster::new("conformance", Default::default());
    let machines = MachineSuite::new(
        actuator.clone(),
        inventory.clone(),
        infra_machine,
        infra_cluster.clone(),
    )
    .settings(settings.clone());
    let report = ClusterSuite::new(actuator, inventory, infra_cluster)
        .settings(settings)
        .run_with(|_| machines.run())
        .await;
    report.assert_conforms();
    assert_eq!(
        report.notes,
        Vec::<String>::new(),
        "every await point of create was tried"
    );
    assert!(report.checked.len() >= 10, "{:?}", report.checked);
    assert_eq!(cloud.instance_count(), 0);
    assert!(cloud.load_balancers().is_empty());
}

#[tokio::test]
async fn the_in_memory_pools_conform_through_faults_and_lost_responses() {
    let cloud = faulty_cloud();
    let actuator = Arc::new(InMemoryPoolActuator::new(
        cloud.clone(),
        Duration::from_millis(10),
    ));
    let infra_pool = InMemoryMachinePool::new(
        "template",
        InMemoryMachinePoolSpec {
            flavor: "small".into(),
            ..InMemoryMachinePoolSpec::default()
        },
    );
    let infra_cluster = InMemoryCluster::new("conformance", Default::default());
    let report = PoolSuite::new(
        actuator,
        Arc::new(Inventory(cloud.clone())),
        infra_pool,
        infra_cluster,
    )
    .settings(settings())
    .run()
    .await;
    report.assert_conforms();
    assert_eq!(
        report.notes,
        Vec::<String>::new(),
        "every await point of create was tried"
    );
    assert!(report.checked.len() >= 10, "{:?}", report.checked);
    assert_eq!(cloud.instance_count(), 0);
    assert!(cloud.scale_sets().is_empty());
    assert_eq!(cloud.max_scale_sets_per_tag(), 1, "one scale set per pool");
}
