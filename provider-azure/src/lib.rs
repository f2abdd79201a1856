//! The Azure infrastructure provider: virtual machines, virtual networks and load balancers over
//! ARM REST, with long-running operations and `Retry-After` handling.
//!
//! **Under construction.** What exists: [`api`], the provider's kinds (CAPZ-shaped, with CAPZ's
//! webhook checks as schema constraints and CEL rules) and their CRDs; [`arm`], the ARM
//! resources it manages — api-versions, resource IDs and typed bodies, checked in its tests
//! against Azure's own models; [`credentials`], a service principal's client credentials from
//! an `identityRef` Secret, never shown; [`token`], Resource Manager tokens from Microsoft Entra
//! ID through `azure_identity` (its cache, the provider's TLS client, no SDK retries). The ARM client, the actuators and the `azure-manager` binary are
//! not written yet; nothing here reconciles anything.

pub mod api;
pub mod arm;
pub mod cluster;
pub mod connector;
pub mod credentials;
#[cfg(test)]
mod fake_arm;
pub mod lookup;
pub mod machine;
pub mod naming;
pub mod operations;
pub mod resource;
pub mod token;
