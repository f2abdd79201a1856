//! The contract between the generic reconcile loop and a cloud.
//!
//! A provider implements [`Actuator`] for its machine kind and [`ClusterActuator`] for its cluster
//! kind; the loop in `capi-actuator` drives them. Both traits are object safe and used as
//! `Arc<dyn Actuator<M>>`.
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
mod provider_status;
mod scope;
mod template;

use async_trait::async_trait;

use crate::api::{ApiEndpoint, FailureDomain, MachineAddress};
use crate::condition::DesiredCondition;

pub use error::{ActuatorError, ActuatorErrorKind};
pub use provider_status::{CONTRACT_STATUS_FIELDS, ProviderStatus, ProviderStatusError};
pub use scope::{
    BootstrapData, BootstrapDataError, BootstrapFormat, ClusterScope, IdempotencyKey, MachineScope,
    MissingUid,
};
#[cfg(any(test, feature = "mock"))]
pub use template::MockMachineTemplateActuator;
pub use template::{MachineCapacity, MachineTemplateActuator, TemplateScope};

/// Machine infrastructure of one cloud: creates, finds, updates and deletes instances.
///
/// `M` is the provider's machine kind (for example `OpenStackMachine`).
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Actuator<M: Send + Sync + 'static>: Send + Sync {
    /// Finds the instance of this machine, by provider ID if known, else by idempotency key.
    /// Must not create or change anything.
    async fn exists(
        &self,
        scope: &MachineScope<M>,
    ) -> Result<Option<MachineInstance>, ActuatorError>;

    /// Creates the instance, or returns the one already created under the same idempotency key.
    /// Called only after `exists` returned `None`, with bootstrap data present.
    async fn create(&self, scope: &MachineScope<M>) -> Result<MachineInstance, ActuatorError>;

    /// Converges mutable properties of an existing instance.
    async fn update(
        &self,
        scope: &MachineScope<M>,
        instance: &MachineInstance,
    ) -> Result<UpdateOutcome, ActuatorError>;

    /// Deletes the instance and everything it owns. `Ok` means gone; in progress is
    /// [`ActuatorError::RequeueAfter`].
    async fn delete(&self, scope: &MachineScope<M>) -> Result<(), ActuatorError>;
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
/// use capi_core::{Actuator, IdempotencyKey, InstanceState, MachineInstance, MachineScope, MockActuator};
///
/// /// A decision under test: create only if nothing exists yet.
/// async fn ensure(actuator: &dyn Actuator<()>, scope: &MachineScope<()>) -> MachineInstance {
///     match actuator.exists(scope).await.unwrap() {
///         Some(found) => found,
///         None => actuator.create(scope).await.unwrap(),
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let mut actuator = MockActuator::<()>::new();
/// actuator.expect_exists().times(1).returning(|_| Ok(None));
/// actuator.expect_create().times(1).returning(|scope| {
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
///     idempotency_key: IdempotencyKey::for_machine(&machine).unwrap(),
///     machine: Arc::new(machine),
///     infra_machine: Arc::new(()),
///     bootstrap_data: None,
/// };
/// let instance = ensure(&actuator, &scope).await;
/// assert_eq!(instance.provider_id, "fake:///capi-0b7c");
/// # });
/// ```
pub mod mock {
    pub use super::{MockActuator, MockClusterActuator, MockMachineTemplateActuator};
}
