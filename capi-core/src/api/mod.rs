//! The Cluster API resource types, group `cluster.x-k8s.io`, version `v1beta2`.
//!
//! Field names and shapes follow upstream `api/core/v1beta2`: camelCase on the wire, `providerID`,
//! references as `{apiGroup, kind, name}`, durations as `…Seconds` integers and status conditions as
//! `metav1.Condition`. A subset is implemented; every supported field is wire-compatible.
//!
//! # Unsupported upstream fields
//!
//! The following upstream `v1beta2` fields are not modelled yet. The generated CRDs do not carry
//! them, so the API server prunes them when such a manifest is applied — they are not silently
//! mangled into something else, they are dropped, and the list below is the place to check:
//!
//! - `Cluster.spec`: `topology`, `availabilityGates`; `Cluster.status`: `deprecated`.
//! - `Machine.spec`: `readinessGates`, `taints`, `minReadySeconds` is kept but `machineNaming` is not;
//!   `Machine.status`: `deprecated`.
//! - `MachineSet.spec` / `MachineDeployment.spec`: `machineNaming`, `template.spec.readinessGates`;
//!   `MachineDeployment.spec.rollout.strategy` is kept, `rollout.after` is kept.
//! - `MachineHealthCheck.spec.checks`: everything but the node startup timeout, unhealthy node
//!   conditions and unhealthy machine conditions.
//!
//! Each kind lives in its own module and is re-exported here.

mod allowed_namespaces;
mod cluster;
mod deprecated;
mod machine;
mod machine_deployment;
mod machine_health_check;
mod machine_set;
mod reference;
mod topology;
pub mod validation;

pub use allowed_namespaces::{AllowedNamespaces, admits as namespace_admitted};
pub use cluster::*;
pub use deprecated::*;
pub use machine::*;
pub use machine_deployment::*;
pub use machine_health_check::*;
pub use machine_set::*;
pub use reference::*;
pub use topology::*;

/// The API group of every core Cluster API kind.
pub const GROUP: &str = "cluster.x-k8s.io";
/// The API version this crate implements.
pub const VERSION: &str = "v1beta2";
/// `apiVersion` as written in manifests.
pub const API_VERSION: &str = "cluster.x-k8s.io/v1beta2";
