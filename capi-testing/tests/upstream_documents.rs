//! Upstream's own documents apply unchanged: the v1beta2 cluster templates and ClusterClasses of
//! upstream Cluster API v1.14.2 — CAPD's templates (copied by `cargo xtask upstream install`) and
//! the single-file templates of upstream's e2e data (from the Go module cache) — rendered through
//! `capictl generate cluster --from`'s renderer (clusterctl's variable syntax, defaults with lists
//! included), applied with strict field validation to this workspace's CRDs, and read back: every
//! field of every served kind is stored as written. The kinds this workspace does not serve are
//! reported by name with what to install instead; documents of `v1beta1` (an API version this
//! workspace does not serve) are reported and skipped.
//! Nothing is exempt: any refusal or difference fails the test. Upstream's templates without a
//! root `spec` (ClusterClass templates that leave everything to defaults) apply and stay without
//! one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use capi_cli::generate::{Inputs, render};
use capi_testing::TestEnv;
use capi_testing::upstream::{CLUSTER_API_VERSION, UpstreamAssets};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, ResourceExt};
use serde_json::Value;

const NAMESPACE: &str = "upstream-documents";

/// The documents: CAPD's templates and upstream's e2e single-file templates.
fn documents(assets: &UpstreamAssets) -> Vec<PathBuf> {
    let e2e = capi_testing::envtest::cache_root()
        .join("go/mod/sigs.k8s.io/cluster-api")
        .join(format!("test@{CLUSTER_API_VERSION}"))
        .join("e2e/data/infrastructure-docker/main");
    let mut files = Vec::new();
    for dir in [assets.dir().join("templates"), e2e] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            panic!(
                "{} is missing: run `cargo xtask upstream install`",
                dir.display()
            );
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) == Some("yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// What to install for a kind this workspace does not serve.
fn instead(kind: &str) -> &'static str {
    match kind {
        "ClusterClass" | "MachinePool" | "ClusterResourceSet" | "MachineDrainRule" => {
            "upstream Cluster API's core manager"
        }
        k if k.starts_with("Dev") || k.starts_with("Docker") => {
            "upstream's test infrastructure provider (CAPD), or this SDK's in-memory provider kinds"
        }
        k if k.starts_with("IPAddress") => "an IPAM provider",
        _ => "the provider that serves it",
    }
}

/// Whether every field of `sent` is in `stored` with the same value (the API server may add
/// defaults, nothing else may differ). The first difference, by path.
fn contained(sent: &Value, stored: &Value, path: &str) -> Result<(), String> {
    match (sent, stored) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let child = format!("{path}.{key}");
                match b.get(key) {
                    Some(other) => contained(value, other, &child)?,
                    None if value.is_null() => {}
                    None => return Err(format!("{child} was dropped")),
                }
            }
            Ok(())
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .try_for_each(|(i, (x, y))| contained(x, y, &format!("{path}[{i}]"))),
        (a, b) if a == b => Ok(()),
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => Ok(()),
        (a, b) => Err(format!("{path}: sent {a}, stored {b}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_templates_apply_strictly_and_read_back_unchanged() {
    let assets = UpstreamAssets::locate().unwrap_or_else(|e| panic!("{e}"));
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(capi_control_plane::api::crds());
    let served: BTreeSet<(String, String)> = crds
        .iter()
        .map(|c| (c.spec.group.clone(), c.spec.names.kind.clone()))
        .collect();
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let client = env.client();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}})).unwrap();
    namespaces.create(&Default::default(), &ns).await.unwrap();

    // Variables upstream's e2e configuration sets for these templates.
    let extra: BTreeMap<&str, &str> = BTreeMap::from([
        ("DOCKER_POD_CIDRS", "192.168.0.0/16"),
        ("DOCKER_SERVICE_CIDRS", "10.128.0.0/12"),
        ("DOCKER_SERVICE_DOMAIN", "cluster.local"),
    ]);
    let mut v1beta1: BTreeSet<String> = BTreeSet::new();
    let mut applied = 0;
    let mut not_served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut failures = Vec::new();
    for (n, file) in documents(&assets).into_iter().enumerate() {
        // `templates/…` (CAPD's) or `main/…` (upstream's e2e data): some names are in both.
        let name = format!(
            "{}/{}",
            file.parent()
                .and_then(|p| p.file_name())
                .unwrap()
                .to_string_lossy(),
            file.file_name().unwrap().to_string_lossy()
        );
        let text = std::fs::read_to_string(&file).unwrap();
        let inputs = Inputs {
            cluster_name: format!("doc-{n}"),
            namespace: Some(NAMESPACE.into()),
            kubernetes_version: Some("v1.34.0".into()),
            control_plane_machine_count: Some(1),
            worker_machine_count: Some(1),
            extra: BTreeMap::new(),
        };
        let rendered = match render(&text, &inputs, |v| extra.get(v).map(|s| s.to_string())) {
            Ok(rendered) => rendered,
            Err(error) => {
                failures.push(format!("{name}: does not render: {error}"));
                continue;
            }
        };
        let objects = capi_cli::apply::parse(&rendered).unwrap();
        if objects.iter().any(|o| {
            o.types
                .as_ref()
                .is_some_and(|t| t.api_version.ends_with("/v1beta1"))
        }) {
            v1beta1.insert(name);
            continue;
        }
        let mut ours = Vec::new();
        for object in objects {
            let types = object.types.clone().unwrap();
            let group = types
                .api_version
                .split('/')
                .next()
                .unwrap_or_default()
                .to_string();
            if served.contains(&(group, types.kind.clone())) {
                ours.push(object);
            } else {
                not_served
                    .entry(types.kind.clone())
                    .or_default()
                    .insert(name.clone());
            }
        }
        // One object at a time, so that one refusal does not hide the others.
        let mut stored_ok = Vec::new();
        for object in ours {
            let what = format!(
                "{} {}/{}",
                object
                    .types
                    .as_ref()
                    .map(|t| t.kind.as_str())
                    .unwrap_or_default(),
                NAMESPACE,
                object.name_any()
            );
            match capi_cli::apply::apply(
                &client,
                std::slice::from_ref(&object),
                Some(NAMESPACE),
                |_| {},
            )
            .await
            {
                Ok(()) => stored_ok.push(object),
                Err(error) => {
                    let mut why = error.to_string();
                    let mut cause = std::error::Error::source(&error);
                    while let Some(inner) = cause {
                        why.push_str(&format!(": {inner}"));
                        cause = inner.source();
                    }
                    failures.push(format!("{name}: {what} refused: {why}"));
                }
            }
        }
        for object in &stored_ok {
            let types = object.types.clone().unwrap();
            let (group, version) = types.api_version.split_once('/').unwrap();
            let gvk = GroupVersionKind::gvk(group, version, &types.kind);
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), NAMESPACE, &ApiResource::from_gvk(&gvk));
            let stored = api.get(&object.name_any()).await.unwrap();
            let what = format!("{name}: {} {}", types.kind, object.name_any());
            if let Err(difference) = contained(&object.data["spec"], &stored.data["spec"], "spec") {
                failures.push(format!("{what}: {difference}"));
            }
            applied += 1;
        }
    }
    println!("{applied} objects of served kinds applied and read back unchanged");
    for (kind, files) in &not_served {
        println!(
            "not served here: {kind} (in {}); install {}",
            files.iter().cloned().collect::<Vec<_>>().join(", "),
            instead(kind)
        );
    }
    println!(
        "v1beta1 documents, not served here: {}",
        v1beta1.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    assert!(applied > 0, "no served kind in upstream's documents");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
