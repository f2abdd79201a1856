//! The infrastructure reconcilers of a Cluster API provider: the loops that drive a provider's
//! actuators, the same way for every cloud.
//!
//! A provider implements [`capi_core::Actuator`] for its machine kind (a type implementing
//! [`capi_core::infra::InfraMachine`]), [`capi_core::ClusterActuator`] for its cluster kind,
//! [`capi_core::MachineTemplateActuator`] for its machine template kind and, if its cloud has
//! scaling groups, [`capi_core::PoolActuator`] for its machine pool kind; this crate does the
//! rest:
//!
//! - [`machine`]: the infrastructure machine reconciler — owner lookup, pause, finalizer, waiting
//!   for cluster infrastructure and bootstrap data, `exists` → `update` or `create`, recording the
//!   provider ID before anything else, deletion until the instance is gone, conditions and events;
//! - [`cluster`]: the infrastructure cluster reconciler — endpoint, failure domains, deletion only
//!   after the cluster's machines are gone;
//! - [`pool`]: the infrastructure machine pool reconciler — a cloud's scale set behind a
//!   `MachinePool`, its size, removals and rollouts decided the same way for every cloud, and one
//!   machine per instance for the `MachinePool` controller's `Machine`s;
//! - [`template`]: the machine template reconciler — `status.capacity` and `status.nodeInfo` from
//!   a [`capi_core::MachineTemplateActuator`], for the cluster autoscaler's scale from zero;
//! - [`rbac`]: the ClusterRole rules each of them needs (least privilege, generated into
//!   manifests).
//!
//! Each reconciler module has the same shape as every controller of the SDK: a
//! [`Reconciler`](capi_runtime::Reconciler) type alias and a `run(reconciler, shutdown)` function.
//! [`InfrastructureControllers`] registers them with a
//! [`capi_runtime::Manager`] on one client, the infrastructure family's.
//!
//! Error semantics follow [`capi_core::ActuatorError`]: `RequeueAfter` is not a failure (no
//! backoff, no error log); `Transient` backs off per object up to a cap and resets on success;
//! `InvalidConfiguration` becomes a `Ready=False` condition and the cloud is not called again until
//! the object's generation changes. Status is written only when it changed, with merge patches, and
//! the loop ignores its own status writes, so it cannot trigger itself.
//!
//! The runtime underneath (manager, caches, writes, retries, events, metrics) is `capi-runtime`;
//! the helpers a provider's cloud code uses (redaction of cloud messages, credentials from
//! Secrets, retries of cloud calls) are in `capi_provider::support`. See `capi_examples::toy`
//! (`examples/src/toy`) for a complete provider.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # async fn demo<M: capi_core::infra::InfraMachine, C: capi_core::infra::InfraCluster>(
//! #     machines: Arc<impl capi_core::Actuator<M, C> + 'static>,
//! #     clusters: Arc<dyn capi_core::ClusterActuator<C>>,
//! # ) -> Result<(), capi_runtime::manager::ManagerError> {
//! use capi_actuator::InfrastructureControllers;
//! use capi_runtime::manager::{Manager, ManagerConfig};
//!
//! let kube_config = kube::Config::infer().await.map_err(kube::Error::InferConfig)?;
//! let mut manager = Manager::new(kube_config, ManagerConfig::default()).await?;
//! manager.add_machine_reconciler(machines);
//! manager.add_cluster_reconciler(clusters);
//! manager.run().await
//! # }
//! ```

mod bootstrap_data;
pub mod cluster;
mod instrument;
pub mod machine;
pub mod pool;
pub mod rbac;
pub mod template;

use std::sync::Arc;

use capi_core::infra::{InfraCluster, InfraMachine, InfraMachinePool, InfraMachineTemplate};
use capi_core::{Actuator, ClusterActuator, MachineTemplateActuator, PoolActuator};
use capi_runtime::manager::{Controllers, Manager};

/// The name of the family the infrastructure reconcilers share a client under
/// ([`Manager::add_to`]): one rate limit for a provider's machine, cluster and template
/// reconcilers, as upstream's provider manager has one.
pub const FAMILY: &str = "infrastructure";

/// Registers a provider's infrastructure reconcilers with a [`Manager`], all on the
/// infrastructure family's client ([`FAMILY`]).
pub trait InfrastructureControllers {
    /// Registers the reconciler of a provider's machine kind `M`, whose cluster kind is `C`.
    fn add_machine_reconciler<M, C, A>(&mut self, actuator: Arc<A>) -> &mut Self
    where
        M: InfraMachine,
        C: InfraCluster,
        A: Actuator<M, C> + ?Sized + 'static;

    /// Registers the reconciler of a provider's cluster kind.
    fn add_cluster_reconciler<C: InfraCluster>(
        &mut self,
        actuator: Arc<dyn ClusterActuator<C>>,
    ) -> &mut Self;

    /// Registers the reconciler of a provider's machine template kind `T`, whose cluster kind is
    /// `C`, which publishes each template's `status.capacity` and `status.nodeInfo` from
    /// `actuator`.
    fn add_machine_template_reconciler<T: InfraMachineTemplate, C: InfraCluster>(
        &mut self,
        actuator: Arc<dyn MachineTemplateActuator<T, C>>,
    ) -> &mut Self;

    /// Registers the reconciler of a provider's machine pool kind `P`, whose cluster kind is `C`
    /// (its machine kind, `P::Machine`, should have its machine reconciler registered too: that
    /// one leaves the pool's machines alone).
    fn add_machine_pool_reconciler<P, C, A>(&mut self, actuator: Arc<A>) -> &mut Self
    where
        P: InfraMachinePool,
        C: InfraCluster,
        A: PoolActuator<P, C> + ?Sized + 'static;
}

impl InfrastructureControllers for Manager {
    fn add_machine_reconciler<M, C, A>(&mut self, actuator: Arc<A>) -> &mut Self
    where
        M: InfraMachine,
        C: InfraCluster,
        A: Actuator<M, C> + ?Sized + 'static,
    {
        self.add_to(FAMILY, Registration(machine::erase(actuator)))
    }

    fn add_cluster_reconciler<C: InfraCluster>(
        &mut self,
        actuator: Arc<dyn ClusterActuator<C>>,
    ) -> &mut Self {
        self.add_to(FAMILY, Registration(actuator))
    }

    fn add_machine_template_reconciler<T: InfraMachineTemplate, C: InfraCluster>(
        &mut self,
        actuator: Arc<dyn MachineTemplateActuator<T, C>>,
    ) -> &mut Self {
        self.add_to(FAMILY, Registration(actuator))
    }

    fn add_machine_pool_reconciler<P, C, A>(&mut self, actuator: Arc<A>) -> &mut Self
    where
        P: InfraMachinePool,
        C: InfraCluster,
        A: PoolActuator<P, C> + ?Sized + 'static,
    {
        self.add_to(FAMILY, Registration(pool::erase(actuator)))
    }
}

/// One infrastructure reconciler waiting to be registered: the actuator it drives.
struct Registration<S: ?Sized>(Arc<S>);

impl<M: InfraMachine, C: InfraCluster> Controllers for Registration<machine::DynActuator<M, C>> {
    fn register(self, manager: &mut Manager) {
        let reconciler: machine::InfraMachineReconciler<M, C> = manager.reconciler(self.0);
        manager.add_controller(move |shutdown| machine::run(reconciler, shutdown.wait()));
    }
}

impl<C: InfraCluster> Controllers for Registration<dyn ClusterActuator<C>> {
    fn register(self, manager: &mut Manager) {
        let reconciler: cluster::InfraClusterReconciler<C> = manager.reconciler(self.0);
        manager.add_controller(move |shutdown| cluster::run(reconciler, shutdown.wait()));
    }
}

impl<P: InfraMachinePool, C: InfraCluster> Controllers
    for Registration<pool::DynPoolActuator<P, C>>
{
    fn register(self, manager: &mut Manager) {
        let reconciler: pool::InfraMachinePoolReconciler<P, C> = manager.reconciler(self.0);
        manager.add_controller(move |shutdown| pool::run(reconciler, shutdown.wait()));
    }
}

impl<T: InfraMachineTemplate, C: InfraCluster> Controllers
    for Registration<dyn MachineTemplateActuator<T, C>>
{
    fn register(self, manager: &mut Manager) {
        let reconciler: template::InfraMachineTemplateReconciler<T, C> = manager.reconciler(self.0);
        manager.add_controller(move |shutdown| template::run(reconciler, shutdown.wait()));
    }
}
