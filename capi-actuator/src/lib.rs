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
//! - [`template`]: the machine template reconciler — `status.capacity` and `status.nodeInfo` from
//!   a [`capi_core::MachineTemplateActuator`], for the cluster autoscaler's scale from zero;
//! - [`informer`]: one watch and store per kind shared by every controller of a manager;
//! - [`packed`]: cached objects kept compressed, decoded when reconciled;
//! - [`memo`]: values that hardly ever change, kept for a while instead of read at every pass;
//! - [`events`]: Events for `kubectl describe`, repeats folded into series, in bounded memory;
//! - [`redact`]: what of a cloud's error message may be shown — bounded, secrets blanked;
//! - [`secret_data`]: one credential read out of a `Secret`, errors naming the key only;
//! - [`manager`]: one rate-limited client, bounded concurrency, `/healthz`, `/readyz`, `/metrics`,
//!   Lease leader election, graceful shutdown on SIGTERM/SIGINT;
//! - [`metrics`]: controller-runtime-compatible series plus actuator call counters and latency;
//! - [`rbac`]: the ClusterRole rules each part needs (least privilege, generated into manifests);
//! - [`retry`]: jittered requeues and per-object exponential backoff;
//! - [`reasons`]: the condition and event reasons the loop writes;
//! - [`telemetry`]: text or JSON logs;
//! - the machinery every controller shares, whichever crate it lives in — the core controllers
//!   (`capi-controllers`), the kubeadm bootstrap provider (`capi-bootstrap`), a vendor's own:
//!   [`Reconciler`] and [`Context`] (the watch that triggers a controller, the context of its
//!   reconciles, how a reconcile's end becomes its next action), [`plan`] (what one reconcile
//!   decided), [`write`](mod@write) (writes that cannot clobber someone else's change), [`predicate`] (which
//!   changes are worth a reconcile), [`cached`] (owners and Clusters read from the controller's
//!   own watch, not the API server), [`readiness`]; they register with the [`Manager`] through
//!   [`Manager::add_controller`](manager::Manager::add_controller) and
//!   [`Manager::add`](manager::Manager::add).
//!
//! Error semantics follow [`capi_core::ActuatorError`]: `RequeueAfter` is not a failure (no
//! backoff, no error log); `Transient` backs off per object up to a cap and resets on success;
//! `InvalidConfiguration` becomes a `Ready=False` condition and the cloud is not called again until
//! the object's generation changes. Status is written only when it changed, with merge patches, and
//! the loop ignores its own status writes, so it cannot trigger itself.
//!
//! See `capi_examples::toy` (`examples/src/toy`) for a complete provider — cluster, machine and
//! machine template kinds, CRDs, RBAC, the three actuators and the binary.

pub mod cached;
pub mod call_retry;
pub mod cluster;
pub mod events;
pub mod informer;
mod instrument;
pub mod machine;
pub mod manager;
pub mod memo;
pub mod metrics;
mod options;
pub mod pace;
pub mod packed;
pub mod plan;
pub mod predicate;
pub mod rbac;
pub mod readiness;
pub mod reasons;
mod reconciler;
pub mod redact;
mod resync;
pub mod retry;
pub mod secret_data;
pub mod telemetry;
pub mod template;
pub mod write;

pub use manager::Manager;
pub use options::ReconcilerOptions;
pub use reconciler::{Context, ReconcileError, Reconciler, back_off, drain};
