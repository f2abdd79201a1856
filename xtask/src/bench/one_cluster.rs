//! Scenario **one cluster, N machines** (and its variant **latency**), side by side
//! ([`side_by_side`]): the cluster `capictl generate` renders from the built-in in-memory
//! template — a KubeadmControlPlane of 1 and N − 1 workers in a MachineDeployment, kubeadm
//! bootstrap, a MachineHealthCheck — built by capi-rs's stack and by upstream's. capi-rs's first
//! round also measures the writes after convergence until quiet, idle requests and CPU, and (with
//! zero latency) then runs the floor program ([`floor`](super::floor)) on the same API server; with latency
//! (boot time ± jitter, the same for both stacks) the report says what bounded the run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use capi_core::api::{Machine, MachinePhase};
use futures::StreamExt;
use kube::Api;
use kube::ResourceExt;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

use super::Options;
use super::measure::{self, Requests, difference, request_counts, total};
use super::rig::Rig;
use super::side_by_side::{self, Extras, Shape};
use super::stack::{Boot, Workers};
use crate::command::step;

/// The longest any one phase may take before the run is declared failed.
pub(crate) const PHASE_TIMEOUT: Duration = Duration::from_secs(3600);

/// Which variant runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Variant {
    /// Zero simulated latency, then the floor program.
    Fast,
    /// Instances take `boot_ms` ± 20 % to boot.
    Latency { boot_ms: u64 },
}

/// Runs the scenario; returns its result.
pub(crate) async fn run(options: &Options, variant: Variant) -> Result<serde_json::Value> {
    let machines = options.machines;
    let (scenario, boot) = match variant {
        Variant::Fast => ("one-cluster", Boot::default()),
        Variant::Latency { boot_ms } => (
            "latency",
            Boot {
                ms: boot_ms,
                jitter: 0.2,
            },
        ),
    };
    let shape = Shape {
        clusters: 1,
        workers: machines - 1,
        workers_in: Workers::Deployment { health_check: true },
        owner_ready: false,
        boot,
    };
    let extras = Extras {
        settle: true,
        idle_seconds: options.idle_seconds,
        floor: (variant == Variant::Fast).then_some(side_by_side::FloorProgram::Machines),
    };
    let rounds = side_by_side::run_rounds(
        options,
        scenario,
        shape,
        extras,
        &options.stacks,
        options.rounds_for(machines),
    )
    .await?;

    step(&format!(
        "Results: {scenario}, one cluster of {machines} machines ({})",
        options.manager.describe()
    ));
    let comparison = side_by_side::compare(&rounds, &shape);
    let mut rows = Vec::new();
    let ours = rounds.iter().find(|r| r.stack == super::stack::Stack::Ours);
    if let Some(ours) = ours {
        let n = f64::from(machines);
        if let Some(settle) = &ours.settle {
            let writes = total(&settle.requests, true);
            rows.push((
                "capi-rs: writes after all Running, until quiet".to_string(),
                format!(
                    "{writes:.0} over {:.1} s ({:.2}/machine)",
                    settle.seconds,
                    writes / n
                ),
            ));
        }
        if let Some(idle) = &ours.idle {
            rows.push((
                "capi-rs: idle requests per second".into(),
                format!(
                    "{:.3} over {} s: management {:.3} (its own upkeep aside), workload {:.3}, cloud {:.3}; {:.3} per 1000 machines",
                    idle.all_per_second(),
                    idle.seconds,
                    idle.manager_requests_per_second,
                    idle.workload_requests_per_second,
                    idle.cloud_calls_per_second,
                    idle.all_per_second() * 1000.0 / n
                ),
            ));
            rows.push((
                "capi-rs: idle manager CPU".into(),
                format!("{:.2} %", idle.cpu_percent),
            ));
        }
        if let Some(floor) = &ours.floor {
            rows.push((
                "floor program (same limits)".into(),
                format!(
                    "{:.1} s for {:.0} writes ({:.2}/machine)",
                    floor.seconds,
                    floor.writes,
                    floor.writes / n
                ),
            ));
            rows.push((
                "capi-rs time ÷ floor time".into(),
                format!("{:.2}", ours.floor_ratio().unwrap_or(f64::NAN)),
            ));
        }
        if let Variant::Latency { boot_ms } = variant {
            let concurrency = options.manager.concurrency;
            let waves = (n / f64::from(concurrency)).ceil();
            rows.push((
                "bound if creates were serialized per worker".into(),
                format!(
                    "{:.0} s ({waves} waves of {concurrency} × {:.1} s boot)",
                    waves * boot_ms as f64 / 1000.0,
                    boot_ms as f64 / 1000.0
                ),
            ));
        }
    }
    println!();
    measure::print_table(&rows);

    let mut result = side_by_side::conditions(options, &shape, &rounds);
    result["scenario"] = json!(scenario);
    result["comparison"] = comparison;
    result["rounds"] = rounds.iter().map(|r| r.json(&shape)).collect();
    measure::write_result(
        &options.out,
        &format!("{scenario}-{machines}.json"),
        &result,
    )?;
    super::chart::draw(
        &options.out.join(format!("{scenario}-{machines}.svg")),
        &format!(
            "{scenario}: one cluster of {machines} machines, capi-rs and upstream Cluster API v1.14"
        ),
        &result,
    )?;
    Ok(result)
}

/// Requests and manager CPU while nothing changes.
pub(crate) struct Idle {
    pub(crate) seconds: u64,
    /// Every request the management API server counted for a resource (non-resource paths such
    /// as our own `/metrics` scrape are not counted).
    pub(crate) requests_per_second: f64,
    /// Less the API server's own upkeep ([`measure::is_upkeep`]): what the manager asked.
    pub(crate) manager_requests_per_second: f64,
    /// Requests to the workload API server (the simulated clusters' nodes and pods), its own
    /// upkeep aside: the manager's, and the simulated kubelets' own passes (an upper bound of
    /// the manager's).
    pub(crate) workload_requests_per_second: f64,
    /// Calls of the simulated cloud's API (all the manager's).
    pub(crate) cloud_calls_per_second: f64,
    pub(crate) cpu_percent: f64,
    pub(crate) requests: Requests,
}

impl Idle {
    /// Management, workload and cloud requests per second together.
    pub(crate) fn all_per_second(&self) -> f64 {
        self.manager_requests_per_second
            + self.workload_requests_per_second
            + self.cloud_calls_per_second
    }
}

/// Watches the management and workload API servers' request counters, the cloud's calls and the
/// manager's CPU for `seconds`.
pub(crate) async fn measure_idle(rig: &Rig, seconds: u64) -> Result<Idle> {
    let workload = rig.workload.client().await?;
    let upkeep = |requests: &Requests| -> f64 {
        requests
            .iter()
            .filter(|((_, resource), _)| measure::is_upkeep(resource))
            .map(|(_, v)| v)
            .sum()
    };
    let all = |requests: &Requests| total(requests, false) + total(requests, true);
    let before = request_counts(&rig.client).await?;
    let workload_before = request_counts(&workload).await?;
    let cloud_before = rig.inspect().await?.api_calls;
    let (_, cpu_start) = rig.manager()?.usage()?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let requests = difference(&request_counts(&rig.client).await?, &before);
    let workload_requests = difference(&request_counts(&workload).await?, &workload_before);
    let cloud_calls = rig.inspect().await?.api_calls.saturating_sub(cloud_before);
    let (_, cpu_end) = rig.manager()?.usage()?;
    let span = seconds.max(1) as f64;
    let count = all(&requests);
    Ok(Idle {
        seconds,
        requests_per_second: count / span,
        manager_requests_per_second: (count - upkeep(&requests)) / span,
        workload_requests_per_second: (all(&workload_requests) - upkeep(&workload_requests)) / span,
        cloud_calls_per_second: cloud_calls as f64 / span,
        cpu_percent: (cpu_end - cpu_start) / span * 100.0,
        requests,
    })
}

/// Follows Machines with one watch (not repeated lists), so that the driver barely loads the API
/// server it measures; stops when dropped.
pub(crate) struct MachineFollower {
    reader: reflector::Store<Machine>,
    task: tokio::task::JoinHandle<()>,
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
                .backoff(capi_runtime::retry::WatchBackoff::default())
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
        Self { reader, task, seen }
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
}

impl Drop for MachineFollower {
    fn drop(&mut self) {
        self.task.abort();
    }
}
