//! The checked-in CRD YAML of the OpenStack provider must be what its types generate, and its CRDs
//! carry the infrastructure provider contract.

capi_testing::provider_crds_test!(
    provider_openstack::api::crds(),
    concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/openstack"),
    "infrastructure.capi-rs.dev/v1alpha1",
);
