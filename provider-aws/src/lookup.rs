//! Finding the `AWSCluster` of a machine or a template: the one the `Cluster`'s
//! `infrastructureRef` names, else the one labelled with the cluster's name (during deletion the
//! `Cluster` may be gone).

use async_trait::async_trait;
use capi_core::ActuatorError;
use capi_core::api::Cluster;

use crate::api::AWSCluster;

/// Finds the `AWSCluster` of a cluster (region, credentials, network, security groups, load
/// balancer); mocked in unit tests.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait ClusterLookup: Send + Sync {
    /// The `AWSCluster` of the `Cluster` named `cluster` in `namespace`; `named` is the name
    /// the `Cluster`'s `infrastructureRef` gives it, when the `Cluster` is known.
    async fn aws_cluster(
        &self,
        namespace: &str,
        cluster: &str,
        named: Option<String>,
    ) -> Result<AWSCluster, ActuatorError>;
}

/// The name of the `AWSCluster` a `Cluster`'s `infrastructureRef` names.
pub fn infrastructure_name(cluster: &Cluster) -> Option<String> {
    capi_actuator::infra_cluster::named::<AWSCluster>(cluster)
}

/// [`ClusterLookup`] on the management cluster ([`capi_actuator::infra_cluster::find`]).
pub struct ApiClusterLookup(pub kube::Client);

#[async_trait]
impl ClusterLookup for ApiClusterLookup {
    async fn aws_cluster(
        &self,
        namespace: &str,
        cluster: &str,
        named: Option<String>,
    ) -> Result<AWSCluster, ActuatorError> {
        capi_actuator::infra_cluster::find(&self.0, namespace, cluster, named).await
    }
}
