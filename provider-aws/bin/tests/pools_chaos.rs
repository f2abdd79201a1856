//! A chaos run of an `AWSMachinePool`: the `aws-manager` binary in standalone mode (core,
//! kubeadm bootstrap and KubeadmControlPlane controllers beside the provider's, as its generated
//! ServiceAccount) runs the cluster that `capictl generate cluster --infrastructure aws --flavor
//! machinepool` renders — one control-plane machine, the workers one MachinePool over an Auto
//! Scaling group — on moto through the fault-injecting proxy (`common::proxy`), which throttles
//! any call at random, loses the answers of Auto Scaling and launch template writes after moto
//! carried them out, shows a new group or instance in lists only after up to 2 s, and answers as
//! AWS does where moto does not (a replayed `ClientToken`, a second group of a name).
//!
//! The pool grows 1 → 4 → 8, is scaled to 0, and goes with its cluster; in each of those five
//! stages the manager is killed (SIGKILL) and started again right when the group was changed
//! (made, resized, first emptied, deleted), before it could record what it did. A watcher reads
//! moto directly (not through the proxy) every 200 ms all along: never more than one Auto Scaling
//! group (every group ever seen is recorded by name and ARN), never more pending or running
//! instances of the pool, nor a larger desired capacity, than the stage asks for, never a second
//! control-plane instance. Every growth stage ends with every Machine of the pool Running on its
//! own instance. The end: no group, launch template, live instance or bootstrap data secret left
//! in moto, nothing of the cluster's network, no object with a finalizer, no credential in any of
//! the managers' logs or in events — and faults of every kind were injected (the run fails
//! otherwise).
//!
//! The fault draws are seeded: the seed is printed, and `CAPI_RS_POOLS_CHAOS_SEED` fixes it
//! (requests come concurrently, so a seed fixes the sequence of draws, not which request gets
//! which). The manager runs without leader election, so that a restarted one starts at once
//! instead of waiting out its killed predecessor's lease. Needs moto (`CAPI_RS_MOTO_ENDPOINT`)
//! and the envtest binaries.
#![cfg(feature = "real-etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::Filter;
use capi_testing::TestEnv;
use capi_testing::deployed;
use capi_testing::envtest::ControlPlane;
use common::ec2_servers::Ec2Servers;
use common::proxy::{Chaos, FaultProxy, Injected};
use common::{Account, assert_no_credentials};
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Api, Client, ResourceExt};
use provider_aws::pool::POOL_NAME_TAG;
use provider_inmemory::fake_hypervisor::FakeHypervisor;
use provider_inmemory::nodes::NodeRegistrar;
use serde_json::{Value, json};

const CLUSTER: &str = "chaos";
const POOL: &str = "chaos-mp-0";
const SYSTEM_NAMESPACE: &str = "capi-aws-system";
const MANAGER: &str = "capi-aws-manager";
const KEY_PAIR: &str = "capi-rs-pools-chaos";
const KUBERNETES_VERSION: &str = "v1.33.0";
/// The variable fixing the seed of the fault draws.
const SEED_ENV: &str = "CAPI_RS_POOLS_CHAOS_SEED";
/// The share of calls answered with a throttling error.
const THROTTLE_RATE: f64 = 0.05;
/// The share of the Auto Scaling and launch template writes whose answer is lost.
const LOSE_RATE: f64 = 0.3;
/// The longest a new group or instance is missing from lists.
const LAG: Duration = Duration::from_secs(2);
/// The sizes the pool grows through.
const GROWTH: [usize; 3] = [1, 4, 8];
/// How long any one step may take.
const WITHIN: Duration = Duration::from_secs(150);
/// How often the watcher reads moto.
const WATCH_EVERY: Duration = Duration::from_millis(200);

/// A kind: its group, version and name.
type Kind = (&'static str, &'static str, &'static str);

fn api(client: &Client, namespace: &str, (group, version, kind): Kind) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk))
}

const MACHINE_POOL: Kind = ("cluster.x-k8s.io", "v1beta2", "MachinePool");
const MACHINE: Kind = ("cluster.x-k8s.io", "v1beta2", "Machine");
const CLUSTER_KIND: Kind = ("cluster.x-k8s.io", "v1beta2", "Cluster");
/// The kinds the cluster's deletion takes with it.
const OWNED: [Kind; 8] = [
    CLUSTER_KIND,
    MACHINE_POOL,
    MACHINE,
    (
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmControlPlane",
    ),
    ("bootstrap.cluster.x-k8s.io", "v1beta2", "KubeadmConfig"),
    ("infrastructure.capi-rs.dev", "v1alpha1", "AWSCluster"),
    ("infrastructure.capi-rs.dev", "v1alpha1", "AWSMachinePool"),
    ("infrastructure.capi-rs.dev", "v1alpha1", "AWSMachine"),
];
/// The templates, which stay after the cluster (and must not keep a finalizer).
const TEMPLATES: [Kind; 2] = [
    (
        "infrastructure.capi-rs.dev",
        "v1alpha1",
        "AWSMachineTemplate",
    ),
    (
        "bootstrap.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmConfigTemplate",
    ),
];

/// What the watcher saw of moto.
#[derive(Debug, Default)]
struct Seen {
    /// Every Auto Scaling group ever seen, as `<name> <ARN>`.
    groups: BTreeSet<String>,
    /// The most groups seen at once.
    most_groups: usize,
    /// The most pending or running instances of the pool in the current stage.
    peak: usize,
    /// What broke a guarantee, with when.
    violations: Vec<String>,
    /// Looks taken, and those moto did not answer.
    polls: usize,
    failed_polls: usize,
}

/// The watcher: reads moto directly every [`WATCH_EVERY`], checking each look against what the
/// current stage allows.
struct Watch {
    /// The most instances of the pool, and the largest desired capacity, the stage allows.
    allowed: AtomicUsize,
    stop: AtomicBool,
    seen: Mutex<Seen>,
    started: Instant,
}

impl Watch {
    fn new(allowed: usize) -> Arc<Self> {
        Arc::new(Self {
            allowed: AtomicUsize::new(allowed),
            stop: AtomicBool::new(false),
            seen: Mutex::new(Seen::default()),
            started: Instant::now(),
        })
    }

    /// Starts a stage allowing `allowed`; returns the peak of the stage that ends.
    fn stage(&self, allowed: usize) -> usize {
        self.allowed.store(allowed, Ordering::SeqCst);
        std::mem::take(&mut self.seen.lock().unwrap().peak)
    }

    fn violations(&self) -> Vec<String> {
        self.seen.lock().unwrap().violations.clone()
    }

    /// One look at moto: every group, the pool's and the control plane's live instances.
    async fn look(
        &self,
        account: &Account,
        cluster_tag: &str,
        pool_tag: &str,
    ) -> Result<(), String> {
        let groups = account
            .autoscaling()
            .describe_auto_scaling_groups()
            .send()
            .await
            .map_err(|e| e.to_string())?;
        // The cluster's live instances in one listing, told apart by their tags: two listings
        // would count an instance launched between them as the control plane's.
        let instances = live(account, common::census::owned(cluster_tag)).await?;
        let of_pool = |i: &aws_sdk_ec2::types::Instance| {
            i.tags().iter().any(|t| {
                (t.key() == Some(POOL_NAME_TAG) && t.value() == Some(pool_tag))
                    || t.key() == Some("aws:autoscaling:groupName")
            })
        };
        let ids = |pool: bool| -> BTreeSet<String> {
            instances
                .iter()
                .filter(|i| of_pool(i) == pool)
                .filter_map(|i| i.instance_id().map(str::to_string))
                .collect()
        };
        let pool = ids(true);
        let control_plane = ids(false);
        let allowed = self.allowed.load(Ordering::SeqCst);
        let at = format!("{:.1?}", self.started.elapsed());
        let mut seen = self.seen.lock().unwrap();
        seen.polls += 1;
        let groups = groups.auto_scaling_groups();
        seen.most_groups = seen.most_groups.max(groups.len());
        for group in groups {
            seen.groups.insert(format!(
                "{} {}",
                group.auto_scaling_group_name().unwrap_or_default(),
                group.auto_scaling_group_arn().unwrap_or_default()
            ));
            let desired = usize::try_from(group.desired_capacity().unwrap_or_default()).unwrap();
            if desired > allowed {
                seen.violations.push(format!(
                    "{at}: group {:?} wants {desired} instances, the stage allows {allowed}",
                    group.auto_scaling_group_name()
                ));
            }
        }
        if groups.len() > 1 {
            seen.violations.push(format!(
                "{at}: {} Auto Scaling groups at once",
                groups.len()
            ));
        }
        seen.peak = seen.peak.max(pool.len());
        if pool.len() > allowed {
            seen.violations.push(format!(
                "{at}: {} instances of the pool live, the stage allows {allowed}: {pool:?}",
                pool.len()
            ));
        }
        if control_plane.len() > 1 {
            seen.violations.push(format!(
                "{at}: {} control-plane instances live: {control_plane:?}",
                control_plane.len()
            ));
        }
        Ok(())
    }

    /// Looks at moto until told to stop.
    async fn run(self: Arc<Self>, account: Account, cluster_tag: String, pool_tag: String) {
        while !self.stop.load(Ordering::SeqCst) {
            if self.look(&account, &cluster_tag, &pool_tag).await.is_err() {
                self.seen.lock().unwrap().failed_polls += 1;
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
    }
}

/// The pending and running instances `filter` selects, read from moto directly.
async fn live(
    account: &Account,
    filter: Filter,
) -> Result<Vec<aws_sdk_ec2::types::Instance>, String> {
    let answer = account
        .ec2()
        .describe_instances()
        .filters(filter)
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
        .cloned()
        .collect())
}

fn tag_filter(key: &str, value: &str) -> Filter {
    Filter::builder()
        .name(format!("tag:{key}"))
        .values(value)
        .build()
}

/// The test's world: the management API server, the manager (killed and started again), the
/// proxy in front of moto, the watcher.
struct World {
    env: TestEnv,
    client: Client,
    namespace: String,
    account: Account,
    proxy: FaultProxy,
    watch: Arc<Watch>,
    manager: tokio::process::Child,
    /// Each manager's log, the current one last.
    logs: Vec<PathBuf>,
    dir: PathBuf,
    token: String,
    started: Instant,
}

impl World {
    /// Starts a manager, logging to a file of its own.
    fn spawn(&mut self) {
        let log = self
            .dir
            .join(format!("manager-{}.log", self.logs.len() + 1));
        println!("the manager's log: {}", log.display());
        self.manager = start_manager(&self.env, &self.token, &self.dir, &log, &self.proxy.url);
        self.logs.push(log);
    }

    /// Kills the manager with SIGKILL and starts another.
    async fn kill_and_restart(&mut self, when: &str) {
        self.manager.start_kill().unwrap();
        let _ = self.manager.wait().await;
        println!(
            "{:>6.1?}: the manager killed ({when}), another started",
            self.started.elapsed()
        );
        self.spawn();
    }

    fn log(&self) -> &Path {
        self.logs
            .last()
            .map(PathBuf::as_path)
            .unwrap_or(Path::new(""))
    }

    fn cluster_tag(&self) -> String {
        format!("{}/{CLUSTER}", self.namespace)
    }

    fn pool_tag(&self) -> String {
        format!("{}/{POOL}", self.namespace)
    }

    fn injected(&self) -> Injected {
        let faults = self.proxy.faults.lock().unwrap();
        faults
            .chaos
            .as_ref()
            .map(|c| c.injected)
            .unwrap_or_default()
    }

    /// Waits until `done` answers `Ok`, polling every `every`; fails with `what`, the last state
    /// and the manager's warnings — or at once when the manager exits or the watcher saw a
    /// guarantee broken.
    async fn until<T, F, Fut>(&mut self, what: &str, every: Duration, mut done: F) -> T
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.manager.try_wait() {
                panic!(
                    "aws-manager exited ({status}):\n{}",
                    deployed::tail(self.log(), 60)
                );
            }
            let violations = self.watch.violations();
            assert!(violations.is_empty(), "{what}: {violations:#?}");
            match done(self.client.clone()).await {
                Ok(value) => {
                    println!(
                        "{:>6.1?}: {what}, after {:.1?}",
                        self.started.elapsed(),
                        started.elapsed()
                    );
                    return value;
                }
                Err(state) if started.elapsed() > WITHIN => panic!(
                    "{what}: not within {WITHIN:?}: {state}\n--- aws-manager's last warnings\n{}",
                    deployed::warnings(self.log())
                ),
                Err(_) => tokio::time::sleep(every).await,
            }
        }
    }

    /// Kills and restarts the manager as soon as the pool's group, seen in moto directly,
    /// satisfies `changed` (its desired capacity; `None`: no group): right after the manager's
    /// write landed, before it could record what it did.
    async fn kill_when(&mut self, when: &str, changed: impl Fn(Option<usize>) -> bool) {
        let account = self.account.clone();
        self.until(when, Duration::from_millis(50), |_| {
            let account = account.clone();
            let changed = &changed;
            async move {
                let desired = group_desired(&account).await?;
                changed(desired)
                    .then_some(())
                    .ok_or(format!("desired capacity {desired:?}"))
            }
        })
        .await;
        self.kill_and_restart(when).await;
    }

    /// Waits until the pool is settled at `n` instances ([`pool_at`]).
    async fn pool_converged(&mut self, n: usize) {
        let account = self.account.clone();
        let namespace = self.namespace.clone();
        let pool_tag = self.pool_tag();
        self.until(
            &format!("the pool at {n} Running machines"),
            Duration::from_millis(500),
            |client| {
                pool_at(
                    client,
                    account.clone(),
                    namespace.clone(),
                    pool_tag.clone(),
                    n,
                )
            },
        )
        .await;
    }
}

/// `Ok` when the pool holds `n` pending or running instances, each the provider ID of a Running
/// `Machine` of the pool and in the MachinePool's provider ID list, the group asks for `n`, and
/// the MachinePool counts `n` ready; else what differs.
async fn pool_at(
    client: Client,
    account: Account,
    namespace: String,
    pool_tag: String,
    n: usize,
) -> Result<(), String> {
    let ids = pool_instances(&account, &pool_tag).await?;
    let desired = group_desired(&account).await?;
    let pool = api(&client, &namespace, MACHINE_POOL)
        .get(POOL)
        .await
        .map_err(|e| e.to_string())?;
    let members =
        ListParams::default().labels(&format!("{}={POOL}", capi_core::labels::MACHINE_POOL_NAME));
    let machines = api(&client, &namespace, MACHINE)
        .list(&members)
        .await
        .map_err(|e| e.to_string())?
        .items;
    let running: BTreeSet<String> = machines
        .iter()
        .filter(|m| {
            m.data["status"]["phase"] == "Running" && m.metadata.deletion_timestamp.is_none()
        })
        .filter_map(|m| m.data["spec"]["providerID"].as_str().map(str::to_string))
        .collect();
    let listed: BTreeSet<String> = pool.data["spec"]["providerIDList"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let count = |field: &str| pool.data["status"][field].as_u64().unwrap_or(0);
    let settled = ids.len() == n
        && desired == Some(n)
        && machines.len() == n
        && running == ids
        && listed == ids
        && count("replicas") == n as u64
        && count("readyReplicas") == n as u64;
    settled.then_some(()).ok_or(format!(
        "instances {ids:?}, desired {desired:?}\nproviderIDList {listed:?}\nRunning machines \
         {running:?} of {}\npool status {:#}",
        machines.len(),
        pool.data["status"]
    ))
}

/// The desired capacity of the account's Auto Scaling group (`None`: there is none), read from
/// moto directly.
async fn group_desired(account: &Account) -> Result<Option<usize>, String> {
    let groups = account
        .autoscaling()
        .describe_auto_scaling_groups()
        .send()
        .await
        .map_err(|e| e.to_string())?;
    Ok(groups
        .auto_scaling_groups()
        .first()
        .and_then(|g| g.desired_capacity())
        .and_then(|d| usize::try_from(d).ok()))
}

/// The provider IDs (`aws:///<zone>/<id>`) of the pool's pending or running instances, read
/// from moto directly.
async fn pool_instances(account: &Account, pool_tag: &str) -> Result<BTreeSet<String>, String> {
    let instances = live(account, tag_filter(POOL_NAME_TAG, pool_tag)).await?;
    Ok(instances
        .iter()
        .filter_map(|i| {
            let zone = i.placement()?.availability_zone()?;
            Some(format!("aws:///{zone}/{}", i.instance_id()?))
        })
        .collect())
}

/// The manager as deployed, in standalone mode, AWS at `aws`.
fn start_manager(
    env: &TestEnv,
    token: &str,
    dir: &Path,
    log: &Path,
    aws: &str,
) -> tokio::process::Child {
    deployed::spawn(
        Path::new(env!("CARGO_BIN_EXE_aws-manager")),
        env.control_plane(),
        token,
        dir,
        log,
        &[
            "--with-bootstrap",
            "--with-core",
            "--with-control-plane",
            "--aws-endpoint-url",
            aws,
        ],
    )
    .unwrap()
}

/// The cluster as `capictl generate cluster chaos --infrastructure aws --flavor machinepool`
/// renders it with CAPA's variables (the pool of one instance), its `AWSCluster` using a Secret
/// of the account's credentials.
fn cluster_manifests(namespace: &str, account: &Account) -> Vec<DynamicObject> {
    use capi_cli::generate;
    let extra = [
        ("AWS_REGION", common::REGION),
        ("AWS_SSH_KEY_NAME", KEY_PAIR),
        ("AWS_CONTROL_PLANE_MACHINE_TYPE", "t3.large"),
        ("AWS_NODE_MACHINE_TYPE", "t3.medium"),
        ("AWS_IMAGE_LOOKUP_ORG", account.id.as_str()),
        ("AWS_VPC_CIDR", "10.79.0.0/16"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let inputs = generate::Inputs {
        cluster_name: CLUSTER.into(),
        namespace: Some(namespace.into()),
        kubernetes_version: Some(KUBERNETES_VERSION.into()),
        control_plane_machine_count: Some(1),
        worker_machine_count: Some(GROWTH[0] as u32),
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
        "metadata": {"name": format!("{CLUSTER}-aws-credentials"), "namespace": namespace},
        "stringData": {"AccessKeyID": account.access_key_id,
                       "SecretAccessKey": account.secret_access_key,
                       "SessionToken": account.session_token},
    });
    objects.insert(0, serde_json::from_value(secret).unwrap());
    objects
}

/// One stage of the run, for the report.
struct Stage {
    name: String,
    allowed: usize,
    peak: usize,
    faults: Injected,
    took: Duration,
}

/// The faults injected between `before` and `now`.
fn since(now: Injected, before: Injected) -> Injected {
    Injected {
        throttled: now.throttled - before.throttled,
        lost_answers: now.lost_answers - before.lost_answers,
        lost_creates: now.lost_creates - before.lost_creates,
        hidden_groups: now.hidden_groups - before.hidden_groups,
        hidden_instances: now.hidden_instances - before.hidden_instances,
    }
}

/// The seed of the fault draws: `CAPI_RS_POOLS_CHAOS_SEED`, else a random one.
fn seed() -> u64 {
    match std::env::var(SEED_ENV) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{SEED_ENV}={value} is not a number")),
        Err(_) => fastrand::u64(..),
    }
}

/// `Ok` when no object of the kinds the cluster's deletion takes with it is left in
/// `namespace`; else those left.
async fn objects_gone(client: Client, namespace: String) -> Result<(), String> {
    let mut left = Vec::new();
    for kind in OWNED {
        let items = api(&client, &namespace, kind)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        left.extend(items.iter().map(|o| format!("{} {}", kind.2, o.name_any())));
    }
    left.is_empty()
        .then_some(())
        .ok_or(format!("left: {left:?}"))
}

/// Prints each stage: what it allowed, the most instances seen, the faults injected in it, how
/// long it took; and every group the watcher saw.
fn print_report(stages: &[Stage], seen: &Seen) {
    println!(
        "\n{:<12} {:>7} {:>5} {:>9} {:>5} {:>13} {:>16} {:>7}",
        "stage",
        "allowed",
        "peak",
        "throttled",
        "lost",
        "hidden groups",
        "hidden instances",
        "took"
    );
    for stage in stages {
        println!(
            "{:<12} {:>7} {:>5} {:>9} {:>5} {:>13} {:>16} {:>6.1?}",
            stage.name,
            stage.allowed,
            stage.peak,
            stage.faults.throttled,
            stage.faults.lost_answers,
            stage.faults.hidden_groups,
            stage.faults.hidden_instances,
            stage.took
        );
    }
    println!(
        "groups ever seen: {:?}; {} looks at moto ({} failed)",
        seen.groups, seen.polls, seen.failed_polls
    );
}

/// Fails unless moto holds no group, launch template, instance that is not terminated,
/// bootstrap data secret, or network resource of the cluster tagged `cluster_tag`.
async fn assert_nothing_left_in_moto(account: &Account, cluster_tag: &str) {
    let ec2 = account.ec2();
    let groups = account
        .autoscaling()
        .describe_auto_scaling_groups()
        .send()
        .await
        .unwrap();
    assert!(
        groups.auto_scaling_groups().is_empty(),
        "groups left: {:?}",
        groups.auto_scaling_groups()
    );
    let templates = ec2.describe_launch_templates().send().await.unwrap();
    assert!(
        templates.launch_templates().is_empty(),
        "launch templates left: {:?}",
        templates.launch_templates()
    );
    let instances = ec2.describe_instances().send().await.unwrap();
    let live: Vec<(&str, &str)> = instances
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| {
            let state = i.state()?.name()?.as_str();
            (state != "terminated").then_some((i.instance_id()?, state))
        })
        .collect();
    assert!(live.is_empty(), "instances not terminated: {live:?}");
    let counted = common::census::census(&ec2, &account.elb(), cluster_tag)
        .await
        .unwrap();
    assert!(
        counted.iter().all(|(_, n)| *n == 0),
        "left in moto: {counted:?}"
    );
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
}

/// Fails if an object that outlives the cluster in `namespace` (a template, a Secret) keeps a
/// finalizer.
async fn assert_no_finalizer_left(client: &Client, namespace: &str) {
    let mut held = Vec::new();
    for kind in TEMPLATES {
        for object in api(client, namespace, kind)
            .list(&ListParams::default())
            .await
            .unwrap()
        {
            if !object.finalizers().is_empty() {
                held.push(format!(
                    "{} {}: {:?}",
                    kind.2,
                    object.name_any(),
                    object.finalizers()
                ));
            }
        }
    }
    for secret in Api::<Secret>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        if !secret.finalizers().is_empty() {
            held.push(format!(
                "Secret {}: {:?}",
                secret.name_any(),
                secret.finalizers()
            ));
        }
    }
    assert!(held.is_empty(), "finalizers left: {held:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_pool_through_faults_and_kills_has_one_group_and_leaves_nothing() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("provider_inmemory=warn")
        .try_init();
    let seed = seed();
    println!(
        "seed {seed} ({SEED_ENV}={seed} replays its draws): {:.0} % of calls throttled, {:.0} % \
         of Auto Scaling and launch template writes losing their answer, new groups and \
         instances missing from lists for up to {LAG:?}",
        THROTTLE_RATE * 100.0,
        LOSE_RATE * 100.0
    );
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

    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(capi_control_plane::api::crds());
    crds.extend(provider_aws::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let client = env.client();
    let namespace = env.namespace().await.unwrap();
    let rbac = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/aws/rbac.yaml"),
    )
    .unwrap();
    let token = deployed::service_account_token(&client, &rbac, SYSTEM_NAMESPACE, MANAGER)
        .await
        .unwrap();
    // Kept after the test (in the target directory) to read when it fails.
    let dir = tempfile::Builder::new()
        .prefix("aws-pools-chaos-")
        .disable_cleanup(true)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();

    // AWS as the manager sees it: moto behind the proxy, answering as AWS does, and faulty.
    let proxy = FaultProxy::start().await;
    {
        let mut faults = proxy.faults.lock().unwrap();
        faults.honour_client_tokens = true;
        faults.honour_group_names = true;
        faults.chaos = Some(Chaos::new(seed, THROTTLE_RATE, LOSE_RATE, LAG));
    }
    let first_log = dir.path().join("manager-1.log");
    println!("the manager's log: {}", first_log.display());
    let manager = start_manager(&env, &token, dir.path(), &first_log, &proxy.url);
    let watch = Watch::new(GROWTH[0]);
    let mut world = World {
        client: client.clone(),
        namespace: namespace.clone(),
        account: account.clone(),
        proxy,
        watch: Arc::clone(&watch),
        manager,
        logs: vec![first_log],
        dir: dir.path().to_path_buf(),
        token,
        started: Instant::now(),
        env,
    };
    let watcher = tokio::spawn(Arc::clone(&watch).run(
        account.clone(),
        world.cluster_tag(),
        world.pool_tag(),
    ));

    // What would run in the instances: kubelets, static pods, the control plane's etcd member.
    let workload = ControlPlane::start().await.unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{CLUSTER}-kubeconfig"),
                     "labels": {capi_core::labels::CLUSTER_NAME: CLUSTER}},
        "stringData": {"value": workload.kubeconfig_yaml()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &namespace)
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    let etcd_binary = capi_testing::envtest::Assets::locate().unwrap().etcd;
    let servers = Ec2Servers {
        ec2: account.ec2(),
        secrets: account.secrets_manager(),
        cluster: world.cluster_tag(),
    };
    let (hosts, etcd) = FakeHypervisor::new(servers, world.cluster_tag(), &etcd_binary);
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

    // Growth: each stage asked for, the manager killed as soon as the group was made or resized
    // for it, and every machine of the pool Running on its own instance in the end.
    let pools = api(&client, &namespace, MACHINE_POOL);
    let mut stages = Vec::new();
    let mut stage_start = (Instant::now(), world.injected());
    let mut end_stage = |world: &World, name: String, allowed: usize, next_allowed: usize| {
        let (started, before) = stage_start;
        let injected = world.injected();
        stages.push(Stage {
            name,
            allowed,
            peak: world.watch.stage(next_allowed),
            faults: since(injected, before),
            took: started.elapsed(),
        });
        stage_start = (Instant::now(), injected);
    };
    for (i, &n) in GROWTH.iter().enumerate() {
        if i > 0 {
            pools
                .patch(
                    POOL,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": n}})),
                )
                .await
                .unwrap();
        }
        world
            .kill_when(&format!("the group asking for {n}"), |desired| {
                desired == Some(n)
            })
            .await;
        world.pool_converged(n).await;
        let next = GROWTH.get(i + 1).copied().unwrap_or(n);
        end_stage(&world, format!("grow to {n}"), n, next);
    }

    // Scaled to zero: the manager killed once the first instance left.
    let most = GROWTH[GROWTH.len() - 1];
    pools
        .patch(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    world
        .kill_when("the group's first instance removed", |desired| {
            desired.is_some_and(|d| d < most)
        })
        .await;
    world.pool_converged(0).await;
    end_stage(&world, "scale to 0".into(), most, 0);

    // Deleted with its cluster: the manager killed once the group is gone.
    api(&client, &namespace, CLUSTER_KIND)
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    world
        .kill_when("the group deleted", |desired| desired.is_none())
        .await;
    let ns = namespace.clone();
    world
        .until(
            "the cluster's objects gone",
            Duration::from_millis(500),
            |client| objects_gone(client, ns.clone()),
        )
        .await;
    end_stage(&world, "delete".into(), 0, 0);
    watch.stop.store(true, Ordering::SeqCst);
    watcher.await.unwrap();
    let total = world.started.elapsed();

    let injected = world.injected();
    let seen = std::mem::take(&mut *watch.seen.lock().unwrap());
    print_report(&stages, &seen);
    println!(
        "seed {seed}: {} kills; injected {injected:?}; {} second groups refused by name; \
         {total:.1?} in all",
        world.logs.len() - 1,
        world.proxy.faults.lock().unwrap().group_names_refused,
    );

    // What held throughout, and that it was put to the test.
    assert!(seen.violations.is_empty(), "{:#?}", seen.violations);
    assert_eq!(seen.groups.len(), 1, "one group, ever: {:?}", seen.groups);
    assert_eq!(seen.most_groups, 1);
    assert!(
        seen.polls >= 100,
        "the watcher looked at moto {} times",
        seen.polls
    );
    for (kind, count) in [
        ("throttled answers", injected.throttled),
        ("lost answers", injected.lost_answers),
        ("lost group creations", injected.lost_creates),
        ("hidden groups", injected.hidden_groups),
        ("hidden instances", injected.hidden_instances),
    ] {
        assert!(
            count > 0,
            "no {kind} were injected: the run proved nothing about them"
        );
    }

    assert_nothing_left_in_moto(&account, &world.cluster_tag()).await;
    assert_no_finalizer_left(&client, &namespace).await;

    // No credential in events or in any manager's logs.
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_no_credentials(
        "the events",
        &serde_json::to_string(&events.items).unwrap(),
        &account,
    );
    world.manager.start_kill().unwrap();
    let _ = world.manager.wait().await;
    kubelets.abort();
    drop(etcd);
    let mut pool_reconciled = false;
    for log in &world.logs {
        let text = std::fs::read_to_string(log).unwrap();
        pool_reconciled |= text.contains(r#""target":"provider_aws::pool""#);
        assert_no_credentials(&format!("{}", log.display()), &text, &account);
    }
    assert!(pool_reconciled, "the logs cover the pool actuator");
}
