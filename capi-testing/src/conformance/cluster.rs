//! The cluster part of the suite: a [`ClusterActuator`] over the provider's cloud.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use capi_core::api::Cluster;
use capi_core::{ActuatorError, ClusterActuator, ClusterInfrastructure, ClusterScope};

use super::drive::settle;
use super::{
    CLUSTER_DELETE_RETURNS_ONLY_WHEN_GONE, CLUSTER_RECONCILE_IS_IDEMPOTENT, CONVERGES,
    CloudInventory, DELETE_IS_IDEMPOTENT, Report, Settings,
};

/// Checks a [`ClusterActuator`] for cluster kind `C` against the contract (see the [module
/// docs](super)): provisioning settles, reconciling again creates nothing, deletion returns only
/// when everything is gone.
pub struct ClusterSuite<C> {
    actuator: Arc<dyn ClusterActuator<C>>,
    cloud: Arc<dyn CloudInventory>,
    infra_cluster: C,
    cluster: Cluster,
    settings: Settings,
}

impl<C: Clone + Send + Sync + 'static> ClusterSuite<C> {
    /// A suite for `actuator` over `cloud`, provisioning `infra_cluster` for a `Cluster` named
    /// `conformance` in namespace `default` (with a fresh UID) until [`Self::cluster`] says
    /// otherwise.
    pub fn new(
        actuator: Arc<dyn ClusterActuator<C>>,
        cloud: Arc<dyn CloudInventory>,
        infra_cluster: C,
    ) -> Self {
        let cluster = super::default_cluster();
        Self {
            actuator,
            cloud,
            infra_cluster,
            cluster,
            settings: Settings::default(),
        }
    }

    /// The `Cluster` the infrastructure belongs to.
    pub fn cluster(mut self, cluster: Cluster) -> Self {
        self.cluster = cluster;
        self
    }

    /// How patient the suite is.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Provisions, reconciles again, deletes; the report lists each broken rule.
    pub async fn run(&self) -> Report {
        self.run_with(|_| async { Report::default() }).await
    }

    /// Like [`Self::run`], running `inside` — a machine suite, typically — once the
    /// infrastructure is provisioned (with what the actuator reported) and before it is deleted;
    /// its report is merged.
    pub async fn run_with<F, Fut>(&self, inside: F) -> Report
    where
        F: FnOnce(ClusterInfrastructure) -> Fut,
        Fut: Future<Output = Report>,
    {
        let mut report = Report::default();
        let Some(baseline) = self.resources(&mut report).await else {
            return report;
        };
        let scope = ClusterScope {
            cluster: Arc::new(self.cluster.clone()),
            infra_cluster: Arc::new(self.infra_cluster.clone()),
        };
        let provisioned = match self.provision(&scope).await {
            Ok(reported) => reported,
            Err(error) => {
                report.fail(CONVERGES, format!("provisioning: {error}"));
                self.delete(&mut report, &scope, &baseline).await;
                return report;
            }
        };
        if let Some(after) = self.resources(&mut report).await {
            match self.provision(&scope).await {
                Ok(again) => {
                    // A failed listing is reported as such (converges), not as a change.
                    if let Some(now) = self.resources(&mut report).await {
                        report.check(
                        CLUSTER_RECONCILE_IS_IDEMPOTENT,
                        now == after
                            && again.control_plane_endpoint == provisioned.control_plane_endpoint,
                        || {
                            format!(
                                "reconciling again made {:?}, removed {:?}, endpoint {:?} → {:?}",
                                now.difference(&after).collect::<Vec<_>>(),
                                after.difference(&now).collect::<Vec<_>>(),
                                provisioned.control_plane_endpoint,
                                again.control_plane_endpoint
                            )
                        },
                    );
                    }
                }
                Err(error) => report.fail(CONVERGES, format!("reconciling again: {error}")),
            }
        }
        let inner = inside(provisioned).await;
        report.checked.extend(inner.checked);
        report.violations.extend(inner.violations);
        report.notes.extend(inner.notes);
        self.delete(&mut report, &scope, &baseline).await;
        report
    }

    /// Reconciles until the actuator reports the infrastructure provisioned.
    async fn provision(
        &self,
        scope: &ClusterScope<C>,
    ) -> Result<ClusterInfrastructure, super::drive::Unsettled> {
        settle(&self.settings, || async {
            let reported = self.actuator.reconcile(scope).await?;
            if reported.provisioned {
                Ok(reported)
            } else {
                Err(ActuatorError::requeue_after(
                    Duration::from_millis(500),
                    "NotProvisioned",
                    "the infrastructure is not provisioned yet",
                ))
            }
        })
        .await
    }

    async fn delete(
        &self,
        report: &mut Report,
        scope: &ClusterScope<C>,
        baseline: &std::collections::BTreeSet<String>,
    ) {
        if let Err(error) = settle(&self.settings, || self.actuator.delete(scope)).await {
            return report.fail(CONVERGES, format!("deleting the cluster: {error}"));
        }
        if let Some(now) = self.resources(report).await {
            let left: Vec<&String> = now.difference(baseline).collect();
            report.check(
                CLUSTER_DELETE_RETURNS_ONLY_WHEN_GONE,
                left.is_empty(),
                || format!("delete returned Ok, but the cloud still holds {left:?}"),
            );
        }
        match settle(&self.settings, || self.actuator.delete(scope)).await {
            Ok(()) => report.check(DELETE_IS_IDEMPOTENT, true, String::new),
            Err(error) => report.fail(
                DELETE_IS_IDEMPOTENT,
                format!("deleting the cluster again: {error}"),
            ),
        }
    }

    async fn resources(&self, report: &mut Report) -> Option<std::collections::BTreeSet<String>> {
        super::listed(report, "resources", self.cloud.resources().await)
    }
}
