//! The `Manager`: runs a provider's reconcilers the way a production operator runs them.
//!
//! - one client for all controllers, limited to `qps` requests per second on average with bursts of
//!   `burst`;
//! - bounded reconcile concurrency, namespace and label-selector scoping
//!   ([`ReconcilerOptions`]);
//! - `/healthz`, `/readyz` (every controller's cache synced) and `/metrics` on one HTTP address;
//! - leader election on a `coordination.k8s.io/v1` Lease: controllers start only once this replica
//!   leads, and are aborted at once (and [`Manager::run`] returns [`ManagerError::LeadershipLost`])
//!   when it no longer does — another replica may already be reconciling;
//! - graceful shutdown on SIGTERM and SIGINT: in-flight reconciles finish (within
//!   [`ManagerConfig::shutdown_timeout`], then they are aborted), the lease is released.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # async fn demo<M: capi_core::infra::InfraMachine, C: capi_core::infra::InfraCluster>(
//! #     machines: Arc<dyn capi_core::Actuator<M>>, clusters: Arc<dyn capi_core::ClusterActuator<C>>,
//! # ) -> Result<(), capi_actuator::manager::ManagerError> {
//! use capi_actuator::manager::{LeaderElectionConfig, Manager, ManagerConfig};
//!
//! let config = ManagerConfig {
//!     leader_election: Some(LeaderElectionConfig::new("capi-system", "my-provider")),
//!     ..ManagerConfig::default()
//! };
//! let mut manager = Manager::new(kube::Config::infer().await.map_err(kube::Error::InferConfig)?, config).await?;
//! manager.add_machine_reconciler(machines);
//! manager.add_cluster_reconciler(clusters);
//! manager.run().await
//! # }
//! ```

pub mod flags;
mod http;
mod leader;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use capi_core::infra::{InfraCluster, InfraMachine};
use capi_core::{Actuator, ClusterActuator};
use futures::future::BoxFuture;
use kube::Client;
use kube::client::ClientBuilder;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use leader::LeaderElectionConfig;

use crate::bootstrap::KubeadmConfigReconciler;
use crate::cluster::InfraClusterReconciler;
use crate::machine::InfraMachineReconciler;
use crate::metrics::Metrics;
use crate::options::ReconcilerOptions;
use crate::readiness::Readiness;
use crate::reconciler::Reconciler;
use crate::standalone::{
    ClusterController, CoreSettings, DeploymentController, HealthCheckController,
    MachineController, MachineSetController, WorkloadClusters,
};
use capi_core::api::{Cluster, Machine, MachineDeployment, MachineHealthCheck, MachineSet};

/// How a [`Manager`] runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagerConfig {
    /// Options every reconciler gets (concurrency, scope, retries).
    pub reconciler: ReconcilerOptions,
    /// Average API requests per second of the shared client.
    pub qps: f64,
    /// Requests allowed at once above the average.
    pub burst: u32,
    /// Where `/healthz`, `/readyz` and `/metrics` are served. Port 0 picks a free port.
    pub http_addr: SocketAddr,
    /// Leader election; `None` runs the controllers right away (one replica only).
    pub leader_election: Option<LeaderElectionConfig>,
    /// How long a graceful stop waits for in-flight reconciles before aborting them.
    pub shutdown_timeout: Duration,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        Self {
            reconciler: ReconcilerOptions::default(),
            qps: 50.0,
            burst: 100,
            http_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
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
    client: Client,
    config: ManagerConfig,
    listener: TcpListener,
    metrics: Metrics,
    readiness: Readiness,
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
        // `burst` requests per window of `burst / qps` seconds: `qps` on average.
        let window = Duration::from_secs_f64(f64::from(config.burst) / config.qps);
        let rate_limit = tower::limit::RateLimitLayer::new(u64::from(config.burst), window);
        let client = ClientBuilder::try_from(kube_config)?
            .with_layer(&rate_limit)
            .build();
        Self::with_client(client, config).await
    }

    /// A manager whose reconcilers all share `client`, used as given: `config.qps` and
    /// `config.burst` are not applied, so a client built by the caller (with its own layers:
    /// tracing, a proxy, fault injection in tests) brings its own rate limit. Binds the HTTP
    /// address now.
    pub async fn with_client(client: Client, config: ManagerConfig) -> Result<Self, ManagerError> {
        let listener = TcpListener::bind(config.http_addr)
            .await
            .map_err(|source| ManagerError::Bind {
                addr: config.http_addr,
                source,
            })?;
        Ok(Self {
            client,
            config,
            listener,
            metrics: Metrics::new(),
            readiness: Readiness::default(),
            controllers: Vec::new(),
        })
    }

    /// The shared client (rate limited).
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

    /// Registers the reconciler of a provider's machine kind.
    pub fn add_machine_reconciler<M: InfraMachine>(
        &mut self,
        actuator: Arc<dyn Actuator<M>>,
    ) -> &mut Self {
        let reconciler = self.wire(InfraMachineReconciler::new(self.client.clone(), actuator));
        self.controllers.push(Box::new(move |shutdown| {
            Box::pin(reconciler.run(shutdown.wait()))
        }));
        self
    }

    /// Registers the reconciler of a provider's cluster kind.
    pub fn add_cluster_reconciler<C: InfraCluster>(
        &mut self,
        actuator: Arc<dyn ClusterActuator<C>>,
    ) -> &mut Self {
        let reconciler = self.wire(InfraClusterReconciler::new(self.client.clone(), actuator));
        self.controllers.push(Box::new(move |shutdown| {
            Box::pin(reconciler.run(shutdown.wait()))
        }));
        self
    }

    /// Registers the kubeadm bootstrap reconciler (standalone mode; leave it out when upstream's
    /// kubeadm bootstrap provider runs beside this manager).
    pub fn add_bootstrap_reconciler(
        &mut self,
        settings: crate::bootstrap::BootstrapSettings,
    ) -> &mut Self {
        let reconciler = self.wire(KubeadmConfigReconciler::new(
            self.client.clone(),
            Arc::new(settings),
        ));
        self.controllers.push(Box::new(move |shutdown| {
            Box::pin(reconciler.run(shutdown.wait()))
        }));
        self
    }

    /// Registers the core Cluster API controllers — Cluster, Machine, MachineSet,
    /// MachineDeployment, MachineHealthCheck — for standalone mode (leave them out when upstream
    /// Cluster API core runs beside this manager). See [`crate::standalone`].
    pub fn add_core_controllers(&mut self, settings: CoreSettings) -> &mut Self {
        let namespace = self.config.reconciler.namespace.clone();
        let (workloads, node_changes) = WorkloadClusters::new(self.client.clone());
        let workloads = Arc::new(workloads);
        let cluster = self.wire(Reconciler::<Cluster, _>::new(
            self.client.clone(),
            Arc::new(ClusterController::new(
                self.client.clone(),
                namespace.clone(),
                Arc::clone(&workloads),
                settings.clone(),
            )),
        ));
        let machine = self.wire(Reconciler::<Machine, _>::new(
            self.client.clone(),
            Arc::new(MachineController::new(
                self.client.clone(),
                namespace.clone(),
                Arc::clone(&workloads),
                node_changes,
                settings.clone(),
            )),
        ));
        let set = self.wire(Reconciler::<MachineSet, _>::new(
            self.client.clone(),
            Arc::new(MachineSetController::new(
                self.client.clone(),
                namespace,
                settings.clone(),
            )),
        ));
        let deployment = self.wire(Reconciler::<MachineDeployment, _>::new(
            self.client.clone(),
            Arc::new(DeploymentController::new(settings.clone())),
        ));
        let health = self.wire(Reconciler::<MachineHealthCheck, _>::new(
            self.client.clone(),
            Arc::new(HealthCheckController::new(workloads, settings)),
        ));
        self.controllers.push(Box::new(move |shutdown| {
            Box::pin(cluster.run(shutdown.wait()))
        }));
        self.controllers.push(Box::new(move |shutdown| {
            Box::pin(machine.run(shutdown.wait()))
        }));
        self.controllers
            .push(Box::new(move |shutdown| Box::pin(set.run(shutdown.wait()))));
        self.controllers.push(Box::new(move |shutdown| {
            Box::pin(deployment.run(shutdown.wait()))
        }));
        self.controllers.push(Box::new(move |shutdown| {
            Box::pin(health.run(shutdown.wait()))
        }));
        self
    }

    /// Gives a reconciler the manager's options, metrics and readiness.
    fn wire<K: kube::Resource<DynamicType = ()>, A: ?Sized>(
        &self,
        reconciler: Reconciler<K, A>,
    ) -> Reconciler<K, A> {
        reconciler
            .options(self.config.reconciler.clone())
            .metrics(self.metrics.clone())
            .readiness(self.readiness.clone())
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
        let server = tokio::spawn(http::serve(
            self.listener,
            self.metrics.clone(),
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
            .map(|config| leader::LeaderElector::new(self.client.clone(), config));
        if let Some(elector) = &elector {
            tokio::select! {
                () = elector.acquire() => {}
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
        let lost = match &elector {
            Some(elector) => tokio::select! {
                () = elector.hold() => true,
                () = &mut stop => false,
            },
            None => {
                stop.await;
                false
            }
        };
        trigger.fire();
        // After losing the lease another replica may already be reconciling: stop at once. On a
        // normal stop, let in-flight reconciles finish, within the shutdown timeout.
        let grace = if lost {
            Duration::ZERO
        } else {
            self.config.shutdown_timeout
        };
        let deadline = tokio::time::Instant::now() + grace;
        for mut controller in controllers {
            match tokio::time::timeout_at(deadline, &mut controller).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::error!(%error, "a controller task failed"),
                Err(_) => {
                    controller.abort();
                    if !lost {
                        tracing::warn!(timeout = ?grace, "a controller did not stop within the shutdown timeout; aborted");
                    }
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

/// A shutdown signal shared by every task of a manager.
#[derive(Clone)]
struct Shutdown(watch::Receiver<bool>);

struct ShutdownTrigger(watch::Sender<bool>);

impl Shutdown {
    fn new() -> (ShutdownTrigger, Self) {
        let (sender, receiver) = watch::channel(false);
        (ShutdownTrigger(sender), Self(receiver))
    }

    fn wait(self) -> impl Future<Output = ()> + Send + Sync + 'static {
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
