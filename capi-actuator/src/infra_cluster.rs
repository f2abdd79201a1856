//! Finding the infrastructure cluster (`AWSCluster`, `AzureCluster`, ...) of a machine or a
//! template: the one the `Cluster`'s `infrastructureRef` names, else the one labelled with the
//! cluster's name, else the one named like the cluster (during deletion the `Cluster` may be
//! gone). One lookup for every provider.

use std::fmt::Debug;

use capi_core::ActuatorError;
use capi_core::api::Cluster;
use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::de::DeserializeOwned;

/// The name of the `C` a `Cluster`'s `infrastructureRef` names (when it names a `C`).
pub fn named<C: Resource<DynamicType = ()>>(cluster: &Cluster) -> Option<String> {
    let kind = C::kind(&());
    cluster
        .spec
        .infrastructure_ref
        .as_ref()
        .filter(|r| r.kind == kind)
        .map(|r| r.name.clone())
}

/// The `C` of the `Cluster` named `cluster` in `namespace`: `named` (what its
/// `infrastructureRef` names, when the `Cluster` is known), else the one labelled
/// `cluster.x-k8s.io/cluster-name=<cluster>`, else the one named `cluster`. Not finding it is
/// transient (`WaitingFor<Kind>`): it may not be created yet.
pub async fn find<C>(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    named: Option<String>,
) -> Result<C, ActuatorError>
where
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + DeserializeOwned
        + Clone
        + Debug,
{
    let kind = C::kind(&()).to_string();
    let api: kube::Api<C> = kube::Api::namespaced(client.clone(), namespace);
    let unreadable = |e| ActuatorError::transient(format!("{kind}Unreadable"), e);
    if let Some(name) = named
        && let Some(found) = api.get_opt(&name).await.map_err(unreadable)?
    {
        return Ok(found);
    }
    let labelled = api
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("{}={cluster}", capi_core::labels::CLUSTER_NAME)),
        )
        .await
        .map_err(unreadable)?;
    if let Some(found) = labelled.items.into_iter().next() {
        return Ok(found);
    }
    api.get_opt(cluster)
        .await
        .map_err(unreadable)?
        .ok_or_else(|| {
            ActuatorError::transient_message(
                format!("WaitingFor{kind}"),
                format!("no {kind} of cluster {namespace}/{cluster} yet"),
            )
        })
}
