//! The permissions a controller needs in the management cluster, stated next to the code that
//! uses them so that a generated ClusterRole is least privilege: the building blocks ([`rule`],
//! [`READ`], [`cluster_role`], [`role`]), what every [`Manager`](crate::Manager) needs cluster-wide
//! ([`manager`]) and, in its own namespace only, for leader election ([`leader_election`]).
//! Each family of controllers states its own rules with them (`capi_controllers::rbac`,
//! `capi_bootstrap::controller::rbac`, `capi_actuator::rbac`).
//!
//! ```
//! use capi_runtime::rbac;
//!
//! let mut rules = rbac::manager();
//! rules.push(rbac::rule("example.com", &["widgets"], rbac::READ));
//! let role = rbac::cluster_role("example-manager", rules);
//! assert_eq!(role.metadata.name.as_deref(), Some("example-manager"));
//! ```

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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

/// What every Manager needs cluster-wide: events, and the reviews that check who scrapes its
/// `/metrics` ([`crate::manager::MetricsEndpoint::Secure`]). Its leader-election Lease is
/// [`leader_election`], granted by a [`role`] in its own namespace.
pub fn manager() -> Vec<PolicyRule> {
    let mut rules = vec![
        rule("", &["events"], &["create", "patch"]),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
    ];
    rules.extend(crate::manager::diagnostics_rbac());
    rules
}

/// What reading a manager's `/metrics` takes; bind it to a scraper (upstream's
/// `metrics-reader`).
pub fn metrics_reader() -> PolicyRule {
    PolicyRule {
        non_resource_urls: Some(vec!["/metrics".to_string()]),
        verbs: vec!["get".to_string()],
        ..PolicyRule::default()
    }
}

/// What leader election needs: its Lease. Grant it with a [`role`] in the namespace of the Lease
/// (the manager's own), never cluster-wide: a Lease of another namespace is another team's.
pub fn leader_election() -> Vec<PolicyRule> {
    vec![rule(
        "coordination.k8s.io",
        &["leases"],
        &["get", "create", "update"],
    )]
}

/// A Role in `namespace` holding `rules`.
pub fn role(namespace: &str, name: &str, rules: Vec<PolicyRule>) -> Role {
    Role {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        rules: Some(rules),
    }
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
