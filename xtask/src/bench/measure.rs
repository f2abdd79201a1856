//! What every scenario measures the same way: the API server's own request counters, a child
//! process's CPU and memory from `/proc`, the machine the figures come from, and the printed table.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::Client;
use serde_json::json;

/// `apiserver_request_total` by (verb, resource[/subresource]).
pub(crate) type Requests = BTreeMap<(String, String), f64>;

/// The API server's request counters now, from its `/metrics`, less those answered 409 Conflict
/// (see [`scrape`]).
pub(crate) async fn request_counts(client: &Client) -> Result<Requests> {
    Ok(scrape(client).await?.requests)
}

/// The API server's request counters at one moment, 409s apart.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scrape {
    /// Every request not answered 409 Conflict.
    pub(crate) requests: Requests,
    /// Requests answered 409 Conflict: a write against a stale `resourceVersion`, or a create
    /// of a name that exists.
    pub(crate) conflicts: Requests,
}

impl Scrape {
    /// The requests and conflicts made since `before`.
    pub(crate) fn since(&self, before: &Scrape) -> Scrape {
        Scrape {
            requests: difference(&self.requests, &before.requests),
            conflicts: difference(&self.conflicts, &before.conflicts),
        }
    }

    /// Every request counted, conflicts included, the API server's own upkeep aside.
    pub(crate) fn all_but_upkeep(&self) -> f64 {
        self.requests
            .iter()
            .chain(&self.conflicts)
            .filter(|((_, resource), _)| !is_upkeep(resource))
            .map(|(_, v)| v)
            .sum()
    }
}

/// Reads `apiserver_request_total` from the API server's `/metrics`, by (verb,
/// resource[/subresource]), with the requests answered 409 counted apart.
pub(crate) async fn scrape(client: &Client) -> Result<Scrape> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let mut scrape = Scrape::default();
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
        let counts = if label("code") == "409" {
            &mut scrape.conflicts
        } else {
            &mut scrape.requests
        };
        *counts.entry((label("verb"), resource)).or_default() +=
            value.parse::<f64>().unwrap_or(0.0);
    }
    Ok(scrape)
}

/// The requests made between two readings.
pub(crate) fn difference(after: &Requests, before: &Requests) -> Requests {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// Writes until the system went quiet, and how long that took.
pub(crate) struct Settle {
    /// From the call until the last write.
    pub(crate) seconds: f64,
    /// Every request from the call until quiet.
    pub(crate) requests: Requests,
}

/// Waits until nothing has been written for `quiet` (the API server's own upkeep aside,
/// [`is_upkeep`]) and returns what was requested meanwhile; fails after `limit`. A scenario's
/// "converged" moment (all Machines Running) comes before the last condition writes, so idle
/// figures are taken only after this.
pub(crate) async fn wait_until_quiet(
    client: &Client,
    quiet: Duration,
    limit: Duration,
) -> Result<Settle> {
    let started = Instant::now();
    let before = request_counts(client).await?;
    let writes = |counts: &Requests| -> f64 {
        counts
            .iter()
            .filter(|((verb, resource), _)| is_write(verb) && !is_upkeep(resource))
            .map(|(_, v)| v)
            .sum()
    };
    let mut last_writes = writes(&before);
    let mut last_change = started;
    let mut at_last_change = before.clone();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = request_counts(client).await?;
        let count = writes(&now);
        if count > last_writes {
            last_writes = count;
            last_change = Instant::now();
            at_last_change = now;
        } else if last_change.elapsed() >= quiet {
            return Ok(Settle {
                seconds: last_change.duration_since(started).as_secs_f64(),
                requests: difference(&at_last_change, &before),
            });
        }
        if started.elapsed() > limit {
            bail!("still writing {limit:?} after convergence");
        }
    }
}

/// Whether the API server requests `resource` itself to keep its own objects (the `kubernetes`
/// Service and endpoints, system namespaces, flow control, identity leases): nothing the manager
/// reads or writes.
pub(crate) fn is_upkeep(resource: &str) -> bool {
    matches!(
        resource,
        "endpoints"
            | "services"
            | "namespaces"
            | "flowschemas"
            | "prioritylevelconfigurations"
            | "leases"
    )
}

/// Whether `verb` (as `apiserver_request_total` names it) is a write: `APPLY` is a server-side
/// apply, a PATCH the counters name apart.
pub(crate) fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE" | "DELETECOLLECTION"
    )
}

/// All writes (`write`) or all reads among `requests`.
pub(crate) fn total(requests: &Requests, write: bool) -> f64 {
    requests
        .iter()
        .filter(|((verb, _), _)| is_write(verb) == write)
        .map(|(_, v)| v)
        .fold(0.0, |sum, v| sum + v)
}

/// `requests` as a JSON list of `{verb, resource, count}`.
pub(crate) fn requests_json(requests: &Requests) -> serde_json::Value {
    requests
        .iter()
        .map(|(k, count)| json!({"verb": k.0, "resource": k.1, "count": count}))
        .collect()
}

/// Prints `rows` as a two-column table.
pub(crate) fn print_table(rows: &[(String, String)]) {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        println!("    {k:<width$}  {v}");
    }
}

/// Writes `result` as pretty JSON to `dir/name` and says where.
pub(crate) fn write_result(dir: &Path, name: &str, result: &serde_json::Value) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(result)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!("\n    written: {}", path.display());
    Ok(())
}

/// Peak resident memory (MiB) and CPU seconds (user + system) so far of process `pid`, from
/// `/proc`.
pub(crate) fn usage(pid: u32) -> Result<(f64, f64)> {
    let peak_kib = status_kib(pid, "VmHWM:")?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> f64 { fields.get(i).and_then(|v| v.parse().ok()).unwrap_or(0.0) };
    Ok((
        peak_kib / 1024.0,
        (ticks(11) + ticks(12)) / clock_ticks_per_second(),
    ))
}

/// Process `pid`'s resident memory now (MiB, `VmRSS`): one read of `/proc/PID/status`.
pub(crate) fn resident(pid: u32) -> Result<f64> {
    Ok(status_kib(pid, "VmRSS:")? / 1024.0)
}

/// The value (KiB) of `field` (e.g. `VmHWM:`) in `/proc/PID/status`.
fn status_kib(pid: u32, field: &str) -> Result<f64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
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

/// The machine the figures come from: CPU count and model, memory.
pub(crate) fn host() -> serde_json::Value {
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
