//! Upstream Cluster API as a peer (DESIGN.md §8): the core manager, the kubeadm bootstrap and
//! control plane managers, and upstream's test infrastructure provider (CAPD) with its in-memory
//! backend, running as local processes against a [`ControlPlane`] — the yardstick for
//! compatibility and performance.
//!
//! The binaries and upstream's own configuration (CRDs, webhook manifests, templates) are not in
//! this repository: `cargo xtask upstream install` builds the managers from the Go module proxy and
//! copies the configuration from the module cache into [`default_upstream_dir`] (or
//! `$CAPI_RS_UPSTREAM_DIR`):
//!
//! ```text
//! <dir>/bin/<component>                 the four managers (see COMPONENTS)
//! <dir>/config/<component>/             the component's config/ directory: crd/, default/, webhook/
//! <dir>/templates/                      CAPD's cluster templates and ClusterClasses
//! ```
//!
//! [`UpstreamPeer::start`] wires them the way upstream's own test environment does: one CA signs a
//! serving certificate for `127.0.0.1` that every manager's webhook server uses; each CRD converts
//! through the `/convert` endpoint of the manager that owns it; the mutating and validating webhook
//! configurations call the managers at `https://127.0.0.1:<port>`. What is on: every webhook
//! (defaulting, validation, conversion), the `ClusterTopology` feature gate (ClusterClass), the
//! in-memory backend (fake workload API servers, etcd and static pods on loopback ports 20000–30000
//! and a debug port 19000 — fixed by upstream, so one peer per machine at a time). What is off:
//! leader election, the diagnostics (metrics) endpoint, Docker, and the Runtime SDK.

mod manifests;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::envtest::control_plane::{
    Process, free_ports, scratch_dir, spawn_watchdog, tail, write,
};
use crate::envtest::pki::ServingPki;
use crate::envtest::{ControlPlane, EnvtestError, cache_root};

/// The upstream Cluster API release the peer is built from (the newest v1.14 patch the module proxy
/// serves); `xtask/go/upstream/go.mod` pins the same.
pub const CLUSTER_API_VERSION: &str = "v1.14.2";

/// The cache key of an installed peer: the release plus the revision of the install recipe.
pub const UPSTREAM_REVISION: &str = "v1.14.2-gomod.3";

/// Overrides where the installed peer is looked for.
pub const UPSTREAM_DIR_ENV: &str = "CAPI_RS_UPSTREAM_DIR";

/// How long the managers may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// One upstream manager.
#[derive(Clone, Copy, Debug)]
pub struct Component {
    /// The binary's name under `<dir>/bin`, and the name of its configuration directory.
    pub name: &'static str,
    /// The Go module holding it.
    pub module: &'static str,
    /// Its main package.
    pub package: &'static str,
    /// Its `config/` directory inside the module.
    pub config: &'static str,
    /// Extra environment the manager needs outside a Pod.
    pub env: &'static [(&'static str, &'static str)],
    /// The manager's `--<kind>-concurrency` flags of the kinds a standalone stack also
    /// reconciles ([`PeerSettings::concurrency`] sets them all).
    pub concurrency_flags: &'static [&'static str],
}

/// The four managers of the peer, in start order.
pub const COMPONENTS: [Component; 4] = [
    Component {
        name: "capi-core",
        module: "sigs.k8s.io/cluster-api",
        package: "sigs.k8s.io/cluster-api/core",
        config: "core/config",
        env: &[],
        concurrency_flags: &[
            "cluster-concurrency",
            "machine-concurrency",
            "machineset-concurrency",
            "machinedeployment-concurrency",
            "machinehealthcheck-concurrency",
        ],
    },
    Component {
        name: "capi-kubeadm-bootstrap",
        module: "sigs.k8s.io/cluster-api",
        package: "sigs.k8s.io/cluster-api/bootstrap/kubeadm",
        config: "bootstrap/kubeadm/config",
        env: &[],
        concurrency_flags: &["kubeadmconfig-concurrency"],
    },
    Component {
        name: "capi-kubeadm-control-plane",
        module: "sigs.k8s.io/cluster-api",
        package: "sigs.k8s.io/cluster-api/controlplane/kubeadm",
        config: "controlplane/kubeadm/config",
        env: &[],
        concurrency_flags: &["kubeadmcontrolplane-concurrency"],
    },
    Component {
        name: "capd",
        module: "sigs.k8s.io/cluster-api/test",
        package: "sigs.k8s.io/cluster-api/test/infrastructure/docker",
        config: "infrastructure/docker/config",
        // The in-memory backend advertises this address as each workload cluster's endpoint.
        env: &[("POD_IP", "127.0.0.1")],
        concurrency_flags: &["devcluster-concurrency", "devmachine-concurrency"],
    },
];

/// Upstream's core, kubeadm bootstrap and kubeadm control plane managers: what drives another
/// infrastructure provider.
pub const CORE_BOOTSTRAP_CONTROL_PLANE: [Component; 3] =
    [COMPONENTS[0], COMPONENTS[1], COMPONENTS[2]];

/// clusterctl, built with the managers from the same module: its binary's name under
/// `<dir>/bin`, and its main package.
pub const CLUSTERCTL: (&str, &str) = ("clusterctl", "sigs.k8s.io/cluster-api/cmd/clusterctl");

/// The CAPD directory, inside its module, whose templates the install copies.
pub const TEMPLATES: &str = "infrastructure/docker/templates";

/// The feature gates every manager runs with.
pub const FEATURE_GATES: &str = "ClusterTopology=true";

/// How the peer's managers are tuned; `None` leaves upstream's default (shipped: QPS 100, burst
/// 200, 10 to 100 reconciles at once depending on the kind).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeerSettings {
    /// Every manager's `--kube-api-qps`.
    pub qps: Option<f64>,
    /// Every manager's `--kube-api-burst`.
    pub burst: Option<u32>,
    /// Every [`Component::concurrency_flags`] flag.
    pub concurrency: Option<u16>,
}

impl PeerSettings {
    /// The command-line flags these settings give `component`.
    pub fn args(&self, component: &Component) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(qps) = self.qps {
            args.push(format!("--kube-api-qps={qps}"));
        }
        if let Some(burst) = self.burst {
            args.push(format!("--kube-api-burst={burst}"));
        }
        if let Some(concurrency) = self.concurrency {
            for flag in component.concurrency_flags {
                args.push(format!("--{flag}={concurrency}"));
            }
        }
        args
    }
}

/// Why the peer could not be provided.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The peer is not installed where it was looked for.
    #[error(
        "upstream Cluster API {CLUSTER_API_VERSION} is not installed in {dir} ({missing} is missing); \
         run `cargo xtask upstream install`, or set {UPSTREAM_DIR_ENV}"
    )]
    NotInstalled {
        /// Where it was looked for.
        dir: String,
        /// The first missing file.
        missing: String,
    },
    /// An installed file does not have the layout upstream's releases have.
    #[error("unexpected upstream layout: {what}")]
    Layout {
        /// What is wrong.
        what: String,
    },
    /// A YAML file does not parse.
    #[error("{file} is not valid YAML")]
    Yaml {
        /// The file.
        file: String,
        /// Why.
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// A file or process operation failed, or a manager exited.
    #[error(transparent)]
    Envtest(#[from] EnvtestError),
    /// An object could not be applied.
    #[error("applying {what}")]
    Apply {
        /// Which object.
        what: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// An object from upstream's manifests does not decode.
    #[error("decoding {what}")]
    Decode {
        /// Which object.
        what: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

impl UpstreamError {
    fn io(action: String) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Self::Envtest(EnvtestError::Io { action, source })
    }
}

/// `<cache>/upstream/<UPSTREAM_REVISION>`: where `cargo xtask upstream install` puts the peer.
pub fn default_upstream_dir() -> PathBuf {
    cache_root().join("upstream").join(UPSTREAM_REVISION)
}

/// An installed peer: the managers' binaries and upstream's configuration.
#[derive(Clone, Debug)]
pub struct UpstreamAssets {
    dir: PathBuf,
}

impl UpstreamAssets {
    /// The peer installed in `dir`, if every binary (clusterctl's and cert-manager's too),
    /// configuration directory and clusterctl repository is there.
    pub fn in_dir(dir: &Path) -> Result<Self, UpstreamError> {
        let assets = Self {
            dir: dir.to_path_buf(),
        };
        let clusterctl = std::iter::once(assets.clusterctl())
            .chain(
                crate::clusterctl::CERT_MANAGER_BINARIES
                    .iter()
                    .map(|b| dir.join("bin").join(b)),
            )
            .chain(
                crate::clusterctl::UPSTREAM_PROVIDERS
                    .iter()
                    .map(|p| p.components_path(dir)),
            )
            .chain([crate::clusterctl::cert_manager_components_path(dir)]);
        for needed in clusterctl {
            if !needed.is_file() {
                return Err(UpstreamError::NotInstalled {
                    dir: dir.display().to_string(),
                    missing: needed.display().to_string(),
                });
            }
        }
        for component in &COMPONENTS {
            for needed in [
                assets.binary(component),
                assets
                    .config_dir(component)
                    .join("crd")
                    .join("kustomization.yaml"),
                assets
                    .config_dir(component)
                    .join("webhook")
                    .join("manifests.yaml"),
            ] {
                if !needed.is_file() {
                    return Err(UpstreamError::NotInstalled {
                        dir: dir.display().to_string(),
                        missing: needed.display().to_string(),
                    });
                }
            }
        }
        Ok(assets)
    }

    /// The peer in `$CAPI_RS_UPSTREAM_DIR` when set, otherwise in [`default_upstream_dir`].
    pub fn locate() -> Result<Self, UpstreamError> {
        match std::env::var_os(UPSTREAM_DIR_ENV).filter(|d| !d.is_empty()) {
            Some(dir) => Self::in_dir(Path::new(&dir)),
            None => Self::in_dir(&default_upstream_dir()),
        }
    }

    /// The installation's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A manager's binary.
    pub fn binary(&self, component: &Component) -> PathBuf {
        self.dir.join("bin").join(component.name)
    }

    /// clusterctl's binary.
    pub fn clusterctl(&self) -> PathBuf {
        self.dir.join("bin").join(CLUSTERCTL.0)
    }

    /// A manager's copy of its `config/` directory.
    pub fn config_dir(&self, component: &Component) -> PathBuf {
        self.dir.join("config").join(component.name)
    }

    /// One of CAPD's templates (`cluster-template-in-memory.yaml`, `clusterclass-in-memory.yaml`).
    pub fn template(&self, name: &str) -> Result<String, UpstreamError> {
        let path = self.dir.join("templates").join(name);
        std::fs::read_to_string(&path).map_err(UpstreamError::io(format!(
            "reading upstream's template {}",
            path.display()
        )))
    }
}

/// The four upstream managers running against a control plane, with upstream's CRDs and webhooks
/// installed in it.
///
/// Guarantees: the managers are stopped and their directory (certificates, logs) removed when the
/// value is dropped, or, if the owning process dies first, by a watchdog within about a second.
/// What the peer installed stays in the control plane: its webhook configurations and conversion
/// webhooks (failure policy `Fail`) then point at stopped servers, so drop the control plane with
/// the peer rather than reuse it.
pub struct UpstreamPeer {
    // Dropped first: the watchdog, then the managers, then the directory.
    _watchdog: Option<Process>,
    managers: Vec<Process>,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for UpstreamPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamPeer")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl UpstreamPeer {
    /// Installs upstream's CRDs (with conversion webhooks) into `control_plane`, starts the four
    /// managers, waits until each reports ready (its webhook server listens), then installs the
    /// webhook configurations. Returns once the peer serves: objects applied after this are
    /// defaulted, validated and reconciled. Retries twice when a port picked as free was taken in
    /// the meantime.
    pub async fn start(
        control_plane: &ControlPlane,
        assets: &UpstreamAssets,
    ) -> Result<Self, UpstreamError> {
        Self::start_components(control_plane, assets, &COMPONENTS).await
    }

    /// [`UpstreamPeer::start`] with only `components` (their CRDs, webhooks and managers): for
    /// example [`CORE_BOOTSTRAP_CONTROL_PLANE`], upstream's core, kubeadm bootstrap and kubeadm
    /// control plane managers driving another infrastructure provider.
    pub async fn start_components(
        control_plane: &ControlPlane,
        assets: &UpstreamAssets,
        components: &[Component],
    ) -> Result<Self, UpstreamError> {
        Self::start_with(control_plane, assets, components, &PeerSettings::default()).await
    }

    /// [`UpstreamPeer::start_components`] with the managers tuned by `settings` (for a benchmark
    /// that runs upstream at the same limits as another stack).
    pub async fn start_with(
        control_plane: &ControlPlane,
        assets: &UpstreamAssets,
        components: &[Component],
        settings: &PeerSettings,
    ) -> Result<Self, UpstreamError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once(control_plane, assets, components, settings).await {
                Err(UpstreamError::Envtest(EnvtestError::Exited { ref tail, .. }))
                    if attempt < 3 && tail.contains("address already in use") =>
                {
                    continue;
                }
                other => return other,
            }
        }
    }

    async fn start_once(
        control_plane: &ControlPlane,
        assets: &UpstreamAssets,
        components: &[Component],
        settings: &PeerSettings,
    ) -> Result<Self, UpstreamError> {
        // One webhook and one health port is reserved per manager of the peer.
        let components = &components[..components.len().min(COMPONENTS.len())];
        let dir = scratch_dir()?;
        let root = dir.path().to_path_buf();
        let pki = ServingPki::generate("capi-upstream-webhooks").map_err(EnvtestError::from)?;
        let certs = root.join("certs");
        std::fs::create_dir_all(&certs)
            .map_err(UpstreamError::io(format!("creating {}", certs.display())))?;
        write(&certs.join("tls.crt"), &pki.cert_pem)?;
        write(&certs.join("tls.key"), &pki.key_pem)?;
        // A webhook port and a health port per manager.
        let ports: [u16; 8] = free_ports()?;
        let health = COMPONENTS.len();
        let client = control_plane.client().await?;

        let mut crds = Vec::new();
        for (index, component) in components.iter().enumerate() {
            for crd in manifests::crds(&assets.config_dir(component), &pki.ca_pem, ports[index])? {
                let what = format!("CRD {}", crd["metadata"]["name"]);
                let crd: CustomResourceDefinition = serde_json::from_value(crd)
                    .map_err(|source| UpstreamError::Decode { what, source })?;
                crds.push(crd);
            }
        }
        crate::install_crds(&client, &crds).await?;

        let mut managers = Vec::with_capacity(components.len());
        for (index, component) in components.iter().enumerate() {
            let mut command = Command::new(assets.binary(component));
            command
                .arg(format!(
                    "--kubeconfig={}",
                    control_plane.kubeconfig_path().display()
                ))
                .arg("--leader-elect=false")
                .arg("--diagnostics-address=0")
                .arg(format!("--webhook-cert-dir={}", certs.display()))
                .arg(format!("--webhook-port={}", ports[index]))
                .arg(format!("--health-addr=127.0.0.1:{}", ports[index + health]))
                .arg(format!("--feature-gates={FEATURE_GATES}"))
                .args(settings.args(component))
                .envs(component.env.iter().copied());
            managers.push(Process::spawn(&mut command, &root, component.name)?);
        }
        let watchdog = spawn_watchdog(&root, &managers.iter().collect::<Vec<_>>()).ok();
        for (index, manager) in managers.iter_mut().enumerate() {
            wait_ready(manager, ports[index + health]).await?;
        }

        let params = PatchParams::apply("capi-testing-upstream").force();
        for (index, component) in components.iter().enumerate() {
            for config in manifests::webhook_configurations(
                &assets.config_dir(component),
                &pki.ca_pem,
                ports[index],
                component.name,
            )? {
                let object: DynamicObject =
                    serde_json::from_value(config).map_err(|source| UpstreamError::Decode {
                        what: format!("{}'s webhook configuration", component.name),
                        source,
                    })?;
                let kind = object
                    .types
                    .as_ref()
                    .map(|t| t.kind.clone())
                    .unwrap_or_default();
                let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", &kind);
                let resource = ApiResource::from_gvk(&gvk);
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
                let what = format!("{kind} {}", object.name_any());
                api.patch(&object.name_any(), &params, &Patch::Apply(&object))
                    .await
                    .map_err(|source| UpstreamError::Apply { what, source })?;
            }
        }
        Ok(Self {
            _watchdog: watchdog,
            managers,
            dir,
        })
    }

    /// The directory holding the managers' logs (`<component>.log`) and the webhook certificates.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `Err` naming the first manager that has exited, with its log's tail.
    pub fn check(&mut self) -> Result<(), UpstreamError> {
        for manager in &mut self.managers {
            manager.check()?;
        }
        Ok(())
    }

    /// The managers' process IDs, in [`COMPONENTS`] order.
    pub fn pids(&self) -> Vec<u32> {
        self.managers.iter().map(Process::id).collect()
    }

    /// The last lines of every manager's log, for a failing test's report.
    pub fn log_tails(&self) -> String {
        self.managers
            .iter()
            .map(|m| format!("--- {}\n{}", m.log().display(), tail(m.log())))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Waits until the manager's health endpoint answers `/readyz` with 200: upstream's managers
/// report ready once their webhook server listens (caches may still be filling; reconciles start
/// when they are).
async fn wait_ready(manager: &mut Process, port: u16) -> Result<(), UpstreamError> {
    let started = Instant::now();
    loop {
        manager.check()?;
        if readyz(port).await {
            return Ok(());
        }
        if started.elapsed() > READY_TIMEOUT {
            return Err(manager.not_ready_after(READY_TIMEOUT).into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn readyz(port: u16) -> bool {
    crate::pods::http_ok(port, "/readyz").await
}
