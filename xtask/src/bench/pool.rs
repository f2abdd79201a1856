//! Scenario **pool**: N workers run by one MachinePool beside N workers run by one
//! MachineDeployment, each in its own cluster with a KubeadmControlPlane of 1, each on a fresh
//! control plane, in the same run on the same machine — capi-rs's stack only.
//!
//! - **MachinePool**: the `machinepool` flavor of the built-in in-memory templates, one
//!   `InMemoryMachinePool` (a scale set of the simulated cloud) of N instances. capi-rs's pool
//!   loop always makes MachinePool Machines — an `InMemoryMachine` and a Machine per instance, as
//!   upstream recommends to providers — so a pool without them cannot be run and is not measured.
//! - **MachineDeployment**: the default template without its MachineHealthCheck (which the
//!   `machinepool` flavor does not have), so that the two clusters differ only in their workers.
//!   It is the one-cluster scenario's cluster with N workers rather than N − 1, and without the
//!   health check.
//!
//! Each round runs as a side-by-side round ([`side_by_side::run_round`]); convergence is every
//! Machine Running (its node found), the Cluster Available, and the owner counting all N workers
//! in `status.readyReplicas`. Then writes until quiet, the provider's status checked against the
//! cloud, and the teardown.
//!
//! Upstream's stack is not run: Cluster API v1.14's in-memory provider has no pool
//! ([`UPSTREAM_HAS_NO_POOL`] says where that was looked for).

use anyhow::Result;
use serde_json::{Value, json};

use super::Options;
use super::measure::{self, total};
use super::report::POOL_ROWS;
use super::side_by_side::{self, Extras, Round, Shape, Summary};
use super::stack::{Boot, Stack, Workers};
use crate::command::step;

/// Why upstream's stack does not run this scenario, and the evidence.
pub(crate) const UPSTREAM_HAS_NO_POOL: &str = "upstream Cluster API v1.14.2's in-memory provider \
     has no machine pool, so upstream's stack is not run. Looked for in the Go module \
     sigs.k8s.io/cluster-api/test@v1.14.2 (module cache), where the in-memory backend lives in \
     CAPD: its DevMachinePool's backend spec (infrastructure/docker/api/v1beta2/\
     devmachinepool_types.go) has a `docker` member and no `inMemory` one; the DevMachinePool \
     reconciler (infrastructure/docker/internal/controllers/devmachinepool_controller.go) always \
     builds the docker backend; the in-memory backend's folder \
     (infrastructure/docker/internal/controllers/backends/inmemory/) has a cluster and a machine \
     backend only; no kind named InMemoryMachinePool is declared anywhere in that module or in \
     sigs.k8s.io/cluster-api@v1.14.2, whose proposal on moving CAPD to `Dev*` kinds \
     (docs/proposals/20250124-From CAPD(docker) to CAPD(dev) .md) says the in-memory backend \
     has no pool counterpart";

/// Why the pool without MachinePool Machines has no figures.
pub(crate) const WITHOUT_POOL_MACHINES: &str = "not measured: capi-rs's pool loop always makes \
     MachinePool Machines (an InMemoryMachine and a Machine per instance, as upstream recommends \
     to providers), so a pool whose instances have no Machine cannot be run here";

/// What ran the workers, in the order the rounds run them.
const WORKERS: [Workers; 2] = [
    Workers::Pool,
    Workers::Deployment {
        health_check: false,
    },
];

/// Runs the scenario; returns its result.
pub(crate) async fn run(options: &Options) -> Result<Value> {
    let n = options.machines;
    anyhow::ensure!(
        options.stacks.contains(&Stack::Ours),
        "the pool scenario runs capi-rs's stack only ({UPSTREAM_HAS_NO_POOL})"
    );
    if options.stacks.contains(&Stack::Upstream) {
        println!("    {UPSTREAM_HAS_NO_POOL}");
    }
    let extras = Extras {
        settle: true,
        idle_seconds: 0,
        floor: None,
    };
    let rounds = options.rounds_for(n);
    let mut done = Vec::new();
    for index in 1..=rounds {
        for workers in WORKERS {
            let shape = shape(n, workers);
            side_by_side::announce("pool", index, rounds, Stack::Ours, &shape);
            let round = side_by_side::run_round(options, Stack::Ours, index, shape, extras).await?;
            // Only capi-rs runs here: a stop is its own failure, not a slow peer's.
            if let Some(stopped) = &round.stopped {
                anyhow::bail!(
                    "the {} round {index} ran out of time (--time-limit): {stopped}",
                    workers.owner_kind()
                );
            }
            done.push(round);
        }
    }

    step(&format!(
        "Results: pool, one MachinePool of {n} instances and one MachineDeployment of {n} machines ({})",
        options.manager.describe()
    ));
    let summary: serde_json::Map<String, Value> = WORKERS
        .iter()
        .map(|w| {
            let mine: Vec<&Round> = done.iter().filter(|r| r.workers_in == *w).collect();
            (w.owner_kind().to_string(), figures(&mine, &shape(n, *w)))
        })
        .collect();
    let (pool, deployment) = (&summary["MachinePool"], &summary["MachineDeployment"]);
    let ratios = ratios(pool, deployment);
    print_figures(pool, deployment, &ratios);

    let reference = shape(n, WORKERS[1]);
    let mut result = side_by_side::conditions(options, &reference, &done);
    for key in ["stacks", "settings"] {
        if let Some(map) = result[key].as_object_mut() {
            map.remove(Stack::Upstream.name());
        }
    }
    result["scenario"] = json!("pool");
    result["instances"] = json!(n);
    result["order"] = done
        .iter()
        .map(|r| format!("{} {}", r.workers_in.owner_kind(), r.index))
        .collect();
    result["workers"] = json!({
        "MachinePool": format!("the built-in in-memory template's machinepool flavor: one MachinePool of {n} over one InMemoryMachinePool (a scale set of the simulated cloud); each instance gets an InMemoryMachine and a Machine from the pool loop"),
        "MachineDeployment": format!("the built-in in-memory template without its MachineHealthCheck (the machinepool flavor has none): one MachineDeployment of {n}, a KubeadmConfig and an InMemoryMachine per Machine"),
    });
    result["machine_pool_machines"] = json!({"made": true, "without_them": WITHOUT_POOL_MACHINES});
    result["upstream"] = json!({"run": false, "why": UPSTREAM_HAS_NO_POOL});
    result["what_is_counted"] = json!(format!(
        "{}; per instance: divided by the run's {} instances (the {n} workers and the control-plane machine, each one instance of the simulated cloud), as the other scenarios divide by machines; all instances running: every Machine Running (its node found) and the owner's status.readyReplicas {n}; writes until quiet: from the first create until 5 s without a write",
        result["what_is_counted"].as_str().unwrap_or_default(),
        reference.machines()
    ));
    result["comparison"] = json!({
        "summary": summary,
        "ratios_pool_over_deployment": ratios,
    });
    result["rounds"] = done
        .iter()
        .map(|r| {
            let mut round = r.json(&shape(n, r.workers_in));
            round["label"] = json!(format!("{}, round {}", r.workers_in.owner_kind(), r.index));
            round
        })
        .collect();
    measure::write_result(&options.out, &format!("pool-{n}.json"), &result)?;
    super::chart::draw(
        &options.out.join(format!("pool-{n}.svg")),
        &format!(
            "pool: a MachinePool of {n} instances and a MachineDeployment of {n} machines, capi-rs"
        ),
        &result,
    )?;
    Ok(result)
}

/// One cluster with a control-plane machine and `n` workers run by `workers`, converged when
/// their owner counts them all ready.
fn shape(n: u32, workers: Workers) -> Shape {
    Shape {
        clusters: 1,
        workers: n,
        workers_in: workers,
        owner_ready: true,
        boot: Boot::default(),
    }
}

/// The figures of one kind of workers over its rounds: the side-by-side figures, plus when the
/// owner counted every worker ready, when every instance was running by both counts, and the
/// writes until quiet.
fn figures(rounds: &[&Round], shape: &Shape) -> Value {
    let n = f64::from(shape.machines());
    let mut figures = Summary::of(rounds, shape).json();
    let each = |f: &dyn Fn(&Round) -> f64| rounds.iter().map(|r| f(r)).collect::<Vec<f64>>();
    figures["seconds_to_owner_ready_replicas"] =
        json!(mean(&each(&|r| r.owner_ready_seconds.unwrap_or(f64::NAN))));
    figures["seconds_to_all_instances_running"] = json!(mean(&each(&|r| {
        all_running(r.running_seconds, r.owner_ready_seconds)
    })));
    figures["writes_until_quiet_per_machine"] = json!(mean(&each(&|r| {
        let settle = r.settle.as_ref().map_or(0.0, |s| total(&s.requests, true));
        per_instance(total(&r.create.requests, true) + settle, n)
    })));
    figures
}

/// When every instance ran: its Machine Running and its owner counting it ready, whichever came
/// last (the Machines alone when the owner was not followed).
fn all_running(machines_running: f64, owner_ready: Option<f64>) -> f64 {
    owner_ready.map_or(machines_running, |owner| owner.max(machines_running))
}

/// `count` per instance of a run of `instances` (`NaN` for none, never infinity).
fn per_instance(count: f64, instances: f64) -> f64 {
    if instances > 0.0 {
        count / instances
    } else {
        f64::NAN
    }
}

/// The mean of `values` (`NaN` for none).
fn mean(values: &[f64]) -> f64 {
    per_instance(values.iter().sum(), values.len() as f64)
}

/// The pool's figure over the MachineDeployment's, for every figure both have and the
/// MachineDeployment's is above 0: below 1, the pool costs less.
fn ratios(pool: &Value, deployment: &Value) -> Value {
    let mut ratios = serde_json::Map::new();
    for (key, ours) in pool.as_object().into_iter().flatten() {
        if key == "rounds" {
            continue;
        }
        if let (Some(a), Some(b)) = (ours.as_f64(), deployment[key].as_f64())
            && b > 0.0
            && a.is_finite()
        {
            ratios.insert(key.clone(), json!(a / b));
        }
    }
    Value::Object(ratios)
}

/// Prints the figures side by side, with the report's rows (so that the two agree).
fn print_figures(pool: &Value, deployment: &Value, ratios: &Value) {
    println!(
        "\n    {:<62} {:>12} {:>18} {:>10}",
        "figure (mean over rounds)", "MachinePool", "MachineDeployment", "pool ÷ MD"
    );
    for (key, what, format) in POOL_ROWS {
        let ratio = ratios[key]
            .as_f64()
            .map_or_else(|| "—".to_string(), |r| format!("{r:.2}×"));
        let what: String = what.chars().take(62).collect();
        println!(
            "    {what:<62} {:>12} {:>18} {ratio:>10}",
            format.show(pool[key].as_f64()),
            format.show(deployment[key].as_f64()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_instance_runs_when_the_later_of_machines_and_owner_says_so() {
        assert_eq!(all_running(10.0, Some(12.5)), 12.5);
        assert_eq!(all_running(10.0, Some(9.0)), 10.0);
        assert_eq!(all_running(10.0, None), 10.0);
    }

    #[test]
    fn per_instance_figures_divide_by_every_instance_and_never_by_zero() {
        assert_eq!(per_instance(5005.0, 1001.0), 5.0);
        assert!(per_instance(3.0, 0.0).is_nan());
        assert_eq!(mean(&[1.0, 2.0, 6.0]), 3.0);
        assert!(mean(&[]).is_nan());
    }

    #[test]
    fn ratios_are_the_pool_over_the_deployment_where_both_have_a_figure() {
        let pool = json!({"rounds": 1, "writes_per_machine": 6.0, "seconds_to_all_machines_running": 30.0,
                          "controllers_peak_rss_mib": 50.0, "teardown_seconds": f64::NAN});
        let deployment = json!({"rounds": 1, "writes_per_machine": 12.0,
                                "seconds_to_all_machines_running": 0.0, "controllers_peak_rss_mib": 40.0});
        let ratios = ratios(&pool, &deployment);
        assert_eq!(
            ratios,
            json!({"writes_per_machine": 0.5, "controllers_peak_rss_mib": 1.25})
        );
    }

    #[test]
    fn both_clusters_have_one_control_plane_machine_and_n_workers_followed_to_ready() {
        for workers in WORKERS {
            let shape = shape(1000, workers);
            assert_eq!(shape.machines(), 1001);
            assert!(shape.owner_ready);
        }
    }
}
