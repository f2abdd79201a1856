//! The checked-in CRD YAML of the Azure provider must be what its types generate, and its CRDs
//! carry the infrastructure provider contract.

capi_testing::provider_crds_test!(
    provider_azure::api::crds(),
    concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/azure"),
    "infrastructure.capi-rs.dev/v1alpha1",
);
