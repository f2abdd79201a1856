//! The Cluster API SDK for Rust: the one crate a provider depends on, as `kube` is for kube-rs.
//!
//! A Cluster API infrastructure provider implements the [`Actuator`] contract for its cloud
//! (`exists`, `create`, `update`, `delete`, and the same for clusters and machine templates); the
//! SDK's generic reconcilers drive it with every guarantee of the contract — finalizers, pause,
//! owner lookup, bootstrap data, guarded status writes, conditions — and [`ProviderManager`] turns
//! that into a manager binary with upstream's flags, health, metrics and leader election.
//!
//! # Start here
//!
//! - The provider author's guide: [`provider::guide`] — from `cargo new` to a provider beside
//!   upstream Cluster API, with mocks, a real API server and the conformance suite.
//! - The contract: [`Actuator`], [`ClusterActuator`], [`MachineTemplateActuator`] and
//!   [`ActuatorError`], whose table says what the loop does with each kind of failure.
//! - The binary: [`ProviderManager`] and [`ManagerArgs`].
//!
//! # What is re-exported
//!
//! | module | crate | holds |
//! |---|---|---|
//! | [`core`] | `capi-core` | the `cluster.x-k8s.io/v1beta2` types, conditions, labels, CRDs and the contract |
//! | [`runtime`] | `capi-runtime` | the controller runtime: the Manager, reconcilers, shared caches, guarded writes, events, metrics |
//! | [`infrastructure`] | `capi-actuator` | the reconcilers that drive an actuator (machine, cluster, machine template) |
//! | [`provider`] | `capi-provider` | the manager binary, the helpers a provider's cloud code uses, the guide |
//! | `bootstrap` (feature `bootstrap`) | `capi-bootstrap` | the kubeadm bootstrap provider |
//! | `controllers` (feature `controllers`) | `capi-controllers` | the core Cluster API controllers |
//! | `control_plane` (feature `control-plane`) | `capi-control-plane` | the KubeadmControlPlane provider |
//! | `testing` (feature `testing`) | `capi-testing` | a local etcd + kube-apiserver, the conformance suite, fault injection |
//!
//! With the `mock` feature the `mockall` mocks of the three actuator traits are exported at the
//! root (`MockActuator`, `MockClusterActuator`, `MockMachineTemplateActuator`). [`kube`] and
//! [`k8s_openapi`] are re-exported at the versions the SDK is built with; as with kube-rs, the
//! binary picks the Kubernetes API version through a `k8s-openapi` feature of its own
//! (`features = ["v1_33"]`, the earliest this SDK supports).
//!
//! # A provider's manager
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use capi::infrastructure::InfrastructureControllers;
//! use capi::{ManagerArgs, ProviderManager};
//! use clap::Parser;
//!
//! /// my-cloud-manager: the My Cloud provider's controllers.
//! #[derive(Parser)]
//! struct Args {
//!     #[command(flatten)]
//!     manager: ManagerArgs,
//! }
//!
//! # async fn demo<M: capi::core::infra::InfraMachine, C: capi::core::infra::InfraCluster>(
//! #     machines: Arc<impl capi::Actuator<M, C> + 'static>,
//! #     clusters: Arc<dyn capi::ClusterActuator<C>>,
//! # ) -> Result<(), capi::provider::ProviderError> {
//! ProviderManager::new("my-cloud", Args::parse().manager)
//!     .run(|manager| {
//!         manager.add_machine_reconciler(machines);
//!         manager.add_cluster_reconciler::<C>(clusters);
//!     })
//!     .await
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use capi_actuator as infrastructure;
pub use capi_core as core;
pub use capi_provider as provider;
pub use capi_runtime as runtime;
pub use {k8s_openapi, kube};

#[cfg(feature = "bootstrap")]
pub use capi_bootstrap as bootstrap;
#[cfg(feature = "control-plane")]
pub use capi_control_plane as control_plane;
#[cfg(feature = "controllers")]
pub use capi_controllers as controllers;
#[cfg(feature = "testing")]
pub use capi_testing as testing;

pub use capi_core::{
    Actuator, ActuatorError, ActuatorErrorKind, BootstrapData, ClusterActuator, ClusterScope,
    MachineScope, MachineTemplateActuator, TemplateScope,
};
#[cfg(feature = "mock")]
pub use capi_core::{MockActuator, MockClusterActuator, MockMachineTemplateActuator};
pub use capi_provider::{ManagerArgs, ProviderManager};
