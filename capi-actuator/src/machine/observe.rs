//! Reading what one reconcile needs: the owners and the infrastructure cluster from the
//! controller's own watches, the bootstrap data from the API server.

use std::sync::Arc;

use capi_core::api::{Cluster, Machine};
use capi_core::infra::{InfraCluster, InfraMachine};
use capi_core::{BootstrapData, labels};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};

use super::decide::{BootstrapLookup, Snapshot};
use crate::cached::Cached;

/// Where a reconcile reads the owner `Machine`, its `Cluster` and the provider's cluster object
/// from: the manager's watches, the API server for what they have not seen yet.
pub(crate) struct Owners<C: InfraCluster> {
    pub(crate) machines: Cached<Machine>,
    pub(crate) clusters: Cached<Cluster>,
    pub(crate) infra_clusters: Cached<C>,
}

/// The owner reference to a Cluster API `Machine`, if any.
pub(crate) fn machine_owner<M: InfraMachine>(infra: &M) -> Option<(String, String)> {
    infra
        .owner_references()
        .iter()
        .find(|r| r.kind == "Machine" && r.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|r| (r.name.clone(), r.uid.clone()))
}

/// Reads the owner `Machine`, its `Cluster` and the provider's cluster object (from `owners`) and
/// fetches (if an instance may still have to be created) the bootstrap data.
pub(crate) async fn observe<M: InfraMachine, C: InfraCluster>(
    client: &Client,
    owners: &Owners<C>,
    infra: Arc<M>,
    invalid_at_generation: Option<i64>,
) -> Result<Snapshot<M, C>, kube::Error> {
    let namespace = infra.namespace().unwrap_or_default();
    let owner = machine_owner(infra.as_ref());
    let machine = match &owner {
        Some((name, uid)) => owners
            .machines
            .get(&namespace, name)
            .await?
            // A Machine of the same name but another UID is not our owner.
            .filter(|m| m.metadata.uid.as_deref() == Some(uid.as_str())),
        None => None,
    };
    let cluster_name = machine
        .as_ref()
        .map(|m| m.spec.cluster_name.clone())
        .or_else(|| labels::cluster_name(infra.meta()).map(str::to_string));
    let cluster = match &cluster_name {
        Some(name) => owners.clusters.get(&namespace, name).await?,
        None => None,
    };
    let infra_cluster = match &cluster_name {
        Some(name) => {
            infra_cluster(&owners.infra_clusters, &namespace, name, cluster.as_deref()).await?
        }
        None => None,
    };
    let deleting = infra.meta().deletion_timestamp.is_some();
    let bootstrap = match machine
        .as_ref()
        .and_then(|m| m.spec.bootstrap.data_secret_name.clone())
    {
        _ if deleting || infra.provider_id().is_some() => BootstrapLookup::NotSet,
        None => BootstrapLookup::NotSet,
        Some(name) => match Api::<Secret>::namespaced(client.clone(), &namespace)
            .get_opt(&name)
            .await?
        {
            None => BootstrapLookup::SecretMissing(name),
            Some(secret) => match BootstrapData::from_secret(&secret) {
                Ok(data) => BootstrapLookup::Ready(data),
                Err(error) => BootstrapLookup::Invalid(error.to_string()),
            },
        },
    };
    Ok(Snapshot {
        infra,
        owner_uid: owner.map(|(_, uid)| uid),
        machine,
        cluster,
        infra_cluster,
        bootstrap,
        invalid_at_generation,
    })
}

/// The provider's cluster object of the `Cluster` named `cluster_name`: the one its
/// `infrastructureRef` names (when `cluster` is known and names a `C`), else the one labelled
/// `cluster.x-k8s.io/cluster-name=<cluster_name>`, else the one named like the cluster (during
/// deletion the `Cluster` may be gone).
pub(crate) async fn infra_cluster<C: InfraCluster>(
    infra_clusters: &Cached<C>,
    namespace: &str,
    cluster_name: &str,
    cluster: Option<&Cluster>,
) -> Result<Option<Arc<C>>, kube::Error> {
    let referenced = cluster
        .and_then(|c| c.spec.infrastructure_ref.as_ref())
        .filter(|r| r.kind == C::kind(&()) && r.api_group == C::group(&()));
    if let Some(reference) = referenced
        && let Some(found) = infra_clusters.get(namespace, &reference.name).await?
    {
        return Ok(Some(found));
    }
    let labelled = infra_clusters.store().state().into_iter().find(|c| {
        c.namespace().as_deref() == Some(namespace)
            && labels::cluster_name(c.meta()) == Some(cluster_name)
    });
    if labelled.is_some() {
        return Ok(labelled);
    }
    infra_clusters.get(namespace, cluster_name).await
}
