//! The OpenStack infrastructure provider: `OpenStackCluster`, `OpenStackMachine` and
//! `OpenStackMachineTemplate` reconciled through Keystone, Nova, Neutron and Octavia.
//!
//! - [`api`]: the kinds and their CRDs (group `infrastructure.capi-rs.dev`, CAPO-shaped fields,
//!   validation in the schema).
//!
//! **Only the API exists so far.** The cloud client, the actuators and the integration tests
//! against a local OpenStack are the rest of the provider's issue; nothing here talks to a cloud
//! yet, so nothing can be mistaken for a working provider.

pub mod api;
