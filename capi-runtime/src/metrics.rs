//! Prometheus metrics, named as controller-runtime names them so that existing dashboards and
//! alerts work unchanged:
//!
//! - `controller_runtime_reconcile_total{controller, result}` — `result` is `success`,
//!   `requeue_after` or `error`;
//! - `controller_runtime_reconcile_errors_total{controller}`;
//! - `controller_runtime_reconcile_time_seconds{controller}` (histogram);
//!
//! and for the clouds behind the actuators:
//!
//! - `capi_actuator_calls_total{controller, method, result}` — `method` is `exists`, `create`,
//!   `update`, `delete` or `reconcile`; `result` is `ok`, `requeue`, `transient` or
//!   `invalid_configuration`;
//! - `capi_actuator_call_duration_seconds{controller, method}` (histogram).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    controller: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    controller: String,
    method: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallTimeLabels {
    controller: String,
    method: &'static str,
}

fn histogram() -> Histogram {
    // 1 ms … ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

struct Inner {
    registry: Registry,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    calls: Family<CallLabels, Counter>,
    call_time: Family<CallTimeLabels, Histogram, fn() -> Histogram>,
}

/// The registry and series of one manager. Cloning shares them.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// How one reconcile ended, as controller-runtime labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Done until something changes.
    Success,
    /// Done for now; look again after a delay.
    RequeueAfter,
    /// Failed; backing off.
    Error,
}

impl ReconcileResult {
    fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::RequeueAfter => "requeue_after",
            Self::Error => "error",
        }
    }
}

impl Metrics {
    /// A fresh registry with every series registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        let reconcile_errors = Family::<ControllerLabels, Counter>::default();
        let reconcile_time =
            Family::<ControllerLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                histogram as fn() -> Histogram,
            );
        let calls = Family::<CallLabels, Counter>::default();
        let call_time =
            Family::<CallTimeLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                histogram as fn() -> Histogram,
            );
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            reconciles.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            reconcile_errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            reconcile_time.clone(),
        );
        registry.register(
            "capi_actuator_calls",
            "Actuator (cloud) calls by method and result",
            calls.clone(),
        );
        registry.register(
            "capi_actuator_call_duration_seconds",
            "Length of time per actuator call",
            call_time.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry,
                reconciles,
                reconcile_errors,
                reconcile_time,
                calls,
                call_time,
            }),
        }
    }

    /// Records one finished reconcile.
    pub fn reconcile_done(&self, controller: &str, result: ReconcileResult, elapsed: Duration) {
        let inner = &self.inner;
        inner
            .reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.to_string(),
                result: result.label(),
            })
            .inc();
        let labels = ControllerLabels {
            controller: controller.to_string(),
        };
        if result == ReconcileResult::Error {
            inner.reconcile_errors.get_or_create(&labels).inc();
        }
        inner
            .reconcile_time
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Records one actuator call.
    pub fn actuator_call(
        &self,
        controller: &str,
        method: &'static str,
        result: &'static str,
        elapsed: Duration,
    ) {
        let inner = &self.inner;
        inner
            .calls
            .get_or_create(&CallLabels {
                controller: controller.to_string(),
                method,
                result,
            })
            .inc();
        inner
            .call_time
            .get_or_create(&CallTimeLabels {
                controller: controller.to_string(),
                method,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The OpenMetrics text exposition of every series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.inner.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_carry_controller_runtime_names() {
        let metrics = Metrics::new();
        metrics.reconcile_done(
            "inmemorymachine",
            ReconcileResult::Success,
            Duration::from_millis(3),
        );
        metrics.reconcile_done(
            "inmemorymachine",
            ReconcileResult::Error,
            Duration::from_millis(3),
        );
        metrics.actuator_call("inmemorymachine", "create", "ok", Duration::from_millis(1));
        let text = metrics.encode();
        for expected in [
            r#"controller_runtime_reconcile_total{controller="inmemorymachine",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="inmemorymachine",result="error"} 1"#,
            r#"controller_runtime_reconcile_errors_total{controller="inmemorymachine"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="inmemorymachine"} 2"#,
            r#"capi_actuator_calls_total{controller="inmemorymachine",method="create",result="ok"} 1"#,
            r#"capi_actuator_call_duration_seconds_count{controller="inmemorymachine",method="create"} 1"#,
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
    }
}
