//! Scenario **one cluster, N machines** (and its variant **latency**): the cluster `capictl
//! generate` renders from the built-in in-memory template — 1 control-plane machine and N − 1
//! workers in a MachineDeployment, kubeadm bootstrap. Measured: time until every Machine is
//! Running; API requests by verb and resource from the management API server's own `/metrics`,
//! and writes per machine; the manager's CPU seconds and peak RSS; the writes that follow until
//! the manager is quiet (conditions written after the phase turned Running); idle requests per
//! second and CPU after that; teardown time and requests. With zero simulated latency the floor
//! program then performs the same unavoidable writes and the ratio is reported; with latency
//! (boot time ± jitter) the report says what bounded the run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use capi_core::api::{Cluster, Machine, MachinePhase};
use capi_testing::manifest;
use futures::StreamExt;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::measure::{self, Requests, difference, request_counts, total};
use super::rig::{CloudOptions, Rig};
use super::{Options, floor};
use crate::command::step;

const NAMESPACE: &str = "bench";
const CLUSTER: &str = "scale";
/// The longest any one phase may take before the run is declared failed.
pub(crate) const PHASE_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long without a write counts as settled (the in-memory workload has no periodic writes).
const SETTLE_QUIET: Duration = Duration::from_secs(5);
/// A manager still writing this long after convergence never settles: the run fails saying so.
const SETTLE_LIMIT: Duration = Duration::from_secs(300);

/// Which variant runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Variant {
    /// Zero simulated latency, then the floor program.
    Fast,
    /// Instances take `boot_ms` ± 20 % to boot (and as long to delete).
    Latency { boot_ms: u64 },
}

/// Runs the scenario; returns the summary row for the results table.
pub(crate) async fn run(options: &Options, variant: Variant) -> Result<serde_json::Value> {
    let machines_total = options.machines;
    let (scenario, cloud) = match variant {
        Variant::Fast => ("one-cluster", CloudOptions::default()),
        Variant::Latency { boot_ms } => (
            "latency",
            CloudOptions {
                boot_ms,
                delete_ms: boot_ms / 2,
                jitter: 0.2,
                ..CloudOptions::default()
            },
        ),
    };
    step(&format!(
        "Scenario {scenario}: starting the management cluster, a workload API server, inmemory-cloud (boot {} ms ± {:.0} %)",
        cloud.boot_ms,
        cloud.jitter * 100.0
    ));
    let mut rig = Rig::start(
        &options.assets_dir,
        &options.bin_dir,
        &cloud,
        options.manager.clone(),
        NAMESPACE,
    )
    .await?;
    let client = rig.client.clone();
    rig.start_manager()?;

    let objects = rig
        .generated_cluster(CLUSTER, NAMESPACE, machines_total)
        .await?;

    let machines: Api<Machine> = Api::namespaced(client.clone(), NAMESPACE);
    let follower = MachineFollower::start(machines.clone());

    step(&format!(
        "Creating cluster {CLUSTER}: 1 control-plane machine + {} workers",
        machines_total - 1
    ));
    let before = request_counts(&client).await?;
    let (_, cpu_before) = rig.manager()?.usage()?;
    let started = Instant::now();
    manifest::create_all(&client, NAMESPACE, &objects).await?;
    follower
        .wait_until(started, machines_total as usize)
        .await?;
    let create_seconds = started.elapsed().as_secs_f64();
    let create_requests = difference(&request_counts(&client).await?, &before);
    let (rss_after_create, cpu_after_create) = rig.manager()?.usage()?;
    let peak_building = follower.peak_provisioning();
    println!("    all {machines_total} Running after {create_seconds:.1}s");

    step("Waiting until the manager stops writing");
    let settle = measure::wait_until_quiet(&client, SETTLE_QUIET, SETTLE_LIMIT).await?;
    println!(
        "    quiet {:.1} s after all Running ({:.0} writes meanwhile)",
        settle.seconds,
        total(&settle.requests, true)
    );
    rig.check_provider_status(&client, NAMESPACE).await?;

    let idle = if options.idle_seconds > 0 {
        step(&format!(
            "Idle for {} s after the manager went quiet",
            options.idle_seconds
        ));
        Some(measure_idle(&rig, options.idle_seconds).await?)
    } else {
        None
    };

    step(&format!("Deleting cluster {CLUSTER}"));
    let teardown_before = request_counts(&client).await?;
    let started = Instant::now();
    Api::<Cluster>::namespaced(client.clone(), NAMESPACE)
        .delete(CLUSTER, &DeleteParams::default())
        .await?;
    loop {
        let gone = Api::<Cluster>::namespaced(client.clone(), NAMESPACE)
            .get_opt(CLUSTER)
            .await?
            .is_none();
        if gone && follower.count() == 0 {
            break;
        }
        if started.elapsed() > PHASE_TIMEOUT {
            bail!("the cluster is not gone after {PHASE_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let teardown_seconds = started.elapsed().as_secs_f64();
    let teardown_requests = difference(&request_counts(&client).await?, &teardown_before);
    let (peak_rss, cpu_end) = rig.manager()?.usage()?;
    drop(follower);
    let leftover_machines = machines.list(&ListParams::default()).await?.items.len();
    let leftover_instances = rig.inspect().await?.instances.len();
    rig.kill_manager();

    let n = f64::from(machines_total);
    let writes = total(&create_requests, true);
    let floor = match variant {
        Variant::Fast => Some(floor::run(&rig, options, machines_total).await?),
        Variant::Latency { .. } => None,
    };

    step(&format!(
        "Results: {scenario}, one cluster, {machines_total} machines"
    ));
    let mut rows: Vec<(String, String)> = vec![
        (
            "time to all Running".into(),
            format!("{create_seconds:.1} s"),
        ),
        (
            "machines per second".into(),
            format!("{:.1}", n / create_seconds),
        ),
        (
            "API writes (create → Running)".into(),
            format!("{writes:.0}"),
        ),
        (
            "API writes per machine".into(),
            format!("{:.2}", writes / n),
        ),
        (
            "API reads (create → Running)".into(),
            format!("{:.0}", total(&create_requests, false)),
        ),
        (
            "manager CPU (create → Running)".into(),
            format!("{:.1} s", cpu_after_create - cpu_before),
        ),
        (
            "manager peak RSS".into(),
            format!("{peak_rss:.1} MiB (after create: {rss_after_create:.1} MiB)"),
        ),
    ];
    let settle_writes = total(&settle.requests, true);
    rows.push((
        "writes after all Running, until quiet".into(),
        format!(
            "{settle_writes:.0} over {:.1} s ({:.2}/machine)",
            settle.seconds,
            settle_writes / n
        ),
    ));
    if let Some(idle) = &idle {
        rows.push((
            "idle requests per second".into(),
            format!(
                "{:.2} over {} s ({:.2} without the API server's own upkeep)",
                idle.requests_per_second, idle.seconds, idle.manager_requests_per_second
            ),
        ));
        rows.push((
            "idle manager CPU".into(),
            format!("{:.2} %", idle.cpu_percent),
        ));
    }
    rows.extend([
        ("teardown time".into(), format!("{teardown_seconds:.1} s")),
        (
            "teardown API writes".into(),
            format!("{:.0}", total(&teardown_requests, true)),
        ),
        (
            "left after teardown".into(),
            format!("{leftover_machines} machines, {leftover_instances} instances"),
        ),
    ]);
    if let Some(floor) = &floor {
        rows.push((
            "floor program (same writes)".into(),
            format!("{:.1} s for {:.0} writes", floor.seconds, floor.writes),
        ));
        rows.push((
            "manager time ÷ floor time".into(),
            format!("{:.2}", create_seconds / floor.seconds),
        ));
    }
    if let Variant::Latency { boot_ms } = variant {
        let concurrency = options.manager.concurrency;
        let waves = (n / f64::from(concurrency)).ceil();
        rows.push((
            "most machines provisioning at once".into(),
            peak_building.to_string(),
        ));
        rows.push((
            "bound if creates were serialized per worker".into(),
            format!(
                "{:.0} s ({waves} waves of {concurrency} × {:.1} s boot)",
                waves * boot_ms as f64 / 1000.0,
                boot_ms as f64 / 1000.0
            ),
        ));
    }
    println!("    {}", options.manager.describe());
    measure::print_table(&rows);
    measure::print_writes(&create_requests, n, "machine");

    let result = json!({
        "scenario": scenario,
        "machines": machines_total,
        "date": jiff::Timestamp::now().to_string(),
        "command": options.command_line(),
        "host": measure::host(),
        "cloud": {"boot_ms": cloud.boot_ms, "delete_ms": cloud.delete_ms, "jitter": cloud.jitter},
        "manager": options.manager.json(),
        "create": {"seconds": create_seconds, "writes": writes, "writes_per_machine": writes / n,
                   "reads": total(&create_requests, false), "manager_cpu_seconds": cpu_after_create - cpu_before,
                   "peak_provisioning": peak_building,
                   "requests": measure::requests_json(&create_requests)},
        "settle": {"seconds": settle.seconds, "writes": settle_writes, "writes_per_machine": settle_writes / n,
                   "requests": measure::requests_json(&settle.requests)},
        "idle": idle.as_ref().map(|i| json!({"seconds": i.seconds, "requests_per_second": i.requests_per_second,
                 "manager_requests_per_second": i.manager_requests_per_second,
                 "manager_cpu_percent": i.cpu_percent, "requests": measure::requests_json(&i.requests)})),
        "teardown": {"seconds": teardown_seconds, "writes": total(&teardown_requests, true),
                     "requests": measure::requests_json(&teardown_requests),
                     "machines_left": leftover_machines, "instances_left": leftover_instances},
        "floor": floor.as_ref().map(|f| json!({"seconds": f.seconds, "writes": f.writes,
                  "ratio": create_seconds / f.seconds, "writes_per_machine": f.writes / n})),
        "manager_peak_rss_mib": peak_rss,
        "manager_cpu_seconds_total": cpu_end,
    });
    measure::write_result(
        &options.out,
        &format!("{scenario}-{machines_total}.json"),
        &result,
    )?;
    if leftover_machines != 0 || leftover_instances != 0 {
        bail!(
            "{leftover_machines} machines and {leftover_instances} instances left after teardown"
        );
    }
    Ok(result)
}

/// Requests and manager CPU while nothing changes.
pub(crate) struct Idle {
    pub(crate) seconds: u64,
    /// Every request the API server counted for a resource (non-resource paths such as our own
    /// `/metrics` scrape are not counted).
    pub(crate) requests_per_second: f64,
    /// Less the API server's own upkeep ([`measure::is_upkeep`]): what the manager asked.
    pub(crate) manager_requests_per_second: f64,
    pub(crate) cpu_percent: f64,
    pub(crate) requests: Requests,
}

/// Watches the management API server's request counters and the manager's CPU for `seconds`.
pub(crate) async fn measure_idle(rig: &Rig, seconds: u64) -> Result<Idle> {
    let before = request_counts(&rig.client).await?;
    let (_, cpu_start) = rig.manager()?.usage()?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let requests = difference(&request_counts(&rig.client).await?, &before);
    let (_, cpu_end) = rig.manager()?.usage()?;
    let span = seconds.max(1) as f64;
    let count = total(&requests, false) + total(&requests, true);
    let upkeep: f64 = requests
        .iter()
        .filter(|((_, resource), _)| measure::is_upkeep(resource))
        .map(|(_, v)| v)
        .sum();
    Ok(Idle {
        seconds,
        requests_per_second: count / span,
        manager_requests_per_second: (count - upkeep) / span,
        cpu_percent: (cpu_end - cpu_start) / span * 100.0,
        requests,
    })
}

/// Follows Machines with one watch (not repeated lists), so that the driver barely loads the API
/// server it measures; stops when dropped.
pub(crate) struct MachineFollower {
    reader: reflector::Store<Machine>,
    task: tokio::task::JoinHandle<()>,
    peak_provisioning: std::sync::atomic::AtomicUsize,
    seen: Arc<std::sync::Mutex<Sightings>>,
}

/// By Machine name: when the follower first saw it, and first saw it Running.
type Sightings = HashMap<String, (Instant, Option<Instant>)>;

impl MachineFollower {
    pub(crate) fn start(machines: Api<Machine>) -> Self {
        let (reader, writer) = reflector::store::<Machine>();
        let seen: Arc<std::sync::Mutex<Sightings>> = Arc::default();
        let noted = Arc::clone(&seen);
        let task = tokio::spawn(
            reflector(writer, watcher(machines, watcher::Config::default()))
                .backoff(capi_actuator::retry::WatchBackoff::default())
                .applied_objects()
                .for_each(move |machine| {
                    if let Ok(machine) = machine {
                        let now = Instant::now();
                        let mut seen = noted.lock().unwrap_or_else(|p| p.into_inner());
                        let entry = seen.entry(machine.name_any()).or_insert((now, None));
                        if entry.1.is_none() && machine.phase() == Some(MachinePhase::Running) {
                            entry.1 = Some(now);
                        }
                    }
                    std::future::ready(())
                }),
        );
        Self {
            reader,
            task,
            peak_provisioning: std::sync::atomic::AtomicUsize::new(0),
            seen,
        }
    }

    /// How long each Machine that reached Running took, from when it was first seen, shortest
    /// first.
    pub(crate) fn times_to_running(&self) -> Vec<Duration> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut times: Vec<Duration> = seen
            .values()
            .filter_map(|(first, running)| running.map(|r| r.duration_since(*first)))
            .collect();
        times.sort();
        times
    }

    /// Machines that exist now.
    pub(crate) fn count(&self) -> usize {
        self.reader.state().len()
    }

    /// Machines Running now (and not deleting).
    pub(crate) fn running(&self) -> usize {
        self.in_phase(MachinePhase::Running)
    }

    fn in_phase(&self, phase: MachinePhase) -> usize {
        self.reader
            .state()
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none() && m.phase() == Some(phase))
            .count()
    }

    /// The most Machines seen in phase Provisioning at once while [`Self::wait_until`] waited
    /// (sampled every 100 ms).
    pub(crate) fn peak_provisioning(&self) -> usize {
        self.peak_provisioning
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until `want` Machines are Running, printing progress every 5 s.
    pub(crate) async fn wait_until(&self, started: Instant, want: usize) -> Result<()> {
        let mut last = Instant::now();
        loop {
            let done = self.running();
            if done == want {
                return Ok(());
            }
            self.peak_provisioning.fetch_max(
                self.in_phase(MachinePhase::Provisioning),
                std::sync::atomic::Ordering::Relaxed,
            );
            if started.elapsed() > PHASE_TIMEOUT {
                bail!("only {done}/{want} machines Running after {PHASE_TIMEOUT:?}");
            }
            if last.elapsed() > Duration::from_secs(5) {
                println!(
                    "    {:>6.1}s  {done}/{want} Running ({} machines exist)",
                    started.elapsed().as_secs_f64(),
                    self.count()
                );
                last = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for MachineFollower {
    fn drop(&mut self) {
        self.task.abort();
    }
}
