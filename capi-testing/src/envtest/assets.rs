//! Where the local control plane's binaries are (etcd, kube-apiserver) and the kubeadms that
//! validate rendered configurations.

use std::path::{Path, PathBuf};

use super::EnvtestError;

/// The environment variable controller-runtime's envtest reads: a directory holding `etcd` and
/// `kube-apiserver`.
pub const KUBEBUILDER_ASSETS: &str = "KUBEBUILDER_ASSETS";

/// The Kubernetes release `cargo xtask envtest` builds kube-apiserver and kubeadm from (the
/// newest minor upstream Cluster API v1.14 supports for management clusters). The wrapper module
/// `xtask/go/envtest/go.mod` pins the same release; a test keeps the two equal.
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// The etcd release the pinned Kubernetes release is tested with.
pub const ETCD_VERSION: &str = "v3.6.8";

/// The cache key of the built binaries: the Kubernetes release plus the revision of our build
/// recipe. Bump the suffix whenever the recipe changes, so that every machine rebuilds instead of
/// reusing a binary built the old way.
pub const ASSETS_REVISION: &str = "v1.36.3-gomod.1";

/// The root of this project's caches: `$CAPI_RS_CACHE_DIR`, else `$XDG_CACHE_HOME/capi-rs`, else
/// `$HOME/.cache/capi-rs`, else a directory under the system's temp dir.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPI_RS_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("capi-rs");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".cache").join("capi-rs");
    }
    std::env::temp_dir().join("capi-rs-cache")
}

/// The directory `cargo xtask envtest` fills: `<cache_root>/envtest/<ASSETS_REVISION>`.
pub fn default_assets_dir() -> PathBuf {
    cache_root().join("envtest").join(ASSETS_REVISION)
}

/// The Kubernetes release of the second `kubeadm` `cargo xtask envtest` builds
/// (`kubeadm-v1.30`): the validator of kubeadm `v1beta3` documents, which the bootstrap provider
/// renders for clusters before v1.31. kubeadm judges only control-plane versions of its own minor
/// and the one before, so one kubeadm cannot validate both APIs' documents as rendered.
pub const KUBEADM_V1BETA3_VERSION: &str = "v1.30.14";

/// The minor of a Kubernetes version such as `v1.36.3` or `1.30.14` (36, 30); `None` when it
/// has none.
pub fn kubernetes_minor(version: &str) -> Option<u32> {
    version
        .trim_start_matches('v')
        .split('.')
        .nth(1)?
        .parse()
        .ok()
}

/// The file name of that kubeadm in the assets directory.
pub const KUBEADM_V1BETA3_BINARY: &str = "kubeadm-v1.30";

/// The `kubeadm` that validates a configuration rendered for Kubernetes minor `minor` (of 1.x):
/// `kubeadm-v1.30` for minors 29 and 30, `kubeadm` (of [`KUBERNETES_VERSION`]) for the minor
/// before it and its own; `None` for other minors or when it is not built. Looked for in
/// `$CAPI_RS_KUBEADM_DIR`, `$KUBEBUILDER_ASSETS`, then [`default_assets_dir`].
pub fn kubeadm_for(minor: u32) -> Option<PathBuf> {
    let name = [
        ("kubeadm", kubernetes_minor(KUBERNETES_VERSION)),
        (
            KUBEADM_V1BETA3_BINARY,
            kubernetes_minor(KUBEADM_V1BETA3_VERSION),
        ),
    ]
    .into_iter()
    .find(|(_, kubeadm_minor)| {
        kubeadm_minor.is_some_and(|k| minor <= k && minor.saturating_add(1) >= k)
    })
    .map(|(name, _)| name)?;
    ["CAPI_RS_KUBEADM_DIR", KUBEBUILDER_ASSETS]
        .into_iter()
        .filter_map(|var| std::env::var_os(var).filter(|d| !d.is_empty()))
        .map(PathBuf::from)
        .chain(std::iter::once(default_assets_dir()))
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// The binaries of a local control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assets {
    /// The `etcd` binary.
    pub etcd: PathBuf,
    /// The `kube-apiserver` binary.
    pub kube_apiserver: PathBuf,
}

impl Assets {
    /// The binaries in `dir`, if both are there.
    pub fn in_dir(dir: &Path) -> Result<Self, EnvtestError> {
        let etcd = dir.join("etcd");
        let kube_apiserver = dir.join("kube-apiserver");
        for (binary, path) in [("etcd", &etcd), ("kube-apiserver", &kube_apiserver)] {
            if !path.is_file() {
                return Err(EnvtestError::MissingBinary {
                    binary,
                    searched: dir.display().to_string(),
                });
            }
        }
        Ok(Self {
            etcd,
            kube_apiserver,
        })
    }

    /// Finds the binaries: in `$KUBEBUILDER_ASSETS` when set (and only there, so a user's choice
    /// is never silently replaced), otherwise in [`default_assets_dir`].
    pub fn locate() -> Result<Self, EnvtestError> {
        match std::env::var_os(KUBEBUILDER_ASSETS).filter(|d| !d.is_empty()) {
            Some(dir) => Self::in_dir(Path::new(&dir)),
            None => Self::in_dir(&default_assets_dir()),
        }
    }
}
