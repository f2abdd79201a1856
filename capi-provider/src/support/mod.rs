//! What a provider's cloud code needs beside the contract: the helpers every reference provider
//! (OpenStack, AWS, Azure) uses, in one place a vendor is pointed to.
//!
//! | Use | when |
//! |-----|------|
//! | [`redact`] | a cloud's error message may reach a condition, an event or a log: bound it and blank every secret it may echo (credentials, user data, tokens) before it does. Every message built from a cloud's answer goes through it. |
//! | [`secret_data`] | reading one credential out of a Kubernetes `Secret` (a provider's identity or credentials Secret): `data` or `stringData`, trimmed, errors naming the key and never a value. |
//! | [`call_retry`] | one cloud call that is safe to repeat (a read, a delete, a create with an idempotency token the cloud honours) should ride out a transient fault before it fails the reconcile, as the official cloud SDKs do. A create the cloud cannot deduplicate is never retried here: the loop's `exists` decides. |
//! | [`client_cache`] | a cloud client made from a credentials Secret is shared between reconciles: one per identity (and region or endpoint) and Secret version, dropped when the Secret changes or goes ([`client_cache::ClientCache::forget`]) and when unused for half an hour, so that no credential outlives its Secret. |
//! | [`allowed_namespaces`] | an identity shared between namespaces (CAPA's and CAPZ's `allowedNamespaces`): check that it admits the object's namespace before any cloud call. |
//! | [`rbac`] | the ClusterRole of a provider's manager: [`rbac::provider`] gives the rules of the infrastructure reconcilers for the provider's kinds, [`rbac::cluster_role`] wraps them. |
//!
//! ```
//! use capi_provider::support::redact::Redaction;
//!
//! let message = Redaction::default()
//!     .secret("hunter2")
//!     .apply("authentication failed for password hunter2");
//! assert!(!message.contains("hunter2"));
//! ```

pub mod allowed_namespaces;
pub mod call_retry;
pub mod client_cache;
pub mod redact;
pub mod secret_data;

/// The permissions of a provider's manager.
pub mod rbac {
    pub use capi_actuator::rbac::{
        infra_cluster, infra_machine, infra_machine_pool, infra_machine_template, provider,
    };
    pub use capi_runtime::rbac::{READ, cluster_role, manager, rule};
}
