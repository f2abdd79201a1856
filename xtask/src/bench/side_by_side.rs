//! One scenario, run by both stacks ([`stack`](super::stack)) on the same machine in the same
//! run, one after the other on a fresh control plane each — capi-rs, upstream, capi-rs,
//! upstream… for as many rounds as asked — and compared.
//!
//! A round: the documents of every cluster are rendered (and capi-rs's `<cluster>-kubeconfig`
//! Secrets written) and the stack has stopped writing (3 s without a write) before the clock
//! starts; then the driver creates them, 32 clusters in flight, and follows Machines and Clusters
//! with one watch each until every Machine is Running and every Cluster Available (and, when the
//! shape asks, until each workers' owner — MachineDeployment or MachinePool — counts every worker
//! in `status.readyReplicas`). Measured: these times; the management API server's request
//! counters by verb and resource, 409s apart; CPU seconds and peak RSS of the controllers and of
//! every process of the stack; a timeline (every 2 s: machines Running, clusters Available,
//! requests so far); then every Cluster is deleted and the time until no Cluster and no Machine
//! is left.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use super::Options;
use super::audit;
use super::floor::{self, Floor, FloorEnd};
use super::measure::{self, Scrape, Settle, is_write, scrape, total};
use super::one_cluster::{Idle, measure_idle};
use super::stack::{Boot, Running, Stack, StackUsage, Workers};
use crate::command::step;

/// How many clusters the driver creates at once.
const DRIVER_CONCURRENCY: usize = 32;
/// How often the timeline is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// How long without a write counts as settled (the in-memory world has no periodic writes).
const SETTLE_QUIET: Duration = Duration::from_secs(5);
/// How long without a write counts as started.
const STARTUP_QUIET: Duration = Duration::from_secs(3);
/// A manager still writing this long after convergence never settles.
const SETTLE_LIMIT: Duration = Duration::from_secs(300);

/// What a scenario builds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub(crate) clusters: u32,
    /// Workers of each cluster (each also has one control-plane machine).
    pub(crate) workers: u32,
    /// What runs each cluster's workers.
    pub(crate) workers_in: Workers,
    /// Whether convergence also waits for each cluster's workers' owner to count every worker
    /// in `status.readyReplicas` (a Running Machine's node is ready before its owner's status
    /// says so).
    pub(crate) owner_ready: bool,
    pub(crate) boot: Boot,
}

impl Shape {
    pub(crate) fn machines(&self) -> u32 {
        self.clusters * (1 + self.workers)
    }

    fn cluster_name(&self, index: u32) -> String {
        if self.clusters == 1 {
            "scale".to_string()
        } else {
            format!("c{index:05}")
        }
    }
}

/// What capi-rs's first round measures beyond the figures both stacks get.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Extras {
    /// The writes after convergence until quiet, and the provider status checked against the
    /// cloud.
    pub(crate) settle: bool,
    /// Idle requests and CPU for this long after settling (0: not at all).
    pub(crate) idle_seconds: u64,
    /// The floor program to run after the teardown, on the same API server.
    pub(crate) floor: Option<FloorProgram>,
}

/// Which floor program a scenario is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloorProgram {
    /// [`floor::run`]: the machines of one cluster to Running.
    Machines,
    /// [`floor::clusters::run`]: single-node clusters to Available.
    Clusters,
}

/// One stack's figures at one point in time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub(crate) seconds: f64,
    pub(crate) machines_running: usize,
    pub(crate) clusters_available: usize,
    /// Requests to the management API server since the clock started (409s included, the API
    /// server's own upkeep not).
    pub(crate) requests: f64,
    /// The controllers' resident memory at that moment (MiB; `VmRSS`, summed over the stack's
    /// controller processes), so that a peak can be placed in the run.
    pub(crate) controllers_rss_mib: f64,
}

/// One round of one stack.
pub(crate) struct Round {
    pub(crate) stack: Stack,
    pub(crate) index: usize,
    /// What ran the workers.
    pub(crate) workers_in: Workers,
    pub(crate) driver_seconds: f64,
    pub(crate) running_seconds: f64,
    pub(crate) available_seconds: f64,
    /// When every workers' owner counted all its workers ready (only when the shape asks).
    pub(crate) owner_ready_seconds: Option<f64>,
    pub(crate) create: Scrape,
    /// CPU during the create (from the first create until converged); peak RSS at convergence.
    pub(crate) create_usage: StackUsage,
    pub(crate) timeline: Vec<Sample>,
    pub(crate) settle: Option<Settle>,
    pub(crate) idle: Option<Idle>,
    pub(crate) teardown_seconds: f64,
    pub(crate) teardown: Scrape,
    /// CPU from start to the end of the teardown; peak RSS over the whole round.
    pub(crate) total_usage: StackUsage,
    pub(crate) floor: Option<Floor>,
    /// capi-rs: instances (and scale sets) the simulated cloud still held after the teardown.
    pub(crate) instances_left: Option<usize>,
    /// With `--audit`: one cluster's requests during the create ([`audit::one_cluster`]).
    pub(crate) audit: Option<Value>,
    /// When the round ran out of time (`--time-limit`): how far it got. The times of a phase it
    /// did not finish are then the time it was stopped at, a lower bound.
    pub(crate) stopped: Option<Stopped>,
}

/// How far a round got when its phase ran out of time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stopped {
    /// `create` (machines Running and clusters Available at the stop) or `teardown` (machines
    /// and clusters left at the stop).
    pub(crate) phase: &'static str,
    /// Seconds into the phase.
    pub(crate) seconds: f64,
    pub(crate) machines: usize,
    pub(crate) machines_wanted: usize,
    pub(crate) clusters: usize,
    pub(crate) clusters_wanted: usize,
}

impl Stopped {
    fn json(&self) -> Value {
        let (machines, clusters) = if self.phase == "create" {
            ("machines_running", "clusters_available")
        } else {
            ("machines_left", "clusters_left")
        };
        json!({
            "phase": self.phase, "seconds": self.seconds,
            machines: self.machines, clusters: self.clusters,
            "machines": self.machines_wanted, "clusters": self.clusters_wanted,
        })
    }
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (machines, clusters) = if self.phase == "create" {
            ("Running", "Available")
        } else {
            ("left", "left")
        };
        write!(
            f,
            "{} after {:.1} s: {}/{} machines {machines}, {}/{} clusters {clusters}",
            self.phase,
            self.seconds,
            self.machines,
            self.machines_wanted,
            self.clusters,
            self.clusters_wanted
        )
    }
}

impl Round {
    /// The scenario's time divided by its floor's (the time the floor stands for).
    pub(crate) fn floor_ratio(&self) -> Option<f64> {
        self.floor.as_ref().map(|f| match f.end {
            FloorEnd::MachinesRunning => self.running_seconds / f.seconds,
            FloorEnd::ClustersAvailable => self.available_seconds / f.seconds,
        })
    }

    /// Writes (409s apart) per machine, create → all Running and Available.
    pub(crate) fn writes_per_machine(&self, shape: &Shape) -> f64 {
        total(&self.create.requests, true) / f64::from(shape.machines())
    }

    pub(crate) fn json(&self, shape: &Shape) -> Value {
        let n = f64::from(shape.machines());
        // Folded from +0.0: a float sum of nothing is -0.0.
        let conflicts = |s: &Scrape| s.conflicts.values().fold(0.0, |sum, v| sum + v);
        let mut round = json!({
            "stack": self.stack.name(),
            "round": self.index,
            "workers": (shape.workers > 0).then(|| self.workers_in.owner_kind()),
            "driver_create_seconds": self.driver_seconds,
            "seconds_to_all_machines_running": self.running_seconds,
            "seconds_to_all_clusters_available": self.available_seconds,
            "create": {
                "writes": total(&self.create.requests, true),
                "writes_per_machine": total(&self.create.requests, true) / n,
                "reads": total(&self.create.requests, false),
                "conflicts_409": conflicts(&self.create),
                "requests": measure::requests_json(&self.create.requests),
                "conflicts": measure::requests_json(&self.create.conflicts),
                "usage": self.create_usage.json(),
            },
            "timeline": self.timeline.iter().map(|s| json!([
                (s.seconds * 10.0).round() / 10.0, s.machines_running, s.clusters_available, s.requests,
                (s.controllers_rss_mib * 10.0).round() / 10.0
            ])).collect::<Vec<_>>(),
            "timeline_columns": ["seconds", "machines_running", "clusters_available", "requests", "controllers_rss_mib"],
            "settle": self.settle.as_ref().map(|s| json!({
                "seconds": s.seconds, "writes": total(&s.requests, true),
                "writes_per_machine": total(&s.requests, true) / n,
                "requests": measure::requests_json(&s.requests)})),
            "idle": self.idle.as_ref().map(|i| json!({
                "seconds": i.seconds, "requests_per_second": i.requests_per_second,
                "manager_requests_per_second": i.manager_requests_per_second,
                "workload_requests_per_second": i.workload_requests_per_second,
                "cloud_calls_per_second": i.cloud_calls_per_second,
                "all_requests_per_second": i.all_per_second(),
                "all_requests_per_second_per_1000_machines": i.all_per_second() * 1000.0 / n,
                "manager_cpu_percent": i.cpu_percent, "requests": measure::requests_json(&i.requests)})),
            "teardown": {
                "seconds": self.teardown_seconds,
                "writes": total(&self.teardown.requests, true),
                "reads": total(&self.teardown.requests, false),
                "conflicts_409": conflicts(&self.teardown),
                "requests": measure::requests_json(&self.teardown.requests),
                "instances_left": self.instances_left,
            },
            "usage": self.total_usage.json(),
            "floor": self.floor.as_ref().map(|f| json!({
                "seconds": f.seconds, "writes": f.writes, "writes_per_machine": f.writes / n,
                "compared_with": f.end.key(),
                "ratio": self.floor_ratio().unwrap_or(f64::NAN)})),
        });
        if let Some(seconds) = self.owner_ready_seconds {
            round["seconds_to_owner_ready_replicas"] = json!(seconds);
        }
        if let Some(audit) = &self.audit {
            round["audit"] = audit.clone();
        }
        if let Some(stopped) = &self.stopped {
            round["stopped"] = stopped.json();
            // A time not reached is null here (its lower bound, the stop's time, is what the
            // summary's mean takes).
            if stopped.phase == "create" {
                if stopped.machines < stopped.machines_wanted {
                    round["seconds_to_all_machines_running"] = Value::Null;
                }
                if stopped.clusters < stopped.clusters_wanted {
                    round["seconds_to_all_clusters_available"] = Value::Null;
                }
            } else {
                round["teardown"]["seconds"] = Value::Null;
            }
        }
        round
    }
}

/// Runs `shape` with `stacks` in turn for `rounds` rounds (capi-rs's first round with `extras`);
/// returns the rounds in the order they ran.
pub(crate) async fn run_rounds(
    options: &Options,
    scenario: &str,
    shape: Shape,
    extras: Extras,
    stacks: &[Stack],
    rounds: usize,
) -> Result<Vec<Round>> {
    let mut done = Vec::new();
    for index in 1..=rounds {
        for &stack in stacks {
            let extras = if stack == Stack::Ours && index == 1 {
                extras
            } else {
                Extras::default()
            };
            announce(scenario, index, rounds, stack, &shape);
            done.push(run_round(options, stack, index, shape, extras).await?);
        }
    }
    Ok(done)
}

/// Says which round of which scenario starts, and what it builds.
pub(crate) fn announce(scenario: &str, index: usize, rounds: usize, stack: Stack, shape: &Shape) {
    let owner = if shape.workers > 0 {
        format!(" in a {}", shape.workers_in.owner_kind())
    } else {
        String::new()
    };
    let boot = if shape.boot.ms > 0 {
        format!(
            ", booting in {} ms ± {:.0} %",
            shape.boot.ms,
            shape.boot.jitter * 100.0
        )
    } else {
        String::new()
    };
    step(&format!(
        "Scenario {scenario}, round {index}/{rounds}: {} — {} cluster(s) of 1 control-plane machine + {} worker(s){owner}{boot}",
        stack.name(),
        shape.clusters,
        shape.workers,
    ));
}

/// Runs one round of `shape` with `stack` (see the module's documentation).
pub(crate) async fn run_round(
    options: &Options,
    stack: Stack,
    index: usize,
    shape: Shape,
    extras: Extras,
) -> Result<Round> {
    let namespace = "bench";
    let audit_log = options.audit.then(|| {
        audit::log_path(
            &format!(
                "{}x{}-{}",
                shape.clusters,
                shape.workers + 1,
                shape.workers_in.owner_kind()
            ),
            stack.name(),
            index,
        )
    });
    let mut running =
        Running::start(stack, options, shape.boot, namespace, audit_log.as_deref()).await?;
    let client = running.client.clone();
    let mut prepared = Vec::with_capacity(shape.clusters as usize);
    for i in 0..shape.clusters {
        prepared.push(
            running
                .prepare_cluster(
                    &shape.cluster_name(i),
                    shape.workers,
                    shape.workers_in,
                    shape.boot,
                )
                .await?,
        );
    }
    let owner = shape.owner_ready.then(|| shape.workers_in.owner_kind());
    let follower = Follower::start(&client, namespace, owner);
    // Both stacks start from quiet: upstream's core manager migrates its CRDs' stored versions at
    // start, which is no work of the scenario's.
    measure::wait_until_quiet(&client, STARTUP_QUIET, SETTLE_LIMIT).await?;

    let before = scrape(&client).await?;
    let usage_before = running.usage()?;
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    {
        let running = &running;
        stream::iter(prepared.iter())
            .map(|objects| running.create(objects))
            .buffer_unordered(DRIVER_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
    }
    let driver_seconds = started.elapsed().as_secs_f64();
    println!("    all objects created after {driver_seconds:.1} s");
    let converged = follower
        .wait(&mut running, &shape, started, &before, options.time_limit)
        .await?;
    let create = scrape(&client).await?.since(&before);
    let converged_at = jiff::Timestamp::now();
    let usage_converged = running.usage()?;
    let create_usage = StackUsage {
        controllers: delta(usage_converged.controllers, usage_before.controllers),
        all: delta(usage_converged.all, usage_before.all),
    };
    match &converged.stopped {
        None => println!(
            "    all {} machines Running after {:.1} s, all {} clusters Available after {:.1} s; {:.2} writes/machine, controllers' CPU {:.1} s",
            shape.machines(),
            converged.running_seconds,
            shape.clusters,
            converged.available_seconds,
            total(&create.requests, true) / f64::from(shape.machines()),
            create_usage.controllers.cpu_seconds
        ),
        Some(stopped) => println!(
            "    stopped at the time limit: {stopped}; {:.2} writes/machine so far, controllers' CPU {:.1} s",
            total(&create.requests, true) / f64::from(shape.machines()),
            create_usage.controllers.cpu_seconds
        ),
    }

    let audit = match &audit_log {
        Some(path) => {
            let cluster = shape.cluster_name(shape.clusters / 2);
            let audit =
                audit::one_cluster(path, &cluster, shape.clusters, started_at, converged_at)?;
            audit::print(&audit);
            println!("    audit log: {}", path.display());
            Some(audit)
        }
        None => None,
    };

    if let Some(stopped) = converged.stopped {
        // Neither the teardown nor anything measured after convergence is taken from a stack
        // that did not converge: its processes and control plane go with `running`.
        let total_usage = running.usage()?;
        return Ok(Round {
            stack,
            index,
            workers_in: shape.workers_in,
            driver_seconds,
            running_seconds: converged.running_seconds,
            available_seconds: converged.available_seconds,
            owner_ready_seconds: converged.owner_ready_seconds,
            create,
            create_usage,
            timeline: converged.timeline,
            settle: None,
            idle: None,
            teardown_seconds: f64::NAN,
            teardown: Scrape::default(),
            total_usage,
            floor: None,
            instances_left: None,
            audit,
            stopped: Some(stopped),
        });
    }

    let mut settle = None;
    let mut idle = None;
    if extras.settle {
        step("Waiting until the manager stops writing");
        let quiet = measure::wait_until_quiet(&client, SETTLE_QUIET, SETTLE_LIMIT).await?;
        println!(
            "    quiet {:.1} s after all Running ({:.0} writes meanwhile)",
            quiet.seconds,
            total(&quiet.requests, true)
        );
        settle = Some(quiet);
        if let Some(rig) = running.rig() {
            rig.check_provider_status(&client, namespace).await?;
        }
    }
    if extras.idle_seconds > 0
        && let Some(rig) = running.rig()
    {
        step(&format!(
            "Idle for {} s after the manager went quiet",
            extras.idle_seconds
        ));
        idle = Some(measure_idle(rig, extras.idle_seconds).await?);
    }

    step(&format!("Deleting {} cluster(s)", shape.clusters));
    let teardown_before = scrape(&client).await?;
    let teardown_started = Instant::now();
    let clusters = dynamic(&client, namespace, "Cluster");
    stream::iter(0..shape.clusters)
        .map(|i| {
            let clusters = clusters.clone();
            let name = shape.cluster_name(i);
            async move {
                clusters
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(DRIVER_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let stopped = follower
        .wait_gone(&mut running, teardown_started, options.time_limit)
        .await?;
    let teardown_seconds = teardown_started.elapsed().as_secs_f64();
    let teardown = scrape(&client).await?.since(&teardown_before);
    let total_usage = running.usage()?;
    match &stopped {
        None => println!("    every cluster and machine gone after {teardown_seconds:.1} s"),
        Some(stopped) => println!("    teardown stopped at the time limit: {stopped}"),
    }
    drop(follower);

    let mut instances_left = None;
    let mut floor_figures = None;
    // A teardown stopped at the limit leaves the cloud unfinished and the API server busy:
    // neither its leftovers nor a floor are taken then.
    if stopped.is_none()
        && let Some(rig) = running.rig_mut()
    {
        let cloud = rig.inspect().await?;
        let left = cloud.instances.len() + cloud.scale_sets.len();
        instances_left = Some(left);
        rig.kill_manager();
        if left != 0 {
            bail!(
                "{} instances and {} scale sets left in the simulated cloud after the teardown",
                cloud.instances.len(),
                cloud.scale_sets.len()
            );
        }
        floor_figures = match extras.floor {
            Some(FloorProgram::Machines) => Some(floor::run(rig, options, shape.machines()).await?),
            Some(FloorProgram::Clusters) => {
                Some(floor::clusters::run(rig, options, shape.clusters).await?)
            }
            None => None,
        };
    }
    Ok(Round {
        stack,
        index,
        workers_in: shape.workers_in,
        driver_seconds,
        running_seconds: converged.running_seconds,
        available_seconds: converged.available_seconds,
        owner_ready_seconds: converged.owner_ready_seconds,
        create,
        create_usage,
        timeline: converged.timeline,
        settle,
        idle,
        teardown_seconds,
        teardown,
        total_usage,
        floor: floor_figures,
        instances_left,
        audit,
        stopped,
    })
}

fn delta(after: super::stack::Usage, before: super::stack::Usage) -> super::stack::Usage {
    super::stack::Usage {
        cpu_seconds: after.cpu_seconds - before.cpu_seconds,
        peak_rss_mib: after.peak_rss_mib,
    }
}

fn dynamic(client: &kube::Client, namespace: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind);
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk))
}

/// Machines and Clusters of either stack (and the workers' owners when asked), followed with one
/// watch each (read as JSON: the two stacks' objects are the same kinds).
struct Follower {
    machines: reflector::Store<DynamicObject>,
    clusters: reflector::Store<DynamicObject>,
    owners: Option<reflector::Store<DynamicObject>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// When a round converged, and how it got there.
struct Converged {
    /// When every machine was Running (the stop's time when it never was).
    running_seconds: f64,
    /// When every cluster was Available (the stop's time when it never was).
    available_seconds: f64,
    owner_ready_seconds: Option<f64>,
    timeline: Vec<Sample>,
    /// Set when the time limit came first.
    stopped: Option<Stopped>,
}

impl Follower {
    /// Follows Machines, Clusters and, given its kind, the workers' owners.
    fn start(client: &kube::Client, namespace: &str, owner: Option<&str>) -> Self {
        let mut tasks = Vec::new();
        let mut follow = |kind: &str| {
            let api = dynamic(client, namespace, kind);
            let resource =
                ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind));
            let writer = Writer::new(resource);
            let reader = writer.as_reader();
            tasks.push(tokio::spawn(
                reflector::reflector(writer, watcher(api, watcher::Config::default()))
                    .backoff(capi_runtime::retry::WatchBackoff::default())
                    .for_each(|_| std::future::ready(())),
            ));
            reader
        };
        let machines = follow("Machine");
        let clusters = follow("Cluster");
        let owners = owner.map(&mut follow);
        Self {
            machines,
            clusters,
            owners,
            tasks,
        }
    }

    /// Owners that count at least `workers` ready workers (`status.readyReplicas`).
    fn owners_ready(&self, workers: u32) -> usize {
        self.owners.as_ref().map_or(0, |owners| {
            owners
                .state()
                .iter()
                .filter(|o| {
                    o.metadata.deletion_timestamp.is_none()
                        && o.data["status"]["readyReplicas"]
                            .as_u64()
                            .is_some_and(|ready| ready >= u64::from(workers))
                })
                .count()
        })
    }

    fn running(&self) -> usize {
        self.machines
            .state()
            .iter()
            .filter(|m| {
                m.metadata.deletion_timestamp.is_none() && m.data["status"]["phase"] == "Running"
            })
            .count()
    }

    fn available(&self) -> usize {
        self.clusters
            .state()
            .iter()
            .filter(|c| {
                c.metadata.deletion_timestamp.is_none()
                    && c.data["status"]["conditions"]
                        .as_array()
                        .is_some_and(|all| {
                            all.iter()
                                .any(|c| c["type"] == "Available" && c["status"] == "True")
                        })
            })
            .count()
    }

    /// Waits until every machine of `shape` is Running and every cluster Available.
    async fn wait(
        &self,
        running: &mut Running,
        shape: &Shape,
        started: Instant,
        before: &Scrape,
        limit: Duration,
    ) -> Result<Converged> {
        let (want_machines, want_clusters) = (shape.machines() as usize, shape.clusters as usize);
        let mut running_at = None;
        let mut available_at = None;
        // Not followed: counted as there from the start.
        let mut owners_at = self.owners.is_none().then_some(0.0);
        let mut timeline = Vec::new();
        let mut last_sample: Option<Instant> = None;
        let mut last_print = Instant::now();
        loop {
            let (machines, clusters) = (self.running(), self.available());
            let now = started.elapsed().as_secs_f64();
            if machines >= want_machines && running_at.is_none() {
                running_at = Some(now);
            }
            if clusters >= want_clusters && available_at.is_none() {
                available_at = Some(now);
            }
            let owners = self.owners_ready(shape.workers);
            if owners >= want_clusters && owners_at.is_none() {
                owners_at = Some(now);
            }
            let done = running_at.is_some() && available_at.is_some() && owners_at.is_some();
            let out_of_time = !done && started.elapsed() > limit;
            if done || out_of_time || last_sample.is_none_or(|t| t.elapsed() >= SAMPLE_EVERY) {
                running.check()?;
                let requests = scrape(&running.client)
                    .await?
                    .since(before)
                    .all_but_upkeep();
                timeline.push(Sample {
                    seconds: now,
                    machines_running: machines,
                    clusters_available: clusters,
                    requests,
                    controllers_rss_mib: running.controllers_resident_mib()?,
                });
                last_sample = Some(Instant::now());
            }
            if let (Some(running_seconds), Some(available_seconds), Some(owner_ready)) =
                (running_at, available_at, owners_at)
            {
                return Ok(Converged {
                    running_seconds,
                    available_seconds,
                    owner_ready_seconds: self.owners.is_some().then_some(owner_ready),
                    timeline,
                    stopped: None,
                });
            }
            let owners_said = if self.owners.is_some() {
                format!(
                    ", {owners}/{want_clusters} {}s with every worker ready",
                    shape.workers_in.owner_kind()
                )
            } else {
                String::new()
            };
            if out_of_time {
                return Ok(Converged {
                    running_seconds: running_at.unwrap_or(now),
                    available_seconds: available_at.unwrap_or(now),
                    owner_ready_seconds: self.owners.is_some().then(|| owners_at.unwrap_or(now)),
                    timeline,
                    stopped: Some(Stopped {
                        phase: "create",
                        seconds: now,
                        machines,
                        machines_wanted: want_machines,
                        clusters,
                        clusters_wanted: want_clusters,
                    }),
                });
            }
            if last_print.elapsed() > Duration::from_secs(10) {
                println!(
                    "    {now:>6.1}s  {machines}/{want_machines} machines Running, {clusters}/{want_clusters} clusters Available{owners_said} ({} machines exist)",
                    self.machines.state().len()
                );
                last_print = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until no Cluster and no Machine is left, or `limit` has passed (then says how many
    /// were left).
    async fn wait_gone(
        &self,
        running: &mut Running,
        started: Instant,
        limit: Duration,
    ) -> Result<Option<Stopped>> {
        let mut last_print = Instant::now();
        let (machines_wanted, clusters_wanted) =
            (self.machines.state().len(), self.clusters.state().len());
        loop {
            let (machines, clusters) = (self.machines.state().len(), self.clusters.state().len());
            if machines == 0 && clusters == 0 {
                return Ok(None);
            }
            if started.elapsed() > limit {
                return Ok(Some(Stopped {
                    phase: "teardown",
                    seconds: started.elapsed().as_secs_f64(),
                    machines,
                    machines_wanted,
                    clusters,
                    clusters_wanted,
                }));
            }
            if last_print.elapsed() > Duration::from_secs(10) {
                running.check()?;
                println!(
                    "    {:>6.1}s  {machines} machines and {clusters} clusters left",
                    started.elapsed().as_secs_f64()
                );
                last_print = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The phase whose stop makes the time `key` a lower bound (`None`: not a time of a phase).
pub(crate) fn stopped_phase_of(key: &str) -> Option<&'static str> {
    match key {
        "seconds_to_all_machines_running" | "seconds_to_all_clusters_available" => Some("create"),
        "teardown_seconds" => Some("teardown"),
        _ => None,
    }
}

/// The prefix of a ratio (upstream's over capi-rs's) whose figures may be lower bounds: `≥`
/// when only upstream's is one, `≤` when only capi-rs's is; `None` when both are (the ratio is
/// then unknown).
pub(crate) fn ratio_bound(ours_bounded: bool, upstream_bounded: bool) -> Option<&'static str> {
    match (ours_bounded, upstream_bounded) {
        (false, false) => Some(""),
        (false, true) => Some("≥ "),
        (true, false) => Some("≤ "),
        (true, true) => None,
    }
}

/// The mean of each figure over one stack's rounds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Summary {
    pub(crate) rounds: usize,
    /// Rounds stopped at the time limit while building: their build times are lower bounds,
    /// and so the means of those times.
    pub(crate) stopped_in_create: usize,
    /// Rounds stopped at the time limit while tearing down: their teardown times are lower
    /// bounds, and so the teardown's mean.
    pub(crate) stopped_in_teardown: usize,
    pub(crate) running_seconds: f64,
    pub(crate) available_seconds: f64,
    pub(crate) writes_per_machine: f64,
    pub(crate) requests_per_machine: f64,
    pub(crate) conflicts_per_machine: f64,
    pub(crate) controllers_cpu_seconds: f64,
    pub(crate) all_cpu_seconds: f64,
    pub(crate) controllers_peak_rss_mib: f64,
    pub(crate) all_peak_rss_mib: f64,
    pub(crate) teardown_seconds: f64,
    pub(crate) teardown_writes_per_machine: f64,
}

impl Summary {
    /// The means over `rounds`, each of `shape`.
    pub(crate) fn of(rounds: &[&Round], shape: &Shape) -> Self {
        let n = f64::from(shape.machines());
        let count = rounds.len().max(1) as f64;
        let mean = |f: &dyn Fn(&Round) -> f64| rounds.iter().map(|r| f(r)).sum::<f64>() / count;
        let stopped_in = |phase: &str| {
            rounds
                .iter()
                .filter(|r| r.stopped.is_some_and(|s| s.phase == phase))
                .count()
        };
        // A round stopped while building was never torn down: the teardown's means are over the
        // others (NaN, shown as none, when there are none).
        let torn_down: Vec<&&Round> = rounds
            .iter()
            .filter(|r| r.stopped.is_none_or(|s| s.phase != "create"))
            .collect();
        let teardown_mean = |f: &dyn Fn(&Round) -> f64| {
            if torn_down.is_empty() {
                f64::NAN
            } else {
                torn_down.iter().map(|r| f(r)).sum::<f64>() / torn_down.len() as f64
            }
        };
        Self {
            rounds: rounds.len(),
            stopped_in_create: stopped_in("create"),
            stopped_in_teardown: stopped_in("teardown"),
            running_seconds: mean(&|r| r.running_seconds),
            available_seconds: mean(&|r| r.available_seconds),
            writes_per_machine: mean(&|r| r.writes_per_machine(shape)),
            requests_per_machine: mean(&|r| {
                (total(&r.create.requests, true) + total(&r.create.requests, false)) / n
            }),
            conflicts_per_machine: mean(&|r| {
                r.create.conflicts.values().fold(0.0, |sum, v| sum + v) / n
            }),
            controllers_cpu_seconds: mean(&|r| r.create_usage.controllers.cpu_seconds),
            all_cpu_seconds: mean(&|r| r.create_usage.all.cpu_seconds),
            controllers_peak_rss_mib: mean(&|r| r.total_usage.controllers.peak_rss_mib),
            all_peak_rss_mib: mean(&|r| r.total_usage.all.peak_rss_mib),
            teardown_seconds: teardown_mean(&|r| r.teardown_seconds),
            teardown_writes_per_machine: teardown_mean(&|r| total(&r.teardown.requests, true) / n),
        }
    }

    /// Whether the mean of `key` is a lower bound (a time of a phase some round was stopped in).
    pub(crate) fn bounded(&self, key: &str) -> bool {
        match stopped_phase_of(key) {
            Some("create") => self.stopped_in_create > 0,
            Some(_) => self.stopped_in_teardown > 0,
            None => false,
        }
    }

    /// The figures, each with what it means.
    fn rows(&self) -> [(&'static str, f64, &'static str); 11] {
        [
            ("time to all machines Running", self.running_seconds, "s"),
            (
                "time to all clusters Available",
                self.available_seconds,
                "s",
            ),
            (
                "API writes per machine (409s apart)",
                self.writes_per_machine,
                "",
            ),
            ("API requests per machine", self.requests_per_machine, ""),
            ("409 Conflicts per machine", self.conflicts_per_machine, ""),
            (
                "controllers' CPU, create",
                self.controllers_cpu_seconds,
                "s",
            ),
            ("all processes' CPU, create", self.all_cpu_seconds, "s"),
            (
                "controllers' peak RSS",
                self.controllers_peak_rss_mib,
                "MiB",
            ),
            ("all processes' peak RSS", self.all_peak_rss_mib, "MiB"),
            ("teardown time", self.teardown_seconds, "s"),
            (
                "teardown writes per machine",
                self.teardown_writes_per_machine,
                "",
            ),
        ]
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "rounds": self.rounds,
            "stopped_in_create": self.stopped_in_create,
            "stopped_in_teardown": self.stopped_in_teardown,
            "seconds_to_all_machines_running": self.running_seconds,
            "seconds_to_all_clusters_available": self.available_seconds,
            "writes_per_machine": self.writes_per_machine,
            "requests_per_machine": self.requests_per_machine,
            "conflicts_per_machine": self.conflicts_per_machine,
            "controllers_cpu_seconds": self.controllers_cpu_seconds,
            "all_processes_cpu_seconds": self.all_cpu_seconds,
            "controllers_peak_rss_mib": self.controllers_peak_rss_mib,
            "all_processes_peak_rss_mib": self.all_peak_rss_mib,
            "teardown_seconds": self.teardown_seconds,
            "teardown_writes_per_machine": self.teardown_writes_per_machine,
        })
    }
}

/// The comparison of the rounds: printed as a table, returned as JSON (`summary` per stack and
/// `ratios`, upstream's figure divided by capi-rs's: above 1, capi-rs does better).
pub(crate) fn compare(rounds: &[Round], shape: &Shape) -> Value {
    let of = |stack: Stack| -> Option<Summary> {
        let mine: Vec<&Round> = rounds.iter().filter(|r| r.stack == stack).collect();
        (!mine.is_empty()).then(|| Summary::of(&mine, shape))
    };
    let (ours, upstream) = (of(Stack::Ours), of(Stack::Upstream));
    println!(
        "\n    {:<38} {:>12} {:>12} {:>20}",
        "figure (mean over rounds)", "capi-rs", "upstream", "upstream ÷ capi-rs"
    );
    let cell = |s: &Option<Summary>, i: usize| -> Option<(f64, &'static str)> {
        s.as_ref().map(|s| {
            let row = s.rows()[i];
            (row.1, row.2)
        })
    };
    let mut ratios = serde_json::Map::new();
    let mut bounds = serde_json::Map::new();
    let keys = [
        "seconds_to_all_machines_running",
        "seconds_to_all_clusters_available",
        "writes_per_machine",
        "requests_per_machine",
        "conflicts_per_machine",
        "controllers_cpu_seconds",
        "all_processes_cpu_seconds",
        "controllers_peak_rss_mib",
        "all_processes_peak_rss_mib",
        "teardown_seconds",
        "teardown_writes_per_machine",
    ];
    for (i, key) in keys.iter().enumerate() {
        let label = Summary::default().rows()[i].0;
        let bounded = |s: &Option<Summary>| s.is_some_and(|s| s.bounded(key));
        let show = |c: Option<(f64, &str)>, s: &Option<Summary>| match c {
            Some((v, _)) if v.is_nan() => "—".into(),
            // A stopped round's time is when it was stopped.
            Some((v, unit)) if bounded(s) => format!("≥ {v:.2} {unit}"),
            Some((v, unit)) => format!("{v:.2} {unit}"),
            None => "—".into(),
        };
        let prefix = ratio_bound(bounded(&ours), bounded(&upstream));
        let ratio = match (cell(&ours, i), cell(&upstream, i), prefix) {
            (Some((a, _)), Some((b, _)), Some(_)) if a > 0.0 && b.is_finite() => Some(b / a),
            _ => None,
        };
        if let (Some(r), Some(prefix)) = (ratio, prefix) {
            ratios.insert((*key).into(), json!(r));
            if !prefix.is_empty() {
                bounds.insert((*key).into(), json!(prefix.trim()));
            }
        }
        println!(
            "    {label:<38} {:>12} {:>12} {:>20}",
            show(cell(&ours, i), &ours),
            show(cell(&upstream, i), &upstream),
            ratio
                .map(|r| format!("{}{r:.2}×", prefix.unwrap_or_default()))
                .unwrap_or_else(|| "—".into())
        );
    }
    for round in rounds {
        println!(
            "    round {} {:<9} Running {:>7.1} s, Available {:>7.1} s, {:.2} writes/machine, teardown {:.1} s",
            round.index,
            round.stack.name(),
            round.running_seconds,
            round.available_seconds,
            round.writes_per_machine(shape),
            round.teardown_seconds
        );
        if let Some(stopped) = &round.stopped {
            println!("      stopped at the time limit: {stopped}");
        }
    }
    for stack in [Stack::Ours, Stack::Upstream] {
        if let Some(round) = rounds.iter().find(|r| r.stack == stack) {
            println!(
                "\n    {}: writes by verb and resource (round {})",
                stack.name(),
                round.index
            );
            let n = f64::from(shape.machines());
            for ((verb, resource), count) in round
                .create
                .requests
                .iter()
                .filter(|((v, _), _)| is_write(v))
            {
                println!(
                    "      {verb:<7} {resource:<45} {count:>8.0}  ({:.2}/machine)",
                    count / n
                );
            }
            for ((verb, resource), count) in &round.create.conflicts {
                println!(
                    "      {verb:<7} {:<45} {count:>8.0}  ({:.2}/machine)",
                    format!("{resource} → 409"),
                    count / n
                );
            }
        }
    }
    json!({
        "summary": {
            "capi-rs": ours.map(|s| s.json()),
            "upstream": upstream.map(|s| s.json()),
        },
        "ratios_upstream_over_capi_rs": ratios,
        // A ratio from a lower bound: ≥ (upstream's figure is one) or ≤ (capi-rs's is).
        "ratio_bounds": bounds,
    })
}

/// What the JSON says about the run's conditions.
pub(crate) fn conditions(options: &Options, shape: &Shape, rounds: &[Round]) -> Value {
    let upstream = super::stack::upstream_settings(options);
    json!({
        "clusters": shape.clusters,
        "workers_per_cluster": shape.workers,
        "machines": shape.machines(),
        "boot": {"ms": shape.boot.ms, "jitter": shape.boot.jitter},
        "date": jiff::Timestamp::now().to_string(),
        "command": options.command_line(),
        "host": measure::host(),
        "order": rounds.iter().map(|r| format!("{} {}", r.stack.name(), r.index)).collect::<Vec<_>>(),
        "stacks": {
            "capi-rs": Stack::Ours.describe(),
            "upstream": Stack::Upstream.describe(),
        },
        "settings": {
            "capi-rs": options.manager.json(),
            "upstream": {
                "qps": upstream.qps, "burst": upstream.burst,
                "concurrency_per_kind": upstream.concurrency,
                "leader_election": false,
                "leader_election_note": "off: controller-runtime elects only in a Pod (it reads the namespace from the service account mount); capi-rs runs with it on, as shipped, so its figures include the lease renewals",
            },
        },
        "kubernetes_version_of_the_clusters": super::stack::KUBERNETES_VERSION,
        "audited": options.audit,
        "audited_note": options.audit.then_some("the management API server wrote an audit log, a synchronous write per request: these times are not comparable with an unaudited run's"),
        "what_is_counted": "requests to the management API server (apiserver_request_total, by verb and resource, 409s apart); the API server's own upkeep (endpoints, services, namespaces, flow control, leases) is not counted; capi-rs's kubeconfig Secrets are written before the clock; CPU and RSS from /proc of each process; peak RSS summed over a group's processes",
    })
}
