//! Every kind this workspace serves in upstream's groups (Cluster, Machine, MachineSet,
//! MachineDeployment, MachineHealthCheck, MachinePool, KubeadmConfig, KubeadmConfigTemplate,
//! KubeadmControlPlane, KubeadmControlPlaneTemplate) compared, field path by field path, with
//! upstream Cluster API's own CRD of the pinned release — read from the configuration
//! `cargo xtask upstream install` copies out of the Go module cache, nothing of it in the repo.
//!
//! The test prints a table per kind (upstream's paths, how many ours models, differences by
//! aspect) and fails on every difference that `crds/upstream-differences.yaml` does not accept
//! with a reason, and on every entry there that no longer matches anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use capi_testing::schema_compat::{AllowList, Comparison, compare, schema_of, table};
use capi_testing::upstream::{COMPONENTS, UpstreamAssets};
use serde_json::Value;

const VERSION: &str = "v1beta2";
const ALLOW_LIST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../crds/upstream-differences.yaml"
);

/// Upstream's CRDs of every component, by (group, kind).
fn upstream_crds(assets: &UpstreamAssets) -> BTreeMap<(String, String), Value> {
    let mut crds = BTreeMap::new();
    for component in &COMPONENTS {
        let dir = assets.config_dir(component).join("crd").join("bases");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let crd: Value = serde_saphyr::from_str(&text)
                .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
            let group = crd["spec"]["group"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let kind = crd["spec"]["names"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            crds.insert((group, kind), crd);
        }
    }
    crds
}

#[test]
fn every_served_kind_matches_upstreams_schema_field_by_field() {
    let assets = UpstreamAssets::locate().unwrap_or_else(|e| panic!("{e}"));
    let upstream = upstream_crds(&assets);
    let mut ours = capi_core::crd::core();
    ours.extend(capi_bootstrap::api::crds());
    ours.extend(capi_control_plane::api::crds());

    let mut comparisons: Vec<Comparison> = Vec::new();
    for crd in &ours {
        let group = crd.spec.group.clone();
        let kind = crd.spec.names.kind.clone();
        let theirs = upstream
            .get(&(group.clone(), kind.clone()))
            .unwrap_or_else(|| panic!("upstream serves no {kind} in {group}"));
        let ours = serde_json::to_value(crd).unwrap();
        let (Some(theirs), Some(mine)) = (schema_of(theirs, VERSION), schema_of(&ours, VERSION))
        else {
            panic!("{kind}: no {VERSION} schema upstream or ours");
        };
        comparisons.push(compare(&kind, theirs, mine));
    }
    assert_eq!(comparisons.len(), 10, "the ten served kinds");
    println!(
        "upstream Cluster API {} {VERSION} schemas against ours:\n{}",
        capi_testing::upstream::CLUSTER_API_VERSION,
        table(&comparisons)
    );

    let allow = AllowList::parse(&std::fs::read_to_string(ALLOW_LIST).unwrap())
        .unwrap_or_else(|e| panic!("{ALLOW_LIST}: {e}"));
    let (refused, unused) = allow.judge(&comparisons);
    let mut report = String::new();
    for difference in &refused {
        report.push_str(&format!("  {difference}\n"));
    }
    for entry in &unused {
        report.push_str(&format!(
            "  stale allow-list entry (matches nothing): {} {:?} {:?}\n",
            entry.kind, entry.path, entry.aspect
        ));
    }
    assert!(
        refused.is_empty() && unused.is_empty(),
        "{} differences not in {ALLOW_LIST}, {} stale entries:\n{report}",
        refused.len(),
        unused.len()
    );
}
