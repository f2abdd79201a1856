//! The bootstrap hook puts the cluster's credentials (`cloud.conf`) only on the machines whose
//! `OpenStackMachine` asks for them (`writeCloudConf: true`), against a real API server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_bootstrap::controller::BootstrapFiles;
use capi_core::api::{Cluster, Machine};
use capi_testing::TestEnv;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use provider_openstack::api::{OpenStackCluster, OpenStackMachine};
use provider_openstack::cloud_conf::{CLOUD_CONF_PATH, CloudConfFiles};
use serde_json::json;

fn machine(name: &str) -> Machine {
    serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": name},
        "spec": {"clusterName": "demo",
                 "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                                             "kind": "KubeadmConfig", "name": name}},
                 "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev",
                                       "kind": "OpenStackMachine", "name": name}}
    }))
    .unwrap()
}

#[tokio::test]
async fn only_a_machine_that_asks_for_cloud_conf_gets_the_credentials() {
    let env = TestEnv::start_with_crds(&provider_openstack::api::crds())
        .await
        .unwrap();
    let ns = env.namespace().await.unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "demo-cloud-config"},
        "stringData": {"clouds.yaml": "clouds:\n  openstack:\n    auth:\n      \
            auth_url: https://keystone.example.com/v3\n      username: admin\n      \
            password: never-on-a-worker\n      project_name: admin\n"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let infra: OpenStackCluster = serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackCluster",
        "metadata": {"name": "demo"},
        "spec": {"identityRef": {"name": "demo-cloud-config", "cloudName": "openstack"}}
    }))
    .unwrap();
    Api::<OpenStackCluster>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &infra)
        .await
        .unwrap();
    let machines: Api<OpenStackMachine> = Api::namespaced(env.client(), &ns);
    for (name, write) in [("control-plane-0", Some(true)), ("worker-0", None)] {
        let mut spec = json!({"flavor": {"filter": {"name": "m1.medium"}},
                              "image": {"filter": {"name": "ubuntu"}}});
        if let Some(write) = write {
            spec["writeCloudConf"] = json!(write);
        }
        let object: OpenStackMachine = serde_json::from_value(json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackMachine",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        machines
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "demo", "namespace": ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev",
                                       "kind": "OpenStackCluster", "name": "demo"}}
    }))
    .unwrap();

    let hook = CloudConfFiles;
    let control_plane = hook
        .files(&env.client(), &cluster, &machine("control-plane-0"))
        .await
        .unwrap();
    let conf = control_plane
        .iter()
        .find(|f| f.path == CLOUD_CONF_PATH)
        .expect("the control plane asked for cloud.conf");
    assert!(String::from_utf8_lossy(&conf.content).contains("never-on-a-worker"));
    let worker = hook
        .files(&env.client(), &cluster, &machine("worker-0"))
        .await
        .unwrap();
    assert!(
        worker.is_empty(),
        "a worker gets no credentials: {worker:?}"
    );
    let missing = hook
        .files(&env.client(), &cluster, &machine("not-there"))
        .await
        .unwrap_err();
    assert!(
        missing.contains("OpenStackMachine") && missing.contains("does not exist"),
        "{missing}"
    );
}
