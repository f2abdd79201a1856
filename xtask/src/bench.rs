//! `cargo xtask bench`: scale scenarios measured on this machine, printed as a table and written as
//! JSON (`benches/results/<scenario>.json`, with the machine's CPU count and memory).
//!
//! Scenario **one cluster, N machines**: the cluster `capictl generate` renders from the built-in
//! in-memory template (1 control-plane machine, N − 1 workers in a MachineDeployment, kubeadm
//! bootstrap), zero simulated latency. The manager (`inmemory-manager --with-bootstrap
//! --with-core`, release build) runs as its own process, so its peak RSS and CPU seconds are its
//! own; the simulated cloud and its kubelets run in `inmemory-cloud`. Measured: time until every
//! Machine is Running; API requests by verb and resource from the management API server's own
//! `/metrics` (`apiserver_request_total`, after − before), and writes per machine; idle requests
//! per second and CPU after convergence; teardown time and requests.
//!
//! ```text
//! cargo xtask bench [--machines N] [--idle-seconds S] [--qps F] [--burst N] [--out DIR]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capi_core::api::{Cluster, Machine, MachinePhase};
use capi_testing::envtest::{Assets, ControlPlane};
use capi_testing::{install_crds, manifest};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use serde_json::json;

use crate::command::{run, step};
use crate::workspace_root;

const NAMESPACE: &str = "bench";
const CLUSTER: &str = "scale";
/// The longest any one phase may take before the run is declared failed.
const PHASE_TIMEOUT: Duration = Duration::from_secs(3600);

/// What the command line sets.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    machines: u32,
    idle_seconds: u64,
    qps: f64,
    burst: u32,
    out: PathBuf,
}

impl Options {
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        let mut options = Self {
            machines: 1000,
            idle_seconds: 120,
            qps: 1000.0,
            burst: 2000,
            out: workspace_root().join("benches/results"),
        };
        let mut rest = args.iter();
        while let Some(flag) = rest.next() {
            let value = rest
                .next()
                .with_context(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--machines" => {
                    options.machines = value.parse().context("--machines expects a count")?;
                    if !(2..=10_000).contains(&options.machines) {
                        bail!("--machines is between 2 and 10000");
                    }
                }
                "--idle-seconds" => {
                    options.idle_seconds =
                        value.parse().context("--idle-seconds expects seconds")?
                }
                "--qps" => options.qps = value.parse().context("--qps expects a number")?,
                "--burst" => options.burst = value.parse().context("--burst expects a count")?,
                "--out" => options.out = PathBuf::from(value),
                other => bail!("unknown bench flag {other:?}"),
            }
        }
        Ok(options)
    }
}

pub(crate) fn run_bench(options: Options) -> Result<()> {
    step("Local control plane binaries (etcd, kube-apiserver)");
    let assets_dir = crate::envtest::ensure()?;
    step("Building the manager and the simulated cloud (release)");
    run(Command::new(env!("CARGO"))
        .current_dir(workspace_root())
        .args(["build", "--release", "-p", "provider-inmemory-bin"]))?;
    let bin_dir = target_dir().join("release");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(one_cluster(options, &assets_dir, &bin_dir))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process {
    /// Peak resident memory (MiB) and CPU seconds (user + system) so far, from `/proc`.
    fn usage(&self) -> Result<(f64, f64)> {
        let pid = self.0.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let peak_kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .context("no VmHWM in /proc/PID/status")?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| -> f64 { fields.get(i).and_then(|v| v.parse().ok()).unwrap_or(0.0) };
        let clock_ticks = clock_ticks_per_second();
        Ok((peak_kib / 1024.0, (ticks(11) + ticks(12)) / clock_ticks))
    }
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// `apiserver_request_total` by (verb, resource[/subresource]).
type Requests = BTreeMap<(String, String), f64>;

async fn request_counts(client: &Client) -> Result<Requests> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let mut counts = Requests::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| -> String {
            labels
                .split("\",")
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let resource = match label("subresource").as_str() {
            "" => label("resource"),
            sub => format!("{}/{sub}", label("resource")),
        };
        if resource.is_empty() {
            continue;
        }
        *counts.entry((label("verb"), resource)).or_default() +=
            value.parse::<f64>().unwrap_or(0.0);
    }
    Ok(counts)
}

fn difference(after: &Requests, before: &Requests) -> Requests {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "POST" | "PUT" | "PATCH" | "DELETE" | "DELETECOLLECTION"
    )
}

fn total(requests: &Requests, write: bool) -> f64 {
    requests
        .iter()
        .filter(|((verb, _), _)| is_write(verb) == write)
        .map(|(_, v)| v)
        .sum()
}

/// Spawns `inmemory-cloud` with its kubelets registering nodes in `workload`; returns it and its URL.
fn start_cloud(bin_dir: &Path, workload: &ControlPlane) -> Result<(Process, String)> {
    use std::io::BufRead;
    let mut child = Command::new(bin_dir.join("inmemory-cloud"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--boot-time-ms",
            "0",
            "--delete-time-ms",
            "0",
        ])
        .arg("--workload-kubeconfig")
        .arg(workload.kubeconfig_path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting inmemory-cloud")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let process = Process(child);
    let mut first = String::new();
    std::io::BufReader::new(stdout).read_line(&mut first)?;
    let url = first
        .trim()
        .strip_prefix("listening on ")
        .with_context(|| format!("inmemory-cloud said {first:?}"))?
        .to_string();
    Ok((process, url))
}

async fn one_cluster(options: Options, assets_dir: &Path, bin_dir: &Path) -> Result<()> {
    let machines_total = options.machines;
    let assets = Assets::in_dir(assets_dir)?;
    step("Starting the management cluster and a workload API server");
    let (management, workload) = tokio::try_join!(
        ControlPlane::start_with(&assets),
        ControlPlane::start_with(&assets)
    )?;
    let client = management.client().await?;
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(provider_inmemory::api::crds());
    install_crds(&client, &crds).await?;

    step("Starting inmemory-cloud (with simulated kubelets) and inmemory-manager as processes");
    let (_cloud, cloud_url) = start_cloud(bin_dir, &workload)?;
    let log_path =
        std::env::temp_dir().join(format!("capi-rs-bench-manager-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path)?;
    let manager = Process(
        Command::new(bin_dir.join("inmemory-manager"))
            .args(["--cloud-url", &cloud_url, "--with-bootstrap", "--with-core"])
            .args(["--http-addr", "127.0.0.1:0"])
            .args([
                "--qps",
                &options.qps.to_string(),
                "--burst",
                &options.burst.to_string(),
            ])
            .env("KUBECONFIG", management.kubeconfig_path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting inmemory-manager")?,
    );
    println!("    manager log: {}", log_path.display());

    // The cluster, as `capictl generate` renders it, with N − 1 workers.
    let inputs = capi_cli::generate::Inputs {
        cluster_name: CLUSTER.into(),
        namespace: Some(NAMESPACE.into()),
        kubernetes_version: Some("v1.33.0".into()),
        control_plane_machine_count: Some(1),
        worker_machine_count: Some(machines_total - 1),
        ..Default::default()
    };
    let yaml = capi_cli::generate::render(
        capi_cli::generate::built_in("inmemory", None)?,
        &inputs,
        |_| None,
    )?;
    let objects = manifest::parse(&yaml)?;
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    let kubeconfig: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{CLUSTER}-kubeconfig"),
                     "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
        "stringData": {"value": workload.kubeconfig_yaml()},
    }))?;
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &kubeconfig)
        .await?;

    // One watch (not repeated lists) follows the machines, so that the driver barely loads the
    // API server it measures.
    let machines: Api<Machine> = Api::namespaced(client.clone(), NAMESPACE);
    let (reader, writer) = reflector::store::<Machine>();
    let follow = tokio::spawn(
        reflector(
            writer,
            watcher(machines.clone(), watcher::Config::default()),
        )
        .applied_objects()
        .for_each(|_| async {}),
    );
    let running = || {
        reader
            .state()
            .iter()
            .filter(|m| {
                m.metadata.deletion_timestamp.is_none() && m.phase() == Some(MachinePhase::Running)
            })
            .count()
    };

    step(&format!(
        "Creating cluster {CLUSTER}: 1 control-plane machine + {} workers",
        machines_total - 1
    ));
    let before = request_counts(&client).await?;
    let (_, cpu_before) = manager.usage()?;
    let started = Instant::now();
    manifest::create_all(&client, NAMESPACE, &objects).await?;
    let mut last = Instant::now();
    loop {
        let done = running();
        if done == machines_total as usize {
            break;
        }
        if started.elapsed() > PHASE_TIMEOUT {
            bail!("only {done}/{machines_total} machines Running after {PHASE_TIMEOUT:?}");
        }
        if last.elapsed() > Duration::from_secs(5) {
            println!(
                "    {:>6.1}s  {done}/{machines_total} Running ({} machines exist)",
                started.elapsed().as_secs_f64(),
                reader.state().len()
            );
            last = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let create_seconds = started.elapsed().as_secs_f64();
    let create_requests = difference(&request_counts(&client).await?, &before);
    let (rss_after_create, cpu_after_create) = manager.usage()?;
    println!("    all {machines_total} Running after {create_seconds:.1}s");

    step(&format!(
        "Idle for {} s after convergence",
        options.idle_seconds
    ));
    let idle_before = request_counts(&client).await?;
    tokio::time::sleep(Duration::from_secs(options.idle_seconds)).await;
    let idle_requests = difference(&request_counts(&client).await?, &idle_before);
    let (_, cpu_after_idle) = manager.usage()?;
    let idle_seconds = options.idle_seconds.max(1) as f64;
    // Less our own two /metrics scrapes.
    let idle_rps =
        (total(&idle_requests, false) + total(&idle_requests, true) - 1.0).max(0.0) / idle_seconds;
    let idle_cpu_percent = (cpu_after_idle - cpu_after_create) / idle_seconds * 100.0;

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
        if gone && reader.state().is_empty() {
            break;
        }
        if started.elapsed() > PHASE_TIMEOUT {
            bail!("the cluster is not gone after {PHASE_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let teardown_seconds = started.elapsed().as_secs_f64();
    let teardown_requests = difference(&request_counts(&client).await?, &teardown_before);
    let (peak_rss, cpu_end) = manager.usage()?;
    follow.abort();
    let leftover = machines.list(&ListParams::default()).await?.items.len();

    // The table.
    let n = f64::from(machines_total);
    let writes = total(&create_requests, true);
    step(&format!("Results: one cluster, {machines_total} machines"));
    let rows: Vec<(String, String)> = vec![
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
        (
            "idle requests per second".into(),
            format!("{idle_rps:.2} over {} s", options.idle_seconds),
        ),
        (
            "idle manager CPU".into(),
            format!("{idle_cpu_percent:.2} %"),
        ),
        ("teardown time".into(), format!("{teardown_seconds:.1} s")),
        (
            "teardown API writes".into(),
            format!("{:.0}", total(&teardown_requests, true)),
        ),
        ("machines left after teardown".into(), leftover.to_string()),
    ];
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in &rows {
        println!("    {k:<width$}  {v}");
    }
    println!("\n    writes by verb and resource (create → Running):");
    for ((verb, resource), count) in create_requests.iter().filter(|((v, _), _)| is_write(v)) {
        println!(
            "      {verb:<7} {resource:<45} {count:>8.0}  ({:.2}/machine)",
            count / n
        );
    }

    let as_json = |r: &Requests| -> serde_json::Value {
        r.iter()
            .map(|((verb, resource), count)| json!({"verb": verb, "resource": resource, "count": count}))
            .collect()
    };
    let result = json!({
        "scenario": "one-cluster",
        "machines": machines_total,
        "date": jiff::Timestamp::now().to_string(),
        "command": format!("cargo xtask bench --machines {machines_total} --idle-seconds {} --qps {} --burst {}",
                           options.idle_seconds, options.qps, options.burst),
        "host": host(),
        "manager": {"qps": options.qps, "burst": options.burst, "concurrency": 16, "build": "release"},
        "create": {"seconds": create_seconds, "writes": writes, "writes_per_machine": writes / n,
                   "reads": total(&create_requests, false), "manager_cpu_seconds": cpu_after_create - cpu_before,
                   "requests": as_json(&create_requests)},
        "idle": {"seconds": options.idle_seconds, "requests_per_second": idle_rps, "manager_cpu_percent": idle_cpu_percent,
                 "requests": as_json(&idle_requests)},
        "teardown": {"seconds": teardown_seconds, "writes": total(&teardown_requests, true),
                     "requests": as_json(&teardown_requests), "machines_left": leftover},
        "manager_peak_rss_mib": peak_rss,
        "manager_cpu_seconds_total": cpu_end,
    });
    std::fs::create_dir_all(&options.out)?;
    let path = options
        .out
        .join(format!("one-cluster-{machines_total}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&result)? + "\n")?;
    println!("\n    written: {}", path.display());
    if leftover != 0 {
        bail!("{leftover} machines left after teardown");
    }
    drop(manager);
    Ok(())
}

/// The machine the figures come from.
fn host() -> serde_json::Value {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map(|kib| kib / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    json!({"cpus": cpus, "memory_gib": (memory_gib * 10.0).round() / 10.0, "cpu_model": model})
}
