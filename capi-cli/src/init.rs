//! `capictl init`: installs a management plane into the cluster of the current kubeconfig — the
//! Cluster API core and kubeadm bootstrap CRDs, the infrastructure provider's CRDs, and its
//! manager's RBAC, Namespace and Deployment. Server-side apply makes it idempotent: a second run
//! changes nothing, a newer `capictl` updates what it owns.

use kube::api::DynamicObject;
use kube::{Client, ResourceExt};

use crate::manifests::{self, ManifestError};

pub use crate::apply::FIELD_MANAGER;

/// Why `init` failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// No such infrastructure provider.
    #[error("no infrastructure provider {0:?}; available: inmemory")]
    UnknownProvider(String),
    /// The manifests could not be rendered.
    #[error(transparent)]
    Manifests(#[from] ManifestError),
    /// An object could not be converted.
    #[error("rendering {what}")]
    Json {
        /// Which object.
        what: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The API server refused an object or failed.
    #[error(transparent)]
    Apply(#[from] crate::apply::ApplyError),
}

/// Everything `init` installs for `provider`, CRDs first.
pub fn objects(provider: &str) -> Result<Vec<DynamicObject>, InitError> {
    let provider_crds = match provider {
        "inmemory" => provider_inmemory::api::crds(),
        other => return Err(InitError::UnknownProvider(other.to_string())),
    };
    let mut values = Vec::new();
    for crd in capi_core::crd::core()
        .into_iter()
        .chain(capi_bootstrap::api::crds())
        .chain(capi_control_plane::api::crds())
        .chain(provider_crds)
    {
        let name = crd.name_any();
        values.push(
            serde_json::to_value(&crd).map_err(|source| InitError::Json {
                what: format!("CRD {name}"),
                source,
            })?,
        );
    }
    values.extend(manifests::inmemory().objects()?);
    values
        .into_iter()
        .map(|value| {
            let what = format!("{} {}", value["kind"], value["metadata"]["name"]);
            serde_json::from_value(value).map_err(|source| InitError::Json { what, source })
        })
        .collect()
}

/// The objects as one YAML stream (`--dry-run`).
pub fn to_yaml(objects: &[DynamicObject]) -> Result<String, InitError> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(object).map_err(ManifestError::Yaml)?);
    }
    Ok(out)
}

/// Applies `objects` in order with strict field validation (see [`crate::apply`]), waiting for
/// each CRD to be established before what follows; `progress` hears about each object.
pub async fn apply(
    client: &Client,
    objects: &[DynamicObject],
    progress: impl FnMut(&str),
) -> Result<(), InitError> {
    Ok(crate::apply::apply(client, objects, None, progress).await?)
}
