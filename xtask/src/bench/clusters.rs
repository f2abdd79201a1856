//! Scenario **many single-node clusters**, side by side ([`side_by_side`]): N clusters, each the
//! built-in in-memory template with a KubeadmControlPlane of one replica and no workers (as
//! upstream's scale tests: one control-plane machine per cluster, `kubeadm init`, so a CA and keys
//! per cluster), zero simulated latency, built by capi-rs's stack and by upstream's. Measured per
//! stack: time until every Machine is Running and every Cluster Available, API requests and writes
//! per machine (409s apart), CPU and peak RSS, teardown; then, after capi-rs's first round, its
//! floor program on the same API server ([`floor::clusters`](super::floor::clusters)), to which
//! capi-rs's time to every Cluster Available is compared.

use anyhow::Result;
use serde_json::json;

use super::side_by_side::{self, Extras, Shape};
use super::stack::{Boot, Workers};
use super::{Options, measure};
use crate::command::step;

/// Runs the scenario; returns its result.
pub(crate) async fn run(options: &Options) -> Result<serde_json::Value> {
    let n = options.clusters;
    let shape = Shape {
        clusters: n,
        workers: 0,
        workers_in: Workers::Deployment { health_check: true },
        owner_ready: false,
        boot: Boot::default(),
    };
    let rounds = side_by_side::run_rounds(
        options,
        "clusters",
        shape,
        Extras {
            floor: Some(side_by_side::FloorProgram::Clusters),
            ..Extras::default()
        },
        &options.stacks,
        options.rounds_for(n),
    )
    .await?;
    step(&format!(
        "Results: {n} single-node clusters ({})",
        options.manager.describe()
    ));
    let comparison = side_by_side::compare(&rounds, &shape);
    if let Some(ours) = rounds.iter().find(|r| r.floor.is_some())
        && let Some(floor) = &ours.floor
    {
        println!();
        measure::print_table(&[
            (
                "floor program (same limits)".to_string(),
                format!(
                    "{:.1} s for {:.0} writes ({:.2}/cluster)",
                    floor.seconds,
                    floor.writes,
                    floor.writes / f64::from(n)
                ),
            ),
            (
                "capi-rs time to all Available ÷ floor time".to_string(),
                format!("{:.2}", ours.floor_ratio().unwrap_or(f64::NAN)),
            ),
        ]);
    }
    let mut result = side_by_side::conditions(options, &shape, &rounds);
    result["scenario"] = json!("clusters");
    result["comparison"] = comparison;
    result["rounds"] = rounds.iter().map(|r| r.json(&shape)).collect();
    measure::write_result(&options.out, &format!("clusters-{n}.json"), &result)?;
    super::chart::draw(
        &options.out.join(format!("clusters-{n}.svg")),
        &format!(
            "{n} single-node clusters (KubeadmControlPlane of 1): capi-rs and upstream Cluster API v1.14"
        ),
        &result,
    )?;
    Ok(result)
}
