//! The `Manager`: runs families of controllers the way a production operator runs them.
//!
//! - a client per family of controllers (each registered with [`Manager::add`], or under a name
//!   with [`Manager::add_to`]), each limited to `qps` requests per second on average with bursts
//!   of `burst` — the budget upstream gives each of its managers (core, kubeadm bootstrap,
//!   KubeadmControlPlane, an infrastructure provider), so that one process running all four gets
//!   what upstream's four processes get, and one busy family cannot starve another;
//! - bounded reconcile concurrency, namespace and label-selector scoping
//!   ([`ReconcilerOptions`]);
//! - `/healthz`, `/readyz` (every controller's cache synced) on one HTTP address, and `/metrics`
//!   there ([`MetricsEndpoint::Insecure`], the default) or over HTTPS to callers the cluster
//!   authorizes ([`MetricsEndpoint::Secure`], as upstream's `--diagnostics-address`);
//! - leader election on a `coordination.k8s.io/v1` Lease: controllers start only once this replica
//!   leads, and are aborted at once (and [`Manager::run`] returns [`ManagerError::LeadershipLost`])
//!   when it no longer does — another replica may already be reconciling — or when no renewal
//!   succeeded within the renew deadline, before the lease can expire; renewals have a client of
//!   their own, outside the rate limit;
//! - graceful shutdown on SIGTERM and SIGINT: in-flight reconciles finish (within
//!   [`ManagerConfig::shutdown_timeout`], then they are aborted), the lease is released.
//!
//! ```no_run
//! # async fn demo(family: impl capi_runtime::manager::Controllers) -> Result<(), capi_runtime::manager::ManagerError> {
//! use capi_runtime::manager::{LeaderElectionConfig, Manager, ManagerConfig};
//!
//! let config = ManagerConfig {
//!     leader_election: Some(LeaderElectionConfig::new("capi-system", "my-operator")),
//!     ..ManagerConfig::default()
//! };
//! let mut manager = Manager::new(kube::Config::infer().await.map_err(kube::Error::InferConfig)?, config).await?;
//! manager.add(family);
//! manager.run().await
//! # }
//! ```

mod diagnostics;
mod http;
mod leader;

pub use diagnostics::{MetricsEndpoint, TlsSetupError, rbac as diagnostics_rbac};

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;
use kube::client::ClientBuilder;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use leader::LeaderElectionConfig;

use crate::cache::informer::Informers;
use crate::metrics::Metrics;
use crate::options::ReconcilerOptions;
use crate::readiness::Readiness;
use crate::reconciler::Reconciler;

/// A family of controllers that registers itself with a [`Manager`] ([`Manager::add`]): the core
/// controllers, the kubeadm bootstrap provider, a vendor's own. The manager knows none of them; it
/// gives each its client, options, metrics, readiness, leader election and shutdown.
pub trait Controllers {
    /// Registers every controller of the family, through [`Manager::reconciler`] and
    /// [`Manager::add_controller`].
    fn register(self, manager: &mut Manager);
}

/// How a [`Manager`] runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagerConfig {
    /// Options every reconciler gets (concurrency, scope, retries).
    pub reconciler: ReconcilerOptions,
    /// Average API requests per second of each family's client ([`Manager::add`]).
    pub qps: f64,
    /// Requests allowed at once above the average, per family.
    pub burst: u32,
    /// Where `/healthz` and `/readyz` (and `/metrics` with [`MetricsEndpoint::Insecure`]) are
    /// served. Port 0 picks a free port.
    pub http_addr: SocketAddr,
    /// Where and how `/metrics` is served.
    pub metrics: MetricsEndpoint,
    /// Leader election; `None` runs the controllers right away (one replica only).
    pub leader_election: Option<LeaderElectionConfig>,
    /// How long a graceful stop waits for in-flight reconciles before aborting them.
    pub shutdown_timeout: Duration,
}

/// The defaults are what upstream Cluster API v1.14 ships for each of its managers (core,
/// kubeadm bootstrap, KubeadmControlPlane, the Docker/in-memory provider): 100 requests per
/// second with bursts of 200, controller-runtime's lease timings (leader election itself is
/// switched on by the shipped manifests, `--leader-elect`), a 30 s graceful stop. One manager
/// here may run all four families of controllers in one process; each family has that budget
/// of its own, as each of upstream's managers has.
impl Default for ManagerConfig {
    fn default() -> Self {
        Self {
            reconciler: ReconcilerOptions::default(),
            qps: 100.0,
            burst: 200,
            http_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            metrics: MetricsEndpoint::Insecure,
            leader_election: None,
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a manager stopped or could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagerError {
    /// The client could not be built.
    #[error("building the Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    /// The HTTP address could not be bound.
    #[error("binding the health/metrics address {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The metrics endpoint's TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    /// The configuration is unusable.
    #[error("invalid manager configuration: {0}")]
    InvalidConfig(String),
    /// This replica lost the leader lease; the controllers were stopped. Exit and restart.
    #[error("lost the leader lease; controllers stopped")]
    LeadershipLost,
}

type ControllerTask = Box<dyn FnOnce(Shutdown) -> BoxFuture<'static, ()> + Send>;

/// Runs reconcilers with a shared rate-limited client, health and metrics endpoints, leader
/// election and graceful shutdown.
pub struct Manager {
    /// The client of the family being registered (outside [`Manager::add`]: the first one).
    client: Client,
    /// Builds a client with its own rate limit for each family; `None` when the caller gave the
    /// client ([`Manager::with_client`]): every family shares it.
    family_clients: Option<FamilyClients>,
    /// The clients of named families ([`Manager::add_to`]), built on first use.
    named_families: HashMap<&'static str, Client>,
    lease_client: Client,
    /// The client every reconciler publishes its events through: with its own rate limit when
    /// the manager built the clients ([`Manager::new`]), so that events never spend a family's
    /// budget; `None` when the caller gave the client (events share it).
    events_client: Option<Client>,
    config: ManagerConfig,
    listener: TcpListener,
    /// The secure metrics endpoint's listener and TLS ([`MetricsEndpoint::Secure`]).
    secure_metrics: Option<(TcpListener, tokio_rustls::TlsAcceptor)>,
    metrics: Metrics,
    readiness: Readiness,
    /// One watch per kind, shared by every controller of the manager.
    informers: Informers,
    controllers: Vec<ControllerTask>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("config", &self.config)
            .field("controllers", &self.controllers.len())
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager talking to the cluster of `kube_config`; binds the HTTP address now.
    pub async fn new(
        kube_config: kube::Config,
        config: ManagerConfig,
    ) -> Result<Self, ManagerError> {
        if !config.qps.is_finite() || config.qps <= 0.0 || config.burst == 0 {
            return Err(ManagerError::InvalidConfig(format!(
                "qps ({}) and burst ({}) must be positive",
                config.qps, config.burst
            )));
        }
        let families = FamilyClients {
            kube_config: kube_config.clone(),
            qps: config.qps,
            burst: config.burst,
        };
        let client = families.build()?;
        // Renewals must not queue behind reconcile traffic: the lease has its own client.
        let lease_client = Client::try_from(kube_config)?;
        let mut manager = Self::with_client(client, config).await?;
        manager.use_lease_client(lease_client);
        manager.events_client = Some(families.build()?);
        manager.family_clients = Some(families);
        Ok(manager)
    }

    /// A manager whose reconcilers all share `client`, used as given: `config.qps` and
    /// `config.burst` are not applied, so a client built by the caller (with its own layers:
    /// tracing, a proxy, fault injection in tests) brings its own rate limit. Leader election
    /// uses `client` too unless [`Manager::use_lease_client`] gives it its own. Binds the HTTP
    /// address now.
    pub async fn with_client(client: Client, config: ManagerConfig) -> Result<Self, ManagerError> {
        if let Some(election) = &config.leader_election {
            election.validate().map_err(ManagerError::InvalidConfig)?;
        }
        let listener = TcpListener::bind(config.http_addr)
            .await
            .map_err(|source| ManagerError::Bind {
                addr: config.http_addr,
                source,
            })?;
        let secure_metrics = match &config.metrics {
            MetricsEndpoint::Insecure => None,
            MetricsEndpoint::Secure { addr } => Some((
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| ManagerError::Bind {
                        addr: *addr,
                        source,
                    })?,
                diagnostics::acceptor()?,
            )),
        };
        Ok(Self {
            secure_metrics,
            lease_client: client.clone(),
            events_client: None,
            client,
            family_clients: None,
            named_families: HashMap::new(),
            config,
            listener,
            metrics: Metrics::new(),
            readiness: Readiness::default(),
            informers: Informers::default(),
            controllers: Vec::new(),
        })
    }

    /// Leader election reads and renews the lease with `client` (by default, from
    /// [`Manager::new`], a client of its own without the reconcilers' rate limit, so that
    /// renewals never wait behind reconcile traffic). Each attempt is bounded by the renew
    /// deadline whatever the client does.
    pub fn use_lease_client(&mut self, client: Client) -> &mut Self {
        self.lease_client = client;
        self
    }

    /// The client of the family being registered (inside [`Controllers::register`]), else of
    /// the first family; rate limited.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The metrics registry served at `/metrics`.
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// The bound HTTP address (useful with port 0).
    pub fn http_addr(&self) -> Result<SocketAddr, std::io::Error> {
        self.listener.local_addr()
    }

    /// The bound HTTPS address of `/metrics` ([`MetricsEndpoint::Secure`]; `None` otherwise).
    pub fn metrics_addr(&self) -> Option<Result<SocketAddr, std::io::Error>> {
        self.secure_metrics
            .as_ref()
            .map(|(listener, _)| listener.local_addr())
    }

    /// Registers a family of controllers — the core controllers (`capi_controllers`), the kubeadm
    /// bootstrap provider (`capi_bootstrap`), a vendor's own — on a client of its own with the
    /// manager's rate limit ([`ManagerConfig::qps`]): [`Manager::client`] and
    /// [`Manager::reconciler`] give that client while it registers. (With
    /// [`Manager::with_client`], every family shares the given client.)
    pub fn add(&mut self, controllers: impl Controllers) -> &mut Self {
        let own = self.family_clients.as_ref().map(FamilyClients::build);
        match own {
            Some(Ok(own)) => self.register_on(own, controllers),
            // Building a client from a configuration `new` already built one from cannot fail
            // in a way it did not then; should it, the family shares the first client.
            _ => self.register_on(self.client.clone(), controllers),
        }
    }

    /// Registers `controllers` on the client of the family called `family`, built with the
    /// manager's rate limit the first time the name is used and shared by every later
    /// registration under the same name: controllers registered separately that upstream runs in
    /// one process (the infrastructure machine, cluster and template reconcilers of a provider)
    /// share one budget, as they would there.
    pub fn add_to(&mut self, family: &'static str, controllers: impl Controllers) -> &mut Self {
        let client = match self.named_families.get(family) {
            Some(client) => client.clone(),
            None => {
                let client = match self.family_clients.as_ref().map(FamilyClients::build) {
                    Some(Ok(own)) => own,
                    _ => self.client.clone(),
                };
                self.named_families.insert(family, client.clone());
                client
            }
        };
        self.register_on(client, controllers)
    }

    fn register_on(&mut self, client: Client, controllers: impl Controllers) -> &mut Self {
        let first = std::mem::replace(&mut self.client, client);
        controllers.register(self);
        self.client = first;
        self
    }

    /// Registers one controller. `run` is called once this replica leads (right away without
    /// leader election), on its own task, with the manager's [`Shutdown`]: the controller stops
    /// taking new work when it completes and returns once in-flight work is done. A controller
    /// still running [`ManagerConfig::shutdown_timeout`] after a stop is aborted, and every
    /// controller is aborted at once when the lease is lost.
    pub fn add_controller<F, Fut>(&mut self, run: F) -> &mut Self
    where
        F: FnOnce(Shutdown) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.controllers
            .push(Box::new(move |shutdown| Box::pin(run(shutdown))));
        self
    }

    /// A reconciler of `K` sharing `state`, wired to this manager: its client, its
    /// [`ReconcilerOptions`] (scope, concurrency, retries), its metrics and its readiness (the
    /// manager is not ready until the reconciler's first list is in).
    pub fn reconciler<K: kube::Resource<DynamicType = ()>, S: ?Sized>(
        &self,
        state: Arc<S>,
    ) -> Reconciler<K, S> {
        self.wire(Reconciler::new(self.client.clone(), state))
    }

    /// The options every reconciler of this manager gets (namespace, label selector,
    /// concurrency, retries).
    pub fn reconciler_options(&self) -> &ReconcilerOptions {
        &self.config.reconciler
    }

    /// The watches every controller of this manager shares ([`crate::cache::informer`]); a family that
    /// keeps caches of its own shares them through it.
    pub fn informers(&self) -> Informers {
        self.informers.clone()
    }

    /// The readiness reported at `/readyz`; a controller that keeps its own caches registers
    /// them here.
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// Gives a reconciler the manager's options, metrics, readiness and shared watches.
    fn wire<K: kube::Resource<DynamicType = ()>, A: ?Sized>(
        &self,
        reconciler: Reconciler<K, A>,
    ) -> Reconciler<K, A> {
        let reconciler = reconciler
            .options(self.config.reconciler.clone())
            .metrics(self.metrics.clone())
            .readiness(self.readiness.clone())
            .informers(self.informers.clone());
        match &self.events_client {
            Some(client) => reconciler.events_client(client.clone()),
            None => reconciler,
        }
    }

    /// Runs until SIGTERM or SIGINT.
    pub async fn run(self) -> Result<(), ManagerError> {
        self.run_until(termination_signal()).await
    }

    /// Runs until `stop` completes (or leadership is lost).
    pub async fn run_until(
        self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ManagerError> {
        let (trigger, shutdown) = Shutdown::new();
        let insecure_metrics = match self.secure_metrics {
            Some((listener, tls)) => {
                // The reconcilers' rate-limited client: reviews never delay lease renewals.
                tokio::spawn(diagnostics::serve(
                    listener,
                    tls,
                    self.metrics.clone(),
                    self.client.clone(),
                    shutdown.clone().wait(),
                ));
                None
            }
            None => Some(self.metrics.clone()),
        };
        let server = tokio::spawn(http::serve(
            self.listener,
            insecure_metrics,
            self.readiness.clone(),
            shutdown.clone().wait(),
        ));
        let stop = async move {
            stop.await;
            tracing::info!("shutting down");
        };
        tokio::pin!(stop);

        let elector = self
            .config
            .leader_election
            .clone()
            .map(|config| leader::LeaderElector::new(self.lease_client.clone(), config));
        let mut leading = None;
        if let Some(elector) = &elector {
            tokio::select! {
                acquired = elector.acquire() => leading = Some((elector, acquired)),
                () = &mut stop => {
                    trigger.fire();
                    let _ = server.await;
                    return Ok(());
                }
            }
        }

        let controllers: Vec<_> = self
            .controllers
            .into_iter()
            .map(|start| tokio::spawn(start(shutdown.clone())))
            .collect();
        let aborts: Vec<_> = controllers.iter().map(|c| c.abort_handle()).collect();
        // The lease is held (renewed) until the controllers are done, the drain after a stop
        // included: in-flight reconciles may write for up to the shutdown timeout, longer than a
        // lease lasts unrenewed.
        let hold = async {
            match leading {
                Some((elector, acquired)) => elector.hold(acquired).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(hold);
        let mut lost = tokio::select! {
            () = &mut hold => true,
            () = &mut stop => false,
        };
        trigger.fire();
        // After losing the lease another replica may already be reconciling: stop at once. On a
        // normal stop, let in-flight reconciles finish, within the shutdown timeout, as long as
        // the lease is still ours.
        if lost {
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        } else {
            let grace = self.config.shutdown_timeout;
            let deadline = tokio::time::Instant::now() + grace;
            let drain = async {
                for mut controller in controllers {
                    match tokio::time::timeout_at(deadline, &mut controller).await {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) if error.is_cancelled() => {}
                        Ok(Err(error)) => tracing::error!(%error, "a controller task failed"),
                        Err(_) => {
                            controller.abort();
                            tracing::warn!(timeout = ?grace, "a controller did not stop within the shutdown timeout; aborted");
                        }
                    }
                }
            };
            tokio::select! {
                () = drain => {}
                () = &mut hold => {
                    aborts.iter().for_each(tokio::task::AbortHandle::abort);
                    lost = true;
                }
            }
        }
        if let Some(elector) = &elector
            && !lost
        {
            elector.release().await;
        }
        let _ = server.await;
        if lost {
            Err(ManagerError::LeadershipLost)
        } else {
            Ok(())
        }
    }
}

/// How [`Manager::new`] builds each family's client: the same configuration, a rate limit of its
/// own.
#[derive(Clone)]
struct FamilyClients {
    kube_config: kube::Config,
    qps: f64,
    burst: u32,
}

impl FamilyClients {
    fn build(&self) -> Result<Client, kube::Error> {
        // `burst` requests per window of `burst / qps` seconds: `qps` on average.
        let window = Duration::from_secs_f64(f64::from(self.burst) / self.qps);
        let rate_limit = tower::limit::RateLimitLayer::new(u64::from(self.burst), window);
        Ok(ClientBuilder::try_from(self.kube_config.clone())?
            .with_layer(&rate_limit)
            .build())
    }
}

/// The manager's stop signal, as a controller registered with [`Manager::add_controller`] gets it.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

struct ShutdownTrigger(watch::Sender<bool>);

impl Shutdown {
    fn new() -> (ShutdownTrigger, Self) {
        let (sender, receiver) = watch::channel(false);
        (ShutdownTrigger(sender), Self(receiver))
    }

    /// Completes when the manager stops (SIGTERM, SIGINT, the `stop` of
    /// [`Manager::run_until`], or a lost lease); hand it to kube-runtime's
    /// `Controller::graceful_shutdown_on`.
    pub fn wait(self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let mut receiver = self.0;
        async move {
            let _ = receiver.wait_for(|fired| *fired).await;
        }
    }
}

impl ShutdownTrigger {
    fn fire(&self) {
        self.0.send_replace(true);
    }
}

/// Completes on SIGTERM or SIGINT.
async fn termination_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = terminate => {}
        result = tokio::signal::ctrl_c() => {
            if let Err(error) = result {
                tracing::warn!(%error, "cannot listen for SIGINT");
                std::future::pending::<()>().await;
            }
        }
    }
}
