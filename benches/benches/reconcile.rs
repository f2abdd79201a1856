//! How long the loop takes to decide one reconcile of an infrastructure machine, against a mock
//! actuator that answers at once — the loop's own cost per pass, without the API server or a cloud:
//! the steady state (the instance exists and is converged), the first create, and the wait for
//! bootstrap data (no actuator call at all).
#![allow(missing_docs)]

use std::hint::black_box;

use capi_actuator::machine::{INFRA_MACHINE_FINALIZER, Observed, decide_once};
use capi_core::api::{
    Cluster, ClusterInitializationStatus, ClusterStatus, Machine, MachineAddress,
    MachineAddressType,
};
use capi_core::{
    BootstrapData, BootstrapFormat, Found, InstanceState, MachineInstance, MockActuator,
    UpdateOutcome,
};
use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use provider_inmemory::api::{InMemoryCluster, InMemoryMachine, InMemoryMachineSpec};

const UID: &str = "0b7e4c1a-5d2f-4e8b-9a61-3c7d2e9f1a40";

fn infra(provider_id: Option<&str>) -> InMemoryMachine {
    let mut infra = InMemoryMachine::new(
        "workers-abc12",
        InMemoryMachineSpec {
            provider_id: provider_id.map(str::to_string),
            flavor: "small".into(),
        },
    );
    infra.metadata.namespace = Some("default".into());
    infra.metadata.generation = Some(1);
    infra.metadata.finalizers = Some(vec![INFRA_MACHINE_FINALIZER.into()]);
    infra.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Machine".into(),
        name: "workers-abc12".into(),
        uid: UID.into(),
        controller: Some(true),
        ..OwnerReference::default()
    }]);
    infra
}

fn machine() -> Machine {
    let mut machine = Machine::default();
    machine.metadata.name = Some("workers-abc12".into());
    machine.metadata.namespace = Some("default".into());
    machine.metadata.uid = Some(UID.into());
    machine.spec.cluster_name = "demo".into();
    machine
}

fn cluster() -> Cluster {
    let mut cluster = Cluster::default();
    cluster.metadata.name = Some("demo".into());
    cluster.status = Some(ClusterStatus {
        initialization: Some(ClusterInitializationStatus {
            infrastructure_provisioned: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    });
    cluster
}

fn instance() -> MachineInstance {
    MachineInstance::new(
        "inmemory:///i-0001",
        vec![MachineAddress {
            type_: MachineAddressType::InternalIp,
            address: "10.0.0.7".into(),
        }],
        InstanceState::Running,
    )
}

fn observed(
    infra_machine: InMemoryMachine,
    bootstrap: Option<BootstrapData>,
) -> Observed<InMemoryMachine, InMemoryCluster> {
    Observed {
        infra_machine,
        infra_cluster: Some(InMemoryCluster::new("demo", Default::default())),
        machine: machine(),
        cluster: cluster(),
        bootstrap,
    }
}

fn bootstrap() -> BootstrapData {
    BootstrapData::new(
        BootstrapFormat::CloudConfig,
        b"#cloud-config\nruncmd: [kubeadm join]\n".to_vec(),
    )
}

fn decisions(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("a current-thread runtime: {e}"));

    let mut steady = MockActuator::<InMemoryMachine, InMemoryCluster>::new();
    steady
        .expect_exists()
        .returning(|_| Ok(Some(Found::new(instance()))));
    steady.expect_update().returning(|_, found| {
        Ok(UpdateOutcome {
            instance: found.reported,
            immutable_changes: Vec::new(),
        })
    });
    c.bench_function("decide: steady state (exists + update)", |b| {
        b.iter(|| {
            let decision = runtime.block_on(decide_once(
                &steady,
                observed(infra(Some("inmemory:///i-0001")), Some(bootstrap())),
            ));
            black_box(decision)
        })
    });

    let mut fresh = MockActuator::<InMemoryMachine, InMemoryCluster>::new();
    fresh.expect_exists().returning(|_| Ok(None));
    fresh.expect_create().returning(|_, _| Ok(instance()));
    c.bench_function("decide: first create (exists + create)", |b| {
        b.iter(|| {
            let decision = runtime.block_on(decide_once(
                &fresh,
                observed(infra(None), Some(bootstrap())),
            ));
            black_box(decision)
        })
    });

    let untouched = MockActuator::<InMemoryMachine, InMemoryCluster>::new();
    c.bench_function("decide: waiting for bootstrap data", |b| {
        b.iter(|| {
            let decision = runtime.block_on(decide_once(&untouched, observed(infra(None), None)));
            black_box(decision)
        })
    });
}

criterion_group!(benches, decisions);
criterion_main!(benches);
