//! The KubeadmConfig schema on a real API server: upstream's CEL rules hold — a flag given twice
//! in `extraArgs` or `kubeletExtraArgs` is refused with the field path and upstream's message —
//! and objects without a `spec` are stored as upstream stores them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_testing::TestEnv;
use serde_json::{Value, json};

async fn create(env: &TestEnv, namespace: &str, spec: Value) -> Result<Value, kube::Error> {
    let object = json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
        "metadata": {"generateName": "config-"},
        "spec": spec,
    });
    let request = http::Request::post(format!(
        "/apis/bootstrap.cluster.x-k8s.io/v1beta2/namespaces/{namespace}/kubeadmconfigs"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&object).unwrap())
    .unwrap();
    env.client().request::<Value>(request).await
}

#[tokio::test]
async fn a_flag_given_twice_is_refused_naming_the_list() {
    let env = TestEnv::start_with_crds(&capi_bootstrap::api::crds())
        .await
        .unwrap();
    let ns = env.namespace().await.unwrap();
    let twice = json!([{"name": "v", "value": "2"}, {"name": "v", "value": "4"}]);
    let distinct =
        json!([{"name": "v", "value": "2"}, {"name": "cloud-provider", "value": "external"}]);
    let cases = [
        (
            json!({"clusterConfiguration": {"apiServer": {"extraArgs": twice}}}),
            "spec.clusterConfiguration.apiServer.extraArgs",
            "extraArgs name must be unique",
        ),
        (
            json!({"joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": twice}}}),
            "spec.joinConfiguration.nodeRegistration.kubeletExtraArgs",
            "kubeletExtraArgs name must be unique",
        ),
    ];
    for (spec, path, message) in cases {
        match create(&env, &ns, spec).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{status:?}");
                assert!(
                    status.message.contains(path) && status.message.contains(message),
                    "{path}: {}",
                    status.message
                );
            }
            other => panic!("{path}: expected a refusal, got {other:?}"),
        }
    }
    create(
        &env,
        &ns,
        json!({"clusterConfiguration": {"apiServer": {"extraArgs": distinct}},
               "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": distinct}}}),
    )
    .await
    .unwrap();
}

/// Upstream stores a `KubeadmConfig` or `KubeadmConfigTemplate` without a `spec` (its e2e
/// ClusterClasses have such templates): they are accepted, stored without one, and the typed API
/// reads them as the default spec; a present spec reads as written.
#[tokio::test]
async fn objects_without_a_spec_are_stored_without_one_and_read_as_defaults() {
    use capi_bootstrap::api::{KubeadmConfig, KubeadmConfigSpec, KubeadmConfigTemplate};
    use kube::Api;
    let env = TestEnv::start_with_crds(&capi_bootstrap::api::crds())
        .await
        .unwrap();
    let ns = env.namespace().await.unwrap();
    for (plural, kind) in [
        ("kubeadmconfigs", "KubeadmConfig"),
        ("kubeadmconfigtemplates", "KubeadmConfigTemplate"),
    ] {
        let object = json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": kind,
            "metadata": {"name": "bare"},
        });
        let request = http::Request::post(format!(
            "/apis/bootstrap.cluster.x-k8s.io/v1beta2/namespaces/{ns}/{plural}"
        ))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&object).unwrap())
        .unwrap();
        let stored: Value = env.client().request(request).await.unwrap();
        assert!(stored.get("spec").is_none(), "{kind}: {stored}");
    }
    let config = Api::<KubeadmConfig>::namespaced(env.client(), &ns)
        .get("bare")
        .await
        .unwrap();
    assert_eq!(config.spec, KubeadmConfigSpec::default());
    let template = Api::<KubeadmConfigTemplate>::namespaced(env.client(), &ns)
        .get("bare")
        .await
        .unwrap();
    assert_eq!(template.spec, Default::default());

    let written = create(&env, &ns, json!({"format": "ignition"}))
        .await
        .unwrap();
    let name = written["metadata"]["name"].as_str().unwrap();
    let config = Api::<KubeadmConfig>::namespaced(env.client(), &ns)
        .get(name)
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&config.spec).unwrap(),
        json!({"format": "ignition"})
    );
}
