//! A tenant's attacks through the workload cluster's kubeconfig: the tenant — a ServiceAccount
//! with only `config/tenant-role.yaml` in its own namespace — overwrites its cluster's
//! `<cluster>-kubeconfig` Secret with a kubeconfig that would make the manager run a command, read
//! its own ServiceAccount token, run an auth-provider helper or route through a proxy. The
//! manager (core controllers and the in-memory provider, standalone) follows none of it: the
//! Machine's condition names the refused field, never its value, and the command never runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use capi_actuator::InfrastructureControllers;
use capi_controllers::{CoreControllers, CoreSettings};
use capi_core::api::Machine;
use capi_runtime::manager::Manager;
use capi_testing::{TestEnv, manifest};
use common::{eventually, manager_config};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::{InMemoryCluster, InMemoryMachineTemplate};
use provider_inmemory::cloud::{CloudConfig, SimulatedCloud};
use serde_json::json;

/// What the tenant creates: a cluster and one machine of the in-memory provider.
const TENANT_OBJECTS: &str = r##"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo}
spec:
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryCluster, name: demo}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryCluster
metadata: {name: demo}
spec: {}
---
apiVersion: v1
kind: Secret
metadata: {name: m-1-bootstrap}
stringData: {value: "#cloud-config\n"}
---
apiVersion: infrastructure.capi-rs.dev/v1alpha1
kind: InMemoryMachine
metadata: {name: m-1}
spec: {flavor: small}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata: {name: m-1}
spec:
  clusterName: demo
  version: v1.33.0
  bootstrap: {dataSecretName: m-1-bootstrap}
  infrastructureRef: {apiGroup: infrastructure.capi-rs.dev, kind: InMemoryMachine, name: m-1}
"##;

/// A client acting as the namespace's owner: a ServiceAccount bound to `config/tenant-role.yaml`
/// in `ns` and nothing else.
async fn tenant_client(env: &TestEnv, ns: &str) -> Client {
    let role = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/tenant-role.yaml"),
    )
    .unwrap();
    capi_testing::deployed::tenant_client(env, ns, &role, "cluster-api-tenant")
        .await
        .unwrap()
}

/// The messages of the machine's conditions.
async fn condition_messages(machines: &Api<Machine>) -> Vec<String> {
    let Ok(machine) = machines.get("m-1").await else {
        return Vec::new();
    };
    let conditions = machine.status.map(|s| s.conditions).unwrap_or_default();
    conditions.into_iter().map(|c| c.message).collect()
}

/// A kubeconfig pointing at `server`, with `cluster` and `user` settings added.
fn kubeconfig(server: &str, cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         contexts: [{{name: c, context: {{cluster: w, user: u}}}}]\n\
         clusters: [{{name: w, cluster: {{server: '{server}'{cluster}}}}}]\n\
         users: [{{name: u, user: {{{user}}}}}]\n"
    )
}

#[tokio::test]
async fn a_tenant_kubeconfig_runs_nothing_reads_nothing_and_routes_nowhere() {
    let mut crds = capi_core::crd::core();
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let tenant = tenant_client(&env, &ns).await;

    // The manager, as an operator runs it (its own identity, not the tenant's).
    let cloud = Arc::new(SimulatedCloud::new(CloudConfig::default()));
    let mut manager = Manager::new(
        env.control_plane().config().await.unwrap(),
        manager_config(&ns),
    )
    .await
    .unwrap();
    let actuator = Arc::new(InMemoryActuator::new(
        cloud.clone(),
        cloud,
        Duration::from_millis(50),
    ));
    manager.add_machine_reconciler(actuator.clone());
    manager.add_machine_template_reconciler::<InMemoryMachineTemplate, InMemoryCluster>(
        actuator.clone(),
    );
    manager.add_cluster_reconciler::<InMemoryCluster>(actuator);
    manager.add(CoreControllers::new(CoreSettings {
        poll: Duration::from_millis(200),
        ..CoreSettings::default()
    }));
    let running = tokio::spawn(async move {
        let _ = manager.run_until(std::future::pending()).await;
    });

    // Everything below is written by the tenant, with the tenant's own rights.
    manifest::create_all(&tenant, &ns, &manifest::parse(TENANT_OBJECTS).unwrap())
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(tenant.clone(), &ns);
    let machines: Api<Machine> = Api::namespaced(tenant.clone(), &ns);
    let marker = std::env::temp_dir().join(format!("capi-rs-tenant-exec-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let server = "https://127.0.0.1:1";
    let attacks = [
        (
            kubeconfig(
                server,
                "",
                &format!(
                    "exec: {{apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, \
                     args: [-c, 'touch {}'], interactiveMode: Never}}",
                    marker.display()
                ),
            ),
            "users[0].user.exec",
        ),
        (
            kubeconfig(
                server,
                "",
                "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
            ),
            "users[0].user.tokenFile",
        ),
        (
            kubeconfig(
                server,
                "",
                "auth-provider: {name: gcp, config: {cmd-path: /bin/sh, cmd-args: '-c true'}}",
            ),
            "users[0].user.auth-provider",
        ),
        (
            kubeconfig(
                server,
                ", proxy-url: 'http://127.0.0.1:3128'",
                "token: t0k3n-value",
            ),
            "clusters[0].cluster.proxy-url",
        ),
    ];
    for (document, field) in &attacks {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "demo-kubeconfig",
                         "labels": {"cluster.x-k8s.io/cluster-name": "demo"}},
            "stringData": {"value": document},
        }))
        .unwrap();
        secrets
            .patch(
                "demo-kubeconfig",
                &PatchParams::apply("tenant").force(),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap();
        eventually(
            &format!("the machine's condition naming {field}"),
            || async {
                condition_messages(&machines)
                    .await
                    .iter()
                    .any(|m| m.contains(field) && m.contains("refused"))
            },
        )
        .await;
        for message in condition_messages(&machines).await {
            for value in ["/bin/sh", "serviceaccount/token", "3128", "t0k3n-value"] {
                assert!(
                    !message.contains(value),
                    "a value reached a condition: {message}"
                );
            }
        }
    }
    assert!(
        !marker.exists(),
        "the tenant's exec command ran in the manager"
    );
    running.abort();
}
