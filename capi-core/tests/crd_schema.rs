//! What the generated CRDs promise the API server: names, subresources, printer columns and the
//! validation that lets it reject bad input with a field path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_core::crd;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};

fn crd_named(plural: &str) -> CustomResourceDefinition {
    crd::core()
        .into_iter()
        .find(|c| c.spec.names.plural == plural)
        .expect("core CRD exists")
}

fn schema(crd: &CustomResourceDefinition) -> JSONSchemaProps {
    let version = &crd.spec.versions[0];
    *version
        .schema
        .clone()
        .and_then(|s| s.open_api_v3_schema)
        .map(Box::new)
        .expect("schema")
}

fn at(schema: &JSONSchemaProps, path: &[&str]) -> JSONSchemaProps {
    let mut current = schema.clone();
    for segment in path {
        current = if *segment == "[]" {
            match current.items {
                Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(s)) => *s,
                other => panic!("no items schema at {segment}: {other:?}"),
            }
        } else {
            current
                .properties
                .as_ref()
                .and_then(|p| p.get(*segment))
                .cloned()
                .unwrap_or_else(|| panic!("no property {segment}"))
        };
    }
    current
}

#[test]
fn every_kind_is_v1beta2_with_status_and_the_provider_label() {
    for crd in crd::core() {
        assert_eq!(crd.spec.group, "cluster.x-k8s.io");
        assert_eq!(crd.spec.versions.len(), 1);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1beta2");
        assert!(version.served && version.storage);
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{} has status",
            crd.spec.names.kind
        );
        assert_eq!(
            crd.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("cluster.x-k8s.io/provider"))
                .map(String::as_str),
            Some("cluster-api")
        );
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["cluster-api".to_string()][..])
        );
    }
}

#[test]
fn sets_and_deployments_have_a_scale_subresource() {
    for plural in ["machinesets", "machinedeployments"] {
        let crd = crd_named(plural);
        let scale = crd.spec.versions[0]
            .subresources
            .as_ref()
            .and_then(|s| s.scale.clone())
            .expect("scale");
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(scale.status_replicas_path, ".status.replicas");
        assert_eq!(
            scale.label_selector_path.as_deref(),
            Some(".status.selector")
        );
    }
}

/// Names and priorities of the printer columns (priority 10: only in `-o wide`).
fn printer_columns(plural: &str) -> Vec<(String, i32)> {
    crd_named(plural).spec.versions[0]
        .additional_printer_columns
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.name, c.priority.unwrap_or(0)))
        .collect()
}

fn columns(expected: &[(&str, i32)]) -> Vec<(String, i32)> {
    expected.iter().map(|(n, p)| (n.to_string(), *p)).collect()
}

#[test]
fn printer_columns_match_upstream_v1beta2_kubectl_get() {
    // As in upstream's `api/core/v1beta2/*_types.go`.
    assert_eq!(
        printer_columns("machines"),
        columns(&[
            ("Cluster", 0),
            ("Node Name", 0),
            ("Provider ID", 10),
            ("Failure domain", 0),
            ("Ready", 0),
            ("Available", 0),
            ("Up-to-date", 0),
            ("Internal-IP", 10),
            ("External-IP", 10),
            ("Paused", 10),
            ("Phase", 0),
            ("Age", 0),
            ("Version", 0),
        ])
    );
    assert_eq!(
        printer_columns("machinesets"),
        columns(&[
            ("Cluster", 0),
            ("Desired", 0),
            ("Current", 0),
            ("Ready", 0),
            ("Available", 0),
            ("Up-to-date", 0),
            ("Paused", 10),
            ("Age", 0),
            ("Version", 0),
        ])
    );
    assert_eq!(
        printer_columns("machinedeployments"),
        columns(&[
            ("Cluster", 0),
            ("Available", 0),
            ("Desired", 0),
            ("Current", 0),
            ("Ready", 0),
            ("Available", 0),
            ("Up-to-date", 0),
            ("Paused", 10),
            ("Phase", 0),
            ("Age", 0),
            ("Version", 0),
        ])
    );
    assert_eq!(
        printer_columns("machinepools"),
        columns(&[
            ("Cluster", 0),
            ("Desired", 0),
            ("Current", 0),
            ("Ready", 0),
            ("Available", 0),
            ("Up-to-date", 0),
            ("Paused", 10),
            ("Phase", 0),
            ("Age", 0),
            ("Version", 0),
        ])
    );
    assert_eq!(
        printer_columns("machinehealthchecks"),
        columns(&[
            ("Cluster", 0),
            ("Replicas", 0),
            ("Healthy", 0),
            ("Paused", 10),
            ("Age", 0),
        ])
    );
    let cluster: Vec<String> = printer_columns("clusters")
        .into_iter()
        .filter(|(_, p)| *p == 0)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        cluster,
        [
            "ClusterClass",
            "Available",
            "CP Desired",
            "CP Available",
            "CP Up-to-date",
            "W Desired",
            "W Available",
            "W Up-to-date",
            "Phase",
            "Age",
            "Version"
        ]
    );
}

#[test]
fn validation_is_in_the_schema() {
    let machine_set = schema(&crd_named("machinesets"));
    assert_eq!(at(&machine_set, &["spec", "replicas"]).minimum, Some(0.0));
    let required = at(&machine_set, &["spec"]).required.unwrap_or_default();
    for field in ["clusterName", "selector", "template"] {
        assert!(
            required.contains(&field.to_string()),
            "MachineSet.spec.{field} is required"
        );
    }
    let order = at(&machine_set, &["spec", "deletion", "order"])
        .enum_
        .unwrap_or_default();
    assert_eq!(order.len(), 3, "Random, Newest, Oldest");

    let cluster = schema(&crd_named("clusters"));
    let cidr = at(
        &cluster,
        &["spec", "clusterNetwork", "pods", "cidrBlocks", "[]"],
    );
    assert!(cidr.pattern.is_some(), "CIDR blocks carry a pattern");
    let phase = at(&cluster, &["status", "phase"]).enum_.unwrap_or_default();
    assert_eq!(phase.len(), 6);

    let machine = schema(&crd_named("machines"));
    assert!(
        at(&machine, &["spec", "version"]).pattern.is_some(),
        "version carries a pattern"
    );
    assert!(at(&machine, &["spec", "providerID"]).max_length.is_some());
    assert_eq!(
        at(&machine, &["status", "phase"])
            .enum_
            .unwrap_or_default()
            .len(),
        9
    );
    let reference = at(&machine, &["spec", "infrastructureRef"])
        .required
        .unwrap_or_default();
    assert_eq!(reference, ["apiGroup", "kind", "name"]);
    let conditions = at(&machine, &["status", "conditions"]);
    assert_eq!(conditions.x_kubernetes_list_type.as_deref(), Some("map"));
    let condition_status = at(&machine, &["status", "conditions", "[]", "status"])
        .enum_
        .unwrap_or_default();
    assert_eq!(condition_status.len(), 3);

    let deployment = schema(&crd_named("machinedeployments"));
    let max_surge = at(
        &deployment,
        &["spec", "rollout", "strategy", "rollingUpdate", "maxSurge"],
    );
    assert_eq!(max_surge.x_kubernetes_int_or_string, Some(true));
    assert!(
        max_surge.pattern.is_some(),
        "maxSurge percentages carry a pattern"
    );
    assert_eq!(max_surge.minimum, Some(0.0));
}

#[test]
fn contract_label_is_added_for_providers() {
    let labelled = crd::with_contract_version(crd_named("machines"), "v1alpha1");
    assert_eq!(
        labelled
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("cluster.x-k8s.io/v1beta2"))
            .map(String::as_str),
        Some("v1alpha1")
    );
}
