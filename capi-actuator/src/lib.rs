//! The generic reconcile loop of Cluster API infrastructure providers, and the `Manager` that runs
//! it like a production operator.
//!
//! A provider implements [`capi_core::Actuator`] for its machine kind (a type implementing
//! [`capi_core::infra::InfraMachine`]) and [`capi_core::ClusterActuator`] for its cluster kind;
//! this crate does the rest, the same way for every cloud:
//!
//! - [`machine`]: the infrastructure machine reconciler — owner lookup, pause, finalizer, waiting
//!   for cluster infrastructure and bootstrap data, `exists` → `update` or `create`, recording the
//!   provider ID before anything else, deletion until the instance is gone, conditions and events;
//! - [`cluster`]: the infrastructure cluster reconciler — endpoint, failure domains, deletion only
//!   after the cluster's machines are gone;
//! - [`manager`]: one rate-limited client, bounded concurrency, `/healthz`, `/readyz`, `/metrics`,
//!   Lease leader election, graceful shutdown on SIGTERM/SIGINT;
//! - [`metrics`]: controller-runtime-compatible series plus actuator call counters and latency;
//! - [`rbac`]: the ClusterRole rules each part needs (least privilege, generated into manifests);
//! - [`retry`]: jittered requeues and per-object exponential backoff;
//! - [`reasons`]: the condition and event reasons the loop writes;
//! - [`telemetry`]: text or JSON logs;
//! - [`standalone`]: the core Cluster API controllers — Cluster, Machine, MachineSet,
//!   MachineDeployment, MachineHealthCheck — so that a management cluster needs no Go controllers
//!   ([`Manager::add_core_controllers`](manager::Manager::add_core_controllers));
//! - the decisions of the core controllers, as pure functions with their own tests: [`rollout`]
//!   (MachineDeployment fenceposts and rolling-update steps, simulated in golden files),
//!   [`deletion_priority`] (which machines a MachineSet deletes first), [`health`]
//!   (MachineHealthCheck verdicts and remediation short-circuits).
//!
//! Error semantics follow [`capi_core::ActuatorError`]: `RequeueAfter` is not a failure (no
//! backoff, no error log); `Transient` backs off per object up to a cap and resets on success;
//! `InvalidConfiguration` becomes a `Ready=False` condition and the cloud is not called again until
//! the object's generation changes. Status is written only when it changed, with merge patches, and
//! the loop ignores its own status writes, so it cannot trigger itself.
//!
//! See `examples/minimal_provider.rs` for a complete provider in about 140 lines.

pub mod bootstrap;
pub mod cluster;
pub mod deletion_priority;
pub mod health;
mod instrument;
pub mod machine;
pub mod manager;
pub mod metrics;
mod options;
mod plan;
mod predicate;
pub mod rbac;
pub mod readiness;
pub mod reasons;
mod reconciler;
pub mod retry;
pub mod rollout;
pub mod standalone;
pub mod telemetry;
mod write;

pub use options::ReconcilerOptions;
pub use reconciler::{ReconcileError, Reconciler};
