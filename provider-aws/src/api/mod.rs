//! The AWS provider's kinds — `AWSCluster`, `AWSClusterTemplate`, `AWSMachine`,
//! `AWSMachineTemplate`, `AWSMachinePool` — in group `infrastructure.capi-rs.dev` (upstream CAPA's kinds live in
//! `infrastructure.cluster.x-k8s.io`, so both can be installed side by side). Field names and
//! shapes follow CAPA's `v1beta2` API where they overlap, so a CAPA manifest reads the same; what
//! is supported is listed here, and nothing else is accepted (the schema is closed: a CAPA field
//! this provider does not implement is refused by the API server, never silently dropped).
//!
//! Differences from CAPA a user may meet:
//! - status follows the Cluster API v1beta2 contract (`status.initialization.provisioned`, not
//!   `status.ready`), and what the provider created is reported in status only (CAPA writes the
//!   IDs of the subnets it creates back into `spec.network.subnets`);
//! - `controlPlaneLoadBalancer.loadBalancerType` is `nlb` (the default) or `disabled`: no classic
//!   ELB or ALB for the API server;
//! - `identityRef` names one of CAPA's cluster-scoped identities ([`identity`]: each says which
//!   namespaces may use it), or a `Secret` in the object's own namespace (keys `AccessKeyID`,
//!   `SecretAccessKey`, optionally `SessionToken`); unset, it is the controller identity
//!   `default`, which an operator creates (CAPA creates one allowing every namespace);
//! - no bastion, S3 bucket, IPv6, EKS lookups or SSM Parameter Store for bootstrap data:
//!   cloud-init data goes through Secrets Manager as CAPA's default does (`spec.cloudInit`), and
//!   Ignition data in the instance's user data (cloud-init data too with
//!   `insecureSkipSecretsManager`, gzip-compressed when over EC2's 16 KB); the
//!   secrets are named after the machine's idempotency key and 128 random bits (CAPA: a random
//!   UUID), and
//!   `spec.cloudInit.secretPrefix`/`secretCount` are not written back (their state is a tag on
//!   the instance).

mod cluster;
pub mod identity;
mod machine;
mod machine_pool;
mod network;
mod tags;

pub use self::cluster::*;
pub use self::identity::{
    AWSClusterControllerIdentity, AWSClusterControllerIdentitySpec, AWSClusterRoleIdentity,
    AWSClusterRoleIdentitySpec, AWSClusterStaticIdentity, AWSClusterStaticIdentitySpec,
};
pub use self::machine::*;
pub use self::machine_pool::*;
pub use self::network::*;
pub use self::tags::{MAX_USER_TAGS, RESERVED_TAG_PREFIXES, Tags};

/// The API group of the AWS provider's kinds.
pub const GROUP: &str = "infrastructure.capi-rs.dev";
/// Their version, recorded in the CRDs' contract label.
pub const VERSION: &str = "v1alpha1";

/// The provider's CRDs, labelled with the Cluster API contract version; the identities' also so
/// that `clusterctl move` carries each identity, and whatever it owns, to the target management
/// cluster (created there when absent, kept on the source), as CAPA's.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use capi_core::crd::{moved_with_what_it_owns, with_contract_version};
    use kube::CustomResourceExt;
    let kinds = [
        AWSCluster::crd(),
        AWSClusterTemplate::crd(),
        AWSMachine::crd(),
        AWSMachineTemplate::crd(),
        AWSMachinePool::crd(),
    ];
    let identities = [
        identity::controller_identity_crd(),
        AWSClusterStaticIdentity::crd(),
        AWSClusterRoleIdentity::crd(),
    ];
    kinds
        .into_iter()
        .chain(identities.into_iter().map(moved_with_what_it_owns))
        .map(|crd| with_contract_version(crd, VERSION))
        .collect()
}

/// The rules of the pool reconciler for `AWSMachinePool` (whose machines are `AWSMachine`s),
/// beside [`capi_actuator::rbac::provider`]'s for the other kinds.
pub fn pool_rbac() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    capi_actuator::rbac::infra_machine_pool(GROUP, "awsmachinepools", "awsmachines")
}

#[cfg(test)]
mod tests {
    /// `clusterctl move` carries the identities (cluster-scoped: created on the target when
    /// absent, kept on the source) and what they own; the other kinds move through their Cluster.
    #[test]
    fn only_the_identities_are_moved_with_what_they_own() {
        let moved: Vec<String> = super::crds()
            .into_iter()
            .filter(capi_core::crd::is_moved_with_what_it_owns)
            .map(|crd| crd.spec.names.kind)
            .collect();
        assert_eq!(
            moved,
            [
                "AWSClusterControllerIdentity",
                "AWSClusterStaticIdentity",
                "AWSClusterRoleIdentity"
            ]
        );
    }
}
