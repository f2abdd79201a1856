//! `cargo xtask bench`: scale scenarios measured on this machine, each printed as a table and
//! written as JSON (`benches/results/<scenario>-<size>.json`, with the machine's CPU count and
//! memory). The manager and the simulated cloud run as their own processes against the local
//! control plane, release builds unless `--build debug` is given (CI's, whose figures are not
//! judged; the build is recorded with the results).
//!
//! ```text
//! cargo xtask bench report [--check]
//! cargo xtask bench [all|one-cluster|clusters|latency|pool]... [--machines N] [--clusters N]
//!                   [--boot-ms MS] [--idle-seconds S] [--qps F] [--burst N] [--concurrency N]
//!                   [--no-leader-election] [--stack capi-rs|upstream]... [--rounds N]
//!                   [--build release|debug] [--out DIR] [--time-limit S] [--audit]
//! ```
//!
//! Every scenario but `pool` runs **side by side** ([`side_by_side`]): this workspace's stack and
//! upstream Cluster API v1.14's ([`stack`]), one after the other on a fresh control plane each,
//! A-B-A-B when the size allows (`--rounds`), at the same QPS, burst and reconciles at once per
//! kind; the table gives both stacks' figures and their ratios. capi-rs's manager runs at its
//! shipped settings (QPS, burst, concurrency, leader election on) unless told otherwise, and every
//! result says which settings it was taken at.
//!
//! - `one-cluster` ([`one_cluster`]): one cluster of N machines (default 1000, up to 10 000), zero
//!   latency; for capi-rs also idle requests (management and workload API servers, cloud) and CPU
//!   over two resync periods afterwards, and the floor program ([`floor`]).
//! - `clusters` ([`clusters`]): N single-node clusters (default 1000), KubeadmControlPlane of 1;
//!   for capi-rs also its floor program ([`floor::clusters`]).
//! - `latency`: one cluster of N machines whose instances take `--boot-ms` (default 10 000) ± 20 %
//!   to boot.
//! - `pool` ([`pool`]): one MachinePool of N instances (default 1000) beside one
//!   MachineDeployment of N machines, each cluster with a KubeadmControlPlane of 1, on capi-rs's
//!   stack only: upstream's in-memory provider has no pool. In the same JSON: time to every
//!   instance running, writes per instance, peak RSS, of both.
//!
//! `all` runs every scenario above, `pool` included: `all` means every measurement of a scale
//! this workspace ships for, and a pool is one; only the pool's has no upstream half. With `all`,
//! `--machines` is both the one-cluster scenario's machines and the pool's instances.
//!
//! A stack's round that has not converged after `--time-limit` seconds (and then, separately, not
//! torn down after as long) is stopped and recorded as far as it got: machines Running and
//! clusters Available over time, its times lower bounds; the run goes on. (What is not a phase of
//! the build or the teardown still fails the run: a stack that never goes quiet before its clock
//! starts or after converging, and instances left in the simulated cloud.) The pool scenario, on
//! capi-rs's stack alone, fails at the limit instead: it has no other stack to wait for. `--audit` has each
//! round's API server write an audit log and records one cluster's requests ([`audit`]).
//!
//! [`rig`] starts capi-rs's processes; [`measure`] reads the figures; [`chart`] draws each
//! result as an SVG beside its JSON; `report` ([`report`]) writes `benches/README.md` from the
//! committed results (`--check`: fails when it is stale) and runs nothing.

mod audit;
mod chart;
mod clusters;
mod floor;
pub(crate) mod measure;
pub(crate) mod one_cluster;
mod pool;
pub(crate) mod report;
pub(crate) mod rig;
mod side_by_side;
pub(crate) mod stack;

use std::path::PathBuf;

use anyhow::Result;

use crate::command::{run, step};
use crate::workspace_root;
use one_cluster::Variant;
use rig::{Build, ManagerOptions};
use stack::Stack;

/// A stack on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StackArg {
    /// This workspace's controllers.
    #[value(name = "capi-rs")]
    CapiRs,
    /// Upstream Cluster API v1.14 with CAPD's in-memory backend.
    Upstream,
}

/// Rounds per stack when `--rounds` is not given: two (A-B-A-B) up to this many machines.
const TWO_ROUNDS_UP_TO: u32 = 100;

/// A scenario on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Scenario {
    /// Every scenario, in the order below.
    All,
    /// One cluster of `--machines` machines, zero latency; idle figures; the floor program.
    OneCluster,
    /// `--clusters` single-node clusters.
    Clusters,
    /// One cluster of `--machines` machines whose instances take `--boot-ms` ± 20 % to boot.
    Latency,
    /// One MachinePool of `--machines` instances beside one MachineDeployment of as many
    /// machines (capi-rs only: upstream's in-memory provider has no pool).
    Pool,
    /// Runs nothing: writes benches/README.md from the committed results (`--check`: fails
    /// when it differs instead).
    Report,
}

impl Scenario {
    /// The scenarios, in the order `all` runs them.
    const EACH: [Self; 4] = [Self::OneCluster, Self::Clusters, Self::Latency, Self::Pool];

    fn name(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::OneCluster => "one-cluster",
            Self::Clusters => "clusters",
            Self::Latency => "latency",
            Self::Pool => "pool",
            Self::Report => "report",
        }
    }

    /// Whether upstream's stack takes part when asked for.
    fn runs_upstream(self) -> bool {
        !matches!(self, Self::Pool | Self::Report)
    }
}

/// `cargo xtask bench`'s command line.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// The scenarios to run, in order.
    #[arg(value_enum, default_value = "one-cluster")]
    scenarios: Vec<Scenario>,
    /// Machines of the one-cluster and latency scenarios; instances of the pool scenario's
    /// MachinePool (and machines of its MachineDeployment).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(2..=10_000))]
    machines: u32,
    /// Clusters of the clusters scenario.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    clusters: u32,
    /// How long an instance takes to boot in the latency scenario (± 20 %).
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    boot_ms: u64,
    /// How long idle requests and CPU are measured after the one-cluster build (0: not at all;
    /// default: two resync periods at their longest jitter, so that every object's resync falls
    /// in the window twice).
    #[arg(long, value_name = "S", default_value_t = two_resync_periods())]
    idle_seconds: u64,
    /// The manager's average API requests per second (default: the shipped one).
    #[arg(long, default_value_t = ManagerOptions::shipped().qps, value_parser = positive_number)]
    qps: f64,
    /// The manager's API request burst (default: the shipped one).
    #[arg(long, default_value_t = ManagerOptions::shipped().burst, value_parser = clap::value_parser!(u32).range(1..))]
    burst: u32,
    /// The manager's reconciles at once per kind (default: the shipped one).
    #[arg(long, default_value_t = ManagerOptions::shipped().concurrency, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// Run the manager without leader election (shipped: on).
    #[arg(long)]
    no_leader_election: bool,
    /// Which stacks run, in this order (default: capi-rs, then upstream).
    #[arg(long = "stack", value_enum)]
    stacks: Vec<StackArg>,
    /// How the manager and the simulated cloud are built (figures count only from `release`).
    #[arg(long, value_enum, default_value = "release")]
    build: Build,
    /// Rounds per stack (default: 2 up to 100 machines, else 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10))]
    rounds: Option<u32>,
    /// Where the JSON results go (default: benches/results).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// With `report`: fail when benches/README.md is not what the results give, write nothing.
    #[arg(long)]
    check: bool,
    /// How long a stack's round may build (and then tear down) before it is stopped: a stopped
    /// round records how far it got (machines Running and clusters Available over time) and
    /// its times are lower bounds; the run goes on with the next round (the pool scenario
    /// fails instead).
    #[arg(long, value_name = "S", default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..))]
    time_limit: u64,
    /// Each round's management API server writes an audit log; one cluster's requests during the
    /// create are printed and recorded with the round (the log costs the API server a write per
    /// request: an audited run's times are for finding requests, not for comparing).
    #[arg(long)]
    audit: bool,
}

/// Two of the reconcilers' resync periods, each at its longest jitter, in whole seconds.
fn two_resync_periods() -> u64 {
    let policy = capi_runtime::retry::RetryPolicy::default();
    (2.0 * policy.resync.as_secs_f64() * (1.0 + policy.jitter)).ceil() as u64
}

/// A positive, finite number.
pub(crate) fn positive_number(value: &str) -> Result<f64, String> {
    value
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
        .ok_or_else(|| "expected a positive number".to_string())
}

/// What a run works with: the command line, and what was built for it.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    scenarios: Vec<Scenario>,
    machines: u32,
    clusters: u32,
    boot_ms: u64,
    idle_seconds: u64,
    manager: ManagerOptions,
    stacks: Vec<Stack>,
    rounds: Option<u32>,
    out: PathBuf,
    check: bool,
    audit: bool,
    time_limit: std::time::Duration,
    assets_dir: PathBuf,
    bin_dir: PathBuf,
    args: Vec<String>,
}

impl Options {
    /// The options of `args`; `raw` is the command line as typed, recorded with the results.
    pub(crate) fn new(args: BenchArgs, raw: Vec<String>) -> Self {
        let mut scenarios = Vec::new();
        for scenario in args.scenarios {
            match scenario {
                Scenario::All => scenarios.extend(Scenario::EACH),
                one => scenarios.push(one),
            }
        }
        Self {
            scenarios,
            machines: args.machines,
            clusters: args.clusters,
            boot_ms: args.boot_ms,
            idle_seconds: args.idle_seconds,
            manager: ManagerOptions {
                qps: args.qps,
                burst: args.burst,
                concurrency: args.concurrency,
                leader_election: !args.no_leader_election,
                replicas: 1,
                build: args.build,
            },
            stacks: if args.stacks.is_empty() {
                vec![Stack::Ours, Stack::Upstream]
            } else {
                args.stacks
                    .iter()
                    .map(|s| match s {
                        StackArg::CapiRs => Stack::Ours,
                        StackArg::Upstream => Stack::Upstream,
                    })
                    .collect()
            },
            rounds: args.rounds,
            out: args
                .out
                .unwrap_or_else(|| workspace_root().join("benches/results")),
            check: args.check,
            audit: args.audit,
            time_limit: std::time::Duration::from_secs(args.time_limit),
            assets_dir: PathBuf::new(),
            bin_dir: PathBuf::new(),
            args: raw,
        }
    }

    /// Rounds per stack for a scenario of `machines` machines.
    fn rounds_for(&self, machines: u32) -> usize {
        self.rounds
            .unwrap_or(if machines <= TWO_ROUNDS_UP_TO { 2 } else { 1 }) as usize
    }

    /// The command that reproduces this run.
    fn command_line(&self) -> String {
        let mut line = "cargo xtask bench".to_string();
        for arg in &self.args {
            line.push(' ');
            line.push_str(arg);
        }
        line
    }
}

/// Builds what the scenarios run, then runs each in turn and prints a summary.
pub(crate) fn run_bench(mut options: Options) -> Result<()> {
    if options.scenarios.contains(&Scenario::Report) {
        anyhow::ensure!(
            options.scenarios.len() == 1,
            "`report` runs nothing else: give it alone"
        );
        step("benches/README.md from benches/results");
        return report::run(options.check);
    }
    step("Local control plane binaries (etcd, kube-apiserver)");
    options.assets_dir = crate::envtest::ensure_control_plane()?;
    step(&format!(
        "Building the manager and the simulated cloud ({})",
        options.manager.build.name()
    ));
    println!("    capi-rs at commit {}", crate::command::built_commit());
    options.bin_dir = build_binaries(options.manager.build)?;
    if options.stacks.contains(&Stack::Upstream)
        && options.scenarios.iter().any(|s| s.runs_upstream())
    {
        step("Upstream Cluster API (Go modules; cached by version)");
        crate::upstream::install()?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut summary = Vec::new();
    for scenario in options.scenarios.clone() {
        let result = runtime.block_on(async {
            match scenario {
                Scenario::Latency => {
                    let boot_ms = options.boot_ms;
                    one_cluster::run(&options, Variant::Latency { boot_ms }).await
                }
                Scenario::Clusters => clusters::run(&options).await,
                Scenario::Pool => pool::run(&options).await,
                Scenario::OneCluster | Scenario::All | Scenario::Report => {
                    one_cluster::run(&options, Variant::Fast).await
                }
            }
        })?;
        summary.push((scenario.name(), result));
    }
    if summary.len() > 1 {
        step("Summary");
        for (scenario, result) in &summary {
            println!("    {scenario:<12} {}", headline(result));
        }
    }
    Ok(())
}

/// One line per scenario for the summary.
fn headline(result: &serde_json::Value) -> String {
    let summary = &result["comparison"]["summary"];
    if result["scenario"] == "pool" {
        let kind = |kind: &str| {
            let s = &summary[kind];
            format!(
                "{kind}: all running in {:.1} s, {:.2} writes/instance, manager peak RSS {:.0} MiB",
                s["seconds_to_all_instances_running"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                s["writes_per_machine"].as_f64().unwrap_or(f64::NAN),
                s["controllers_peak_rss_mib"].as_f64().unwrap_or(f64::NAN)
            )
        };
        return format!(
            "{} instances — {}; {}",
            result["instances"],
            kind("MachinePool"),
            kind("MachineDeployment")
        );
    }
    let ratios = &result["comparison"]["ratios_upstream_over_capi_rs"];
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    let stack = |name: &str| {
        let s = &summary[name];
        if s.is_null() {
            return format!("{name}: not run");
        }
        format!(
            "{name}: all Running in {:.1} s, all Available in {:.1} s, {:.2} writes/machine",
            f(&s["seconds_to_all_machines_running"]),
            f(&s["seconds_to_all_clusters_available"]),
            f(&s["writes_per_machine"])
        )
    };
    let mut line = format!(
        "{} machines in {} cluster(s) — {}; {}",
        result["machines"],
        result["clusters"],
        stack("capi-rs"),
        stack("upstream")
    );
    if let Some(ratio) = ratios["seconds_to_all_clusters_available"].as_f64() {
        let bound = match result["comparison"]["ratio_bounds"]["seconds_to_all_clusters_available"]
            .as_str()
        {
            Some(bound) => format!("{bound} "),
            None => String::new(),
        };
        line.push_str(&format!("; upstream takes {bound}{ratio:.2}× as long"));
    }
    line
}

/// Builds `inmemory-manager` and `inmemory-cloud` with `build`'s profile (debug: as the tests
/// build the whole workspace, protoc included); returns where they are.
pub(crate) fn build_binaries(build: Build) -> Result<PathBuf> {
    if build == Build::Debug {
        crate::test::ensure_protoc()?;
    }
    let (args, dir): (&[&str], &str) = match build {
        Build::Release => (
            &["build", "--release", "-p", "provider-inmemory-bin"],
            "release",
        ),
        Build::Debug => (&Build::DEBUG_AS_TESTED, "debug"),
    };
    run(&mut crate::command::cargo(args))?;
    Ok(crate::command::target_dir().join(dir))
}
