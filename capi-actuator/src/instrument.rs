//! Actuators wrapped with metrics: every call counted and timed by method and result.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use capi_core::{
    Actuator, ActuatorError, BootstrapData, ClusterActuator, ClusterInfrastructure, ClusterScope,
    Found, MachineInstance, MachineScope, PoolActuator, PoolScope, ScaleSetReport, UpdateOutcome,
};

use crate::machine::{AnyInstance, DynActuator};
use crate::pool::{AnyScaleSet, DynPoolActuator};
use capi_runtime::metrics::Metrics;

fn result_label<T>(result: &Result<T, ActuatorError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(error) => error.kind().as_str(),
    }
}

/// A machine actuator whose calls are recorded in [`Metrics`].
pub(crate) struct InstrumentedActuator<M, C> {
    pub(crate) inner: Arc<DynActuator<M, C>>,
    pub(crate) metrics: Metrics,
    pub(crate) controller: String,
}

impl<M, C> InstrumentedActuator<M, C> {
    fn record<T>(&self, method: &'static str, started: Instant, result: &Result<T, ActuatorError>) {
        self.metrics.actuator_call(
            &self.controller,
            method,
            result_label(result),
            started.elapsed(),
        );
    }
}

#[async_trait]
impl<M: Send + Sync + 'static, C: Send + Sync + 'static> Actuator<M, C>
    for InstrumentedActuator<M, C>
{
    type Instance = AnyInstance;

    async fn exists(
        &self,
        scope: &MachineScope<M, C>,
    ) -> Result<Option<Found<AnyInstance>>, ActuatorError> {
        let started = Instant::now();
        let result = self.inner.exists(scope).await;
        self.record("exists", started, &result);
        result
    }

    async fn create(
        &self,
        scope: &MachineScope<M, C>,
        bootstrap: &BootstrapData,
    ) -> Result<MachineInstance, ActuatorError> {
        let started = Instant::now();
        let result = self.inner.create(scope, bootstrap).await;
        self.record("create", started, &result);
        result
    }

    async fn update(
        &self,
        scope: &MachineScope<M, C>,
        found: Found<AnyInstance>,
    ) -> Result<UpdateOutcome, ActuatorError> {
        let started = Instant::now();
        let result = self.inner.update(scope, found).await;
        self.record("update", started, &result);
        result
    }

    async fn delete(&self, scope: &MachineScope<M, C>) -> Result<(), ActuatorError> {
        let started = Instant::now();
        let result = self.inner.delete(scope).await;
        self.record("delete", started, &result);
        result
    }
}

/// A [`ClusterActuator`] whose calls are recorded in [`Metrics`].
pub(crate) struct InstrumentedClusterActuator<C> {
    pub(crate) inner: Arc<dyn ClusterActuator<C>>,
    pub(crate) metrics: Metrics,
    pub(crate) controller: String,
}

#[async_trait]
impl<C: Send + Sync + 'static> ClusterActuator<C> for InstrumentedClusterActuator<C> {
    async fn reconcile(
        &self,
        scope: &ClusterScope<C>,
    ) -> Result<ClusterInfrastructure, ActuatorError> {
        let started = Instant::now();
        let result = self.inner.reconcile(scope).await;
        self.metrics.actuator_call(
            &self.controller,
            "reconcile",
            result_label(&result),
            started.elapsed(),
        );
        result
    }

    async fn delete(&self, scope: &ClusterScope<C>) -> Result<(), ActuatorError> {
        let started = Instant::now();
        let result = self.inner.delete(scope).await;
        self.metrics.actuator_call(
            &self.controller,
            "delete",
            result_label(&result),
            started.elapsed(),
        );
        result
    }
}

/// A pool actuator whose calls are recorded in [`Metrics`].
pub(crate) struct InstrumentedPoolActuator<P, C> {
    pub(crate) inner: Arc<DynPoolActuator<P, C>>,
    pub(crate) metrics: Metrics,
    pub(crate) controller: String,
}

impl<P, C> InstrumentedPoolActuator<P, C> {
    fn record<T>(&self, method: &'static str, started: Instant, result: &Result<T, ActuatorError>) {
        self.metrics.actuator_call(
            &self.controller,
            method,
            result_label(result),
            started.elapsed(),
        );
    }
}

#[async_trait]
impl<P: Send + Sync + 'static, C: Send + Sync + 'static> PoolActuator<P, C>
    for InstrumentedPoolActuator<P, C>
{
    type ScaleSet = AnyScaleSet;

    async fn exists(
        &self,
        scope: &PoolScope<P, C>,
    ) -> Result<Option<Found<AnyScaleSet, ScaleSetReport>>, ActuatorError> {
        let started = Instant::now();
        let result = self.inner.exists(scope).await;
        self.record("exists", started, &result);
        result
    }

    async fn create(
        &self,
        scope: &PoolScope<P, C>,
        bootstrap: &BootstrapData,
    ) -> Result<ScaleSetReport, ActuatorError> {
        let started = Instant::now();
        let result = self.inner.create(scope, bootstrap).await;
        self.record("create", started, &result);
        result
    }

    async fn update(
        &self,
        scope: &PoolScope<P, C>,
        found: Found<AnyScaleSet, ScaleSetReport>,
        bootstrap: Option<BootstrapData>,
    ) -> Result<ScaleSetReport, ActuatorError> {
        let started = Instant::now();
        let result = self.inner.update(scope, found, bootstrap).await;
        self.record("update", started, &result);
        result
    }

    async fn delete(&self, scope: &PoolScope<P, C>) -> Result<(), ActuatorError> {
        let started = Instant::now();
        let result = self.inner.delete(scope).await;
        self.record("delete", started, &result);
        result
    }
}
