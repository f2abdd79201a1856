//! A cluster's stored PKI: the CA Secrets upstream names (`<cluster>-ca`, `-etcd`, `-proxy`,
//! `-sa`) and the admin kubeconfig (`<cluster>-kubeconfig`), generated once and read back ever
//! after — shared by the bootstrap controller and the control plane provider, whichever comes
//! first, so that each key exists exactly once per cluster.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, PostParams, Preconditions};
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
    let mut found = Vec::new();
    for suffix in SECRET_SUFFIXES {
        if let Some(secret) = secrets.get_opt(&format!("{name}-{suffix}")).await? {
            found.push(secret);
        }
    }
    let pki = match found.len() {
        0 => match create(secrets, cluster).await? {
            Some(pki) => pki,
            // Another reconcile created it first: use what is stored, next time.
            None => {
                return Err(EnsureError::Pending(
                    "the cluster PKI is being created".into(),
                ));
            }
        },
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
    if secrets.get_opt(&kubeconfig_name(cluster)).await?.is_none() {
        write_kubeconfig(secrets, cluster, &pki, server).await?;
    }
    Ok(pki)
}

/// [`ensure`] for a writer that expects nothing stored yet (a control plane that has not seen
/// its certificates): the PKI is generated and its CA Secrets created without reading first,
/// then the admin kubeconfig, one that exists already kept. When a CA Secret exists after all —
/// another writer's PKI, or the user's own — nothing of this call's PKI is kept (the CA Secrets
/// it created before meeting it are deleted again) and what is stored is read as [`ensure`]
/// reads it: a partial PKI is never completed by generating the rest.
pub async fn ensure_new(
    secrets: &Api<Secret>,
    cluster: &Cluster,
    server: &str,
) -> Result<ClusterPki, EnsureError> {
    match create(secrets, cluster).await? {
        Some(pki) => {
            write_kubeconfig(secrets, cluster, &pki, server).await?;
            Ok(pki)
        }
        None => ensure(secrets, cluster, server).await,
    }
}

/// Generates the cluster's PKI and creates its CA Secrets, in [`SECRET_SUFFIXES`]' order.
/// Returns the PKI every CA Secret was created from, or `None` when one of them existed already:
/// then the Secrets this call created before it are deleted again (those of this call only: the
/// deletion is conditional on their UIDs), and what is stored is for the caller to read. Every
/// writer of this module creates in the same order, so two racing writers meet at the first
/// Secret and only one goes on.
async fn create(
    secrets: &Api<Secret>,
    cluster: &Cluster,
) -> Result<Option<ClusterPki>, EnsureError> {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let pki = ClusterPki::generate().map_err(EnsureError::Invalid)?;
    let owner = cluster.controller_owner_ref(&());
    let mut created = Vec::new();
    for secret in pki.secrets(&name, &namespace, owner) {
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(made) => created.push(made),
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                for made in created {
                    let only_this = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: made.uid(),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    match secrets.delete(&made.name_any(), &only_this).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.is_not_found() => {}
                        Err(error) => return Err(error.into()),
                    }
                }
                return Ok(None);
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(Some(pki))
}

/// `<cluster>-kubeconfig`.
fn kubeconfig_name(cluster: &Cluster) -> String {
    format!("{}-kubeconfig", cluster.name_any())
}

/// Creates the admin kubeconfig for `server`, signed by `pki`, owned by the Cluster (one that
/// exists already is kept).
async fn write_kubeconfig(
    secrets: &Api<Secret>,
    cluster: &Cluster,
    pki: &ClusterPki,
    server: &str,
) -> Result<(), EnsureError> {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let kubeconfig = pki
        .admin_kubeconfig(&name, server)
        .map_err(EnsureError::Invalid)?;
    let mut secret = BootstrapSecret::new(
        &namespace,
        kubeconfig_name(cluster),
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
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
        Err(error) => Err(error.into()),
    }
}
