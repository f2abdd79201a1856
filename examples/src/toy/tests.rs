//! The unit test a vendor writes first: the actuator against a mock of its cloud.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use capi_core::api::{Cluster, Machine};
use capi_core::{Actuator, BootstrapData, BootstrapFormat, IdempotencyKey, MachineScope};

use super::{MockToyApi, Toy, ToyCluster, ToyMachine, ToyMachineSpec};

/// `create` retried after a lost response returns the first instance and creates nothing.
#[tokio::test]
async fn create_after_a_lost_response_returns_the_first_instance() {
    let mut api = MockToyApi::new();
    api.expect_find().returning(|_| Ok(Some("small-1".into())));
    api.expect_create().never();

    let mut machine = Machine::default();
    machine.metadata.uid = Some("6a1c".into());
    let spec = ToyMachineSpec {
        provider_id: None,
        size: "small".into(),
    };
    let scope = MachineScope {
        cluster: Arc::new(Cluster::default()),
        infra_cluster: Some(Arc::new(ToyCluster::new("demo", Default::default()))),
        idempotency_key: IdempotencyKey::for_machine(&machine).unwrap(),
        machine: Arc::new(machine),
        infra_machine: Arc::new(ToyMachine::new("worker-0", spec)),
    };
    let bootstrap = BootstrapData::new(BootstrapFormat::CloudConfig, "#cloud-config");

    let instance = Toy(Arc::new(api)).create(&scope, &bootstrap).await;
    assert_eq!(instance.unwrap().provider_id, "toy:///small-1");
}
