//! The Cluster API resource types, group `cluster.x-k8s.io`, version `v1beta2`.
//!
//! Field names and shapes follow upstream `api/core/v1beta2`: camelCase on the wire, `providerID`,
//! references as `{apiGroup, kind, name}`, durations as `…Seconds` integers and status conditions as
//! `metav1.Condition`. Every field of upstream's `v1beta2` schema of each kind is modelled, with
//! the same types, bounds and list markers: `capi-testing`'s `upstream_schemas` test compares the
//! generated CRDs with upstream's, path by path, and `crds/upstream-differences.yaml` lists the
//! few places where ours is stricter, each with its reason.
//!
//! Each kind lives in its own module and is re-exported here.

mod allowed_namespaces;
mod cluster;
mod deprecated;
mod machine;
mod machine_deployment;
mod machine_health_check;
mod machine_pool;
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
pub use machine_pool::*;
pub use machine_set::*;
pub use reference::*;
pub use topology::*;

/// The API group of every core Cluster API kind.
pub const GROUP: &str = "cluster.x-k8s.io";
/// The API version this crate implements.
pub const VERSION: &str = "v1beta2";
/// `apiVersion` as written in manifests.
pub const API_VERSION: &str = "cluster.x-k8s.io/v1beta2";
