//! The actuators' long-running operations against the ARM test server: an operation recorded in
//! status is resumed by a new actuator (a restarted manager) and cleared when done; a failed
//! VM creation is put again and recovers; a vanished operation is dropped and the resource read
//! again; throttling and conflicts come back as RequeueAfter with ARM's delay and nothing is
//! lost; a low remaining budget holds writes back before ARM answers 429.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{Cluster, Machine};
use capi_core::{
    Actuator, ActuatorError, BootstrapData, BootstrapFormat, ClusterActuator, ClusterScope,
    IdempotencyKey, InstanceState, MachineInstance, MachineScope,
};
use common::arm_server::{ArmServer, Target};
use common::model_checker::ModelChecker;
use common::{FixedConnector, arm_client};
use provider_azure::api::{AzureCluster, AzureMachine};
use provider_azure::arm::ResourceType;
use provider_azure::cluster::AzureClusterActuator;
use provider_azure::machine::AzureMachineActuator;
use serde_json::json;

const SUBSCRIPTION: &str = "7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c";

struct Setup {
    server: Arc<ArmServer>,
    clusters: AzureClusterActuator,
    /// The provisioned `AzureCluster`, with its status.
    cluster: AzureCluster,
    connector: Arc<FixedConnector>,
}

fn azure_cluster() -> AzureCluster {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureCluster",
        "metadata": {"name": "ops", "namespace": "ns"},
        "spec": {"subscriptionID": SUBSCRIPTION, "location": "westeurope",
                 "identityRef": {"name": "creds", "kind": "Secret"}},
    }))
    .unwrap()
}

fn cluster_scope(infra: AzureCluster) -> ClusterScope<AzureCluster> {
    let mut cluster = Cluster::default();
    cluster.metadata.name = Some("ops".into());
    cluster.metadata.namespace = Some("ns".into());
    ClusterScope {
        cluster: Arc::new(cluster),
        infra_cluster: Arc::new(infra),
    }
}

/// A provisioned cluster on a fresh server.
async fn provisioned() -> Setup {
    let server = ArmServer::start(Arc::new(ModelChecker::start())).await;
    server.faults(|f| f.operation_time = Duration::from_millis(100));
    let connector = Arc::new(FixedConnector(arm_client(&server)));
    let clusters = AzureClusterActuator::new(connector.clone());
    let mut infra = azure_cluster();
    for _ in 0..40 {
        let reported = clusters
            .reconcile(&cluster_scope(infra.clone()))
            .await
            .unwrap();
        let status = serde_json::Value::Object(reported.provider_status.fields().clone());
        infra.status = Some(serde_json::from_value(status).unwrap());
        if reported.provisioned {
            return Setup {
                server,
                clusters,
                cluster: infra,
                connector,
            };
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    panic!("the cluster was not provisioned");
}

fn bootstrap() -> BootstrapData {
    BootstrapData::new(BootstrapFormat::CloudConfig, "#cloud-config\nruncmd: []\n")
}

impl Setup {
    fn machines(&self) -> AzureMachineActuator {
        AzureMachineActuator::new(self.connector.clone())
    }

    /// The machine's scope in the provisioned cluster, with `status` recorded.
    fn machine_scope(&self, status: serde_json::Value) -> MachineScope<AzureMachine, AzureCluster> {
        let infra: AzureMachine = serde_json::from_value(json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureMachine",
            "metadata": {"name": "ops-md-0-abcde", "namespace": "ns",
                         "labels": {"cluster.x-k8s.io/cluster-name": "ops"}},
            "spec": {"vmSize": "Standard_D2s_v3", "osDisk": {"osType": "Linux"},
                     "image": {"marketplace": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts",
                                               "sku": "server", "version": "latest"}}},
            "status": status,
        }))
        .unwrap();
        let mut machine = Machine::default();
        machine.metadata.uid = Some("7d2f4c1a-0000-4000-8000-000000000001".into());
        machine.spec.cluster_name = "ops".into();
        MachineScope {
            cluster: Arc::new(Cluster::default()),
            infra_cluster: Some(Arc::new(self.cluster.clone())),
            idempotency_key: IdempotencyKey::for_machine(&machine).unwrap(),
            machine: Arc::new(machine),
            infra_machine: Arc::new(infra),
        }
    }

    /// `exists` then `create` or `update`, as the loop does, until the VM runs.
    async fn until_running(
        &self,
        actuator: &AzureMachineActuator,
        mut status: serde_json::Value,
    ) -> (MachineInstance, usize) {
        for pass in 1..=60 {
            let scope = self.machine_scope(status.clone());
            let reported = match actuator.exists(&scope).await {
                Ok(Some(found)) => actuator.update(&scope, found).await.map(|o| o.instance),
                Ok(None) => actuator.create(&scope, &bootstrap()).await,
                Err(e) => Err(e),
            };
            match reported {
                Ok(instance) if instance.state == InstanceState::Running => {
                    return (instance, pass);
                }
                Ok(instance) => {
                    status = serde_json::Value::Object(instance.provider_status.fields().clone());
                }
                Err(ActuatorError::InvalidConfiguration { message, .. }) => panic!("{message}"),
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        panic!("the VM never ran");
    }

    /// `create`, past the wait for the NIC ARM is making first.
    async fn create(
        &self,
        actuator: &AzureMachineActuator,
    ) -> Result<MachineInstance, ActuatorError> {
        loop {
            match actuator
                .create(&self.machine_scope(json!({})), &bootstrap())
                .await
            {
                Err(e) if e.reason() == "WaitingForNetworkInterface" => {
                    tokio::time::sleep(Duration::from_millis(60)).await;
                }
                other => return other,
            }
        }
    }

    fn vms(&self) -> usize {
        self.server
            .world
            .lock()
            .unwrap()
            .of_kind(ResourceType::VirtualMachine)
            .len()
    }
}

#[tokio::test]
async fn an_operation_recorded_by_one_manager_is_resumed_by_the_next_and_cleared() {
    let setup = provisioned().await;
    setup.server.faults(|f| {
        f.slow.push((
            Target::of("PUT", ResourceType::VirtualMachine),
            Duration::from_secs(1),
        ));
    });
    let first = setup.machines();
    let created = setup.create(&first).await.unwrap();
    assert_eq!(created.state, InstanceState::Provisioning);
    let recorded = serde_json::Value::Object(created.provider_status.fields().clone());
    assert_eq!(
        recorded["longRunningOperationStates"][0]["serviceName"],
        "virtualmachine"
    );
    drop(first);

    // A restarted manager: a new actuator, only the status to go by.
    let second = setup.machines();
    let found = second
        .exists(&setup.machine_scope(recorded.clone()))
        .await
        .unwrap()
        .unwrap()
        .reported;
    assert_eq!(found.provider_id, created.provider_id);
    assert_eq!(
        found.provider_status.fields()["longRunningOperationStates"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "still under way: kept"
    );
    let (running, _) = setup.until_running(&second, recorded).await;
    assert_eq!(
        running.provider_status.fields()["longRunningOperationStates"],
        json!([])
    );
    assert_eq!(setup.vms(), 1);
    setup.server.assert_clean();
}

#[tokio::test]
async fn a_failed_creation_is_put_again_and_a_vanished_operation_dropped() {
    let setup = provisioned().await;
    setup.server.faults(|f| {
        f.fail_operation
            .push(Target::of("PUT", ResourceType::VirtualMachine));
        f.vanish_operation
            .push(Target::of("PUT", ResourceType::VirtualMachine));
    });
    let actuator = setup.machines();
    let (running, passes) = setup.until_running(&actuator, json!({})).await;
    assert!(passes > 2, "the failure took a second PUT");
    assert_eq!(running.provider_status.fields()["vmState"], "Succeeded");
    assert!(
        setup
            .server
            .world
            .lock()
            .unwrap()
            .count("PUT", ResourceType::VirtualMachine)
            >= 2
    );
    assert_eq!(setup.vms(), 1, "the same VM, put again");
    setup.server.assert_clean();
}

#[tokio::test]
async fn throttling_and_conflicts_wait_as_arm_says_and_lose_nothing() {
    let setup = provisioned().await;
    let actuator = setup.machines();
    setup.server.faults(|f| f.throttle.push((Target::any(), 1)));
    let error = actuator
        .exists(&setup.machine_scope(json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        error.requeue_delay(),
        Some(Duration::from_secs(1)),
        "{error}"
    );

    setup.server.faults(|f| {
        f.conflict
            .push((Target::of("PUT", ResourceType::VirtualMachine), 1));
    });
    let error = setup.create(&actuator).await.unwrap_err();
    assert_eq!(error.reason(), "Conflict");
    assert_eq!(setup.vms(), 0);
    let (_, _) = setup.until_running(&actuator, json!({})).await;
    assert_eq!(setup.vms(), 1);

    // ARM says 2 writes are left: the next write waits instead of being refused.
    setup.server.faults(|f| f.remaining_writes = Some(2));
    let infra = setup.cluster.clone();
    setup
        .clusters
        .reconcile(&cluster_scope(infra.clone()))
        .await
        .unwrap();
    let refused = |setup: &Setup| {
        setup
            .server
            .world
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|r| r.2 == 429)
            .count()
    };
    let before = refused(&setup);
    let mut tagged = infra;
    tagged
        .spec
        .additional_tags
        .insert("team".into(), "b".into());
    let error = setup
        .clusters
        .reconcile(&cluster_scope(tagged))
        .await
        .unwrap_err();
    assert_eq!(error.reason(), "Throttled", "{error}");
    assert!(
        error
            .requeue_delay()
            .is_some_and(|d| d <= Duration::from_secs(10))
    );
    assert_eq!(
        before,
        refused(&setup),
        "held back by the client, not refused by ARM"
    );
    setup.server.assert_clean();
}
