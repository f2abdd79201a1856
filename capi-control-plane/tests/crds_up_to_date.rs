//! The checked-in CRD YAML of the control-plane kinds must be what the types generate, and the
//! CRDs carry the contract label upstream's Cluster controller reads.

capi_testing::provider_crds_test!(
    capi_control_plane::api::crds(),
    concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/control-plane"),
    "controlplane.cluster.x-k8s.io/v1beta2",
);
