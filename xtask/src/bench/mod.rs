//! `cargo xtask bench`: scale scenarios measured on this machine, each printed as a table and
//! written as JSON (`benches/results/<scenario>-<size>.json`, with the machine's CPU count and
//! memory). The manager and the simulated cloud are release builds running as their own processes
//! against the local control plane.
//!
//! ```text
//! cargo xtask bench [all|one-cluster|clusters|latency]... [--machines N] [--clusters N]
//!                   [--boot-ms MS] [--idle-seconds S] [--qps F] [--burst N] [--concurrency N]
//!                   [--out DIR]
//! ```
//!
//! - `one-cluster` ([`one_cluster`]): one cluster of N machines (default 1000, up to 10 000), zero
//!   latency; idle requests and CPU afterwards; then the floor program ([`floor`]).
//! - `clusters` ([`clusters`]): N single-node clusters (default 1000).
//! - `latency`: one cluster of N machines whose instances take `--boot-ms` (default 10 000) ± 20 %
//!   to boot.
//!
//! [`rig`] starts the processes; [`measure`] reads the figures.

mod clusters;
mod floor;
pub(crate) mod measure;
pub(crate) mod one_cluster;
pub(crate) mod rig;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::command::{run, step};
use crate::workspace_root;
use one_cluster::Variant;
use rig::ManagerOptions;

/// The scenarios, in the order `all` runs them.
const SCENARIOS: [&str; 3] = ["one-cluster", "clusters", "latency"];

/// What the command line sets.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    scenarios: Vec<String>,
    machines: u32,
    clusters: u32,
    boot_ms: u64,
    idle_seconds: u64,
    manager: ManagerOptions,
    out: PathBuf,
    assets_dir: PathBuf,
    bin_dir: PathBuf,
    args: Vec<String>,
}

impl Options {
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        let mut options = Self {
            scenarios: Vec::new(),
            machines: 1000,
            clusters: 1000,
            boot_ms: 10_000,
            idle_seconds: 120,
            manager: ManagerOptions {
                qps: 1000.0,
                burst: 2000,
                concurrency: 16,
            },
            out: workspace_root().join("benches/results"),
            assets_dir: PathBuf::new(),
            bin_dir: PathBuf::new(),
            args: args.to_vec(),
        };
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            if !arg.starts_with("--") {
                match arg.as_str() {
                    "all" => options.scenarios.extend(SCENARIOS.map(String::from)),
                    s if SCENARIOS.contains(&s) => options.scenarios.push(s.to_string()),
                    other => bail!(
                        "unknown scenario {other:?}; one of all, {}",
                        SCENARIOS.join(", ")
                    ),
                }
                continue;
            }
            let value = rest
                .next()
                .with_context(|| format!("{arg} needs a value"))?;
            match arg.as_str() {
                "--machines" => {
                    options.machines = value.parse().context("--machines expects a count")?;
                    if !(2..=10_000).contains(&options.machines) {
                        bail!("--machines is between 2 and 10000");
                    }
                }
                "--clusters" => {
                    options.clusters = value.parse().context("--clusters expects a count")?;
                    if !(1..=10_000).contains(&options.clusters) {
                        bail!("--clusters is between 1 and 10000");
                    }
                }
                "--boot-ms" => {
                    options.boot_ms = value.parse().context("--boot-ms expects milliseconds")?
                }
                "--idle-seconds" => {
                    options.idle_seconds =
                        value.parse().context("--idle-seconds expects seconds")?
                }
                "--qps" => {
                    options.manager.qps = value.parse().context("--qps expects a number")?;
                    if !(options.manager.qps.is_finite() && options.manager.qps > 0.0) {
                        bail!("--qps must be positive");
                    }
                }
                "--burst" => {
                    options.manager.burst = value.parse().context("--burst expects a count")?;
                    if options.manager.burst == 0 {
                        bail!("--burst must be positive");
                    }
                }
                "--concurrency" => {
                    options.manager.concurrency =
                        value.parse().context("--concurrency expects a count")?;
                    if options.manager.concurrency == 0 {
                        bail!("--concurrency must be positive");
                    }
                }
                "--out" => options.out = PathBuf::from(value),
                other => bail!("unknown bench flag {other:?}"),
            }
        }
        if options.scenarios.is_empty() {
            options.scenarios.push("one-cluster".into());
        }
        Ok(options)
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
    step("Local control plane binaries (etcd, kube-apiserver)");
    options.assets_dir = crate::envtest::ensure()?;
    step("Building the manager and the simulated cloud (release)");
    options.bin_dir = build_release_binaries()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut summary = Vec::new();
    for scenario in options.scenarios.clone() {
        let result = runtime.block_on(async {
            match scenario.as_str() {
                "one-cluster" => one_cluster::run(&options, Variant::Fast).await,
                "latency" => {
                    let boot_ms = options.boot_ms;
                    one_cluster::run(&options, Variant::Latency { boot_ms }).await
                }
                _ => clusters::run(&options).await,
            }
        })?;
        summary.push((scenario, result));
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
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    match result["scenario"].as_str() {
        Some("clusters") => format!(
            "{} clusters Running in {:.1} s ({:.1}× faster than upstream's anchor), {:.1} writes/cluster",
            result["clusters"],
            f(&result["seconds"]),
            f(&result["upstream_ratio"]),
            f(&result["writes_per_cluster"])
        ),
        _ => format!(
            "{} machines Running in {:.1} s, {:.1} writes/machine{}",
            result["machines"],
            f(&result["create"]["seconds"]),
            f(&result["create"]["writes_per_machine"]),
            match result["floor"]["ratio"].as_f64() {
                Some(ratio) => format!(", {ratio:.2}× the floor"),
                None => String::new(),
            }
        ),
    }
}

/// Builds `inmemory-manager` and `inmemory-cloud` in release mode; returns where they are.
pub(crate) fn build_release_binaries() -> Result<PathBuf> {
    run(Command::new(env!("CARGO"))
        .current_dir(workspace_root())
        .args(["build", "--release", "-p", "provider-inmemory-bin"]))?;
    Ok(target_dir().join("release"))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}
