//! `--audit`: every request a round's management API server completed, from its audit log
//! ([`capi_testing::envtest::ControlPlaneOptions::audit_log`]), read back as **one cluster's
//! requests** in the order the API server completed them — what a reconcile of that cluster
//! cost, request by request — and the requests that name no object (LISTs, WATCHes), which no
//! one cluster owns, per cluster.
//!
//! A request belongs to cluster `c` when the object it names is `c` or starts with `c-`: every
//! object of a cluster of the scenario is named that way, by either stack (its infrastructure
//! cluster and control plane, their Secrets, the control plane's machines, their bootstrap
//! configs and infrastructure machines, the bootstrap data). Only requests received while the
//! clock ran (from the first create until the scrape that follows every cluster `Available`) are
//! read; an audited run
//! pays a synchronous write per request, so its times are not the scenario's figures.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::{Value, json};

use super::measure::is_write;

/// Where a round's audit log is written (outside the results: it is large and not committed).
pub(crate) fn log_path(shape: &str, stack: &str, round: usize) -> PathBuf {
    std::env::temp_dir().join(format!(
        "capi-rs-bench-audit-{}-{shape}-{stack}-{round}.log",
        std::process::id()
    ))
}

/// One line of the audit log: the fields read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    stage: String,
    verb: String,
    object_ref: Option<ObjectRef>,
    response_status: Option<ResponseStatus>,
    request_received_timestamp: String,
    #[serde(default)]
    user_agent: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct ResponseStatus {
    #[serde(default)]
    code: u16,
}

impl Event {
    /// `resource[/subresource]`, as the request counters name it.
    fn resource(&self) -> String {
        match &self.object_ref {
            Some(o) if !o.subresource.is_empty() => format!("{}/{}", o.resource, o.subresource),
            Some(o) => o.resource.clone(),
            None => String::new(),
        }
    }

    fn name(&self) -> &str {
        self.object_ref.as_ref().map_or("", |o| o.name.as_str())
    }

    /// The verb as the request counters name it (`PATCH`, `LIST`…), but for a server-side apply,
    /// which the audit log calls `patch` and the counters `APPLY`.
    fn verb(&self) -> String {
        match self.verb.as_str() {
            "create" => "POST".to_string(),
            "update" => "PUT".to_string(),
            other => other.to_uppercase(),
        }
    }
}

/// One cluster's requests and the unnamed requests per cluster, received in
/// `[from, until]`, from the audit log at `path` of a run of `clusters` clusters.
pub(crate) fn one_cluster(
    path: &Path,
    cluster: &str,
    clusters: u32,
    from: jiff::Timestamp,
    until: jiff::Timestamp,
) -> Result<Value> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let prefix = format!("{cluster}-");
    let mut mine = Vec::new();
    let mut unnamed: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut others_named: BTreeMap<(String, String), u64> = BTreeMap::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        let Ok(event) = serde_json::from_str::<Event>(&line) else {
            continue;
        };
        let Ok(received) = event.request_received_timestamp.parse::<jiff::Timestamp>() else {
            continue;
        };
        if !matches!(event.stage.as_str(), "ResponseComplete" | "Panic")
            || received < from
            || received > until
        {
            continue;
        }
        let name = event.name();
        let key = (event.verb(), event.resource());
        if name == cluster || name.starts_with(&prefix) {
            let code = event.response_status.as_ref().map_or(0, |s| s.code);
            let seconds = (received - from)
                .total(jiff::Unit::Second)
                .unwrap_or(f64::NAN);
            mine.push(json!({
                "seconds": (seconds * 1000.0).round() / 1000.0,
                "verb": key.0, "resource": key.1, "name": name, "code": code,
                "user_agent": event.user_agent,
            }));
        } else if name.is_empty() {
            *unnamed.entry(key).or_default() += 1;
        } else {
            *others_named.entry(key).or_default() += 1;
        }
    }
    let count = |write: bool| {
        mine.iter()
            .filter(|r| is_write(r["verb"].as_str().unwrap_or_default()) == write)
            .count()
    };
    let per_cluster = |counts: &BTreeMap<(String, String), u64>| -> Vec<Value> {
        counts
            .iter()
            .map(|((verb, resource), n)| {
                json!({"verb": verb, "resource": resource, "count": n,
                       "per_cluster": *n as f64 / f64::from(clusters.max(1))})
            })
            .collect()
    };
    Ok(json!({
        "cluster": cluster,
        "writes": count(true),
        "reads": count(false),
        "requests": mine,
        "unnamed_requests": per_cluster(&unnamed),
        "what": "every request the management API server completed for an object named after the cluster, received between the first create and every cluster Available, in the order completed (seconds from the first create); unnamed_requests: requests naming no object (LIST, WATCH) in the same window, per cluster of the run",
    }))
}

/// Prints what [`one_cluster`] read.
pub(crate) fn print(audit: &Value) {
    println!(
        "    audit of cluster {}: {} writes, {} reads (time from the first create, verb, resource, name, code)",
        audit["cluster"].as_str().unwrap_or_default(),
        audit["writes"],
        audit["reads"]
    );
    for request in audit["requests"].as_array().into_iter().flatten() {
        println!(
            "      {:>8.3} s  {:<7} {:<40} {:<45} {}",
            request["seconds"].as_f64().unwrap_or(f64::NAN),
            request["verb"].as_str().unwrap_or_default(),
            request["resource"].as_str().unwrap_or_default(),
            request["name"].as_str().unwrap_or_default(),
            request["code"]
        );
    }
    println!("    requests naming no object, per cluster:");
    for request in audit["unnamed_requests"].as_array().into_iter().flatten() {
        println!(
            "      {:<7} {:<40} {:>8.2}",
            request["verb"].as_str().unwrap_or_default(),
            request["resource"].as_str().unwrap_or_default(),
            request["per_cluster"].as_f64().unwrap_or(f64::NAN)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(stage: &str, verb: &str, resource: &str, name: &str, at: &str) -> String {
        json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
            "stage": stage, "verb": verb, "requestReceivedTimestamp": at,
            "user": {"username": "admin"}, "userAgent": "kube-rs",
            "objectRef": {"resource": resource, "namespace": "bench", "name": name,
                          "apiGroup": "cluster.x-k8s.io", "apiVersion": "v1beta2"},
            "responseStatus": {"metadata": {}, "code": 200},
        })
        .to_string()
    }

    #[test]
    fn one_clusters_requests_are_those_naming_it_or_its_objects_within_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let lines = [
            // Only the completed stage counts.
            event(
                "ResponseStarted",
                "watch",
                "machines",
                "",
                "2026-11-30T10:00:01Z",
            ),
            event(
                "ResponseComplete",
                "create",
                "clusters",
                "c00001",
                "2026-11-30T10:00:01Z",
            ),
            event(
                "ResponseComplete",
                "patch",
                "machines",
                "c00001-control-plane-x",
                "2026-11-30T10:00:02.5Z",
            ),
            // Another cluster whose name only starts with this one's.
            event(
                "ResponseComplete",
                "patch",
                "clusters",
                "c000012",
                "2026-11-30T10:00:02Z",
            ),
            event(
                "ResponseComplete",
                "list",
                "machines",
                "",
                "2026-11-30T10:00:03Z",
            ),
            event(
                "ResponseComplete",
                "list",
                "machines",
                "",
                "2026-11-30T10:00:03Z",
            ),
            // After the window.
            event(
                "ResponseComplete",
                "update",
                "clusters",
                "c00001",
                "2026-11-30T10:09:00Z",
            ),
            "not json".to_string(),
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let from: jiff::Timestamp = "2026-11-30T10:00:00Z".parse().unwrap();
        let until: jiff::Timestamp = "2026-11-30T10:01:00Z".parse().unwrap();
        let audit = one_cluster(&path, "c00001", 2, from, until).unwrap();
        let requests = audit["requests"].as_array().unwrap();
        assert_eq!(requests.len(), 2, "{audit:#}");
        assert_eq!(requests[0]["verb"], "POST");
        assert_eq!(requests[0]["name"], "c00001");
        assert_eq!(requests[1]["verb"], "PATCH");
        assert_eq!(requests[1]["resource"], "machines");
        assert_eq!(requests[1]["seconds"], 2.5);
        assert_eq!(
            (audit["writes"].as_u64(), audit["reads"].as_u64()),
            (Some(2), Some(0))
        );
        assert_eq!(
            audit["unnamed_requests"],
            json!([{"verb": "LIST", "resource": "machines", "count": 2, "per_cluster": 1.0}])
        );
    }
}
