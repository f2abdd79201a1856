//! The checked-in CRD YAML of the bootstrap kinds must be what the types generate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

#[test]
fn checked_in_crds_match_the_types() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds/bootstrap");
    let crds = capi_bootstrap::api::crds();
    assert_eq!(crds.len(), 2);
    let rendered = capi_core::crd::render(&crds).unwrap();
    let stale = capi_core::crd::stale_files(&dir, &rendered);
    assert!(
        stale.is_empty(),
        "stale or missing in {}: {stale:?}; run `cargo xtask crds`",
        dir.display()
    );
}
