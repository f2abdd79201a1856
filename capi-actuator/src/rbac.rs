//! The permissions each part of the Manager needs in the management cluster — exactly the verbs
//! its code uses, kept next to that code — so that a provider's generated ClusterRole is least
//! privilege. `cargo xtask crds` writes the in-memory provider's from these, the bootstrap
//! controller's (`capi_bootstrap::controller::rbac`) and the core controllers'
//! (`capi_controllers::rbac`), which are built with [`rule`].
//!
//! ```
//! use capi_actuator::rbac;
//!
//! let mut rules = rbac::manager();
//! rules.extend(rbac::infra_machine("infrastructure.example.com", "examplemachines"));
//! rules.extend(rbac::infra_cluster("infrastructure.example.com", "exampleclusters"));
//! let role = rbac::cluster_role("example-manager", rules);
//! assert_eq!(role.metadata.name.as_deref(), Some("example-manager"));
//! ```

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const CORE: &str = capi_core::api::GROUP;
/// The verbs of reading through a cache: `get`, `list`, `watch`.
pub const READ: &[&str] = &["get", "list", "watch"];

/// The rule granting `verbs` on `resources` of API group `group` (`""` is the core group).
pub fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    }
}

/// What every Manager needs: its leader-election Lease and events.
pub fn manager() -> Vec<PolicyRule> {
    vec![
        rule(
            "coordination.k8s.io",
            &["leases"],
            &["get", "create", "update"],
        ),
        rule("", &["events"], &["create", "patch"]),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
    ]
}

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

/// Everything a provider's manager needs for its own kinds in `group`: the manager's Lease and
/// events, and the machine, cluster and machine template reconcilers (plural names given).
pub fn provider(group: &str, machines: &str, clusters: &str, templates: &str) -> Vec<PolicyRule> {
    let mut rules = manager();
    rules.extend(infra_machine(group, machines));
    rules.extend(infra_cluster(group, clusters));
    rules.extend(infra_machine_template(group, templates));
    rules
}

/// A ClusterRole holding `rules`.
pub fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        rules: Some(rules),
        ..ClusterRole::default()
    }
}
