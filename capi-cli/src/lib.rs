//! `capictl`, the workspace's clusterctl-style command line, as a library so that the quickstart
//! and tests drive the same code as the binary.
//!
//! - [`template`]: clusterctl's `${VAR}`, `${VAR:-default}`, `${VAR:=default}`, `${VAR=default}`
//!   variables;
//! - [`generate`]: `capictl generate cluster` — the built-in templates per provider and flavor,
//!   flags and environment, `--list-variables`;
//! - [`describe`]: `capictl describe cluster` — the cluster as a tree of objects with readiness;
//! - [`apply`]: `capictl apply -f` — server-side apply with strict field validation (an
//!   undeclared or misspelled field is an error naming it, never dropped);
//! - [`init`]: `capictl init` — CRDs, RBAC and the provider manager, applied idempotently;
//! - [`manifests`]: the provider manager's generated RBAC, Deployment and clusterctl metadata;
//! - [`move_cluster`]: `capictl move` — a cluster's objects to another management cluster;
//! - [`scaffold`]: `capictl new provider` — a new provider's cargo project, on the `capi` crate;
//! - [`image`]: `capictl image` — a manager's OCI image, built reproducibly with buildah.
//!
//! ```
//! use capi_cli::generate::{Inputs, built_in, render};
//!
//! let inputs = Inputs {
//!     cluster_name: "demo".into(),
//!     kubernetes_version: Some("v1.33.0".into()),
//!     worker_machine_count: Some(5),
//!     ..Inputs::default()
//! };
//! let yaml = render(built_in("inmemory", None)?, &inputs, |_| None)?;
//! assert!(yaml.contains("replicas: 5"));
//! # Ok::<(), capi_cli::generate::GenerateError>(())
//! ```

pub mod apply;
pub mod describe;
pub mod generate;
pub mod image;
pub mod init;
pub mod manifests;
pub mod move_cluster;
pub mod scaffold;
pub mod template;
