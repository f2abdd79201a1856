//! `AzureClusterIdentity`, as CAPZ's: a service principal an operator keeps in one namespace
//! and hands to the namespaces it admits (`allowedNamespaces`, [`AllowedNamespaces`]), so that a
//! team can use it without being able to read its secret.

use capi_core::api::AllowedNamespaces;
use capi_core::api::validation;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cluster::GUID;

/// How an identity authenticates. Of CAPZ's types, only a service principal's client secret is
/// implemented; the schema refuses the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AzureIdentityType {
    /// A service principal with a client secret (`clientSecret` names its Secret).
    #[default]
    ServicePrincipal,
}

/// A Secret holding the service principal's secret under the key `clientSecret`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253), pattern(validation::DNS_SUBDOMAIN))]
    pub name: String,
    /// Its namespace: the identity's own when unset, and it must be that one (an identity can
    /// only hand out a Secret of its own namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// A service principal, and the namespaces whose `AzureCluster`s may use it.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AzureClusterIdentity",
    plural = "azureclusteridentities",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AzureClusterIdentity lets the namespaces it allows use a service principal kept in its own namespace.",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Client", type_ = "string", json_path = ".spec.clientID")
)]
#[serde(rename_all = "camelCase")]
pub struct AzureClusterIdentitySpec {
    /// How it authenticates. Immutable.
    #[serde(rename = "type")]
    #[schemars(transform = validation::immutable)]
    pub type_: AzureIdentityType,
    /// The service principal's application (client) ID.
    #[serde(rename = "clientID")]
    #[schemars(length(min = 36, max = 36), pattern(GUID))]
    pub client_id: String,
    /// The Microsoft Entra ID tenant: a GUID or a domain (`contoso.onmicrosoft.com`).
    #[serde(rename = "tenantID")]
    #[schemars(length(min = 1, max = 256), pattern(r"^[A-Za-z0-9.-]+$"))]
    pub tenant_id: String,
    /// The Secret with the service principal's secret.
    pub client_secret: SecretReference,
    /// The namespaces whose `AzureCluster`s may use it: none when unset (not even its own),
    /// every one with `{}`.
    #[serde(default)]
    pub allowed_namespaces: Option<AllowedNamespaces>,
}
