//! Finding the `AzureCluster` of a machine or a template: the one the `Cluster`'s
//! `infrastructureRef` names, else the one labelled with the cluster's name (during deletion the
//! `Cluster` may be gone).

use async_trait::async_trait;
use capi_core::ActuatorError;
use capi_core::api::Cluster;

use crate::api::AzureCluster;

/// Finds the `AzureCluster` of a cluster (subscription, credentials, network, load
/// balancer); mocked in unit tests.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait ClusterLookup: Send + Sync {
    /// The `AzureCluster` of the `Cluster` named `cluster` in `namespace`; `named` is the name
    /// the `Cluster`'s `infrastructureRef` gives it, when the `Cluster` is known.
    async fn azure_cluster(
        &self,
        namespace: &str,
        cluster: &str,
        named: Option<String>,
    ) -> Result<AzureCluster, ActuatorError>;
}

/// The name of the `AzureCluster` a `Cluster`'s `infrastructureRef` names.
pub fn infrastructure_name(cluster: &Cluster) -> Option<String> {
    cluster
        .spec
        .infrastructure_ref
        .as_ref()
        .filter(|r| r.kind == "AzureCluster")
        .map(|r| r.name.clone())
}

/// [`ClusterLookup`] on the management cluster.
pub struct ApiClusterLookup(pub kube::Client);

#[async_trait]
impl ClusterLookup for ApiClusterLookup {
    async fn azure_cluster(
        &self,
        namespace: &str,
        cluster: &str,
        named: Option<String>,
    ) -> Result<AzureCluster, ActuatorError> {
        let api: kube::Api<AzureCluster> = kube::Api::namespaced(self.0.clone(), namespace);
        let unreadable = |e| ActuatorError::transient("AzureClusterUnreadable", e);
        if let Some(name) = named
            && let Some(found) = api.get_opt(&name).await.map_err(unreadable)?
        {
            return Ok(found);
        }
        let labelled = api
            .list(
                &kube::api::ListParams::default()
                    .labels(&format!("{}={cluster}", capi_core::labels::CLUSTER_NAME)),
            )
            .await
            .map_err(unreadable)?;
        if let Some(found) = labelled.items.into_iter().next() {
            return Ok(found);
        }
        api.get_opt(cluster)
            .await
            .map_err(unreadable)?
            .ok_or_else(|| {
                ActuatorError::transient_message(
                    "WaitingForAzureCluster",
                    format!("no AzureCluster of cluster {namespace}/{cluster} yet"),
                )
            })
    }
}
