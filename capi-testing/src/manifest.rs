//! Applying YAML manifests the way `kubectl create -f` does — with strict field validation, as
//! kubectl does by default: a field a CRD's schema does not declare is an error naming it, never
//! dropped silently.

use kube::api::{DynamicObject, GroupVersionKind, PostParams};
use kube::core::Request;
use kube::discovery::pinned_kind;
use kube::{Client, Resource};

use crate::envtest::EnvtestError;

/// A manifest could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The YAML does not parse.
    #[error("manifest is not valid YAML: {0}")]
    Yaml(#[from] serde_saphyr::Error),
    /// A document is not a Kubernetes object.
    #[error("document {index} is not a Kubernetes object: {source}")]
    NotAnObject {
        /// The document's position, from 0.
        index: usize,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A document has no `apiVersion`/`kind`.
    #[error("document {index} has no apiVersion/kind")]
    MissingType {
        /// The document's position, from 0.
        index: usize,
    },
    /// A document's `apiVersion` is not `group/version` or `version`.
    #[error("document {index} has an invalid apiVersion: {source}")]
    BadApiVersion {
        /// The document's position, from 0.
        index: usize,
        /// Why.
        #[source]
        source: kube::core::gvk::ParseGroupVersionError,
    },
    /// The API server refused or could not be reached.
    #[error(transparent)]
    Api(#[from] EnvtestError),
    /// An object could not be encoded.
    #[error("document {index} could not be encoded")]
    Encode {
        /// The document's position, from 0.
        index: usize,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// Its request could not be built.
    #[error("document {index}: building the create request")]
    Request {
        /// The document's position, from 0.
        index: usize,
        /// Why.
        #[source]
        source: kube::core::request::Error,
    },
}

/// Parses a multi-document YAML manifest into objects (empty documents are skipped).
pub fn parse(yaml: &str) -> Result<Vec<DynamicObject>, ManifestError> {
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml)?;
    documents
        .into_iter()
        .filter(|d| !d.is_null())
        .enumerate()
        .map(|(index, document)| {
            let object: DynamicObject = serde_json::from_value(document)
                .map_err(|source| ManifestError::NotAnObject { index, source })?;
            if object.types.is_none() {
                return Err(ManifestError::MissingType { index });
            }
            Ok(object)
        })
        .collect()
}

/// Creates each object in `namespace` (namespaced kinds) with strict field validation and returns
/// what the API server stored.
pub async fn create_all(
    client: &Client,
    namespace: &str,
    objects: &[DynamicObject],
) -> Result<Vec<DynamicObject>, ManifestError> {
    let mut created = Vec::with_capacity(objects.len());
    for (index, object) in objects.iter().enumerate() {
        let types = object
            .types
            .as_ref()
            .ok_or(ManifestError::MissingType { index })?;
        let gvk = GroupVersionKind::try_from(types)
            .map_err(|source| ManifestError::BadApiVersion { index, source })?;
        let (resource, capabilities) = pinned_kind(client, &gvk)
            .await
            .map_err(EnvtestError::Kube)?;
        let scope = match capabilities.scope {
            kube::discovery::Scope::Namespaced => Some(namespace),
            kube::discovery::Scope::Cluster => None,
        };
        let body =
            serde_json::to_vec(object).map_err(|source| ManifestError::Encode { index, source })?;
        let request = Request::new(DynamicObject::url_path(&resource, scope))
            .create(&PostParams::default(), body)
            .and_then(strict)
            .map_err(|source| ManifestError::Request { index, source })?;
        let stored = client
            .request::<DynamicObject>(request)
            .await
            .map_err(EnvtestError::Kube)?;
        created.push(stored);
    }
    Ok(created)
}

/// Adds `fieldValidation=Strict` to a create request (kube's `PostParams` has no such field).
fn strict(
    request: http::Request<Vec<u8>>,
) -> Result<http::Request<Vec<u8>>, kube::core::request::Error> {
    let (mut parts, body) = request.into_parts();
    let uri = parts.uri.to_string();
    let separator = if uri.contains('?') { '&' } else { '?' };
    parts.uri = format!("{uri}{separator}fieldValidation=Strict")
        .parse()
        .map_err(|e: http::uri::InvalidUri| kube::core::request::Error::BuildRequest(e.into()))?;
    Ok(http::Request::from_parts(parts, body))
}
