//! Bootstrap for Cluster API machines.
//!
//! Today this crate provides the producer side of the bootstrap contract ([`secret`]): the Secret
//! a bootstrap provider writes and an infrastructure provider reads (with
//! [`capi_core::BootstrapData::from_secret`]). The kubeadm types (`KubeadmConfig`), cloud-init and
//! Ignition rendering, PKI and the bootstrap reconciler (DESIGN.md §7) are tracked as their own
//! issue and are not here yet.
//!
//! ```
//! use capi_bootstrap::secret::BootstrapSecret;
//! use capi_core::{BootstrapData, BootstrapFormat};
//!
//! let secret = BootstrapSecret::new("default", "worker-0", "demo", BootstrapFormat::CloudConfig, b"#cloud-config\n".to_vec())
//!     .into_secret();
//! let data = BootstrapData::from_secret(&secret).unwrap();
//! assert_eq!(data.expose(), b"#cloud-config\n");
//! ```

pub mod secret;
