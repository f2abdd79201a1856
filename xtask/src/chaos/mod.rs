//! `cargo xtask chaos`: the in-memory provider's cluster of N machines (default 200) built while
//! things go wrong, then scaled to zero and deleted — and what must hold regardless.
//!
//! ```text
//! cargo xtask chaos [--machines N] [--error-rate F] [--conflict-rate F] [--kills N] [--seed N]
//!                   [--pool] [--out DIR]
//! ```
//!
//! With `--pool` the workers are one `MachinePool` (an `InMemoryMachinePool`: a scale set of the
//! simulated cloud, whose creates, removals and lists suffer the same faults and lag) instead of
//! a `MachineDeployment`; it grows, scales to zero and goes with the cluster through the same
//! disruptions, and it must never have had two scale sets.
//!
//! What goes wrong: every cloud call fails with probability `--error-rate` (default 0.2), 5 % of
//! creates happen but answer with an error (a lost response), a new instance shows in the cloud's
//! lists only after up to 2 s (eventual consistency), calls take 20 ms and instances 500 ms to boot
//! (± 20 %); the manager runs as two replicas electing a leader, each behind a proxy
//! ([`conflicts`]) that answers `--conflict-rate` (default 0.1) of its status writes with 409
//! Conflict; while the cluster grows, the leading replica is killed with SIGKILL and restarted
//! `--kills` times (default 3), the kube-apiserver is killed and restarted once, and the leader's
//! lease requests stall for 20 s once (it must stop before its lease expires, the other replica
//! takes over; a replica that lost its lease exits and is started again). The cluster grows in
//! stages (one more than there are disruptions) and each disruption happens right after the next
//! stage was asked for, so it lands while machines are being created however fast the run is.
//! Scaling to zero and deleting the cluster get one leader kill and one API server restart each
//! too, while machines are going.
//!
//! What it asserts and reports: every Machine reached Running; in no phase more instances than the
//! cluster asks for in it, no idempotency key ever mapped to more than one instance (with
//! `--pool`: nor to more than one scale set); after
//! scaling to zero and deleting the cluster: zero instances, scale sets and load balancers, zero objects of
//! any kind left behind (a finalizer nobody removes), zero orphaned Secrets. The JSON report
//! (`chaos-N.json`) records the seed, each phase's peak and the faults that landed in it, every
//! kind's leak count, and the spread of the machines' times to Running (median, 90th percentile,
//! slowest).

mod conflicts;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capi_bootstrap::api::KubeadmConfig;
use capi_core::api::{
    Cluster, Machine, MachineDeployment, MachineHealthCheck, MachinePool, MachineSet,
};
use capi_testing::manifest;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource};
use provider_inmemory::api::{InMemoryCluster, InMemoryMachine, InMemoryMachinePool};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::bench::measure;
use crate::bench::one_cluster::{MachineFollower, PHASE_TIMEOUT};
use crate::bench::rig::{Build, CloudOptions, ManagerOptions, Rig};
use crate::bench::stack;
use crate::command::step;
use crate::workspace_root;
use conflicts::ConflictProxy;

const NAMESPACE: &str = "chaos";
/// Manager replicas (leader election on).
const REPLICAS: usize = 2;
/// How long the leader's lease requests hang in the lease-stall disruption: longer than the
/// lease lasts unrenewed (15 s), so that the other replica takes over.
const LEASE_STALL: Duration = Duration::from_secs(20);
/// The longest a new instance takes to show in the cloud's lists (eventual consistency, as EC2's).
const LIST_LAG: Duration = Duration::from_secs(2);
const CLUSTER: &str = "chaos";

/// `cargo xtask chaos`'s command line.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct ChaosArgs {
    /// Machines of the chaos cluster.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(2..=5000))]
    machines: u32,
    /// Probability that a cloud call fails (0 to 0.9).
    #[arg(long, default_value_t = 0.2, value_parser = probability)]
    error_rate: f64,
    /// Probability that a write to the API server is answered 409 Conflict (0 to 0.9).
    #[arg(long, default_value_t = 0.1, value_parser = probability)]
    conflict_rate: f64,
    /// How often the manager is killed (SIGKILL) during the run.
    #[arg(long, default_value_t = 3)]
    kills: u32,
    /// Seeds the faults (the cloud's and the 409 proxy's draws); random unless given. Calls
    /// come concurrently, so a seed fixes the sequence of draws, not which call gets which.
    #[arg(long)]
    seed: Option<u64>,
    /// How the manager and the simulated cloud are built (`debug` adds debug assertions and
    /// overflow checks; its times are not comparable).
    #[arg(long, value_enum, default_value = "release")]
    build: Build,
    /// The workers are one MachinePool (a scale set of the simulated cloud) instead of a
    /// MachineDeployment.
    #[arg(long)]
    pool: bool,
    /// Where the JSON report goes (default: benches/results).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// A probability between 0 and 0.9.
fn probability(value: &str) -> Result<f64, String> {
    value
        .parse()
        .ok()
        .filter(|r: &f64| (0.0..=0.9).contains(r))
        .ok_or_else(|| "expected a probability between 0 and 0.9".to_string())
}

/// What a run works with.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    machines: u32,
    error_rate: f64,
    conflict_rate: f64,
    kills: u32,
    seed: u64,
    build: Build,
    pool: bool,
    out: PathBuf,
    args: Vec<String>,
}

impl Options {
    /// The options of `args`; `raw` is the command line as typed, recorded with the report.
    pub(crate) fn new(args: ChaosArgs, raw: Vec<String>) -> Self {
        Self {
            machines: args.machines,
            error_rate: args.error_rate,
            conflict_rate: args.conflict_rate,
            kills: args.kills,
            seed: args.seed.unwrap_or_else(|| fastrand::u64(..)),
            build: args.build,
            pool: args.pool,
            out: args
                .out
                .unwrap_or_else(|| workspace_root().join("benches/results")),
            args: raw,
        }
    }
}

/// Builds what the run needs, runs it, prints the report; fails if any guarantee did not hold.
pub(crate) fn run_chaos(options: Options) -> Result<()> {
    step("Local control plane binaries (etcd, kube-apiserver)");
    let assets_dir = crate::envtest::ensure_control_plane()?;
    step(&format!(
        "Building the manager and the simulated cloud ({})",
        options.build.name()
    ));
    let bin_dir = crate::bench::build_binaries(options.build)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(chaos(options, assets_dir, bin_dir))
}

/// What the cloud watcher saw during the run.
#[derive(Default)]
struct CloudWatch {
    peak_instances: AtomicUsize,
    max_per_key: AtomicUsize,
    max_scale_sets_per_key: AtomicUsize,
    errors: AtomicUsize,
    stop: AtomicBool,
    /// The most instances seen during each phase so far (the last is the current one).
    phase_peaks: std::sync::Mutex<Vec<usize>>,
}

impl CloudWatch {
    fn saw(&self, instances: usize) {
        self.peak_instances.fetch_max(instances, Ordering::Relaxed);
        let mut peaks = self.phase_peaks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(peak) = peaks.last_mut() {
            *peak = (*peak).max(instances);
        }
    }

    /// Starts a new phase; returns the peak of the one that ends.
    fn next_phase(&self) -> usize {
        let mut peaks = self.phase_peaks.lock().unwrap_or_else(|p| p.into_inner());
        let ended = peaks.last().copied().unwrap_or(0);
        peaks.push(0);
        ended
    }
}

/// One phase of the run: what the cluster asked for, the most instances seen, the faults that
/// landed in it.
struct Phase {
    name: String,
    asked: usize,
    peak: usize,
    faults: Faults,
    events: Vec<String>,
}

/// Fault counters: cloud calls failed on purpose, creates whose answer was lost, 409s injected.
#[derive(Clone, Copy, Default)]
struct Faults {
    cloud_errors: u64,
    lost_create_responses: u64,
    conflicts: u64,
}

impl Faults {
    fn since(self, earlier: Faults) -> Faults {
        Faults {
            cloud_errors: self.cloud_errors.saturating_sub(earlier.cloud_errors),
            lost_create_responses: self
                .lost_create_responses
                .saturating_sub(earlier.lost_create_responses),
            conflicts: self.conflicts.saturating_sub(earlier.conflicts),
        }
    }
}

async fn chaos(options: Options, assets_dir: PathBuf, bin_dir: PathBuf) -> Result<()> {
    let n = options.machines;
    let cloud = CloudOptions {
        boot_ms: 500,
        delete_ms: 200,
        call_latency_ms: 20,
        jitter: 0.2,
        error_rate: options.error_rate,
        lost_create_response_rate: 0.05,
        seed: Some(options.seed),
        list_lag_ms: LIST_LAG.as_millis() as u64,
    };
    step(&format!(
        "Chaos: {n} machines, 2 manager replicas; cloud errors {:.0} %, lost create responses 5 %, lists lagging up to {LIST_LAG:?} behind creates, 409 on {:.0} % of status writes, {} leader kills, 1 API server restart and a 20 s lease stall while growing, a kill and a restart while scaling to zero and while deleting; seed {}",
        options.error_rate * 100.0,
        options.conflict_rate * 100.0,
        options.kills,
        options.seed
    ));
    // Two replicas electing a leader, as a highly available deployment runs: a killed leader's
    // work is taken over by the other once its lease expires.
    let manager = ManagerOptions {
        qps: 200.0,
        burst: 400,
        concurrency: 16,
        leader_election: true,
        replicas: REPLICAS,
        build: options.build,
    };
    let mut rig = Rig::start(&assets_dir, &bin_dir, &cloud, manager, NAMESPACE, None).await?;
    let client = rig.client.clone();
    // Each replica reaches the API server through a proxy of its own, so that one replica's
    // lease requests can be stalled.
    let mut proxies = Vec::new();
    for replica in 0..REPLICAS {
        let proxy = ConflictProxy::start(
            rig.management.client().await?,
            options.conflict_rate,
            options.seed.wrapping_add(1 + replica as u64),
        )
        .await?;
        let kubeconfig = rig
            .management
            .dir()
            .join(format!("chaos-proxy-{replica}.kubeconfig"));
        std::fs::write(&kubeconfig, proxy.kubeconfig_yaml())?;
        rig.replica_kubeconfig(replica, kubeconfig);
        proxies.push(proxy);
    }
    let proxies = Proxies(proxies);
    rig.start_manager()?;

    // Watch the cloud from the side, all the time.
    let watch = Arc::new(CloudWatch::default());
    let watcher = {
        let watch = Arc::clone(&watch);
        let cloud = rig.cloud.clone();
        tokio::spawn(async move {
            while !watch.stop.load(Ordering::Relaxed) {
                match cloud.inspect().await {
                    Ok(seen) => {
                        watch.saw(seen.instances.len());
                        watch
                            .max_per_key
                            .fetch_max(seen.max_created_per_tag as usize, Ordering::Relaxed);
                        watch
                            .max_scale_sets_per_key
                            .fetch_max(seen.max_scale_sets_per_tag as usize, Ordering::Relaxed);
                    }
                    Err(_) => {
                        watch.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let kind = if options.pool {
        stack::Workers::Pool
    } else {
        stack::Workers::Deployment { health_check: true }
    };
    let mut objects = rig.generated_cluster(CLUSTER, NAMESPACE, n, kind).await?;
    let secrets_before = secret_names(&client).await?;

    // The cluster grows in stages, one disruption at the end of each: a stage can converge in a
    // single burst (workers boot in parallel), so the next stage's machines are asked for first
    // and the disruption lands while they are being created — at any size and speed.
    let plan = disruptions(options.kills);
    let replicas = stage_replicas(n - 1, plan.len() + 1);
    let workers_kind = kind.owner_kind();
    let workers = Workers::new(&client, &mut objects, workers_kind, replicas[0])?;

    step(&format!(
        "Creating cluster {CLUSTER} in {} stages and breaking things on the way",
        replicas.len()
    ));
    let follower = MachineFollower::start(Api::<Machine>::namespaced(client.clone(), NAMESPACE));
    let cloud_client = rig.cloud.clone();
    let faults_now = || async {
        let cloud = cloud_client.inspect().await?;
        anyhow::Ok(Faults {
            cloud_errors: cloud.faults_injected,
            lost_create_responses: cloud.create_responses_lost,
            conflicts: proxies.injected(),
        })
    };
    let mut phases: Vec<Phase> = Vec::new();
    let mut phase_start = faults_now().await?;
    watch.next_phase();
    let started = Instant::now();
    manifest::create_all(&client, NAMESPACE, &objects).await?;
    let mut events: Vec<String> = Vec::new();
    // The disruption of each stage after the first, in order.
    let mut stage_events: Vec<String> = Vec::new();
    let mut stage = 0;
    loop {
        let running = follower.running();
        if stage < plan.len() {
            let total = 1 + replicas[stage] as usize;
            let before = if stage == 0 {
                0
            } else {
                1 + replicas[stage - 1] as usize
            };
            if running >= before + (total - before).div_ceil(2) {
                let grown = replicas[stage + 1];
                let faults = faults_now().await?;
                phases.push(Phase {
                    name: format!("stage {}", stage + 1),
                    asked: total,
                    peak: watch.next_phase(),
                    faults: faults.since(phase_start),
                    events: Vec::new(),
                });
                phase_start = faults;
                wait_for("the workers scaled up", || workers.scale(grown)).await?;
                let at = started.elapsed().as_secs_f64();
                let what = plan[stage].happen(&mut rig, &proxies).await?;
                events.push(format!(
                    "{at:>6.1}s  {what} at {running}/{n} Running (asking for {} now)",
                    1 + grown
                ));
                println!(
                    "    {}",
                    events.last().map(String::as_str).unwrap_or_default()
                );
                stage += 1;
                // The disruption lands in the stage just asked for.
                stage_events.push(events.last().cloned().unwrap_or_default());
            }
        } else if running >= n as usize {
            break;
        }
        restarted(&mut rig, started, &mut events)?;
        if started.elapsed() > PHASE_TIMEOUT {
            bail!("only {running}/{n} machines Running after {PHASE_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let create_seconds = started.elapsed().as_secs_f64();
    println!("    all {n} Running after {create_seconds:.1}s");
    let faults = faults_now().await?;
    phases.push(Phase {
        name: format!("stage {}", stage + 1),
        asked: n as usize,
        peak: watch.next_phase(),
        faults: faults.since(phase_start),
        events: Vec::new(),
    });
    phase_start = faults;
    for (phase, event) in phases.iter_mut().skip(1).zip(stage_events) {
        phase.events.push(event);
    }
    let times = follower.times_to_running();
    let spread = Spread::of(&times);

    step(&format!(
        "Scaling the worker {workers_kind} to zero (the control plane's machine stays)"
    ));
    let started_scale = Instant::now();
    wait_for("the workers scaled to zero", || workers.scale(0)).await?;
    // A manager kill when half the workers are gone, an API server restart at a quarter: both
    // land while machines are being drained and their instances deleted.
    let worker_count = (n - 1) as usize;
    let mut teardown = vec![
        (worker_count / 2, Disruption::KillManager),
        (worker_count / 4, Disruption::RestartApiServer),
    ];
    let mut scale_events = Vec::new();
    loop {
        let left = follower.count().saturating_sub(1);
        if let Some(&(at, disruption)) = teardown.first()
            && left <= at
        {
            teardown.remove(0);
            let at = started_scale.elapsed().as_secs_f64();
            let what = disruption.happen(&mut rig, &proxies).await?;
            scale_events.push(format!(
                "{at:>6.1}s  {what} at {left}/{worker_count} workers left (scaling to zero)"
            ));
            println!(
                "    {}",
                scale_events.last().map(String::as_str).unwrap_or_default()
            );
            continue;
        }
        restarted(&mut rig, started_scale, &mut scale_events)?;
        if teardown.is_empty() && left == 0 && rig.inspect().await?.instances.len() == 1 {
            break;
        }
        if started_scale.elapsed() > PHASE_TIMEOUT {
            bail!("{left} workers still there {PHASE_TIMEOUT:?} after scaling to zero");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let scale_seconds = started_scale.elapsed().as_secs_f64();
    events.extend(scale_events.iter().cloned());
    let faults = faults_now().await?;
    phases.push(Phase {
        name: "scale to zero".into(),
        asked: n as usize,
        peak: watch.next_phase(),
        faults: faults.since(phase_start),
        events: scale_events,
    });
    phase_start = faults;

    step(&format!("Deleting cluster {CLUSTER}"));
    let started_delete = Instant::now();
    let clusters = Api::<Cluster>::namespaced(client.clone(), NAMESPACE);
    clusters.delete(CLUSTER, &DeleteParams::default()).await?;
    // A manager kill and an API server restart while the cluster is being deleted (said so if
    // the deletion was faster).
    let mut delete_events = Vec::new();
    for disruption in [Disruption::KillManager, Disruption::RestartApiServer] {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let when = if clusters.get_opt(CLUSTER).await?.is_some() {
            "while the cluster was being deleted"
        } else {
            "after the cluster was gone"
        };
        let at = started_delete.elapsed().as_secs_f64();
        let what = disruption.happen(&mut rig, &proxies).await?;
        delete_events.push(format!("{at:>6.1}s  {what} {when}"));
        println!(
            "    {}",
            delete_events.last().map(String::as_str).unwrap_or_default()
        );
    }
    loop {
        restarted(&mut rig, started_delete, &mut delete_events)?;
        if clusters.get_opt(CLUSTER).await?.is_none() {
            break;
        }
        if started_delete.elapsed() > PHASE_TIMEOUT {
            bail!("the cluster still there {PHASE_TIMEOUT:?} after it was deleted");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let delete_seconds = started_delete.elapsed().as_secs_f64();
    // Anything the controllers still had to finish is given a few seconds.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let faults = faults_now().await?;
    events.extend(delete_events.iter().cloned());
    phases.push(Phase {
        name: "delete".into(),
        asked: 1,
        peak: watch.next_phase(),
        faults: faults.since(phase_start),
        events: delete_events,
    });
    watch.stop.store(true, Ordering::Relaxed);
    let _ = watcher.await;
    drop(follower);

    let final_cloud = rig.inspect().await?;
    let left = leftovers(&client).await?;
    let orphaned: Vec<String> = secret_names(&client)
        .await?
        .into_iter()
        .filter(|name| !secrets_before.contains(name))
        .collect();
    let peak = watch.peak_instances.load(Ordering::Relaxed);
    let max_per_key = watch
        .max_per_key
        .load(Ordering::Relaxed)
        .max(final_cloud.max_created_per_tag as usize);
    let max_scale_sets_per_key = watch
        .max_scale_sets_per_key
        .load(Ordering::Relaxed)
        .max(final_cloud.max_scale_sets_per_tag as usize);
    let stuck: usize = left.iter().map(|(_, names)| names.len()).sum();
    let conflicts = proxies.injected();
    let log = std::fs::read_to_string(rig.log_path()).unwrap_or_default();
    let panics = log.matches("panicked at").count();
    rig.kill_manager();

    step(&format!(
        "Results: chaos, {n} machines (workers: one {workers_kind}), seed {}",
        options.seed
    ));
    measure::print_table(&[
        ("all Running after".into(), format!("{create_seconds:.1} s")),
        (
            "time to Running: median / p90 / slowest".into(),
            format!(
                "{:.1} s / {:.1} s / {:.1} s",
                spread.median, spread.p90, spread.slowest
            ),
        ),
        (
            "scaled to zero after".into(),
            format!("{scale_seconds:.1} s"),
        ),
        (
            "cluster deleted after".into(),
            format!("{delete_seconds:.1} s"),
        ),
        (
            "cloud create calls".into(),
            final_cloud.create_calls.to_string(),
        ),
        ("409s injected".into(), conflicts.to_string()),
        (
            "most instances at once".into(),
            format!("{peak} (allowed {n})"),
        ),
        (
            "most instances per idempotency key".into(),
            max_per_key.to_string(),
        ),
        (
            "most scale sets per idempotency key".into(),
            max_scale_sets_per_key.to_string(),
        ),
        (
            "instances left".into(),
            final_cloud.instances.len().to_string(),
        ),
        (
            "scale sets left".into(),
            final_cloud.scale_sets.len().to_string(),
        ),
        ("objects left (stuck finalizers)".into(), stuck.to_string()),
        ("orphaned Secrets".into(), orphaned.len().to_string()),
        ("panics in the manager log".into(), panics.to_string()),
    ]);
    for event in &events {
        println!("    {event}");
    }
    for phase in &phases {
        println!(
            "    {:<14} peak {:>4} of {:>4} asked; {:>5} cloud faults, {:>3} lost create responses, {:>4} 409s",
            phase.name,
            phase.peak,
            phase.asked,
            phase.faults.cloud_errors,
            phase.faults.lost_create_responses,
            phase.faults.conflicts
        );
    }
    let mut leaks: serde_json::Map<String, serde_json::Value> = left
        .iter()
        .map(|(kind, names)| (kind.clone(), json!(names.len())))
        .collect();
    leaks.insert("instances".into(), json!(final_cloud.instances.len()));
    leaks.insert(
        "load balancers".into(),
        json!(final_cloud.load_balancers.len()),
    );
    leaks.insert("scale sets".into(), json!(final_cloud.scale_sets.len()));
    leaks.insert("orphaned Secrets".into(), json!(orphaned.len()));
    let result = json!({
        "scenario": "chaos",
        "machines": n,
        "workers": workers_kind,
        "date": jiff::Timestamp::now().to_string(),
        "command": format!("cargo xtask chaos {}", options.args.join(" ")),
        "host": measure::host(),
        "seed": options.seed,
        "build": options.build.name(),
        "faults": {"cloud_error_rate": options.error_rate, "lost_create_response_rate": 0.05,
                   "status_conflict_rate": options.conflict_rate,
                   "list_lag_max_ms": LIST_LAG.as_millis() as u64,
                   "manager_replicas": REPLICAS, "lease_stalls_growing": 1,
                   "lease_stall_seconds": LEASE_STALL.as_secs(),
                   "manager_kills_growing": options.kills, "apiserver_restarts_growing": 1,
                   "manager_kills_scaling_to_zero": 1, "apiserver_restarts_scaling_to_zero": 1,
                   "manager_kills_deleting": 1, "apiserver_restarts_deleting": 1,
                   "injected_conflicts": conflicts,
                   "cloud_errors": final_cloud.faults_injected,
                   "lost_create_responses": final_cloud.create_responses_lost},
        "events": events,
        "phases": phases.iter().map(|p| json!({
            "phase": p.name, "asked": p.asked, "peak_instances": p.peak, "disruptions": p.events,
            "cloud_errors": p.faults.cloud_errors,
            "lost_create_responses": p.faults.lost_create_responses,
            "conflicts": p.faults.conflicts,
        })).collect::<Vec<_>>(),
        "seconds": {"create": create_seconds, "scale_to_zero": scale_seconds, "delete": delete_seconds},
        "time_to_running_seconds": {"machines": times.len(), "median": spread.median,
                                    "p90": spread.p90, "slowest": spread.slowest},
        "leaks": leaks,
        "cloud": {"create_calls": final_cloud.create_calls, "peak_instances": peak,
                  "max_instances_per_key": max_per_key,
                  "max_scale_sets_per_key": max_scale_sets_per_key,
                  "instances_left": final_cloud.instances.len(),
                  "scale_sets_left": final_cloud.scale_sets.len()},
        "objects_left": left.iter().filter(|(_, names)| !names.is_empty()).map(|(kind, names)| json!({"kind": kind, "names": names})).collect::<Vec<_>>(),
        "orphaned_secrets": orphaned,
        "manager_panics": panics,
    });
    let file = if options.pool {
        format!("chaos-pool-{n}.json")
    } else {
        format!("chaos-{n}.json")
    };
    measure::write_result(&options.out, &file, &result)?;

    let mut failures = Vec::new();
    if peak > n as usize {
        failures.push(format!(
            "{peak} instances existed at once; the cluster asks for {n}"
        ));
    }
    for phase in phases.iter().filter(|p| p.peak > p.asked) {
        failures.push(format!(
            "{}: {} instances existed at once; the cluster asked for {}",
            phase.name, phase.peak, phase.asked
        ));
    }
    if !final_cloud.load_balancers.is_empty() {
        failures.push(format!(
            "{} load balancers leaked after deletion",
            final_cloud.load_balancers.len()
        ));
    }
    if max_per_key > 1 {
        failures.push(format!(
            "an idempotency key mapped to {max_per_key} instances (a duplicate VM)"
        ));
    }
    if max_scale_sets_per_key > 1 {
        failures.push(format!(
            "an idempotency key mapped to {max_scale_sets_per_key} scale sets (a duplicate scale set)"
        ));
    }
    if !final_cloud.instances.is_empty() {
        failures.push(format!(
            "{} instances leaked after deletion",
            final_cloud.instances.len()
        ));
    }
    if !final_cloud.scale_sets.is_empty() {
        failures.push(format!(
            "{} scale sets leaked after deletion",
            final_cloud.scale_sets.len()
        ));
    }
    if stuck > 0 {
        failures.push(format!("objects left behind: {left:?}"));
    }
    if !orphaned.is_empty() {
        failures.push(format!("orphaned Secrets: {orphaned:?}"));
    }
    if panics > 0 {
        failures.push(format!(
            "the manager panicked {panics} times (log: {})",
            rig.log_path().display()
        ));
    }
    if !failures.is_empty() {
        bail!("chaos run failed:\n  - {}", failures.join("\n  - "));
    }
    println!("\n    every guarantee held");
    Ok(())
}

/// One thing that goes wrong on purpose while the cluster is being created, scaled down or
/// deleted.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Disruption {
    /// The leading manager replica is killed with SIGKILL and started again half a second later
    /// (the other replica takes over once the lease expires).
    KillManager,
    RestartApiServer,
    /// The leader's lease requests hang for [`LEASE_STALL`] (a stalled connection): it must stop
    /// its controllers before the lease expires, and the other replica takes over.
    StallLeaderLease,
}

impl Disruption {
    /// Makes it happen; says what happened.
    async fn happen(self, rig: &mut Rig, proxies: &Proxies) -> Result<String> {
        let leader = rig.leader().await?;
        let name = |replica: Option<usize>| {
            replica.map_or_else(|| "no replica".to_string(), |r| format!("replica-{r}"))
        };
        Ok(match self {
            Self::KillManager => {
                let victim = leader.unwrap_or(0);
                rig.kill_replica(victim);
                tokio::time::sleep(Duration::from_millis(500)).await;
                rig.start_replica(victim)?;
                format!(
                    "manager replica-{victim} SIGKILLed (leader: {})",
                    name(leader)
                )
            }
            Self::RestartApiServer => {
                rig.management.restart_api_server().await?;
                "kube-apiserver killed and restarted".to_string()
            }
            Self::StallLeaderLease => {
                let victim = leader.unwrap_or(0);
                proxies.stall_leases(victim, LEASE_STALL);
                // Until the stalled leader has stopped (its manager exits) and another replica
                // leads, so that the next disruption does not pre-empt the handover.
                let started = Instant::now();
                let mut stopped = None;
                let mut successor = None;
                while started.elapsed() < LEASE_STALL + Duration::from_secs(20) {
                    if rig.restart_exited()?.contains(&victim) {
                        stopped.get_or_insert(started.elapsed());
                    }
                    if let Some(now) = rig.leader().await?
                        && now != victim
                    {
                        successor.get_or_insert((now, started.elapsed()));
                    }
                    if stopped.is_some() && successor.is_some() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                let stopped = stopped.map_or_else(
                    || "did not stop".to_string(),
                    |after| format!("stopped after {:.1} s", after.as_secs_f64()),
                );
                let successor = successor.map_or_else(
                    || "no other replica took over".to_string(),
                    |(r, after)| format!("replica-{r} led after {:.1} s", after.as_secs_f64()),
                );
                format!(
                    "lease requests of replica-{victim} stalled for {LEASE_STALL:?} (leader: {}; it {stopped}, {successor})",
                    name(leader)
                )
            }
        })
    }
}

/// The replicas' proxies, one per replica.
struct Proxies(Vec<ConflictProxy>);

impl Proxies {
    fn injected(&self) -> u64 {
        self.0.iter().map(ConflictProxy::injected).sum()
    }

    fn stall_leases(&self, replica: usize, stall: Duration) {
        if let Some(proxy) = self.0.get(replica) {
            proxy.stall_leases_for(stall);
        }
    }
}

/// Starts again the replicas that exited (a replica that lost its lease exits, as it should),
/// noting it among `events`.
fn restarted(rig: &mut Rig, since: Instant, events: &mut Vec<String>) -> Result<()> {
    for replica in rig.restart_exited()? {
        events.push(format!(
            "{:>6.1}s  manager replica-{replica} exited (lost its lease) and was started again",
            since.elapsed().as_secs_f64()
        ));
        println!(
            "    {}",
            events.last().map(String::as_str).unwrap_or_default()
        );
    }
    Ok(())
}

/// The disruptions while the cluster grows, in order: the first manager kill, the API server
/// restart, a stall of the leader's lease requests, then the other kills.
fn disruptions(kills: u32) -> Vec<Disruption> {
    let mut plan = vec![Disruption::KillManager; kills as usize];
    plan.insert(plan.len().min(1), Disruption::RestartApiServer);
    plan.insert(plan.len().min(2), Disruption::StallLeaderLease);
    plan
}

/// The worker replicas asked for in each of `stages` stages: equal steps up to `workers`, the
/// last stage asking for all of them.
fn stage_replicas(workers: u32, stages: usize) -> Vec<u32> {
    let stages = stages.max(1) as u64;
    (1..=stages)
        .map(|k| (u64::from(workers) * k).div_ceil(stages) as u32)
        .collect()
}

/// The cluster's workers: its one worker `MachineDeployment` or `MachinePool`.
struct Workers {
    kind: &'static str,
    name: String,
    deployments: Api<MachineDeployment>,
    pools: Api<MachinePool>,
}

impl Workers {
    /// Finds the one worker object of `kind` in the rendered `objects` and sets its replicas.
    fn new(
        client: &Client,
        objects: &mut [kube::api::DynamicObject],
        kind: &'static str,
        replicas: u32,
    ) -> Result<Self> {
        let mut found = objects
            .iter_mut()
            .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == kind))
            .filter(|o| {
                o.data["spec"]["template"]["metadata"]["labels"]
                    .get(capi_core::labels::MACHINE_CONTROL_PLANE)
                    .is_none()
            });
        let (Some(workers), None) = (found.next(), found.next()) else {
            bail!("the chaos run expects exactly one worker {kind} in the template");
        };
        workers.data["spec"]["replicas"] = json!(replicas);
        let name = workers
            .metadata
            .name
            .clone()
            .with_context(|| format!("the worker {kind} has no name"))?;
        Ok(Self {
            kind,
            name,
            deployments: Api::namespaced(client.clone(), NAMESPACE),
            pools: Api::namespaced(client.clone(), NAMESPACE),
        })
    }

    /// Asks for `replicas` workers.
    async fn scale(&self, replicas: u32) -> Result<bool> {
        let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
        let params = PatchParams::default();
        match self.kind {
            "MachinePool" => {
                self.pools.patch(&self.name, &params, &patch).await?;
            }
            _ => {
                self.deployments.patch(&self.name, &params, &patch).await?;
            }
        }
        Ok(true)
    }
}

async fn wait_for<F, Fut>(what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let started = Instant::now();
    loop {
        // The API server or the cloud may be briefly unreachable: that is not the answer.
        if let Ok(true) = check().await {
            return Ok(());
        }
        if started.elapsed() > PHASE_TIMEOUT {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn secret_names(client: &Client) -> Result<Vec<String>> {
    Ok(Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .list_metadata(&ListParams::default())
        .await?
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect())
}

/// Objects of the cluster's kinds still in the namespace, by kind.
async fn leftovers(client: &Client) -> Result<Vec<(String, Vec<String>)>> {
    async fn names<K>(client: &Client) -> Result<(String, Vec<String>)>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let names = Api::<K>::namespaced(client.clone(), NAMESPACE)
            .list_metadata(&ListParams::default())
            .await?
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .collect();
        Ok((K::kind(&()).to_string(), names))
    }
    let all = vec![
        names::<Cluster>(client).await?,
        names::<InMemoryCluster>(client).await?,
        names::<MachineDeployment>(client).await?,
        names::<MachinePool>(client).await?,
        names::<InMemoryMachinePool>(client).await?,
        names::<capi_control_plane::api::KubeadmControlPlane>(client).await?,
        names::<MachineSet>(client).await?,
        names::<MachineHealthCheck>(client).await?,
        names::<Machine>(client).await?,
        names::<InMemoryMachine>(client).await?,
        names::<KubeadmConfig>(client).await?,
    ];
    Ok(all)
}

/// The spread of the machines' times to Running, in seconds.
struct Spread {
    median: f64,
    p90: f64,
    slowest: f64,
}

impl Spread {
    /// Of `times`, sorted shortest first.
    fn of(times: &[Duration]) -> Self {
        let at = |q: f64| {
            if times.is_empty() {
                return 0.0;
            }
            let index = ((times.len() - 1) as f64 * q).round() as usize;
            times[index.min(times.len() - 1)].as_secs_f64()
        };
        Self {
            median: at(0.5),
            p90: at(0.9),
            slowest: at(1.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_server_restart_and_the_lease_stall_come_between_the_first_two_kills() {
        use Disruption::*;
        assert_eq!(
            disruptions(3),
            [
                KillManager,
                RestartApiServer,
                StallLeaderLease,
                KillManager,
                KillManager
            ]
        );
        assert_eq!(disruptions(0), [RestartApiServer, StallLeaderLease]);
    }

    #[test]
    fn the_spread_names_the_median_the_90th_percentile_and_the_slowest() {
        let times: Vec<Duration> = (1..=10).map(Duration::from_secs).collect();
        let spread = Spread::of(&times);
        assert_eq!(
            (spread.median, spread.p90, spread.slowest),
            (6.0, 9.0, 10.0)
        );
        assert_eq!(Spread::of(&[]).slowest, 0.0);
    }

    #[test]
    fn a_phase_counts_the_faults_since_it_began() {
        let before = Faults {
            cloud_errors: 10,
            lost_create_responses: 1,
            conflicts: 4,
        };
        let after = Faults {
            cloud_errors: 25,
            lost_create_responses: 3,
            conflicts: 4,
        };
        let landed = after.since(before);
        assert_eq!(
            (
                landed.cloud_errors,
                landed.lost_create_responses,
                landed.conflicts
            ),
            (15, 2, 0)
        );
    }

    #[test]
    fn stages_grow_to_every_worker() {
        assert_eq!(stage_replicas(199, 5), [40, 80, 120, 160, 199]);
        assert_eq!(stage_replicas(19, 5), [4, 8, 12, 16, 19]);
        assert_eq!(stage_replicas(1, 5), [1, 1, 1, 1, 1]);
    }
}
