//! The checked-in CRD YAML of the AWS provider must be what its types generate, and its CRDs
//! carry the infrastructure provider contract.

capi_testing::provider_crds_test!(
    provider_aws::api::crds(),
    concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/aws"),
    "infrastructure.capi-rs.dev/v1alpha1",
);
