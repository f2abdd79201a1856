#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use serde_json::json;

use super::*;

fn crd(plural: &str, kind: &str, scope: &str) -> CustomResourceDefinition {
    let group = "infrastructure.example.com";
    let crd = serde_json::from_value(json!({
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": scope, "versions": [],
                 "names": {"plural": plural, "kind": kind}},
        "status": {"storedVersions": ["v1alpha1"]},
    }))
    .unwrap();
    capi_core::crd::with_contract_version(crd, "v1alpha1")
}

fn components() -> Components {
    let crds = vec![
        crd("examplemachines", "ExampleMachine", "Namespaced"),
        crd("exampleclusters", "ExampleCluster", "Namespaced"),
        crd(
            "examplemachinetemplates",
            "ExampleMachineTemplate",
            "Namespaced",
        ),
        crd("exampleidentities", "ExampleIdentity", "Cluster"),
    ];
    let rules = capi_actuator::rbac::provider(
        "infrastructure.example.com",
        "examplemachines",
        "exampleclusters",
        "examplemachinetemplates",
    );
    Components::new("my-cloud", crds, rules).unwrap()
}

/// The kinds clusterctl treats as cluster-scoped; it puts every other object into the target
/// namespace.
const CLUSTER_SCOPED: [&str; 4] = [
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
];

/// Replaces each `${NAME:=default}` as clusterctl would: the value when given, else the default.
fn substitute(text: &str, values: &BTreeMap<&str, &str>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').unwrap() + start;
        let (name, default) = rest[start + 2..end].split_once(":=").unwrap();
        out.push_str(values.get(name).copied().unwrap_or(default));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn objects_with(values: &[(&str, &str)]) -> Vec<Value> {
    objects_with_components(&components(), values)
}

fn objects_with_components(components: &Components, values: &[(&str, &str)]) -> Vec<Value> {
    let text = components.to_yaml().unwrap();
    let text = substitute(&text, &values.iter().copied().collect());
    text.split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn resources(role: &Value) -> Vec<String> {
    role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect()
}

#[test]
fn one_namespace_holds_every_namespaced_object_and_cluster_scoped_names_carry_it() {
    let objects = components().objects().unwrap();
    let namespaces: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "Namespace")
        .collect();
    assert_eq!(namespaces.len(), 1);
    assert_eq!(objects[0]["kind"], "Namespace", "the Namespace comes first");
    assert_eq!(namespaces[0]["metadata"]["name"], "my-cloud-system");
    for object in &objects {
        let kind = object["kind"].as_str().unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        assert_eq!(
            object["metadata"]["labels"][PROVIDER_LABEL], "infrastructure-my-cloud",
            "{kind} {name}"
        );
        if CLUSTER_SCOPED.contains(&kind) {
            assert!(object["metadata"]["namespace"].is_null(), "{kind} {name}");
            if kind.starts_with("Cluster") {
                // `clusterctl delete` removes only these.
                assert!(name.starts_with("my-cloud-system-"), "{kind} {name}");
            }
        } else {
            assert_eq!(
                object["metadata"]["namespace"], "my-cloud-system",
                "{kind} {name}"
            );
        }
    }
}

#[test]
fn crds_keep_their_contract_label_and_lose_their_status() {
    let objects = components().objects().unwrap();
    let crds: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .collect();
    assert_eq!(crds.len(), 4);
    for crd in crds {
        assert_eq!(
            crd["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"],
            "v1alpha1"
        );
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert!(crd["status"].is_null());
    }
}

#[test]
fn every_variable_is_prefixed_listed_and_defaulted() {
    let components = components();
    let text = components.to_yaml().unwrap();
    let listed: Vec<String> = components.variables().into_iter().map(|v| v.name).collect();
    let mut used = Vec::new();
    for reference in text.split("${").skip(1) {
        let inner = &reference[..reference.find('}').unwrap()];
        let (name, default) = inner.split_once(":=").unwrap();
        assert!(name.starts_with("MY_CLOUD_"), "{name}");
        assert!(listed.iter().any(|l| l == name), "{name} is not listed");
        assert!(!default.is_empty(), "{name} has no default");
        used.push(name.to_string());
    }
    for name in &listed {
        assert!(used.contains(name), "{name} is listed but never used");
    }
}

#[test]
fn the_manager_is_hardened_and_named_manager_with_its_lease_in_its_own_namespace() {
    let mut components = components();
    components.image = "registry.example.com/m:v1".into();
    let objects = objects_with_components(&components, &[]);
    let deployment = find(&objects, "Deployment", "my-cloud-manager");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(pod["serviceAccountName"], "my-cloud-manager");
    let container = &pod["containers"][0];
    assert_eq!(container["name"], "manager");
    assert_eq!(container["image"], "registry.example.com/m:v1");
    let security = &container["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert!(container["resources"]["limits"]["memory"].is_string());
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"--leader-elect=my-cloud-manager"),
        "{args:?}"
    );
    assert!(args.contains(&"--controllers=provider"), "{args:?}");
    assert_eq!(container["env"][0]["name"], "POD_NAMESPACE");
    let role = find(&objects, "Role", "my-cloud-manager");
    assert_eq!(role["metadata"]["namespace"], "my-cloud-system");
    assert_eq!(role["rules"][0]["resources"], json!(["leases"]));
}

#[test]
fn namespace_rules_are_granted_in_the_managers_namespace_only() {
    let mut components = components();
    components.namespace_rules = vec![capi_runtime::rbac::rule("", &["secrets"], &["patch"])];
    let objects = objects_with(&[]);
    let role = find(&objects, "Role", "my-cloud-manager");
    assert_eq!(role["rules"].as_array().unwrap().len(), 1, "{role}");
    let objects = objects_with_components(&components, &[]);
    let role = find(&objects, "Role", "my-cloud-manager");
    assert_eq!(role["metadata"]["namespace"], "my-cloud-system");
    assert_eq!(role["rules"][0]["resources"], json!(["leases"]));
    assert_eq!(role["rules"][1]["resources"], json!(["secrets"]));
    assert_eq!(role["rules"][1]["verbs"], json!(["patch"]));
    // The provider's own cluster-wide rules do not patch Secrets because of it.
    let cluster_role = find(&objects, "ClusterRole", "my-cloud-system-provider");
    {
        for rule in cluster_role["rules"].as_array().unwrap() {
            let secrets = rule["resources"]
                .as_array()
                .is_some_and(|r| r.contains(&json!("secrets")));
            let patch = rule["verbs"]
                .as_array()
                .is_some_and(|v| v.contains(&json!("patch")));
            assert!(!(secrets && patch), "{cluster_role}");
        }
    }
}

#[test]
fn the_controllers_variable_switches_the_flag_and_the_bound_role_together() {
    for (mode, role) in [("provider", "provider"), ("standalone", "standalone")] {
        let objects = objects_with(&[("MY_CLOUD_CONTROLLERS", mode)]);
        let binding = find(&objects, "ClusterRoleBinding", "my-cloud-system-manager");
        assert_eq!(
            binding["roleRef"]["name"],
            format!("my-cloud-system-{role}")
        );
        assert_eq!(binding["subjects"][0]["namespace"], "my-cloud-system");
        let deployment = find(&objects, "Deployment", "my-cloud-manager");
        let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
        assert!(args.contains(&format!("--controllers={mode}")), "{args}");
    }
    let objects = objects_with(&[]);
    let provider = resources(find(&objects, "ClusterRole", "my-cloud-system-provider"));
    let standalone = resources(find(&objects, "ClusterRole", "my-cloud-system-standalone"));
    assert!(provider.contains(&"examplemachines".to_string()));
    for core in [
        "machinedeployments",
        "kubeadmconfigs",
        "kubeadmcontrolplanes",
    ] {
        assert!(
            !provider.iter().any(|r| r == core),
            "{core} beside upstream"
        );
        assert!(standalone.iter().any(|r| r == core), "{core} standalone");
    }
    assert!(!provider.iter().any(|r| r == "leases"));
}

#[test]
fn upstreams_managers_aggregate_access_to_the_contracts_kinds_only() {
    let mut components = components();
    components.crds.push(crd(
        "exampleclustertemplates",
        "ExampleClusterTemplate",
        "Namespaced",
    ));
    let objects = components.objects().unwrap();
    let role = find(&objects, "ClusterRole", "my-cloud-system-upstream-access");
    assert_eq!(role["metadata"]["labels"][AGGREGATE_TO_CORE], "true");
    assert_eq!(
        role["metadata"]["labels"][AGGREGATE_TO_CONTROL_PLANE],
        "true"
    );
    let granted = resources(role);
    for plural in [
        "examplemachines",
        "exampleclusters",
        "examplemachinetemplates",
        "exampleclustertemplates",
    ] {
        assert!(granted.iter().any(|r| r == plural), "{plural}");
    }
    assert!(
        !granted.iter().any(|r| r == "exampleidentities"),
        "identities are the provider's own: {granted:?}"
    );
    let rules = role["rules"].as_array().unwrap();
    assert!(
        rules
            .iter()
            .all(|r| r["apiGroups"] == json!(["infrastructure.example.com"]))
    );
    let templates = rules
        .iter()
        .find(|r| r["resources"] == json!(["exampleclustertemplates"]))
        .unwrap();
    assert!(
        !templates["verbs"]
            .as_array()
            .unwrap()
            .contains(&json!("create"))
    );
    // Nor do this SDK's own controllers reach identities when standalone.
    let standalone = resources(find(&objects, "ClusterRole", "my-cloud-system-standalone"));
    let identity_rules = standalone
        .iter()
        .filter(|r| *r == "exampleidentities")
        .count();
    assert_eq!(identity_rules, 0, "{standalone:?}");
}

#[test]
fn provider_names_are_dns_labels() {
    for bad in [
        "",
        "My-Cloud",
        "my_cloud",
        "-cloud",
        "cloud-",
        "9cloud",
        &"a".repeat(64),
    ] {
        assert!(
            matches!(
                Components::new(bad, Vec::new(), Vec::new()),
                Err(ComponentsError::Name(_))
            ),
            "{bad:?}"
        );
    }
    assert!(Components::new(&"a".repeat(48), Vec::new(), Vec::new()).is_ok());
    let components = Components::new("a-9", Vec::new(), Vec::new()).unwrap();
    assert_eq!(components.variable("LOG_LEVEL"), "A_9_LOG_LEVEL");
    assert_eq!(components.manifest_label(), "infrastructure-a-9");
}

#[test]
fn a_lone_variable_stays_a_string_whatever_it_is_set_to() {
    let text = components().to_yaml().unwrap();
    assert!(
        text.contains("value: \"${MY_CLOUD_LOG_LEVEL:=info}\"\n"),
        "{text}"
    );
    assert!(
        text.contains("image: localhost/my-cloud-manager:latest\n"),
        "{text}"
    );
    assert_eq!(quote_lone_variable("  - ${A:=b}"), "  - \"${A:=b}\"");
    assert_eq!(quote_lone_variable("- name: ${A}"), "- name: \"${A}\"");
    for unchanged in [
        "  - --qps=${A:=1}",
        "name: x-${A}",
        "key: ${A}-${B}",
        "key: '${A}'",
    ] {
        assert_eq!(quote_lone_variable(unchanged), unchanged);
    }
    // Set to what YAML 1.1 reads as a boolean, it is still the string.
    let objects = objects_with(&[("MY_CLOUD_LOG_LEVEL", "off")]);
    let deployment = find(&objects, "Deployment", "my-cloud-manager");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"],
        "off"
    );
}

#[test]
fn schemas_pass_through_unchanged_but_a_dollar_brace_is_refused() {
    let mut with_pattern = crd("examplemachines", "ExampleMachine", "Namespaced");
    with_pattern.spec.versions = serde_json::from_value(json!([{
        "name": "v1alpha1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
            "type": "object", "description": "A \"quoted\" word: and a colon",
            "properties": {"id": {"type": "string", "pattern": "^[a-z]+$"}}}}}},
    }]))
    .unwrap();
    let mut components = components();
    components.crds = vec![with_pattern.clone()];
    let objects = objects_with_components(&components, &[]);
    let crd = find(
        &objects,
        "CustomResourceDefinition",
        "examplemachines.infrastructure.example.com",
    );
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["properties"]["id"]["pattern"], "^[a-z]+$");
    assert_eq!(spec["description"], "A \"quoted\" word: and a colon");

    let mut versions = serde_json::to_value(&with_pattern.spec.versions).unwrap();
    versions[0]["schema"]["openAPIV3Schema"]["description"] = json!("costs ${PRICE}");
    with_pattern.spec.versions = serde_json::from_value(versions).unwrap();
    components.crds = vec![with_pattern];
    assert!(
        matches!(components.objects(), Err(ComponentsError::Dollar(name)) if name == "examplemachines.infrastructure.example.com")
    );
}

#[test]
fn the_image_must_be_canonical_as_clusterctl_parses_it() {
    for good in [
        "registry.example.com/my-cloud-manager:v0.1.0",
        "ghcr.io/capi-rs/aws-manager:v0.1.0",
        "localhost/m:latest",
        "registry.local:5000/team/m",
        "quay.io/m@sha256:abc",
    ] {
        assert!(is_canonical_image(good), "{good}");
    }
    for bad in [
        "my-cloud-manager:latest",
        "capi-rs/aws-manager:v0.1.0",
        "${X_IMAGE:=a.io/m}",
        "Registry.io/M:v1",
        "a.io/m:",
        "a.io//m",
    ] {
        assert!(!is_canonical_image(bad), "{bad}");
    }
    let mut components = components();
    components.image = "capi-rs/aws-manager:v0.1.0".into();
    assert!(matches!(
        components.objects(),
        Err(ComponentsError::Image(_))
    ));
}
