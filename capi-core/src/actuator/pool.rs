//! The pool contract: a cloud's own scaling group — an Auto Scaling group, a virtual machine
//! scale set — runs the machines of a `MachinePool`.
//!
//! A provider implements [`PoolActuator`] for its pool kind (a type implementing
//! [`InfraMachinePool`](crate::infra::InfraMachinePool)); the pool loop in `capi-actuator` drives
//! it the way the machine loop drives an [`Actuator`](super::Actuator): `exists`, then `update`
//! with what `exists` found, or `create`; `delete` alone while the pool is being deleted.
//!
//! # Who decides what
//!
//! The loop decides, the same way for every cloud, everything a `MachinePool` asks of its
//! infrastructure; the provider only makes its scale set match what the [`PoolScope`] says:
//!
//! - **Size.** [`PoolSize::capacity`] is the number of instances the scale set must hold (a
//!   surge for a rollout included), or `None` when an autoscaler sets the size.
//! - **Which instances go.** The loop chooses the instances to remove (those a user marked for
//!   deletion, failed ones, outdated ones during a rollout, then the rest) and deletes their
//!   `Machine`s, so that each node is drained first; a failed or outdated instance is replaced,
//!   the scale set's capacity staying at the pool's size (plus a surge while replacing). Only once an instance's infrastructure
//!   machine is being deleted does the loop name it in [`PoolSize::remove`]: the provider removes
//!   exactly those instances, each lowering the scale set's capacity by one, and never lets the
//!   cloud pick others (a scale set left to shrink by itself would drop nodes nobody drained).
//! - **Rollouts.** [`PoolScope::revision`] names the pool's current model (see
//!   [`ModelRevision`]). The provider launches new instances from a model carrying that revision
//!   and reports, per instance, the revision it was launched from; the loop surges, waits for the
//!   new instances, and removes the outdated ones within the pool's rollout limits. A provider
//!   never starts a rollout of its own (no instance refresh, no automatic upgrade policy).
//!
//! # Guarantees every provider must give
//!
//! - `exists` never creates or changes anything. It finds the scale set by durable identity: the
//!   pool object's `spec.providerID` if set, else the [`IdempotencyKey`] stored by `create` (a
//!   tag or the scale set's name), and only if it also carries the cluster's ownership marks.
//! - `create` is idempotent per key: after any failure, timeout, lost answer or crash at most one
//!   scale set exists for a key, and a retry returns the one already made.
//! - `update` brings the scale set to the scope: the removals done, the capacity set, the model
//!   to the current revision and bootstrap data (new instances boot with the latest data; see
//!   [`ModelRevision`] for when running ones are outdated). It reports every instance the scale
//!   set has, whatever its state.
//! - `delete` removes the scale set and every instance and resource it owns; `Ok` only when all is
//!   gone, [`ActuatorError::RequeueAfter`] while the cloud is still deleting.
//!
//! [`IdempotencyKey`]: super::IdempotencyKey

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use super::{ActuatorError, BootstrapData, Found, IdempotencyKey, InstanceState, ProviderStatus};
use crate::api::{Cluster, MachineAddress, MachinePool};
use crate::condition::DesiredCondition;

/// A cloud's scaling group behind a `MachinePool`: finds, creates, converges and deletes it.
///
/// `P` is the provider's pool kind (for example `AWSMachinePool`) and `C` its cluster kind.
///
/// # Guarantees the loop gives
///
/// - One reconcile calls `exists`, then either `update` with what `exists` found or `create` when
///   it found nothing; `delete` alone while the pool is being deleted. Calls for one pool never
///   overlap.
/// - `create` receives the decoded bootstrap data of the `MachinePool` (and `update` too, unless
///   it is unavailable); both are called only after the cluster infrastructure is provisioned and
///   the loop's finalizer and idempotency key are stored.
///
/// # What `exists` hands to `update`
///
/// [`Self::ScaleSet`] is the provider's own record of the scale set (what its cloud answered: an
/// Auto Scaling group and its launch template, a scale set and its model), handed unchanged to
/// the `update` of the same reconcile, as [`Actuator::Instance`](super::Actuator::Instance) is.
/// Mocks use `()`.
#[cfg_attr(any(test, feature = "mock"), mockall::automock(type ScaleSet = ();))]
#[async_trait]
pub trait PoolActuator<P: Send + Sync + 'static, C: Send + Sync + 'static>: Send + Sync {
    /// What `exists` learns of a scale set beyond [`ScaleSetReport`], handed to `update`.
    type ScaleSet: Send + Sync + 'static;

    /// Finds the pool's scale set, by `spec.providerID` if known, else by idempotency key. Must
    /// not create or change anything.
    async fn exists(
        &self,
        scope: &PoolScope<P, C>,
    ) -> Result<Option<Found<Self::ScaleSet, ScaleSetReport>>, ActuatorError>;

    /// Creates the scale set at [`PoolSize::capacity`] (the pool's size, also when an autoscaler
    /// sets it later), its instances booting with `bootstrap`, from a model of
    /// [`PoolScope::revision`]; or returns the one already created under the same idempotency
    /// key.
    async fn create(
        &self,
        scope: &PoolScope<P, C>,
        bootstrap: &BootstrapData,
    ) -> Result<ScaleSetReport, ActuatorError>;

    /// Brings the scale set `exists` found in this reconcile to the scope: the instances of
    /// [`PoolSize::remove`] removed, the capacity to [`PoolSize::capacity`], and — when
    /// `bootstrap` is there — the model to [`PoolScope::revision`] and `bootstrap`. `None` while
    /// the pool's bootstrap data is unavailable (its Secret being replaced): the model stays as
    /// it is, the size and the removals are done all the same, so that no drained machine waits
    /// for the Secret. Reports the scale set afterwards. (The data is handed over by value: a
    /// borrowed `Option` could not be mocked.)
    async fn update(
        &self,
        scope: &PoolScope<P, C>,
        found: Found<Self::ScaleSet, ScaleSetReport>,
        bootstrap: Option<BootstrapData>,
    ) -> Result<ScaleSetReport, ActuatorError>;

    /// Deletes the scale set, its instances and everything it owns (models, launch templates).
    /// `Ok` means gone; in progress is [`ActuatorError::RequeueAfter`]. The loop does not call
    /// `exists` first.
    async fn delete(&self, scope: &PoolScope<P, C>) -> Result<(), ActuatorError>;
}

/// Everything a [`PoolActuator`] call may look at: snapshots the loop took from its own watches
/// at the start of the reconcile, and what the loop decided the scale set must be.
#[derive(Debug)]
pub struct PoolScope<P, C> {
    /// The `Cluster` the pool belongs to.
    pub cluster: Arc<Cluster>,
    /// The provider's cluster object. Always there for `exists`, `create` and `update`; `delete`
    /// is called without it when it is already gone.
    pub infra_cluster: Option<Arc<C>>,
    /// The owning `MachinePool`. During deletion it may be gone: then a stand-in carrying only
    /// its UID.
    pub machine_pool: Arc<MachinePool>,
    /// The provider's pool object (for example an `AWSMachinePool`).
    pub infra_pool: Arc<P>,
    /// The durable identity of the scale set, derived from the `MachinePool`'s UID
    /// ([`IdempotencyKey::for_machine_pool`]).
    pub idempotency_key: IdempotencyKey,
    /// How many instances the scale set must hold, and which to remove.
    pub size: PoolSize,
    /// The revision of the pool's current model.
    pub revision: ModelRevision,
}

impl<P, C> Clone for PoolScope<P, C> {
    fn clone(&self) -> Self {
        Self {
            cluster: Arc::clone(&self.cluster),
            infra_cluster: self.infra_cluster.clone(),
            machine_pool: Arc::clone(&self.machine_pool),
            infra_pool: Arc::clone(&self.infra_pool),
            idempotency_key: self.idempotency_key.clone(),
            size: self.size.clone(),
            revision: self.revision.clone(),
        }
    }
}

/// The size the loop asks of a scale set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolSize {
    /// How many instances the scale set holds once the removals are done, a rollout's surge
    /// included. `None` when an autoscaler sets the size (`cluster.x-k8s.io/replicas-managed-by`):
    /// the provider then leaves the cloud's desired capacity as it is.
    pub capacity: Option<u32>,
    /// The provider IDs of the instances to remove. Each removal lowers the scale set's capacity
    /// by one and is never replaced; an instance already gone is not an error. The loop names an
    /// instance here only after its `Machine` was drained and deleted.
    pub remove: BTreeSet<String>,
}

/// The revision of a pool's model: a digest of what its instances are made from, computed by
/// the loop. The provider records it on the model it launches instances from (a tag on the
/// launch template version, on the scale set's model) and reports it for each instance.
///
/// It covers the provider's pool spec (except the contract's `providerID` and `providerIDList`),
/// the `MachinePool`'s Kubernetes version, and the *name* of the bootstrap data Secret — not its
/// content: a kubeadm bootstrap provider rotates the join token inside a pool's Secret every
/// few minutes, which must reach new instances (the provider puts the current data in the model)
/// without rolling the running ones. To roll a pool for a new bootstrap configuration, point the
/// `MachinePool` at a new configuration object (a new data Secret name), as upstream Cluster API
/// prescribes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelRevision(String);

impl ModelRevision {
    /// A revision as recorded on a model or an instance (the provider reads it back from its
    /// cloud's tags).
    pub fn new(revision: impl Into<String>) -> Self {
        Self(revision.into())
    }

    /// The revision as a string, at most 63 characters of lowercase letters, digits and `-`
    /// when the loop made it (it fits a tag, a label value and a name suffix).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ModelRevision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a cloud reports about a scale set; the loop records it on the provider's pool object
/// (`spec.providerID`, `spec.providerIDList`, `status.replicas`) and on one infrastructure
/// machine per instance.
///
/// ```
/// use capi_core::{InstanceState, ModelRevision, PoolInstance, ScaleSetReport};
///
/// let revision = ModelRevision::new("r-1");
/// let report = ScaleSetReport::new("fake:///pools/workers", 2).with_instance(
///     PoolInstance::new("fake:///i-1", "i-1", InstanceState::Running).from_revision(revision),
/// );
/// assert_eq!(report.provider_ids(), ["fake:///i-1"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleSetReport {
    /// The scale set's own identifier (an Auto Scaling group's ARN, a scale set's resource ID),
    /// recorded in the pool object's `spec.providerID`.
    pub provider_id: String,
    /// The number of instances the cloud is keeping (its desired capacity).
    pub capacity: u32,
    /// Every instance of the scale set, whatever its state.
    pub instances: Vec<PoolInstance>,
    /// The provider's own status fields, merged into the pool object's `status`.
    pub provider_status: ProviderStatus,
    /// The provider's own conditions (types other than `Ready`, which the loop sets).
    pub conditions: Vec<DesiredCondition>,
}

impl ScaleSetReport {
    /// A scale set with an identifier and a capacity, and no instances yet.
    pub fn new(provider_id: impl Into<String>, capacity: u32) -> Self {
        Self {
            provider_id: provider_id.into(),
            capacity,
            instances: Vec::new(),
            provider_status: ProviderStatus::default(),
            conditions: Vec::new(),
        }
    }

    /// Reports one more instance.
    pub fn with_instance(mut self, instance: PoolInstance) -> Self {
        self.instances.push(instance);
        self
    }

    /// Reports the provider's own status fields.
    pub fn with_provider_status(mut self, status: ProviderStatus) -> Self {
        self.provider_status = status;
        self
    }

    /// Reports one of the provider's own conditions.
    pub fn with_condition(mut self, condition: DesiredCondition) -> Self {
        self.conditions.push(condition);
        self
    }

    /// The provider IDs of the instances, sorted and without duplicates (leaving ones included,
    /// until they are gone).
    pub fn provider_ids(&self) -> Vec<&str> {
        let ids: BTreeSet<&str> = self
            .instances
            .iter()
            .map(|i| i.provider_id.as_str())
            .collect();
        ids.into_iter().collect()
    }
}

/// One instance of a scale set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolInstance {
    /// The provider ID the instance's Node registers with (`spec.providerID` of the Node).
    pub provider_id: String,
    /// The cloud's name or identifier of the instance, unique in the scale set: the loop names
    /// the instance's infrastructure machine `<pool>-<name>` (lowercased, other characters than
    /// letters, digits, `-` and `.` replaced by `-`).
    pub name: String,
    /// The instance's lifecycle state.
    pub state: InstanceState,
    /// The instance's addresses.
    pub addresses: Vec<MachineAddress>,
    /// The failure domain the instance landed in, when the cloud says.
    pub failure_domain: Option<String>,
    /// The revision of the model the instance was launched from; `None` when the cloud cannot
    /// tell (the instance counts as outdated).
    pub revision: Option<ModelRevision>,
    /// The cloud is terminating the instance: it no longer counts towards the scale set's
    /// capacity, and is reported until it is gone.
    pub leaving: bool,
}

impl PoolInstance {
    /// An instance with a provider ID, a name and a state, and nothing else reported.
    pub fn new(
        provider_id: impl Into<String>,
        name: impl Into<String>,
        state: InstanceState,
    ) -> Self {
        Self {
            provider_id: provider_id.into(),
            name: name.into(),
            state,
            addresses: Vec::new(),
            failure_domain: None,
            revision: None,
            leaving: false,
        }
    }

    /// Reports the instance as being terminated ([`PoolInstance::leaving`]).
    pub fn terminating(mut self) -> Self {
        self.leaving = true;
        self
    }

    /// Reports the revision of the model the instance was launched from.
    pub fn from_revision(mut self, revision: ModelRevision) -> Self {
        self.revision = Some(revision);
        self
    }

    /// Reports the instance's addresses.
    pub fn with_addresses(mut self, addresses: Vec<MachineAddress>) -> Self {
        self.addresses = addresses;
        self
    }

    /// Reports the failure domain the instance landed in.
    pub fn in_failure_domain(mut self, failure_domain: impl Into<String>) -> Self {
        self.failure_domain = Some(failure_domain.into());
        self
    }

    /// Whether the instance was launched from the model of `revision`.
    pub fn is_up_to_date(&self, revision: &ModelRevision) -> bool {
        self.revision.as_ref() == Some(revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_are_sorted_and_unique() {
        let report = ScaleSetReport::new("pool", 3)
            .with_instance(PoolInstance::new("p:///b", "b", InstanceState::Running))
            .with_instance(PoolInstance::new(
                "p:///a",
                "a",
                InstanceState::Provisioning,
            ))
            .with_instance(PoolInstance::new("p:///b", "b", InstanceState::Running));
        assert_eq!(report.provider_ids(), ["p:///a", "p:///b"]);
    }

    #[test]
    fn an_instance_of_unknown_revision_is_outdated() {
        let current = ModelRevision::new("r-2");
        let unknown = PoolInstance::new("p:///a", "a", InstanceState::Running);
        assert!(!unknown.is_up_to_date(&current));
        let old = unknown.clone().from_revision(ModelRevision::new("r-1"));
        assert!(!old.is_up_to_date(&current));
        assert!(old.from_revision(current.clone()).is_up_to_date(&current));
    }
}
