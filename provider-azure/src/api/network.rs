//! The cluster's network (CAPZ's `NetworkSpec`): its virtual network, the control-plane and node
//! subnets with their network security groups and rules, the API server's load balancer — and
//! what the provider reports of them.

use std::collections::BTreeMap;

use capi_core::api::validation;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::tags::{Tags, user_tags};

/// A name ARM takes for a virtual network, subnet, security group, load balancer or public IP
/// (as CAPZ's webhook checks them).
pub(crate) const RESOURCE_NAME: &str = r"^[-\w\._]+$";

/// The virtual network: one the provider creates (and deletes), or an existing one the cluster
/// uses as it is (`name` and `resourceGroup` of a network not tagged as the cluster's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VnetSpec {
    /// Its resource group (the cluster's when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 90), pattern(r"^[-\w\._\(\)]+$"))]
    pub resource_group: Option<String>,
    /// Its name (`<cluster>-vnet` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 64), pattern(RESOURCE_NAME))]
    pub name: Option<String>,
    /// Its address ranges (`10.0.0.0/8` when unset).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(length(min = 1, max = 43), pattern(validation::CIDR))
    )]
    pub cidr_blocks: Vec<String>,
    /// Tags on a network the provider creates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "user_tags")]
    pub tags: Tags,
}

/// What machines a subnet is for.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum SubnetRole {
    /// Control-plane machines, behind the API server's load balancer.
    #[serde(rename = "control-plane")]
    ControlPlane,
    /// Worker machines.
    #[default]
    #[serde(rename = "node")]
    Node,
}

impl SubnetRole {
    /// Both roles.
    pub const ALL: [Self; 2] = [Self::ControlPlane, Self::Node];

    /// The role as CAPZ writes it (`control-plane`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ControlPlane => "control-plane",
            Self::Node => "node",
        }
    }

    /// The word in the names of what the provider creates for it (`controlplane`, `node`, as
    /// CAPZ names them).
    pub fn name_part(self) -> &'static str {
        match self {
            Self::ControlPlane => "controlplane",
            Self::Node => "node",
        }
    }
}

/// A rule's protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SecurityRuleProtocol {
    /// TCP.
    #[default]
    Tcp,
    /// UDP.
    Udp,
    /// ICMP.
    Icmp,
    /// Any.
    #[serde(rename = "*")]
    Any,
}

/// A rule's direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SecurityRuleDirection {
    /// Traffic to the subnet.
    #[default]
    Inbound,
    /// Traffic from the subnet.
    Outbound,
}

/// What a rule does with matching traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SecurityRuleAction {
    /// Let it through.
    #[default]
    Allow,
    /// Drop it.
    Deny,
}

/// A port, a range (`8000-8999`) or `*`.
const PORTS: &str = r"^(\*|[0-9]{1,5}(-[0-9]{1,5})?)$";

/// `source` and `sources` are not both set (a CEL rule, as CAPZ's webhook checks it).
fn one_kind_of_source(schema: &mut schemars::Schema) {
    validation::add_rule(
        schema,
        "!(has(self.source) && has(self.sources))",
        "source and sources cannot be used together",
    );
}

/// A rule of a network security group (CAPZ's `SecurityRule`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = one_kind_of_source)]
pub struct SecurityRule {
    /// Its name, unique in the group.
    #[schemars(length(min = 1, max = 80), pattern(RESOURCE_NAME))]
    pub name: String,
    /// What it is for.
    #[serde(default)]
    #[schemars(length(max = 140))]
    pub description: String,
    /// The protocol.
    pub protocol: SecurityRuleProtocol,
    /// The direction (`Inbound` when unset).
    #[serde(default)]
    pub direction: SecurityRuleDirection,
    /// Its priority: lower numbers are evaluated first (the provider's own rules use 2200 and
    /// 2201).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 4096))]
    pub priority: Option<i32>,
    /// Source ports (`*` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 11), pattern(PORTS))]
    pub source_ports: Option<String>,
    /// Destination ports (`*` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 11), pattern(PORTS))]
    pub destination_ports: Option<String>,
    /// The source: a CIDR, an address, `*` or a service tag (`Internet`, `VirtualNetwork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 80))]
    pub source: Option<String>,
    /// Several sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 80)))]
    pub sources: Vec<String>,
    /// The destination, as `source` (`*` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 80))]
    pub destination: Option<String>,
    /// What it does (`Allow` when unset).
    #[serde(default)]
    pub action: SecurityRuleAction,
}

/// Rules are keyed by `name` (a list-map, as CAPZ's).
fn rules_by_name(schema: &mut schemars::Schema) {
    validation::list_map(schema, &["name"]);
}

/// A subnet's network security group (CAPZ's `SecurityGroup`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroup {
    /// Its name (`<cluster>-controlplane-nsg` or `<cluster>-node-nsg` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 80), pattern(RESOURCE_NAME))]
    pub name: Option<String>,
    /// Rules besides the provider's own (SSH and the API server port on the control plane's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), transform = rules_by_name)]
    pub security_rules: Vec<SecurityRule>,
    /// Tags on it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "user_tags")]
    pub tags: Tags,
}

/// A subnet (CAPZ's `SubnetSpec`): one per role, created in the cluster's network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSpec {
    /// Its name.
    #[schemars(length(min = 1, max = 80), pattern(RESOURCE_NAME))]
    pub name: String,
    /// Which machines it is for.
    pub role: SubnetRole,
    /// Its address ranges, inside the network's (`10.0.0.0/16` for the control plane,
    /// `10.1.0.0/16` for nodes when unset).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 4),
        inner(length(min = 1, max = 43), pattern(validation::CIDR))
    )]
    pub cidr_blocks: Vec<String>,
    /// Its network security group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_group: Option<SecurityGroup>,
}

/// The load balancer's kind: public (the only one this provider builds; CAPZ also has
/// `Internal`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LoadBalancerType {
    /// A public frontend address.
    #[default]
    Public,
}

/// The load balancer's SKU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LoadBalancerSku {
    /// Standard (zone-redundant; the only SKU CAPZ takes).
    #[default]
    Standard,
}

/// A public IP address (CAPZ's `PublicIPSpec`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublicIpSpec {
    /// Its name.
    #[schemars(length(min = 1, max = 80), pattern(RESOURCE_NAME))]
    pub name: String,
    /// Its DNS label's full name (`<label>.<location>.cloudapp.azure.com`), or a label of its
    /// own; derived from the cluster when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^[a-z][-a-z0-9]{0,61}[a-z0-9](\..+)?$")
    )]
    pub dns_name: Option<String>,
}

/// A frontend of the load balancer (CAPZ's `FrontendIP`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FrontendIp {
    /// Its name.
    #[schemars(length(min = 1, max = 80), pattern(RESOURCE_NAME))]
    pub name: String,
    /// Its public address.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "publicIP")]
    pub public_ip: Option<PublicIpSpec>,
}

/// The load balancer's backend pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendPool {
    /// Its name (`<load balancer>-backendPool` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 80), pattern(RESOURCE_NAME))]
    pub name: Option<String>,
}

/// The API server's load balancer (CAPZ's `LoadBalancerSpec`, public only): a frontend with a
/// public IP, a backend pool of the control-plane machines' network interfaces, an HTTPS probe
/// of `/readyz` and a rule on the API server port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerSpec {
    /// Its name (`<cluster>-public-lb` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 80), pattern(RESOURCE_NAME))]
    pub name: Option<String>,
    /// Its frontend (one, `<load balancer>-frontEnd` with public IP `pip-<cluster>-apiserver`
    /// when unset).
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "frontendIPs")]
    #[schemars(length(max = 1))]
    pub frontend_ips: Vec<FrontendIp>,
    /// Its backend pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_pool: Option<BackendPool>,
    /// `Public` (the default and only kind).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<LoadBalancerType>,
    /// `Standard` (the default and only SKU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<LoadBalancerSku>,
    /// Minutes an idle connection is kept (4 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 4, max = 30))]
    pub idle_timeout_in_minutes: Option<i32>,
}

/// Subnets are keyed by `name` (a list-map, as CAPZ's), one per role (a CEL rule).
fn subnets_by_name(schema: &mut schemars::Schema) {
    validation::list_map(schema, &["name"]);
    validation::add_rule(
        schema,
        "self.all(x, self.exists_one(y, y.role == x.role))",
        "at most one subnet per role (control-plane, node)",
    );
}

/// The cluster's network (CAPZ's `NetworkSpec`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    /// The virtual network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vnet: Option<VnetSpec>,
    /// The subnets, at most one per role; a role without one gets CAPZ's default
    /// (`<cluster>-controlplane-subnet` on `10.0.0.0/16`, `<cluster>-node-subnet` on
    /// `10.1.0.0/16`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2), transform = subnets_by_name)]
    pub subnets: Vec<SubnetSpec>,
    /// The API server's load balancer (a public one with CAPZ's names when unset).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "apiServerLB"
    )]
    pub api_server_lb: Option<LoadBalancerSpec>,
}

/// An Azure resource the provider created or found, by ARM ID and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    /// Its ARM resource ID.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// A subnet as the provider reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetStatus {
    /// Its ARM resource ID.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Which machines it is for.
    pub role: SubnetRole,
    /// Its address ranges.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cidr_blocks: Vec<String>,
    /// Its network security group's ARM ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_group_id: Option<String>,
}

/// The API server's load balancer as the provider reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerStatus {
    /// Its ARM resource ID.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its backend pool's ARM ID, which control-plane network interfaces join.
    pub backend_pool_id: String,
    /// Its public IP address.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "publicIP")]
    pub public_ip: Option<String>,
    /// The public IP's DNS name: the cluster's endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,
}

/// What the provider reports of the cluster's network (status only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    /// The resource group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_group: Option<ResourceStatus>,
    /// The virtual network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vnet: Option<ResourceStatus>,
    /// The subnets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<SubnetStatus>,
    /// The API server's load balancer.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "apiServerLB"
    )]
    pub api_server_lb: Option<LoadBalancerStatus>,
}
