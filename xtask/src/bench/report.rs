//! `cargo xtask bench report`: `benches/README.md`, generated from the committed results in
//! `benches/results/*.json`, so that no figure in a document is typed by hand.
//!
//! Every table says what its figures count and at which settings, from the result itself (its
//! `what_is_counted`, `settings`, `host`, `command` and commit). A result file this module does
//! not know the shape of is listed by name, never guessed at.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

use crate::workspace_root;

/// Where the report is written.
pub(crate) fn readme_path() -> PathBuf {
    workspace_root().join("benches").join("README.md")
}

/// Writes the report; with `check`, fails instead when the committed one differs.
pub(crate) fn run(check: bool) -> Result<()> {
    let report = generate(&workspace_root().join("benches").join("results"))?;
    let path = readme_path();
    if check {
        let committed = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        anyhow::ensure!(
            committed == report,
            "{} is not what `cargo xtask bench report` generates from benches/results: run it and commit the result",
            path.display()
        );
        println!("    {} is up to date", path.display());
        return Ok(());
    }
    std::fs::write(&path, report).with_context(|| format!("writing {}", path.display()))?;
    println!("    wrote {}", path.display());
    Ok(())
}

/// The side-by-side figures of a scenario, in the order of the table: key in the result's
/// `comparison.summary`, what it counts, how it is printed.
const SUMMARY_ROWS: [(&str, &str, Format); 10] = [
    (
        "seconds_to_all_machines_running",
        "seconds from the first object applied to every Machine `Running`",
        Format::Seconds,
    ),
    (
        "seconds_to_all_clusters_available",
        "seconds from the first object applied to every Cluster `Available`",
        Format::Seconds,
    ),
    (
        "writes_per_machine",
        "API writes per machine while building (create, update, patch, delete; 409s apart)",
        Format::Decimal,
    ),
    (
        "requests_per_machine",
        "API requests per machine while building (reads and writes)",
        Format::Decimal,
    ),
    (
        "conflicts_per_machine",
        "409 Conflict answers per machine while building",
        Format::Decimal,
    ),
    (
        "controllers_cpu_seconds",
        "CPU seconds of the controllers' processes over the build",
        Format::Decimal,
    ),
    (
        "controllers_peak_rss_mib",
        "peak RSS of the controllers' processes, MiB",
        Format::Decimal,
    ),
    (
        "all_processes_cpu_seconds",
        "CPU seconds of every process of the stack (controllers, simulated cloud, API servers)",
        Format::Decimal,
    ),
    (
        "teardown_seconds",
        "seconds from deleting the Clusters to nothing left",
        Format::Seconds,
    ),
    (
        "teardown_writes_per_machine",
        "API writes per machine while tearing down",
        Format::Decimal,
    ),
];

/// The pool scenario's figures, in the order of its table: key in each kind of workers'
/// `comparison.summary`, what it counts, how it is printed. Per instance: over every instance
/// of the run, the control-plane machine's included.
pub(crate) const POOL_ROWS: [(&str, &str, Format); 13] = [
    (
        "seconds_to_all_instances_running",
        "seconds from the first object applied to every instance running: its Machine `Running` (node found) and counted in the owner's `status.readyReplicas`",
        Format::Seconds,
    ),
    (
        "seconds_to_all_machines_running",
        "seconds to every Machine `Running`",
        Format::Seconds,
    ),
    (
        "seconds_to_owner_ready_replicas",
        "seconds to the owner's `status.readyReplicas` counting every worker",
        Format::Seconds,
    ),
    (
        "seconds_to_all_clusters_available",
        "seconds to the Cluster `Available`",
        Format::Seconds,
    ),
    (
        "writes_per_machine",
        "API writes per instance until all ran (create, update, patch, delete; 409s apart)",
        Format::Decimal,
    ),
    (
        "writes_until_quiet_per_machine",
        "API writes per instance until 5 s without a write",
        Format::Decimal,
    ),
    (
        "requests_per_machine",
        "API requests per instance until all ran (reads and writes)",
        Format::Decimal,
    ),
    (
        "conflicts_per_machine",
        "409 Conflict answers per instance until all ran",
        Format::Decimal,
    ),
    (
        "controllers_cpu_seconds",
        "CPU seconds of the manager until all ran",
        Format::Decimal,
    ),
    (
        "controllers_peak_rss_mib",
        "peak RSS of the manager over the round, MiB",
        Format::Decimal,
    ),
    (
        "all_processes_peak_rss_mib",
        "peak RSS over the round of every process (manager, simulated cloud, workload API server and etcd), summed, MiB",
        Format::Decimal,
    ),
    (
        "teardown_seconds",
        "seconds from deleting the Cluster to nothing left",
        Format::Seconds,
    ),
    (
        "teardown_writes_per_machine",
        "API writes per instance while tearing down",
        Format::Decimal,
    ),
];

/// How a figure is printed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Seconds,
    Decimal,
}

impl Format {
    /// `value` as the tables print it (`—` for none).
    pub(crate) fn show(self, value: Option<f64>) -> String {
        // Adding +0.0 turns a -0.0 (a float sum of nothing) into 0.0: never "-0.00".
        match (self, value.map(|v| v + 0.0)) {
            (_, None) => "—".to_string(),
            (Self::Seconds, Some(v)) => format!("{v:.1}"),
            (Self::Decimal, Some(v)) if v.abs() >= 100.0 => format!("{v:.0}"),
            (Self::Decimal, Some(v)) => format!("{v:.2}"),
        }
    }
}

/// The report for the results in `dir`.
pub(crate) fn generate(dir: &Path) -> Result<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let mut out = String::new();
    out.push_str(
        "# Benchmark results\n\n\
         <!-- Generated by `cargo xtask bench report` from benches/results/*.json; do not edit. -->\n\n\
         Each section is one committed result of `cargo xtask bench` or `cargo xtask chaos`, with the \
         command, the commit, the machine and the settings it ran at. Ratios are upstream's figure \
         over this workspace's, from the same run (in the pool scenario, the MachinePool's over the \
         MachineDeployment's). How to run them: `cargo xtask bench --help`, \
         `cargo xtask chaos --help`; the criterion micro-benchmarks: `cargo bench -p capi-benches`.\n",
    );
    let mut others = Vec::new();
    for path in &files {
        let name = file_name(path);
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            if path.extension().and_then(|e| e.to_str()) != Some("svg") {
                others.push(name);
            }
            continue;
        }
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let result: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        let chart = path.with_extension("svg");
        let chart = chart.is_file().then(|| file_name(&chart));
        match result["scenario"].as_str() {
            Some("chaos") => chaos(&mut out, &name, &result),
            Some("pool") => pool(&mut out, &name, chart.as_deref(), &result),
            Some(_) if result["comparison"]["summary"].is_object() => {
                side_by_side(&mut out, &name, chart.as_deref(), &result)
            }
            _ => others.push(name),
        }
    }
    if !others.is_empty() {
        out.push_str("\n## Other files\n\n");
        for name in others {
            let _ = writeln!(out, "- [`{name}`](results/{name})");
        }
    }
    Ok(out)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn number(value: &Value) -> Option<f64> {
    value.as_f64()
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "—".to_string(),
        other => other.to_string(),
    }
}

/// The header every section shares: the file, when, on what, by which command.
fn provenance(out: &mut String, name: &str, result: &Value) {
    let host = &result["host"];
    let _ = writeln!(
        out,
        "Result [`{name}`](results/{name}), {} on {} ({} CPUs, {} GiB); command `{}`.\n",
        text(&result["date"]),
        text(&host["cpu_model"]),
        text(&host["cpus"]),
        text(&host["memory_gib"]),
        text(&result["command"]),
    );
}

/// What ran, and at which settings: one line each.
fn stacks(out: &mut String, result: &Value) {
    for (stack, description) in result["stacks"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "- **{stack}**: {}", text(description));
    }
    for (stack, settings) in result["settings"].as_object().into_iter().flatten() {
        let shown: Vec<String> = settings
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(key, _)| !key.ends_with("_note"))
            .map(|(key, value)| format!("{key} {}", text(value)))
            .collect();
        let _ = writeln!(out, "- settings of {stack}: {}", shown.join(", "));
    }
}

fn side_by_side(out: &mut String, name: &str, chart: Option<&str>, result: &Value) {
    let _ = writeln!(
        out,
        "\n## {}: {} machine(s) in {} cluster(s)\n",
        text(&result["scenario"]),
        text(&result["machines"]),
        text(&result["clusters"]),
    );
    provenance(out, name, result);
    stacks(out, result);
    let _ = writeln!(out, "- counted: {}\n", text(&result["what_is_counted"]));

    let summary = &result["comparison"]["summary"];
    let ratios = &result["comparison"]["ratios_upstream_over_capi_rs"];
    out.push_str("| figure | capi-rs | upstream | upstream ÷ capi-rs |\n|---|---|---|---|\n");
    for (key, what, format) in SUMMARY_ROWS {
        // A time of a phase a stack's round was stopped in is a lower bound.
        let bounded = |stack: &str| {
            super::side_by_side::stopped_phase_of(key).is_some_and(|phase| {
                number(&summary[stack][format!("stopped_in_{phase}")]).is_some_and(|n| n > 0.0)
            })
        };
        let show = |stack: &str| {
            let value = number(&summary[stack][key]);
            match value {
                Some(_) if bounded(stack) => format!("≥ {}", format.show(value)),
                _ => format.show(value),
            }
        };
        let prefix = super::side_by_side::ratio_bound(bounded("capi-rs"), bounded("upstream"));
        let ratio = match (number(&ratios[key]), prefix) {
            (Some(r), Some(prefix)) => format!("{prefix}{r:.2}×"),
            _ => "—".to_string(),
        };
        let _ = writeln!(
            out,
            "| {what} | {} | {} | {ratio} |",
            show("capi-rs"),
            show("upstream"),
        );
    }
    for round in result["rounds"].as_array().into_iter().flatten() {
        let stop = &round["stopped"];
        if stop.is_object() {
            let _ = writeln!(
                out,
                "\n{} round {} was stopped at the time limit in its {} after {} s: {}",
                text(&round["stack"]),
                text(&round["round"]),
                text(&stop["phase"]),
                Format::Seconds.show(number(&stop["seconds"])),
                if stop["phase"] == "create" {
                    format!(
                        "{}/{} machines Running, {}/{} clusters Available (its timeline in the JSON).",
                        text(&stop["machines_running"]),
                        text(&stop["machines"]),
                        text(&stop["clusters_available"]),
                        text(&stop["clusters"])
                    )
                } else {
                    format!(
                        "{}/{} machines and {}/{} clusters left.",
                        text(&stop["machines_left"]),
                        text(&stop["machines"]),
                        text(&stop["clusters_left"]),
                        text(&stop["clusters"])
                    )
                }
            );
        }
    }
    let rounds = result["rounds"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let ours: Vec<&Value> = rounds.iter().filter(|r| r["stack"] == "capi-rs").collect();
    let floors: Vec<String> = ours
        .iter()
        .filter_map(|r| number(&r["floor"]["ratio"]))
        .map(|r| format!("{r:.2}×"))
        .collect();
    if !floors.is_empty() {
        let floor_writes: Vec<String> = ours
            .iter()
            .filter_map(|r| number(&r["floor"]["writes_per_machine"]))
            .map(|w| format!("{w:.2}"))
            .collect();
        let compared = match ours.first().map(|r| &r["floor"]["compared_with"]) {
            Some(Value::String(key)) if key == "seconds_to_all_clusters_available" => {
                "to every Cluster Available"
            }
            _ => "to every Machine Running",
        };
        let _ = writeln!(
            out,
            "\nThe floor (a program doing only the writes the contract requires, at the same limits, in \
             the same run): capi-rs took {} its time {compared}, per round; the floor wrote {} per machine.",
            floors.join(", "),
            floor_writes.join(", ")
        );
    }
    let idle: Vec<String> = ours
        .iter()
        .filter(|r| number(&r["idle"]["seconds"]).is_some_and(|s| s > 0.0))
        .map(|r| {
            let idle = &r["idle"];
            format!(
                "over {} s: {} requests/s per 1000 machines (management API, workload API and cloud), \
                 the manager at {} % of a core",
                Format::Seconds.show(number(&idle["seconds"])),
                Format::Decimal.show(number(&idle["all_requests_per_second_per_1000_machines"])),
                Format::Decimal.show(number(&idle["manager_cpu_percent"])),
            )
        })
        .collect();
    if !idle.is_empty() {
        let _ = writeln!(out, "\nIdle after the build, capi-rs: {}.", idle.join("; "));
    }
    if let Some(chart) = chart {
        let _ = writeln!(out, "\n![{chart}](results/{chart})");
    }
}

/// How far apart two figures may be and still count as about the same: within this factor
/// either way.
const ABOUT_THE_SAME: f64 = 1.25;

/// The pool scenario: a MachinePool beside a MachineDeployment, capi-rs only.
fn pool(out: &mut String, name: &str, chart: Option<&str>, result: &Value) {
    let kinds = ["MachinePool", "MachineDeployment"];
    let _ = writeln!(
        out,
        "\n## pool: a MachinePool of {n} instances beside a MachineDeployment of {n} machines\n",
        n = text(&result["instances"]),
    );
    provenance(out, name, result);
    stacks(out, result);
    for kind in kinds {
        let _ = writeln!(out, "- **{kind}**: {}", text(&result["workers"][kind]));
    }
    let _ = writeln!(out, "- **upstream**: {}", text(&result["upstream"]["why"]));
    let without = text(&result["machine_pool_machines"]["without_them"]);
    let _ = writeln!(out, "- **a pool without MachinePool Machines**: {without}");
    let _ = writeln!(out, "- counted: {}\n", text(&result["what_is_counted"]));

    let summary = &result["comparison"]["summary"];
    let ratios = &result["comparison"]["ratios_pool_over_deployment"];
    out.push_str(
        "| figure | MachinePool | MachineDeployment | MachinePool ÷ MachineDeployment |\n|---|---|---|---|\n",
    );
    for (key, what, format) in POOL_ROWS {
        let ratio = number(&ratios[key]).map(|r| format!("{r:.2}×"));
        let _ = writeln!(
            out,
            "| {what} | {} | {} | {} |",
            format.show(number(&summary[kinds[0]][key])),
            format.show(number(&summary[kinds[1]][key])),
            ratio.unwrap_or_else(|| "—".to_string())
        );
    }

    let instances = number(&result["machines"]).unwrap_or(f64::NAN);
    let mut writes: std::collections::BTreeMap<(String, String), [Option<f64>; 2]> =
        Default::default();
    let rounds = result["rounds"].as_array().into_iter().flatten();
    for round in rounds.filter(|r| r["round"] == 1) {
        let Some(column) = kinds.iter().position(|k| round["workers"] == *k) else {
            continue;
        };
        for request in round["create"]["requests"].as_array().into_iter().flatten() {
            let verb = text(&request["verb"]);
            if !super::measure::is_write(&verb) {
                continue;
            }
            let count = number(&request["count"]).unwrap_or(0.0);
            let key = (text(&request["resource"]), verb);
            writes.entry(key).or_default()[column] = Some(count / instances);
        }
    }
    if !writes.is_empty() {
        out.push_str(
            "\nWrites per instance until all ran, by resource (round 1 of each):\n\n\
             | resource | verb | MachinePool | MachineDeployment |\n|---|---|---|---|\n",
        );
        for ((resource, verb), [pool, deployment]) in &writes {
            let _ = writeln!(
                out,
                "| {resource} | {verb} | {} | {} |",
                Format::Decimal.show(*pool),
                Format::Decimal.show(*deployment)
            );
        }
    }

    let show =
        |key: &str| number(&ratios[key]).map_or_else(|| "—".to_string(), |r| format!("{r:.2}×"));
    let verdict = match number(&ratios["writes_per_machine"]) {
        Some(r) if r < 1.0 / ABOUT_THE_SAME => "fewer",
        Some(r) if r > ABOUT_THE_SAME => "more",
        Some(_) => "about the same",
        None => "not known",
    };
    let _ = writeln!(
        out,
        "\nThe expectation — a pool costs a small fraction of the writes of as many Machines \
         without MachinePool Machines, and about the same with them: with MachinePool Machines \
         (every pool capi-rs runs), the pool made {} the MachineDeployment's writes per instance \
         until all ran and {} until quiet: {verdict}, where about the same is within \
         {ABOUT_THE_SAME}× either way. Without MachinePool Machines: {without}.",
        show("writes_per_machine"),
        show("writes_until_quiet_per_machine"),
    );
    if let Some(chart) = chart {
        let _ = writeln!(out, "\n![{chart}](results/{chart})");
    }
}

fn chaos(out: &mut String, name: &str, result: &Value) {
    let workers = match result["workers"].as_str() {
        Some("MachinePool") => ", the workers one MachinePool",
        _ => "",
    };
    let _ = writeln!(
        out,
        "\n## chaos: {} machines{workers}\n",
        text(&result["machines"])
    );
    provenance(out, name, result);
    out.push_str("| fault | setting or count |\n|---|---|\n");
    for (key, value) in result["faults"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "| {} | {} |", key.replace('_', " "), text(value));
    }
    out.push_str("\n| outcome | value |\n|---|---|\n");
    let cloud = &result["cloud"];
    let outcomes = [
        (
            "instances at most per idempotency key",
            &cloud["max_instances_per_key"],
        ),
        ("instances left after deletion", &cloud["instances_left"]),
        (
            "scale sets at most per idempotency key",
            &cloud["max_scale_sets_per_key"],
        ),
        ("scale sets left after deletion", &cloud["scale_sets_left"]),
        ("manager panics", &result["manager_panics"]),
    ];
    // A run without pools records no scale-set figures.
    for (what, value) in outcomes.iter().filter(|(_, v)| !v.is_null()) {
        let _ = writeln!(out, "| {what} | {} |", text(value));
    }
    let running = &result["time_to_running_seconds"];
    for (key, what) in [
        ("median", "median"),
        ("p90", "90th percentile"),
        ("slowest", "slowest"),
    ] {
        let _ = writeln!(
            out,
            "| seconds from a machine's creation to Running, {what} | {} |",
            Format::Seconds.show(number(&running[key]))
        );
    }
    for (kind, left) in result["leaks"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "| {kind} left | {} |", text(left));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed report is the one the committed results give.
    #[test]
    fn the_committed_report_is_generated_from_the_committed_results() {
        let dir = workspace_root().join("benches").join("results");
        let generated = generate(&dir).unwrap_or_else(|e| panic!("{e:#}"));
        let committed = std::fs::read_to_string(readme_path()).unwrap_or_default();
        assert!(
            committed == generated,
            "benches/README.md is stale: run `cargo xtask bench report`"
        );
    }

    #[test]
    fn a_side_by_side_result_gives_every_figure_with_its_ratio() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let result = serde_json::json!({
            "scenario": "one-cluster", "machines": 10, "clusters": 1, "date": "d",
            "command": "cargo xtask bench", "host": {"cpu_model": "c", "cpus": 2, "memory_gib": 8},
            "stacks": {"capi-rs": "ours", "upstream": "theirs"},
            "settings": {"capi-rs": {"qps": 100.0}},
            "what_is_counted": "requests",
            "comparison": {
                "summary": {"capi-rs": {"writes_per_machine": 12.5}, "upstream": {"writes_per_machine": 25.0}},
                "ratios_upstream_over_capi_rs": {"writes_per_machine": 2.0},
            },
            "rounds": [{"stack": "capi-rs", "floor": {"ratio": 1.1, "writes_per_machine": 12.0}}],
        });
        let path = dir.path().join("one-cluster-10.json");
        std::fs::write(&path, result.to_string()).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap_or_else(|e| panic!("{e}"));
        let report = generate(dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(report.contains("| 12.50 | 25.00 | 2.00× |"), "{report}");
        assert!(report.contains("capi-rs took 1.10× its time"), "{report}");
        assert!(
            report.contains("settings of capi-rs: qps 100.0"),
            "{report}"
        );
        assert!(
            report.contains("[`notes.txt`](results/notes.txt)"),
            "{report}"
        );
    }

    #[test]
    fn a_stack_stopped_at_the_time_limit_shows_lower_bounds_and_how_far_it_got() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let result = serde_json::json!({
            "scenario": "clusters", "machines": 10, "clusters": 10, "date": "d",
            "command": "cargo xtask bench clusters", "host": {"cpu_model": "c", "cpus": 2, "memory_gib": 8},
            "stacks": {"capi-rs": "ours", "upstream": "theirs"},
            "settings": {"capi-rs": {"qps": 100.0}},
            "what_is_counted": "requests",
            "comparison": {
                "summary": {
                    "capi-rs": {"stopped_in_create": 0, "seconds_to_all_clusters_available": 100.0, "writes_per_machine": 30.0,
                                "teardown_seconds": 50.0},
                    "upstream": {"stopped_in_create": 1, "stopped_in_teardown": 0, "seconds_to_all_clusters_available": 1800.0,
                                 "writes_per_machine": 60.0, "teardown_seconds": null},
                },
                "ratios_upstream_over_capi_rs": {"seconds_to_all_clusters_available": 18.0, "writes_per_machine": 2.0},
            },
            "rounds": [
                {"stack": "capi-rs", "round": 1,
                 "floor": {"ratio": 1.25, "writes_per_machine": 31.0, "compared_with": "seconds_to_all_clusters_available"}},
                {"stack": "upstream", "round": 1,
                 "stopped": {"phase": "create", "seconds": 1800.2, "machines_running": 9, "machines": 10,
                             "clusters_available": 7, "clusters": 10}},
            ],
        });
        std::fs::write(dir.path().join("clusters-10.json"), result.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        let report = generate(dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(
            report.contains("| 100.0 | ≥ 1800.0 | ≥ 18.00× |"),
            "{report}"
        );
        // Only times are bounds: what the stopped stack wrote per machine is what it wrote.
        assert!(report.contains("| 30.00 | 60.00 | 2.00× |"), "{report}");
        // A stack stopped while building has no teardown: no bound of nothing.
        assert!(report.contains("| 50.0 | — | — |"), "{report}");
        assert!(
            report.contains(
                "upstream round 1 was stopped at the time limit in its create after 1800.2 s: 9/10 machines Running, 7/10 clusters Available"
            ),
            "{report}"
        );
        assert!(
            report.contains("capi-rs took 1.25× its time to every Cluster Available"),
            "{report}"
        );
    }

    #[test]
    fn a_pool_result_gives_both_kinds_of_workers_their_writes_and_the_expectation() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let round = |workers: &str, machines: f64| {
            serde_json::json!({"stack": "capi-rs", "round": 1, "workers": workers,
            "create": {"requests": [
                {"verb": "POST", "resource": "machines", "count": machines},
                {"verb": "GET", "resource": "machines", "count": 9.0},
            ]}})
        };
        let result = serde_json::json!({
            "scenario": "pool", "instances": 3, "machines": 4, "clusters": 1, "date": "d",
            "command": "cargo xtask bench pool", "host": {"cpu_model": "c", "cpus": 2, "memory_gib": 8},
            "stacks": {"capi-rs": "ours"}, "settings": {"capi-rs": {"qps": 100.0}},
            "workers": {"MachinePool": "a pool", "MachineDeployment": "a deployment"},
            "upstream": {"run": false, "why": "no pool upstream"},
            "machine_pool_machines": {"made": true, "without_them": "not measured"},
            "what_is_counted": "requests",
            "comparison": {
                "summary": {"MachinePool": {"writes_per_machine": 11.0, "controllers_peak_rss_mib": 60.0},
                            "MachineDeployment": {"writes_per_machine": 12.0, "controllers_peak_rss_mib": 50.0}},
                "ratios_pool_over_deployment": {"writes_per_machine": 0.9166, "controllers_peak_rss_mib": 1.2},
            },
            "rounds": [round("MachinePool", 4.0), round("MachineDeployment", 8.0)],
        });
        std::fs::write(dir.path().join("pool-3.json"), result.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        let report = generate(dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(
            report.contains(
                "## pool: a MachinePool of 3 instances beside a MachineDeployment of 3 machines"
            ),
            "{report}"
        );
        assert!(report.contains("| 11.00 | 12.00 | 0.92× |"), "{report}");
        assert!(report.contains("| 60.00 | 50.00 | 1.20× |"), "{report}");
        assert!(
            report.contains("| machines | POST | 1.00 | 2.00 |"),
            "{report}"
        );
        assert!(
            !report.contains("| GET |"),
            "reads are not writes: {report}"
        );
        assert!(
            report.contains("- **upstream**: no pool upstream"),
            "{report}"
        );
        assert!(
            report.contains("0.92× the MachineDeployment's writes per instance"),
            "{report}"
        );
        assert!(
            report.contains("until quiet: about the same, where"),
            "{report}"
        );
        assert!(
            report.contains("Without MachinePool Machines: not measured."),
            "{report}"
        );
    }
}
