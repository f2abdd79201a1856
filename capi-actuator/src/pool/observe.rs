//! Reading what one pool reconcile needs: the owners, the infrastructure cluster and the pool's
//! machines from the controller's own watches, the bootstrap data from the API server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{Cluster, Machine, MachinePool};
use capi_core::infra::{InfraCluster, InfraMachinePool};
use capi_core::labels;
use kube::{Client, Resource, ResourceExt};

use super::decide::Snapshot;
use crate::bootstrap_data::{self, BootstrapLookup};
use capi_runtime::cache::lookup::Cached;

/// Where a pool reconcile reads its owners and its machines from: the manager's watches, the API
/// server for owners they have not seen yet.
pub(crate) struct Owners<P: InfraMachinePool, C: InfraCluster> {
    pub(crate) machine_pools: Cached<MachinePool>,
    pub(crate) clusters: Cached<Cluster>,
    pub(crate) infra_clusters: Cached<C>,
    pub(crate) machines: Cached<Machine>,
    pub(crate) members: Cached<P::Machine>,
}

impl<P: InfraMachinePool, C: InfraCluster> Owners<P, C> {
    /// Whether the stores a pass counts from — the pool's machines and the `Machine`s — hold their
    /// first lists, waiting for them at most `limit`. Before, a pool would look as if it had no
    /// machines (and make a second machine per instance); a pass that finds them missing
    /// requeues instead of holding its worker for as long as a list takes.
    pub(crate) async fn listed_within(&self, limit: Duration) -> bool {
        let lists =
            futures::future::join(self.members.until_listed(), self.machines.until_listed());
        tokio::time::timeout(limit, lists).await.is_ok()
    }
}

/// The owner reference to a Cluster API `MachinePool`, if any: its name and UID.
pub(crate) fn machine_pool_owner<P: InfraMachinePool>(infra: &P) -> Option<(String, String)> {
    infra
        .owner_references()
        .iter()
        .find(|r| r.kind == "MachinePool" && r.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|r| (r.name.clone(), r.uid.clone()))
}

/// Reads the owner `MachinePool`, its `Cluster`, the provider's cluster object, the pool's
/// machines and their `Machine`s, and (unless the pool is being deleted) the bootstrap data.
pub(crate) async fn observe<P: InfraMachinePool, C: InfraCluster>(
    client: &Client,
    owners: &Owners<P, C>,
    infra: Arc<P>,
    invalid_at_generation: Option<i64>,
) -> Result<Snapshot<P, C>, kube::Error> {
    let namespace = infra.namespace().unwrap_or_default();
    let owner = machine_pool_owner(infra.as_ref());
    let machine_pool = match &owner {
        Some((name, uid)) => owners
            .machine_pools
            .get(&namespace, name)
            .await?
            // A MachinePool of the same name but another UID is not our owner.
            .filter(|p| p.metadata.uid.as_deref() == Some(uid.as_str())),
        None => None,
    };
    let cluster_name = machine_pool
        .as_ref()
        .map(|p| p.spec.cluster_name.clone())
        .or_else(|| labels::cluster_name(infra.meta()).map(str::to_string));
    let cluster = match &cluster_name {
        Some(name) => owners.clusters.get(&namespace, name).await?,
        None => None,
    };
    let infra_cluster = match &cluster_name {
        Some(name) => {
            crate::machine::infra_cluster(
                &owners.infra_clusters,
                &namespace,
                name,
                cluster.as_deref(),
            )
            .await?
        }
        None => None,
    };
    let deleting = infra.meta().deletion_timestamp.is_some();
    let now = jiff::Timestamp::now();
    let members = if deleting {
        // Before the pool's finalizer goes, the API server's word: a machine made by the pass
        // before may not be in the watch yet.
        listed_members(client, infra.as_ref()).await?
    } else {
        members_of(&owners.members, infra.as_ref())
    };
    let machines = machines_of::<P>(&owners.machines, &namespace, &members);
    let stray_machines = machine_pool
        .as_deref()
        .map(|pool| strays::<P>(&owners.machines, pool, &members, now))
        .unwrap_or_default();
    let bootstrap_secret = machine_pool
        .as_ref()
        .and_then(|p| p.spec.template.spec.bootstrap.data_secret_name.clone());
    let bootstrap = if deleting {
        BootstrapLookup::NotSet
    } else {
        bootstrap_data::lookup(client, &namespace, bootstrap_secret).await?
    };
    Ok(Snapshot {
        infra,
        owner_uid: owner.map(|(_, uid)| uid),
        machine_pool,
        cluster,
        infra_cluster,
        bootstrap,
        members,
        machines,
        stray_machines,
        now,
        invalid_at_generation,
    })
}

/// The `Machine`s the `MachinePool` controller made for machines of the pool that are gone
/// (it makes one for a machine being deleted too): those it owns, labelled with the pool's name
/// and naming a machine of the pool's kind that is not among `members`, not being deleted, and
/// older than [`MISSING_GRACE`](super::members::MISSING_GRACE) — the watch of machines may not
/// show a new one yet.
fn strays<P: InfraMachinePool>(
    machines: &Cached<Machine>,
    pool: &MachinePool,
    members: &[Arc<P::Machine>],
    now: jiff::Timestamp,
) -> Vec<String> {
    let grace = jiff::SignedDuration::try_from(super::members::MISSING_GRACE).unwrap_or_default();
    let Some(uid) = pool.metadata.uid.as_deref() else {
        return Vec::new();
    };
    let label = labels::label_value(&pool.name_any()).into_owned();
    let kind = <P::Machine as Resource>::kind(&());
    let names: std::collections::BTreeSet<String> = members.iter().map(|m| m.name_any()).collect();
    let mut strays: Vec<String> = machines
        .store()
        .state()
        .into_iter()
        .filter(|m| {
            m.namespace() == pool.namespace()
                && m.meta().deletion_timestamp.is_none()
                && m.labels().get(labels::MACHINE_POOL_NAME) == Some(&label)
                && m.owner_references().iter().any(|r| r.uid == uid)
                && m.spec.infrastructure_ref.kind == kind
                && !names.contains(&m.spec.infrastructure_ref.name)
                && m.meta()
                    .creation_timestamp
                    .as_ref()
                    .is_some_and(|t| now.duration_since(t.0) >= grace)
        })
        .map(|m| m.name_any())
        .collect();
    strays.sort();
    strays
}

/// The machines of the pool `infra`: objects of its machine kind in its namespace that it owns
/// (an owner reference with its UID). The labels alone would let any object of the namespace
/// pass for one.
pub(crate) fn members_of<P: InfraMachinePool>(
    members: &Cached<P::Machine>,
    infra: &P,
) -> Vec<Arc<P::Machine>> {
    let namespace = infra.namespace();
    let Some(uid) = infra.uid() else {
        return Vec::new();
    };
    let mut found: Vec<Arc<P::Machine>> = members
        .store()
        .state()
        .into_iter()
        .filter(|m| {
            m.namespace() == namespace
                && m.owner_references()
                    .iter()
                    .any(|r| r.uid == uid && r.kind == P::kind(&()))
        })
        .collect();
    found.sort_by_key(|m| m.name_any());
    found
}

/// The machines of the pool `infra` as the API server lists them (those of its namespace it
/// owns).
async fn listed_members<P: InfraMachinePool>(
    client: &Client,
    infra: &P,
) -> Result<Vec<Arc<P::Machine>>, kube::Error> {
    let Some(uid) = infra.uid() else {
        return Ok(Vec::new());
    };
    let api: kube::Api<P::Machine> =
        kube::Api::namespaced(client.clone(), &infra.namespace().unwrap_or_default());
    let mut found: Vec<Arc<P::Machine>> = api
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|m| {
            m.owner_references()
                .iter()
                .any(|r| r.uid == uid && r.kind == P::kind(&()))
        })
        .map(Arc::new)
        .collect();
    found.sort_by_key(|m| m.name_any());
    Ok(found)
}

/// The `Machine` of each of `members` (by the member's name): the one whose
/// `spec.infrastructureRef` names it.
fn machines_of<P: InfraMachinePool>(
    machines: &Cached<Machine>,
    namespace: &str,
    members: &[Arc<P::Machine>],
) -> BTreeMap<String, Arc<Machine>> {
    if members.is_empty() {
        return BTreeMap::new();
    }
    let kind = <P::Machine as Resource>::kind(&());
    let group = <P::Machine as Resource>::group(&());
    let names: std::collections::BTreeSet<String> = members.iter().map(|m| m.name_any()).collect();
    machines
        .store()
        .state()
        .into_iter()
        .filter(|m| {
            let reference = &m.spec.infrastructure_ref;
            m.namespace().as_deref() == Some(namespace)
                && reference.kind == kind
                && reference.api_group == group
                && names.contains(&reference.name)
        })
        .map(|m| (m.spec.infrastructure_ref.name.clone(), m))
        .collect()
}
