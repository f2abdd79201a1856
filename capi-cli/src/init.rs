//! `capictl init`: installs a management plane into the cluster of the current kubeconfig — the
//! Cluster API core and kubeadm bootstrap CRDs, the infrastructure provider's CRDs, and its
//! manager's RBAC, Namespace and Deployment. Server-side apply makes it idempotent: a second run
//! changes nothing, a newer `capictl` updates what it owns.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use crate::manifests::{self, ManifestError};

/// The field manager of `capictl`'s server-side applies.
pub const FIELD_MANAGER: &str = "capictl";

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
    /// The API server refused or failed.
    #[error("applying {what}")]
    Apply {
        /// Which object.
        what: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// An object's `apiVersion` is malformed.
    #[error("{what} has a malformed apiVersion")]
    BadType {
        /// Which object.
        what: String,
        /// Why.
        #[source]
        source: kube::core::gvk::ParseGroupVersionError,
    },
    /// A CRD did not become established.
    #[error("CRD {0} was not established within 30 s")]
    NotEstablished(String),
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

fn describe(object: &DynamicObject) -> String {
    let kind = object.types.as_ref().map_or("object", |t| t.kind.as_str());
    match object.namespace() {
        Some(ns) => format!("{kind} {ns}/{}", object.name_any()),
        None => format!("{kind} {}", object.name_any()),
    }
}

/// Applies `objects` in order, waiting for each CRD to be established before what follows;
/// `progress` hears about each object.
pub async fn apply(
    client: &Client,
    objects: &[DynamicObject],
    mut progress: impl FnMut(&str),
) -> Result<(), InitError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for object in objects {
        let what = describe(object);
        let error = |source| InitError::Apply {
            what: what.clone(),
            source,
        };
        let types = object.types.clone().unwrap_or_default();
        let gvk = GroupVersionKind::try_from(&types).map_err(|source| InitError::BadType {
            what: what.clone(),
            source,
        })?;
        let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(error)?;
        let api: Api<DynamicObject> = match (capabilities.scope, object.namespace()) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(client.clone(), &ns, &resource)
            }
            _ => Api::all_with(client.clone(), &resource),
        };
        api.patch(&object.name_any(), &params, &Patch::Apply(object))
            .await
            .map_err(error)?;
        if types.kind == "CustomResourceDefinition" {
            wait_established(client, &object.name_any()).await?;
        }
        progress(&what);
    }
    Ok(())
}

async fn wait_established(client: &Client, name: &str) -> Result<(), InitError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let started = Instant::now();
    loop {
        let crd = api.get(name).await.map_err(|source| InitError::Apply {
            what: format!("CRD {name}"),
            source,
        })?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err(InitError::NotEstablished(name.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
