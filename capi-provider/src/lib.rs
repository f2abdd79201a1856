//! A provider's manager binary in a few lines — the same flags, logging, health, metrics, leader
//! election and standalone mode for every provider, the in-memory and OpenStack reference
//! providers' as much as a vendor's.
//!
//! - [`args`]: the shared flags ([`ManagerArgs`]), for a binary to flatten into its own clap
//!   parser beside its own flags;
//! - [`support`]: the helpers a provider's cloud code uses — redaction of cloud messages,
//!   credentials from Secrets, retries of cloud calls, the manager's RBAC;
//! - [`guide`]: the provider author's guide — from `cargo new` to a provider beside upstream
//!   Cluster API, the contract's fields, status, and testing with mocks, a real API server and
//!   the conformance suite;
//! - [`ProviderManager`]: installs logging, builds the [`Manager`] from the current kubeconfig (in a
//!   pod: its ServiceAccount), lets the binary register its reconcilers, adds the kubeadm bootstrap
//!   provider (`--with-bootstrap`) and the core Cluster API controllers (`--with-core`), and runs
//!   until SIGTERM/SIGINT.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use capi_actuator::InfrastructureControllers;
//! use capi_provider::{ManagerArgs, ProviderManager};
//! use clap::Parser;
//!
//! /// my-cloud-manager: the My Cloud provider's controllers.
//! #[derive(Parser)]
//! struct Args {
//!     #[command(flatten)]
//!     manager: ManagerArgs,
//!     /// The cloud's API endpoint.
//!     #[arg(long)]
//!     endpoint: String,
//! }
//!
//! # async fn demo<M: capi_core::infra::InfraMachine, C: capi_core::infra::InfraCluster>(
//! #     machines: Arc<impl capi_core::Actuator<M, C> + 'static>,
//! #     clusters: Arc<dyn capi_core::ClusterActuator<C>>,
//! # ) -> Result<(), capi_provider::ProviderError> {
//! let args = Args::parse();
//! ProviderManager::new("my-cloud", args.manager)
//!     .run(|manager| {
//!         manager.add_machine_reconciler(machines);
//!         manager.add_cluster_reconciler::<C>(clusters);
//!     })
//!     .await
//! # }
//! ```

pub mod args;
pub mod clusterctl;
pub mod guide;
pub mod support;

use std::sync::Arc;

use capi_bootstrap::controller::{BootstrapFiles, BootstrapSettings, KubeadmBootstrap};
use capi_control_plane::controller::{ControlPlaneSettings, KubeadmControlPlanes};
use capi_control_plane::etcd::EtcdAccess;
use capi_controllers::{CoreControllers, CoreSettings};
use capi_runtime::manager::{Manager, ManagerError};
use capi_runtime::telemetry::init_logging_without_bodies;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

pub use args::{Controllers, ManagerArgs};

/// Why a provider's manager could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The log subscriber could not be installed (one already is).
    #[error("installing the log subscriber: {0}")]
    Logging(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// No kubeconfig and no in-cluster ServiceAccount to talk to the management cluster with.
    #[error(
        "finding the management cluster (set KUBECONFIG, or run in a pod with a ServiceAccount): {0}"
    )]
    KubeConfig(#[source] kube::config::InferConfigError),
    /// `--with-control-plane` was given, but the provider did not say how to reach etcd.
    #[error(
        "--with-control-plane (or --controllers standalone) needs to reach each cluster's etcd, and provider {0} registered no way to (ProviderManager::etcd_access, or the feature workload-etcd)"
    )]
    NoEtcdAccess(String),
    /// The manifests could not be written to standard output.
    #[error("writing the manifests to standard output: {0}")]
    Output(#[source] std::io::Error),
    /// `--print-manifests` was given, but the provider registered none
    /// ([`ProviderManager::manifests`]).
    #[error("--print-manifests: provider {0} registered no CRDs (ProviderManager::manifests)")]
    NoManifests(String),
    /// The manifests could not be rendered.
    #[error("rendering the manifests: {0}")]
    Manifests(#[source] serde_json::Error),
    /// The manager could not start, or stopped with an error (a lost lease).
    #[error(transparent)]
    Manager(#[from] ManagerError),
}

/// A provider's manager process; see the crate documentation.
pub struct ProviderManager {
    name: String,
    args: ManagerArgs,
    crds: Vec<CustomResourceDefinition>,
    rules: Vec<PolicyRule>,
    namespace_rules: Vec<PolicyRule>,
    bootstrap: BootstrapSettings,
    core: CoreSettings,
    etcd: Option<Arc<dyn EtcdAccess>>,
    body_log_targets: Vec<&'static str>,
}

impl ProviderManager {
    /// The registered CRDs and the ClusterRole, as a JSON `List`.
    fn manifests_list(&self) -> Result<serde_json::Value, ProviderError> {
        let mut rules = self.rules.clone();
        rules.extend(controller_rules(
            &self.crds,
            self.args.runs_bootstrap(),
            self.args.runs_core(),
            self.args.runs_control_plane(),
        ));
        let role = capi_runtime::rbac::cluster_role(&format!("{}-manager", self.name), rules);
        let mut items = Vec::with_capacity(self.crds.len() + 1);
        for crd in &self.crds {
            items.push(serde_json::to_value(crd).map_err(ProviderError::Manifests)?);
        }
        items.push(serde_json::to_value(role).map_err(ProviderError::Manifests)?);
        if let Some(lease) = &self.args.leader_elect {
            let mut rules = capi_runtime::rbac::leader_election();
            rules.extend(self.namespace_rules.iter().cloned());
            let role = capi_runtime::rbac::role(
                &lease.namespace,
                &format!("{}-manager", self.name),
                rules,
            );
            let mut role = serde_json::to_value(role).map_err(ProviderError::Manifests)?;
            role["apiVersion"] = serde_json::json!("rbac.authorization.k8s.io/v1");
            role["kind"] = serde_json::json!("Role");
            items.push(role);
        }
        Ok(serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}))
    }
}

/// The kinds of the infrastructure contract the core controllers read and write: the
/// provider's clusters, cluster templates, machines and machine templates (by their kinds'
/// endings; identities and other kinds are the provider's own business).
pub(crate) const CORE_KINDS: [&str; 5] = [
    "Cluster",
    "ClusterTemplate",
    "Machine",
    "MachineTemplate",
    "MachinePool",
];

/// The kinds the KubeadmControlPlane controller reads and writes: machines and their templates.
pub(crate) const CONTROL_PLANE_KINDS: [&str; 2] = ["Machine", "MachineTemplate"];

/// The plurals of `crds` whose kind ends with one of `endings`, by API group.
pub(crate) fn plurals_by_group<'a>(
    crds: &'a [CustomResourceDefinition],
    endings: &[&str],
) -> std::collections::BTreeMap<&'a str, Vec<&'a str>> {
    let mut groups: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for crd in crds {
        let names = &crd.spec.names;
        if endings.iter().any(|ending| names.kind.ends_with(ending)) {
            groups
                .entry(crd.spec.group.as_str())
                .or_default()
                .push(names.plural.as_str());
        }
    }
    groups
}

/// The rules the kubeadm bootstrap (`bootstrap`), core (`core`) and KubeadmControlPlane
/// (`control_plane`) controllers need, the latter two on the provider's kinds of the contract
/// they handle ([`CORE_KINDS`], [`CONTROL_PLANE_KINDS`]).
pub(crate) fn controller_rules(
    crds: &[CustomResourceDefinition],
    bootstrap: bool,
    core: bool,
    control_plane: bool,
) -> Vec<PolicyRule> {
    let mut rules = Vec::new();
    if bootstrap {
        rules.extend(capi_bootstrap::controller::rbac());
    }
    if core {
        rules.extend(per_group(crds, &CORE_KINDS, capi_controllers::rbac));
    }
    if control_plane {
        rules.extend(per_group(
            crds,
            &CONTROL_PLANE_KINDS,
            capi_control_plane::controller::rbac,
        ));
    }
    rules
}

/// A controller's rules (`rbac(group, plurals)`: its own, and those on the provider's kinds of
/// `group`) for the provider's kinds ending with `endings` in each group; its own alone when
/// there are none. Rules naming no resource are left out.
fn per_group(
    crds: &[CustomResourceDefinition],
    endings: &[&str],
    rbac: fn(&str, &[&str]) -> Vec<PolicyRule>,
) -> Vec<PolicyRule> {
    let groups = plurals_by_group(crds, endings);
    let mut rules = Vec::new();
    if groups.is_empty() {
        rules.extend(rbac("", &[]));
    }
    for (group, plurals) in groups {
        for rule in rbac(group, &plurals) {
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
    }
    rules.retain(|rule| rule.resources.as_ref().is_none_or(|r| !r.is_empty()));
    rules
}

impl std::fmt::Debug for ProviderManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderManager")
            .field("name", &self.name)
            .field("args", &self.args)
            .field("bootstrap", &self.bootstrap)
            .field("core", &self.core)
            .field("etcd", &self.etcd.is_some())
            .finish()
    }
}

impl ProviderManager {
    /// The manager of provider `name` (used in its log lines), configured by the shared flags.
    pub fn new(name: impl Into<String>, args: ManagerArgs) -> Self {
        Self {
            name: name.into(),
            args,
            crds: Vec::new(),
            rules: Vec::new(),
            namespace_rules: Vec::new(),
            bootstrap: BootstrapSettings::default(),
            core: CoreSettings::default(),
            etcd: None,
            body_log_targets: Vec::new(),
        }
    }

    /// Log targets (a cloud SDK's) that write request and response bodies at TRACE level and
    /// request settings at DEBUG level: their DEBUG and TRACE events are never logged, whatever
    /// `RUST_LOG` says, since those carry credentials, tokens and bootstrap data.
    pub fn body_log_targets(mut self, targets: &[&'static str]) -> Self {
        self.body_log_targets.extend_from_slice(targets);
        self
    }

    /// How the KubeadmControlPlane controller reaches each cluster's etcd, when it runs
    /// (`--with-control-plane`). With the feature `workload-etcd` and nothing registered here,
    /// upstream's way is used: a port-forward to each etcd static pod through the workload API
    /// server, TLS with a client certificate from the cluster's etcd CA.
    pub fn etcd_access(mut self, etcd: Arc<dyn EtcdAccess>) -> Self {
        self.etcd = Some(etcd);
        self
    }

    /// Files the bootstrap controller adds to every machine's bootstrap data, when it runs
    /// (`--with-bootstrap`): a cloud provider's configuration, a CA bundle.
    pub fn bootstrap_files(mut self, files: Arc<dyn BootstrapFiles>) -> Self {
        self.bootstrap.extra_files.push(files);
        self
    }

    /// Settings of the core controllers, when they run (`--with-core`).
    pub fn core_settings(mut self, settings: CoreSettings) -> Self {
        self.core = settings;
        self
    }

    /// The provider's CRDs and the rules of its ClusterRole (built with `capi_actuator::rbac`),
    /// which `--print-manifests` prints — with the rules of the bootstrap, core and control plane
    /// controllers the other flags ask for — as a JSON `List`, the ClusterRole named
    /// `<name>-manager`; with `--leader-elect NAMESPACE/NAME`, also the Role of that name granting
    /// the Lease in that namespace only.
    pub fn manifests(
        mut self,
        crds: Vec<CustomResourceDefinition>,
        rules: Vec<PolicyRule>,
    ) -> Self {
        self.crds = crds;
        self.rules = rules;
        self
    }

    /// Rules the manager needs in its own namespace only, such as `patch` on the Secrets its
    /// cluster-scoped identities name there: with `--leader-elect NAMESPACE/NAME`,
    /// `--print-manifests` grants them in the Lease's Role, in that namespace.
    pub fn namespace_rules(mut self, rules: Vec<PolicyRule>) -> Self {
        self.namespace_rules = rules;
        self
    }

    /// Installs logging, builds the manager, calls `register` to add the provider's own
    /// reconcilers (and any other controller), adds the bootstrap and core controllers the flags
    /// ask for, and runs until SIGTERM or SIGINT.
    pub async fn run(self, register: impl FnOnce(&mut Manager)) -> Result<(), ProviderError> {
        if self.args.print_manifests {
            if self.crds.is_empty() {
                return Err(ProviderError::NoManifests(self.name));
            }
            let text = self.manifests_list()?.to_string();
            // A reader that stops early (`| head`) is not an error worth a panic.
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            return match writeln!(out, "{text}") {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(ProviderError::Output(e))
                }
                _ => Ok(()),
            };
        }
        init_logging_without_bodies(self.args.log_format, &self.body_log_targets)
            .map_err(ProviderError::Logging)?;
        let kube_config = kube::Config::infer()
            .await
            .map_err(ProviderError::KubeConfig)?;
        let control_plane = match (self.args.runs_control_plane(), &self.etcd) {
            (false, _) => None,
            (true, Some(etcd)) => Some(ControlPlaneSettings::new(Arc::clone(etcd))),
            #[cfg(feature = "workload-etcd")]
            (true, None) => Some(ControlPlaneSettings::new(Arc::new(
                capi_control_plane::etcd::workload::WorkloadEtcdAccess::default(),
            ))),
            #[cfg(not(feature = "workload-etcd"))]
            (true, None) => return Err(ProviderError::NoEtcdAccess(self.name)),
        };
        let mut manager = Manager::new(kube_config, self.args.manager_config()).await?;
        register(&mut manager);
        if self.args.runs_bootstrap() {
            manager.add(KubeadmBootstrap::new(self.bootstrap));
        }
        if self.args.runs_core() {
            manager.add(CoreControllers::new(self.core));
        }
        if let Some(settings) = control_plane {
            manager.add(KubeadmControlPlanes::new(settings));
        }
        tracing::info!(
            provider = %self.name,
            http = %manager.http_addr().map_err(|source| ManagerError::Bind {
                addr: self.args.http_addr,
                source,
            })?,
            bootstrap = self.args.runs_bootstrap(),
            core = self.args.runs_core(),
            control_plane = self.args.runs_control_plane(),
            "manager starting"
        );
        manager.run().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Binary {
        #[command(flatten)]
        manager: ManagerArgs,
    }

    fn args(flags: &[&str]) -> ManagerArgs {
        Binary::try_parse_from(std::iter::once("manager").chain(flags.iter().copied()))
            .unwrap()
            .manager
    }

    fn crd(group: &str, plural: &str) -> CustomResourceDefinition {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": "Namespaced", "versions": [],
                     "names": {"plural": plural, "kind": "XMachine"}},
        }))
        .unwrap()
    }

    #[test]
    fn controllers_keep_their_own_rules_without_contract_kinds_and_never_reach_other_kinds() {
        let mut identity = crd("infrastructure.example.com", "xidentities");
        identity.spec.names.kind = "XIdentity".into();
        let rules = controller_rules(&[identity], true, true, true);
        let resources: Vec<String> = rules
            .iter()
            .flat_map(|r| r.resources.clone().unwrap_or_default())
            .collect();
        for wanted in [
            "machinedeployments",
            "kubeadmcontrolplanes",
            "kubeadmconfigs",
        ] {
            assert!(
                resources.iter().any(|r| r == wanted),
                "{wanted}: {resources:?}"
            );
        }
        assert!(
            !resources.iter().any(|r| r == "xidentities"),
            "{resources:?}"
        );
        assert!(
            rules
                .iter()
                .all(|r| r.resources.as_ref().is_none_or(|r| !r.is_empty()))
        );
    }

    #[tokio::test]
    async fn print_manifests_without_registered_manifests_is_an_error() {
        let manager = ProviderManager::new("bare", args(&["--print-manifests"]));
        let error = manager.run(|_| {}).await.unwrap_err();
        assert!(matches!(error, ProviderError::NoManifests(name) if name == "bare"));
    }

    #[test]
    fn manifests_hold_the_crds_and_every_rule_the_flags_ask_for() {
        let rules = capi_actuator::rbac::infra_machine("infrastructure.example.com", "xmachines");
        let manager = ProviderManager::new(
            "x",
            args(&[
                "--with-core",
                "--with-bootstrap",
                "--leader-elect",
                "x-system/x",
            ]),
        )
        .manifests(vec![crd("infrastructure.example.com", "xmachines")], rules)
        .namespace_rules(vec![capi_runtime::rbac::rule("", &["secrets"], &["patch"])]);
        let list = manager.manifests_list().unwrap();
        let items = list["items"].as_array().unwrap();
        assert_eq!(items[0]["kind"], "CustomResourceDefinition");
        let role = &items[1];
        assert_eq!(
            (role["kind"].as_str(), role["metadata"]["name"].as_str()),
            (Some("ClusterRole"), Some("x-manager"))
        );
        let resources: Vec<&str> = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["resources"].as_array().unwrap().iter())
            .filter_map(|r| r.as_str())
            .collect();
        for wanted in ["xmachines", "machinedeployments", "kubeadmconfigs"] {
            assert!(
                resources.contains(&wanted),
                "{wanted} missing from {resources:?}"
            );
        }
        assert!(!resources.contains(&"leases"), "{resources:?}");
        let election = &items[2];
        assert_eq!(
            (
                election["kind"].as_str(),
                election["metadata"]["namespace"].as_str()
            ),
            (Some("Role"), Some("x-system"))
        );
        assert_eq!(election["rules"][0]["resources"][0], "leases");
        assert_eq!(election["rules"][1]["resources"][0], "secrets");
        assert_eq!(election["rules"][1]["verbs"][0], "patch");
    }
}
