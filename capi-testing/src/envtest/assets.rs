//! Where the etcd and kube-apiserver binaries are.

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

/// The `kubeadm` binary the bootstrap tests validate rendered configurations with:
/// `$CAPI_RS_KUBEADM` when set, else `kubeadm` in `$KUBEBUILDER_ASSETS` or in
/// [`default_assets_dir`] (where `cargo xtask envtest` builds it), else `None`.
pub fn kubeadm() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CAPI_RS_KUBEADM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let assets = std::env::var_os(KUBEBUILDER_ASSETS)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from);
    assets
        .into_iter()
        .chain(std::iter::once(default_assets_dir()))
        .map(|dir| dir.join("kubeadm"))
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
