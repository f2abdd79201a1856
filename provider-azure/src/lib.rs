//! The Azure infrastructure provider: virtual machines, virtual networks and a Standard load
//! balancer over ARM REST, with long-running operations that never block a reconcile.
//!
//! - [`api`]: `AzureCluster`, `AzureClusterTemplate`, `AzureMachine`, `AzureMachineTemplate`,
//!   `AzureMachinePool` (group `infrastructure.capi-rs.dev`, CAPZ's field names, CAPZ's webhook
//!   checks as schema constraints and CEL rules) and their CRDs;
//! - [`arm`]: the ARM resources the provider manages — pinned api-versions, resource IDs and
//!   typed bodies checked in the tests against Azure's own models — its client ([`arm::Arm`],
//!   mockable with feature `mock`; [`arm::ArmClient`] over the provider's https client) and what
//!   an ARM refusal means for a reconcile ([`arm::error`]);
//! - [`credentials`], [`token`] and [`connector`]: a service principal from an `identityRef`
//!   Secret, Resource Manager tokens from Microsoft Entra ID through `azure_identity` (its cache,
//!   no SDK retries), one client per Secret version;
//! - [`operations`]: long-running operations recorded in status and resumed by the next
//!   reconcile, whichever manager runs it; [`resource`]: one resource made as wanted, or
//!   deleted, without waiting;
//! - [`naming`]: CAPZ's names and tags of everything the provider makes — deterministic, so a
//!   replayed PUT is the same resource;
//! - [`cluster`], [`machine`] and [`pool`]: the [`ClusterActuator`](capi_core::ClusterActuator),
//!   the [`Actuator`](capi_core::Actuator) and the [`PoolActuator`](capi_core::PoolActuator) (a
//!   virtual machine scale set in Flexible orchestration per `MachinePool`). Their scope carries
//!   the `AzureCluster` and the owners; the only object they read from the API server is the
//!   `identityRef` Secret ([`connector`]).
//!
//! No maintained Rust management-plane SDK for Compute and Network exists, so the provider
//! models the few resources it uses itself ([`arm`] says why and how they are checked).
//! The `azure-manager` binary (package `provider-azure-bin`) runs the actuators in a `Manager`:
//!
//! ```no_run
//! # fn demo(client: kube::Client, http: reqwest::Client) {
//! use std::sync::Arc;
//!
//! use provider_azure::cluster::AzureClusterActuator;
//! use provider_azure::connector::SecretConnector;
//! use provider_azure::machine::AzureMachineActuator;
//!
//! let connector = Arc::new(SecretConnector::new(client, http));
//! let clusters = AzureClusterActuator::new(connector.clone());
//! let machines = AzureMachineActuator::new(connector);
//! // Hand them to capi_actuator's Manager: add_cluster_reconciler(Arc::new(clusters)),
//! // add_machine_reconciler(Arc::new(machines)).
//! # }
//! ```

pub mod api;
pub mod arm;
pub mod cluster;
pub mod connector;
pub mod credentials;
#[cfg(test)]
mod fake_arm;
pub mod machine;
pub mod naming;
pub mod operations;
pub mod pool;
pub mod resource;
pub mod token;
