//! Whether a shared identity admits a namespace ([`AllowedNamespaces`]), reading the namespace's
//! labels from the API server only when a label selector needs them.

use capi_core::api::AllowedNamespaces;
use k8s_openapi::api::core::v1::Namespace;

/// Whether an identity with `allowed` (absent: no namespace) may be used from `namespace`. A
/// namespace that does not exist is admitted only by name. Needs `get` on `namespaces` when
/// `allowed` has a selector.
pub async fn admitted(
    client: &kube::Client,
    allowed: Option<&AllowedNamespaces>,
    namespace: &str,
) -> Result<bool, kube::Error> {
    let Some(allowed) = allowed else {
        return Ok(false);
    };
    if let Some(verdict) = allowed.admits_by_name(namespace) {
        return Ok(verdict);
    }
    let found = kube::Api::<Namespace>::all(client.clone())
        .get_opt(namespace)
        .await?;
    Ok(found.is_some_and(|ns| allowed.admits(namespace, ns.metadata.labels.as_ref())))
}
