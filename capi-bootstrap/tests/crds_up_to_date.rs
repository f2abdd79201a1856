//! The checked-in CRD YAML of the bootstrap kinds must be what the types generate.

#[test]
fn checked_in_crds_match_the_types() {
    let crds = capi_bootstrap::api::crds();
    assert_eq!(crds.len(), 2);
    capi_testing::crd_files::assert_checked_in(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/bootstrap"),
        &crds,
    );
}
