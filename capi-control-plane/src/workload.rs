//! Clients of workload clusters for the control plane provider, reached through each cluster's
//! `<cluster>-kubeconfig` Secret (key `value`) and built once per version of that Secret: the
//! Secret is read again at most every [`SECRET_RECHECK`] (one request), and the kubeconfig parsed
//! and a TLS client built only when the Secret changed.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use capi_controllers::SECRET_RECHECK;
use capi_controllers::WorkloadError;
use capi_core::api::Cluster;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};

/// Workload clients by kubeconfig Secret (namespace, name), each with the Secret's UID and
/// resource version it was built from.
#[derive(Default)]
pub(crate) struct WorkloadClients {
    clients: Mutex<HashMap<(String, String), Built>>,
}

/// A client, the Secret version it was built from, and when that Secret was last read.
struct Built {
    version: String,
    client: Client,
    checked: Instant,
}

impl WorkloadClients {
    /// The client of the workload cluster whose kubeconfig `secret` holds.
    pub(crate) async fn for_secret(&self, secret: &Secret) -> Result<Client, WorkloadError> {
        let key = (secret.namespace().unwrap_or_default(), secret.name_any());
        let version = format!(
            "{}/{}",
            secret.uid().unwrap_or_default(),
            secret.resource_version().unwrap_or_default()
        );
        if let Some(built) = self
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&key)
            && built.version == version
        {
            built.checked = Instant::now();
            return Ok(built.client.clone());
        }
        let client = capi_controllers::client_from_secret(secret).await?;
        self.clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                key,
                Built {
                    version,
                    client: client.clone(),
                    checked: Instant::now(),
                },
            );
        Ok(client)
    }

    /// The client of `cluster`'s workload cluster, its kubeconfig Secret read with `management`
    /// unless it was read less than [`SECRET_RECHECK`] ago.
    pub(crate) async fn for_cluster(
        &self,
        management: &Client,
        cluster: &Cluster,
    ) -> Result<Client, WorkloadError> {
        let name = format!("{}-kubeconfig", cluster.name_any());
        let namespace = cluster.namespace().unwrap_or_default();
        if let Some(built) = self
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(namespace, name.clone()))
            && built.checked.elapsed() < SECRET_RECHECK
        {
            return Ok(built.client.clone());
        }
        let secret =
            Api::<Secret>::namespaced(management.clone(), &cluster.namespace().unwrap_or_default())
                .get_opt(&name)
                .await
                .map_err(WorkloadError::Management)?
                .ok_or(WorkloadError::KubeconfigMissing(name))?;
        self.for_secret(&secret).await
    }

    /// Forgets the client of `cluster` in `namespace` (the cluster is being deleted).
    pub(crate) fn forget(&self, namespace: &str, cluster: &str) {
        self.clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(namespace.to_string(), format!("{cluster}-kubeconfig")));
    }
}
