//! The core CRDs against a real etcd + kube-apiserver: they install, upstream-style manifests
//! apply and round-trip, `kubectl get` shows upstream's columns, and bad input is rejected with a
//! field path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use capi_core::api::{
    Cluster, GROUP, Machine, MachineDeployment, MachineHealthCheck, MachinePhase, MachineSet,
    VERSION,
};
use capi_core::condition;
use capi_testing::{TestEnv, manifest, table};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::Status;
use kube::{Api, Client};
use serde_json::{Value, json};

fn sample(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../config/samples")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Creates a raw JSON object and returns the API server's refusal.
async fn rejected(client: &Client, namespace: &str, plural: &str, object: Value) -> Status {
    let path = format!("/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}");
    let request = http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&object).unwrap())
        .unwrap();
    match client.request::<Value>(request).await {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected a rejection for {object}, got {other:?}"),
    }
}

fn machine_json(name: &str) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": name},
        "spec": {
            "clusterName": "demo",
            "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": name},
            "version": "v1.30.2"
        }
    })
}

#[tokio::test]
async fn every_core_crd_installs_and_is_served() {
    let env = TestEnv::start().await.unwrap();
    let client = env.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let installed: Vec<String> = crds
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    for name in [
        "clusters",
        "machines",
        "machinesets",
        "machinedeployments",
        "machinehealthchecks",
        "machinepools",
    ] {
        assert!(
            installed.contains(&format!("{name}.cluster.x-k8s.io")),
            "{name} installed: {installed:?}"
        );
    }

    // Discovery is what kubectl uses: the group/version lists every kind with status (and scale).
    // The API server serves a new CRD's subresources a moment after the CRD is established, so
    // discovery is asked again until it lists them all (or the deadline passes).
    let expected = [
        "clusters",
        "clusters/status",
        "machines",
        "machines/status",
        "machinesets/scale",
        "machinedeployments/scale",
        "machinehealthchecks/status",
        "machinepools/status",
        "machinepools/scale",
    ];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let discovery: Value = client
            .request(
                http::Request::get(format!("/apis/{GROUP}/{VERSION}"))
                    .body(Vec::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        let resources: Vec<String> = discovery["resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .collect();
        let missing: Vec<&str> = expected
            .iter()
            .copied()
            .filter(|e| !resources.iter().any(|r| r == e))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{missing:?} not served: {resources:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    let ns = env.namespace().await.unwrap();
    assert!(
        Api::<Cluster>::namespaced(client.clone(), &ns)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        Api::<MachineHealthCheck>::namespaced(client, &ns)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn upstream_style_manifests_apply_and_round_trip_unchanged() {
    let env = TestEnv::start().await.unwrap();
    let client = env.client();
    let ns = env.namespace().await.unwrap();
    for file in [
        "cluster.yaml",
        "machine.yaml",
        "machineset.yaml",
        "machinedeployment.yaml",
        "machinehealthcheck.yaml",
    ] {
        let objects = manifest::parse(&sample(file)).unwrap();
        let stored = manifest::create_all(&client, &ns, &objects).await.unwrap();
        for (written, stored) in objects.iter().zip(&stored) {
            // Nothing pruned, nothing mangled: the spec comes back exactly as written.
            assert_eq!(
                stored.data["spec"], written.data["spec"],
                "{file}: spec changed by the API server"
            );
            // And our types read and re-write it without loss.
            let typed_spec = match written.types.as_ref().map(|t| t.kind.as_str()) {
                Some("Cluster") => serde_json::to_value(typed::<Cluster>(stored).spec).unwrap(),
                Some("Machine") => serde_json::to_value(typed::<Machine>(stored).spec).unwrap(),
                Some("MachineSet") => {
                    serde_json::to_value(typed::<MachineSet>(stored).spec).unwrap()
                }
                Some("MachineDeployment") => {
                    serde_json::to_value(typed::<MachineDeployment>(stored).spec).unwrap()
                }
                Some("MachineHealthCheck") => {
                    serde_json::to_value(typed::<MachineHealthCheck>(stored).spec).unwrap()
                }
                other => panic!("unexpected kind {other:?}"),
            };
            assert_eq!(
                typed_spec, written.data["spec"],
                "{file}: the Rust types changed the spec"
            );
        }
    }
}

fn typed<K: serde::de::DeserializeOwned>(object: &DynamicObject) -> K {
    serde_json::from_value(serde_json::to_value(object).unwrap()).unwrap()
}

#[tokio::test]
async fn kubectl_get_shows_upstream_columns_and_status_patches_stick() {
    let env = TestEnv::start().await.unwrap();
    let client = env.client();
    let ns = env.namespace().await.unwrap();
    let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
    let machine: Machine = serde_json::from_value(machine_json("m-0")).unwrap();
    let created = machines
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();

    // A controller's status write: a merge patch on the status subresource.
    let mut conditions = Vec::new();
    condition::mark_true(
        &mut conditions,
        condition::READY,
        "NodeHealthy",
        created.metadata.generation,
    );
    let status = json!({"status": {
        "phase": "Running",
        "nodeRef": {"name": "node-a"},
        "addresses": [{"type": "InternalIP", "address": "10.0.0.4"}],
        "initialization": {"infrastructureProvisioned": true, "bootstrapDataSecretCreated": true},
        "conditions": conditions,
    }});
    machines
        .patch_status("m-0", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    machines
        .patch(
            "m-0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"providerID": "fake:///m-0"}})),
        )
        .await
        .unwrap();

    let stored = machines.get("m-0").await.unwrap();
    let stored_status = stored.status.clone().unwrap();
    assert_eq!(stored_status.phase, Some(MachinePhase::Running));
    assert!(condition::is_true(
        &stored_status.conditions,
        condition::READY
    ));

    let listing = table::get_table(&client, GROUP, VERSION, "machines", Some(&ns))
        .await
        .unwrap();
    assert_eq!(
        listing.columns,
        [
            "Name",
            "Cluster",
            "Node Name",
            "Failure domain",
            "Ready",
            "Available",
            "Up-to-date",
            "Phase",
            "Age",
            "Version"
        ]
    );
    assert_eq!(listing.cell(0, "Ready"), Some("True"));
    assert_eq!(listing.cell(0, "Name"), Some("m-0"));
    assert_eq!(listing.cell(0, "Cluster"), Some("demo"));
    assert_eq!(listing.cell(0, "Node Name"), Some("node-a"));
    assert_eq!(listing.cell(0, "Phase"), Some("Running"));
    assert_eq!(listing.cell(0, "Version"), Some("v1.30.2"));
}

#[tokio::test]
async fn scale_subresource_scales_machine_deployments() {
    let env = TestEnv::start().await.unwrap();
    let client = env.client();
    let ns = env.namespace().await.unwrap();
    let objects = manifest::parse(&sample("machinedeployment.yaml")).unwrap();
    manifest::create_all(&client, &ns, &objects).await.unwrap();
    let deployments: Api<MachineDeployment> = Api::namespaced(client, &ns);
    // `kubectl scale machinedeployment demo-md-0 --replicas=5`
    deployments
        .patch_scale(
            "demo-md-0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(
        deployments.get("demo-md-0").await.unwrap().spec.replicas,
        Some(5)
    );
    // Negative replicas through the scale subresource are refused too.
    let refused = deployments
        .patch_scale(
            "demo-md-0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": -1}})),
        )
        .await;
    assert!(refused.is_err(), "negative scale accepted");
}

#[tokio::test]
async fn invalid_specs_are_rejected_with_the_field_path() {
    let env = TestEnv::start().await.unwrap();
    let client = env.client();
    let ns = env.namespace().await.unwrap();

    let mut negative_replicas: Value = serde_json::to_value(
        manifest::parse(&sample("machineset.yaml"))
            .unwrap()
            .remove(0),
    )
    .unwrap();
    negative_replicas["spec"]["replicas"] = json!(-1);

    let mut bad_cidr: Value =
        serde_json::to_value(manifest::parse(&sample("cluster.yaml")).unwrap().remove(0)).unwrap();
    bad_cidr["spec"]["clusterNetwork"]["pods"]["cidrBlocks"] = json!(["192.168.0.0/33"]);

    let mut missing_cluster_name = machine_json("m-1");
    missing_cluster_name["spec"]
        .as_object_mut()
        .unwrap()
        .remove("clusterName");

    let mut bad_version = machine_json("m-2");
    bad_version["spec"]["version"] = json!("latest");

    let mut bad_reference = machine_json("m-3");
    bad_reference["spec"]["infrastructureRef"]
        .as_object_mut()
        .unwrap()
        .remove("apiGroup");

    let mut bad_surge: Value = serde_json::to_value(
        manifest::parse(&sample("machinedeployment.yaml"))
            .unwrap()
            .remove(0),
    )
    .unwrap();
    bad_surge["spec"]["rollout"]["strategy"]["rollingUpdate"]["maxSurge"] = json!("lots");

    let mut negative_unavailable: Value = serde_json::to_value(
        manifest::parse(&sample("machinedeployment.yaml"))
            .unwrap()
            .remove(0),
    )
    .unwrap();
    negative_unavailable["spec"]["rollout"]["strategy"]["rollingUpdate"]["maxUnavailable"] =
        json!(-1);

    let mut bad_order: Value = serde_json::to_value(
        manifest::parse(&sample("machineset.yaml"))
            .unwrap()
            .remove(0),
    )
    .unwrap();
    bad_order["metadata"]["name"] = json!("demo-ms-1");
    bad_order["spec"]["deletion"]["order"] = json!("Youngest");

    let mut bad_range: Value = serde_json::to_value(
        manifest::parse(&sample("machinehealthcheck.yaml"))
            .unwrap()
            .remove(0),
    )
    .unwrap();
    bad_range["spec"]["remediation"]["triggerIf"] = json!({"unhealthyInRange": "1-3"});

    // A CEL rule, as upstream declares it: the health check's own conditions cannot be checked.
    let mut own_condition: Value = serde_json::to_value(
        manifest::parse(&sample("machinehealthcheck.yaml"))
            .unwrap()
            .remove(0),
    )
    .unwrap();
    own_condition["metadata"]["name"] = json!("own-condition");
    own_condition["spec"]["checks"]["unhealthyMachineConditions"] =
        json!([{"type": "HealthCheckSucceeded", "status": "False", "timeoutSeconds": 60}]);

    let cases = [
        ("machinesets", negative_replicas, "spec.replicas"),
        (
            "clusters",
            bad_cidr,
            "spec.clusterNetwork.pods.cidrBlocks[0]",
        ),
        ("machines", missing_cluster_name, "spec.clusterName"),
        ("machines", bad_version, "spec.version"),
        ("machines", bad_reference, "spec.infrastructureRef.apiGroup"),
        (
            "machinedeployments",
            bad_surge,
            "spec.rollout.strategy.rollingUpdate.maxSurge",
        ),
        (
            "machinedeployments",
            negative_unavailable,
            "spec.rollout.strategy.rollingUpdate.maxUnavailable",
        ),
        ("machinesets", bad_order, "spec.deletion.order"),
        (
            "machinehealthchecks",
            bad_range,
            "spec.remediation.triggerIf.unhealthyInRange",
        ),
        (
            "machinehealthchecks",
            own_condition,
            "spec.checks.unhealthyMachineConditions[0].type: Invalid value: \"HealthCheckSucceeded\": type must not be one of: Ready, Available, HealthCheckSucceeded",
        ),
    ];
    for (plural, object, field) in cases {
        let status = rejected(&client, &ns, plural, object).await;
        assert_eq!(status.code, 422, "{field}: {status:?}");
        assert!(
            status.message.contains(field),
            "the message names {field}: {}",
            status.message
        );
    }
}

#[tokio::test]
async fn invalid_status_writes_are_rejected_with_the_field_path() {
    let env = TestEnv::start().await.unwrap();
    let client = env.client();
    let ns = env.namespace().await.unwrap();
    let machines: Api<Machine> = Api::namespaced(client, &ns);
    let machine: Machine = serde_json::from_value(machine_json("m-0")).unwrap();
    machines
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();

    let cases = [
        (json!({"status": {"phase": "Exploded"}}), "status.phase"),
        (
            json!({"status": {"conditions": [{"type": "Ready", "status": "Maybe", "reason": "X", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
            "status.conditions[0].status",
        ),
        (
            json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "has space", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
            "status.conditions[0].reason",
        ),
        (
            json!({"status": {"addresses": [{"type": "PublicIP", "address": "1.2.3.4"}]}}),
            "status.addresses[0].type",
        ),
    ];
    for (patch, field) in cases {
        match machines
            .patch_status("m-0", &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{field}: {status:?}");
                assert!(
                    status.message.contains(field),
                    "the message names {field}: {}",
                    status.message
                );
            }
            other => panic!("{field}: expected a rejection, got {other:?}"),
        }
    }
    // Nothing was half-written.
    assert!(machines.get("m-0").await.unwrap().status.is_none());
}

/// Empty strings are ordinary values: `cluster.x-k8s.io/control-plane: ""` in a template, an empty
/// condition message.
#[tokio::test]
async fn empty_strings_are_accepted_in_specs_and_status() {
    let env = TestEnv::start().await.unwrap();
    let client = env.client();
    let ns = env.namespace().await.unwrap();
    let mut set: Value = serde_json::to_value(
        manifest::parse(&sample("machineset.yaml"))
            .unwrap()
            .remove(0),
    )
    .unwrap();
    set["spec"]["template"]["metadata"]["labels"]["cluster.x-k8s.io/control-plane"] = json!("");
    let sets: Api<MachineSet> = Api::namespaced(client.clone(), &ns);
    let typed: MachineSet = serde_json::from_value(set).unwrap();
    let created = sets.create(&PostParams::default(), &typed).await.unwrap();
    let labels = created.spec.template.metadata.unwrap_or_default().labels;
    assert_eq!(
        labels
            .get("cluster.x-k8s.io/control-plane")
            .map(String::as_str),
        Some("")
    );

    let mut conditions = Vec::new();
    condition::mark_true(&mut conditions, condition::READY, "Ready", None);
    assert_eq!(conditions[0].message, "");
    let patch = json!({"status": {"conditions": conditions}});
    let patched = sets
        .patch_status("demo-ms-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert!(condition::is_true(
        &patched.status.unwrap_or_default().conditions,
        condition::READY
    ));
}
