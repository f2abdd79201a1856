//! The in-memory infrastructure provider: a simulated cloud and the actuators that drive it.
//!
//! It exists so that the whole SDK can be exercised without a cloud: the quickstart, the
//! integration tests, the benchmarks and the chaos tests run against it.
//!
//! - [`cloud`]: the simulated cloud behind narrow client traits ([`cloud::Compute`],
//!   [`cloud::ScaleSets`], [`cloud::LoadBalancers`]) — latency, jitter, failure injection (including creates whose
//!   response is lost), quota, and an inspection API that tells how many instances exist and how
//!   many were ever created per idempotency key.
//! - [`api`]: the `InMemoryCluster`, `InMemoryMachine`, `InMemoryMachineTemplate` and
//!   `InMemoryMachinePool` kinds.
//! - [`actuator`]: [`actuator::InMemoryActuator`], implementing `Actuator` and `ClusterActuator`
//!   the way a real provider would: find by provider ID or idempotency tag, create only after
//!   looking, delete everything carrying the tag; running machines' resyncs read a listing of
//!   their cluster's instances ([`listing`]) instead of one call each.
//! - [`pool`]: [`pool::InMemoryPoolActuator`], implementing `PoolActuator` over the cloud's scale
//!   sets ([`cloud::ScaleSets`]).
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use provider_inmemory::actuator::InMemoryActuator;
//! use provider_inmemory::cloud::SimulatedCloud;
//!
//! let cloud = Arc::new(SimulatedCloud::default());
//! let actuator = InMemoryActuator::new(cloud.clone(), cloud.clone(), Duration::from_secs(1));
//! assert_eq!(cloud.instance_count(), 0);
//! # let _ = actuator;
//! ```
//!
//! - [`cloud::CloudServer`] / [`cloud::RemoteCloud`]: the same cloud served over HTTP from its own
//!   process (the `inmemory-cloud` binary), so that its state survives managers being killed.
//! - [`etcd`]: the etcd members control-plane instances form in the simulated cloud, reached by
//!   the KubeadmControlPlane controller through [`etcd::SimulatedEtcdAccess`]; with the feature
//!   `real-etcd`, `cloud::EtcdProcesses` runs a real etcd member process per control-plane
//!   instance and `etcd::ProcessEtcdAccess` reaches them over gRPC.
//! - [`nodes`]: simulated kubelets registering a `Node` per running instance in a workload API
//!   server.
//! - `fake_hypervisor` (feature `real-etcd`): the same for the servers of a real cloud whose
//!   hypervisor boots nothing (Nova's fake driver, moto), each booted from its own user data —
//!   a provider's end-to-end tests run kubeadm's control plane and real etcd members this way.
//! - `kubelet` (feature `real-etcd`): the simulated kubelets' HTTPS endpoint, through which a
//!   workload API server forwards ports to a node's pods (SPDY/3.1, `portforward.k8s.io`), so
//!   that upstream's KubeadmControlPlane reaches each control-plane instance's real etcd member
//!   the way it does on a real cloud.

pub mod actuator;
pub mod api;
pub mod cloud;
pub mod endpoints;
pub mod etcd;
#[cfg(feature = "real-etcd")]
pub mod fake_hypervisor;
#[cfg(feature = "real-etcd")]
pub mod kubelet;
pub mod listing;
pub mod nodes;
pub mod pool;
