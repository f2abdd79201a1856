//! Bad input, as a user would send it: objects that break the CRD schemas go to the API server,
//! objects that pass the schemas but cannot work go to the controllers.
//!
//! - Every constraint of every schema the in-memory manager serves (core, kubeadm bootstrap,
//!   in-memory provider) gets proptest-generated edits that break it; the API server must refuse
//!   each, naming the field (`capi_testing::schema_violations`).
//! - Objects the schema cannot judge — an unknown flavor, a selector that does not select its
//!   own template, references to objects that do not exist — end in a condition with a message a
//!   user can act on; the manager keeps running, nothing panics, no instance is created for a
//!   machine that cannot work, and the debug logs of the whole run hold no Secret value.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capi_actuator::InfrastructureControllers;
use capi_controllers::{CoreControllers, CoreSettings};
use capi_core::api::{Cluster, Machine, MachineDeployment};
use capi_core::{condition, labels};
use capi_runtime::manager::Manager;
use capi_testing::schema_violations::check_crds_refuse_all;
use capi_testing::{TestEnv, manifest};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt};
use proptest::test_runner::TestRunner;
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::{InMemoryCluster, InMemoryMachine};
use provider_inmemory::cloud::{CloudConfig, SimulatedCloud};
use serde_json::{Value, json};

/// A valid object of each kind: the base every edit starts from.
fn base(kind: &str) -> Value {
    let reference =
        |kind: &str| json!({"apiGroup": "infrastructure.capi-rs.dev", "kind": kind, "name": "x"});
    let bootstrap = json!({"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "x"}});
    let machine_spec = json!({"clusterName": "demo", "version": "v1.33.0", "bootstrap": bootstrap,
                              "infrastructureRef": reference("InMemoryMachineTemplate")});
    let selector = json!({"matchLabels": {"pool": "a"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]});
    let template =
        json!({"metadata": {"labels": {"pool": "a", "tier": "x"}}, "spec": machine_spec});
    let spec = match kind {
        "Cluster" => json!({
            "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}, "services": {"cidrBlocks": ["10.96.0.0/12"]}, "apiServerPort": 6443},
            "controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443},
            "infrastructureRef": reference("InMemoryCluster"),
            "topology": {"classRef": {"name": "quick-start"}, "version": "v1.33.0",
                         "controlPlane": {"replicas": 1},
                         "workers": {"machineDeployments": [{"class": "default-worker", "name": "md-0"}]}}}),
        "Machine" => {
            json!({"clusterName": "demo", "version": "v1.33.0", "bootstrap": {"dataSecretName": "x"},
                            "infrastructureRef": reference("InMemoryMachine"), "failureDomain": "a",
                            "deletion": {"nodeDrainTimeoutSeconds": 10}})
        }
        "MachineSet" => {
            json!({"clusterName": "demo", "replicas": 1, "selector": selector, "template": template,
                               "deletion": {"order": "Oldest"}})
        }
        "MachineDeployment" => {
            json!({"clusterName": "demo", "replicas": 1, "selector": selector, "template": template,
                                      "rollout": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
                                      "remediation": {"maxInFlight": 1}})
        }
        "MachinePool" => json!({"clusterName": "demo", "replicas": 2,
                                "template": {"metadata": {"labels": {"pool": "a"}},
                                             "spec": {"clusterName": "demo", "version": "v1.33.0",
                                                      "bootstrap": {"dataSecretName": "x"},
                                                      "infrastructureRef": reference("InMemoryMachinePool")}},
                                "providerIDList": ["inmemory:///i-1"], "failureDomains": ["zone-a"]}),
        "MachineHealthCheck" => json!({"clusterName": "demo", "selector": selector,
                                       "checks": {"nodeStartupTimeoutSeconds": 600,
                                                  "unhealthyNodeConditions": [{"type": "Ready", "status": "Unknown", "timeoutSeconds": 300}]},
                                       "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": "40%"}}}),
        // List elements and objects with required fields of their own are present, so that an
        // edit deep inside them is judged on its own.
        "KubeadmConfig" => json!({"format": "cloud-config",
                                  "files": [{"path": "/etc/demo", "content": "x", "permissions": "0644"}],
                                  "users": [{"name": "ops", "sshAuthorizedKeys": ["ssh-ed25519 AAAA x"]}],
                                  "preKubeadmCommands": ["true"],
                                  "initConfiguration": {"bootstrapTokens": [{"token": "abcdef.0123456789abcdef"}],
                                                        "nodeRegistration": {"taints": [{"key": "k", "effect": "NoSchedule"}]}},
                                  "joinConfiguration": {"nodeRegistration": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
                                                        "discovery": {"file": {"kubeConfigPath": "/etc/discovery.conf",
                                                                               "kubeConfig": {"user": {"exec": {"command": "x"}}}}}}}),
        "KubeadmConfigTemplate" => json!({"template": {"spec": {"format": "ignition",
                                  "files": [{"path": "/etc/demo", "content": "x"}],
                                  "initConfiguration": {"nodeRegistration": {"taints": [{"key": "k", "effect": "NoSchedule"}]}},
                                  "joinConfiguration": {"nodeRegistration": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
                                                        "discovery": {"file": {"kubeConfigPath": "/etc/discovery.conf",
                                                                               "kubeConfig": {"user": {"exec": {"command": "x"}}}}}}}}}),
        "InMemoryCluster" => json!({}),
        "InMemoryClusterTemplate" => {
            json!({"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"failureDomains": ["zone-a"]}}})
        }
        "InMemoryMachine" => json!({"flavor": "small"}),
        "InMemoryMachinePool" => json!({"flavor": "small", "providerIDList": ["inmemory:///i-1"],
                                        "failureDomains": ["zone-a"],
                                        "strategy": {"maxSurge": 1, "maxUnavailable": 0}}),
        "InMemoryMachineTemplate" => json!({"template": {"spec": {"flavor": "small"}}}),
        other => panic!("no base object for {other}"),
    };
    json!({"metadata": {"name": "bad-input"}, "spec": spec})
}

#[tokio::test]
async fn the_api_server_refuses_what_the_schemas_forbid_and_names_the_field() {
    let mut crds: Vec<CustomResourceDefinition> = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    if let Err(misses) = check_crds_refuse_all(&env.client(), &ns, &crds, base).await {
        panic!("{misses}");
    }
}

/// Everything the manager logs, at debug level, for the whole test process.
static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Captured;

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOGS.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("debug,hyper=info,h2=info,tower=info,rustls=info")
        .with_ansi(false)
        .with_writer(|| Captured)
        .try_init();
}

fn logs() -> String {
    String::from_utf8_lossy(&LOGS.lock().unwrap()).into_owned()
}

/// Values planted in Secrets; none may show up in a log line, an event or a status.
const BOOTSTRAP_SENTINEL: &str = "bootstrap-sentinel-4f1c9e";
const TOKEN_SENTINEL: &str = "token-sentinel-8d2b7a";

const WRONG_BUT_VALID: &str = r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo}
spec:
  clusterNetwork: {pods: {cidrBlocks: [192.168.0.0/16]}}
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryCluster, name: demo}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryCluster
metadata: {name: demo}
spec: {}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: lost}
spec:
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryCluster, name: nowhere}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachineTemplate
metadata: {name: workers}
spec: {template: {spec: {flavor: small}}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: unselected}
spec:
  clusterName: demo
  replicas: 2
  selector: {matchLabels: {pool: one}}
  template:
    metadata: {labels: {pool: other}}
    spec:
      clusterName: demo
      version: v1.33.0
      bootstrap: {dataSecretName: demo-bootstrap}
      infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachineTemplate, name: workers}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata: {name: no-infra}
spec:
  clusterName: demo
  version: v1.33.0
  bootstrap: {dataSecretName: demo-bootstrap}
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachine, name: nowhere}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachine
metadata: {name: no-data}
spec: {flavor: small}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata: {name: no-data}
spec:
  clusterName: demo
  version: v1.33.0
  bootstrap: {dataSecretName: nowhere}
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachine, name: no-data}
"##;

/// A machine with a flavor the cloud does not have.
fn unknown_flavor_manifests(flavor: &str) -> String {
    format!(
        r##"
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachine
metadata: {{name: odd-flavor}}
spec: {{flavor: "{flavor}"}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata: {{name: odd-flavor}}
spec:
  clusterName: demo
  version: v1.33.0
  bootstrap: {{dataSecretName: demo-bootstrap}}
  infrastructureRef: {{apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachine, name: odd-flavor}}
"##
    )
}

/// The condition `type_` of an object's status, as (status, reason, message).
fn condition_of(object: &Value, type_: &str) -> Option<(String, String, String)> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (text("status"), text("reason"), text("message"))
        })
}

async fn get(client: &Client, ns: &str, resource: &ApiResource, name: &str) -> Option<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, resource);
    let object = api.get_opt(name).await.ok()??;
    serde_json::to_value(object).ok()
}

#[tokio::test]
async fn objects_the_schema_cannot_judge_end_in_conditions_a_user_can_act_on() {
    capture_logs();
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let client = env.client();
    let workload = capi_testing::envtest::ControlPlane::start().await.unwrap();

    // The Secrets a cluster holds, with values to look for later.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let kubeconfig = workload.kubeconfig_yaml();
    for secret in [
        json!({"metadata": {"name": "demo-bootstrap", "labels": {labels::CLUSTER_NAME: "demo"}},
               "stringData": {"value": format!("#cloud-config\nruncmd: [echo {BOOTSTRAP_SENTINEL}]\n")}}),
        json!({"metadata": {"name": "demo-kubeconfig", "labels": {labels::CLUSTER_NAME: "demo"}},
               "stringData": {"value": kubeconfig, "token": TOKEN_SENTINEL}}),
    ] {
        secrets
            .create(
                &Default::default(),
                &serde_json::from_value(secret).unwrap(),
            )
            .await
            .unwrap();
    }

    let cloud = Arc::new(SimulatedCloud::new(CloudConfig::default()));
    let config = common::manager_config(&ns);
    let mut manager = Manager::new(env.control_plane().config().await.unwrap(), config)
        .await
        .unwrap();
    let actuator = Arc::new(InMemoryActuator::new(
        cloud.clone(),
        cloud.clone(),
        Duration::from_millis(50),
    ));
    manager.add_machine_reconciler(actuator.clone());
    manager.add_cluster_reconciler::<InMemoryCluster>(actuator);
    manager.add(capi_bootstrap::controller::KubeadmBootstrap::default());
    manager.add(CoreControllers::new(CoreSettings {
        poll: Duration::from_millis(200),
        ..CoreSettings::default()
    }));
    let running = tokio::spawn(async move { manager.run_until(std::future::pending()).await });

    manifest::create_all(&client, &ns, &manifest::parse(WRONG_BUT_VALID).unwrap())
        .await
        .unwrap();
    // Flavors the cloud has never heard of, drawn by proptest (the schema allows any name).
    let mut runner = TestRunner::default();
    let flavor = proptest::strategy::ValueTree::current(
        &proptest::strategy::Strategy::new_tree(&"[a-z][a-z0-9-]{0,20}[a-z0-9]", &mut runner)
            .unwrap(),
    );
    let flavor = if ["small", "medium", "large"].contains(&flavor.as_str()) {
        format!("{flavor}-x")
    } else {
        flavor
    };
    manifest::create_all(
        &client,
        &ns,
        &manifest::parse(&unknown_flavor_manifests(&flavor)).unwrap(),
    )
    .await
    .unwrap();

    let machines = ApiResource::erase::<Machine>(&());
    let infra_machines = ApiResource::erase::<InMemoryMachine>(&());
    let deployments = ApiResource::erase::<MachineDeployment>(&());
    let clusters = ApiResource::erase::<Cluster>(&());
    // What each object must end in: (resource, name, condition, reason, words the message names).
    let expectations: Vec<(&ApiResource, &str, &str, &str, Vec<String>)> = vec![
        (
            &infra_machines,
            "odd-flavor",
            condition::READY,
            "UnknownFlavor",
            vec![flavor.clone(), "small".into()],
        ),
        (
            &deployments,
            "unselected",
            "ScalingUp",
            "InvalidSelector",
            vec!["pool=one".into(), "spec.template.metadata.labels".into()],
        ),
        (
            &machines,
            "no-infra",
            condition::INFRASTRUCTURE_READY,
            "",
            vec!["nowhere".into()],
        ),
        (
            &infra_machines,
            "no-data",
            condition::READY,
            "",
            vec!["nowhere".into()],
        ),
        (
            &clusters,
            "lost",
            condition::INFRASTRUCTURE_READY,
            "",
            vec!["nowhere".into()],
        ),
    ];
    for (resource, name, type_, reason, words) in &expectations {
        let deadline = tokio::time::Instant::now() + common::TIMEOUT;
        loop {
            let object = get(&client, &ns, resource, name).await;
            let found = object.as_ref().and_then(|o| condition_of(o, type_));
            let done = found
                .as_ref()
                .is_some_and(|(status, found_reason, message)| {
                    status == "False"
                        && (reason.is_empty() || found_reason == reason)
                        && words.iter().all(|w| message.contains(w.as_str()))
                });
            if done {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} {name}: expected {type_}=False {reason} naming {words:?}; conditions: {}",
                resource.kind,
                object
                    .map(|o| o["status"]["conditions"].to_string())
                    .unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // Nothing was created for what cannot work: no instance for the odd flavor, no machines for
    // the deployment that would not own them.
    let owned = Api::<Machine>::namespaced(client.clone(), &ns)
        .list(
            &ListParams::default()
                .labels(&format!("{}=unselected", labels::MACHINE_DEPLOYMENT_NAME)),
        )
        .await
        .unwrap();
    assert!(
        owned.items.is_empty(),
        "{:?}",
        owned.items.iter().map(|m| m.name_any()).collect::<Vec<_>>()
    );
    let instances = cloud.instances();
    assert!(
        instances.iter().all(|i| i.flavor != flavor),
        "an instance was created with the unknown flavor {flavor}"
    );

    // Still running, and not reconciling in a loop: a few seconds later the reconcile count of
    // the machine with the unknown flavor has not run away.
    assert!(
        !running.is_finished(),
        "the manager stopped: {:?}",
        running.await
    );
    let before = logs().matches("odd-flavor").count();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = logs().matches("odd-flavor").count();
    assert!(
        after - before < 50,
        "{} log lines about odd-flavor in 3 s: a reconcile storm",
        after - before
    );

    let logs = logs();
    assert!(!logs.is_empty(), "no logs were captured");
    assert!(!logs.contains("panicked"), "a panic was logged");
    for secret in [BOOTSTRAP_SENTINEL, TOKEN_SENTINEL] {
        assert!(!logs.contains(secret), "a Secret value was logged");
    }
    let token = workload.kubeconfig_yaml();
    let token = token
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap()
        .to_string();
    assert!(
        !logs.contains(&token),
        "the workload cluster's token was logged"
    );
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let statuses = Api::<Machine>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let visible = format!(
        "{}{}",
        serde_json::to_string(&events.items).unwrap(),
        serde_json::to_string(&statuses.items).unwrap()
    );
    for secret in [BOOTSTRAP_SENTINEL, TOKEN_SENTINEL, token.as_str()] {
        assert!(
            !visible.contains(secret),
            "a Secret value is in an event or a status"
        );
    }
}
