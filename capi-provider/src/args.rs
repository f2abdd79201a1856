//! The command-line flags every provider's manager binary shares, so that all managers accept the
//! same spelling and print the same `--help`:
//!
//! ```text
//! [--http-addr 0.0.0.0:8080] [--diagnostics-address 0.0.0.0:8443] [--insecure-diagnostics]
//! [--namespace NS] [--label-selector SEL] [--concurrency N]
//! [--qps F] [--burst N] [--leader-elect NAMESPACE/NAME] [--log-format text|json]
//! [--with-bootstrap] [--with-core]
//! ```
//!
//! A binary flattens [`ManagerArgs`] into its own clap parser beside its own flags.

use std::net::SocketAddr;

use capi_runtime::ReconcilerOptions;
use capi_runtime::manager::{LeaderElectionConfig, ManagerConfig, MetricsEndpoint};
use capi_runtime::telemetry::LogFormat;

/// The shared flags; their defaults are the [`ManagerConfig`] defaults, but for `/metrics`, which
/// a manager binary serves as upstream's do: over HTTPS on `--diagnostics-address`, to callers the
/// cluster authorizes (`--insecure-diagnostics`: plain HTTP on `--http-addr`, to anyone).
#[derive(Clone, Debug, PartialEq, clap::Args)]
pub struct ManagerArgs {
    /// Where `/healthz` and `/readyz` are served, plain HTTP (HOST:PORT; port 0 picks one).
    #[arg(long, value_name = "HOST:PORT", default_value = "0.0.0.0:8080", value_parser = parse_addr)]
    pub http_addr: SocketAddr,
    /// Where `/metrics` is served over HTTPS to callers whose token the cluster allows
    /// `get /metrics` (a TokenReview and a SubjectAccessReview per request), as upstream's managers.
    #[arg(long, value_name = "HOST:PORT", default_value = "0.0.0.0:8443", value_parser = parse_addr)]
    pub diagnostics_address: SocketAddr,
    /// Serve `/metrics` on `--http-addr` over plain HTTP to anyone who can reach it instead.
    #[arg(long)]
    pub insecure_diagnostics: bool,
    /// Only reconcile objects in this namespace (default: all namespaces).
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Only reconcile objects matching this label selector.
    #[arg(long, value_name = "SEL")]
    pub label_selector: Option<String>,
    /// Only reconcile objects labelled `cluster.x-k8s.io/watch-filter` with this value, as
    /// upstream's managers (empty: every object). Objects a controller creates carry it when
    /// their template's labels do.
    #[arg(long, value_name = "VALUE", default_value = "", value_parser = parse_label_value)]
    pub watch_filter: String,
    /// At most this many objects of each kind are reconciled at once.
    #[arg(long, value_name = "N", default_value_t = ReconcilerOptions::default().concurrency, value_parser = parse_concurrency)]
    pub concurrency: u16,
    /// Average API requests per second of each family of controllers (core, bootstrap, control
    /// plane, this provider's), as each of upstream's managers has.
    #[arg(long, value_name = "F", default_value_t = ManagerConfig::default().qps, value_parser = parse_qps, allow_negative_numbers = true)]
    pub qps: f64,
    /// API requests allowed at once above the average, per family of controllers.
    #[arg(long, value_name = "N", default_value_t = ManagerConfig::default().burst, value_parser = parse_burst)]
    pub burst: u32,
    /// Run only while holding this `coordination.k8s.io/v1` Lease (several replicas, one leader);
    /// `NAME` alone is a Lease in the pod's namespace (the `POD_NAMESPACE` variable).
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_lease)]
    pub leader_elect: Option<LeaderElectionConfig>,
    /// The log line format: `text` or `json` (filtered by `RUST_LOG`, default `info`).
    #[arg(long, value_name = "text|json", default_value = "text", value_parser = parse_log_format)]
    pub log_format: LogFormat,
    /// Which controllers run: `provider` (this provider's own, beside upstream Cluster API) or
    /// `standalone` (also the kubeadm bootstrap, core and KubeadmControlPlane controllers, as the
    /// three `--with-*` flags together). The clusterctl components set it from a variable.
    #[arg(long, value_name = "provider|standalone", default_value = "provider", value_parser = parse_controllers)]
    pub controllers: Controllers,
    /// Also run the kubeadm bootstrap provider's controller.
    #[arg(long)]
    pub with_bootstrap: bool,
    /// Also run the core Cluster API controllers (standalone mode, with `--with-bootstrap`).
    #[arg(long)]
    pub with_core: bool,
    /// Also run the KubeadmControlPlane controller (standalone mode).
    #[arg(long)]
    pub with_control_plane: bool,
    /// Print the provider's CRDs and the ClusterRole its controllers need (a JSON `List` for
    /// `kubectl apply -f -`) and exit.
    #[arg(long)]
    pub print_manifests: bool,
}

/// Which controllers a manager runs besides the provider's own (`--controllers`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Controllers {
    /// The provider's own only, beside upstream Cluster API's managers.
    #[default]
    Provider,
    /// Also the kubeadm bootstrap, core and KubeadmControlPlane controllers.
    Standalone,
}

impl Controllers {
    /// The flag's value: `provider` or `standalone`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provider => "provider",
            Self::Standalone => "standalone",
        }
    }
}

impl ManagerArgs {
    /// Whether the kubeadm bootstrap controller runs (`--with-bootstrap` or standalone).
    pub fn runs_bootstrap(&self) -> bool {
        self.with_bootstrap || self.controllers == Controllers::Standalone
    }

    /// Whether the core controllers run (`--with-core` or standalone).
    pub fn runs_core(&self) -> bool {
        self.with_core || self.controllers == Controllers::Standalone
    }

    /// Whether the KubeadmControlPlane controller runs (`--with-control-plane` or standalone).
    pub fn runs_control_plane(&self) -> bool {
        self.with_control_plane || self.controllers == Controllers::Standalone
    }

    /// The manager configuration these flags describe.
    pub fn manager_config(&self) -> ManagerConfig {
        let mut reconciler = ReconcilerOptions::default().concurrency(self.concurrency);
        if let Some(namespace) = &self.namespace {
            reconciler = reconciler.namespace(namespace);
        }
        if let Some(selector) = &self.label_selector {
            reconciler = reconciler.label_selector(selector);
        }
        reconciler = reconciler.watch_filter(&self.watch_filter);
        ManagerConfig {
            reconciler,
            qps: self.qps,
            burst: self.burst,
            http_addr: self.http_addr,
            metrics: if self.insecure_diagnostics {
                MetricsEndpoint::Insecure
            } else {
                MetricsEndpoint::Secure {
                    addr: self.diagnostics_address,
                }
            },
            leader_election: self.leader_elect.clone(),
            ..ManagerConfig::default()
        }
    }
}

fn parse_addr(value: &str) -> Result<SocketAddr, String> {
    value.parse().map_err(|_| "expected HOST:PORT".to_string())
}

fn parse_concurrency(value: &str) -> Result<u16, String> {
    value
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| "expected a count (1–65535)".to_string())
}

/// A label value as Kubernetes takes it ([`capi_core::labels::is_label_value`]).
fn parse_label_value(value: &str) -> Result<String, String> {
    if capi_core::labels::is_label_value(value) {
        Ok(value.to_string())
    } else {
        Err("expected a label value (at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit)".to_string())
    }
}

fn parse_qps(value: &str) -> Result<f64, String> {
    value
        .parse()
        .ok()
        .filter(|q: &f64| q.is_finite() && *q > 0.0)
        .ok_or_else(|| "expected a positive number".to_string())
}

fn parse_burst(value: &str) -> Result<u32, String> {
    value
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| "expected a positive count".to_string())
}

fn parse_lease(value: &str) -> Result<LeaderElectionConfig, String> {
    const EXPECTED: &str = "expected NAMESPACE/NAME, or NAME in a pod that sets POD_NAMESPACE";
    match value.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => {
            Ok(LeaderElectionConfig::new(namespace, name))
        }
        Some(_) => Err(EXPECTED.to_string()),
        None if value.is_empty() => Err(EXPECTED.to_string()),
        // The pod's own namespace, from the downward API: a Deployment installed into another
        // namespace (clusterctl's `--target-namespace`) takes its Lease there.
        None => match std::env::var("POD_NAMESPACE") {
            Ok(namespace) if !namespace.is_empty() => {
                Ok(LeaderElectionConfig::new(namespace, value))
            }
            _ => Err(EXPECTED.to_string()),
        },
    }
}

fn parse_controllers(value: &str) -> Result<Controllers, String> {
    match value {
        "provider" => Ok(Controllers::Provider),
        "standalone" => Ok(Controllers::Standalone),
        _ => Err("expected provider or standalone".to_string()),
    }
}

fn parse_log_format(value: &str) -> Result<LogFormat, String> {
    match value {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err("expected text or json".to_string()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    /// A binary with one flag of its own beside the shared ones.
    #[derive(Debug, Parser)]
    struct Binary {
        #[command(flatten)]
        manager: ManagerArgs,
        #[arg(long)]
        cloud_url: Option<String>,
    }

    fn parse(args: &[&str]) -> Result<ManagerArgs, clap::Error> {
        Binary::try_parse_from(std::iter::once("manager").chain(args.iter().copied()))
            .map(|b| b.manager)
    }

    #[test]
    fn every_shared_flag_lands_in_the_config() {
        let flags = parse(&[
            "--http-addr",
            "127.0.0.1:9000",
            "--namespace",
            "team-a",
            "--label-selector",
            "tier=gold",
            "--watch-filter",
            "team-a",
            "--concurrency",
            "7",
            "--qps",
            "12.5",
            "--burst",
            "30",
            "--leader-elect",
            "capi-system/lease",
            "--log-format",
            "json",
            "--with-bootstrap",
            "--with-core",
            "--with-control-plane",
        ])
        .unwrap();
        let config = flags.manager_config();
        assert_eq!(config.http_addr.to_string(), "127.0.0.1:9000");
        assert_eq!(config.reconciler.namespace.as_deref(), Some("team-a"));
        assert_eq!(
            config.reconciler.label_selector.as_deref(),
            Some("tier=gold")
        );
        assert_eq!(config.reconciler.watch_filter.as_deref(), Some("team-a"));
        assert_eq!(config.reconciler.concurrency, 7);
        assert_eq!((config.qps, config.burst), (12.5, 30));
        let lease = config.leader_election.unwrap();
        assert_eq!(
            (lease.namespace.as_str(), lease.lease_name.as_str()),
            ("capi-system", "lease")
        );
        assert_eq!(flags.log_format, LogFormat::Json);
        assert!(flags.with_bootstrap && flags.with_core && flags.with_control_plane);
    }

    #[test]
    fn without_flags_the_config_is_the_managers_default_with_metrics_behind_authorization() {
        let flags = parse(&[]).unwrap();
        assert_eq!(
            flags.manager_config(),
            ManagerConfig {
                metrics: MetricsEndpoint::Secure {
                    addr: "0.0.0.0:8443".parse().unwrap()
                },
                ..ManagerConfig::default()
            }
        );
        let insecure = parse(&["--insecure-diagnostics"]).unwrap().manager_config();
        assert_eq!(insecure.metrics, MetricsEndpoint::Insecure);
        assert_eq!(flags.log_format, LogFormat::Text);
        assert!(!flags.with_bootstrap && !flags.with_core && !flags.with_control_plane);
        assert!(!flags.runs_bootstrap() && !flags.runs_core() && !flags.runs_control_plane());
    }

    #[test]
    fn standalone_controllers_run_what_the_three_flags_run() {
        let standalone = parse(&["--controllers=standalone"]).unwrap();
        assert_eq!(standalone.controllers, Controllers::Standalone);
        assert!(
            standalone.runs_bootstrap()
                && standalone.runs_core()
                && standalone.runs_control_plane()
        );
        let provider = parse(&["--controllers", "provider", "--with-core"]).unwrap();
        assert!(provider.runs_core() && !provider.runs_bootstrap());
    }

    #[test]
    fn bad_values_say_what_is_expected() {
        let missing = parse(&["--qps"]).unwrap_err().to_string();
        assert!(missing.contains("--qps"), "{missing}");
        for (args, expected) in [
            (["--qps", "-1"], "a positive number"),
            (["--qps", "NaN"], "a positive number"),
            (["--leader-elect", "/lease"], "NAMESPACE/NAME"),
            (["--leader-elect", "ns/"], "NAMESPACE/NAME"),
            (["--log-format", "xml"], "text or json"),
            (["--controllers", "all"], "provider or standalone"),
            (["--http-addr", "localhost"], "HOST:PORT"),
            (["--concurrency", "many"], "a count (1–65535)"),
            (["--watch-filter", "team a"], "a label value"),
            (["--watch-filter", "a."], "a label value"),
        ] {
            let error = parse(&args).unwrap_err().to_string();
            assert!(error.contains(expected), "{args:?}: {error}");
        }
        if std::env::var_os("POD_NAMESPACE").is_none() {
            let error = parse(&["--leader-elect", "lease"]).unwrap_err().to_string();
            assert!(error.contains("POD_NAMESPACE"), "{error}");
        }
        let unknown = parse(&["--cloud-urll", "x"]).unwrap_err();
        assert_eq!(unknown.kind(), clap::error::ErrorKind::UnknownArgument);
    }
}
