//! Reading what one cluster reconcile needs from the API server.

use std::sync::Arc;

use capi_core::api::{Cluster, Machine};
use capi_core::infra::InfraCluster;
use capi_core::labels;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::decide::Snapshot;
use capi_runtime::cache::lookup::Cached;

/// Reads the owner `Cluster` (from `clusters`) and, during deletion, counts the machines still
/// there (from the API server: a deletion must not be decided on a cache).
pub(crate) async fn observe<C: InfraCluster>(
    client: &Client,
    clusters: &Cached<Cluster>,
    infra: Arc<C>,
    invalid_at_generation: Option<i64>,
) -> Result<Snapshot<C>, kube::Error> {
    let namespace = infra.namespace().unwrap_or_default();
    let owner = infra
        .owner_references()
        .iter()
        .find(|r| r.kind == "Cluster" && r.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|r| (r.name.clone(), r.uid.clone()));
    let cluster = match &owner {
        Some((name, uid)) => clusters
            .get(&namespace, name)
            .await?
            .filter(|c| c.metadata.uid.as_deref() == Some(uid.as_str())),
        None => None,
    };
    let cluster_name = owner
        .as_ref()
        .map(|(name, _)| name.clone())
        .or_else(|| labels::cluster_name(infra.meta()).map(str::to_string));
    let remaining_machines = match (&cluster_name, infra.meta().deletion_timestamp.is_some()) {
        (Some(name), true) => {
            let selector = format!("{}={name}", labels::CLUSTER_NAME);
            Api::<Machine>::namespaced(client.clone(), &namespace)
                .list_metadata(&ListParams::default().labels(&selector))
                .await?
                .items
                .len()
        }
        _ => 0,
    };
    Ok(Snapshot {
        infra,
        owner_uid: owner.map(|(_, uid)| uid),
        cluster,
        remaining_machines,
        invalid_at_generation,
    })
}
