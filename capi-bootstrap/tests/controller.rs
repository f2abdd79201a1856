//! The kubeadm bootstrap reconciler on a real API server: of three control-plane machines exactly
//! one gets `kubeadm init`; after initialisation the others and a worker join with tokens created
//! in the workload cluster; Secrets follow the contract and are never re-rendered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use capi_bootstrap::api::{KubeadmConfig, KubeadmConfigSpec};
use capi_bootstrap::controller::{BootstrapSettings, KubeadmConfigReconciler};
use capi_bootstrap::render::PlanFile;
use capi_core::api::{Cluster, Machine};
use capi_core::{BootstrapData, condition, labels};
use capi_runtime::ReconcilerOptions;
use capi_runtime::retry::RetryPolicy;
use capi_testing::TestEnv;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn environment() -> (TestEnv, String) {
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    (env, ns)
}

/// Cluster `demo`, its infrastructure provisioned (and its control plane initialised when
/// `initialized`), pods in 10.244.0.0/16.
async fn demo_cluster(client: &Client, ns: &str, initialized: bool) -> Api<Cluster> {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), ns);
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "demo"},
        "spec": {"controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443},
                 "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}}}
    }))
    .unwrap();
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    report_cluster(&clusters, initialized).await;
    clusters
}

/// Reports cluster `demo`'s infrastructure provisioned and whether its control plane is
/// initialised.
async fn report_cluster(clusters: &Api<Cluster>, initialized: bool) {
    let patch = json!({"status": {"initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": initialized}}});
    clusters
        .patch_status("demo", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

async fn add_machine(client: &Client, ns: &str, name: &str, control_plane: bool) {
    let mut labels = BTreeMap::from([(labels::CLUSTER_NAME.to_string(), "demo".to_string())]);
    if control_plane {
        labels.insert(labels::MACHINE_CONTROL_PLANE.to_string(), String::new());
    }
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": name, "labels": labels},
        "spec": {"clusterName": "demo", "version": "v1.31.1",
                 "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}},
                 "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachine", "name": name}}
    }))
    .unwrap();
    let machine = Api::<Machine>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    let mut config = KubeadmConfig::new(
        name,
        KubeadmConfigSpec {
            pre_kubeadm_commands: vec!["swapoff -a".into()],
            ..Default::default()
        },
    );
    config.metadata.labels = Some(BTreeMap::from([(
        labels::CLUSTER_NAME.to_string(),
        "demo".to_string(),
    )]));
    config.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Machine".into(),
        name: name.into(),
        uid: machine.uid().unwrap(),
        controller: Some(true),
        ..OwnerReference::default()
    }]);
    Api::<KubeadmConfig>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
}

/// A provider's hook: every machine gets a cloud provider configuration naming its cluster.
struct CloudConf;

#[async_trait::async_trait]
impl capi_bootstrap::controller::BootstrapFiles for CloudConf {
    async fn files(
        &self,
        _: &Client,
        cluster: &Cluster,
        machine: &Machine,
    ) -> Result<Vec<PlanFile>, String> {
        let content = format!(
            "[Global]\ncluster = {}\nmachine = {}\n",
            cluster.name_any(),
            machine.name_any()
        );
        Ok(vec![PlanFile::new(
            "/etc/provider/cloud.conf",
            0o600,
            content,
        )])
    }
}

async fn data(secrets: &Api<Secret>, name: &str) -> Option<String> {
    let secret = secrets.get_opt(name).await.unwrap()?;
    Some(
        String::from_utf8(
            BootstrapData::from_secret(&secret)
                .unwrap()
                .expose()
                .to_vec(),
        )
        .unwrap(),
    )
}

#[tokio::test]
async fn one_init_then_joins_with_tokens_in_the_workload_cluster_and_no_re_rendering() {
    let (env, ns) = environment().await;
    let client = env.client();
    let clusters = demo_cluster(&client, &ns, false).await;
    for name in ["cp-0", "cp-1", "cp-2"] {
        add_machine(&client, &ns, name, true).await;
    }
    add_machine(&client, &ns, "worker-0", false).await;

    let retry = RetryPolicy {
        poll: Duration::from_millis(200),
        backoff_base: Duration::from_millis(50),
        ..RetryPolicy::default()
    };
    let settings = BootstrapSettings {
        token_refresh: Duration::from_millis(500),
        extra_files: vec![std::sync::Arc::new(CloudConf)],
        ..BootstrapSettings::default()
    };
    let reconciler = KubeadmConfigReconciler::new(client.clone(), std::sync::Arc::new(settings))
        .options(
            ReconcilerOptions::default()
                .namespace(&ns)
                .retry_policy(retry),
        );
    let task = tokio::spawn(capi_bootstrap::controller::run(
        reconciler,
        std::future::pending(),
    ));

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    eventually("one init secret", || async {
        let mut found = 0;
        for name in ["cp-0", "cp-1", "cp-2"] {
            found += usize::from(data(&secrets, name).await.is_some());
        }
        found == 1
    })
    .await;
    // Give the others time to (wrongly) render too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut init = Vec::new();
    for name in ["cp-0", "cp-1", "cp-2"] {
        if let Some(value) = data(&secrets, name).await {
            assert!(
                value.contains("kubeadm init --config /run/kubeadm/kubeadm.yaml"),
                "{value}"
            );
            assert!(
                value.contains("/etc/kubernetes/pki/ca.key"),
                "the init machine gets the cluster CA"
            );
            assert!(value.contains("10.244.0.0/16"), "pod CIDR from the Cluster");
            init.push(name);
        }
    }
    assert_eq!(
        init.len(),
        1,
        "exactly one control-plane machine initialises: {init:?}"
    );
    assert!(
        data(&secrets, "worker-0").await.is_none(),
        "workers wait for the control plane"
    );
    for suffix in ["ca", "etcd", "proxy", "sa", "kubeconfig"] {
        assert!(
            secrets
                .get_opt(&format!("demo-{suffix}"))
                .await
                .unwrap()
                .is_some(),
            "demo-{suffix}"
        );
    }
    let configs: Api<KubeadmConfig> = Api::namespaced(client.clone(), &ns);
    let initialised = configs.get(init[0]).await.unwrap().status.unwrap();
    assert_eq!(initialised.data_secret_name.as_deref(), Some(init[0]));
    assert!(condition::is_true(
        &initialised.conditions,
        condition::READY
    ));
    let init_secret = secrets.get(init[0]).await.unwrap();
    assert_eq!(labels::cluster_name(&init_secret.metadata), Some("demo"));
    assert_eq!(
        init_secret.metadata.owner_references.unwrap()[0].kind,
        "KubeadmConfig"
    );

    // The workload cluster is this API server: point the kubeconfig Secret at it, then report
    // the control plane initialised.
    let kubeconfig = env.control_plane().kubeconfig_yaml().to_string();
    let patch = json!({"data": {"value": ByteString(kubeconfig.into_bytes())}});
    secrets
        .patch(
            "demo-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    report_cluster(&clusters, true).await;

    eventually("every machine's data", || async {
        let mut all = true;
        for name in ["cp-0", "cp-1", "cp-2", "worker-0"] {
            all &= data(&secrets, name).await.is_some();
        }
        all
    })
    .await;
    for name in ["cp-0", "cp-1", "cp-2"]
        .into_iter()
        .filter(|n| !init.contains(n))
    {
        let value = data(&secrets, name).await.unwrap();
        assert!(
            value.contains("kubeadm join") && value.contains("controlPlane"),
            "{value}"
        );
        assert!(value.contains("sha256:"), "joins pin the cluster CA");
    }
    let worker = data(&secrets, "worker-0").await.unwrap();
    assert!(
        worker.contains("kubeadm join")
            && !worker.contains("controlPlane")
            && !worker.contains("ca.key"),
        "{worker}"
    );
    assert!(
        worker.contains("/etc/provider/cloud.conf"),
        "provider hook files are added"
    );
    assert!(
        worker.contains("machine = worker-0"),
        "hooks see the machine"
    );
    assert_eq!(
        join_tokens(&client).await,
        3,
        "one bootstrap token per joining machine"
    );

    // Tokens are refreshed while the machine has not joined, and no longer after it has.
    let token_name = {
        let worker_secret = secrets.get("worker-0").await.unwrap();
        format!(
            "bootstrap-token-{}",
            worker_secret.annotations()["bootstrap.cluster.x-k8s.io/token-id"]
        )
    };
    let workload_tokens: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let expiration = || async {
        let token = workload_tokens.get(&token_name).await.unwrap();
        String::from_utf8(token.data.unwrap()["expiration"].0.clone()).unwrap()
    };
    let first = expiration().await;
    eventually("the worker's token to be extended", || async {
        expiration().await > first
    })
    .await;
    let machines: Api<Machine> = Api::namespaced(client.clone(), &ns);
    let joined = json!({"status": {"nodeRef": {"name": "worker-0"}}});
    machines
        .patch_status("worker-0", &PatchParams::default(), &Patch::Merge(&joined))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let settled = expiration().await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        expiration().await,
        settled,
        "a joined machine's token is no longer extended"
    );

    // Never re-rendered: a change to the config does not touch the Secret.
    let before = secrets
        .get("worker-0")
        .await
        .unwrap()
        .metadata
        .resource_version;
    let patch = json!({"metadata": {"annotations": {"touched": "yes"}}});
    configs
        .patch("worker-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        secrets
            .get("worker-0")
            .await
            .unwrap()
            .metadata
            .resource_version,
        before
    );
    task.abort();
}

/// A client of `env` that counts its requests of each (method, path) in `watched`, in order.
async fn counting_client(
    env: &TestEnv,
    watched: Vec<(http::Method, String)>,
) -> (Client, Vec<Arc<AtomicUsize>>) {
    let counts: Vec<Arc<AtomicUsize>> = watched.iter().map(|_| Arc::default()).collect();
    let seen = counts.clone();
    let layer =
        tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            for ((method, path), count) in watched.iter().zip(&seen) {
                if request.method() == method && request.uri().path() == path {
                    count.fetch_add(1, Ordering::SeqCst);
                }
            }
            request
        });
    let config = env.control_plane().config().await.unwrap();
    let client = kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build();
    (client, counts)
}

/// A data Secret as an earlier render of config `name` made it, owned by that config (or by
/// `owner_uid`), without a join token.
async fn data_secret_of(
    configs: &Api<KubeadmConfig>,
    name: &str,
    owner_uid: Option<&str>,
) -> Secret {
    let uid = match owner_uid {
        Some(uid) => uid.to_string(),
        None => configs.get(name).await.unwrap().uid().unwrap(),
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": "demo"},
                     "ownerReferences": [{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                                          "kind": "KubeadmConfig", "name": name,
                                          "uid": uid, "controller": true}]},
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": "#cloud-config\n# rendered earlier\n", "format": "cloud-config"}
    }))
    .unwrap()
}

/// The bootstrap tokens in the workload cluster (here: the same API server).
async fn join_tokens(client: &Client) -> usize {
    Api::<Secret>::namespaced(client.clone(), "kube-system")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.type_.as_deref() == Some("bootstrap.kubernetes.io/token"))
        .count()
}

async fn recorded_data(configs: &Api<KubeadmConfig>, name: &str) -> Option<String> {
    configs
        .get(name)
        .await
        .unwrap()
        .status
        .filter(|s| condition::is_true(&s.conditions, condition::READY))?
        .data_secret_name
}

#[tokio::test]
async fn a_render_that_reached_its_secret_is_kept_and_a_fresh_config_reads_no_secret() {
    let (env, ns) = environment().await;
    let client = env.client();
    demo_cluster(&client, &ns, true).await;
    // The workload cluster is this API server.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let kubeconfig: Secret = serde_json::from_value(json!({
        "metadata": {"name": "demo-kubeconfig"},
        "data": {"value": ByteString(env.control_plane().kubeconfig_yaml().as_bytes().to_vec())}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &kubeconfig)
        .await
        .unwrap();
    // An earlier render of worker-b got as far as its Secret (and its join token), not the status.
    let tokens: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let token: Secret = serde_json::from_value(json!({
        "metadata": {"name": "bootstrap-token-abcdef"}, "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": "abcdef", "token-secret": "0123456789abcdef",
                       "expiration": "2000-01-01T00:00:00Z", "usage-bootstrap-authentication": "true"}
    }))
    .unwrap();
    tokens.create(&PostParams::default(), &token).await.unwrap();
    add_machine(&client, &ns, "worker-a", false).await;
    add_machine(&client, &ns, "worker-b", false).await;
    let configs: Api<KubeadmConfig> = Api::namespaced(client.clone(), &ns);
    let worker_b = configs.get("worker-b").await.unwrap().uid().unwrap();
    let earlier: Secret = serde_json::from_value(json!({
        "metadata": {"name": "worker-b", "labels": {"cluster.x-k8s.io/cluster-name": "demo"},
                     "annotations": {"bootstrap.cluster.x-k8s.io/token-id": "abcdef"},
                     "ownerReferences": [{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                                          "kind": "KubeadmConfig", "name": "worker-b",
                                          "uid": worker_b, "controller": true}]},
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": "#cloud-config\n# rendered earlier\n", "format": "cloud-config"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &earlier)
        .await
        .unwrap();

    // worker-d's data was rendered earlier too, and no render could be made now (a file's Secret
    // is gone): the earlier data is still the config's.
    add_machine(&client, &ns, "worker-d", false).await;
    let files = json!({"spec": {"files": [{"path": "/etc/gone", "contentFrom": {"secret": {"name": "gone", "key": "k"}}}]}});
    configs
        .patch("worker-d", &PatchParams::default(), &Patch::Merge(&files))
        .await
        .unwrap();
    let earlier_d = data_secret_of(&configs, "worker-d", None).await;
    secrets
        .create(&PostParams::default(), &earlier_d)
        .await
        .unwrap();
    // worker-e's name is taken by a Secret of another config (deleted, not yet collected): it
    // is neither taken as worker-e's data nor overwritten.
    add_machine(&client, &ns, "worker-e", false).await;
    let foreign = data_secret_of(&configs, "worker-e", Some("0000-not-this-config")).await;
    secrets
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();

    let (controller_client, counts) = counting_client(
        &env,
        vec![
            (
                http::Method::GET,
                format!("/api/v1/namespaces/{ns}/secrets/worker-c"),
            ),
            (
                http::Method::POST,
                format!("/api/v1/namespaces/{ns}/secrets"),
            ),
        ],
    )
    .await;
    let (worker_c_reads, renders) = (&counts[0], &counts[1]);
    let reconciler = KubeadmConfigReconciler::new(
        controller_client,
        std::sync::Arc::new(BootstrapSettings::default()),
    )
    .options(
        ReconcilerOptions::default()
            .namespace(&ns)
            .retry_policy(RetryPolicy {
                poll: Duration::from_millis(200),
                backoff_base: Duration::from_millis(50),
                ..RetryPolicy::default()
            }),
    );
    let task = tokio::spawn(capi_bootstrap::controller::run(
        reconciler,
        std::future::pending(),
    ));
    eventually("the configs' data recorded", || async {
        recorded_data(&configs, "worker-a").await.is_some()
            && recorded_data(&configs, "worker-b").await.is_some()
            && recorded_data(&configs, "worker-d").await.is_some()
    })
    .await;
    assert_eq!(
        data(&secrets, "worker-d").await.as_deref(),
        Some("#cloud-config\n# rendered earlier\n")
    );
    eventually("worker-e's conflict reported", || async {
        configs
            .get("worker-e")
            .await
            .unwrap()
            .status
            .is_some_and(|s| {
                s.data_secret_name.is_none()
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == condition::READY && c.reason == "DataSecretConflict")
            })
    })
    .await;
    assert_eq!(
        data(&secrets, "worker-e").await.as_deref(),
        Some("#cloud-config\n# rendered earlier\n"),
        "another config's Secret is left as it was"
    );
    // While the name is taken, worker-e looks (its status says why) instead of rendering again
    // (and making a join token each time): no data Secret create over many polls.
    let made = renders.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        renders.load(Ordering::SeqCst),
        made,
        "renders while a config's Secret name is taken"
    );
    // worker-b's machine may have booted from the earlier data: it is kept, recorded as the
    // config's, and its token kept valid; the token of the render that was dropped is deleted.
    assert_eq!(
        recorded_data(&configs, "worker-b").await.as_deref(),
        Some("worker-b")
    );
    assert_eq!(
        data(&secrets, "worker-b").await.as_deref(),
        Some("#cloud-config\n# rendered earlier\n")
    );
    let expiration = tokens
        .get("bootstrap-token-abcdef")
        .await
        .unwrap()
        .data
        .unwrap()["expiration"]
        .0
        .clone();
    assert_ne!(
        String::from_utf8(expiration).unwrap(),
        "2000-01-01T00:00:00Z",
        "the earlier render's token is extended"
    );
    assert!(
        data(&secrets, "worker-a")
            .await
            .unwrap()
            .contains("kubeadm join")
    );

    assert_eq!(
        join_tokens(&client).await,
        2,
        "the earlier render's token and worker-a's; none left of worker-b's dropped render"
    );

    // A fresh config is rendered without reading its Secret first: the Secret's create says
    // whether an earlier render made it.
    add_machine(&client, &ns, "worker-c", false).await;
    eventually("worker-c's data recorded", || async {
        recorded_data(&configs, "worker-c").await.is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        worker_c_reads.load(Ordering::SeqCst),
        0,
        "reads of a fresh config's Secret"
    );
    assert!(
        data(&secrets, "worker-c")
            .await
            .unwrap()
            .contains("kubeadm join")
    );
    task.abort();
}

#[tokio::test]
async fn a_kubeconfig_that_does_not_parse_is_a_condition_without_its_content() {
    let (env, ns) = environment().await;
    let client = env.client();
    let clusters = demo_cluster(&client, &ns, false).await;
    add_machine(&client, &ns, "cp-0", true).await;
    let reconciler = KubeadmConfigReconciler::new(
        client.clone(),
        std::sync::Arc::new(BootstrapSettings::default()),
    )
    .options(
        ReconcilerOptions::default()
            .namespace(&ns)
            .retry_policy(RetryPolicy {
                poll: Duration::from_millis(200),
                backoff_base: Duration::from_millis(50),
                ..RetryPolicy::default()
            }),
    );
    let task = tokio::spawn(capi_bootstrap::controller::run(
        reconciler,
        std::future::pending(),
    ));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    eventually("the init machine's data", || async {
        data(&secrets, "cp-0").await.is_some()
    })
    .await;

    // The tenant overwrites the kubeconfig with one that does not parse, key material and all.
    const KEY: &str = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tdGVuYW50LXNlY3JldA==";
    let broken = format!(
        "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    client-key-data: {KEY}\n  \
         [unclosed: {{\n"
    );
    let patch = json!({"data": {"value": ByteString(broken.into_bytes())}});
    secrets
        .patch(
            "demo-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    report_cluster(&clusters, true).await;
    add_machine(&client, &ns, "worker-0", false).await;

    let configs: Api<KubeadmConfig> = Api::namespaced(client.clone(), &ns);
    let status =
        || async { serde_json::to_string(&configs.get("worker-0").await.unwrap().status).unwrap() };
    eventually("a condition naming the kubeconfig Secret", || async {
        status().await.contains("demo-kubeconfig")
    })
    .await;
    let shown = status().await;
    assert!(shown.contains("WaitingForWorkloadCluster"), "{shown}");
    assert!(
        !shown.contains(KEY) && !shown.contains("tenant-secret"),
        "{shown}"
    );
    assert!(
        data(&secrets, "worker-0").await.is_none(),
        "no join without a workload client"
    );
    task.abort();
}

/// The bootstrap token IDs in the workload cluster (here: the same API server).
async fn join_token_ids(client: &Client) -> std::collections::BTreeSet<String> {
    Api::<Secret>::namespaced(client.clone(), "kube-system")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.type_.as_deref() == Some("bootstrap.kubernetes.io/token"))
        .filter_map(|s| {
            s.name_any()
                .strip_prefix("bootstrap-token-")
                .map(str::to_string)
        })
        .collect()
}

#[tokio::test]
async fn a_pools_config_joins_workers_and_its_token_is_rotated_in_the_same_secret() {
    let (env, ns) = environment().await;
    let client = env.client();
    demo_cluster(&client, &ns, true).await;
    let kubeconfig: Secret = serde_json::from_value(json!({
        "metadata": {"name": "demo-kubeconfig"},
        "data": {"value": ByteString(env.control_plane().kubeconfig_yaml().as_bytes().to_vec())}
    }))
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(&PostParams::default(), &kubeconfig)
        .await
        .unwrap();
    let pool: capi_core::api::MachinePool = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
        "metadata": {"name": "workers"},
        "spec": {"clusterName": "demo", "replicas": 3, "template": {"spec": {
            "clusterName": "demo", "version": "v1.31.1",
            "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                "kind": "KubeadmConfig", "name": "workers"}},
            "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev",
                "kind": "InMemoryMachinePool", "name": "workers"}}}}
    }))
    .unwrap();
    let pool = Api::<capi_core::api::MachinePool>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
    let mut config = KubeadmConfig::new("workers", KubeadmConfigSpec::default());
    config.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "MachinePool".into(),
        name: "workers".into(),
        uid: pool.uid().unwrap(),
        controller: Some(true),
        ..OwnerReference::default()
    }]);
    let configs: Api<KubeadmConfig> = Api::namespaced(client.clone(), &ns);
    configs
        .create(&PostParams::default(), &config)
        .await
        .unwrap();

    // A TTL short enough to see two rotations: each once less than half of it is left.
    let settings = BootstrapSettings {
        token_ttl: Duration::from_secs(6),
        extra_files: vec![std::sync::Arc::new(CloudConf)],
        ..BootstrapSettings::default()
    };
    let retry = RetryPolicy {
        poll: Duration::from_millis(200),
        backoff_base: Duration::from_millis(50),
        ..RetryPolicy::default()
    };
    let reconciler = KubeadmConfigReconciler::new(client.clone(), std::sync::Arc::new(settings))
        .options(
            ReconcilerOptions::default()
                .namespace(&ns)
                .retry_policy(retry),
        );
    let task = tokio::spawn(capi_bootstrap::controller::run(
        reconciler,
        std::future::pending(),
    ));

    eventually("the pool's data", || async {
        recorded_data(&configs, "workers").await.as_deref() == Some("workers")
    })
    .await;
    let first = data(&secrets, "workers").await.unwrap();
    assert!(first.contains("kubeadm join"), "{first}");
    assert!(
        first.contains("machine = workers"),
        "provider files see the pool as its machines: {first}"
    );
    let first_secret = secrets.get("workers").await.unwrap();
    let first_token = first_secret.annotations()["bootstrap.cluster.x-k8s.io/token-id"].clone();
    assert!(
        first_secret
            .annotations()
            .contains_key("bootstrap.cluster.x-k8s.io/token-expires")
    );
    assert!(join_token_ids(&client).await.contains(&first_token));

    // Rotated: a new token in the workload cluster, the same Secret rendered again with it.
    let seen = std::sync::Mutex::new(std::collections::BTreeSet::from([first_token.clone()]));
    eventually("two rotations", || async {
        let secret = secrets.get("workers").await.unwrap();
        let id = secret.annotations()["bootstrap.cluster.x-k8s.io/token-id"].clone();
        let mut seen = seen.lock().unwrap();
        seen.insert(id);
        seen.len() >= 3
    })
    .await;
    let rotated = secrets.get("workers").await.unwrap();
    assert_eq!(
        rotated.owner_references()[0].uid,
        configs.get("workers").await.unwrap().uid().unwrap(),
        "still the config's Secret"
    );
    let token = rotated.annotations()["bootstrap.cluster.x-k8s.io/token-id"].clone();
    let value = data(&secrets, "workers").await.unwrap();
    assert!(
        value.contains(&format!("{token}.")),
        "the data carries the new token"
    );
    assert!(!value.contains(&format!("{first_token}.")));
    assert!(join_token_ids(&client).await.contains(&token));
    assert_eq!(
        recorded_data(&configs, "workers").await.as_deref(),
        Some("workers"),
        "the config's status names the same Secret"
    );
    task.abort();
}
