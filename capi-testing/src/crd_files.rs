//! The checked-in CRD YAML of a crate must be what its types generate, and a provider's CRDs must
//! carry the infrastructure provider contract: one test helper for every crate that serves CRDs
//! (core, bootstrap, each provider — a vendor's too).
//!
//! A provider's whole test, in its `tests/crds_up_to_date.rs` ([`provider_crds_test!`](crate::provider_crds_test)):
//!
//! ```no_run
//! # mod my_provider { pub mod api { pub fn crds() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> { vec![] } } }
//! capi_testing::provider_crds_test!(
//!     my_provider::api::crds(),
//!     concat!(env!("CARGO_MANIFEST_DIR"), "/crds"),
//!     "infrastructure.example.com/v1alpha1",
//! );
//! ```
//!
//! The same checks one by one, for crates that are not providers (core types, a bootstrap
//! provider): [`assert_checked_in`], [`assert_contract`].

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The label an infrastructure provider's CRD carries, naming the version that implements the
/// `v1beta2` contract.
const CONTRACT_LABEL: &str = "cluster.x-k8s.io/v1beta2";

/// Panics, naming the stale or missing files and the command that rewrites them, unless every CRD
/// of `crds` is checked in under `dir` exactly as [`capi_core::crd::render`] writes it.
#[allow(clippy::panic)]
pub fn assert_checked_in(dir: impl AsRef<Path>, crds: &[CustomResourceDefinition]) {
    let dir = dir.as_ref();
    let rendered = match capi_core::crd::render(crds) {
        Ok(rendered) => rendered,
        Err(error) => panic!("the CRDs do not render: {error}"),
    };
    let stale = capi_core::crd::stale_files(dir, &rendered);
    assert!(
        stale.is_empty(),
        "stale or missing in {}: {stale:?}; run `cargo xtask crds` and commit the result",
        dir.display()
    );
}

/// Panics unless every CRD of `crds` belongs to `group` and carries the contract label
/// (`cluster.x-k8s.io/v1beta2: <version>`) that upstream Cluster API reads to find the version of
/// a referenced kind.
pub fn assert_contract(crds: &[CustomResourceDefinition], version: &str, group: &str) {
    assert!(!crds.is_empty(), "no CRDs to check");
    for crd in crds {
        let label = crd
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(CONTRACT_LABEL));
        assert_eq!(
            label.map(String::as_str),
            Some(version),
            "{:?} must carry the label {CONTRACT_LABEL}: {version}",
            crd.metadata.name
        );
        assert_eq!(
            crd.spec.group, group,
            "{:?}: the group must be distinct from every upstream provider's group",
            crd.metadata.name
        );
    }
}

/// Defines the test `checked_in_crds_match_the_types_and_carry_the_contract_label` of a
/// provider: its CRDs (an expression) are checked in under the directory (an expression giving a
/// path) exactly as they render ([`assert_checked_in`]), and each is in the group and carries the
/// contract label of the version given as `"group/version"` ([`assert_contract`]).
#[macro_export]
macro_rules! provider_crds_test {
    ($crds:expr, $dir:expr, $group_version:expr $(,)?) => {
        #[test]
        fn checked_in_crds_match_the_types_and_carry_the_contract_label() {
            let crds = $crds;
            let (group, version) = $group_version
                .split_once('/')
                .unwrap_or(($group_version, ""));
            $crate::crd_files::assert_contract(&crds, version, group);
            $crate::crd_files::assert_checked_in($dir, &crds);
        }
    };
}
