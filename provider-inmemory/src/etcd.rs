//! The control plane provider's view of the simulated cloud's etcd clusters: an
//! [`EtcdAccess`] that reads and changes the membership the control-plane instances of a cluster
//! formed ([`EtcdClusters`]), in process or through the cloud's HTTP API — and, with the feature
//! `real-etcd`, `ProcessEtcdAccess`, which reaches the real etcd members that
//! `EtcdProcesses` runs for those instances over etcd's own gRPC API.

use std::sync::Arc;

use async_trait::async_trait;
use capi_control_plane::etcd::{EtcdAccess, EtcdCluster, EtcdClusterStatus, EtcdError, EtcdMember};
use capi_core::api::Cluster;
use kube::ResourceExt;

use crate::cloud::{CloudError, EtcdClusters};

/// The simulated etcd cluster's key for a cluster: its [`cluster_key`](crate::cloud::cluster_key).
pub fn etcd_cluster_key(namespace: &str, cluster: &str) -> String {
    crate::cloud::cluster_key(namespace, cluster)
}

/// Reaches each cluster's simulated etcd through `cloud`.
#[derive(Clone)]
pub struct SimulatedEtcdAccess {
    cloud: Arc<dyn EtcdClusters>,
}

impl std::fmt::Debug for SimulatedEtcdAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedEtcdAccess")
            .finish_non_exhaustive()
    }
}

impl SimulatedEtcdAccess {
    /// Access through `cloud`.
    pub fn new(cloud: Arc<dyn EtcdClusters>) -> Self {
        Self { cloud }
    }
}

#[async_trait]
impl EtcdAccess for SimulatedEtcdAccess {
    async fn connect(
        &self,
        _client: &kube::Client,
        cluster: &Cluster,
    ) -> Result<Arc<dyn EtcdCluster>, EtcdError> {
        Ok(Arc::new(SimulatedEtcd {
            cloud: Arc::clone(&self.cloud),
            key: etcd_cluster_key(
                &cluster.namespace().unwrap_or_default(),
                &cluster.name_any(),
            ),
        }))
    }
}

struct SimulatedEtcd {
    cloud: Arc<dyn EtcdClusters>,
    key: String,
}

fn etcd_error(error: CloudError) -> EtcdError {
    match error {
        CloudError::EtcdMember { reason, .. } => EtcdError::Refused(reason),
        other => EtcdError::Unreachable(other.to_string()),
    }
}

#[async_trait]
impl EtcdCluster for SimulatedEtcd {
    async fn status(&self) -> Result<EtcdClusterStatus, EtcdError> {
        let cluster = self
            .cloud
            .etcd_cluster(&self.key)
            .await
            .map_err(etcd_error)?;
        if !cluster.members.is_empty() && !cluster.members.iter().any(|m| m.healthy) {
            return Err(EtcdError::Unreachable("no member answers".into()));
        }
        Ok(EtcdClusterStatus {
            members: cluster
                .members
                .into_iter()
                .map(|m| EtcdMember {
                    id: m.id,
                    name: m.name,
                    healthy: m.healthy,
                    learner: false,
                })
                .collect(),
            leader: cluster.leader,
        })
    }

    async fn move_leader(&self, to: u64) -> Result<(), EtcdError> {
        self.cloud
            .move_etcd_leader(&self.key, to)
            .await
            .map_err(etcd_error)
    }

    async fn remove_member(&self, id: u64) -> Result<(), EtcdError> {
        self.cloud
            .remove_etcd_member(&self.key, id)
            .await
            .map_err(etcd_error)
    }
}

/// Reaches the real etcd members [`EtcdProcesses`](crate::cloud::EtcdProcesses) runs, over gRPC
/// ([`GrpcEtcd`](capi_control_plane::etcd::client::GrpcEtcd)), seeded with the members whose
/// processes run.
#[cfg(feature = "real-etcd")]
#[derive(Clone, Debug)]
pub struct ProcessEtcdAccess {
    processes: Arc<crate::cloud::EtcdProcesses>,
    options: capi_control_plane::etcd::client::GrpcEtcdOptions,
}

#[cfg(feature = "real-etcd")]
impl ProcessEtcdAccess {
    /// Access to the members `processes` runs.
    pub fn new(
        processes: Arc<crate::cloud::EtcdProcesses>,
        options: capi_control_plane::etcd::client::GrpcEtcdOptions,
    ) -> Self {
        Self { processes, options }
    }

    /// The etcd cluster of `namespace`/`cluster`.
    pub fn cluster(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> capi_control_plane::etcd::client::GrpcEtcd {
        capi_control_plane::etcd::client::GrpcEtcd::new(
            self.processes
                .client_urls(&etcd_cluster_key(namespace, cluster)),
            self.options.clone(),
        )
    }
}

#[cfg(feature = "real-etcd")]
#[async_trait]
impl EtcdAccess for ProcessEtcdAccess {
    async fn connect(
        &self,
        _client: &kube::Client,
        cluster: &Cluster,
    ) -> Result<Arc<dyn EtcdCluster>, EtcdError> {
        Ok(Arc::new(self.cluster(
            &cluster.namespace().unwrap_or_default(),
            &cluster.name_any(),
        )))
    }
}
