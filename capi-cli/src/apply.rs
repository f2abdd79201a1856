//! `capictl apply -f FILE`: server-side apply of manifests, as `kubectl apply --server-side` does,
//! with **strict field validation**: a field the schema does not declare (a misspelling, a field of
//! another version) or a duplicate field is refused by the API server with the field's path, and
//! nothing of that object is stored. Nothing is ever dropped silently.
//!
//! Objects are applied in the order given; a CustomResourceDefinition is waited for until it is
//! established (and its kind discoverable), so a stream may hold CRDs and then objects of their
//! kinds. Namespaced objects without a namespace go to the namespace the caller names (`-n`),
//! else the client's default (the kubeconfig context's); an object that names another namespace
//! than `-n` is an error, as with kubectl; cluster-scoped objects ignore both.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

/// The field manager of `capictl`'s server-side applies.
pub const FIELD_MANAGER: &str = "capictl";

/// How long a CRD may take to become established.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// Why applying failed. Every variant names the object (`Kind namespace/name`, or the document's
/// position while parsing).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// The YAML does not parse.
    #[error("the manifest is not valid YAML")]
    Yaml(#[source] serde_saphyr::Error),
    /// A document is not a Kubernetes object.
    #[error("document {index} is not a Kubernetes object")]
    NotAnObject {
        /// The document's position, from 0.
        index: usize,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A document has no `apiVersion`/`kind`, or no `metadata.name`.
    #[error("document {index} has no {missing}")]
    Incomplete {
        /// The document's position, from 0.
        index: usize,
        /// What is missing.
        missing: &'static str,
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
    /// The API server refused the object (for example a field its schema does not declare) or
    /// could not be reached; the source carries the server's message with the field path.
    #[error("applying {what}")]
    Apply {
        /// Which object.
        what: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// A CRD did not become established.
    #[error("CRD {0} was not established within {secs} s", secs = ESTABLISH_TIMEOUT.as_secs())]
    NotEstablished(String),
    /// An object names another namespace than the one asked for.
    #[error(
        "{what} names namespace {object:?} but {requested:?} was asked for; remove one of them"
    )]
    NamespaceMismatch {
        /// Which object.
        what: String,
        /// The object's `metadata.namespace`.
        object: String,
        /// The namespace asked for (`-n`).
        requested: String,
    },
}

/// Parses a multi-document YAML stream into objects; empty documents are skipped. Every object
/// must have `apiVersion`, `kind` and `metadata.name`.
pub fn parse(yaml: &str) -> Result<Vec<DynamicObject>, ApplyError> {
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(yaml).map_err(ApplyError::Yaml)?;
    documents
        .into_iter()
        .filter(|d| !d.is_null())
        .enumerate()
        .map(|(index, document)| {
            let object: DynamicObject = serde_json::from_value(document)
                .map_err(|source| ApplyError::NotAnObject { index, source })?;
            if object.types.is_none() {
                return Err(ApplyError::Incomplete {
                    index,
                    missing: "apiVersion/kind",
                });
            }
            if object.metadata.name.as_deref().is_none_or(str::is_empty) {
                return Err(ApplyError::Incomplete {
                    index,
                    missing: "metadata.name",
                });
            }
            Ok(object)
        })
        .collect()
}

/// `Kind namespace/name` or `Kind name`, as messages name an object.
pub fn describe(object: &DynamicObject) -> String {
    let kind = object.types.as_ref().map_or("object", |t| t.kind.as_str());
    match object.namespace() {
        Some(ns) => format!("{kind} {ns}/{}", object.name_any()),
        None => format!("{kind} {}", object.name_any()),
    }
}

/// The parameters of every apply: `capictl` as the field manager, taking over fields another
/// manager set (`--force-conflicts`), and strict field validation.
pub fn params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER)
        .force()
        .validation_strict()
}

/// Applies `objects` in order with [`params`], waiting for each CRD to be established before what
/// follows. Namespaced objects without a namespace go to `namespace` (else the client's default
/// namespace); one that names another namespace than `namespace` is refused. Stops at the first
/// refusal; what was applied before it stays applied (applying again is safe). `progress` hears
/// about each applied object.
pub async fn apply(
    client: &Client,
    objects: &[DynamicObject],
    namespace: Option<&str>,
    progress: impl FnMut(&str),
) -> Result<(), ApplyError> {
    apply_objects(client, objects, namespace, Bindings::Keep, progress).await
}

/// What [`apply_objects`] does with a RoleBinding or ClusterRoleBinding whose `roleRef` differs
/// from the existing one's (which the API server refuses to change).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bindings {
    /// Leave it: the apply fails, naming the binding.
    Keep,
    /// Replace it (`capictl init`, whose manager's mode picks the role): delete it, apply, and on
    /// failure put the old one back.
    Replace,
}

/// [`apply`], with bindings whose role changed handled as `bindings` says.
pub(crate) async fn apply_objects(
    client: &Client,
    objects: &[DynamicObject],
    namespace: Option<&str>,
    bindings: Bindings,
    mut progress: impl FnMut(&str),
) -> Result<(), ApplyError> {
    let params = params();
    let mut crd_applied = false;
    for object in objects {
        let types = object.types.clone().unwrap_or_default();
        let gvk = GroupVersionKind::try_from(&types).map_err(|source| ApplyError::BadType {
            what: describe(object),
            source,
        })?;
        let (resource, capabilities) =
            discover(client, &gvk, crd_applied)
                .await
                .map_err(|source| ApplyError::Apply {
                    what: describe(object),
                    source,
                })?;
        let mut object = object.clone();
        let api: Api<DynamicObject> = match capabilities.scope {
            kube::discovery::Scope::Namespaced => {
                if let (Some(own), Some(requested)) = (object.namespace(), namespace)
                    && own != requested
                {
                    return Err(ApplyError::NamespaceMismatch {
                        what: describe(&object),
                        object: own,
                        requested: requested.to_string(),
                    });
                }
                let ns = object
                    .namespace()
                    .or_else(|| namespace.map(str::to_string))
                    .unwrap_or_else(|| client.default_namespace().to_string());
                object.metadata.namespace = Some(ns.clone());
                Api::namespaced_with(client.clone(), &ns, &resource)
            }
            kube::discovery::Scope::Cluster => {
                object.metadata.namespace = None;
                Api::all_with(client.clone(), &resource)
            }
        };
        let what = describe(&object);
        let replaced = if bindings == Bindings::Replace
            && gvk.group == "rbac.authorization.k8s.io"
            && gvk.kind.ends_with("RoleBinding")
        {
            remove_if_role_changed(&api, &object)
                .await
                .map_err(|source| ApplyError::Apply {
                    what: what.clone(),
                    source,
                })?
        } else {
            None
        };
        if let Err(source) = api
            .patch(&object.name_any(), &params, &Patch::Apply(&object))
            .await
        {
            if let Some(old) = replaced {
                // The rights the old binding granted come back; the error is the apply's.
                let _ = api.create(&kube::api::PostParams::default(), &old).await;
            }
            return Err(ApplyError::Apply { what, source });
        }
        if types.kind == "CustomResourceDefinition" {
            wait_established(client, &object.name_any()).await?;
            crd_applied = true;
        }
        progress(&what);
    }
    Ok(())
}

/// A binding's `roleRef` cannot change: one that names another role than `object` is deleted so
/// that the apply creates it anew, as `kubectl auth reconcile` does; returns the deleted binding
/// (to put back if the apply fails). The rights it granted are gone for the moment between.
async fn remove_if_role_changed(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
) -> Result<Option<DynamicObject>, kube::Error> {
    let name = object.name_any();
    let Some(mut existing) = api.get_opt(&name).await? else {
        return Ok(None);
    };
    if existing.data["roleRef"] == object.data["roleRef"] {
        return Ok(None);
    }
    match api.delete(&name, &kube::api::DeleteParams::default()).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        other => {
            other?;
        }
    }
    // As it was, to be created again: without what the API server assigned.
    existing.metadata = kube::api::ObjectMeta {
        name: existing.metadata.name,
        namespace: existing.metadata.namespace,
        labels: existing.metadata.labels,
        annotations: existing.metadata.annotations,
        ..Default::default()
    };
    Ok(Some(existing))
}

/// The resource of `gvk`. Right after a CRD is established its kind may not be discoverable yet:
/// when this run applied a CRD, a 404 is asked again for a few seconds.
async fn discover(
    client: &Client,
    gvk: &GroupVersionKind,
    crd_applied: bool,
) -> Result<(kube::api::ApiResource, kube::discovery::ApiCapabilities), kube::Error> {
    let started = Instant::now();
    loop {
        match kube::discovery::pinned_kind(client, gvk).await {
            Err(kube::Error::Api(status))
                if crd_applied && status.code == 404 && started.elapsed() < ESTABLISH_TIMEOUT =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

/// Creates `object` (a POST, failing if it exists) with strict field validation — kube's
/// `PostParams` cannot ask for it. Used where a copy must fail rather than lose a field the target's
/// schema does not declare (`capictl move` to a management cluster with older CRDs).
pub async fn create_strict(
    client: &Client,
    resource: &kube::api::ApiResource,
    namespace: Option<&str>,
    object: &DynamicObject,
) -> Result<DynamicObject, kube::Error> {
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let request = kube::core::Request::new(<DynamicObject as kube::Resource>::url_path(
        resource, namespace,
    ))
    .create(&kube::api::PostParams::default(), body)
    .map_err(kube::Error::BuildRequest)?;
    let (mut parts, body) = request.into_parts();
    let uri = parts.uri.to_string();
    let separator = if uri.contains('?') { '&' } else { '?' };
    parts.uri = format!("{uri}{separator}fieldValidation=Strict")
        .parse()
        .map_err(|e: http::uri::InvalidUri| {
            kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(e.into()))
        })?;
    client
        .request::<DynamicObject>(http::Request::from_parts(parts, body))
        .await
}

async fn wait_established(client: &Client, name: &str) -> Result<(), ApplyError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let started = Instant::now();
    loop {
        let crd = api.get(name).await.map_err(|source| ApplyError::Apply {
            what: format!("CustomResourceDefinition {name}"),
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
        if started.elapsed() > ESTABLISH_TIMEOUT {
            return Err(ApplyError::NotEstablished(name.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names_the_document_that_is_not_an_object() {
        let yaml = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\n---\nkind: Namespace\nmetadata:\n  name: b\n";
        match parse(yaml) {
            Err(ApplyError::Incomplete { index: 1, missing }) => {
                assert_eq!(missing, "apiVersion/kind")
            }
            other => panic!("unexpected {other:?}"),
        }
        let yaml = "apiVersion: v1\nkind: Namespace\nmetadata: {}\n";
        assert!(matches!(
            parse(yaml),
            Err(ApplyError::Incomplete {
                index: 0,
                missing: "metadata.name"
            })
        ));
    }

    #[test]
    fn every_apply_is_strict_and_forced() {
        let params = params();
        assert!(matches!(
            params.field_validation,
            Some(kube::api::ValidationDirective::Strict)
        ));
        assert!(params.force);
        assert_eq!(params.field_manager.as_deref(), Some(FIELD_MANAGER));
    }
}
