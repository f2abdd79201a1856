//! `kubectl get`-style listings through the API server's Table format.
//!
//! The API server renders a CRD's `additionalPrinterColumns` when asked for
//! `application/json;as=Table;v=v1;g=meta.k8s.io` — that is what `kubectl get` shows. Fetching
//! the same thing here lets tests assert on printer columns and lets tools print listings without
//! kubectl.

use std::fmt;

use kube::Client;
use serde_json::Value;

use crate::envtest::EnvtestError;

/// A listing as `kubectl get` would print it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrintedTable {
    /// Column names, e.g. `["Name", "Cluster", "Phase", "Age"]`.
    pub columns: Vec<String>,
    /// One row per object, cells rendered as strings (`<none>` for absent values).
    pub rows: Vec<Vec<String>>,
}

impl PrintedTable {
    /// The cell of `row` under `column`, if both exist.
    pub fn cell(&self, row: usize, column: &str) -> Option<&str> {
        let index = self.columns.iter().position(|c| c == column)?;
        self.rows.get(row)?.get(index).map(String::as_str)
    }
}

impl fmt::Display for PrintedTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.len()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.len());
            }
        }
        let line = |cells: Vec<String>| {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("   ")
        };
        writeln!(
            f,
            "{}",
            line(self.columns.iter().map(|c| c.to_uppercase()).collect()).trim_end()
        )?;
        for row in &self.rows {
            writeln!(f, "{}", line(row.clone()).trim_end())?;
        }
        Ok(())
    }
}

/// Lists `plural` of `group/version` in `namespace` (all namespaces when `None`) in Table form.
/// Only columns of priority 0 are kept, as `kubectl get` without `-o wide` shows.
pub async fn get_table(
    client: &Client,
    group: &str,
    version: &str,
    plural: &str,
    namespace: Option<&str>,
) -> Result<PrintedTable, EnvtestError> {
    let path = match namespace {
        Some(ns) => format!("/apis/{group}/{version}/namespaces/{ns}/{plural}"),
        None => format!("/apis/{group}/{version}/{plural}"),
    };
    let request = http::Request::get(path)
        .header(
            http::header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .map_err(|e| EnvtestError::Io {
            action: "building a Table request".into(),
            source: std::io::Error::other(e),
        })?;
    let table: Value = client.request(request).await?;
    Ok(parse_table(&table))
}

fn parse_table(table: &Value) -> PrintedTable {
    let definitions = table["columnDefinitions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let shown: Vec<usize> = definitions
        .iter()
        .enumerate()
        .filter(|(_, d)| d["priority"].as_i64().unwrap_or(0) == 0)
        .map(|(i, _)| i)
        .collect();
    let columns = shown
        .iter()
        .map(|&i| {
            definitions[i]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let rows = table["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|row| {
                    let cells = row["cells"].as_array().cloned().unwrap_or_default();
                    shown
                        .iter()
                        .map(|&i| render_cell(cells.get(i).unwrap_or(&Value::Null)))
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default();
    PrintedTable { columns, rows }
}

fn render_cell(value: &Value) -> String {
    match value {
        Value::Null => "<none>".to_string(),
        Value::String(s) if s.is_empty() => "<none>".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_priority_zero_columns_and_renders_absent_cells() {
        let table = serde_json::json!({
            "columnDefinitions": [
                {"name": "Name", "priority": 0},
                {"name": "Wide", "priority": 1},
                {"name": "Phase", "priority": 0}
            ],
            "rows": [{"cells": ["m-0", "x", null]}]
        });
        let printed = parse_table(&table);
        assert_eq!(printed.columns, ["Name", "Phase"]);
        assert_eq!(printed.cell(0, "Phase"), Some("<none>"));
        assert_eq!(printed.to_string(), "NAME   PHASE\nm-0    <none>\n");
    }
}
