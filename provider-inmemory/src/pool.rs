//! The in-memory provider's pool actuator: `InMemoryMachinePool`s as scale sets of the simulated
//! cloud ([`ScaleSets`]), the way a real provider drives an Auto Scaling group or a virtual
//! machine scale set.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::api::{MachineAddress, MachineAddressType};
use capi_core::{
    ActuatorError, BootstrapData, Found, InstanceState, ModelRevision, PoolActuator, PoolInstance,
    PoolScope, ProviderStatus, ScaleSetReport,
};
use capi_provider::support::call_retry::CallRetry;
use kube::ResourceExt;

use crate::actuator::{PROVIDER_ID_PREFIX, cloud_error, provider_id};
use crate::api::{InMemoryCluster, InMemoryMachinePool, InMemoryMachinePoolStatus};
use crate::cloud::lock;
use crate::cloud::{
    CloudError, InstanceStatus, ScaleSet, ScaleSetModel, ScaleSetRequest, ScaleSets, cluster_key,
};

/// What every pool call of this provider is handed.
type Scope = PoolScope<InMemoryMachinePool, InMemoryCluster>;

/// The prefix of a scale set's provider ID.
const SCALE_SET_PREFIX: &str = "scalesets/";

/// Drives the simulated cloud's scale sets for `InMemoryMachinePool`s.
///
/// A scale set is found by the pool's recorded provider ID, else by the pool's idempotency key
/// (its tag), and taken only if it was made for the pool's cluster. Creates carry the key as
/// client token, so that a create whose answer was lost, or one the cloud's lists do not show
/// yet, is answered with the scale set already made. Every call is retried through transient
/// faults ([`CallRetry`]).
#[derive(Clone)]
pub struct InMemoryPoolActuator {
    scale_sets: Arc<dyn ScaleSets>,
    retry: CallRetry,
    poll: Duration,
    /// How long lists may lag behind a create.
    list_lag: Duration,
    /// Per idempotency key of a pool being deleted that never recorded its scale set: when its
    /// deletion first found nothing.
    first_misses: Arc<std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>>,
}

impl InMemoryPoolActuator {
    /// An actuator over the cloud's scale sets. `poll` is how often an ongoing deletion is
    /// checked.
    pub fn new(scale_sets: Arc<dyn ScaleSets>, poll: Duration) -> Self {
        Self {
            scale_sets,
            retry: CallRetry::default(),
            poll,
            list_lag: crate::cloud::MAX_LIST_LAG,
            first_misses: Arc::default(),
        }
    }

    /// Trusts the cloud's lists to show a new scale set within `lag` (default
    /// [`MAX_LIST_LAG`](crate::cloud::MAX_LIST_LAG)).
    pub fn with_list_lag(mut self, lag: Duration) -> Self {
        self.list_lag = lag;
        self
    }

    /// Retries cloud calls with `retry` instead ([`CallRetry::none`]: every call once).
    pub fn with_call_retry(mut self, retry: CallRetry) -> Self {
        self.retry = retry;
        self
    }

    async fn retried<T, F, Fut>(&self, call: F) -> Result<T, ActuatorError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, CloudError>>,
    {
        self.retry
            .run(CloudError::is_transient, call)
            .await
            .map_err(cloud_error)
    }

    /// The pool's scale set, if the cloud has one made for the pool's cluster.
    async fn find(&self, scope: &Scope) -> Result<Option<ScaleSet>, ActuatorError> {
        let cluster = cluster_of(scope);
        if let Some(id) = scope
            .infra_pool
            .spec
            .provider_id
            .as_deref()
            .and_then(scale_set_id)
        {
            let found = self.retried(|| self.scale_sets.get_scale_set(id)).await?;
            if let Some(set) = found {
                return ensure_ours(&cluster, set).map(Some);
            }
        }
        let key = scope.idempotency_key.as_str();
        let mut found = self
            .retried(|| self.scale_sets.find_scale_sets(key))
            .await?;
        found.retain(|set| set.cluster == cluster);
        found.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(found.into_iter().next())
    }
}

/// The cluster key of the pool's cluster: `<namespace>.<cluster>`, the cluster named by the
/// `MachinePool`, else by the pool's `cluster.x-k8s.io/cluster-name` label (a deleted
/// `MachinePool`), else the `Cluster`'s name.
fn cluster_of(scope: &Scope) -> String {
    let namespace = scope.infra_pool.namespace().unwrap_or_default();
    let name = Some(scope.machine_pool.spec.cluster_name.clone())
        .filter(|n| !n.is_empty())
        .or_else(|| capi_core::labels::cluster_name(&scope.infra_pool.metadata).map(str::to_string))
        .unwrap_or_else(|| scope.cluster.name_any());
    cluster_key(&namespace, &name)
}

/// `set`, if it was made for `cluster`: a provider ID written by hand cannot reach another
/// cluster's scale set.
fn ensure_ours(cluster: &str, set: ScaleSet) -> Result<ScaleSet, ActuatorError> {
    if set.cluster == cluster {
        return Ok(set);
    }
    Err(ActuatorError::invalid_configuration(
        "ScaleSetNotOwned",
        format!(
            "scale set {} belongs to another cluster; clear spec.providerID of the pool to find \
             its own",
            set.id
        ),
    ))
}

/// The scale set ID in a pool's provider ID.
fn scale_set_id(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .and_then(|rest| rest.strip_prefix(SCALE_SET_PREFIX))
        .filter(|id| !id.is_empty())
}

/// The model the scope asks for.
fn model_of(scope: &Scope, bootstrap: &BootstrapData) -> ScaleSetModel {
    ScaleSetModel {
        flavor: scope.infra_pool.spec.flavor.clone(),
        revision: scope.revision.to_string(),
        user_data_len: bootstrap.expose().len(),
    }
}

/// The scale set as the loop records it.
fn report(set: &ScaleSet) -> Result<ScaleSetReport, ActuatorError> {
    let own = InMemoryMachinePoolStatus {
        scale_set_id: Some(set.id.clone()),
        model_revision: Some(set.model.revision.clone()),
        ..Default::default()
    };
    let status = ProviderStatus::from_typed(&own)
        .map_err(|e| ActuatorError::transient("ProviderStatusInvalid", e))?;
    let mut report = ScaleSetReport::new(
        format!("{PROVIDER_ID_PREFIX}{SCALE_SET_PREFIX}{}", set.id),
        set.capacity,
    )
    .with_provider_status(status);
    for instance in &set.instances {
        let state = match instance.status {
            InstanceStatus::Building => InstanceState::Provisioning,
            InstanceStatus::Active => InstanceState::Running,
            // Leaving the scale set: reported, as terminating, until it is gone.
            InstanceStatus::Deleting => InstanceState::Provisioning,
            InstanceStatus::Error => InstanceState::Failed {
                reason: "InstanceError".into(),
                message: "the cloud failed to build the instance".into(),
            },
        };
        let mut reported = PoolInstance::new(provider_id(&instance.id), &instance.id, state)
            .with_addresses(vec![
                MachineAddress {
                    type_: MachineAddressType::InternalIp,
                    address: instance.address.clone(),
                },
                MachineAddress {
                    type_: MachineAddressType::Hostname,
                    address: instance.id.clone(),
                },
            ]);
        if let Some(revision) = &instance.revision {
            reported = reported.from_revision(ModelRevision::new(revision.clone()));
        }
        if let Some(zone) = &instance.zone {
            reported = reported.in_failure_domain(zone.clone());
        }
        if instance.status == InstanceStatus::Deleting {
            reported = reported.terminating();
        }
        report = report.with_instance(reported);
    }
    Ok(report)
}

#[async_trait]
impl PoolActuator<InMemoryMachinePool, InMemoryCluster> for InMemoryPoolActuator {
    type ScaleSet = ScaleSet;

    async fn exists(
        &self,
        scope: &Scope,
    ) -> Result<Option<Found<ScaleSet, ScaleSetReport>>, ActuatorError> {
        match self.find(scope).await? {
            Some(set) => Ok(Some(Found::with(report(&set)?, set))),
            None => Ok(None),
        }
    }

    async fn create(
        &self,
        scope: &Scope,
        bootstrap: &BootstrapData,
    ) -> Result<ScaleSetReport, ActuatorError> {
        let request = ScaleSetRequest {
            tag: scope.idempotency_key.to_string(),
            cluster: cluster_of(scope),
            zones: scope.infra_pool.spec.failure_domains.clone(),
            capacity: scope.size.capacity.unwrap_or(0),
            model: model_of(scope, bootstrap),
            // The cloud answers a retried create with the scale set the first one made.
            client_token: Some(scope.idempotency_key.to_string()),
        };
        let set = self
            .retried(|| self.scale_sets.create_scale_set(request.clone()))
            .await?;
        report(&ensure_ours(&request.cluster, set)?)
    }

    async fn update(
        &self,
        scope: &Scope,
        found: Found<ScaleSet, ScaleSetReport>,
        bootstrap: Option<BootstrapData>,
    ) -> Result<ScaleSetReport, ActuatorError> {
        let set = found.instance;
        let removals: Vec<String> = scope
            .size
            .remove
            .iter()
            .filter_map(|id| id.strip_prefix(PROVIDER_ID_PREFIX))
            .filter(|id| set.instances.iter().any(|i| i.id == *id))
            .map(str::to_string)
            .collect();
        // The model first: whatever the removals and the capacity launch is of the new one.
        if let Some(bootstrap) = &bootstrap {
            let model = model_of(scope, bootstrap);
            if model != set.model {
                self.retried(|| self.scale_sets.set_scale_set_model(&set.id, model.clone()))
                    .await?;
            }
        }
        if !removals.is_empty() {
            self.retried(|| {
                self.scale_sets
                    .remove_scale_set_instances(&set.id, &removals)
            })
            .await?;
        }
        let removed = u32::try_from(removals.len()).unwrap_or(u32::MAX);
        let held = set.capacity.saturating_sub(removed);
        if let Some(capacity) = scope.size.capacity.filter(|c| *c != held) {
            self.retried(|| self.scale_sets.set_scale_set_capacity(&set.id, capacity))
                .await?;
        }
        match self
            .retried(|| self.scale_sets.get_scale_set(&set.id))
            .await?
        {
            Some(now) => report(&now),
            None => Err(ActuatorError::requeue_after(
                self.poll,
                "ScaleSetNotFound",
                format!("scale set {} vanished while it was updated", set.id),
            )),
        }
    }

    async fn delete(&self, scope: &Scope) -> Result<(), ActuatorError> {
        let key = scope.idempotency_key.to_string();
        let Some(set) = self.find(scope).await? else {
            // Nothing listed under the key of a pool that never recorded its scale set: one made
            // by a create whose answer was lost may not be listed yet — the lag is waited out.
            if scope.infra_pool.spec.provider_id.is_some() || self.list_lag.is_zero() {
                return Ok(());
            }
            let now = tokio::time::Instant::now();
            let first = *lock(&self.first_misses).entry(key.clone()).or_insert(now);
            if now.duration_since(first) >= self.list_lag {
                lock(&self.first_misses).remove(&key);
                return Ok(());
            }
            return Err(ActuatorError::requeue_after(
                self.list_lag,
                "WaitingForListLag",
                "no scale set is listed yet; the cloud's lists may lag behind a create",
            ));
        };
        lock(&self.first_misses).remove(&key);
        if !set.deleting {
            self.retried(|| self.scale_sets.delete_scale_set(&set.id))
                .await?;
        }
        match self
            .retried(|| self.scale_sets.get_scale_set(&set.id))
            .await?
        {
            None => Ok(()),
            Some(left) => Err(ActuatorError::requeue_after(
                self.poll,
                "DeletingScaleSet",
                format!(
                    "scale set {} is being deleted; {} instances left",
                    left.id,
                    left.instances.len()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::api::InMemoryMachinePoolSpec;
    use crate::cloud::{CloudConfig, SimulatedCloud};
    use capi_core::api::{Cluster, MachinePool};
    use capi_core::{BootstrapFormat, IdempotencyKey, PoolSize};

    fn scope(capacity: u32, remove: BTreeSet<String>, revision: &str) -> Scope {
        let mut pool = MachinePool::default();
        pool.metadata.uid = Some("p-uid".into());
        pool.spec.cluster_name = "demo".into();
        let mut infra = InMemoryMachinePool::new(
            "workers",
            InMemoryMachinePoolSpec {
                flavor: "small".into(),
                ..Default::default()
            },
        );
        infra.metadata.namespace = Some("ns".into());
        PoolScope {
            cluster: Arc::new(Cluster::default()),
            infra_cluster: Some(Arc::new(InMemoryCluster::default())),
            idempotency_key: IdempotencyKey::for_machine_pool(&pool)
                .unwrap_or_else(|e| panic!("{e}")),
            machine_pool: Arc::new(pool),
            infra_pool: Arc::new(infra),
            size: PoolSize {
                capacity: Some(capacity),
                remove,
            },
            revision: ModelRevision::new(revision),
        }
    }

    fn boot() -> BootstrapData {
        BootstrapData::new(BootstrapFormat::CloudConfig, "#cloud-config\n")
    }

    #[tokio::test]
    async fn a_lost_create_answer_makes_one_scale_set_and_update_converges_it() {
        let cloud = Arc::new(SimulatedCloud::new(CloudConfig {
            delete_time: Duration::from_secs(60),
            ..CloudConfig::default()
        }));
        let actuator = InMemoryPoolActuator::new(cloud.clone(), Duration::from_secs(1));
        let first = actuator
            .create(&scope(2, BTreeSet::new(), "r-1"), &boot())
            .await;
        let again = actuator
            .create(&scope(2, BTreeSet::new(), "r-1"), &boot())
            .await;
        let (first, again) = (
            first.unwrap_or_else(|e| panic!("{e}")),
            again.unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(first.provider_id, again.provider_id);
        assert_eq!(cloud.max_scale_sets_per_tag(), 1);
        assert_eq!(first.instances.len(), 2);

        let victim = first.instances[0].provider_id.clone();
        let next = scope(3, [victim.clone()].into(), "r-2");
        let found = actuator
            .exists(&next)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("found"));
        let updated = actuator
            .update(&next, found, Some(boot()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(updated.capacity, 3);
        let launched: Vec<_> = updated
            .instances
            .iter()
            .filter(|i| i.is_up_to_date(&ModelRevision::new("r-2")))
            .collect();
        assert_eq!(launched.len(), 2, "two new instances of the new model");
        assert!(
            updated.instances.iter().any(|i| i.provider_id == victim),
            "the removed instance is reported until it is gone"
        );
    }

    #[tokio::test]
    async fn without_bootstrap_data_the_size_changes_and_the_model_does_not() {
        let cloud = Arc::new(SimulatedCloud::default());
        let actuator = InMemoryPoolActuator::new(cloud.clone(), Duration::from_secs(1));
        actuator
            .create(&scope(1, BTreeSet::new(), "r-1"), &boot())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let next = scope(2, BTreeSet::new(), "r-2");
        let found = actuator
            .exists(&next)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("found"));
        let updated = actuator
            .update(&next, found, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(updated.instances.len(), 2);
        assert!(
            updated
                .instances
                .iter()
                .all(|i| i.is_up_to_date(&ModelRevision::new("r-1")))
        );
    }

    #[tokio::test]
    async fn another_clusters_scale_set_is_refused_and_deletion_waits_until_gone() {
        let cloud = Arc::new(SimulatedCloud::new(CloudConfig {
            delete_time: Duration::from_secs(60),
            ..CloudConfig::default()
        }));
        let actuator = InMemoryPoolActuator::new(cloud.clone(), Duration::from_secs(1));
        let made = actuator
            .create(&scope(1, BTreeSet::new(), "r-1"), &boot())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut foreign = scope(1, BTreeSet::new(), "r-1");
        let mut pool = foreign.machine_pool.as_ref().clone();
        pool.spec.cluster_name = "other".into();
        pool.metadata.uid = Some("other-uid".into());
        foreign.machine_pool = Arc::new(pool);
        let mut infra = foreign.infra_pool.as_ref().clone();
        infra.spec.provider_id = Some(made.provider_id.clone());
        foreign.infra_pool = Arc::new(infra);
        let refused = actuator.exists(&foreign).await.err();
        assert_eq!(
            refused.map(|e| e.reason().to_string()).as_deref(),
            Some("ScaleSetNotOwned")
        );

        let ours = scope(1, BTreeSet::new(), "r-1");
        let waiting = actuator.delete(&ours).await.err();
        assert_eq!(
            waiting.map(|e| e.reason().to_string()).as_deref(),
            Some("DeletingScaleSet")
        );
    }
}
