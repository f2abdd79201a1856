//! The control-plane CRDs on a real API server: a control plane with every field is stored as
//! written (strict field validation, nothing pruned); `replicas` defaults to 1; the checks
//! upstream's admission webhook makes refuse the same objects here, with the field path; the
//! scale subresource reads `replicas` and the selector.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_testing::TestEnv;
use serde_json::{Value, json};

const EVERY_FIELD: &str = include_str!("fixtures/kcp-every-field.yaml");
const PATH: &str = "/apis/controlplane.cluster.x-k8s.io/v1beta2/namespaces";

async fn env() -> (TestEnv, String) {
    let env = TestEnv::start_with_crds(&capi_control_plane::api::crds())
        .await
        .unwrap();
    let ns = env.namespace().await.unwrap();
    (env, ns)
}

async fn request(
    env: &TestEnv,
    method: http::Method,
    uri: String,
    body: Option<&Value>,
    content_type: &str,
) -> Result<Value, kube::Error> {
    let body = body
        .map(|b| serde_json::to_vec(b).unwrap())
        .unwrap_or_default();
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(body)
        .unwrap();
    env.client().request::<Value>(request).await
}

/// Creates `object` in `ns` with strict field validation: an unknown field is an error.
async fn create(
    env: &TestEnv,
    ns: &str,
    plural: &str,
    object: &Value,
) -> Result<Value, kube::Error> {
    request(
        env,
        http::Method::POST,
        format!("{PATH}/{ns}/{plural}?fieldValidation=Strict"),
        Some(object),
        "application/json",
    )
    .await
}

fn minimal(name: &str, spec: Value) -> Value {
    let mut object = json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": {"name": name},
        "spec": {
            "version": "v1.34.1",
            "machineTemplate": {"spec": {"infrastructureRef": {
                "apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachineTemplate", "name": "cp",
            }}},
        },
    });
    json_patch::merge(&mut object["spec"], &spec);
    object
}

#[tokio::test]
async fn a_control_plane_with_every_field_is_stored_as_written() {
    let (env, ns) = env().await;
    let mut written: Value = serde_saphyr::from_str(EVERY_FIELD).unwrap();
    let status = written.as_object_mut().unwrap().remove("status").unwrap();
    let created = create(&env, &ns, "kubeadmcontrolplanes", &written)
        .await
        .unwrap();
    assert_eq!(
        created["spec"], written["spec"],
        "nothing pruned, nothing added"
    );

    // Status through its subresource, then the scale subresource reads it.
    let name = "demo-control-plane";
    let stored = request(
        &env,
        http::Method::PATCH,
        format!("{PATH}/{ns}/kubeadmcontrolplanes/{name}/status"),
        Some(&json!({"status": status})),
        "application/merge-patch+json",
    )
    .await
    .unwrap();
    assert_eq!(stored["status"], status, "every status field kept");
    let scale = request(
        &env,
        http::Method::GET,
        format!("{PATH}/{ns}/kubeadmcontrolplanes/{name}/scale"),
        None,
        "application/json",
    )
    .await
    .unwrap();
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], status["selector"]);
}

#[tokio::test]
async fn replicas_default_to_one() {
    let (env, ns) = env().await;
    let created = create(
        &env,
        &ns,
        "kubeadmcontrolplanes",
        &minimal("one", json!({})),
    )
    .await
    .unwrap();
    assert_eq!(created["spec"]["replicas"], 1);
}

#[tokio::test]
async fn what_upstreams_webhook_refuses_is_refused_with_the_field_path() {
    let (env, ns) = env().await;
    let surge = |max_surge: Value| json!({"rollout": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max_surge}}}});
    let mut zero_surge_one_replica = surge(json!(0));
    zero_surge_one_replica["replicas"] = json!(1);
    let cases = [
        (
            json!({"replicas": 2}),
            "spec",
            "replicas cannot be an even number when etcd is stacked",
        ),
        (
            json!({"replicas": 0}),
            "spec.replicas",
            "greater than or equal to 1",
        ),
        (
            surge(json!(2)),
            "spec.rollout.strategy.rollingUpdate",
            "maxSurge must be 0 or 1",
        ),
        (
            surge(json!("50%")),
            "spec.rollout.strategy.rollingUpdate",
            "maxSurge must be 0 or 1",
        ),
        (
            zero_surge_one_replica,
            "spec",
            "maxSurge 0 needs at least 3 replicas",
        ),
        (
            json!({"rollout": {"before": {"certificatesExpiryDays": 6}}}),
            "spec.rollout.before.certificatesExpiryDays",
            "greater than or equal to 7",
        ),
        (
            json!({"machineNaming": {"template": "{{ .kubeadmControlPlane.name }}"}}),
            "spec.machineNaming",
            "template must contain {{ .random }}",
        ),
        (json!({"version": "latest"}), "spec.version", "should match"),
        (
            json!({"machineTemplate": {"spec": {"readinessGates": [
                {"conditionType": "example.com/A"}, {"conditionType": "example.com/A"},
            ]}}}),
            "spec.machineTemplate.spec.readinessGates[1]",
            "Duplicate value",
        ),
        (
            json!({"machineTemplate": {"spec": {"taints": [
                {"key": "example.com/a", "effect": "Sometimes", "propagation": "Always"},
            ]}}}),
            "spec.machineTemplate.spec.taints[0].effect",
            "Unsupported value",
        ),
        (
            json!({"rollout": {}}),
            "spec.rollout",
            "should have at least 1 properties",
        ),
    ];
    for (i, (spec, path, message)) in cases.into_iter().enumerate() {
        let object = minimal(&format!("bad-{i}"), spec.clone());
        match create(&env, &ns, "kubeadmcontrolplanes", &object).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{spec}: {status:?}");
                assert!(
                    status.message.contains(path) && status.message.contains(message),
                    "{spec}: expected {path}: {message}, got {}",
                    status.message
                );
            }
            other => panic!("{spec}: expected a refusal, got {other:?}"),
        }
    }
    // What upstream accepts is accepted: 3 replicas without surge, a surge given as a string.
    let mut zero_surge = surge(json!(0));
    zero_surge["replicas"] = json!(3);
    create(
        &env,
        &ns,
        "kubeadmcontrolplanes",
        &minimal("no-surge", zero_surge),
    )
    .await
    .unwrap();
    create(
        &env,
        &ns,
        "kubeadmcontrolplanes",
        &minimal("string-surge", surge(json!("1"))),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn templates_are_stored_as_written() {
    let (env, ns) = env().await;
    let full: Value = serde_saphyr::from_str(EVERY_FIELD).unwrap();
    let mut machine_template = full["spec"]["machineTemplate"].clone();
    let spec = machine_template["spec"].as_object_mut().unwrap();
    spec.remove("infrastructureRef");
    spec.remove("readinessGates");
    let template = json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate",
        "metadata": {"name": "every-field"},
        "spec": {"template": {
            "metadata": {"labels": {"tier": "control-plane"}},
            "spec": {
                "machineTemplate": machine_template,
                "kubeadmConfigSpec": full["spec"]["kubeadmConfigSpec"],
                "rollout": full["spec"]["rollout"],
                "remediation": full["spec"]["remediation"],
                "machineNaming": full["spec"]["machineNaming"],
            },
        }},
    });
    let created = create(&env, &ns, "kubeadmcontrolplanetemplates", &template)
        .await
        .unwrap();
    assert_eq!(created["spec"], template["spec"]);

    // Without a spec of its own, as upstream's ClusterClass examples write it.
    let bare = json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate",
        "metadata": {"name": "bare"},
        "spec": {"template": {"metadata": {"labels": {"tier": "control-plane"}}}},
    });
    create(&env, &ns, "kubeadmcontrolplanetemplates", &bare)
        .await
        .unwrap();
}
