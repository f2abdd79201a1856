//! The checked-in CRD YAML of the in-memory provider must be what its types generate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

#[test]
fn checked_in_crds_match_the_types_and_carry_the_contract_label() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds/inmemory");
    let crds = provider_inmemory::api::crds();
    for crd in &crds {
        let label = crd
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("cluster.x-k8s.io/v1beta2"));
        assert_eq!(
            label.map(String::as_str),
            Some("v1alpha1"),
            "{:?}",
            crd.metadata.name
        );
        assert_eq!(
            crd.spec.group, "infrastructure.capi-rs.dev",
            "distinct from every upstream provider's group"
        );
    }
    let rendered = capi_core::crd::render(&crds).unwrap();
    let stale = capi_core::crd::stale_files(&dir, &rendered);
    assert!(
        stale.is_empty(),
        "stale or missing in {}: {stale:?}; run `cargo xtask crds`",
        dir.display()
    );
}
