//! The cluster-wide init lock: exactly one control-plane machine of a cluster runs `kubeadm init`.
//!
//! The lock is a ConfigMap `<cluster>-lock` in the cluster's namespace holding the name and UID of
//! the machine that may initialise. Creating it is atomic (the API server refuses a second create),
//! so of any number of concurrent control-plane machines exactly one wins. A lock whose holder no
//! longer exists (deleted before the control plane came up) is broken, so that another machine can
//! take over — the lock never latches forever.

use std::collections::BTreeMap;

use capi_core::api::Machine;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, Client};

/// The outcome of [`InitLock::try_acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    /// This machine holds the lock: it runs `kubeadm init`.
    Acquired,
    /// Another machine holds it; this one waits and joins later.
    HeldBy(String),
}

/// The init lock of one cluster.
#[derive(Clone)]
pub struct InitLock {
    config_maps: Api<ConfigMap>,
    machines: Api<Machine>,
    name: String,
}

impl std::fmt::Debug for InitLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitLock")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

const HOLDER_NAME: &str = "machineName";
const HOLDER_UID: &str = "machineUID";

impl InitLock {
    /// The lock of cluster `cluster` in `namespace`.
    pub fn new(client: Client, namespace: &str, cluster: &str) -> Self {
        Self {
            config_maps: Api::namespaced(client.clone(), namespace),
            machines: Api::namespaced(client, namespace),
            name: capi_core::cluster_objects::name(cluster, capi_core::cluster_objects::INIT_LOCK),
        }
    }

    /// Takes the lock for `machine` (name, UID), or reports who holds it. Idempotent for the
    /// holder. A lock held by a machine that no longer exists is broken and taken over.
    pub async fn try_acquire(&self, machine: &str, uid: &str) -> Result<LockState, kube::Error> {
        for _ in 0..3 {
            let lock = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([
                    (HOLDER_NAME.to_string(), machine.to_string()),
                    (HOLDER_UID.to_string(), uid.to_string()),
                ])),
                ..ConfigMap::default()
            };
            match self.config_maps.create(&PostParams::default(), &lock).await {
                Ok(_) => return Ok(LockState::Acquired),
                Err(kube::Error::Api(status)) if status.is_already_exists() => {}
                Err(error) => return Err(error),
            }
            let Some(existing) = self.config_maps.get_opt(&self.name).await? else {
                continue;
            };
            let data = existing.data.clone().unwrap_or_default();
            let holder = data.get(HOLDER_NAME).cloned().unwrap_or_default();
            let holder_uid = data.get(HOLDER_UID).cloned().unwrap_or_default();
            if holder_uid == uid {
                return Ok(LockState::Acquired);
            }
            let alive = self
                .machines
                .get_opt(&holder)
                .await?
                .is_some_and(|m| m.metadata.uid.as_deref() == Some(holder_uid.as_str()));
            if alive {
                return Ok(LockState::HeldBy(holder));
            }
            tracing::info!(lock = %self.name, stale_holder = %holder, "breaking an init lock whose machine is gone");
            self.delete_exact(&existing).await?;
        }
        Ok(LockState::HeldBy(String::new()))
    }

    /// Releases the lock if `uid` holds it (after initialisation, or when the holder is deleted).
    pub async fn release(&self, uid: &str) -> Result<(), kube::Error> {
        if let Some(existing) = self.config_maps.get_opt(&self.name).await?
            && existing
                .data
                .as_ref()
                .and_then(|d| d.get(HOLDER_UID))
                .map(String::as_str)
                == Some(uid)
        {
            self.delete_exact(&existing).await?;
        }
        Ok(())
    }

    /// Deletes exactly this version of the lock: if someone replaced it meanwhile, nothing happens.
    async fn delete_exact(&self, lock: &ConfigMap) -> Result<(), kube::Error> {
        let preconditions = Preconditions {
            uid: lock.metadata.uid.clone(),
            resource_version: lock.metadata.resource_version.clone(),
        };
        let params = DeleteParams {
            preconditions: Some(preconditions),
            ..DeleteParams::default()
        };
        match self.config_maps.delete(&self.name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.is_not_found() || status.is_conflict() => {
                Ok(())
            }
            Err(error) => Err(error),
        }
    }
}
