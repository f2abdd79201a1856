//! Deleting a cluster, a pass at a time: what it is made of first, then what it owns.

use std::sync::{Arc, OnceLock};

use capi_core::api::{
    Cluster, ClusterPhase, Machine, MachineDeployment, MachineHealthCheck, MachinePool, MachineSet,
};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::{cluster_objects, labels};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::ClusterController;
use crate::references::Confirm;
use crate::{ownership, synced};
use capi_runtime::cache::informer::Informer;
use capi_runtime::pace;
use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::reasons;
use capi_runtime::write;
use capi_runtime::{Context, ReconcileError};

/// One pass of deleting a cluster: deployments, sets, pools, health checks and machines first; then the
/// control plane and infrastructure objects; then the Secrets and ConfigMaps the cluster owns;
/// then the finalizer.
pub(super) async fn delete(
    cluster: &Cluster,
    namespace: &str,
    context: &Context<ClusterController>,
) -> Result<Next, ReconcileError> {
    let deps = &context.state;
    let client = &context.client;
    let name = cluster.name_any();
    let api: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    let mut status = cluster.status.clone().unwrap_or_default();
    status.phase = Some(ClusterPhase::Deleting);

    let mut left = Vec::new();
    let of_cluster = Seen {
        client,
        namespace,
        cluster: &name,
    };
    let deployments = of_cluster
        .delete_all(&deps.deployments, |d: &MachineDeployment| {
            &d.spec.cluster_name
        })
        .await?;
    let sets = of_cluster
        .delete_all(&deps.sets, |s: &MachineSet| &s.spec.cluster_name)
        .await?;
    let pools = of_cluster
        .delete_all(&deps.pools, |p: &MachinePool| &p.spec.cluster_name)
        .await?;
    of_cluster
        .delete_all(&deps.health_checks, |h: &MachineHealthCheck| {
            &h.spec.cluster_name
        })
        .await?;
    // Machines of sets and pools go with their sets and pools (a pool's Machine deleted before
    // its infrastructure pool would be replaced); the others now — except a control plane
    // provider's, which it deletes itself once it is deleted (after the workers, as upstream).
    let ours = |m: &Machine| cluster.spec.control_plane_ref.is_none() || !m.is_control_plane();
    let machines = if deployments + sets + pools == 0 {
        of_cluster
            .delete_all_where(&deps.machines, |m: &Machine| &m.spec.cluster_name, ours)
            .await?
    } else {
        of_cluster
            .objects(&deps.machines, |m: &Machine| &m.spec.cluster_name)
            .await?
            .iter()
            .filter(|m| ours(m))
            .count()
    };
    for (count, what) in [
        (deployments, "MachineDeployments"),
        (sets, "MachineSets"),
        (pools, "MachinePools"),
        (machines, "Machines"),
    ] {
        if count > 0 {
            left.push(format!("{count} {what}"));
        }
    }
    // Then the control plane, and only once it is gone the infrastructure (its load balancer
    // fronts the control plane to the end).
    for reference in [
        &cluster.spec.control_plane_ref,
        &cluster.spec.infrastructure_ref,
    ]
    .into_iter()
    .flatten()
    {
        if !left.is_empty() {
            break;
        }
        if deps
            .references
            .delete(reference, namespace, Confirm::Absence)
            .await?
        {
            left.push(format!("{} {:?}", reference.kind, reference.name));
        }
    }
    if !left.is_empty() {
        let message = format!("waiting for {} to be deleted", left.join(", "));
        condition::set(
            &mut status.conditions,
            DesiredCondition::new(
                condition::DELETING,
                ConditionStatus::True,
                reasons::DELETING,
            )
            .message(message)
            .observed_generation(cluster.metadata.generation),
        );
        // Paced: the count of what is left changes with every machine that goes.
        return Ok(pace::patch_status(
            &deps.pacer,
            &api,
            cluster,
            cluster.status.as_ref(),
            &status,
            Next::Requeue(deps.settings.poll),
        )
        .await?);
    }
    // The caches said nothing is left: make sure, from the API server, before letting go.
    let remaining =
        list_of_cluster::<MachineDeployment>(client, namespace, &name, |d| &d.spec.cluster_name)
            .await?
            .len()
            + list_of_cluster::<MachineSet>(client, namespace, &name, |s| &s.spec.cluster_name)
                .await?
                .len()
            + list_of_cluster::<MachinePool>(client, namespace, &name, |p| &p.spec.cluster_name)
                .await?
                .len()
            + list_of_cluster::<MachineHealthCheck>(client, namespace, &name, |h| {
                &h.spec.cluster_name
            })
            .await?
            .len()
            + list_of_cluster::<Machine>(client, namespace, &name, |m| &m.spec.cluster_name)
                .await?
                .len();
    if remaining > 0 {
        return Ok(Next::Requeue(deps.settings.poll));
    }
    // What the cluster owns in the management cluster (PKI, kubeconfig, locks): deleted here, so
    // that nothing is left even without a garbage collector.
    let uid = cluster.uid().unwrap_or_default();
    delete_owned::<Secret>(client, namespace, &name, &cluster_objects::SECRETS, &uid).await?;
    delete_owned::<ConfigMap>(
        client,
        namespace,
        &name,
        &cluster_objects::CONFIG_MAPS,
        &uid,
    )
    .await?;
    deps.workloads.forget(namespace, &name);
    write::change_finalizer(
        &api,
        cluster,
        FinalizerChange::Remove,
        labels::CLUSTER_FINALIZER,
    )
    .await?;
    Ok(Next::AwaitChange)
}

async fn list_of_cluster<K>(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    cluster_of: impl Fn(&K) -> &String,
) -> Result<Vec<K>, kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|o| cluster_of(o) == cluster)
        .collect())
}

/// Where a deletion pass reads a cluster's objects: the controller's caches once they hold a
/// full list, the API server (a list of the namespace) before that.
struct Seen<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
    cluster: &'a str,
}

impl Seen<'_> {
    /// The objects of the cluster.
    async fn objects<K>(
        &self,
        cache: &OnceLock<Informer<K>>,
        cluster_of: impl Fn(&K) -> &String,
    ) -> Result<Vec<Arc<K>>, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync,
    {
        match synced(cache) {
            Some(store) => Ok(store
                .state()
                .into_iter()
                .filter(|o| {
                    o.namespace().as_deref() == Some(self.namespace)
                        && cluster_of(o) == self.cluster
                })
                .collect()),
            None => Ok(
                list_of_cluster(self.client, self.namespace, self.cluster, cluster_of)
                    .await?
                    .into_iter()
                    .map(Arc::new)
                    .collect(),
            ),
        }
    }

    /// Requests deletion of every object of the cluster; returns how many are left.
    async fn delete_all<K>(
        &self,
        cache: &OnceLock<Informer<K>>,
        cluster_of: impl Fn(&K) -> &String,
    ) -> Result<usize, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync,
    {
        self.delete_all_where(cache, cluster_of, |_| true).await
    }

    /// [`Seen::delete_all`] of the objects `which` selects.
    async fn delete_all_where<K>(
        &self,
        cache: &OnceLock<Informer<K>>,
        cluster_of: impl Fn(&K) -> &String,
        which: impl Fn(&K) -> bool,
    ) -> Result<usize, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace);
        let objects: Vec<Arc<K>> = self
            .objects(cache, cluster_of)
            .await?
            .into_iter()
            .filter(|o| which(o))
            .collect();
        for object in objects
            .iter()
            .filter(|o| o.meta().deletion_timestamp.is_none())
        {
            write::delete(&api, &object.name_any()).await?;
        }
        Ok(objects.len())
    }
}

/// Deletes the objects of kind `K` named `<cluster>-<purpose>` for `purposes` in `namespace` that
/// the object with this UID owns (see [`cluster_objects`]): by name, so that no right to list a
/// namespace's Secrets is needed, and only when owned, so that a tenant's own object of that name
/// stays.
async fn delete_owned<K>(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    purposes: &[&str],
    owner_uid: &str,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    for purpose in purposes {
        let name = cluster_objects::name(cluster, purpose);
        if let Some(object) = api.get_metadata_opt(&name).await?
            && ownership::is_owned_by(&object.metadata, owner_uid)
        {
            write::delete(&api, &name).await?;
        }
    }
    Ok(())
}
