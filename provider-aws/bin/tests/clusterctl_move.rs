//! The real clusterctl v1.14.2 moves a running AWS cluster, its credentials included, from one
//! management cluster to another without touching the cloud.
//!
//! Both management clusters are initialised by `clusterctl init --infrastructure capirs-aws`
//! from this provider's release (`capi_cli::manifests::release`), beside upstream's core, kubeadm
//! bootstrap and control plane providers and cert-manager; their Deployments run as local
//! processes (`capi_testing::pods`), the provider's as `aws-manager` against moto. The cluster is
//! what `clusterctl generate cluster --infrastructure capirs-aws` renders, its `AWSCluster`
//! using an `AWSClusterStaticIdentity` whose access key sits in a Secret of the provider's
//! namespace, as CAPA's users keep theirs: the case CAPZ #6643 lost in a move. Upstream's
//! managers bring it to `Available` on moto, with the instances simulated as in `end_to_end.rs`
//! (kubelets registering nodes in a workload API server, a real etcd member per control-plane
//! instance).
//!
//! `clusterctl move` pauses the cluster, copies every object (the identity and its Secret,
//! which the identity owns once used, with it), deletes the cluster's objects on the source,
//! and resumes the cluster on the target, whose controllers rebuild the status a move does not
//! carry. The test checks each of those, and that moto holds exactly the same instances (in any
//! state), load balancers, networks and addresses before and after.
//!
//! Needs moto (`CAPI_RS_MOTO_ENDPOINT`), the envtest binaries and the upstream peer with
//! clusterctl (`cargo xtask upstream install`).
#![cfg(feature = "real-etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use capi_testing::clusterctl::{
    InfrastructureRelease, KUBEADM_CLUSTER_KINDS, Management, by_name, has_condition,
    upstream_images,
};
use capi_testing::envtest::ControlPlane;
use capi_testing::upstream::UpstreamAssets;
use common::Account;
use common::census::resources;
use common::ec2_servers::Ec2Servers;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use provider_inmemory::fake_hypervisor::FakeHypervisor;
use provider_inmemory::nodes::NodeRegistrar;
use serde_json::{Value, json};

/// The provider's name in clusterctl.
const PROVIDER: &str = "capirs-aws";
/// The namespace its components install into, where static identities' Secrets are.
const PROVIDER_NAMESPACE: &str = "capi-aws-system";
/// The cluster, and its namespace.
const CLUSTER: &str = "moved";
/// The static identity the cluster uses, and its Secret.
const IDENTITY: &str = "moved-team";
const IDENTITY_SECRET: &str = "moved-team-credentials";
const KEY_PAIR: &str = "capi-rs-move";
const KUBERNETES_VERSION: &str = "v1.33.0";
/// How long a step may take on 2 busy cores (a control-plane machine joining etcd included).
const WITHIN: Duration = Duration::from_secs(240);

const GROUP: &str = provider_aws::api::GROUP;
const VERSION: &str = "v1alpha1";

/// The provider's kinds a cluster is made of, `(group, version, kind)`.
const PROVIDER_KINDS: &[(&str, &str, &str)] = &[
    (GROUP, VERSION, "AWSCluster"),
    (GROUP, VERSION, "AWSMachine"),
    (GROUP, VERSION, "AWSMachineTemplate"),
];

/// Every kind a cluster is made of.
fn cluster_kinds() -> Vec<(&'static str, &'static str, &'static str)> {
    [KUBEADM_CLUSTER_KINDS, PROVIDER_KINDS].concat()
}
const MACHINE: (&str, &str, &str) = ("cluster.x-k8s.io", "v1beta2", "Machine");
const AWS_MACHINE: (&str, &str, &str) = (GROUP, VERSION, "AWSMachine");
const STATIC_IDENTITY: (&str, &str, &str) = (GROUP, VERSION, "AWSClusterStaticIdentity");

/// A management cluster initialised with this provider's release from `repository`, its
/// manager using moto, clusterctl's template variables those of `account`.
async fn management(repository: &Path, account: &Account) -> Management {
    let assets = UpstreamAssets::locate().expect("cargo xtask upstream install");
    let release = InfrastructureRelease {
        name: capi_cli::manifests::clusterctl_name("aws"),
        repository: repository.to_path_buf(),
    };
    let moto = common::endpoint();
    let images = upstream_images(&assets).with(
        "ghcr.io/capi-rs/aws-manager",
        env!("CARGO_BIN_EXE_aws-manager"),
        move |pod| {
            vec![
                format!("--http-addr=0.0.0.0:{}", pod.port("http").unwrap_or(0)),
                format!(
                    "--diagnostics-address=127.0.0.1:{}",
                    pod.port("metrics").unwrap_or(0)
                ),
                format!("--aws-endpoint-url={moto}"),
            ]
        },
    );
    let variables = [
        ("AWS_REGION", common::REGION),
        ("AWS_SSH_KEY_NAME", KEY_PAIR),
        ("AWS_CONTROL_PLANE_MACHINE_TYPE", "t3.large"),
        ("AWS_NODE_MACHINE_TYPE", "t3.medium"),
        ("AWS_IMAGE_LOOKUP_ORG", account.id.as_str()),
    ];
    let management = Management::start(&assets, &[release], images, &variables)
        .await
        .unwrap();
    management.init(PROVIDER).await.unwrap();
    management
}

/// The cluster as `clusterctl generate cluster` renders it with CAPA's variables, its
/// `AWSCluster` using the static identity.
async fn cluster_objects(management: &Management) -> Vec<Value> {
    let mut objects = management
        .generate_cluster(
            CLUSTER,
            &[
                "--infrastructure",
                PROVIDER,
                "--kubernetes-version",
                KUBERNETES_VERSION,
                "--control-plane-machine-count",
                "1",
                "--worker-machine-count",
                "1",
            ],
        )
        .await
        .unwrap();
    for object in &mut objects {
        if object["kind"] == "AWSCluster" {
            object["spec"]["identityRef"] =
                json!({"kind": "AWSClusterStaticIdentity", "name": IDENTITY});
        }
    }
    objects
}

/// What moto holds of the account: every instance in any state (one created and terminated
/// would show), and every resource of the cluster.
async fn moto_inventory(account: &Account) -> (BTreeSet<String>, BTreeSet<String>) {
    let ec2 = account.ec2();
    let described = ec2.describe_instances().send().await.unwrap();
    let instances = described
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| {
            format!(
                "{} {}",
                i.instance_id().unwrap_or_default(),
                i.state()
                    .and_then(|s| s.name())
                    .map(|n| n.as_str())
                    .unwrap_or_default()
            )
        })
        .collect();
    let cluster = resources(&ec2, &account.elb(), &format!("{CLUSTER}/{CLUSTER}"))
        .await
        .unwrap();
    (instances, cluster)
}

/// What a move keeps of the machines: their names and provider IDs (UIDs are new on the
/// target).
async fn machine_identities(management: &Management) -> (Vec<String>, Vec<String>) {
    (
        management
            .provider_ids(MACHINE, CLUSTER, by_name)
            .await
            .unwrap(),
        management
            .provider_ids(AWS_MACHINE, CLUSTER, by_name)
            .await
            .unwrap(),
    )
}

/// The static identity's Secret on `management`: its data, and the UIDs of its owners.
async fn identity_secret(management: &Management) -> Option<(Value, Vec<String>)> {
    let secret = Api::<Secret>::namespaced(management.client.clone(), PROVIDER_NAMESPACE)
        .get_opt(IDENTITY_SECRET)
        .await
        .unwrap()?;
    let owners = secret
        .owner_references()
        .iter()
        .map(|o| o.uid.clone())
        .collect();
    Some((serde_json::to_value(&secret.data).unwrap(), owners))
}

/// The status of every AWS object of the cluster on `management`, for a failure's report.
async fn statuses(management: &Management) -> String {
    let mut out = String::new();
    for kind in ["AWSCluster", "AWSMachine"] {
        let listed = management
            .api((GROUP, VERSION, kind), Some(CLUSTER))
            .list(&ListParams::default())
            .await;
        for object in listed.map(|l| l.items).unwrap_or_default() {
            out.push_str(&format!(
                "{kind} {}: {}\n",
                object.name_any(),
                object.data["status"]
            ));
        }
    }
    out
}

/// Whether `object` reports itself provisioned and `Ready`.
fn ready(object: &DynamicObject) -> bool {
    object.data["status"]["initialization"]["provisioned"] == Value::Bool(true)
        && has_condition(object, "Ready")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_move_carries_an_aws_cluster_and_its_identity_to_another_management_cluster_untouched()
 {
    // The account, as a CAPA user's is before `clusterctl generate cluster`.
    let account = Account::fresh().await;
    for profile in [
        "control-plane.cluster-api-provider-aws.sigs.k8s.io",
        "nodes.cluster-api-provider-aws.sigs.k8s.io",
    ] {
        account.instance_profile(profile).await;
    }
    account
        .image(&format!(
            "capa-ami-ubuntu-24.04-{KUBERNETES_VERSION}-1764200000"
        ))
        .await;
    account.key_pair(KEY_PAIR).await;

    // Two management clusters initialised alike from the provider's release.
    let releases = tempfile::tempdir().unwrap();
    capi_cli::manifests::release("aws", &"0.1.0".parse().unwrap())
        .unwrap()
        .write(releases.path())
        .unwrap();
    let source = management(releases.path(), &account).await;
    let target = management(releases.path(), &account).await;

    // The team's credentials, as an operator sets them up: a Secret in the provider's namespace
    // and a static identity admitting the cluster's namespace.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": IDENTITY_SECRET, "namespace": PROVIDER_NAMESPACE},
        "stringData": {
            "AccessKeyID": account.access_key_id,
            "SecretAccessKey": account.secret_access_key,
            "SessionToken": account.session_token,
        },
    }))
    .unwrap();
    Api::<Secret>::namespaced(source.client.clone(), PROVIDER_NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let identity: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "AWSClusterStaticIdentity",
        "metadata": {"name": IDENTITY},
        "spec": {"secretRef": IDENTITY_SECRET, "allowedNamespaces": {"list": [CLUSTER]}},
    }))
    .unwrap();
    source
        .api(STATIC_IDENTITY, None)
        .create(&PostParams::default(), &identity)
        .await
        .unwrap();

    // The cluster, its kubeconfig the workload API server's (upstream's control plane keeps a
    // kubeconfig Secret it finds), and what would run in its instances.
    source.create_namespace(CLUSTER).await.unwrap();
    let workload = ControlPlane::start().await.unwrap();
    let kubeconfig: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{CLUSTER}-kubeconfig"),
                     "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
        "stringData": {"value": workload.kubeconfig_yaml()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(source.client.clone(), CLUSTER)
        .create(&PostParams::default(), &kubeconfig)
        .await
        .unwrap();
    let tag = format!("{CLUSTER}/{CLUSTER}");
    let servers = Ec2Servers {
        ec2: account.ec2(),
        secrets: account.secrets_manager(),
        cluster: tag.clone(),
    };
    let etcd_binary = capi_testing::envtest::Assets::locate().unwrap().etcd;
    let (hosts, etcd) = FakeHypervisor::new(servers, tag.clone(), &etcd_binary);
    let kubelets = tokio::spawn(
        NodeRegistrar::new(workload.client().await.unwrap(), Arc::new(hosts))
            .with_kubelets(etcd.port_forward_targets())
            .run(Duration::from_millis(500)),
    );
    for object in cluster_objects(&source).await {
        source.apply_strictly(&object).await.unwrap();
    }
    source
        .eventually(
            "the control plane initialized and both machines with their nodes",
            WITHIN,
            || source.ready_to_move(CLUSTER, CLUSTER, 2),
        )
        .await
        .unwrap();
    source
        .eventually("the Cluster Available", WITHIN, || {
            source.available(CLUSTER, CLUSTER)
        })
        .await
        .unwrap();

    // Once used, the identity owns its Secret: that is what makes the move carry it.
    let source_identity = source
        .api(STATIC_IDENTITY, None)
        .get(IDENTITY)
        .await
        .unwrap();
    let (credentials, owners) = identity_secret(&source).await.unwrap();
    assert_eq!(owners, [source_identity.uid().unwrap()]);

    let objects = source.objects(CLUSTER, &cluster_kinds()).await.unwrap();
    for kind in ["AWSCluster", "AWSMachine", "AWSMachineTemplate"] {
        assert!(
            objects.iter().any(|o| o.starts_with(&format!("{kind} "))),
            "{kind} in {objects:?}"
        );
    }
    let machines = machine_identities(&source).await;
    let before = moto_inventory(&account).await;
    // (The account also holds the terminated instance its AMI was made from.)
    assert_eq!(
        before.0.iter().filter(|i| i.ends_with(" running")).count(),
        2,
        "one instance per machine in the account: {before:?}"
    );
    assert!(
        before.1.iter().any(|r| r.starts_with("vpc/")),
        "the cluster's network in moto: {before:?}"
    );

    // clusterctl pauses the cluster on the source before it moves anything of it.
    let moved = source
        .move_cluster(&target, CLUSTER, CLUSTER)
        .await
        .unwrap();
    assert!(
        moved.paused_on_source,
        "the Cluster was paused on the source before it was deleted there"
    );

    // The source holds nothing of the cluster; the target holds every object, resumed, with the
    // same machines.
    assert_eq!(
        source.objects(CLUSTER, &cluster_kinds()).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        target.objects(CLUSTER, &cluster_kinds()).await.unwrap(),
        objects
    );
    let moved = moved.cluster;
    assert_ne!(moved.data["spec"]["paused"], Value::Bool(true), "{moved:?}");
    assert_eq!(machine_identities(&target).await, machines);

    // The identity and its Secret moved with the cluster (a global object and what it owns are
    // copied, and kept on the source, as upstream does): the same spec and credentials, the
    // Secret owned by the target's identity.
    let target_identity = target
        .api(STATIC_IDENTITY, None)
        .get(IDENTITY)
        .await
        .unwrap();
    assert_eq!(target_identity.data["spec"], source_identity.data["spec"]);
    let (moved_credentials, moved_owners) = identity_secret(&target)
        .await
        .expect("the identity's Secret on the target");
    assert_eq!(moved_credentials, credentials);
    assert_eq!(moved_owners, [target_identity.uid().unwrap()]);
    assert!(identity_secret(&source).await.is_some());

    // Status, which the move does not carry, is the target's controllers' again: the provider's
    // objects provisioned and ready (with the moved credentials: the only ones the target
    // has), upstream's machines with their nodes, the cluster Available.
    let reported = target
        .eventually(
            "the target's provider reports its cluster and machines ready",
            WITHIN,
            || async {
                let clusters = target
                    .api((GROUP, VERSION, "AWSCluster"), Some(CLUSTER))
                    .list(&ListParams::default())
                    .await;
                let machines = target
                    .api(AWS_MACHINE, Some(CLUSTER))
                    .list(&ListParams::default())
                    .await;
                clusters.is_ok_and(|l| l.items.len() == 1 && l.items.iter().all(ready))
                    && machines.is_ok_and(|l| l.items.len() == 2 && l.items.iter().all(ready))
            },
        )
        .await;
    if let Err(e) = reported {
        panic!("{e}\n{}", statuses(&target).await);
    }
    target
        .eventually("the target's Machines have their nodes", WITHIN, || {
            target.ready_to_move(CLUSTER, CLUSTER, 2)
        })
        .await
        .unwrap();
    target
        .eventually("the Cluster Available on the target", WITHIN, || {
            target.available(CLUSTER, CLUSTER)
        })
        .await
        .unwrap();

    // No instance, load balancer, network or address was created, deleted or duplicated.
    assert_eq!(moto_inventory(&account).await, before);
    kubelets.abort();
}
