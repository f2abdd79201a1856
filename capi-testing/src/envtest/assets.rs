//! Where the etcd and kube-apiserver binaries are.

use std::path::{Path, PathBuf};

use super::EnvtestError;

/// The environment variable controller-runtime's envtest reads: a directory holding `etcd` and
/// `kube-apiserver`.
pub const KUBEBUILDER_ASSETS: &str = "KUBEBUILDER_ASSETS";

/// The kube-apiserver version `cargo xtask envtest` builds.
pub const KUBE_APISERVER_VERSION: &str = "v1.20.2";

/// The cache key of the built binaries: the version plus the revision of our build recipe. Bump the
/// suffix whenever the recipe changes, so that every machine rebuilds instead of reusing a binary
/// built the old way.
pub const ASSETS_REVISION: &str = "v1.20.2-capi.2";

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
