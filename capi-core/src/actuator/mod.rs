//! The contract between the generic reconcile loop and a cloud.
//!
//! A provider implements [`Actuator`] for its machine kind, [`ClusterActuator`] for its cluster
//! kind and [`MachineTemplateActuator`] for its machine template kind, and, if its cloud has
//! scaling groups, [`PoolActuator`] for its machine pool kind; the loops in `capi-actuator` drive
//! them.
//!
//! # One shape for all four
//!
//! Every call receives a scope holding every object the loop has read for this reconcile, from
//! the manager's own watches: the `Cluster`, the provider's infrastructure cluster object, the
//! owner `Machine` and the provider's machine ([`MachineScope`], [`ClusterScope`],
//! [`TemplateScope`], [`PoolScope`]). An actuator talks to its cloud and to nothing else: it never reads the API
//! server for what a scope carries, and nothing of one reconcile has to be kept for the next call
//! — what [`Actuator::exists`] found is handed to [`Actuator::update`] as a value ([`Found`]),
//! and [`Actuator::create`] receives the bootstrap data as a value. (What a provider must
//! remember across reconciles about its cloud's eventual consistency — a launch not visible yet —
//! is its own affair.)
//!
//! # Semantics every provider must honour
//!
//! - [`Actuator::exists`] never creates anything. It finds the instance by durable identity:
//!   `spec.providerID` of the provider's machine if set, otherwise the [`IdempotencyKey`] (stored by
//!   `create` as a tag, metadata entry or name).
//! - [`Actuator::create`] is idempotent per [`IdempotencyKey`]: retried after any failure, timeout
//!   or crash, at most one instance ever exists for a key. It returns what the loop records.
//! - [`Actuator::update`] converges mutable properties and reports, without applying, changes to
//!   immutable ones (Cluster API rolls such machines instead).
//! - [`Actuator::delete`] is idempotent, returns `Ok` only when the instance and everything it owns
//!   is gone, and returns [`ActuatorError::RequeueAfter`] while deletion is in progress.
//! - Errors are classified by [`ActuatorError`]; see its table for what the loop does with each.

mod error;
mod pool;
mod provider_status;
mod scope;
mod template;

use async_trait::async_trait;

use crate::api::{ApiEndpoint, FailureDomain, MachineAddress};
use crate::condition::DesiredCondition;

pub use error::{ActuatorError, ActuatorErrorKind};
#[cfg(any(test, feature = "mock"))]
pub use pool::MockPoolActuator;
pub use pool::{ModelRevision, PoolActuator, PoolInstance, PoolScope, PoolSize, ScaleSetReport};
pub use provider_status::{CONTRACT_STATUS_FIELDS, ProviderStatus, ProviderStatusError};
pub use scope::{
    BootstrapData, BootstrapDataError, BootstrapFormat, ClusterScope, IdempotencyKey, MachineScope,
    MalformedKey, MissingUid,
};
#[cfg(any(test, feature = "mock"))]
pub use template::MockMachineTemplateActuator;
pub use template::{MachineCapacity, MachineTemplateActuator, TemplateScope};

/// Machine infrastructure of one cloud: finds, creates, updates and deletes instances.
///
/// `M` is the provider's machine kind (for example `OpenStackMachine`) and `C` its cluster kind
/// (for example `OpenStackCluster`), which every call finds in the [`MachineScope`].
///
/// # Guarantees the loop gives
///
/// - One reconcile calls `exists`, then either `update` with what `exists` found, or `create`
///   when it found nothing; `delete` alone while the machine is being deleted. Calls for one
///   machine never overlap.
/// - `create` is called only with the decoded bootstrap data of the owner `Machine`, and only
///   after the cluster infrastructure is provisioned and the loop's finalizer is stored.
///
/// # What `exists` hands to `update`
///
/// [`Self::Instance`] is the provider's own record of an instance — what its cloud answered
/// (an EC2 `Instance`, a Nova server and its ports) — and `exists` returns it beside the
/// contract's [`MachineInstance`] in a [`Found`]. The loop hands that value, unchanged, to the
/// `update` of the same reconcile, so `update` neither asks the cloud again nor keeps a map of
/// what an earlier call found. A provider that needs nothing of the kind says
/// `type Instance = ();` and returns [`Found::new`].
///
/// An associated type, rather than a type-erased slot, because it keeps the provider's code
/// typed end to end (no downcast that could fail), and mocks stay plain: `MockActuator<M, C>`
/// has `Instance = ()`. The loop stores any actuator behind one object-safe adapter of its
/// own, so it stays generic over `M` and `C` only.
#[cfg_attr(any(test, feature = "mock"), mockall::automock(type Instance = ();))]
#[async_trait]
pub trait Actuator<M: Send + Sync + 'static, C: Send + Sync + 'static>: Send + Sync {
    /// What `exists` learns of an instance beyond [`MachineInstance`], handed to `update`.
    type Instance: Send + Sync + 'static;

    /// Finds the instance of this machine, by provider ID if known, else by idempotency key.
    /// Must not create or change anything.
    async fn exists(
        &self,
        scope: &MachineScope<M, C>,
    ) -> Result<Option<Found<Self::Instance>>, ActuatorError>;

    /// Creates the instance with `bootstrap` as its user data, or returns the one already
    /// created under the same idempotency key. Called only after `exists` found nothing.
    async fn create(
        &self,
        scope: &MachineScope<M, C>,
        bootstrap: &BootstrapData,
    ) -> Result<MachineInstance, ActuatorError>;

    /// Converges mutable properties of the instance `exists` found in this reconcile.
    async fn update(
        &self,
        scope: &MachineScope<M, C>,
        found: Found<Self::Instance>,
    ) -> Result<UpdateOutcome, ActuatorError>;

    /// Deletes the instance and everything it owns. `Ok` means gone; in progress is
    /// [`ActuatorError::RequeueAfter`]. The loop does not call `exists` first: `delete` finds the
    /// instance itself, by provider ID or idempotency key.
    async fn delete(&self, scope: &MachineScope<M, C>) -> Result<(), ActuatorError>;
}

/// What [`Actuator::exists`] (or [`PoolActuator::exists`]) found: the contract's view of it,
/// which the loop records — a [`MachineInstance`], or a [`ScaleSetReport`] — and the provider's own
/// record of it, which the loop hands to `update`.
///
/// ```
/// use capi_core::{Found, InstanceState, MachineInstance};
///
/// /// What a cloud answered about a server.
/// struct Server {
///     ports: Vec<String>,
/// }
///
/// let reported = MachineInstance::new("fake:///4b0f", vec![], InstanceState::Running);
/// let found = Found::with(reported, Server { ports: vec!["p-1".into()] });
/// assert_eq!(found.instance.ports, ["p-1"]);
/// assert_eq!(found.reported.provider_id, "fake:///4b0f");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found<I, R = MachineInstance> {
    /// What the loop records of it.
    pub reported: R,
    /// The provider's own record of it.
    pub instance: I,
}

impl<R> Found<(), R> {
    /// What a provider found that hands nothing to `update` beyond what the loop records.
    pub fn new(reported: R) -> Self {
        Self {
            reported,
            instance: (),
        }
    }
}

impl<I, R> Found<I, R> {
    /// What the loop records, and what the provider's cloud answered.
    pub fn with(reported: R, instance: I) -> Self {
        Self { reported, instance }
    }

    /// The same with the provider's record mapped by `f` (for an adapter between two
    /// actuators).
    pub fn map<J>(self, f: impl FnOnce(I) -> J) -> Found<J, R> {
        Found {
            reported: self.reported,
            instance: f(self.instance),
        }
    }
}

/// Cluster-wide infrastructure of one cloud: networks, security groups, the API server load
/// balancer.
///
/// `C` is the provider's cluster kind (for example `OpenStackCluster`).
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait ClusterActuator<C: Send + Sync + 'static>: Send + Sync {
    /// Creates or converges the cluster infrastructure and reports the control plane endpoint and
    /// failure domains. Idempotent.
    async fn reconcile(
        &self,
        scope: &ClusterScope<C>,
    ) -> Result<ClusterInfrastructure, ActuatorError>;

    /// Deletes the cluster infrastructure in reverse order of creation, keeping on past individual
    /// failures. `Ok` means everything is gone; otherwise [`ActuatorError::RequeueAfter`] (or a
    /// failure) whose message lists what is left.
    async fn delete(&self, scope: &ClusterScope<C>) -> Result<(), ActuatorError>;
}

/// What a cloud reports about an instance; the loop records it in the provider's machine status.
///
/// Build one with [`MachineInstance::new`] and add what the cloud tells beyond the contract:
///
/// ```
/// use capi_core::{InstanceState, MachineInstance, ProviderStatus};
///
/// let instance = MachineInstance::new("openstack:///4b0f", vec![], InstanceState::Running)
///     .in_failure_domain("az-1")
///     .with_provider_status(
///         ProviderStatus::from_typed(&serde_json::json!({"instanceID": "4b0f"})).unwrap(),
///     );
/// assert_eq!(instance.failure_domain.as_deref(), Some("az-1"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineInstance {
    /// The provider ID, e.g. `openstack:///<server-id>` or `aws:///<zone>/<instance-id>`. It must
    /// equal the `spec.providerID` the kubelet registers the node with.
    pub provider_id: String,
    /// The instance's addresses.
    pub addresses: Vec<MachineAddress>,
    /// The instance's lifecycle state.
    pub state: InstanceState,
    /// The failure domain the instance landed in, when the cloud says (the loop records it in
    /// `status.failureDomain`; upstream's Machine controller reports it on the Machine).
    pub failure_domain: Option<String>,
    /// The provider's own status fields, merged into the object's `status`.
    pub provider_status: ProviderStatus,
    /// The provider's own conditions (types other than `Ready`, which the loop sets from
    /// [`Self::state`]), set on the object with the loop's `observedGeneration`.
    pub conditions: Vec<DesiredCondition>,
}

impl MachineInstance {
    /// An instance with a provider ID, addresses and a state, and nothing else reported.
    pub fn new(
        provider_id: impl Into<String>,
        addresses: Vec<MachineAddress>,
        state: InstanceState,
    ) -> Self {
        Self {
            provider_id: provider_id.into(),
            addresses,
            state,
            failure_domain: None,
            provider_status: ProviderStatus::default(),
            conditions: Vec::new(),
        }
    }

    /// Reports the failure domain the instance landed in.
    pub fn in_failure_domain(mut self, failure_domain: impl Into<String>) -> Self {
        self.failure_domain = Some(failure_domain.into());
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
}

/// The lifecycle state of an instance as the cloud reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstanceState {
    /// Being built or booting; the loop records the provider ID and checks again.
    Provisioning,
    /// Running: the infrastructure is provisioned.
    Running,
    /// The cloud reports a terminal error for the instance (for example Nova `ERROR`). The loop
    /// reports it as `Ready=False` with this reason and message, and an event; replacing the
    /// machine is a decision for a health check.
    Failed {
        /// A CamelCase reason naming the failure (for example `InstanceError`, `OutOfCapacity`);
        /// the loop falls back to `InstanceFailed` when it is not one.
        reason: String,
        /// The cloud's explanation, for a user (the cloud's message only, never a request).
        message: String,
    },
}

/// The result of [`Actuator::update`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateOutcome {
    /// The instance after the update.
    pub instance: MachineInstance,
    /// Differences in immutable properties between the spec and the instance; not applied.
    pub immutable_changes: Vec<ImmutableChange>,
}

/// A difference in an immutable property: reported as a condition, resolved by rolling the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImmutableChange {
    /// The field path in the provider's machine spec, e.g. `spec.flavor`.
    pub field: String,
    /// The instance's current value.
    pub current: String,
    /// The value the spec asks for.
    pub desired: String,
}

/// What [`ClusterActuator::reconcile`] reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterInfrastructure {
    /// The API server endpoint, once known.
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Failure domains machines can be spread over.
    pub failure_domains: Vec<FailureDomain>,
    /// Whether everything is provisioned (`status.initialization.provisioned`).
    pub provisioned: bool,
    /// The provider's own status fields (the cloud's resource IDs a user needs to debug), merged
    /// into the object's `status`.
    pub provider_status: ProviderStatus,
    /// The provider's own conditions (types other than `Ready`), set on the object with the
    /// loop's `observedGeneration`.
    pub conditions: Vec<DesiredCondition>,
}

#[cfg(feature = "mock")]
/// Mocks for unit tests of code that drives an actuator.
///
/// ```
/// use std::sync::Arc;
/// use capi_core::api::{Cluster, Machine};
/// use capi_core::{
///     Actuator, BootstrapData, BootstrapFormat, Found, IdempotencyKey, InstanceState,
///     MachineInstance, MachineScope, MockActuator,
/// };
///
/// /// A decision under test: create only if nothing exists yet.
/// async fn ensure(
///     actuator: &MockActuator<(), ()>,
///     scope: &MachineScope<(), ()>,
///     bootstrap: &BootstrapData,
/// ) -> MachineInstance {
///     match actuator.exists(scope).await.unwrap() {
///         Some(found) => found.reported,
///         None => actuator.create(scope, bootstrap).await.unwrap(),
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let mut actuator = MockActuator::<(), ()>::new();
/// actuator.expect_exists().times(1).returning(|_| Ok(None));
/// actuator.expect_create().times(1).returning(|scope, _| {
///     Ok(MachineInstance::new(
///         format!("fake:///{}", scope.idempotency_key),
///         vec![],
///         InstanceState::Running,
///     ))
/// });
///
/// let mut machine = Machine::default();
/// machine.metadata.uid = Some("0b7c".into());
/// let scope = MachineScope {
///     cluster: Arc::new(Cluster::default()),
///     infra_cluster: Some(Arc::new(())),
///     idempotency_key: IdempotencyKey::for_machine(&machine).unwrap(),
///     machine: Arc::new(machine),
///     infra_machine: Arc::new(()),
/// };
/// let bootstrap = BootstrapData::new(BootstrapFormat::CloudConfig, "#cloud-config\n");
/// let instance = ensure(&actuator, &scope, &bootstrap).await;
/// assert_eq!(instance.provider_id, "fake:///capi-0b7c");
/// # });
/// ```
pub mod mock {
    pub use super::{
        MockActuator, MockClusterActuator, MockMachineTemplateActuator, MockPoolActuator,
    };
}
