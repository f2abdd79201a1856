//! The controller runtime every controller of this SDK runs on — the infrastructure reconcilers
//! (`capi-actuator`), the core controllers (`capi-controllers`), the kubeadm bootstrap and control
//! plane providers, and an operator author's own controllers of any kind. It adds to kube-runtime
//! what a Cluster API controller needs, the same way for all of them.
//!
//! # Start here
//!
//! A controller is a [`Reconciler`] (its kind `K`, the state `S` its reconciles share) run by a
//! function that builds a [`controller::Controller`] (kube-runtime's builder, serving due
//! requests oldest first) from the reconciler's
//! [`trigger`](Reconciler::trigger) and [`Context`]. Each reconcile ends with a [`plan::Next`]
//! (done, resync, requeue after, failed) that [`Context::reconcile`] turns into the controller's
//! next action, with metrics and per-object backoff. A family of controllers implements
//! [`manager::Controllers`] and is registered with [`Manager::add`], which runs it the way a
//! production operator runs: a rate-limited client of its own, `/healthz`, `/readyz`, `/metrics`,
//! leader election, graceful shutdown.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use capi_runtime::manager::{Controllers, Manager, ManagerConfig};
//! use capi_runtime::plan::Next;
//! use capi_runtime::{Reconciler, back_off, drain};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use capi_runtime::controller::Controller;
//!
//! struct Settings;
//! struct ConfigMaps;
//!
//! impl Controllers for ConfigMaps {
//!     fn register(self, manager: &mut Manager) {
//!         let reconciler: Reconciler<ConfigMap, Settings> = manager.reconciler(Arc::new(Settings));
//!         manager.add_controller(move |shutdown| async move {
//!             let (trigger, store) = reconciler.trigger();
//!             let context = reconciler.into_context(|state, _, _| state);
//!             let results = Controller::for_stream(trigger, store)
//!                 .graceful_shutdown_on(shutdown.wait())
//!                 .run(
//!                     |map: Arc<ConfigMap>, context: Arc<capi_runtime::Context<Settings>>| async move {
//!                         context.reconcile(map.as_ref(), async { Ok(Next::Resync) }).await
//!                     },
//!                     back_off::<ConfigMap, Settings>,
//!                     context,
//!                 );
//!             drain(results).await;
//!         });
//!     }
//! }
//!
//! # async fn main_() -> Result<(), Box<dyn std::error::Error>> {
//! let mut manager = Manager::new(kube::Config::infer().await?, ManagerConfig::default()).await?;
//! manager.add(ConfigMaps);
//! manager.run().await?;
//! # Ok(())
//! # }
//! ```
//!
//! `examples/src/tenant_cluster` is a complete operator of its own kind on this crate alone.
//!
//! # Modules
//!
//! - [`manager`]: the [`Manager`] — families of controllers, their clients, health, metrics,
//!   leader election, shutdown;
//! - [`controller`]: the loop that runs reconciles — triggers, concurrency, requeues — on a
//!   queue that serves the oldest due request first;
//! - [`Reconciler`] and [`Context`]: the watch that triggers a controller, what its reconciles
//!   share, how a reconcile's end becomes its next action ([`back_off`], [`drain`]);
//! - [`plan`]: what one reconcile decided — conditions, events, the next step;
//! - [`write`](mod@write): writes that cannot clobber someone else's change (merge patches,
//!   status only when it changed);
//! - [`retry`]: jittered requeues, per-object exponential backoff, the memo of configurations
//!   found invalid;
//! - [`cache`]: one shared watch per kind, read-through lookups, compact objects, memo, resync,
//!   the change filter;
//! - [`kubeconfig`]: clients of workload clusters from kubeconfigs a tenant can write — only
//!   what a control plane writes is followed;
//! - [`events`]: Events for `kubectl describe`, repeats folded into series, in bounded memory;
//! - [`metrics`]: controller-runtime-compatible series (existing dashboards work);
//! - [`readiness`]: `/readyz` once every controller's cache is synced;
//! - [`pace`]: spreading work that would otherwise arrive at once;
//! - [`rbac`]: least-privilege rules, stated next to the code that needs them;
//! - [`reasons`]: the condition and event reasons the controllers write;
//! - [`telemetry`]: text or JSON logs.

pub mod cache;
pub mod controller;
pub mod events;
pub mod kubeconfig;
pub mod manager;
pub mod metrics;
mod options;
pub mod pace;
pub mod plan;
pub mod rbac;
pub mod readiness;
pub mod reasons;
mod reconciler;
pub mod retry;
pub mod telemetry;
pub mod write;

pub use manager::Manager;
pub use options::ReconcilerOptions;
pub use reconciler::{Context, ReconcileError, Reconciler, back_off, drain};
