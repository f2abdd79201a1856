//! A cluster's stored PKI: the CA Secrets upstream names (`<cluster>-ca`, `-etcd`, `-proxy`,
//! `-sa`) and the admin kubeconfig (`<cluster>-kubeconfig`), generated once and read back ever
//! after — shared by the bootstrap controller and the control plane provider, whichever comes
//! first, so that each key exists exactly once per cluster.

use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};

use crate::pki::{ClusterPki, PkiError, SECRET_SUFFIXES};
use crate::secret::BootstrapSecret;
use capi_core::BootstrapFormat;
use capi_core::api::Cluster;

/// Why the cluster's PKI is not available.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnsureError {
    /// Another writer is creating it, or only part of it exists: look again later. A partial
    /// PKI is never completed by generating the rest — that would orphan a running control plane.
    #[error("{0}")]
    Pending(String),
    /// What is stored cannot be read (a user's own CA Secret in the wrong shape, for example).
    #[error(transparent)]
    Invalid(PkiError),
    /// The API server failed.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Loads the PKI of `cluster` from `secrets` (its namespace), generating and storing it the first
/// time, and writes the admin kubeconfig for `server` if it is missing. The Secrets are owned by
/// the Cluster, so that they go with it.
pub async fn ensure(
    secrets: &Api<Secret>,
    cluster: &Cluster,
    server: &str,
) -> Result<ClusterPki, EnsureError> {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let mut found = Vec::new();
    for suffix in SECRET_SUFFIXES {
        if let Some(secret) = secrets.get_opt(&format!("{name}-{suffix}")).await? {
            found.push(secret);
        }
    }
    let pki = match found.len() {
        0 => {
            let pki = ClusterPki::generate().map_err(EnsureError::Invalid)?;
            let owner = cluster.controller_owner_ref(&());
            for secret in pki.secrets(&name, &namespace, owner) {
                match secrets.create(&PostParams::default(), &secret).await {
                    Ok(_) => {}
                    // Another reconcile created it first: use what is stored, next time.
                    Err(kube::Error::Api(status)) if status.is_already_exists() => {
                        return Err(EnsureError::Pending(
                            "the cluster PKI is being created".into(),
                        ));
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            pki
        }
        n if n == SECRET_SUFFIXES.len() => {
            ClusterPki::from_secrets(&name, &found).map_err(EnsureError::Invalid)?
        }
        _ => {
            return Err(EnsureError::Pending(format!(
                "only {} of the cluster's {} PKI Secrets exist",
                found.len(),
                SECRET_SUFFIXES.len()
            )));
        }
    };
    let kubeconfig_name = format!("{name}-kubeconfig");
    if secrets.get_opt(&kubeconfig_name).await?.is_none() {
        let kubeconfig = pki
            .admin_kubeconfig(&name, server)
            .map_err(EnsureError::Invalid)?;
        let mut secret = BootstrapSecret::new(
            &namespace,
            &kubeconfig_name,
            &name,
            BootstrapFormat::CloudConfig,
            kubeconfig.into_bytes(),
        )
        .into_secret();
        if let Some(data) = secret.data.as_mut() {
            data.remove(crate::secret::FORMAT_KEY);
        }
        secret.metadata.owner_references = cluster.controller_owner_ref(&()).map(|o| vec![o]);
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(pki)
}
