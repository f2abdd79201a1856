//! The control-plane types read and write upstream's field names: a document with every field
//! survives a round trip through the Rust types unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_control_plane::api::{
    KubeadmControlPlane, KubeadmControlPlaneRolloutStrategyType, KubeadmControlPlaneTemplate,
};
use capi_core::api::{ConditionPolarity, TaintEffect, TaintPropagation};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

const EVERY_FIELD: &str = include_str!("fixtures/kcp-every-field.yaml");

#[test]
fn every_field_of_a_control_plane_survives_a_round_trip() {
    let document: Value = serde_saphyr::from_str(EVERY_FIELD).unwrap();
    let kcp: KubeadmControlPlane = serde_json::from_value(document.clone()).unwrap();
    assert_eq!(serde_json::to_value(&kcp).unwrap(), document);

    let template = &kcp.spec.machine_template.spec;
    assert_eq!(template.infrastructure_ref.kind, "InMemoryMachineTemplate");
    assert_eq!(
        template.readiness_gates[1].polarity,
        Some(ConditionPolarity::Negative)
    );
    assert_eq!(template.taints[1].effect, TaintEffect::NoExecute);
    assert_eq!(
        template.taints[1].propagation,
        TaintPropagation::OnInitialization
    );
    let rollout = kcp.spec.rollout.as_ref().unwrap();
    let strategy = rollout.strategy.as_ref().unwrap();
    assert_eq!(
        strategy.type_,
        KubeadmControlPlaneRolloutStrategyType::RollingUpdate
    );
    assert_eq!(
        strategy.rolling_update.as_ref().unwrap().max_surge,
        Some(IntOrString::Int(1))
    );
    let status = kcp.status.as_ref().unwrap();
    assert_eq!(status.versions.len(), 2);
    assert_eq!(status.last_remediation.as_ref().unwrap().retry_count, 0);
}

#[test]
fn a_template_without_a_spec_of_its_own_is_read() {
    // Upstream's ClusterClass examples leave `spec.template.spec` out entirely.
    let template: KubeadmControlPlaneTemplate = serde_json::from_value(serde_json::json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmControlPlaneTemplate",
        "metadata": {"name": "quick-start-control-plane"},
        "spec": {"template": {"metadata": {"labels": {"tier": "control-plane"}}}},
    }))
    .unwrap();
    assert!(template.spec.template.spec.is_none());
}
