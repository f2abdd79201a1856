//! The Azure provider's kinds — `AzureCluster`, `AzureClusterTemplate`, `AzureMachine`,
//! `AzureMachineTemplate`, `AzureMachinePool` — in group `infrastructure.capi-rs.dev` (upstream CAPZ's kinds live in
//! `infrastructure.cluster.x-k8s.io`, so both can be installed side by side). Field names and
//! shapes follow CAPZ's `v1beta1` API where they overlap, so a CAPZ manifest reads the same; what
//! is supported is listed here, and nothing else is accepted (the schema is closed: a CAPZ field
//! this provider does not implement is refused by the API server, never silently dropped).
//! CAPZ's webhook checks are CEL rules and schema constraints here.
//!
//! Differences from CAPZ a user may meet:
//! - status follows the Cluster API v1beta2 contract (`status.initialization.provisioned`, not
//!   `status.ready`), and what the provider created is reported in status (`status.network`);
//!   the operations in flight (`status.longRunningOperationStates`) record the URL ARM polls them
//!   at and when they started, not an SDK's resume token;
//! - `identityRef` names an [`AzureClusterIdentity`] (of type `ServicePrincipal` only) that
//!   admits the object's namespace, or a `Secret` in the object's namespace (keys `tenantID`,
//!   `clientID`, `clientSecret`: a service principal's client credentials); an identity's
//!   `clientSecret` must be in the identity's own namespace;
//! - one subnet per role (`control-plane`, `node`), a public API server load balancer only, no
//!   bastion, NAT gateways, route tables, private DNS, peerings, outbound load balancers,
//!   managed identities, extensions or IPv6; machines boot Linux images with cloud-init data.

mod cluster;
mod identity;
mod machine;
mod machine_pool;
mod network;
mod operations;
mod tags;

pub use self::cluster::*;
pub use self::identity::*;
pub use self::machine::*;
pub use self::machine_pool::*;
pub use self::network::*;
pub use self::operations::{LongRunningOperation, OperationType};
pub use self::tags::{MAX_USER_TAGS, RESERVED_TAG_PREFIXES, Tags};

/// The API group of the Azure provider's kinds.
pub const GROUP: &str = "infrastructure.capi-rs.dev";
/// Their version, recorded in the CRDs' contract label.
pub const VERSION: &str = "v1alpha1";

/// The provider's CRDs, labelled with the Cluster API contract version; the identity's also so
/// that `clusterctl move` of its namespace carries every identity, and whatever it owns, to the
/// target management cluster.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use capi_core::crd::{moved_with_what_it_owns, with_contract_version};
    use kube::CustomResourceExt;
    [
        AzureCluster::crd(),
        AzureClusterTemplate::crd(),
        AzureMachine::crd(),
        AzureMachineTemplate::crd(),
        AzureMachinePool::crd(),
        moved_with_what_it_owns(AzureClusterIdentity::crd()),
    ]
    .into_iter()
    .map(|crd| with_contract_version(crd, VERSION))
    .collect()
}

/// The rules of the pool reconciler for `AzureMachinePool` (whose machines are
/// `AzureMachine`s), beside the provider's rules for the other kinds.
pub fn pool_rbac() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    capi_actuator::rbac::infra_machine_pool(GROUP, "azuremachinepools", "azuremachines")
}

#[cfg(test)]
mod tests {
    /// `clusterctl move` carries the identities of the moved namespace and what they own; the
    /// other kinds move through their Cluster.
    #[test]
    fn only_the_identity_is_moved_with_what_it_owns() {
        let moved: Vec<String> = super::crds()
            .into_iter()
            .filter(capi_core::crd::is_moved_with_what_it_owns)
            .map(|crd| crd.spec.names.kind)
            .collect();
        assert_eq!(moved, ["AzureClusterIdentity"]);
    }
}
