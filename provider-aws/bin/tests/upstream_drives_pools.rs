//! Upstream drives an `AWSMachinePool` on moto: upstream Cluster API v1.14.2's core manager
//! (its MachinePool controller), kubeadm bootstrap (one `KubeadmConfig` for the pool, its join
//! token rotated) and kubeadm control plane managers, with the `aws-manager` binary running this
//! provider's reconcilers alone as its generated ServiceAccount, bring up the cluster that
//! `capictl generate cluster --infrastructure aws --flavor machinepool` renders (a control plane
//! of one machine, the workers one MachinePool over an Auto Scaling group), then scale the pool
//! 1 → 5 → 2 and roll it to another instance type — upstream making a `Machine` for every
//! instance from the provider's MachinePool Machines (`AWSMachine`s), every node registered by
//! provider ID — and delete the cluster, after which moto holds nothing of it: no instance,
//! group, launch template, bootstrap data secret or network.
//!
//! moto runs no VM: the instances boot from the user data EC2 keeps for them, simulated as in
//! `end_to_end.rs` (`common::ec2_servers`), with a real etcd member for the control plane.
//! Needs moto, the envtest binaries and the upstream peer (`cargo xtask test` provides them).
#![cfg(feature = "real-etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::Filter;
use capi_testing::deployed;
use capi_testing::envtest::ControlPlane;
use capi_testing::upstream::{CORE_BOOTSTRAP_CONTROL_PLANE, UpstreamAssets, UpstreamPeer};
use common::Account;
use common::census::{census, live_instances};
use common::ec2_servers::Ec2Servers;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Api, Client};
use provider_inmemory::fake_hypervisor::FakeHypervisor;
use provider_inmemory::nodes::NodeRegistrar;
use serde_json::{Value, json};

const NAMESPACE: &str = "upstream-pools";
const CLUSTER: &str = "pooled";
const POOL: &str = "pooled-mp-0";
const SYSTEM_NAMESPACE: &str = "capi-aws-system";
const MANAGER: &str = "capi-aws-manager";
const KEY_PAIR: &str = "capi-rs-pools";
const KUBERNETES_VERSION: &str = "v1.33.0";
const WITHIN: Duration = Duration::from_secs(300);

fn api(client: &Client, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::namespaced_with(client.clone(), NAMESPACE, &ApiResource::from_gvk(&gvk))
}

struct World {
    client: Client,
    peer: UpstreamPeer,
    manager: tokio::process::Child,
    manager_log: std::path::PathBuf,
    account: Account,
}

impl World {
    /// Waits until `done` answers `Ok`, failing with `what`, the last state and both stacks'
    /// logs.
    async fn until<T, F, Fut>(&mut self, what: &str, mut done: F) -> T
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.manager.try_wait() {
                panic!(
                    "aws-manager exited ({status}):\n{}",
                    deployed::tail(&self.manager_log, 60)
                );
            }
            match done(self.client.clone()).await {
                Ok(value) => {
                    println!("{what}: after {:.1?}", started.elapsed());
                    return value;
                }
                Err(state) if started.elapsed() > WITHIN => panic!(
                    "{what}: not within {WITHIN:?}: {state}\n--- aws-manager's last warnings\n{}\n\
                     --- upstream\n{}",
                    deployed::warnings(&self.manager_log),
                    self.peer.log_tails()
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    fn tag(&self) -> String {
        format!("{NAMESPACE}/{CLUSTER}")
    }

    /// The provider IDs of the pool's live instances in moto.
    async fn pool_ids(&self) -> Vec<String> {
        let instances = Probe(self.account.clone()).pool_instances().await.unwrap();
        instances.into_iter().map(|(id, _)| id).collect()
    }

    /// Upstream's MachinePool controller and this provider agree on `n` instances of
    /// `instance_type`: each has a Running `Machine` upstream made for it, the pool's provider ID
    /// list is theirs, and upstream counts them ready.
    async fn pool_converged(&mut self, n: usize, instance_type: &'static str) {
        let account = self.account.clone();
        self.until(
            &format!("the pool at {n} instances of {instance_type}"),
            |client| {
                let probe = Probe(account.clone());
                async move {
                    let probe = probe.pool_instances().await?;
                    let pool = api(&client, "cluster.x-k8s.io", "v1beta2", "MachinePool")
                        .get(POOL)
                        .await
                        .map_err(|e| e.to_string())?;
                    let machines = api(&client, "cluster.x-k8s.io", "v1beta2", "Machine")
                        .list(
                            &ListParams::default()
                                .labels(&format!("cluster.x-k8s.io/pool-name={POOL}")),
                        )
                        .await
                        .map_err(|e| e.to_string())?;
                    let running: BTreeSet<String> = machines
                        .items
                        .iter()
                        .filter(|m| {
                            m.data["status"]["phase"] == "Running"
                                && m.metadata.deletion_timestamp.is_none()
                        })
                        .filter_map(|m| m.data["spec"]["providerID"].as_str().map(str::to_string))
                        .collect();
                    let ids: BTreeSet<String> = probe.iter().map(|(id, _)| id.clone()).collect();
                    let listed: BTreeSet<String> = pool.data["spec"]["providerIDList"]
                        .as_array()
                        .map(|l| {
                            l.iter()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default();
                    let settled = probe.len() == n
                        && probe.iter().all(|(_, t)| t == instance_type)
                        && listed == ids
                        && running == ids
                        && machines.items.len() == n
                        && pool.data["status"]["readyReplicas"] == json!(n)
                        && pool.data["status"]["phase"] == "Running";
                    settled.then_some(()).ok_or(format!(
                        "instances {probe:?}\nproviderIDList {listed:?}\nrunning machines \
                         {running:?} of {}\npool status {:#}",
                        machines.items.len(),
                        pool.data["status"]
                    ))
                }
            },
        )
        .await;
    }
}

/// What moto holds of the pool, seen with the account alone (for closures that cannot borrow
/// the world).
struct Probe(Account);

impl Probe {
    /// The names of the account's Auto Scaling groups.
    async fn groups(&self) -> Vec<String> {
        let answer = self
            .0
            .autoscaling()
            .describe_auto_scaling_groups()
            .send()
            .await
            .unwrap();
        answer
            .auto_scaling_groups()
            .iter()
            .filter_map(|g| g.auto_scaling_group_name().map(str::to_string))
            .collect()
    }

    /// The pool's live instances, by provider ID, with their instance types.
    async fn pool_instances(&self) -> Result<Vec<(String, String)>, String> {
        let answer = self
            .0
            .ec2()
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("tag:MachinePoolName")
                    .values(format!("{NAMESPACE}/{POOL}"))
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .values("pending")
                    .values("running")
                    .build(),
            )
            .send()
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(|i| {
                let zone = i.placement()?.availability_zone()?;
                Some((
                    format!("aws:///{zone}/{}", i.instance_id()?),
                    i.instance_type()?.as_str().to_string(),
                ))
            })
            .collect())
    }
}

/// The cluster as `capictl generate cluster pooled --infrastructure aws --flavor machinepool`
/// renders it with CAPA's variables, its `AWSCluster` using a Secret of the account's
/// credentials (as the static-credentials flavor does).
fn cluster_manifests(account: &Account) -> Vec<DynamicObject> {
    use capi_cli::generate;
    let extra = [
        ("AWS_REGION", common::REGION),
        ("AWS_SSH_KEY_NAME", KEY_PAIR),
        ("AWS_CONTROL_PLANE_MACHINE_TYPE", "t3.large"),
        ("AWS_NODE_MACHINE_TYPE", "t3.medium"),
        ("AWS_IMAGE_LOOKUP_ORG", account.id.as_str()),
        ("AWS_VPC_CIDR", "10.78.0.0/16"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let inputs = generate::Inputs {
        cluster_name: CLUSTER.into(),
        namespace: Some(NAMESPACE.into()),
        kubernetes_version: Some(KUBERNETES_VERSION.into()),
        control_plane_machine_count: Some(1),
        worker_machine_count: Some(1),
        extra,
    };
    let text = generate::render(
        generate::built_in("aws", Some("machinepool")).unwrap(),
        &inputs,
        |_| None,
    )
    .unwrap();
    let mut objects = capi_testing::manifest::parse(&text).unwrap();
    for object in &mut objects {
        if object.types.as_ref().map(|t| t.kind.as_str()) == Some("AWSCluster") {
            object.data["spec"]["identityRef"] =
                json!({"kind": "Secret", "name": format!("{CLUSTER}-aws-credentials")});
        }
    }
    let secret: Value = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{CLUSTER}-aws-credentials"), "namespace": NAMESPACE},
        "stringData": {"AccessKeyID": account.access_key_id,
                       "SecretAccessKey": account.secret_access_key,
                       "SessionToken": account.session_token},
    });
    objects.insert(0, serde_json::from_value(secret).unwrap());
    objects
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_managers_drive_an_aws_machine_pool_on_moto() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("provider_inmemory=info")
        .try_init();
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

    // Upstream's managers on a management API server, and this provider's CRDs beside theirs.
    let assets = UpstreamAssets::locate().unwrap_or_else(|e| panic!("{e}"));
    let management = ControlPlane::start().await.unwrap();
    let peer = UpstreamPeer::start_components(&management, &assets, &CORE_BOOTSTRAP_CONTROL_PLANE)
        .await
        .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));
    let client = management.client().await.unwrap();
    capi_testing::install_crds(&client, &provider_aws::api::crds())
        .await
        .unwrap();
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&Default::default(), &namespace)
        .await
        .unwrap();

    // This workspace's part: the aws-manager with the provider's reconcilers alone, as its
    // generated ServiceAccount.
    let rbac = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/aws/rbac.yaml"),
    )
    .unwrap();
    let token = deployed::service_account_token(&client, &rbac, SYSTEM_NAMESPACE, MANAGER)
        .await
        .unwrap();
    let dir = tempfile::Builder::new()
        .prefix("aws-upstream-pools-")
        .disable_cleanup(true)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let manager_log = dir.path().join("manager.log");
    println!("the manager's log: {}", manager_log.display());
    let manager = deployed::spawn(
        Path::new(env!("CARGO_BIN_EXE_aws-manager")),
        &management,
        &token,
        dir.path(),
        &manager_log,
        &["--aws-endpoint-url", &common::endpoint()],
    )
    .unwrap();
    let mut world = World {
        client: client.clone(),
        peer,
        manager,
        manager_log,
        account: account.clone(),
    };

    // What would run in the instances: kubelets, static pods, the control plane's etcd member.
    let workload = ControlPlane::start().await.unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{CLUSTER}-kubeconfig"), "namespace": NAMESPACE,
                     "labels": {capi_core::labels::CLUSTER_NAME: CLUSTER}},
        "stringData": {"value": workload.kubeconfig_yaml()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    let etcd_binary = capi_testing::envtest::Assets::locate().unwrap().etcd;
    let servers = Ec2Servers {
        ec2: account.ec2(),
        secrets: account.secrets_manager(),
        cluster: world.tag(),
    };
    let (hosts, etcd) = FakeHypervisor::new(servers, world.tag(), &etcd_binary);
    let kubelets = tokio::spawn(
        NodeRegistrar::new(workload.client().await.unwrap(), Arc::new(hosts))
            .with_kubelets(etcd.port_forward_targets())
            .run(Duration::from_millis(500)),
    );

    capi_cli::apply::apply(
        &client,
        &cluster_manifests(&account),
        Some(NAMESPACE),
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));

    // Up: the pool's one instance Running as upstream's Machine, then 5, then 2.
    world.pool_converged(1, "t3.medium").await;
    let pools = api(&client, "cluster.x-k8s.io", "v1beta2", "MachinePool");
    for replicas in [5, 2] {
        pools
            .patch(
                POOL,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
        world.pool_converged(replicas, "t3.medium").await;
    }
    let probe = Probe(account.clone());
    let groups = probe.groups().await;
    assert_eq!(groups.len(), 1, "one group for the pool: {groups:?}");

    // A new instance type rolls every instance, in the same Auto Scaling group.
    let before = world.pool_ids().await;
    api(
        &client,
        "infrastructure.capi-rs.dev",
        "v1alpha1",
        "AWSMachinePool",
    )
    .patch(
        POOL,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"awsLaunchTemplate": {"instanceType": "t3.large"}}})),
    )
    .await
    .unwrap();
    world.pool_converged(2, "t3.large").await;
    assert_eq!(probe.groups().await, groups, "the same group throughout");
    let after = world.pool_ids().await;
    assert!(
        before.iter().all(|id| !after.contains(id)),
        "every instance was replaced: {before:?} → {after:?}"
    );

    // Deleted with its cluster: nothing of it is left in moto.
    api(&client, "cluster.x-k8s.io", "v1beta2", "Cluster")
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    world
        .until("the cluster's objects gone", |client| async move {
            let mut left = Vec::new();
            for (group, version, kind) in [
                ("cluster.x-k8s.io", "v1beta2", "Cluster"),
                ("cluster.x-k8s.io", "v1beta2", "MachinePool"),
                ("cluster.x-k8s.io", "v1beta2", "Machine"),
                ("infrastructure.capi-rs.dev", "v1alpha1", "AWSMachinePool"),
                ("infrastructure.capi-rs.dev", "v1alpha1", "AWSMachine"),
                ("infrastructure.capi-rs.dev", "v1alpha1", "AWSCluster"),
            ] {
                let items = api(&client, group, version, kind)
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items;
                if !items.is_empty() {
                    left.push(format!("{} {kind}", items.len()));
                }
            }
            left.is_empty()
                .then_some(())
                .ok_or(format!("left: {left:?}"))
        })
        .await;
    let (ec2, elb) = (account.ec2(), account.elb());
    assert_eq!(
        live_instances(&ec2, &world.tag()).await.unwrap(),
        BTreeSet::new(),
        "no instance left"
    );
    let counted = census(&ec2, &elb, &world.tag()).await.unwrap();
    assert!(
        counted.iter().all(|(_, n)| *n == 0),
        "left in moto: {counted:?}"
    );
    let templates = ec2.describe_launch_templates().send().await.unwrap();
    assert!(
        templates.launch_templates().is_empty(),
        "launch templates left: {:?}",
        templates.launch_templates()
    );
    let groups = probe.groups().await;
    assert!(groups.is_empty(), "groups left: {groups:?}");
    let secrets = account
        .secrets_manager()
        .list_secrets()
        .send()
        .await
        .unwrap();
    assert!(
        secrets.secret_list().is_empty(),
        "bootstrap data secrets left: {:?}",
        secrets.secret_list()
    );
    world.manager.start_kill().unwrap();
    let _ = world.manager.wait().await;
    kubelets.abort();
    drop(etcd);
}
