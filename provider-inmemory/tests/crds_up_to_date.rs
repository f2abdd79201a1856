//! The checked-in CRD YAML of the in-memory provider must be what its types generate, and its CRDs
//! carry the infrastructure provider contract.

capi_testing::provider_crds_test!(
    provider_inmemory::api::crds(),
    concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/inmemory"),
    "infrastructure.capi-rs.dev/v1alpha1",
);
