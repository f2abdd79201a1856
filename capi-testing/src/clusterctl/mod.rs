//! The real clusterctl against a local control plane: its configuration, the local repositories
//! it installs from, and the pods of what it installs.
//!
//! `cargo xtask upstream install` builds clusterctl with upstream's managers and writes, under the
//! peer's directory, a clusterctl repository for upstream's core, kubeadm bootstrap and kubeadm
//! control plane providers (each `config/default` rendered by kustomize with the release's image
//! names, beside upstream's `metadata.yaml`) and one for cert-manager ([`cert_manager_components`]:
//! cert-manager's CRDs from its module with the controller and CA injector this project builds
//! from cert-manager's packages):
//!
//! ```text
//! <upstream>/clusterctl/cluster-api/v1.14.2/{core-components.yaml, metadata.yaml}
//! <upstream>/clusterctl/bootstrap-kubeadm/v1.14.2/{bootstrap-components.yaml, metadata.yaml}
//! <upstream>/clusterctl/control-plane-kubeadm/v1.14.2/{control-plane-components.yaml, metadata.yaml}
//! <upstream>/clusterctl/cert-manager/v1.21.1/cert-manager.yaml
//! ```
//!
//! [`Clusterctl`] runs the binary with a configuration naming those repositories and the
//! infrastructure providers a test adds (a provider's release, as `capi_provider::clusterctl`
//! writes it), with its own home (overrides, caches) and no version check. [`upstream_images`]
//! tells a [`PodRunner`](crate::pods::PodRunner) which binary runs each of those images.
//! [`Management`] puts them together: a management cluster that clusterctl initialises, with
//! what a lifecycle test asks of it (inventory, readiness to move, `Available`, objects).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

mod management;

pub use management::{
    KUBEADM_CLUSTER_KINDS, Management, ManagementError, Moved, by_name, by_uid, has_condition,
};

use crate::pods::LocalImages;
use crate::upstream::{CLUSTER_API_VERSION, COMPONENTS, Component, UpstreamAssets};

/// The cert-manager release clusterctl v1.14 installs by default, which the peer builds.
pub const CERT_MANAGER_VERSION: &str = "v1.21.1";

/// The registry upstream's release images live in (`<registry>/<image>:<version>`).
pub const UPSTREAM_REGISTRY: &str = "registry.k8s.io/cluster-api";

/// cert-manager's images: its controller, and its CA injector.
pub const CERT_MANAGER_IMAGES: [&str; 2] = [
    "quay.io/jetstack/cert-manager-controller",
    "quay.io/jetstack/cert-manager-cainjector",
];

/// The binaries `cargo xtask upstream install` builds for cert-manager, in [`CERT_MANAGER_IMAGES`]
/// order.
pub const CERT_MANAGER_BINARIES: [&str; 2] = ["cert-manager-controller", "cert-manager-cainjector"];

/// How clusterctl knows one of upstream's providers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpstreamProvider {
    /// The provider's name (`cluster-api`, `kubeadm`).
    pub name: &'static str,
    /// clusterctl's provider type.
    pub kind: &'static str,
    /// The repository's folder (clusterctl's manifest label).
    pub folder: &'static str,
    /// The components file's name.
    pub components: &'static str,
    /// The release image's name under [`UPSTREAM_REGISTRY`].
    pub image: &'static str,
}

/// Upstream's core, kubeadm bootstrap and kubeadm control plane providers, in the order of
/// [`COMPONENTS`]' first three.
pub const UPSTREAM_PROVIDERS: [UpstreamProvider; 3] = [
    UpstreamProvider {
        name: "cluster-api",
        kind: "CoreProvider",
        folder: "cluster-api",
        components: "core-components.yaml",
        image: "cluster-api-controller",
    },
    UpstreamProvider {
        name: "kubeadm",
        kind: "BootstrapProvider",
        folder: "bootstrap-kubeadm",
        components: "bootstrap-components.yaml",
        image: "kubeadm-bootstrap-controller",
    },
    UpstreamProvider {
        name: "kubeadm",
        kind: "ControlPlaneProvider",
        folder: "control-plane-kubeadm",
        components: "control-plane-components.yaml",
        image: "kubeadm-control-plane-controller",
    },
];

/// The image upstream's development manifests name for `provider` (what kustomize renders from
/// `config/default`), which the release replaces with [`UpstreamProvider::release_image`].
pub fn development_image(provider: &UpstreamProvider) -> String {
    format!("gcr.io/k8s-staging-cluster-api/{}:main", provider.image)
}

impl UpstreamProvider {
    /// The image the release names: `registry.k8s.io/cluster-api/<image>:<version>`.
    pub fn release_image(&self) -> String {
        format!("{UPSTREAM_REGISTRY}/{}:{CLUSTER_API_VERSION}", self.image)
    }

    /// The components file in the repository of the peer installed in `upstream_dir`.
    pub fn components_path(&self, upstream_dir: &Path) -> PathBuf {
        repository_dir(upstream_dir)
            .join(self.folder)
            .join(CLUSTER_API_VERSION)
            .join(self.components)
    }
}

/// `<upstream_dir>/clusterctl`: the clusterctl repositories of the peer installed in
/// `upstream_dir`.
pub fn repository_dir(upstream_dir: &Path) -> PathBuf {
    upstream_dir.join("clusterctl")
}

/// cert-manager's components file in the repository of the peer installed in `upstream_dir`.
pub fn cert_manager_components_path(upstream_dir: &Path) -> PathBuf {
    repository_dir(upstream_dir)
        .join("cert-manager")
        .join(CERT_MANAGER_VERSION)
        .join("cert-manager.yaml")
}

/// cert-manager's components as clusterctl installs them: its Namespace, its CRDs (the files of
/// `crds`, cert-manager's own `deploy/crds`), and the controller and CA injector with the
/// ServiceAccounts and ClusterRoles they run with. Not included: cert-manager's webhook (which
/// validates cert-manager's own kinds; nothing here needs it) and ACME, Vault and Venafi issuers.
pub fn cert_manager_components(crds: &Path) -> Result<String, std::io::Error> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(crds)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no CRD files in {}", crds.display()),
        ));
    }
    let namespace = "cert-manager";
    let labels = |component: &str| {
        json!({
            "app.kubernetes.io/name": component,
            "app.kubernetes.io/instance": "cert-manager",
            "app.kubernetes.io/component": component,
        })
    };
    let mut objects: Vec<Value> = vec![json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace},
    })];
    let mut out = String::new();
    let controller_rules = json!([
        {"apiGroups": ["cert-manager.io", "acme.cert-manager.io"], "resources": ["*"],
         "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
    ]);
    let cainjector_rules = json!([
        {"apiGroups": ["cert-manager.io"], "resources": ["certificates"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["admissionregistration.k8s.io"],
         "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
         "verbs": ["get", "list", "watch", "update", "patch"]},
        {"apiGroups": ["apiregistration.k8s.io"], "resources": ["apiservices"],
         "verbs": ["get", "list", "watch", "update", "patch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": ["get", "list", "watch", "update", "patch"]},
    ]);
    for (component, image, rules, args, ports) in [
        (
            "cert-manager",
            CERT_MANAGER_IMAGES[0],
            controller_rules,
            json!(["--cluster-resource-namespace=$(POD_NAMESPACE)"]),
            json!([]),
        ),
        (
            "cainjector",
            CERT_MANAGER_IMAGES[1],
            cainjector_rules,
            json!(["--health-probe-bind-address=:9403"]),
            json!([{"name": "http-healthz", "containerPort": 9403}]),
        ),
    ] {
        let name = if component == "cert-manager" {
            "cert-manager".to_string()
        } else {
            format!("cert-manager-{component}")
        };
        objects.push(json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace, "labels": labels(component)},
        }));
        objects.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels(component)},
            "rules": rules,
        }));
        objects.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels(component)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }));
        let mut container = json!({
            "name": component,
            "image": format!("{image}:{CERT_MANAGER_VERSION}"),
            "args": args,
            "env": [{"name": "POD_NAMESPACE",
                     "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
            "ports": ports,
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"]},
            },
        });
        if component == "cainjector" {
            container["readinessProbe"] = json!({"httpGet": {"path": "/readyz",
                                                              "port": "http-healthz"}});
        }
        objects.push(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels(component)},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels(component)},
                "template": {
                    "metadata": {"labels": labels(component)},
                    "spec": {
                        "serviceAccountName": name,
                        "securityContext": {"runAsNonRoot": true,
                                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [container],
                    },
                },
            },
        }));
    }
    for file in files {
        let crd = std::fs::read_to_string(&file)?;
        out.push_str("---\n");
        out.push_str(crd.trim_start_matches("---\n").trim_end());
        out.push('\n');
    }
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&object).map_err(std::io::Error::other)?);
    }
    Ok(out)
}

/// Which binary runs each image of upstream's providers and of cert-manager, with the flags that
/// let several managers share one machine: no leader election and no metrics endpoint, and the
/// health and webhook ports and the webhook's certificate directory the pod was given.
pub fn upstream_images(assets: &UpstreamAssets) -> LocalImages {
    let mut images = LocalImages::new();
    for (provider, component) in UPSTREAM_PROVIDERS.iter().zip(COMPONENTS.iter()) {
        let component: Component = *component;
        images = images.with(
            format!("{UPSTREAM_REGISTRY}/{}", provider.image),
            assets.binary(&component),
            |pod| {
                let mut flags = vec![
                    "--leader-elect=false".to_string(),
                    "--diagnostics-address=0".to_string(),
                ];
                if let Some(port) = pod.port("healthz") {
                    flags.push(format!("--health-addr=:{port}"));
                }
                if let Some(port) = pod.port("webhook-server") {
                    flags.push(format!("--webhook-port={port}"));
                }
                if let Some(certs) = pod.mount("/tmp/k8s-webhook-server/serving-certs") {
                    flags.push(format!("--webhook-cert-dir={}", certs.display()));
                }
                flags
            },
        );
    }
    let bin = assets.dir().join("bin");
    images = images.with(
        CERT_MANAGER_IMAGES[0],
        bin.join(CERT_MANAGER_BINARIES[0]),
        |_| Vec::new(),
    );
    images.with(
        CERT_MANAGER_IMAGES[1],
        bin.join(CERT_MANAGER_BINARIES[1]),
        |pod| {
            pod.port("http-healthz")
                .map(|port| vec![format!("--health-probe-bind-address=:{port}")])
                .unwrap_or_default()
        },
    )
}

/// An infrastructure provider's releases for clusterctl's configuration.
#[derive(Clone, Debug)]
pub struct InfrastructureRelease {
    /// The provider's clusterctl name (`capirs-inmemory`).
    pub name: String,
    /// The repository holding `infrastructure-<name>/vX.Y.Z/` folders (as
    /// `capi_provider::clusterctl::Release::write` writes them): clusterctl installs the newest
    /// version unless told one (`--infrastructure <name>:vX.Y.Z`) and upgrades to the newest of
    /// the contract.
    pub repository: PathBuf,
}

impl InfrastructureRelease {
    /// The URL clusterctl's configuration names: the components file of the latest version.
    fn url(&self) -> String {
        file_url(
            &self
                .repository
                .join(format!("infrastructure-{}", self.name))
                .join("latest")
                .join("infrastructure-components.yaml"),
        )
    }
}

/// Why clusterctl could not be run, or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterctlError {
    /// A file could not be written or the binary started.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// clusterctl exited with a failure.
    #[error("`clusterctl {args}` failed ({status}):\n{output}")]
    Failed {
        /// Its arguments.
        args: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed (standard output, then standard error).
        output: String,
    },
}

/// The real clusterctl with a configuration of its own (see the module's docs).
#[derive(Debug)]
pub struct Clusterctl {
    binary: PathBuf,
    config: PathBuf,
    home: tempfile::TempDir,
}

impl Clusterctl {
    /// clusterctl of `assets`, configured with upstream's providers and cert-manager from the
    /// peer's repositories and with `infrastructure` (and `variables`, as the configuration
    /// file's own entries).
    pub fn new(
        assets: &UpstreamAssets,
        infrastructure: &[InfrastructureRelease],
        variables: &[(&str, &str)],
    ) -> Result<Self, ClusterctlError> {
        let home = tempfile::Builder::new()
            .prefix("capi-clusterctl-")
            .tempdir()
            .map_err(|source| ClusterctlError::Io {
                what: "creating clusterctl's home".into(),
                source,
            })?;
        let mut providers: Vec<Value> = UPSTREAM_PROVIDERS
            .iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "type": p.kind,
                    "url": file_url(&p.components_path(assets.dir())),
                })
            })
            .collect();
        providers.extend(infrastructure.iter().map(|p| {
            json!({
                "name": p.name,
                "type": "InfrastructureProvider",
                "url": p.url(),
            })
        }));
        let mut config = json!({
            "providers": providers,
            "cert-manager": {
                "url": file_url(&cert_manager_components_path(assets.dir())),
                "version": CERT_MANAGER_VERSION,
            },
        });
        for (name, value) in variables {
            config[*name] = json!(value);
        }
        let path = home.path().join("clusterctl.yaml");
        let yaml = serde_saphyr::to_string(&config).map_err(|e| ClusterctlError::Io {
            what: "writing clusterctl's configuration".into(),
            source: std::io::Error::other(e),
        })?;
        std::fs::write(&path, yaml).map_err(|source| ClusterctlError::Io {
            what: format!("writing {}", path.display()),
            source,
        })?;
        Ok(Self {
            binary: assets.clusterctl(),
            config: path,
            home,
        })
    }

    /// The configuration file clusterctl reads (`--config`).
    pub fn config(&self) -> &Path {
        &self.config
    }

    /// Runs `clusterctl <args> --config <config>` against the cluster of `kubeconfig` (unless
    /// `args` name one themselves) and returns what it printed. clusterctl writes its progress
    /// to standard error and only its results (YAML, tables) to standard output.
    pub async fn run(
        &self,
        kubeconfig: &Path,
        args: &[&str],
    ) -> Result<ClusterctlOutput, ClusterctlError> {
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join(".config"))
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .env_remove("GITHUB_TOKEN")
            .kill_on_drop(true);
        if !args.iter().any(|a| a.starts_with("--kubeconfig")) {
            command.arg("--kubeconfig").arg(kubeconfig);
        }
        let output = command
            .output()
            .await
            .map_err(|source| ClusterctlError::Io {
                what: format!("starting {}", self.binary.display()),
                source,
            })?;
        let printed = ClusterctlOutput {
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        if !output.status.success() {
            return Err(ClusterctlError::Failed {
                args: args.join(" "),
                status: output.status,
                output: format!("{}{}", printed.stdout, printed.stderr),
            });
        }
        Ok(printed)
    }
}

/// What one clusterctl command printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterctlOutput {
    /// Its results: YAML, tables, descriptions.
    pub stdout: String,
    /// Its progress messages.
    pub stderr: String,
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cert_manager_components_hold_its_crds_and_both_deployments() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cert-manager.io_issuers.yaml"),
            "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: issuers.cert-manager.io\n",
        )
        .unwrap();
        let yaml = cert_manager_components(dir.path()).unwrap();
        let documents: Vec<Value> = yaml
            .split("\n---\n")
            .map(|d| serde_saphyr::from_str::<Value>(d.trim_start_matches("---\n")).unwrap())
            .collect();
        let kinds: Vec<(&str, &str)> = documents
            .iter()
            .map(|d| {
                (
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds[0],
            ("CustomResourceDefinition", "issuers.cert-manager.io")
        );
        assert!(kinds.contains(&("Namespace", "cert-manager")));
        assert!(kinds.contains(&("Deployment", "cert-manager")));
        assert!(kinds.contains(&("Deployment", "cert-manager-cainjector")));
        // Exactly one Namespace, as clusterctl requires of a components file.
        assert_eq!(kinds.iter().filter(|(k, _)| *k == "Namespace").count(), 1);
        assert!(yaml.contains(&format!("cert-manager-controller:{CERT_MANAGER_VERSION}")));
    }

    #[test]
    fn an_empty_crd_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(cert_manager_components(dir.path()).is_err());
    }
}
