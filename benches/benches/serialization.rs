//! How long the wire forms of the core types take: every watch event and status write pays this.
#![allow(missing_docs)]

use std::hint::black_box;

use capi_core::api::{Machine, MachineAddress, MachineAddressType, MachinePhase, MachineStatus};
use capi_core::condition;
use criterion::{Criterion, criterion_group, criterion_main};

fn sample_machine() -> Machine {
    let json = serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": "demo-md-0-abcde", "namespace": "default", "uid": "5b7d", "generation": 3,
                     "labels": {"cluster.x-k8s.io/cluster-name": "demo", "cluster.x-k8s.io/deployment-name": "demo-md-0"}},
        "spec": {
            "clusterName": "demo", "version": "v1.30.2", "providerID": "openstack:///0b8f",
            "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "demo-md-0-abcde"},
                          "dataSecretName": "demo-md-0-abcde"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OpenStackMachine", "name": "demo-md-0-abcde"}
        }
    });
    let mut machine: Machine = serde_json::from_value(json).unwrap_or_default();
    let mut status = MachineStatus {
        phase: Some(MachinePhase::Running),
        addresses: vec![MachineAddress {
            type_: MachineAddressType::InternalIp,
            address: "10.0.0.12".into(),
        }],
        ..MachineStatus::default()
    };
    condition::mark_true(&mut status.conditions, condition::READY, "Ready", Some(3));
    condition::mark_true(
        &mut status.conditions,
        condition::INFRASTRUCTURE_READY,
        "Provisioned",
        Some(3),
    );
    machine.status = Some(status);
    machine
}

fn serialization(c: &mut Criterion) {
    let machine = sample_machine();
    let bytes = serde_json::to_vec(&machine).unwrap_or_default();
    c.bench_function("machine_to_json", |b| {
        b.iter(|| serde_json::to_vec(black_box(&machine)))
    });
    c.bench_function("machine_from_json", |b| {
        b.iter(|| serde_json::from_slice::<Machine>(black_box(&bytes)))
    });
    c.bench_function("core_crds_generate", |b| b.iter(capi_core::crd::core));
}

criterion_group!(benches, serialization);
criterion_main!(benches);
