//! Test harness for Cluster API providers built with this SDK.
//!
//! Integration tests should talk to a real API server, not a mock of one. This crate starts a
//! private `etcd` and `kube-apiserver` on free loopback ports (like controller-runtime's envtest),
//! installs CRDs, and hands out a [`kube::Client`] and a fresh namespace per test. Everything is
//! stopped when the [`TestEnv`] (or [`envtest::ControlPlane`]) is dropped — and also when the test
//! process dies without running destructors, through a small watchdog process.
//!
//! - [`envtest`]: locating the binaries ([`envtest::Assets`]) and running them
//!   ([`envtest::ControlPlane`]).
//! - [`TestEnv`]: a control plane with the core CRDs installed, plus per-test namespaces.
//! - [`upstream`]: upstream Cluster API's managers (core, kubeadm bootstrap and control plane,
//!   the in-memory test infrastructure provider) as a peer on the same control plane.
//! - [`clusterctl`]: the real clusterctl, configured with upstream's providers, cert-manager and a
//!   provider's own release from local repositories.
//! - [`pods`]: the Deployments of a control plane run as local processes with their
//!   ServiceAccounts, volumes and Services' endpoints — what a kubelet would do for the managers
//!   clusterctl installs.
//! - [`conformance`]: the provider contract checked against a vendor's own actuators and cloud —
//!   idempotent create under lost responses and crashes, exists that never creates, delete that
//!   returns only when gone, nothing leaked — each failure naming the rule it breaks.
//! - [`deployed`]: a provider's manager binary run as deployed — as its generated RBAC's
//!   ServiceAccount, JSON debug logs in a file — for end-to-end tests.
//! - [`crd_files`]: the checked-in CRD YAML is what the types generate; a provider's CRDs carry
//!   the contract label.
//! - [`golden`]: golden files, rewritten with `UPDATE_GOLDEN=1`.
//! - [`schema_compat`]: a CRD schema compared with upstream's, field path by field path, against
//!   a reviewed allow-list of accepted differences.
//! - [`schema_violations`]: every constraint of a CRD schema as a field path and proptest
//!   strategies of edits that break it, to check that the API server refuses bad input.
//!
//! The binaries come from `KUBEBUILDER_ASSETS` if set (the directory layout controller-runtime
//! uses: `etcd` and `kube-apiserver` side by side), otherwise from the cache that
//! `cargo xtask envtest` fills.
//!
//! ```no_run
//! # async fn demo() -> Result<(), capi_testing::envtest::EnvtestError> {
//! use capi_core::api::Cluster;
//! use kube::Api;
//!
//! let env = capi_testing::TestEnv::start().await?;
//! let ns = env.namespace().await?;
//! let clusters: Api<Cluster> = Api::namespaced(env.client(), &ns);
//! assert!(clusters.list(&Default::default()).await.map_err(capi_testing::envtest::EnvtestError::Kube)?.items.is_empty());
//! # Ok(()) }
//! ```

pub mod clusterctl;
pub mod conformance;
pub mod crd_files;
pub mod deployed;
pub mod envtest;
pub mod faults;
pub mod golden;
pub mod manifest;
pub mod pods;
pub mod schema_compat;
pub mod schema_violations;
pub mod table;
mod test_env;
pub mod upstream;

pub use test_env::install_crds;

pub use test_env::TestEnv;
