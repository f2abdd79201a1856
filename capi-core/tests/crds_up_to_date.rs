//! The checked-in CRD YAML must be what the Rust types generate: `cargo xtask crds` rewrites it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[test]
fn checked_in_crds_match_the_types() {
    let crds = capi_core::crd::core();
    assert_eq!(crds.len(), 6, "one CRD per core kind");
    capi_testing::crd_files::assert_checked_in(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/core"),
        &crds,
    );
}

#[test]
fn rendered_yaml_parses_back_into_the_same_crd() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    for (crd, rendered) in capi_core::crd::core()
        .into_iter()
        .zip(capi_core::crd::render_core().unwrap())
    {
        let parsed: CustomResourceDefinition =
            serde_saphyr::from_str(&rendered.yaml).expect("YAML parses");
        assert_eq!(
            serde_json::to_value(&parsed).unwrap(),
            serde_json::to_value(&crd).unwrap(),
            "{}",
            rendered.file_name
        );
    }
}
