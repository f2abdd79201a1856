//! `AzureCluster` (a cluster's resource group, virtual network, subnets, security groups and API
//! server load balancer) and `AzureClusterTemplate`.

use std::collections::BTreeMap;

use capi_core::api::validation;
use capi_core::api::{ApiEndpoint, TemplateMetadata};
use capi_core::infra::{InfraCluster, InfraClusterStatus};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::network::{NetworkSpec, NetworkStatus};
use super::operations::{LongRunningOperation, operations_by_resource};
use super::tags::{Tags, user_tags};

/// An Azure subscription or tenant ID (a GUID).
pub(crate) const GUID: &str =
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";

/// A resource group's name.
pub(crate) const RESOURCE_GROUP: &str = r"^[-\w\._\(\)]+$";

/// Where the provider's Azure credentials come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AzureIdentityKind {
    /// A Secret in the object's namespace with keys `tenantID`, `clientID` and `clientSecret` (a
    /// service principal's client credentials, CAPZ's `ServicePrincipal` identity in one
    /// Secret).
    #[default]
    Secret,
    /// An [`super::AzureClusterIdentity`] that admits the object's namespace (CAPZ's kind).
    AzureClusterIdentity,
}

/// The credentials an `AzureCluster`'s resources are managed with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = namespace_of_identities_only)]
pub struct AzureIdentityReference {
    /// The Secret's or the identity's name.
    #[schemars(length(min = 1, max = 253), pattern(validation::DNS_SUBDOMAIN))]
    pub name: String,
    /// What `name` names.
    pub kind: AzureIdentityKind,
    /// The `AzureClusterIdentity`'s namespace (the object's own when unset); a Secret is always
    /// the object's namespace's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

fn namespace_of_identities_only(schema: &mut schemars::Schema) {
    validation::add_rule(
        schema,
        "self.kind == 'AzureClusterIdentity' || !has(self.__namespace__)",
        "namespace may only be set for an AzureClusterIdentity: a Secret is always in the object's own namespace",
    );
}

/// The Azure cloud: which Resource Manager and which Microsoft Entra ID endpoints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AzureEnvironment {
    /// Azure (`management.azure.com`, `login.microsoftonline.com`).
    #[default]
    AzurePublicCloud,
    /// Azure operated by 21Vianet (`management.chinacloudapi.cn`).
    AzureChinaCloud,
    /// Azure Government (`management.usgovcloudapi.net`).
    #[serde(rename = "AzureUSGovernmentCloud")]
    AzureUsGovernmentCloud,
}

impl AzureEnvironment {
    /// Resource Manager's endpoint.
    pub fn resource_manager(self) -> &'static str {
        match self {
            Self::AzurePublicCloud => "https://management.azure.com",
            Self::AzureChinaCloud => "https://management.chinacloudapi.cn",
            Self::AzureUsGovernmentCloud => "https://management.usgovcloudapi.net",
        }
    }

    /// Microsoft Entra ID's endpoint (the authority host tokens come from).
    pub fn authority_host(self) -> &'static str {
        match self {
            Self::AzurePublicCloud => "https://login.microsoftonline.com",
            Self::AzureChinaCloud => "https://login.chinacloudapi.cn",
            Self::AzureUsGovernmentCloud => "https://login.microsoftonline.us",
        }
    }

    /// The DNS suffix of public IP addresses' names (`cloudapp.azure.com`).
    pub fn dns_suffix(self) -> &'static str {
        match self {
            Self::AzurePublicCloud => "cloudapp.azure.com",
            Self::AzureChinaCloud => "cloudapp.chinacloudapi.cn",
            Self::AzureUsGovernmentCloud => "cloudapp.usgovcloudapi.net",
        }
    }
}

/// The cluster-wide infrastructure of a workload cluster on Azure.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AzureCluster",
    plural = "azureclusters",
    shortname = "azc",
    namespaced,
    status = "AzureClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AzureCluster is the resource group, virtual network, subnets, security groups and API server load balancer of a cluster on Azure.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(
        name = "Resource Group",
        type_ = "string",
        json_path = ".status.network.resourceGroup.name"
    ),
    printcolumn(name = "Location", type_ = "string", json_path = ".spec.location"),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AzureClusterSpec {
    /// The subscription.
    #[serde(rename = "subscriptionID")]
    #[schemars(length(min = 36, max = 36), pattern(GUID))]
    pub subscription_id: String,
    /// The location (`westeurope`, `eastus2`).
    #[schemars(length(min = 1, max = 64), pattern(r"^[a-z][a-z0-9]*$"))]
    pub location: String,
    /// The resource group: created (and deleted with the cluster) when it does not exist, used
    /// as it is otherwise (the cluster's name when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 90), pattern(RESOURCE_GROUP))]
    pub resource_group: Option<String>,
    /// The network.
    #[serde(default, skip_serializing_if = "is_default_network")]
    pub network_spec: NetworkSpec,
    /// The credentials: a Secret of this namespace, or an `AzureClusterIdentity` that admits it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<AzureIdentityReference>,
    /// The Azure cloud (`AzurePublicCloud` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure_environment: Option<AzureEnvironment>,
    /// The endpoint: set by the provider to the load balancer's public DNS name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Tags on every resource the provider creates for the cluster and its machines.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "user_tags")]
    pub additional_tags: Tags,
}

fn is_default_network(network: &NetworkSpec) -> bool {
    network == &NetworkSpec::default()
}

/// The observed state of an `AzureCluster`: the contract fields, what was found or created, and
/// the operations in flight.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureClusterStatus {
    /// `initialization`, `failureDomains`, `conditions` (infrastructure provider contract).
    #[serde(flatten)]
    pub contract: InfraClusterStatus,
    /// The resource group, network, subnets and load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStatus>,
    /// Long-running operations in flight, resumed by the next reconcile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), transform = operations_by_resource)]
    pub long_running_operation_states: Vec<LongRunningOperation>,
}

impl InfraCluster for AzureCluster {
    fn control_plane_endpoint(&self) -> Option<&ApiEndpoint> {
        self.spec.control_plane_endpoint.as_ref()
    }

    fn infra_status(&self) -> Option<&InfraClusterStatus> {
        self.status.as_ref().map(|s| &s.contract)
    }
}

/// A template for `AzureCluster`s, used by a `ClusterClass`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AzureClusterTemplate",
    plural = "azureclustertemplates",
    shortname = "azct",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AzureClusterTemplate stamps out AzureClusters for a ClusterClass.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AzureClusterTemplateSpec {
    /// What each cluster gets.
    pub template: AzureClusterTemplateResource,
}

/// `AzureClusterTemplate.spec.template`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureClusterTemplateResource {
    /// Labels and annotations for the clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The spec of each cluster.
    pub spec: AzureClusterSpec,
}
