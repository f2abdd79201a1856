//! The simulated cloud: state in memory, latency, failure injection, quota and inspection.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    CloudError, Compute, EtcdCluster, EtcdClusters, EtcdMember, Flavor, Instance, InstanceRequest,
    InstanceStatus, LoadBalancer, LoadBalancers, MemberEvent, ScaleSet, ScaleSetModel,
    ScaleSetRequest, ScaleSets, UserData,
};

/// How the simulated cloud behaves.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudConfig {
    /// The latency of every API call.
    pub call_latency: Duration,
    /// How long an instance stays `Building`.
    pub boot_time: Duration,
    /// How long an instance stays `Deleting`.
    pub delete_time: Duration,
    /// Relative jitter on every latency (0.2 = ±20 %).
    pub jitter: f64,
    /// At most this many instances at once.
    pub max_instances: Option<usize>,
    /// The flavors that exist.
    pub flavors: Vec<Flavor>,
    /// Injected failures.
    pub faults: Faults,
    /// Hand out loopback addresses (`127.1.0.0/16` upwards) instead of `10.0.0.0/8` ones, so that
    /// something on this machine can listen on an instance's address: the simulated kubelets'
    /// endpoints ([`crate::kubelet`]) that a workload API server reaches through the node's
    /// `InternalIP`.
    pub loopback_addresses: bool,
    /// Seeds the draws of faults and latencies (`None`: a random seed). Calls come concurrently,
    /// so a seed fixes the sequence of draws, not which call gets which.
    pub seed: Option<u64>,
    /// Lists are eventually consistent, as EC2's and other clouds' are right after a create: a
    /// new instance shows in [`Compute::find_instances`] only after a random delay of up to this
    /// (at most [`MAX_LIST_LAG`], the bound this cloud promises; zero: at once). Reads by ID and
    /// creates by client token see it at once.
    pub list_lag: Duration,
}

/// The longest a new instance may take to show in lists, whatever [`CloudConfig::list_lag`] says:
/// the bound a caller waits out before it takes "not listed" for "not there".
pub const MAX_LIST_LAG: Duration = Duration::from_secs(5);

impl Default for CloudConfig {
    fn default() -> Self {
        Self {
            call_latency: Duration::ZERO,
            boot_time: Duration::ZERO,
            delete_time: Duration::ZERO,
            jitter: 0.0,
            max_instances: None,
            flavors: vec![
                Flavor::new("small", 1, 2048, 20),
                Flavor::new("medium", 2, 4096, 40),
                Flavor::new("large", 4, 8192, 80),
            ],
            faults: Faults::default(),
            loopback_addresses: false,
            seed: None,
            list_lag: Duration::ZERO,
        }
    }
}

/// Injected failures, as probabilities between 0 and 1.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Faults {
    /// Every call fails before doing anything with this probability.
    pub error_rate: f64,
    /// Per-method overrides of `error_rate` (`create_instance`, `get_instance`, …).
    pub per_method: BTreeMap<String, f64>,
    /// `create_instance` creates the instance but reports a failure, as when a response is lost
    /// or the caller crashes before reading it.
    pub lost_create_response_rate: f64,
}

impl Faults {
    fn rate(&self, method: &str) -> f64 {
        self.per_method
            .get(method)
            .copied()
            .unwrap_or(self.error_rate)
    }
}

struct StoredInstance {
    instance: Instance,
    /// From when lists show it.
    listed_at: Instant,
    ready_at: Instant,
    gone_at: Option<Instant>,
    etcd_cluster: Option<String>,
    /// What the instance found in its user data when it was created.
    etcd_ca: Option<super::EtcdCa>,
    /// The `ClusterConfiguration` its `kubeadm init` uploads.
    cluster_configuration: Option<String>,
}

/// A simulated etcd cluster: members by identifier (instance ID as name) and the leader.
#[derive(Default)]
struct StoredEtcd {
    members: BTreeMap<u64, String>,
    leader: Option<u64>,
    next_id: u64,
}

#[derive(Default)]
struct State {
    instances: BTreeMap<String, StoredInstance>,
    load_balancers: BTreeMap<String, LoadBalancer>,
    next_id: u64,
    create_calls: u64,
    created_per_tag: BTreeMap<String, u32>,
    /// The instance each client token created.
    client_tokens: BTreeMap<String, String>,
    etcd: BTreeMap<String, StoredEtcd>,
    failed_members: std::collections::BTreeSet<String>,
    member_events: Option<tokio::sync::mpsc::UnboundedSender<MemberEvent>>,
    scale_sets: BTreeMap<String, StoredScaleSet>,
    /// The scale set each client token created.
    scale_set_tokens: BTreeMap<String, String>,
    created_scale_sets_per_tag: BTreeMap<String, u32>,
}

/// A scale set: what it keeps (its instances are in [`State::instances`], each naming it).
struct StoredScaleSet {
    id: String,
    tag: String,
    cluster: String,
    zones: Vec<String>,
    capacity: u32,
    model: ScaleSetModel,
    /// From when lists show it.
    listed_at: Instant,
    /// When it vanishes, once deleted.
    gone_at: Option<Instant>,
    /// The zone of its next instance, in turn.
    next_zone: usize,
}

/// What a new instance is made of.
struct Launch {
    tag: String,
    flavor: String,
    zone: Option<String>,
    user_data: Option<UserData>,
    etcd_cluster: Option<String>,
    cluster: Option<String>,
    scale_set: Option<String>,
    revision: Option<String>,
}

impl State {
    /// Advances every instance's state to `now`: booted ones become active, deleted ones vanish.
    fn settle(&mut self, now: Instant) {
        self.instances
            .retain(|_, stored| stored.gone_at.is_none_or(|gone| now < gone));
        let instances = &self.instances;
        self.client_tokens
            .retain(|_, id| instances.contains_key(id));
        for stored in self.instances.values_mut() {
            if stored.instance.status == InstanceStatus::Building && now >= stored.ready_at {
                stored.instance.status = InstanceStatus::Active;
                // kubeadm init starts the first member; kubeadm join adds one.
                if let Some(cluster) = &stored.etcd_cluster {
                    let etcd = self.etcd.entry(cluster.clone()).or_default();
                    etcd.next_id += 1;
                    etcd.members
                        .insert(etcd.next_id, stored.instance.id.clone());
                    if let Some(events) = &self.member_events {
                        let _ = events.send(MemberEvent::Booted {
                            cluster: cluster.clone(),
                            instance: stored.instance.id.clone(),
                            etcd_ca: stored.etcd_ca.clone(),
                        });
                    }
                }
            }
        }
    }

    fn healthy(&self, name: &str) -> bool {
        !self.failed_members.contains(name)
            && self
                .instances
                .get(name)
                .is_some_and(|s| s.instance.status == InstanceStatus::Active)
    }

    /// The cluster as etcd would report it: a leader only while a healthy quorum elects one (the
    /// current one if it is healthy, else the healthy member with the lowest ID).
    fn etcd_view(&mut self, cluster: &str) -> EtcdCluster {
        let Some(etcd) = self.etcd.get(cluster) else {
            return EtcdCluster::default();
        };
        let members: Vec<EtcdMember> = etcd
            .members
            .iter()
            .map(|(id, name)| EtcdMember {
                id: *id,
                name: name.clone(),
                healthy: self.healthy(name),
            })
            .collect();
        let healthy = members.iter().filter(|m| m.healthy).count();
        let leader = if healthy > members.len() / 2 {
            etcd.leader
                .filter(|l| members.iter().any(|m| m.id == *l && m.healthy))
                .or_else(|| members.iter().find(|m| m.healthy).map(|m| m.id))
        } else {
            None
        };
        if let Some(etcd) = self.etcd.get_mut(cluster) {
            etcd.leader = leader;
        }
        EtcdCluster { members, leader }
    }
}

/// A cloud that lives in memory. Cheap to clone through `Arc`; safe to share between tasks.
pub struct SimulatedCloud {
    config: Mutex<CloudConfig>,
    state: Mutex<State>,
    create_gate: watch::Sender<bool>,
    rng: Mutex<fastrand::Rng>,
    faults_injected: std::sync::atomic::AtomicU64,
    responses_lost: std::sync::atomic::AtomicU64,
    api_calls: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for SimulatedCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedCloud")
            .field("instances", &self.instance_count())
            .finish_non_exhaustive()
    }
}

impl Default for SimulatedCloud {
    fn default() -> Self {
        Self::new(CloudConfig::default())
    }
}

impl SimulatedCloud {
    /// A cloud with the given behaviour and nothing in it.
    pub fn new(config: CloudConfig) -> Self {
        let rng = match config.seed {
            Some(seed) => fastrand::Rng::with_seed(seed),
            None => fastrand::Rng::new(),
        };
        Self {
            config: Mutex::new(config),
            state: Mutex::new(State::default()),
            create_gate: watch::channel(false).0,
            rng: Mutex::new(rng),
            faults_injected: Default::default(),
            responses_lost: Default::default(),
            api_calls: Default::default(),
        }
    }

    /// Counts one call of the cloud's API (what a provider asks, not a test's inspection).
    pub(crate) fn count_call(&self) {
        self.api_calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Calls of the cloud's API so far (over HTTP, [`crate::cloud::CloudServer`]).
    pub fn api_calls(&self) -> u64 {
        self.api_calls.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A draw in `[0, 1)` from the cloud's generator.
    fn draw(&self) -> f64 {
        lock(&self.rng).f64()
    }

    /// A list lag: uniform in `[0, max]`, `max` bounded by [`MAX_LIST_LAG`].
    fn lag(&self, max: Duration) -> Duration {
        if max.is_zero() {
            return Duration::ZERO;
        }
        max.min(MAX_LIST_LAG).mul_f64(self.draw())
    }

    /// `duration` with up to ± `jitter` of it added.
    fn jittered(&self, duration: Duration, jitter: f64) -> Duration {
        if duration.is_zero() || jitter <= 0.0 {
            return duration;
        }
        duration.mul_f64((1.0 + jitter.min(1.0) * (self.draw() * 2.0 - 1.0)).max(0.0))
    }

    /// Calls failed on purpose so far (`error_rate`), and creates that happened but answered
    /// with a failure (`lost_create_response_rate`).
    pub fn faults_landed(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering;
        (
            self.faults_injected.load(Ordering::Relaxed),
            self.responses_lost.load(Ordering::Relaxed),
        )
    }

    /// Changes the injected failures from now on.
    pub fn set_faults(&self, faults: Faults) {
        lock(&self.config).faults = faults;
    }

    /// While held, `create_instance` stores the instance and then waits before answering: the
    /// window in which a caller that crashes has created an instance it never heard of.
    pub fn hold_creates(&self, hold: bool) {
        self.create_gate.send_replace(hold);
    }

    /// Reports, from now on, every control-plane instance that starts running or vanishes to
    /// `observer` — what [`EtcdProcesses`](super::EtcdProcesses) needs to run a real etcd member per
    /// instance. The simulated membership is kept either way.
    pub fn observe_etcd_members(&self, observer: tokio::sync::mpsc::UnboundedSender<MemberEvent>) {
        lock(&self.state).member_events = Some(observer);
    }

    /// From now on the etcd member of `instance` does not answer (its disk failed, its process
    /// crashed) although the instance runs: a fault for remediation tests.
    pub fn fail_etcd_member(&self, instance: &str) {
        lock(&self.state)
            .failed_members
            .insert(instance.to_string());
    }

    // ---- inspection, for tests and benchmarks ----

    /// Instances that exist now (building, active or deleting).
    pub fn instances(&self) -> Vec<Instance> {
        let config = lock(&self.config).clone();
        let mut state = lock(&self.state);
        self.advance(&mut state, &config, Instant::now());
        state
            .instances
            .values()
            .map(|s| s.instance.clone())
            .collect()
    }

    /// The `ClusterConfiguration` that `instance`'s `kubeadm init` read from its user data (a
    /// control-plane instance whose bootstrap data runs `kubeadm init`), as kubeadm uploads it
    /// to the workload cluster.
    pub fn init_cluster_configuration(&self, instance: &str) -> Option<String> {
        lock(&self.state)
            .instances
            .get(instance)
            .and_then(|stored| stored.cluster_configuration.clone())
    }

    /// How many instances exist now.
    pub fn instance_count(&self) -> usize {
        self.instances().len()
    }

    /// How many instances were ever created with `tag` by `create_instance` (a scale set's
    /// launches are not counted: [`Self::max_scale_sets_per_tag`] counts their scale sets).
    pub fn created_with_tag(&self, tag: &str) -> u32 {
        lock(&self.state)
            .created_per_tag
            .get(tag)
            .copied()
            .unwrap_or(0)
    }

    /// The most instances ever created under one tag: 1 means no idempotency key was ever used
    /// twice.
    pub fn max_created_per_tag(&self) -> u32 {
        lock(&self.state)
            .created_per_tag
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// How many `create_instance` calls were made (including failed ones).
    pub fn create_calls(&self) -> u64 {
        lock(&self.state).create_calls
    }

    /// Load balancers that exist now.
    pub fn load_balancers(&self) -> Vec<LoadBalancer> {
        lock(&self.state).load_balancers.values().cloned().collect()
    }

    // ---- simulation ----

    /// The instances a list shows now (lists lag behind creates) that `wanted` picks.
    fn listed(&self, wanted: impl Fn(&Instance) -> bool) -> Vec<Instance> {
        let config = lock(&self.config).clone();
        let mut state = lock(&self.state);
        let now = Instant::now();
        self.advance(&mut state, &config, now);
        state
            .instances
            .values()
            .filter(|s| s.listed_at <= now && wanted(&s.instance))
            .map(|s| s.instance.clone())
            .collect()
    }

    /// Stores a new instance: `Building` until it boots, listed after the list lag. An instance
    /// a caller created (not a scale set) counts towards [`Self::created_with_tag`].
    fn launch(
        &self,
        state: &mut State,
        config: &CloudConfig,
        now: Instant,
        launch: Launch,
    ) -> Instance {
        state.next_id += 1;
        let n = state.next_id;
        let instance = Instance {
            id: format!("i-{n:08x}"),
            tag: launch.tag.clone(),
            flavor: launch.flavor,
            zone: launch.zone,
            address: if config.loopback_addresses {
                // 127.1.0.0/16 upwards: never 127.0.0.1, reachable on this machine.
                format!(
                    "127.{}.{}.{}",
                    1 + ((n >> 16) & 0x7f),
                    (n >> 8) & 0xff,
                    n & 0xff
                )
            } else {
                format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
            },
            status: InstanceStatus::Building,
            control_plane: launch.etcd_cluster.is_some(),
            cluster: launch.cluster,
            scale_set: launch.scale_set,
            revision: launch.revision,
        };
        let ready_at = now + self.jittered(config.boot_time, config.jitter);
        state.instances.insert(
            instance.id.clone(),
            StoredInstance {
                instance: instance.clone(),
                listed_at: now + self.lag(config.list_lag),
                ready_at,
                gone_at: None,
                etcd_ca: launch
                    .etcd_cluster
                    .as_ref()
                    .and(launch.user_data.as_ref())
                    .and_then(super::boot::etcd_ca),
                cluster_configuration: launch
                    .etcd_cluster
                    .as_ref()
                    .and(launch.user_data.as_ref())
                    .and_then(super::boot::init_cluster_configuration),
                etcd_cluster: launch.etcd_cluster,
            },
        );
        if instance.scale_set.is_none() {
            *state.created_per_tag.entry(launch.tag).or_insert(0) += 1;
        }
        instance
    }

    /// Advances the cloud to `now`, scale sets included: each keeps its capacity, launching
    /// instances of its model (as far as the quota allows) or terminating its newest, and a
    /// deleted one vanishes once its instances are gone.
    fn advance(&self, state: &mut State, config: &CloudConfig, now: Instant) {
        state.settle(now);
        let instances = &state.instances;
        state.scale_sets.retain(|id, set| {
            set.gone_at.is_none_or(|gone| now < gone)
                || instances
                    .values()
                    .any(|s| s.instance.scale_set.as_deref() == Some(id.as_str()))
        });
        let ids: Vec<String> = state
            .scale_sets
            .iter()
            .filter(|(_, set)| set.gone_at.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let mut members: Vec<String> = state
                .instances
                .values()
                .filter(|s| s.gone_at.is_none() && s.instance.scale_set.as_deref() == Some(&id))
                .map(|s| s.instance.id.clone())
                .collect();
            members.sort();
            let Some(set) = state.scale_sets.get(&id) else {
                continue;
            };
            let capacity = usize::try_from(set.capacity).unwrap_or(usize::MAX);
            // Below its count: the cloud's own choice, the newest first.
            while members.len() > capacity {
                let Some(victim) = members.pop() else { break };
                if let Some(stored) = state.instances.get_mut(&victim) {
                    stored.instance.status = InstanceStatus::Deleting;
                    stored.gone_at = Some(now + self.jittered(config.delete_time, config.jitter));
                }
            }
            for _ in members.len()..capacity {
                if config
                    .max_instances
                    .is_some_and(|limit| state.instances.len() >= limit)
                {
                    break;
                }
                let Some(set) = state.scale_sets.get_mut(&id) else {
                    break;
                };
                let zone = (!set.zones.is_empty())
                    .then(|| set.zones[set.next_zone % set.zones.len()].clone());
                set.next_zone += 1;
                let launch = Launch {
                    tag: set.tag.clone(),
                    flavor: set.model.flavor.clone(),
                    zone,
                    user_data: None,
                    etcd_cluster: None,
                    cluster: Some(set.cluster.clone()),
                    scale_set: Some(id.clone()),
                    revision: Some(set.model.revision.clone()),
                };
                self.launch(state, config, now, launch);
            }
        }
        state.settle(now);
    }

    /// The scale set `id` as the cloud reports it now: its instances as lists show them.
    fn scale_set_view(state: &State, id: &str, now: Instant) -> Option<ScaleSet> {
        let set = state.scale_sets.get(id)?;
        let mut instances: Vec<Instance> = state
            .instances
            .values()
            .filter(|s| s.listed_at <= now && s.instance.scale_set.as_deref() == Some(id))
            .map(|s| s.instance.clone())
            .collect();
        instances.sort_by(|a, b| a.id.cmp(&b.id));
        Some(ScaleSet {
            id: set.id.clone(),
            tag: set.tag.clone(),
            cluster: set.cluster.clone(),
            capacity: set.capacity,
            model: set.model.clone(),
            deleting: set.gone_at.is_some(),
            instances,
        })
    }

    /// Scale sets that exist now, with all their instances.
    pub fn scale_sets(&self) -> Vec<ScaleSet> {
        let config = lock(&self.config).clone();
        let mut state = lock(&self.state);
        let now = Instant::now();
        self.advance(&mut state, &config, now);
        let ids: Vec<String> = state.scale_sets.keys().cloned().collect();
        ids.iter()
            .filter_map(|id| Self::scale_set_view(&state, id, now + MAX_LIST_LAG))
            .collect()
    }

    /// The most scale sets ever created under one tag: 1 means no pool's key was ever used
    /// twice.
    pub fn max_scale_sets_per_tag(&self) -> u32 {
        lock(&self.state)
            .created_scale_sets_per_tag
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Waits the call latency and decides whether `method` fails.
    async fn call(&self, method: &'static str) -> Result<CloudConfig, CloudError> {
        let config = lock(&self.config).clone();
        let latency = self.jittered(config.call_latency, config.jitter);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if self.draw() < config.faults.rate(method) {
            self.faults_injected
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(CloudError::Injected {
                method: method.to_string(),
            });
        }
        Ok(config)
    }
}

#[async_trait]
impl Compute for SimulatedCloud {
    async fn create_instance(&self, request: InstanceRequest) -> Result<Instance, CloudError> {
        lock(&self.state).create_calls += 1;
        let config = self.call("create_instance").await?;
        if !config.flavors.iter().any(|f| f.name == request.flavor) {
            return Err(CloudError::UnknownFlavor {
                flavor: request.flavor,
            });
        }
        let instance = {
            let mut state = lock(&self.state);
            let now = Instant::now();
            state.settle(now);
            // A create with a client token already used answers with the instance it made, as
            // EC2's ClientToken does: retrying a create whose answer was lost makes no second one.
            if let Some(existing) = request
                .client_token
                .as_ref()
                .and_then(|token| state.client_tokens.get(token))
                .and_then(|id| state.instances.get(id))
            {
                return Ok(existing.instance.clone());
            }
            if let Some(limit) = config.max_instances
                && state.instances.len() >= limit
            {
                return Err(CloudError::QuotaExceeded { limit });
            }
            let instance = self.launch(
                &mut state,
                &config,
                now,
                Launch {
                    tag: request.tag,
                    flavor: request.flavor,
                    zone: request.zone,
                    user_data: request.user_data,
                    etcd_cluster: request.etcd_cluster,
                    cluster: request.cluster,
                    scale_set: None,
                    revision: None,
                },
            );
            if let Some(token) = request.client_token {
                state.client_tokens.insert(token, instance.id.clone());
            }
            state.settle(now);
            state
                .instances
                .get(&instance.id)
                .map(|s| s.instance.clone())
                .unwrap_or(instance)
        };
        let mut gate = self.create_gate.subscribe();
        while *gate.borrow_and_update() {
            if gate.changed().await.is_err() {
                break;
            }
        }
        if self.draw() < config.faults.lost_create_response_rate {
            self.responses_lost
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(CloudError::Injected {
                method: "create_instance (response lost)".to_string(),
            });
        }
        Ok(instance)
    }

    async fn get_instance(&self, id: &str) -> Result<Option<Instance>, CloudError> {
        self.call("get_instance").await?;
        let mut state = lock(&self.state);
        state.settle(Instant::now());
        Ok(state.instances.get(id).map(|s| s.instance.clone()))
    }

    async fn find_instances(&self, tag: &str) -> Result<Vec<Instance>, CloudError> {
        self.call("find_instances").await?;
        Ok(self.listed(|instance| instance.tag == tag))
    }

    async fn cluster_instances(&self, cluster: &str) -> Result<Vec<Instance>, CloudError> {
        self.call("cluster_instances").await?;
        Ok(self.listed(|instance| instance.cluster.as_deref() == Some(cluster)))
    }

    async fn delete_instance(&self, id: &str) -> Result<(), CloudError> {
        let config = self.call("delete_instance").await?;
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let now = Instant::now();
        if let Some(stored) = state.instances.get_mut(id)
            && stored.gone_at.is_none()
        {
            stored.instance.status = InstanceStatus::Deleting;
            stored.gone_at = Some(now + self.jittered(config.delete_time, config.jitter));
            // The machine shuts down: its etcd member stops answering.
            if let (Some(events), Some(cluster)) = (&state.member_events, &stored.etcd_cluster) {
                let _ = events.send(MemberEvent::Gone {
                    cluster: cluster.clone(),
                    instance: id.to_string(),
                });
            }
        }
        state.settle(now);
        Ok(())
    }

    async fn get_flavor(&self, name: &str) -> Result<Option<Flavor>, CloudError> {
        let config = self.call("get_flavor").await?;
        Ok(config.flavors.into_iter().find(|f| f.name == name))
    }
}

#[async_trait]
impl ScaleSets for SimulatedCloud {
    async fn create_scale_set(&self, request: ScaleSetRequest) -> Result<ScaleSet, CloudError> {
        let config = self.call("create_scale_set").await?;
        if !config
            .flavors
            .iter()
            .any(|f| f.name == request.model.flavor)
        {
            return Err(CloudError::UnknownFlavor {
                flavor: request.model.flavor,
            });
        }
        let mut state = lock(&self.state);
        let now = Instant::now();
        self.advance(&mut state, &config, now);
        let existing = request
            .client_token
            .as_ref()
            .and_then(|token| state.scale_set_tokens.get(token))
            .cloned();
        if let Some(view) = existing.and_then(|id| Self::scale_set_view(&state, &id, now)) {
            return Ok(view);
        }
        state.next_id += 1;
        let id = format!("ss-{:08x}", state.next_id);
        state.scale_sets.insert(
            id.clone(),
            StoredScaleSet {
                id: id.clone(),
                tag: request.tag.clone(),
                cluster: request.cluster,
                zones: request.zones,
                capacity: request.capacity,
                model: request.model,
                listed_at: now + self.lag(config.list_lag),
                gone_at: None,
                next_zone: 0,
            },
        );
        *state
            .created_scale_sets_per_tag
            .entry(request.tag)
            .or_insert(0) += 1;
        if let Some(token) = request.client_token {
            state.scale_set_tokens.insert(token, id.clone());
        }
        self.advance(&mut state, &config, now);
        Self::scale_set_view(&state, &id, now).ok_or_else(|| CloudError::Unreachable {
            reason: format!("scale set {id} vanished as it was created"),
        })
    }

    async fn get_scale_set(&self, id: &str) -> Result<Option<ScaleSet>, CloudError> {
        let config = self.call("get_scale_set").await?;
        let mut state = lock(&self.state);
        let now = Instant::now();
        self.advance(&mut state, &config, now);
        Ok(Self::scale_set_view(&state, id, now))
    }

    async fn find_scale_sets(&self, tag: &str) -> Result<Vec<ScaleSet>, CloudError> {
        let config = self.call("find_scale_sets").await?;
        let mut state = lock(&self.state);
        let now = Instant::now();
        self.advance(&mut state, &config, now);
        let ids: Vec<String> = state
            .scale_sets
            .values()
            .filter(|set| set.tag == tag && set.listed_at <= now)
            .map(|set| set.id.clone())
            .collect();
        Ok(ids
            .iter()
            .filter_map(|id| Self::scale_set_view(&state, id, now))
            .collect())
    }

    async fn set_scale_set_model(&self, id: &str, model: ScaleSetModel) -> Result<(), CloudError> {
        let config = self.call("set_scale_set_model").await?;
        if !config.flavors.iter().any(|f| f.name == model.flavor) {
            return Err(CloudError::UnknownFlavor {
                flavor: model.flavor,
            });
        }
        let mut state = lock(&self.state);
        if let Some(set) = state.scale_sets.get_mut(id) {
            set.model = model;
        }
        Ok(())
    }

    async fn set_scale_set_capacity(&self, id: &str, capacity: u32) -> Result<(), CloudError> {
        let config = self.call("set_scale_set_capacity").await?;
        let mut state = lock(&self.state);
        if let Some(set) = state.scale_sets.get_mut(id) {
            set.capacity = capacity;
        }
        self.advance(&mut state, &config, Instant::now());
        Ok(())
    }

    async fn remove_scale_set_instances(
        &self,
        id: &str,
        instances: &[String],
    ) -> Result<(), CloudError> {
        let config = self.call("remove_scale_set_instances").await?;
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let now = Instant::now();
        state.settle(now);
        for instance in instances {
            let Some(stored) = state.instances.get_mut(instance) else {
                continue;
            };
            if stored.instance.scale_set.as_deref() != Some(id) || stored.gone_at.is_some() {
                continue;
            }
            stored.instance.status = InstanceStatus::Deleting;
            stored.gone_at = Some(now + self.jittered(config.delete_time, config.jitter));
            if let Some(set) = state.scale_sets.get_mut(id) {
                set.capacity = set.capacity.saturating_sub(1);
            }
        }
        self.advance(state, &config, now);
        Ok(())
    }

    async fn delete_scale_set(&self, id: &str) -> Result<(), CloudError> {
        let config = self.call("delete_scale_set").await?;
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let now = Instant::now();
        let Some(set) = state.scale_sets.get_mut(id) else {
            return Ok(());
        };
        if set.gone_at.is_none() {
            set.gone_at = Some(now + self.jittered(config.delete_time, config.jitter));
            set.capacity = 0;
        }
        for stored in state.instances.values_mut() {
            if stored.instance.scale_set.as_deref() == Some(id) && stored.gone_at.is_none() {
                stored.instance.status = InstanceStatus::Deleting;
                stored.gone_at = Some(now + self.jittered(config.delete_time, config.jitter));
            }
        }
        self.advance(state, &config, now);
        Ok(())
    }
}

#[async_trait]
impl EtcdClusters for SimulatedCloud {
    async fn etcd_cluster(&self, cluster: &str) -> Result<EtcdCluster, CloudError> {
        self.call("etcd_cluster").await?;
        let mut state = lock(&self.state);
        state.settle(Instant::now());
        Ok(state.etcd_view(cluster))
    }

    async fn move_etcd_leader(&self, cluster: &str, id: u64) -> Result<(), CloudError> {
        self.call("move_etcd_leader").await?;
        let mut state = lock(&self.state);
        state.settle(Instant::now());
        let view = state.etcd_view(cluster);
        if !view.members.iter().any(|m| m.id == id && m.healthy) || view.leader.is_none() {
            return Err(CloudError::EtcdMember {
                cluster: cluster.to_string(),
                id,
                reason: "cannot lead: it is missing or not healthy, or there is no quorum".into(),
            });
        }
        if let Some(etcd) = state.etcd.get_mut(cluster) {
            etcd.leader = Some(id);
        }
        Ok(())
    }

    async fn remove_etcd_member(&self, cluster: &str, id: u64) -> Result<(), CloudError> {
        self.call("remove_etcd_member").await?;
        let mut state = lock(&self.state);
        if let Some(etcd) = state.etcd.get_mut(cluster) {
            etcd.members.remove(&id);
            if etcd.leader == Some(id) {
                etcd.leader = None;
            }
            if etcd.members.is_empty() {
                state.etcd.remove(cluster);
            }
        }
        Ok(())
    }
}

#[async_trait]
impl LoadBalancers for SimulatedCloud {
    async fn create_load_balancer(&self, tag: &str) -> Result<LoadBalancer, CloudError> {
        self.call("create_load_balancer").await?;
        let mut state = lock(&self.state);
        state.next_id += 1;
        let n = state.next_id;
        let lb = LoadBalancer {
            id: format!("lb-{n:08x}"),
            tag: tag.to_string(),
            address: format!("192.0.2.{}", n % 250 + 1),
            port: 6443,
            provisioning: false,
        };
        state.load_balancers.insert(lb.id.clone(), lb.clone());
        Ok(lb)
    }

    async fn find_load_balancers(&self, tag: &str) -> Result<Vec<LoadBalancer>, CloudError> {
        self.call("find_load_balancers").await?;
        Ok(lock(&self.state)
            .load_balancers
            .values()
            .filter(|lb| lb.tag == tag)
            .cloned()
            .collect())
    }

    async fn delete_load_balancer(&self, id: &str) -> Result<(), CloudError> {
        self.call("delete_load_balancer").await?;
        lock(&self.state).load_balancers.remove(id);
        Ok(())
    }
}

/// The guarded value, also after a panic elsewhere poisoned the lock (the state stays usable).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(tag: &str) -> InstanceRequest {
        InstanceRequest {
            tag: tag.into(),
            flavor: "small".into(),
            zone: None,
            user_data_len: 10,
            user_data: None,
            etcd_cluster: None,
            client_token: None,
            cluster: None,
        }
    }

    fn scale_set_request(tag: &str, capacity: u32) -> ScaleSetRequest {
        ScaleSetRequest {
            tag: tag.into(),
            cluster: "ns.c".into(),
            zones: vec!["zone-a".into(), "zone-b".into()],
            capacity,
            model: ScaleSetModel {
                flavor: "small".into(),
                revision: "r-1".into(),
                user_data_len: 10,
            },
            client_token: Some(tag.into()),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_scale_set_keeps_its_capacity_from_its_model_and_removes_only_what_it_is_told() {
        let cloud = SimulatedCloud::new(CloudConfig {
            boot_time: Duration::from_secs(10),
            delete_time: Duration::from_secs(5),
            ..CloudConfig::default()
        });
        let made = cloud
            .create_scale_set(scale_set_request("pool", 3))
            .await
            .unwrap();
        let again = cloud
            .create_scale_set(scale_set_request("pool", 3))
            .await
            .unwrap();
        assert_eq!(made.id, again.id, "a client token makes one scale set");
        assert_eq!(cloud.max_scale_sets_per_tag(), 1);
        assert_eq!(made.instances.len(), 3);
        assert!(made.instances.iter().all(|i| {
            i.revision.as_deref() == Some("r-1")
                && i.cluster.as_deref() == Some("ns.c")
                && i.scale_set.as_deref() == Some(made.id.as_str())
        }));
        let zones: Vec<_> = made.instances.iter().map(|i| i.zone.clone()).collect();
        assert_eq!(
            zones,
            [Some("zone-a"), Some("zone-b"), Some("zone-a")].map(|z| z.map(String::from))
        );
        assert_eq!(cloud.created_with_tag("pool"), 0);

        tokio::time::advance(Duration::from_secs(11)).await;
        let set = cloud.get_scale_set(&made.id).await.unwrap().unwrap();
        assert!(
            set.instances
                .iter()
                .all(|i| i.status == InstanceStatus::Active)
        );
        let model = ScaleSetModel {
            revision: "r-2".into(),
            ..set.model.clone()
        };
        cloud.set_scale_set_model(&made.id, model).await.unwrap();
        let victim = set.instances[0].id.clone();
        cloud
            .remove_scale_set_instances(&made.id, &[victim.clone(), "i-elsewhere".into()])
            .await
            .unwrap();
        let set = cloud.get_scale_set(&made.id).await.unwrap().unwrap();
        assert_eq!(set.capacity, 2, "each removal lowers the capacity");
        assert_eq!(
            set.instances.len(),
            3,
            "the victim is leaving, nothing new launched"
        );
        assert!(
            set.instances
                .iter()
                .any(|i| i.id == victim && i.status == InstanceStatus::Deleting)
        );

        cloud.set_scale_set_capacity(&made.id, 3).await.unwrap();
        let set = cloud.get_scale_set(&made.id).await.unwrap().unwrap();
        let new: Vec<_> = set
            .instances
            .iter()
            .filter(|i| i.status == InstanceStatus::Building)
            .collect();
        assert_eq!(new.len(), 1);
        assert_eq!(
            new[0].revision.as_deref(),
            Some("r-2"),
            "launched from the new model"
        );

        cloud.delete_scale_set(&made.id).await.unwrap();
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(cloud.scale_sets().is_empty());
        assert_eq!(cloud.instance_count(), 0);
    }

    #[tokio::test]
    async fn instances_boot_and_delete_over_time() {
        tokio::time::pause();
        let cloud = SimulatedCloud::new(CloudConfig {
            boot_time: Duration::from_secs(10),
            delete_time: Duration::from_secs(5),
            ..CloudConfig::default()
        });
        let created = cloud.create_instance(request("a")).await.unwrap();
        assert_eq!(created.status, InstanceStatus::Building);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(
            cloud
                .get_instance(&created.id)
                .await
                .unwrap()
                .unwrap()
                .status,
            InstanceStatus::Active
        );
        cloud.delete_instance(&created.id).await.unwrap();
        assert_eq!(
            cloud
                .get_instance(&created.id)
                .await
                .unwrap()
                .unwrap()
                .status,
            InstanceStatus::Deleting
        );
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(cloud.get_instance(&created.id).await.unwrap(), None);
        assert_eq!(cloud.instance_count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn lists_lag_behind_creates_and_a_client_token_makes_one_instance() {
        let cloud = SimulatedCloud::new(CloudConfig {
            list_lag: Duration::from_secs(600),
            seed: Some(3),
            ..CloudConfig::default()
        });
        let mut made = Vec::new();
        for n in 0..10 {
            let mut tokened = request(&format!("t{n}"));
            tokened.client_token = Some(format!("t{n}"));
            let first = cloud.create_instance(tokened.clone()).await.unwrap();
            let again = cloud.create_instance(tokened).await.unwrap();
            assert_eq!(first.id, again.id, "a client token makes one instance");
            assert_eq!(
                cloud.get_instance(&first.id).await.unwrap().map(|i| i.id),
                Some(first.id.clone()),
                "reads by ID see it at once"
            );
            made.push(first);
        }
        assert_eq!(cloud.max_created_per_tag(), 1);
        let mut hidden = 0;
        for instance in &made {
            if cloud
                .find_instances(&instance.tag)
                .await
                .unwrap()
                .is_empty()
            {
                hidden += 1;
            }
        }
        assert!(hidden > 0, "lists lag behind creates");
        // However long the configured lag, lists catch up within the promised bound.
        tokio::time::advance(MAX_LIST_LAG).await;
        for instance in &made {
            assert_eq!(cloud.find_instances(&instance.tag).await.unwrap().len(), 1);
        }
        // Without a token a second create makes a second instance.
        cloud.create_instance(request("t0")).await.unwrap();
        assert_eq!(cloud.created_with_tag("t0"), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_lists_its_own_instances_after_the_lists_lag() {
        let cloud = SimulatedCloud::new(CloudConfig {
            list_lag: Duration::from_secs(1),
            seed: Some(5),
            ..CloudConfig::default()
        });
        for (tag, cluster) in [("a1", "ns.a"), ("a2", "ns.a"), ("b1", "ns.b")] {
            let mut made = request(tag);
            made.cluster = Some(cluster.into());
            cloud.create_instance(made).await.unwrap();
        }
        cloud.create_instance(request("none")).await.unwrap();
        tokio::time::advance(MAX_LIST_LAG).await;
        let mut listed: Vec<_> = cloud
            .cluster_instances("ns.a")
            .await
            .unwrap()
            .into_iter()
            .map(|i| i.tag)
            .collect();
        listed.sort();
        assert_eq!(listed, ["a1", "a2"]);
        assert_eq!(cloud.cluster_instances("ns.b").await.unwrap().len(), 1);
        assert!(cloud.cluster_instances("ns").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn creating_twice_makes_two_and_inspection_sees_it() {
        let cloud = SimulatedCloud::default();
        cloud.create_instance(request("k")).await.unwrap();
        cloud.create_instance(request("k")).await.unwrap();
        assert_eq!(cloud.find_instances("k").await.unwrap().len(), 2);
        assert_eq!(cloud.max_created_per_tag(), 2);
        assert_eq!(cloud.create_calls(), 2);
    }

    #[tokio::test]
    async fn quota_and_flavors_are_enforced() {
        let cloud = SimulatedCloud::new(CloudConfig {
            max_instances: Some(1),
            ..CloudConfig::default()
        });
        cloud.create_instance(request("a")).await.unwrap();
        assert_eq!(
            cloud.create_instance(request("b")).await,
            Err(CloudError::QuotaExceeded { limit: 1 })
        );
        assert_eq!(
            cloud.get_flavor("medium").await.unwrap().map(|f| f.vcpus),
            Some(2)
        );
        assert_eq!(cloud.get_flavor("huge").await, Ok(None));
        let mut huge = request("c");
        huge.flavor = "huge".into();
        assert_eq!(
            cloud.create_instance(huge).await,
            Err(CloudError::UnknownFlavor {
                flavor: "huge".into()
            })
        );
    }

    #[tokio::test]
    async fn injected_failures_follow_the_configured_rates() {
        let cloud = SimulatedCloud::default();
        cloud.set_faults(Faults {
            error_rate: 1.0,
            ..Faults::default()
        });
        assert!(matches!(
            cloud.find_instances("x").await,
            Err(CloudError::Injected { .. })
        ));
        cloud.set_faults(Faults {
            lost_create_response_rate: 1.0,
            ..Faults::default()
        });
        assert!(cloud.create_instance(request("lost")).await.is_err());
        assert_eq!(
            cloud.find_instances("lost").await.unwrap().len(),
            1,
            "created despite the error"
        );
    }

    #[tokio::test]
    async fn held_creates_store_first_and_answer_later() {
        let cloud = std::sync::Arc::new(SimulatedCloud::default());
        cloud.hold_creates(true);
        let task = tokio::spawn({
            let cloud = std::sync::Arc::clone(&cloud);
            async move { cloud.create_instance(request("held")).await }
        });
        while cloud.instance_count() == 0 {
            tokio::task::yield_now().await;
        }
        assert!(!task.is_finished());
        cloud.hold_creates(false);
        assert!(task.await.unwrap().is_ok());
    }
}
