//! The picture of a side-by-side result, drawn by the bench itself (SVG, `plotters`): above, how
//! many machines are Running (one cluster) or clusters Available (many clusters) over time;
//! below, API requests per second to the management API server over time — every round of both
//! stacks on the same axes, from the timeline each round records (a sample every 2 s). A round
//! with a `label` (the pool scenario's) is named by it, and drawn in green when a MachinePool ran
//! its workers.

use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;
use serde_json::Value;

/// One round's curves.
struct Curve {
    label: String,
    color: RGBColor,
    /// (seconds, machines Running or clusters Available).
    done: Vec<(f64, f64)>,
    /// (seconds, requests per second over the sample before).
    rate: Vec<(f64, f64)>,
}

const OURS: RGBColor = RGBColor(31, 119, 180);
const UPSTREAM: RGBColor = RGBColor(214, 39, 40);
const POOL: RGBColor = RGBColor(44, 160, 44);

/// Draws `result` (a scenario's JSON, with `rounds`) as an SVG at `path`.
pub(crate) fn draw(path: &Path, title: &str, result: &Value) -> Result<()> {
    let many_clusters = result["clusters"].as_u64().unwrap_or(1) > 1;
    let (column, what) = if many_clusters {
        (2, "clusters Available")
    } else {
        (1, "machines Running")
    };
    let curves: Vec<Curve> = result["rounds"]
        .as_array()
        .context("the result has no rounds")?
        .iter()
        .map(|round| curve(round, column))
        .collect();
    let x_max = curves
        .iter()
        .flat_map(|c| c.done.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let done_max = curves
        .iter()
        .flat_map(|c| c.done.iter().map(|p| p.1))
        .fold(1.0, f64::max);
    let rate_max = curves
        .iter()
        .flat_map(|c| c.rate.iter().map(|p| p.1))
        .fold(1.0, f64::max);

    let root = SVGBackend::new(path, (960, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let (upper, lower) = root.split_vertically(360);
    for (area, y_max, y_label, pick) in [
        (&upper, done_max * 1.05, what, 0),
        (&lower, rate_max * 1.1, "API requests per second", 1),
    ] {
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max * 1.02, 0.0..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the first create")
            .y_desc(y_label)
            .light_line_style(WHITE)
            .draw()?;
        for curve in &curves {
            let points = if pick == 0 { &curve.done } else { &curve.rate };
            let color = curve.color;
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(curve.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    println!("    drawn: {}", path.display());
    Ok(())
}

fn curve(round: &Value, column: usize) -> Curve {
    let stack = round["stack"].as_str().unwrap_or("?");
    let samples: Vec<[f64; 4]> = round["timeline"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|s| {
                    let s = s.as_array()?;
                    let f = |i: usize| s.get(i).and_then(Value::as_f64);
                    Some([f(0)?, f(1)?, f(2)?, f(3)?])
                })
                .collect()
        })
        .unwrap_or_default();
    let done = samples.iter().map(|s| (s[0], s[column])).collect();
    let rate = samples
        .windows(2)
        .filter(|w| w[1][0] > w[0][0])
        .map(|w| (w[1][0], (w[1][3] - w[0][3]) / (w[1][0] - w[0][0])))
        .collect();
    let label = match round["label"].as_str() {
        Some(label) => label.to_string(),
        None => format!("{stack}, round {}", round["round"]),
    };
    let color = if stack == "upstream" {
        UPSTREAM
    } else if round["workers"] == "MachinePool" {
        POOL
    } else {
        OURS
    };
    Curve {
        label,
        color,
        done,
        rate,
    }
}
