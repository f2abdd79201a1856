//! Runnable examples of the capi-rs SDK; see the `[[example]]` targets of this package:
//!
//! - `cargo run -p capi-examples --example print_crds`: the core CRDs as YAML.
//! - `cargo run -p capi-examples --example list_machines`: the Machines of the current
//!   kubeconfig's cluster, with phase and provider ID.
//! - `cargo run -p capi-examples --example toy_provider`: [`toy`], a complete provider for a toy
//!   cloud — cluster, machine and machine template kinds with CRDs and RBAC, their actuators and
//!   the manager binary.
//! - [`tenant_cluster`]: an operator of its own kind on `capi-runtime` alone — a namespaced
//!   `TenantCluster` that renders a Cluster API `Cluster` from a `ClusterClass` and reports its
//!   phase.

pub mod tenant_cluster;
pub mod toy;
pub mod toy_cloud;
