//! The infrastructure provider contract (v1beta2): what every provider's machine and cluster kinds
//! carry, so that the generic loop can read and record them for any provider.
//!
//! A provider's CRD embeds [`InfraMachineStatus`] (or [`InfraClusterStatus`]) as its status and
//! implements [`InfraMachine`] (or [`InfraCluster`]). The loop writes only the contract's fields —
//! `spec.providerID`, `status.initialization.provisioned`, `status.addresses`,
//! `status.failureDomain`, `status.failureDomains`, `spec.controlPlaneEndpoint`,
//! `status.conditions` — and the provider's own status fields its actuator reports
//! ([`crate::ProviderStatus`]), with change-only merge patches, so other fields are never
//! touched.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::api::validation;
use crate::api::{ApiEndpoint, FailureDomain, MachineAddress};

/// `status.initialization` of an infrastructure object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraInitialization {
    /// The infrastructure is fully provisioned. Set once, never unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// The contract's status of an infrastructure machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraMachineStatus {
    /// Provisioning milestones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<InfraInitialization>,

    /// The instance's addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub addresses: Vec<MachineAddress>,

    /// The failure domain the instance landed in, when the cloud says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,

    /// `Ready` and the provider's other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,
}

impl InfraMachineStatus {
    /// Whether `initialization.provisioned` is true.
    pub fn provisioned(&self) -> bool {
        self.initialization
            .as_ref()
            .and_then(|i| i.provisioned)
            .unwrap_or(false)
    }
}

/// The contract's status of an infrastructure cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraClusterStatus {
    /// Provisioning milestones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<InfraInitialization>,

    /// Where machines can be placed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub failure_domains: Vec<FailureDomain>,

    /// `Ready` and the provider's other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,
}

impl InfraClusterStatus {
    /// Whether `initialization.provisioned` is true.
    pub fn provisioned(&self) -> bool {
        self.initialization
            .as_ref()
            .and_then(|i| i.provisioned)
            .unwrap_or(false)
    }
}

/// A provider's machine kind, as the generic loop sees it.
///
/// Infrastructure kinds are namespaced, like the `Machine` that owns them.
pub trait InfraMachine:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// `spec.providerID`, once recorded.
    fn provider_id(&self) -> Option<&str>;

    /// The contract part of `status`, if there is a status.
    fn infra_status(&self) -> Option<&InfraMachineStatus>;
}

/// A provider's cluster kind, as the generic loop sees it.
///
/// Infrastructure kinds are namespaced, like the `Cluster` that owns them.
pub trait InfraCluster:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// `spec.controlPlaneEndpoint`, if set.
    fn control_plane_endpoint(&self) -> Option<&ApiEndpoint>;

    /// The contract part of `status`, if there is a status.
    fn infra_status(&self) -> Option<&InfraClusterStatus>;
}
