//! Reading what one reconcile needs: the owners and the infrastructure cluster from the
//! controller's own watches, the bootstrap data from the API server.

use std::sync::Arc;

use capi_core::api::{Cluster, Machine};
use capi_core::infra::{InfraCluster, InfraMachine};
use capi_core::labels;
use kube::{Client, ResourceExt};

use super::decide::{BootstrapLookup, Snapshot};
use capi_runtime::cache::lookup::Cached;

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
    let bootstrap = if deleting || infra.provider_id().is_some() {
        BootstrapLookup::NotSet
    } else {
        let name = machine
            .as_ref()
            .and_then(|m| m.spec.bootstrap.data_secret_name.clone());
        crate::bootstrap_data::lookup(client, &namespace, name).await?
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
/// `infrastructureRef` names (when `cluster` is known), else the one labelled
/// `cluster.x-k8s.io/cluster-name=<cluster_name>` (the first by name, should there be two), else
/// the one named like the cluster (during deletion the `Cluster` may be gone). None when the
/// `Cluster` names another kind: no object of this kind is its infrastructure. In the steady
/// state it is read from the store alone.
pub(crate) async fn infra_cluster<C: InfraCluster>(
    infra_clusters: &Cached<C>,
    namespace: &str,
    cluster_name: &str,
    cluster: Option<&Cluster>,
) -> Result<Option<Arc<C>>, kube::Error> {
    if let Some(reference) = cluster.and_then(|c| c.spec.infrastructure_ref.as_ref()) {
        if reference.kind != C::kind(&()) || reference.api_group != C::group(&()) {
            return Ok(None);
        }
        if let Some(found) = infra_clusters.get(namespace, &reference.name).await? {
            return Ok(Some(found));
        }
    }
    let labelled = infra_clusters
        .store()
        .state()
        .into_iter()
        .filter(|c| {
            c.namespace().as_deref() == Some(namespace)
                && labels::cluster_name(c.meta()) == Some(cluster_name)
        })
        .min_by(|a, b| a.name_any().cmp(&b.name_any()));
    if labelled.is_some() {
        return Ok(labelled);
    }
    infra_clusters.get(namespace, cluster_name).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    use crate::cluster::tests::{TestCluster, TestClusterSpec};

    /// A cache over a store holding `objects`, whose client reaches nothing: a read that misses
    /// the store fails.
    fn cached(objects: Vec<TestCluster>) -> Cached<TestCluster> {
        let config = kube::Config::new(
            "http://127.0.0.1:1"
                .parse()
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let client = Client::try_from(config).unwrap_or_else(|e| panic!("{e}"));
        let (store, mut writer) = kube::runtime::reflector::store::<TestCluster>();
        for object in objects {
            writer.apply_watcher_event(&Event::Apply(object));
        }
        Cached::new(store, client)
    }

    fn object(namespace: &str, name: &str, cluster_label: Option<&str>) -> TestCluster {
        let mut object = TestCluster::new(name, TestClusterSpec::default());
        object.metadata.namespace = Some(namespace.into());
        object.metadata.labels = cluster_label.map(|c| {
            std::collections::BTreeMap::from([(labels::CLUSTER_NAME.to_string(), c.to_string())])
        });
        object
    }

    fn cluster_naming(kind: &str, name: &str) -> Cluster {
        let mut cluster = Cluster::default();
        cluster.spec.infrastructure_ref = Some(
            serde_json::from_value(serde_json::json!({
                "apiGroup": "infrastructure.test.io", "kind": kind, "name": name
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        );
        cluster
    }

    fn name(found: Option<Arc<TestCluster>>) -> Option<String> {
        found.and_then(|c| c.metadata.name.clone())
    }

    #[tokio::test]
    async fn the_referenced_object_comes_from_the_store_without_a_request() {
        let store = cached(vec![object("ns", "infra-a", None)]);
        let cluster = cluster_naming("TestCluster", "infra-a");
        let found = infra_cluster(&store, "ns", "demo", Some(&cluster)).await;
        assert_eq!(
            name(found.unwrap_or_else(|e| panic!("{e}"))).as_deref(),
            Some("infra-a")
        );
    }

    #[tokio::test]
    async fn without_a_reference_the_first_labelled_object_of_the_namespace_is_taken() {
        let store = cached(vec![
            object("other", "a-elsewhere", Some("demo")),
            object("ns", "c-labelled", Some("demo")),
            object("ns", "b-labelled", Some("demo")),
            object("ns", "a-unrelated", Some("another")),
        ]);
        let found = infra_cluster(&store, "ns", "demo", None).await;
        assert_eq!(
            name(found.unwrap_or_else(|e| panic!("{e}"))).as_deref(),
            Some("b-labelled")
        );
    }

    #[tokio::test]
    async fn a_cluster_naming_another_kind_has_none_of_this_kind_and_nothing_is_asked() {
        let store = cached(vec![object("ns", "demo", Some("demo"))]);
        let cluster = cluster_naming("DockerCluster", "demo");
        let found = infra_cluster(&store, "ns", "demo", Some(&cluster)).await;
        assert!(found.unwrap_or_else(|e| panic!("{e}")).is_none());
    }
}
