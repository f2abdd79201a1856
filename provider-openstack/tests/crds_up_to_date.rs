//! The checked-in CRD YAML of the OpenStack provider must be what its types generate.

#[test]
fn checked_in_crds_match_the_types_and_carry_the_contract_label() {
    let crds = provider_openstack::api::crds();
    capi_testing::crd_files::assert_infrastructure_contract(
        &crds,
        "v1alpha1",
        "infrastructure.capi-rs.dev",
    );
    capi_testing::crd_files::assert_checked_in(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/openstack"),
        &crds,
    );
}
