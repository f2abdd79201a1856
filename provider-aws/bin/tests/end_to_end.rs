//! The AWS provider end to end: the `aws-manager` binary, running as its generated
//! ServiceAccount (`config/aws/rbac.yaml`) in standalone mode with the core, kubeadm bootstrap
//! and KubeadmControlPlane controllers, reconciles the cluster that `capictl generate cluster
//! --infrastructure aws --flavor static-credentials` renders with CAPA's variables — a
//! KubeadmControlPlane of 3 machines behind a network load balancer and 2 workers, in a new VPC
//! across three zones — on `moto_server`, through `--aws-endpoint-url`. It scales the control
//! plane to 1 and the workers to 1, deletes the cluster, and checks that moto holds nothing of it:
//! no instance, load balancer, target group, security group, subnet, gateway, elastic IP, route
//! table or VPC. No credential shows in the manager's logs (JSON, debug level for every crate),
//! in events or in status.
//!
//! The account is the test's own (temporary credentials of a role in a fresh moto account: moto
//! maps their access key to it), prepared as a CAPA user's is: the IAM instance profiles of the
//! template, an AMI in CAPA's name format for the Kubernetes version, an SSH key pair.
//!
//! moto runs no VM; what would run in each instance is simulated from the user data EC2 keeps
//! for it (`common::ec2_servers`): kubelets registering nodes in a second API server and serving
//! port-forward, kubeadm's static pods and `kubeadm-config` upload, and a real etcd member per
//! control-plane instance with TLS from the etcd CA in its user data — which the
//! KubeadmControlPlane reaches through the workload API server to add and remove members. The
//! workload cluster's kubeconfig Secret points at that API server (the load balancer's DNS name
//! that moto makes up resolves nowhere). moto ignores `ClientToken`, is never behind and never
//! throttles: those are the unit tests' and the fault-injecting proxy's (`provider-aws/tests`).
//!
//! Needs moto (`CAPI_RS_MOTO_ENDPOINT`; `cargo xtask test` starts it) and the envtest binaries.
#![cfg(feature = "real-etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capi_control_plane::api::KubeadmControlPlane;
use capi_core::api::{Cluster, Machine, MachineDeployment};
use capi_testing::TestEnv;
use capi_testing::deployed;
use capi_testing::envtest::ControlPlane;
use common::census::{census, live_instances};
use common::ec2_servers::Ec2Servers;
use common::{Account, assert_no_credentials};
use k8s_openapi::api::core::v1::{Event, Node, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Api, Client, ResourceExt};
use provider_aws::api::{AWSCluster, AWSMachine};
use provider_inmemory::fake_hypervisor::FakeHypervisor;
use provider_inmemory::nodes::NodeRegistrar;
use serde_json::json;

const CLUSTER: &str = "e2e";
const SYSTEM_NAMESPACE: &str = "capi-aws-system";
const MANAGER: &str = "capi-aws-manager";
const KEY_PAIR: &str = "capi-rs-e2e";
const KUBERNETES_VERSION: &str = "v1.33.0";
/// Long enough for the slowest step (three control-plane machines joining etcd one after the
/// other) on 2 cores.
const WITHIN: Duration = Duration::from_secs(300);

struct World {
    client: Client,
    namespace: String,
    manager: tokio::process::Child,
    manager_log: std::path::PathBuf,
}

impl World {
    /// Waits until `done` answers `Ok`, failing with `what`, the last state and the manager's
    /// log.
    async fn until<T, F, Fut>(&mut self, what: &str, mut done: F) -> T
    where
        F: FnMut() -> Fut,
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
            match done().await {
                Ok(value) => {
                    println!("{what}: after {:.1?}", started.elapsed());
                    return value;
                }
                Err(state) if started.elapsed() > WITHIN => panic!(
                    "{what}: not within {WITHIN:?}: {state}\n{}\n--- aws-manager's last warnings\n{}",
                    self.conditions().await,
                    deployed::warnings(&self.manager_log)
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// The conditions that are not `True` of the cluster's objects, for a failure message.
    async fn conditions(&self) -> String {
        let mut out = String::new();
        for (group, kind) in [
            ("cluster.x-k8s.io", "Cluster"),
            ("infrastructure.capi-rs.dev", "AWSCluster"),
            ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane"),
            ("cluster.x-k8s.io", "Machine"),
            ("infrastructure.capi-rs.dev", "AWSMachine"),
        ] {
            let version = if kind.starts_with("AWS") {
                "v1alpha1"
            } else {
                "v1beta2"
            };
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &self.namespace, &resource);
            for object in api
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                let conditions = object.data["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                // Those of negative polarity (Paused, Deleting, …) are fine when False.
                let fine = |c: &serde_json::Value| {
                    c["status"] == "True"
                        || (c["status"] == "False"
                            && [
                                "Paused",
                                "Deleting",
                                "RollingOut",
                                "ScalingDown",
                                "ScalingUp",
                                "Remediating",
                            ]
                            .iter()
                            .any(|t| c["type"] == *t))
                };
                for c in conditions.iter().filter(|c| !fine(c)) {
                    out.push_str(&format!(
                        "{kind} {}: {} {} {} {}\n",
                        object.name_any(),
                        c["type"],
                        c["status"],
                        c["reason"],
                        c["message"]
                    ));
                }
            }
        }
        out
    }

    fn tag(&self) -> String {
        format!("{}/{CLUSTER}", self.namespace)
    }

    fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

/// `aws:///<zone>/<instance>` → `<instance>`.
fn instance_id(machine: &Machine) -> String {
    machine
        .spec
        .provider_id
        .as_deref()
        .and_then(|p| p.strip_prefix("aws:///"))
        .and_then(|p| p.split_once('/'))
        .map(|(_, id)| id.to_string())
        .unwrap_or_else(|| panic!("{} has no AWS provider ID", machine.name_any()))
}

/// The instances registered in the account's (one) target group.
async fn targets(elb: &aws_sdk_elasticloadbalancingv2::Client) -> Result<BTreeSet<String>, String> {
    let groups = elb
        .describe_target_groups()
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let [group] = groups.target_groups() else {
        return Err(format!("target groups: {:?}", groups.target_groups()));
    };
    let health = elb
        .describe_target_health()
        .target_group_arn(group.target_group_arn().unwrap_or_default())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    Ok(health
        .target_health_descriptions()
        .iter()
        .filter_map(|d| d.target()?.id().map(str::to_string))
        .collect())
}

/// The cluster as `capictl generate cluster e2e --infrastructure aws --flavor
/// static-credentials` renders it with CAPA's variables and the account's credentials.
fn cluster_manifests(namespace: &str, account: &Account) -> Vec<kube::api::DynamicObject> {
    use capi_cli::generate;
    let extra = [
        ("AWS_REGION", common::REGION),
        ("AWS_SSH_KEY_NAME", KEY_PAIR),
        ("AWS_CONTROL_PLANE_MACHINE_TYPE", "t3.large"),
        ("AWS_NODE_MACHINE_TYPE", "t3.medium"),
        ("AWS_ACCESS_KEY_ID", account.access_key_id.as_str()),
        ("AWS_SECRET_ACCESS_KEY", account.secret_access_key.as_str()),
        ("AWS_SESSION_TOKEN", account.session_token.as_str()),
        ("AWS_IMAGE_LOOKUP_ORG", account.id.as_str()),
        ("AWS_VPC_CIDR", "10.77.0.0/16"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let inputs = generate::Inputs {
        cluster_name: CLUSTER.into(),
        namespace: Some(namespace.into()),
        kubernetes_version: Some(KUBERNETES_VERSION.into()),
        control_plane_machine_count: Some(3),
        worker_machine_count: Some(2),
        extra,
    };
    let text = generate::render(
        generate::built_in("aws", Some("static-credentials")).unwrap(),
        &inputs,
        |_| None,
    )
    .unwrap();
    capi_testing::manifest::parse(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_builds_scales_and_tears_down_a_kubeadm_cluster_on_moto() {
    // What the simulated instances (kubelets, etcd members) report, shown with the test's output.
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("provider_inmemory=info")
        .try_init();
    // The account, as a CAPA user's is before `clusterctl generate cluster`.
    let account = Account::fresh().await;
    for profile in [
        "control-plane.cluster-api-provider-aws.sigs.k8s.io",
        "nodes.cluster-api-provider-aws.sigs.k8s.io",
    ] {
        account.instance_profile(profile).await;
    }
    let image = account
        .image(&format!(
            "capa-ami-ubuntu-24.04-{KUBERNETES_VERSION}-1764200000"
        ))
        .await;
    account.key_pair(KEY_PAIR).await;
    let (ec2, elb) = (account.ec2(), account.elb());

    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(capi_control_plane::api::crds());
    crds.extend(provider_aws::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let client = env.client();
    let namespace = env.namespace().await.unwrap();

    // The manager process, as deployed: its ServiceAccount, leader election, JSON logs at debug
    // level for every crate, AWS at moto.
    let rbac = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/aws/rbac.yaml"),
    )
    .unwrap();
    let token = deployed::service_account_token(&client, &rbac, SYSTEM_NAMESPACE, MANAGER)
        .await
        .unwrap();
    // Kept after the test (in the target directory) to read when it fails.
    let dir = tempfile::Builder::new()
        .prefix("aws-end-to-end-")
        .disable_cleanup(true)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let manager_log = dir.path().join("manager.log");
    println!("the manager's log: {}", manager_log.display());
    let manager = deployed::spawn(
        Path::new(env!("CARGO_BIN_EXE_aws-manager")),
        env.control_plane(),
        &token,
        dir.path(),
        &manager_log,
        &[
            "--with-bootstrap",
            "--with-core",
            "--with-control-plane",
            "--leader-elect",
            &format!("{SYSTEM_NAMESPACE}/{MANAGER}"),
            "--aws-endpoint-url",
            &common::endpoint(),
        ],
    )
    .unwrap();
    let mut world = World {
        client: client.clone(),
        namespace: namespace.clone(),
        manager,
        manager_log: manager_log.clone(),
    };

    // What would run in the instances: kubelets, static pods, etcd members.
    let workload = ControlPlane::start().await.unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{CLUSTER}-kubeconfig"),
                     "labels": {capi_core::labels::CLUSTER_NAME: CLUSTER}},
        "stringData": {"value": workload.kubeconfig_yaml()},
    }))
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    secrets.create(&Default::default(), &secret).await.unwrap();
    let etcd_binary = capi_testing::envtest::Assets::locate().unwrap().etcd;
    let servers = Ec2Servers {
        ec2: ec2.clone(),
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
        &cluster_manifests(&namespace, &account),
        Some(&namespace),
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));

    // Up: 3 control-plane machines and 2 workers Running, one instance each, the control plane
    // healthy (its etcd of 3 members seen through the workload cluster).
    let machines = world.machines();
    let (control_plane, workers) = world
        .until("3 control-plane machines and 2 workers Running", || {
            deployed::running_machines(&machines, 3, 2)
        })
        .await;
    let kcps: Api<KubeadmControlPlane> = Api::namespaced(client.clone(), &namespace);
    let kcp_name = format!("{CLUSTER}-control-plane");
    world
        .until(
            "the KubeadmControlPlane's etcd healthy with 3 members",
            || async {
                let kcp = kcps.get(&kcp_name).await.map_err(|e| e.to_string())?;
                let status = kcp.status.clone().unwrap_or_default();
                let etcd = capi_core::condition::get(&status.conditions, "EtcdClusterHealthy");
                match (status.ready_replicas, etcd) {
                    (Some(3), Some(c)) if c.status == "True" => Ok(()),
                    _ => Err(format!("{status:?}")),
                }
            },
        )
        .await;
    assert_eq!(
        etcd.client_urls(&world.tag()).len(),
        3,
        "3 etcd members run"
    );
    let instances = live_instances(&ec2, &world.tag()).await.unwrap();
    let expected: BTreeSet<String> = control_plane
        .iter()
        .chain(&workers)
        .map(instance_id)
        .collect();
    assert_eq!(instances, expected, "one instance per machine, no other");
    let nodes = Api::<Node>::all(workload.client().await.unwrap())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(nodes.items.len(), 5, "a node per instance");
    // Every instance fetched its bootstrap data from Secrets Manager (the key material never sat
    // in user data) and deleted it: nothing is left there once the nodes are up.
    let left = account
        .secrets_manager()
        .list_secrets()
        .send()
        .await
        .unwrap()
        .secret_list()
        .len();
    assert_eq!(
        left, 0,
        "bootstrap data secrets left after every node registered"
    );

    // The control plane is behind the load balancer: its instances are the target group's, the
    // cluster's endpoint is the load balancer's DNS name, and the AMI is the one looked up.
    let planes: BTreeSet<String> = control_plane.iter().map(instance_id).collect();
    world
        .until(
            "the control plane's instances in the target group",
            || async {
                let registered = targets(&elb).await?;
                (registered == planes)
                    .then_some(())
                    .ok_or(format!("targets {registered:?}"))
            },
        )
        .await;
    let balancers = elb.describe_load_balancers().send().await.unwrap();
    let [balancer] = balancers.load_balancers() else {
        panic!("load balancers: {:?}", balancers.load_balancers());
    };
    let cluster = Api::<Cluster>::namespaced(client.clone(), &namespace)
        .get(CLUSTER)
        .await
        .unwrap();
    assert_eq!(
        cluster
            .spec
            .control_plane_endpoint
            .as_ref()
            .map(|e| (e.host.as_str(), e.port)),
        Some((balancer.dns_name().unwrap_or_default(), 6443))
    );
    let described = ec2
        .describe_instances()
        .set_instance_ids(Some(instances.iter().cloned().collect()))
        .send()
        .await
        .unwrap();
    for instance in described.reservations().iter().flat_map(|r| r.instances()) {
        assert_eq!(instance.image_id(), Some(image.as_str()));
        assert_eq!(instance.key_name(), Some(KEY_PAIR));
    }

    // Nothing a user sees in the objects' status holds a credential.
    let mut shown = serde_json::to_string(&cluster.status).unwrap();
    for machine in control_plane.iter().chain(&workers) {
        shown.push_str(&serde_json::to_string(&machine.status).unwrap());
    }
    for object in Api::<AWSMachine>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        let status = object.status.clone().unwrap_or_default();
        assert!(status.instance_id.is_some(), "{status:?}");
        shown.push_str(&serde_json::to_string(&object.status).unwrap());
    }
    let aws_cluster = Api::<AWSCluster>::namespaced(client.clone(), &namespace)
        .get(CLUSTER)
        .await
        .unwrap();
    shown.push_str(&serde_json::to_string(&aws_cluster.status).unwrap());
    shown.push_str(&serde_json::to_string(&kcps.get(&kcp_name).await.unwrap().status).unwrap());
    assert_no_credentials("the objects' status", &shown, &account);

    // Scale down: the control plane to 1 (its etcd members removed, its instances out of the
    // target group), the workers to 1, naming the worker to go.
    let doomed = workers[0].name_any();
    machines
        .patch(
            &doomed,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                capi_core::labels::DELETE_MACHINE: ""}}})),
        )
        .await
        .unwrap();
    Api::<MachineDeployment>::namespaced(client.clone(), &namespace)
        .patch(
            &format!("{CLUSTER}-md-0"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    kcps.patch(
        &kcp_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    let (control_plane, workers) = world
        .until("1 control-plane machine and 1 worker left", || {
            deployed::running_machines(&machines, 1, 1)
        })
        .await;
    assert!(workers.iter().all(|m| m.name_any() != doomed));
    let left: BTreeSet<String> = control_plane
        .iter()
        .chain(&workers)
        .map(instance_id)
        .collect();
    let tag = world.tag();
    world
        .until("the removed machines' instances terminated", || async {
            let live = live_instances(&ec2, &tag).await?;
            (live == left).then_some(()).ok_or(format!("live {live:?}"))
        })
        .await;
    let plane: BTreeSet<String> = control_plane.iter().map(instance_id).collect();
    world
        .until(
            "only the remaining control plane in the target group",
            || async {
                let registered = targets(&elb).await?;
                (registered == plane)
                    .then_some(())
                    .ok_or(format!("targets {registered:?}"))
            },
        )
        .await;

    // Delete the cluster: nothing of it is left in moto.
    Api::<Cluster>::namespaced(client.clone(), &namespace)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    world
        .until("the cluster's objects gone", || async {
            let clusters = Api::<AWSCluster>::namespaced(client.clone(), &namespace)
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let machines = machines
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let cluster = Api::<Cluster>::namespaced(client.clone(), &namespace)
                .get_opt(CLUSTER)
                .await
                .map_err(|e| e.to_string())?;
            (clusters.items.is_empty() && machines.items.is_empty() && cluster.is_none())
                .then_some(())
                .ok_or(format!(
                    "{} AWSClusters, {} machines, cluster {}",
                    clusters.items.len(),
                    machines.items.len(),
                    cluster.is_some()
                ))
        })
        .await;
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

    // Events (everything the manager recorded) and the manager's own logs hold no credential.
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(!events.items.is_empty(), "the manager records events");
    assert_no_credentials(
        "the events",
        &serde_json::to_string(&events.items).unwrap(),
        &account,
    );
    world.manager.start_kill().unwrap();
    let _ = world.manager.wait().await;
    kubelets.abort();
    let logs = std::fs::read_to_string(&manager_log).unwrap();
    assert!(
        logs.contains(&namespace) && logs.contains(r#""target":"provider_aws::machine""#),
        "the logs cover the provider's reconciles"
    );
    assert_no_credentials("the manager's logs", &logs, &account);
}
