//! The conformance suite: checks a provider's [`Actuator`] and [`ClusterActuator`] against the
//! guarantees the SDK's loop relies on, over the provider's own cloud (real or fake), and names
//! the rule each failure breaks.
//!
//! The loop is only as safe as its actuators: it never makes a duplicate instance or leaks one
//! *if* `create` is idempotent per idempotency key, `exists` never creates, and `delete` returns
//! `Ok` only when everything is gone. The suite drives the actuator the way the loop does — and
//! the way crashes, lost responses and cancelled reconciles make it — and compares what the cloud
//! holds before and after through a [`CloudInventory`] the vendor implements (a few lines: list
//! the instances, and every resource the provider can create).
//!
//! What it checks, per machine (each on a fresh `Machine` with its own UID):
//!
//! | rule | how |
//! |---|---|
//! | [`EXISTS_NEVER_CREATES`] | `exists` on a new machine finds nothing and the cloud is unchanged |
//! | [`CREATE_IS_FOUND`] | after `create`, `exists` finds the same provider ID, by idempotency key and by provider ID |
//! | [`CREATE_IS_IDEMPOTENT`] | `create` again after its response was lost makes no second instance |
//! | [`CREATE_SURVIVES_CRASHES`] | `create` stopped at each of its await points in turn, then retried as the loop would, leaves exactly one instance |
//! | [`UPDATE_KEEPS_THE_INSTANCE`] | `update` of an unchanged machine keeps its provider ID and reports no immutable change |
//! | [`DELETE_RETURNS_ONLY_WHEN_GONE`] | once `delete` returns `Ok`, `exists` finds nothing and the instance is not in the cloud |
//! | [`DELETE_IS_IDEMPOTENT`] | `delete` of a deleted machine is `Ok` |
//! | [`NOTHING_LEAKED`] | after delete the cloud holds exactly what it held before |
//!
//! and per cluster: [`CLUSTER_RECONCILE_IS_IDEMPOTENT`], [`CLUSTER_DELETE_RETURNS_ONLY_WHEN_GONE`]
//! (with [`NOTHING_LEAKED`]).
//!
//! Per pool ([`PoolSuite`], a [`PoolActuator`] over the cloud's scale sets; the inventory's
//! resources must include the scale sets and whatever they own):
//!
//! | rule | how |
//! |---|---|
//! | [`POOL_EXISTS_NEVER_CREATES`] | `exists` on a new pool finds nothing and the cloud is unchanged |
//! | [`POOL_CREATE_IS_FOUND`] | after `create`, `exists` finds the same scale set, by idempotency key and by provider ID |
//! | [`POOL_HOLDS_ITS_CAPACITY`] | the scale set comes to hold the instances of its capacity |
//! | [`POOL_REMOVES_ONLY_THE_NAMED`] | an instance named for removal, with the capacity lowered by one, goes, and no other |
//! | [`POOL_LAUNCHES_THE_CURRENT_REVISION`] | after the model moves to a new revision, new instances report it |
//! | [`POOL_CREATE_IS_IDEMPOTENT`] | `create` again after its response was lost returns the same scale set |
//! | [`POOL_CREATE_SURVIVES_CRASHES`] | `create` stopped at each await point, recovered and deleted, leaves nothing |
//! | [`POOL_DELETE_RETURNS_ONLY_WHEN_GONE`] | once `delete` returns `Ok`, `exists` finds nothing and no instance of it is left |
//!
//! with [`DELETE_IS_IDEMPOTENT`] and [`NOTHING_LEAKED`].
//!
//! "Retried as the loop would" means: [`ActuatorError::RequeueAfter`] and
//! [`ActuatorError::Transient`] are retried (waiting the requested time, capped by
//! [`Settings::max_wait`]) until [`Settings::deadline`]; an invalid configuration ends the check.
//!
//! ```no_run
//! # async fn run(
//! #     actuator: std::sync::Arc<
//! #         impl capi_core::Actuator<serde_json::Value, serde_json::Value> + 'static,
//! #     >,
//! #     cloud: std::sync::Arc<dyn capi_testing::conformance::CloudInventory>,
//! # ) {
//! use capi_testing::conformance::{MachineSuite, Settings};
//!
//! let infra_machine = serde_json::json!({"spec": {"flavor": "small"}});
//! let infra_cluster = serde_json::json!({"spec": {"region": "eu-1"}});
//! let report = MachineSuite::new(actuator, cloud, infra_machine, infra_cluster)
//!     .settings(Settings::default())
//!     .run()
//!     .await;
//! report.assert_conforms();
//! # }
//! ```

mod cluster;
mod drive;
mod machine;
mod pool;

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

pub use cluster::ClusterSuite;
pub use machine::MachineSuite;
pub use pool::PoolSuite;

#[cfg(doc)]
use capi_core::{Actuator, ActuatorError, ClusterActuator, PoolActuator};

/// One guarantee of the provider contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rule {
    /// A short stable name, e.g. `create-is-idempotent`.
    pub id: &'static str,
    /// The guarantee, in one sentence.
    pub text: &'static str,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.id, self.text)
    }
}

/// `exists` never creates or changes anything.
pub const EXISTS_NEVER_CREATES: Rule = Rule {
    id: "exists-never-creates",
    text: "Actuator::exists finds an instance, it never creates or changes one",
};
/// What `create` made, `exists` finds, by idempotency key and by provider ID.
pub const CREATE_IS_FOUND: Rule = Rule {
    id: "create-is-found",
    text: "after create, exists finds the same instance by idempotency key and by provider ID",
};
/// `create` retried after a lost response returns the instance it made.
pub const CREATE_IS_IDEMPOTENT: Rule = Rule {
    id: "create-is-idempotent",
    text: "create retried after a lost response returns the first instance, never a second",
};
/// `create` interrupted anywhere and retried leaves exactly one instance.
pub const CREATE_SURVIVES_CRASHES: Rule = Rule {
    id: "create-survives-crashes",
    text: "create stopped at any await point and retried leaves exactly one instance",
};
/// `update` of an unchanged machine keeps the instance.
pub const UPDATE_KEEPS_THE_INSTANCE: Rule = Rule {
    id: "update-keeps-the-instance",
    text: "update of an unchanged machine keeps its provider ID and reports no immutable change",
};
/// `delete` returns `Ok` only when the instance is gone.
pub const DELETE_RETURNS_ONLY_WHEN_GONE: Rule = Rule {
    id: "delete-returns-only-when-gone",
    text: "delete returns Ok only once the instance is gone from the cloud",
};
/// `delete` of something already deleted is `Ok`.
pub const DELETE_IS_IDEMPOTENT: Rule = Rule {
    id: "delete-is-idempotent",
    text: "delete of a machine whose instance is already gone returns Ok",
};
/// After deletion the cloud holds what it held before.
pub const NOTHING_LEAKED: Rule = Rule {
    id: "nothing-leaked",
    text: "after delete returns Ok, every resource the actuator created is gone",
};
/// Reconciling provisioned cluster infrastructure again changes nothing.
pub const CLUSTER_RECONCILE_IS_IDEMPOTENT: Rule = Rule {
    id: "cluster-reconcile-is-idempotent",
    text: "reconciling provisioned cluster infrastructure again creates nothing and keeps the endpoint",
};
/// Cluster `delete` returns `Ok` only when everything is gone.
pub const CLUSTER_DELETE_RETURNS_ONLY_WHEN_GONE: Rule = Rule {
    id: "cluster-delete-returns-only-when-gone",
    text: "ClusterActuator::delete returns Ok only once all cluster infrastructure is gone",
};
/// A pool's `exists` never creates or changes anything.
pub const POOL_EXISTS_NEVER_CREATES: Rule = Rule {
    id: "pool-exists-never-creates",
    text: "PoolActuator::exists finds a scale set, it never creates or changes one",
};
/// What a pool's `create` made, `exists` finds, by idempotency key and by provider ID.
pub const POOL_CREATE_IS_FOUND: Rule = Rule {
    id: "pool-create-is-found",
    text: "after create, exists finds the same scale set by idempotency key and by provider ID",
};
/// A pool's `create` retried after a lost response returns the scale set it made.
pub const POOL_CREATE_IS_IDEMPOTENT: Rule = Rule {
    id: "pool-create-is-idempotent",
    text: "create retried after a lost response returns the first scale set, never a second",
};
/// A pool's `create` interrupted anywhere, recovered and deleted leaves nothing.
pub const POOL_CREATE_SURVIVES_CRASHES: Rule = Rule {
    id: "pool-create-survives-crashes",
    text: "create stopped at any await point, then found or created again and deleted, leaves \
           no scale set and no instance",
};
/// The scale set comes to hold its capacity.
pub const POOL_HOLDS_ITS_CAPACITY: Rule = Rule {
    id: "pool-holds-its-capacity",
    text: "update keeps the scale set at its capacity: its instances are launched and reported",
};
/// Scale-in removes exactly the instances the loop names.
pub const POOL_REMOVES_ONLY_THE_NAMED: Rule = Rule {
    id: "pool-removes-only-the-named",
    text: "an instance named for removal (the capacity lowered by one) goes, and no other",
};
/// New instances carry the model's current revision.
pub const POOL_LAUNCHES_THE_CURRENT_REVISION: Rule = Rule {
    id: "pool-launches-the-current-revision",
    text: "after the model moves to a new revision, the instances launched from it report it",
};
/// A pool's `delete` returns `Ok` only when the scale set and its instances are gone.
pub const POOL_DELETE_RETURNS_ONLY_WHEN_GONE: Rule = Rule {
    id: "pool-delete-returns-only-when-gone",
    text: "PoolActuator::delete returns Ok only once the scale set and its instances are gone",
};
/// The actuator answered within the deadline.
pub const CONVERGES: Rule = Rule {
    id: "converges",
    text: "every call settles (Ok or invalid configuration) within the suite's deadline",
};

/// What the suite needs to see of the provider's cloud.
///
/// Both lists are of opaque, stable IDs. They may include resources the suite did not make (the
/// suite compares snapshots), but must include everything the actuators under test can create.
#[async_trait]
pub trait CloudInventory: Send + Sync {
    /// The instances (servers, VMs) that exist, including those being deleted.
    async fn instances(&self) -> Result<BTreeSet<String>, String>;
    /// Every resource the actuators can create — instances, ports, volumes, load balancers,
    /// networks — that exists.
    async fn resources(&self) -> Result<BTreeSet<String>, String>;
}

/// How patient the suite is.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How long one check may take in all, retries included.
    pub deadline: Duration,
    /// The longest wait between retries, whatever a `RequeueAfter` asks for.
    pub max_wait: Duration,
    /// The most await points at which `create` is stopped, in turn, for
    /// [`CREATE_SURVIVES_CRASHES`] (each costs one machine created and deleted).
    pub crash_points: usize,
    /// How long the cloud is given to make progress between two polls of an interrupted
    /// `create`: zero for an in-process fake, some milliseconds for a real cloud.
    pub poll_gap: Duration,
    /// How long after a `create` is stopped the loop "restarts" and looks for the instance: a
    /// request already sent may still take effect, as it would while a real manager restarts.
    pub restart_delay: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(120),
            max_wait: Duration::from_secs(2),
            crash_points: 16,
            poll_gap: Duration::ZERO,
            restart_delay: Duration::ZERO,
        }
    }
}

/// A broken rule, with what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// What happened, for the vendor.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule {} broken: {}", self.rule, self.detail)
    }
}

/// The outcome of a suite run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Rules checked at least once.
    pub checked: BTreeSet<Rule>,
    /// Every broken rule, in the order found.
    pub violations: Vec<Violation>,
    /// What the run could not cover (not violations): for example `create` never finished
    /// within [`Settings::crash_points`] polls, so its last await points were not crash points.
    pub notes: Vec<String>,
}

impl Report {
    /// Whether `rule` was found broken.
    pub fn broke(&self, rule: Rule) -> bool {
        self.violations.iter().any(|v| v.rule == rule)
    }

    /// Panics, listing every violation, unless every rule held.
    #[track_caller]
    pub fn assert_conforms(&self) {
        if !self.violations.is_empty() {
            let list: Vec<String> = self.violations.iter().map(|v| format!("- {v}")).collect();
            panic!(
                "the actuator breaks {} rule(s) of the provider contract:\n{}",
                self.violations.len(),
                list.join("\n")
            );
        }
    }

    pub(crate) fn check(&mut self, rule: Rule, held: bool, detail: impl FnOnce() -> String) {
        self.checked.insert(rule);
        if !held {
            self.violations.push(Violation {
                rule,
                detail: detail(),
            });
        }
    }

    pub(crate) fn fail(&mut self, rule: Rule, detail: impl Into<String>) {
        self.check(rule, false, || detail.into());
    }
}

/// The `Cluster` a suite works in until told otherwise: `default/conformance`, with a fresh UID.
fn default_cluster() -> capi_core::api::Cluster {
    let mut cluster = capi_core::api::Cluster::default();
    cluster.metadata.name = Some("conformance".into());
    cluster.metadata.namespace = Some("default".into());
    cluster.metadata.uid = Some(machine::unique_uid());
    cluster
}

/// A listing of the cloud; a failed one is reported (the suite cannot judge without it).
fn listed(
    report: &mut Report,
    what: &str,
    listing: Result<BTreeSet<String>, String>,
) -> Option<BTreeSet<String>> {
    match listing {
        Ok(ids) => Some(ids),
        Err(error) => {
            report.fail(CONVERGES, format!("listing the cloud's {what}: {error}"));
            None
        }
    }
}

#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod tests;
