//! The OpenStack infrastructure provider: `OpenStackCluster`, `OpenStackMachine` and
//! `OpenStackMachineTemplate` reconciled through Keystone, Nova, Neutron and Octavia.
//!
//! - [`api`]: the kinds and their CRDs (group `infrastructure.capi-rs.dev`, CAPO-shaped fields,
//!   validation in the schema);
//! - [`credentials`]: one cloud of the `clouds.yaml` Secret an `identityRef` names (password or
//!   application credential, region, interface, CA bundle), never shown in logs or errors.
//!
//! **Only the API and the credentials model exist so far.** The cloud client, the actuators and the integration tests
//! against a local OpenStack are the rest of the provider's issue; nothing here talks to a cloud
//! yet, so nothing can be mistaken for a working provider.

pub mod api;
pub mod cloud;
pub mod cluster;
pub mod connector;
pub mod credentials;
pub mod machine;
pub mod naming;
mod resolve;
