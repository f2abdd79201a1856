//! The kubeadm bootstrap provider for Cluster API machines: kubeadm, as cloud-init or Ignition,
//! and the controller that writes each machine's bootstrap data.
//!
//! - [`api`]: `KubeadmConfig` and `KubeadmConfigTemplate` (`bootstrap.cluster.x-k8s.io/v1beta2`, a
//!   documented subset of upstream's fields).
//! - [`render`]: one model ([`render::plan`]) and two outputs — [`render::cloud_init`]
//!   (YAML-1.1-safe cloud-config) and [`render::ignition`] (spec v3.3) — with kubeadm's
//!   configuration in the API version the node's kubeadm expects ([`render::kubeadm`]). Every
//!   variant is checked by the real `cloud-init schema` and `ignition-validate` in the tests, and
//!   checked in as golden files (`tests/golden/`). Providers add files (a cloud provider
//!   configuration, a CA bundle) through [`render::RenderInput::extra_files`] without forking the
//!   renderer.
//! - [`secret`]: the producer side of the bootstrap contract — the Secret an infrastructure
//!   provider reads with [`capi_core::BootstrapData::from_secret`].
//! - [`pki`]: the cluster CAs, service-account key, admin kubeconfig, CA pin and bootstrap tokens;
//!   [`init_lock`]: exactly one control-plane machine runs `kubeadm init`; [`tokens`]: bootstrap
//!   token Secrets for the workload cluster; [`cluster_pki`]: the cluster's stored PKI, generated
//!   once by whichever controller needs it first.
//!
//! - [`controller`]: puts these together — `KubeadmConfig` → bootstrap-data Secret, once — on the
//!   shared machinery of `capi-actuator`; registered with a `Manager` as
//!   [`controller::KubeadmBootstrap`]. Providers add files to every machine's data through
//!   [`controller::BootstrapFiles`].
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

pub mod api;
pub mod cluster_pki;
pub mod controller;
pub mod init_lock;
pub mod pki;
pub mod render;
pub mod secret;
pub mod tokens;
