//! The in-memory provider's actuators: the same code shape a real provider has, over the simulated
//! cloud's [`Compute`] and [`LoadBalancers`] traits.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::api::{ApiEndpoint, FailureDomain, MachineAddress, MachineAddressType};
use capi_core::infra::Architecture;
use capi_core::{
    Actuator, ActuatorError, BootstrapData, ClusterActuator, ClusterInfrastructure, ClusterScope,
    Found, ImmutableChange, InstanceState, MachineCapacity, MachineInstance, MachineScope,
    MachineTemplateActuator, ProviderStatus, TemplateScope, UpdateOutcome,
};
use capi_provider::support::call_retry::CallRetry;

use crate::api::{InMemoryCluster, InMemoryMachine, InMemoryMachineTemplate};
use crate::cloud::{
    CloudError, Compute, Instance, InstanceRequest, InstanceStatus, LoadBalancers, UserData,
};
use crate::listing::ClusterListings;

/// What every machine call of this provider is handed.
type Scope = MachineScope<InMemoryMachine, InMemoryCluster>;

/// The prefix of every provider ID of this provider.
pub const PROVIDER_ID_PREFIX: &str = "inmemory:///";

const DEFAULT_ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// Drives the simulated cloud for `InMemoryMachine`s and `InMemoryCluster`s.
///
/// Every cloud call is retried through transient faults ([`CallRetry`], three attempts by
/// default), as a cloud SDK would: reads and deletes as they are; creates by looking for the
/// instance's (or load balancer's) tag before each attempt, so that a create whose response was
/// lost is found rather than made twice, and instances with the machine's idempotency key as
/// client token, so that one not listed yet (the cloud's lists lag, up to
/// [`MAX_LIST_LAG`](crate::cloud::MAX_LIST_LAG)) is answered with rather than made again.
///
/// A machine whose status says its instance runs reads it, at its resync, from a listing of its
/// cluster's instances shared with the cluster's other machines ([`crate::listing`]): one cloud
/// call per cluster and listing period instead of one per machine.
///
/// A deletion that finds nothing of a machine that neither recorded its instance nor found one
/// while deleting waits out the lists' lag before it says the instance is gone: one made by a
/// create whose answer was lost may not be listed yet.
#[derive(Clone)]
pub struct InMemoryActuator {
    compute: Arc<dyn Compute>,
    load_balancers: Arc<dyn LoadBalancers>,
    poll: Duration,
    retry: CallRetry,
    /// How long lists may lag behind a create.
    list_lag: Duration,
    /// Per idempotency key of a machine being deleted, what its deletion has seen.
    deletions: Arc<std::sync::Mutex<std::collections::HashMap<String, Sighting>>>,
    /// The clusters' instance listings running machines' resyncs read.
    listings: Arc<ClusterListings>,
}

impl InMemoryActuator {
    /// An actuator over the given cloud clients. `poll` is how often an ongoing deletion is
    /// checked.
    pub fn new(
        compute: Arc<dyn Compute>,
        load_balancers: Arc<dyn LoadBalancers>,
        poll: Duration,
    ) -> Self {
        Self {
            compute,
            load_balancers,
            poll,
            retry: CallRetry::default(),
            list_lag: crate::cloud::MAX_LIST_LAG,
            deletions: Arc::default(),
            listings: Arc::default(),
        }
    }

    /// Lets one listing of a cluster's instances answer its running machines' resyncs for `ttl`
    /// (default [`DEFAULT_LISTING_TTL`](crate::listing::DEFAULT_LISTING_TTL); zero: every resync
    /// lists its cluster). See [`crate::listing`].
    pub fn with_listing_ttl(mut self, ttl: Duration) -> Self {
        self.listings = Arc::new(ClusterListings::new(ttl));
        self
    }

    /// Trusts the cloud's lists to show a new instance within `lag` (default
    /// [`MAX_LIST_LAG`](crate::cloud::MAX_LIST_LAG), what the simulated cloud promises).
    pub fn with_list_lag(mut self, lag: Duration) -> Self {
        self.list_lag = lag;
        self
    }

    /// Retries cloud calls with `retry` instead ([`CallRetry::none`]: every call once).
    pub fn with_call_retry(mut self, retry: CallRetry) -> Self {
        self.retry = retry;
        self
    }

    /// `call`, repeated through transient faults; only for calls that are safe to repeat.
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

    /// Makes something the cloud does not deduplicate, exactly once: `find` looks for it (by its
    /// tag) before each attempt, so a create that happened but failed to answer is found.
    async fn create_once<T, Find, FindFut, Make, MakeFut>(
        &self,
        mut find: Find,
        mut make: Make,
    ) -> Result<T, ActuatorError>
    where
        Find: FnMut() -> FindFut,
        FindFut: std::future::Future<Output = Result<Option<T>, ActuatorError>>,
        Make: FnMut() -> MakeFut,
        MakeFut: std::future::Future<Output = Result<T, CloudError>>,
    {
        let mut attempt = 1;
        loop {
            if let Some(existing) = find().await? {
                return Ok(existing);
            }
            match make().await {
                Err(error) if attempt < self.retry.attempts && error.is_transient() => {
                    tokio::time::sleep(self.retry.wait(attempt)).await;
                    attempt += 1;
                }
                outcome => return outcome.map_err(cloud_error),
            }
        }
    }
}

/// The machine's namespace: the infrastructure machine's (a deletion whose Machine is gone has
/// only a stand-in for it), else the Machine's.
fn machine_namespace(scope: &Scope) -> String {
    kube::ResourceExt::namespace(scope.infra_machine.as_ref())
        .or_else(|| kube::ResourceExt::namespace(scope.machine.as_ref()))
        .unwrap_or_default()
}

/// The cloud's key of the machine's cluster ([`cluster_key`](crate::cloud::cluster_key)): its
/// namespace, and the Machine's cluster name, else the infrastructure machine's cluster-name
/// label. None when neither names the cluster.
fn machine_cluster(scope: &Scope) -> Option<String> {
    let name = Some(scope.machine.spec.cluster_name.as_str())
        .filter(|name| !name.is_empty())
        .or_else(|| capi_core::labels::cluster_name(&scope.infra_machine.metadata))?;
    Some(crate::cloud::cluster_key(&machine_namespace(scope), name))
}

/// The machine's cluster key when its status says its instance runs: a resync, which a listing
/// may answer. A machine still booting, failed or not yet reported asks for its instance alone.
fn steady_cluster(scope: &Scope) -> Option<String> {
    let running = format!("{:?}", InstanceStatus::Active);
    let state = scope
        .infra_machine
        .status
        .as_ref()?
        .instance_state
        .as_deref()?;
    (state == running).then(|| machine_cluster(scope)).flatten()
}

/// The provider ID of an instance.
pub fn provider_id(instance_id: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{instance_id}")
}

fn instance_id(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .filter(|id| !id.is_empty())
}

fn to_machine_instance(instance: &Instance) -> MachineInstance {
    let state = match instance.status {
        InstanceStatus::Building => InstanceState::Provisioning,
        InstanceStatus::Active => InstanceState::Running,
        InstanceStatus::Deleting => InstanceState::Failed {
            reason: "InstanceDeleting".into(),
            message: "the instance is being deleted".into(),
        },
        InstanceStatus::Error => InstanceState::Failed {
            reason: "InstanceError".into(),
            message: "the cloud failed to build the instance".into(),
        },
    };
    let addresses = vec![
        MachineAddress {
            type_: MachineAddressType::InternalIp,
            address: instance.address.clone(),
        },
        MachineAddress {
            type_: MachineAddressType::Hostname,
            address: instance.id.clone(),
        },
    ];
    let own = crate::api::InMemoryMachineStatus {
        instance_id: Some(instance.id.clone()),
        instance_state: Some(format!("{:?}", instance.status)),
        flavor: Some(instance.flavor.clone()),
        ..Default::default()
    };
    let mut reported = MachineInstance::new(provider_id(&instance.id), addresses, state);
    // The contract's part of the typed status is the loop's: only the cloud's own fields go.
    match ProviderStatus::from_typed(&own) {
        Ok(status) => reported = reported.with_provider_status(status),
        Err(error) => tracing::error!(%error, "the in-memory provider's own status is malformed"),
    }
    if let Some(zone) = instance.zone.clone() {
        reported = reported.in_failure_domain(zone);
    }
    reported
}

pub(crate) fn cloud_error(error: CloudError) -> ActuatorError {
    match error {
        CloudError::QuotaExceeded { limit } => ActuatorError::requeue_after(
            Duration::from_secs(30),
            "WaitingForQuota",
            format!("the instance quota ({limit}) is used up; waiting for capacity"),
        ),
        CloudError::UnknownFlavor { flavor } => ActuatorError::invalid_configuration(
            "UnknownFlavor",
            format!(
                "flavor {flavor:?} does not exist in the simulated cloud; use small, medium or large"
            ),
        ),
        other => ActuatorError::transient("CloudAPIError", other),
    }
}

/// The machines of a template have what its flavor has; every simulated instance runs Linux.
#[async_trait]
impl MachineTemplateActuator<InMemoryMachineTemplate, InMemoryCluster> for InMemoryActuator {
    async fn capacity(
        &self,
        scope: &TemplateScope<InMemoryMachineTemplate, InMemoryCluster>,
    ) -> Result<MachineCapacity, ActuatorError> {
        let name = &scope.template.spec.template.spec.flavor;
        let flavor = self
            .retried(|| self.compute.get_flavor(name))
            .await?
            .ok_or_else(|| {
                cloud_error(CloudError::UnknownFlavor {
                    flavor: name.clone(),
                })
            })?;
        let mut capacity = MachineCapacity::default()
            .cpus(u64::from(flavor.vcpus))
            .memory_mib(flavor.memory_mib)
            .ephemeral_storage_gib(flavor.disk_gib)
            .operating_system("linux");
        if let Some(architecture) = Architecture::from_cloud_name(&flavor.architecture) {
            capacity = capacity.architecture(architecture);
        }
        Ok(capacity)
    }
}

impl InMemoryActuator {
    /// The oldest live instance of this machine: by recorded provider ID (which must be
    /// [ours](ensure_ours)), else by idempotency tag among the instances of its cluster.
    async fn find(&self, scope: &Scope) -> Result<Option<Instance>, ActuatorError> {
        if let Some(id) = scope
            .infra_machine
            .spec
            .provider_id
            .as_deref()
            .and_then(instance_id)
        {
            let found = self.find_recorded(scope, id).await?;
            if let Some(instance) = &found {
                ensure_ours(scope, instance, Source::ProviderId)?;
            }
            return Ok(found);
        }
        let mut found = self.tagged(scope).await?;
        found.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(found.into_iter().next())
    }

    /// The instance `id` names, from the cluster's listing when the machine runs, else read alone.
    async fn find_recorded(
        &self,
        scope: &Scope,
        id: &str,
    ) -> Result<Option<Instance>, ActuatorError> {
        if let Some(cluster) = steady_cluster(scope) {
            match self
                .listings
                .running(&cluster, id, || {
                    self.retried(|| self.compute.cluster_instances(&cluster))
                })
                .await
            {
                Ok(Some(listed)) => return Ok(Some(listed)),
                Ok(None) => {}
                // The instance alone may still be read.
                Err(error) => {
                    tracing::debug!(%cluster, %error, "listing the cluster's instances failed")
                }
            }
        }
        self.retried(|| self.compute.get_instance(id)).await
    }

    /// The instances carrying this machine's idempotency tag that were made for its cluster:
    /// the tag is read from an annotation a tenant may write, so another cluster's instance
    /// under the same tag is never this machine's.
    async fn tagged(&self, scope: &Scope) -> Result<Vec<Instance>, ActuatorError> {
        let tag = scope.idempotency_key.as_str();
        let found = self.retried(|| self.compute.find_instances(tag)).await?;
        Ok(found
            .into_iter()
            .filter(|instance| made_for(instance, scope))
            .collect())
    }
}

/// Whether `instance` was made for the machine's cluster; when the machine's objects do not
/// name its cluster, for any cluster of its namespace (never another namespace's). One made
/// before instances carried their cluster (none is made so any more) is judged by its tag alone.
fn made_for(instance: &Instance, scope: &Scope) -> bool {
    let Some(made) = instance.cluster.as_deref() else {
        return true;
    };
    match machine_cluster(scope) {
        Some(cluster) => made == cluster,
        None => made
            .strip_prefix(machine_namespace(scope).as_str())
            .is_some_and(|cluster| cluster.starts_with('.')),
    }
}

/// Where an instance that must be this machine's came from, for the error that says it is not.
#[derive(Clone, Copy)]
enum Source {
    /// Named by `spec.providerID`, which whoever may write the `InMemoryMachine` writes.
    ProviderId,
    /// The cloud's answer to this machine's create: the instance an earlier request with the
    /// same client token (the idempotency key, from an annotation a tenant may write) made.
    Create,
}

/// An instance is this machine's only if it was [made for](made_for) this machine's cluster
/// under this machine's idempotency tag. Anything else is an invalid configuration and is never
/// touched: not reported, not deleted.
fn ensure_ours(scope: &Scope, instance: &Instance, source: Source) -> Result<(), ActuatorError> {
    let missing = if !made_for(instance, scope) {
        "was not made for this machine's cluster"
    } else if instance.tag != scope.idempotency_key.as_str() {
        "does not carry this machine's idempotency tag"
    } else {
        return Ok(());
    };
    let (from, correct) = match source {
        Source::ProviderId => ("named by spec.providerID", "spec.providerID"),
        Source::Create => (
            "answered to this machine's create under its idempotency key",
            "the idempotency-key annotation",
        ),
    };
    Err(ActuatorError::invalid_configuration(
        "InstanceNotOwned",
        format!(
            "instance {} ({from}) {missing}: it is not this machine's and is left untouched; \
             correct {correct}",
            instance.id
        ),
    ))
}

#[async_trait]
impl Actuator<InMemoryMachine, InMemoryCluster> for InMemoryActuator {
    /// The cloud's record of the instance, flavor included, for `update` to compare.
    type Instance = Instance;

    async fn exists(&self, scope: &Scope) -> Result<Option<Found<Instance>>, ActuatorError> {
        let found = self.find(scope).await?;
        Ok(found.map(|instance| Found::with(to_machine_instance(&instance), instance)))
    }

    async fn create(
        &self,
        scope: &Scope,
        bootstrap: &BootstrapData,
    ) -> Result<MachineInstance, ActuatorError> {
        let request = InstanceRequest {
            tag: scope.idempotency_key.as_str().to_string(),
            flavor: scope.infra_machine.spec.flavor.clone(),
            zone: scope.machine.spec.failure_domain.clone(),
            user_data_len: bootstrap.expose().len(),
            // The instance boots from it (a control plane's etcd member finds its CA there).
            user_data: Some(UserData::new(String::from_utf8_lossy(bootstrap.expose()))),
            // The etcd cluster is keyed as the cluster is.
            etcd_cluster: scope
                .machine
                .is_control_plane()
                .then(|| machine_cluster(scope))
                .flatten(),
            client_token: Some(scope.idempotency_key.as_str().to_string()),
            cluster: machine_cluster(scope),
        };
        // The tag makes a retry after a lost response find the first instance instead of
        // creating a second one; the client token does while lists do not show it yet.
        let created = self
            .create_once(
                || self.find(scope),
                || self.compute.create_instance(request.clone()),
            )
            .await?;
        // The cloud answers a known client token with the instance it made for it, whoever
        // asked: one made for another cluster is not reported as this machine's.
        ensure_ours(scope, &created, Source::Create)?;
        Ok(to_machine_instance(&created))
    }

    /// Nothing of an instance is mutable: reports a flavor other than the spec's, from the
    /// record `exists` read, without calling the cloud.
    async fn update(
        &self,
        scope: &Scope,
        found: Found<Instance>,
    ) -> Result<UpdateOutcome, ActuatorError> {
        let desired = &scope.infra_machine.spec.flavor;
        let mut immutable_changes = Vec::new();
        if &found.instance.flavor != desired {
            immutable_changes.push(ImmutableChange {
                field: "spec.flavor".into(),
                current: found.instance.flavor.clone(),
                desired: desired.clone(),
            });
        }
        Ok(UpdateOutcome {
            instance: found.reported,
            immutable_changes,
        })
    }

    async fn delete(&self, scope: &Scope) -> Result<(), ActuatorError> {
        // Everything this machine may own: the recorded instance and anything carrying its tag
        // (a create whose response was lost), so that nothing leaks.
        // A recorded instance that is not this machine's is left alone, and reported once the
        // machine's own instances are gone.
        let tag = scope.idempotency_key.as_str();
        let mut owned = self.tagged(scope).await?;
        let mut not_ours = None;
        if let Some(id) = scope
            .infra_machine
            .spec
            .provider_id
            .as_deref()
            .and_then(instance_id)
            && !owned.iter().any(|i| i.id == id)
            && let Some(recorded) = self.retried(|| self.compute.get_instance(id)).await?
        {
            match ensure_ours(scope, &recorded, Source::ProviderId) {
                Ok(()) => owned.push(recorded),
                Err(error) => not_ours = Some(error),
            }
        }
        if owned.is_empty() {
            return match not_ours {
                Some(error) => Err(error),
                None => self.gone_once_listed(scope),
            };
        }
        self.saw(tag, Sighting::Listed);
        for instance in owned
            .iter()
            .filter(|i| i.status != InstanceStatus::Deleting)
        {
            self.retried(|| self.compute.delete_instance(&instance.id))
                .await?;
        }
        Err(ActuatorError::requeue_after(
            self.poll,
            "DeletingInstance",
            format!("waiting for {} instance(s) to be deleted", owned.len()),
        ))
    }
}

/// What the deletion of one machine has seen of its instances.
#[derive(Clone, Copy, Debug)]
enum Sighting {
    /// An instance was listed (and deleted): with the client token, there is no other.
    Listed,
    /// Nothing has been listed since then.
    NothingSince(tokio::time::Instant),
}

impl InMemoryActuator {
    /// After a deletion found nothing: the instance is gone if the machine recorded it (reads by
    /// ID do not lag) or the deletion found it before, or once nothing has been listed for the
    /// lists' lag.
    fn gone_once_listed(&self, scope: &Scope) -> Result<(), ActuatorError> {
        let tag = scope.idempotency_key.as_str();
        let sighting = self.saw(tag, Sighting::NothingSince(tokio::time::Instant::now()));
        let waited = match sighting {
            _ if scope.infra_machine.spec.provider_id.is_some() => None,
            Sighting::Listed => None,
            Sighting::NothingSince(since) => Some(since.elapsed()).filter(|w| *w < self.list_lag),
        };
        let Some(waited) = waited else {
            self.forget_deletion(tag);
            return Ok(());
        };
        Err(ActuatorError::requeue_after(
            self.list_lag - waited,
            "WaitingForCloudLists",
            format!(
                "no instance listed for this machine yet; the cloud's lists may lag up to {:?} behind a create",
                self.list_lag
            ),
        ))
    }

    /// Records what the deletion under `tag` saw (a listing is never overwritten by a later
    /// "nothing", nor a first "nothing" by a later one); returns what it has seen.
    fn saw(&self, tag: &str, sighting: Sighting) -> Sighting {
        let mut deletions = self
            .deletions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let entry = deletions.entry(tag.to_string()).or_insert(sighting);
        if matches!(sighting, Sighting::Listed) {
            *entry = Sighting::Listed;
        }
        *entry
    }

    fn forget_deletion(&self, tag: &str) {
        self.deletions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(tag);
    }
}

/// The tag of the cluster's load balancer: from the `InMemoryCluster`'s namespace and name,
/// always at hand (even once the `Cluster` is gone) and kept by `clusterctl move` (UIDs are new
/// on the target), as CAPA and CAPO name a cluster's resources. An object of the same name can
/// only come back once this one's deletion removed its load balancer (the finalizer waits for it).
fn cluster_tag(scope: &ClusterScope<InMemoryCluster>) -> String {
    let infra = &scope.infra_cluster;
    let key = crate::cloud::cluster_key(
        infra.metadata.namespace.as_deref().unwrap_or_default(),
        infra.metadata.name.as_deref().unwrap_or_default(),
    );
    format!("capi-cluster-{key}")
}

#[async_trait]
impl ClusterActuator<InMemoryCluster> for InMemoryActuator {
    async fn reconcile(
        &self,
        scope: &ClusterScope<InMemoryCluster>,
    ) -> Result<ClusterInfrastructure, ActuatorError> {
        let tag = cluster_tag(scope);
        let oldest = || async {
            let mut found = self
                .retried(|| self.load_balancers.find_load_balancers(&tag))
                .await?;
            found.sort_by(|a, b| a.id.cmp(&b.id));
            Ok(found.into_iter().next())
        };
        let lb = self
            .create_once(oldest, || self.load_balancers.create_load_balancer(&tag))
            .await?;
        let zones: Vec<String> = if scope.infra_cluster.spec.failure_domains.is_empty() {
            DEFAULT_ZONES.iter().map(|z| z.to_string()).collect()
        } else {
            scope.infra_cluster.spec.failure_domains.clone()
        };
        Ok(ClusterInfrastructure {
            control_plane_endpoint: Some(ApiEndpoint {
                host: lb.address,
                port: lb.port,
            }),
            failure_domains: zones
                .into_iter()
                .map(|name| FailureDomain {
                    name,
                    control_plane: Some(true),
                    attributes: Default::default(),
                })
                .collect(),
            provisioned: !lb.provisioning,
            provider_status: ProviderStatus::from_typed(&crate::api::InMemoryClusterStatus {
                load_balancer_id: Some(lb.id),
                ..Default::default()
            })
            .map_err(|e| ActuatorError::transient("ProviderStatusInvalid", e))?,
            ..ClusterInfrastructure::default()
        })
    }

    async fn delete(&self, scope: &ClusterScope<InMemoryCluster>) -> Result<(), ActuatorError> {
        let tag = cluster_tag(scope);
        let found = self
            .retried(|| self.load_balancers.find_load_balancers(&tag))
            .await?;
        for lb in &found {
            self.retried(|| self.load_balancers.delete_load_balancer(&lb.id))
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::InMemoryMachineSpec;
    use crate::cloud::{CloudConfig, Faults, Flavor, SimulatedCloud};
    use capi_core::api::{Cluster, Machine};
    use capi_core::{ActuatorErrorKind, BootstrapData, BootstrapFormat, IdempotencyKey};

    fn setup(config: CloudConfig) -> (Arc<SimulatedCloud>, InMemoryActuator) {
        let cloud = Arc::new(SimulatedCloud::new(config));
        let actuator =
            InMemoryActuator::new(cloud.clone(), cloud.clone(), Duration::from_millis(10));
        (cloud, actuator)
    }

    fn scope(uid: &str, spec: InMemoryMachineSpec) -> Scope {
        let mut machine = Machine::default();
        machine.metadata.uid = Some(uid.into());
        MachineScope {
            cluster: Arc::new(Cluster::default()),
            infra_cluster: Some(Arc::new(InMemoryCluster::new("c", Default::default()))),
            idempotency_key: IdempotencyKey::for_machine(&machine).unwrap(),
            machine: Arc::new(machine),
            infra_machine: Arc::new(InMemoryMachine::new("m", spec)),
        }
    }

    fn boot() -> BootstrapData {
        BootstrapData::new(BootstrapFormat::CloudConfig, b"#cloud-config\n".to_vec())
    }

    /// A request for a small instance under `tag`, without user data, token or cluster.
    fn bare_request(tag: impl Into<String>) -> InstanceRequest {
        InstanceRequest {
            tag: tag.into(),
            flavor: "small".into(),
            zone: None,
            user_data_len: 0,
            user_data: None,
            etcd_cluster: None,
            client_token: None,
            cluster: None,
        }
    }

    fn small() -> InMemoryMachineSpec {
        InMemoryMachineSpec {
            provider_id: None,
            flavor: "small".into(),
        }
    }

    #[tokio::test]
    async fn a_create_whose_response_is_lost_is_found_within_the_call() {
        let (cloud, actuator) = setup(CloudConfig::default());
        cloud.set_faults(Faults {
            lost_create_response_rate: 1.0,
            ..Faults::default()
        });
        let created = actuator
            .create(&scope("u0", small()), &boot())
            .await
            .unwrap();
        let found = actuator
            .exists(&scope("u0", small()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(created.provider_id, found.reported.provider_id);
        assert_eq!(cloud.instance_count(), 1);
        assert_eq!(cloud.max_created_per_tag(), 1);
    }

    #[tokio::test]
    async fn transient_faults_are_retried_within_the_call_and_then_fail_it() {
        let (cloud, actuator) = setup(CloudConfig::default());
        let actuator = actuator.with_call_retry(CallRetry {
            attempts: 50,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(1),
        });
        cloud.set_faults(Faults {
            error_rate: 0.5,
            ..Faults::default()
        });
        // At 50 % per call, fifty attempts all failing is out of reach: every call gets through.
        for uid in ["r1", "r2", "r3", "r4"] {
            actuator
                .create(&scope(uid, small()), &boot())
                .await
                .unwrap();
        }
        assert_eq!(cloud.instance_count(), 4);
        assert_eq!(cloud.max_created_per_tag(), 1);
        cloud.set_faults(Faults {
            error_rate: 1.0,
            ..Faults::default()
        });
        let error = actuator
            .create(&scope("r5", small()), &boot())
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ActuatorErrorKind::Transient);
    }

    #[tokio::test]
    async fn a_retried_create_after_a_lost_response_finds_the_first_instance() {
        let (cloud, actuator) = setup(CloudConfig::default());
        let actuator = actuator.with_call_retry(CallRetry::none());
        cloud.set_faults(Faults {
            lost_create_response_rate: 1.0,
            ..Faults::default()
        });
        let scope = scope("u1", small());
        assert_eq!(
            actuator.create(&scope, &boot()).await.unwrap_err().kind(),
            ActuatorErrorKind::Transient
        );
        cloud.set_faults(Faults::default());
        let found = actuator
            .exists(&scope)
            .await
            .unwrap()
            .expect("found by tag");
        let again = actuator.create(&scope, &boot()).await.unwrap();
        assert_eq!(found.reported.provider_id, again.provider_id);
        assert_eq!(cloud.instance_count(), 1);
        assert_eq!(cloud.max_created_per_tag(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn while_lists_lag_a_lost_create_is_neither_made_twice_nor_leaked() {
        let (cloud, actuator) = setup(CloudConfig {
            list_lag: crate::cloud::MAX_LIST_LAG,
            seed: Some(7),
            ..CloudConfig::default()
        });
        let actuator = actuator.with_call_retry(CallRetry::none());
        let lose_answers = |rate| {
            cloud.set_faults(Faults {
                lost_create_response_rate: rate,
                ..Faults::default()
            });
        };

        // Made, answer lost, not listed yet (time stands still): the retry gets the same one.
        let kept = scope("u9", small());
        lose_answers(1.0);
        actuator.create(&kept, &boot()).await.unwrap_err();
        lose_answers(0.0);
        assert!(
            cloud
                .find_instances(kept.idempotency_key.as_str())
                .await
                .unwrap()
                .is_empty()
        );
        actuator.create(&kept, &boot()).await.unwrap();
        assert_eq!(cloud.instance_count(), 1);
        assert_eq!(cloud.max_created_per_tag(), 1);

        // Made, answer lost, and deleted before lists show it: the deletion waits for them.
        let doomed = scope("u10", small());
        let tag = doomed.idempotency_key.as_str().to_string();
        lose_answers(1.0);
        actuator.create(&doomed, &boot()).await.unwrap_err();
        lose_answers(0.0);
        let mut deleted = false;
        for _ in 0..20 {
            match Actuator::delete(&actuator, &doomed).await {
                Ok(()) => {
                    deleted = true;
                    break;
                }
                Err(error) => assert_eq!(error.kind(), ActuatorErrorKind::RequeueAfter, "{error}"),
            }
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        assert!(deleted, "the deletion ends");
        assert!(
            cloud.instances().iter().all(|i| i.tag != tag),
            "the instance not listed at first was deleted, not leaked"
        );
        assert_eq!(cloud.instance_count(), 1);
    }

    #[tokio::test]
    async fn exists_prefers_the_recorded_provider_id() {
        let (cloud, actuator) = setup(CloudConfig::default());
        let created = actuator
            .create(&scope("u2", small()), &boot())
            .await
            .unwrap();
        let recorded = InMemoryMachineSpec {
            provider_id: Some(created.provider_id.clone()),
            flavor: "small".into(),
        };
        // A second instance under the machine's tag: the recorded ID still names the first.
        cloud
            .create_instance(bare_request(
                scope("u2", small()).idempotency_key.to_string(),
            ))
            .await
            .unwrap();
        let found = actuator
            .exists(&scope("u2", recorded))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.reported.provider_id, created.provider_id);
        assert_eq!(found.reported.state, InstanceState::Running);
        assert_eq!(cloud.instance_count(), 2);
    }

    #[tokio::test]
    async fn delete_waits_until_everything_with_the_tag_is_gone() {
        let (cloud, actuator) = setup(CloudConfig {
            delete_time: Duration::from_millis(50),
            ..CloudConfig::default()
        });
        let scope = scope("u3", small());
        // Two instances under one tag (a cloud that ignores idempotency): both must go.
        cloud
            .create_instance(bare_request(scope.idempotency_key.to_string()))
            .await
            .unwrap();
        cloud
            .create_instance(bare_request(scope.idempotency_key.to_string()))
            .await
            .unwrap();
        let first = Actuator::delete(&actuator, &scope).await.unwrap_err();
        assert_eq!(first.kind(), ActuatorErrorKind::RequeueAfter);
        tokio::time::sleep(Duration::from_millis(80)).await;
        Actuator::delete(&actuator, &scope).await.unwrap();
        assert_eq!(cloud.instance_count(), 0);
    }

    #[tokio::test]
    async fn unknown_flavor_is_invalid_configuration_and_quota_is_a_wait() {
        let (_, actuator) = setup(CloudConfig {
            max_instances: Some(1),
            ..CloudConfig::default()
        });
        let huge = InMemoryMachineSpec {
            provider_id: None,
            flavor: "huge".into(),
        };
        let error = actuator
            .create(&scope("u4", huge), &boot())
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
        assert!(error.message().contains("huge"));
        actuator
            .create(&scope("u5", small()), &boot())
            .await
            .unwrap();
        let error = actuator
            .create(&scope("u6", small()), &boot())
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ActuatorErrorKind::RequeueAfter);
    }

    #[tokio::test]
    async fn a_changed_flavor_is_reported_not_applied() {
        let (_, actuator) = setup(CloudConfig::default());
        let created = actuator
            .create(&scope("u7", small()), &boot())
            .await
            .unwrap();
        let resized = InMemoryMachineSpec {
            provider_id: Some(created.provider_id.clone()),
            flavor: "large".into(),
        };
        let resized = scope("u7", resized);
        let found = actuator.exists(&resized).await.unwrap().unwrap();
        let outcome = actuator.update(&resized, found).await.unwrap();
        assert_eq!(outcome.immutable_changes.len(), 1);
        assert_eq!(outcome.immutable_changes[0].field, "spec.flavor");
    }

    /// The simulated cloud, counting reads by ID and cluster listings.
    struct CountingCompute {
        cloud: Arc<SimulatedCloud>,
        gets: std::sync::atomic::AtomicUsize,
        listings: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl Compute for CountingCompute {
        async fn create_instance(&self, request: InstanceRequest) -> Result<Instance, CloudError> {
            self.cloud.create_instance(request).await
        }
        async fn get_instance(&self, id: &str) -> Result<Option<Instance>, CloudError> {
            self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.cloud.get_instance(id).await
        }
        async fn find_instances(&self, tag: &str) -> Result<Vec<Instance>, CloudError> {
            self.cloud.find_instances(tag).await
        }
        async fn cluster_instances(&self, cluster: &str) -> Result<Vec<Instance>, CloudError> {
            self.listings
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.cloud.cluster_instances(cluster).await
        }
        async fn delete_instance(&self, id: &str) -> Result<(), CloudError> {
            self.cloud.delete_instance(id).await
        }
        async fn get_flavor(&self, name: &str) -> Result<Option<Flavor>, CloudError> {
            self.cloud.get_flavor(name).await
        }
    }

    fn counting() -> (Arc<CountingCompute>, InMemoryActuator) {
        let cloud = Arc::new(SimulatedCloud::new(CloudConfig {
            boot_time: Duration::ZERO,
            ..CloudConfig::default()
        }));
        let compute = Arc::new(CountingCompute {
            cloud: cloud.clone(),
            gets: Default::default(),
            listings: Default::default(),
        });
        let actuator = InMemoryActuator::new(compute.clone(), cloud, Duration::from_millis(10));
        (compute, actuator)
    }

    /// Machine `uid` of cluster `ns/c`, with `instance` recorded as its provider ID and its status
    /// in `state`.
    fn in_cluster(uid: &str, instance: Option<&MachineInstance>, state: Option<&str>) -> Scope {
        let mut scope = scope(uid, small());
        let mut machine = (*scope.machine).clone();
        machine.metadata.namespace = Some("ns".into());
        machine.spec.cluster_name = "c".into();
        scope.machine = Arc::new(machine);
        let mut infra = (*scope.infra_machine).clone();
        infra.spec.provider_id = instance.map(|i| i.provider_id.clone());
        infra.status = Some(crate::api::InMemoryMachineStatus {
            instance_state: state.map(str::to_string),
            ..Default::default()
        });
        scope.infra_machine = Arc::new(infra);
        scope
    }

    #[tokio::test]
    async fn running_machines_resync_from_one_listing_of_their_cluster() {
        let (compute, actuator) = counting();
        let mut made = Vec::new();
        for n in 0..5 {
            let uid = format!("r{n}");
            made.push((
                uid.clone(),
                actuator
                    .create(&in_cluster(&uid, None, None), &boot())
                    .await
                    .unwrap(),
            ));
        }
        for (uid, instance) in &made {
            let found = actuator
                .exists(&in_cluster(uid, Some(instance), Some("Active")))
                .await
                .unwrap()
                .expect("the instance runs");
            assert_eq!(found.reported.provider_id, instance.provider_id);
            assert_eq!(found.reported.state, InstanceState::Running);
        }
        let count =
            |c: &std::sync::atomic::AtomicUsize| c.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(count(&compute.listings), 1, "one listing for the cluster");
        assert_eq!(count(&compute.gets), 0, "no read per machine");
        // A machine not known to run yet (booting, or no status) asks for its instance alone.
        let (uid, instance) = &made[0];
        actuator
            .exists(&in_cluster(uid, Some(instance), Some("Building")))
            .await
            .unwrap();
        actuator
            .exists(&in_cluster(uid, Some(instance), None))
            .await
            .unwrap();
        assert_eq!(count(&compute.gets), 2);
        assert_eq!(count(&compute.listings), 1);
    }

    #[tokio::test]
    async fn an_instance_the_listing_does_not_show_is_asked_for_alone() {
        let (compute, actuator) = counting();
        // Made without a cluster (before instances carried one): no listing shows it.
        let untagged = compute
            .cloud
            .create_instance(bare_request(
                in_cluster("o1", None, None).idempotency_key.to_string(),
            ))
            .await
            .unwrap();
        let recorded = to_machine_instance(&untagged);
        let found = actuator
            .exists(&in_cluster("o1", Some(&recorded), Some("Active")))
            .await
            .unwrap();
        assert_eq!(
            found.map(|f| f.reported.provider_id),
            Some(recorded.provider_id.clone())
        );
        let count =
            |c: &std::sync::atomic::AtomicUsize| c.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!((count(&compute.listings), count(&compute.gets)), (1, 1));
        // Gone from the cloud: the read by ID says so; the listing never answers "missing".
        compute.cloud.delete_instance(&untagged.id).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let after = actuator
            .exists(&in_cluster("o1", Some(&recorded), Some("Active")))
            .await
            .unwrap();
        assert!(
            after
                .as_ref()
                .is_none_or(|i| i.reported.state != InstanceState::Running),
            "{after:?}"
        );
        assert_eq!(count(&compute.gets), 2);
    }

    #[tokio::test]
    async fn another_clusters_instance_is_never_this_machines_whatever_the_tenant_writes() {
        let (cloud, actuator) = setup(CloudConfig::default());
        let mine = in_cluster("t1", None, None);
        // Another cluster's instance, under the tag this machine's (tenant-written) key names.
        let theirs = cloud
            .create_instance(InstanceRequest {
                cluster: Some(crate::cloud::cluster_key("other", "c")),
                ..bare_request(mine.idempotency_key.to_string())
            })
            .await
            .unwrap();
        assert!(actuator.exists(&mine).await.unwrap().is_none());
        // Named by spec.providerID: refused, and neither reported nor deleted.
        let named = in_cluster("t1", Some(&to_machine_instance(&theirs)), None);
        for error in [
            actuator.exists(&named).await.map(|_| ()).unwrap_err(),
            Actuator::delete(&actuator, &named).await.unwrap_err(),
        ] {
            assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
            assert_eq!(error.reason(), "InstanceNotOwned");
        }
        // Of this cluster but under another machine's tag: refused too.
        let neighbour = actuator
            .create(&in_cluster("t2", None, None), &boot())
            .await
            .unwrap();
        let error = actuator
            .exists(&in_cluster("t1", Some(&neighbour), None))
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(error.reason(), "InstanceNotOwned");
        // The deletion by tag leaves the other cluster's instance alone.
        if let Err(error) = Actuator::delete(&actuator, &mine).await {
            assert_eq!(error.kind(), ActuatorErrorKind::RequeueAfter, "{error}");
        }
        assert_eq!(cloud.instance_count(), 2);
        assert!(cloud.get_instance(&theirs.id).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_deletion_whose_machine_is_gone_finds_the_instance_by_the_cluster_label() {
        let (cloud, actuator) = setup(CloudConfig::default());
        let made = in_cluster("g1", None, None);
        let created = actuator.create(&made, &boot()).await.unwrap();
        // The loop's stand-in for a Machine that is gone: its UID's key, nothing else; the
        // infrastructure machine keeps its namespace and cluster label.
        let mut infra = (*made.infra_machine).clone();
        infra.metadata.namespace = Some("ns".into());
        infra.metadata.labels = Some(
            [(capi_core::labels::CLUSTER_NAME.to_string(), "c".to_string())]
                .into_iter()
                .collect(),
        );
        let mut orphaned = scope("g1", small());
        orphaned.infra_machine = Arc::new(infra.clone());
        assert!(actuator.exists(&orphaned).await.unwrap().is_some());
        infra.spec.provider_id = Some(created.provider_id.clone());
        orphaned.infra_machine = Arc::new(infra);
        let first = Actuator::delete(&actuator, &orphaned).await.unwrap_err();
        assert_eq!(first.kind(), ActuatorErrorKind::RequeueAfter, "{first}");
        assert!(
            cloud
                .instances()
                .iter()
                .all(|i| i.status == InstanceStatus::Deleting)
        );
    }

    #[tokio::test]
    async fn a_machine_naming_no_cluster_never_reaches_another_namespaces_instance() {
        let (cloud, actuator) = setup(CloudConfig::default());
        let theirs = actuator
            .create(&in_cluster("n1", None, None), &boot())
            .await
            .unwrap();
        // A tenant's InMemoryMachine with no Machine, no cluster label, and the other machine's
        // key: the loop's stand-in Machine names no cluster either.
        let mut forged = scope("n1", small());
        let mut infra = (*forged.infra_machine).clone();
        infra.metadata.namespace = Some("tenant".into());
        forged.infra_machine = Arc::new(infra.clone());
        assert!(actuator.exists(&forged).await.unwrap().is_none());
        if let Err(error) = Actuator::delete(&actuator, &forged).await {
            assert_eq!(error.kind(), ActuatorErrorKind::RequeueAfter, "{error}");
        }
        infra.spec.provider_id = Some(theirs.provider_id.clone());
        forged.infra_machine = Arc::new(infra);
        let error = Actuator::delete(&actuator, &forged).await.unwrap_err();
        assert_eq!(error.reason(), "InstanceNotOwned", "{error}");
        assert!(
            cloud
                .instances()
                .iter()
                .all(|i| i.status == InstanceStatus::Active)
        );
    }

    #[tokio::test]
    async fn a_create_answered_with_another_clusters_instance_does_not_report_it() {
        let (cloud, actuator) = setup(CloudConfig::default());
        let mine = in_cluster("k1", None, None);
        // Another cluster's instance, made under the client token this machine's key gives.
        cloud
            .create_instance(InstanceRequest {
                cluster: Some(crate::cloud::cluster_key("other", "c")),
                client_token: Some(mine.idempotency_key.to_string()),
                ..bare_request(mine.idempotency_key.to_string())
            })
            .await
            .unwrap();
        let error = actuator.create(&mine, &boot()).await.unwrap_err();
        assert_eq!(error.reason(), "InstanceNotOwned", "{error}");
        assert!(
            error.to_string().contains("idempotency-key annotation"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_foreign_provider_id_does_not_keep_the_machines_own_instances_running() {
        let (cloud, actuator) = setup(CloudConfig {
            delete_time: Duration::from_millis(10),
            ..CloudConfig::default()
        });
        let theirs = actuator
            .create(&in_cluster("f2", None, None), &boot())
            .await
            .unwrap();
        let mine = in_cluster("f1", None, None);
        actuator.create(&mine, &boot()).await.unwrap();
        let named = in_cluster("f1", Some(&theirs), None);
        let first = Actuator::delete(&actuator, &named).await.unwrap_err();
        assert_eq!(first.kind(), ActuatorErrorKind::RequeueAfter, "{first}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut last = Actuator::delete(&actuator, &named).await;
        for _ in 0..20 {
            if last
                .as_ref()
                .is_err_and(|e| e.kind() == ActuatorErrorKind::RequeueAfter)
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
                last = Actuator::delete(&actuator, &named).await;
            }
        }
        assert_eq!(last.unwrap_err().reason(), "InstanceNotOwned");
        // The machine's own instance is gone; the one its spec.providerID named is untouched.
        let left = cloud.instances();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(provider_id(&left[0].id), theirs.provider_id);
        assert_eq!(left[0].status, InstanceStatus::Active);
    }

    #[tokio::test]
    async fn update_judges_the_flavor_exists_reported_without_asking_the_cloud_again() {
        let (_, actuator) = setup(CloudConfig::default());
        let created = actuator
            .create(&scope("u8", small()), &boot())
            .await
            .unwrap();
        // Another (empty) cloud: a second read would find nothing and see no change.
        let (_, elsewhere) = setup(CloudConfig::default());
        let resized = InMemoryMachineSpec {
            provider_id: Some(created.provider_id.clone()),
            flavor: "large".into(),
        };
        let resized = scope("u8", resized);
        let found = actuator.exists(&resized).await.unwrap().unwrap();
        let outcome = elsewhere.update(&resized, found).await.unwrap();
        assert_eq!(outcome.immutable_changes.len(), 1, "{outcome:?}");
        assert_eq!(outcome.immutable_changes[0].current, "small");
        assert_eq!(outcome.instance, created);
    }
}
