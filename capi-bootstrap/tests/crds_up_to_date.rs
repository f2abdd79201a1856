//! The checked-in CRD YAML of the bootstrap kinds must be what the types generate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

#[test]
fn checked_in_crds_match_the_types() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds/bootstrap");
    let crds = capi_bootstrap::api::crds();
    assert_eq!(crds.len(), 2);
    for rendered in capi_core::crd::render(&crds).unwrap() {
        let path = dir.join(&rendered.file_name);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == rendered.yaml,
            "{} is stale or missing; run `cargo xtask crds`",
            path.display()
        );
    }
}
