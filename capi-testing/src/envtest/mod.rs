//! A private etcd + kube-apiserver on loopback.

mod assets;
pub(crate) mod control_plane;
pub(crate) mod pki;

pub use assets::{
    ASSETS_REVISION, Assets, ETCD_VERSION, KUBEADM_V1BETA3_BINARY, KUBEADM_V1BETA3_VERSION,
    KUBEBUILDER_ASSETS, KUBERNETES_VERSION, cache_root, default_assets_dir, kubeadm_for,
    kubernetes_minor,
};
pub(crate) use control_plane::config_from_kubeconfig;
pub use control_plane::{ControlPlane, ControlPlaneOptions};

use std::path::PathBuf;

/// Why the local control plane could not be provided.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvtestError {
    /// The binaries are not where they should be.
    #[error(
        "{binary} not found in {searched}; run `cargo xtask envtest` to build and cache it, or set \
         KUBEBUILDER_ASSETS to a directory holding etcd and kube-apiserver (kube-controller-manager \
         is looked for there first, then in the cache)"
    )]
    MissingBinary {
        /// `etcd`, `kube-apiserver` or `kube-controller-manager`.
        binary: &'static str,
        /// Where it was looked for.
        searched: String,
    },
    /// A file or process operation failed.
    #[error("{action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A process exited before becoming ready.
    #[error("{binary} exited during start-up ({status}); its log is {log}:\n{tail}")]
    Exited {
        /// Which process.
        binary: &'static str,
        /// Its exit status.
        status: String,
        /// The log file.
        log: PathBuf,
        /// The last lines of the log.
        tail: String,
    },
    /// A process did not become ready in time.
    #[error("{binary} was not ready after {seconds} s; its log is {log}:\n{tail}")]
    NotReady {
        /// Which process.
        binary: &'static str,
        /// How long we waited.
        seconds: u64,
        /// The log file.
        log: PathBuf,
        /// The last lines of the log.
        tail: String,
    },
    /// Generating the control plane's keys and certificates failed.
    #[error("generating the control plane's certificates: {0}")]
    Certificates(#[from] rcgen::Error),
    /// The client configuration could not be built.
    #[error("building a client for the local API server: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// A request to the API server failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// A CRD did not become established.
    #[error("CRD {name} was not established in time")]
    CrdNotEstablished {
        /// The CRD's name.
        name: String,
    },
}

impl EnvtestError {
    pub(crate) fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let action = action.into();
        move |source| Self::Io { action, source }
    }
}
