//! The permissions of the infrastructure reconcilers, for a provider's generated ClusterRole
//! (least privilege: exactly the verbs the reconcilers use). `cargo xtask crds` writes the
//! in-memory provider's from these.
//!
//! A provider with machine pools adds [`infra_machine_pool`]'s rules.
//!
//! ```
//! use capi_actuator::rbac;
//!
//! let rules = rbac::provider(
//!     "infrastructure.example.com",
//!     "examplemachines",
//!     "exampleclusters",
//!     "examplemachinetemplates",
//! );
//! let role = capi_runtime::rbac::cluster_role("example-manager", rules);
//! assert_eq!(role.metadata.name.as_deref(), Some("example-manager"));
//! ```

use capi_runtime::rbac::{READ, manager, rule};
use k8s_openapi::api::rbac::v1::PolicyRule;

const CORE: &str = capi_core::api::GROUP;

/// The infrastructure machine reconciler of a provider's kind (`plural` in `group`).
pub fn infra_machine(group: &str, plural: &str) -> Vec<PolicyRule> {
    vec![
        rule(group, &[plural], &["get", "list", "watch", "patch"]),
        rule(group, &[&format!("{plural}/status")], &["patch"]),
        rule(CORE, &["machines", "clusters"], READ),
        rule("", &["secrets"], &["get"]),
    ]
}

/// The infrastructure cluster reconciler of a provider's kind (`plural` in `group`).
pub fn infra_cluster(group: &str, plural: &str) -> Vec<PolicyRule> {
    vec![
        rule(group, &[plural], &["get", "list", "watch", "patch"]),
        rule(group, &[&format!("{plural}/status")], &["patch"]),
        rule(CORE, &["machines", "clusters"], READ),
    ]
}

/// The machine template reconciler of a provider's template kind (`plural` in `group`): it
/// reads templates and their clusters and writes only the templates' status.
pub fn infra_machine_template(group: &str, plural: &str) -> Vec<PolicyRule> {
    vec![
        rule(group, &[plural], READ),
        rule(group, &[&format!("{plural}/status")], &["patch"]),
        rule(CORE, &["clusters"], &["get"]),
    ]
}

/// The infrastructure machine pool reconciler of a provider's pool kind (`plural` in `group`),
/// whose machine kind is `machines`: it makes, records and deletes one machine per instance, and
/// deletes the `Machine` of an instance it releases (whose node is drained first).
pub fn infra_machine_pool(group: &str, plural: &str, machines: &str) -> Vec<PolicyRule> {
    vec![
        rule(group, &[plural], &["get", "list", "watch", "patch"]),
        rule(group, &[&format!("{plural}/status")], &["patch"]),
        rule(
            group,
            &[machines],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(group, &[&format!("{machines}/status")], &["patch"]),
        rule(CORE, &["machinepools", "clusters"], READ),
        rule(CORE, &["machines"], &["get", "list", "watch", "delete"]),
        rule("", &["secrets"], &["get"]),
    ]
}

/// Everything a provider's manager needs for its own kinds in `group`: the manager's Lease and
/// events, and the machine, cluster and machine template reconcilers (plural names given).
pub fn provider(group: &str, machines: &str, clusters: &str, templates: &str) -> Vec<PolicyRule> {
    let mut rules = manager();
    rules.extend(infra_machine(group, machines));
    rules.extend(infra_cluster(group, clusters));
    rules.extend(infra_machine_template(group, templates));
    rules
}
