//! The cluster's network: its VPC, subnets, security groups and their rules (CAPA's
//! `NetworkSpec`), and what the provider reports of them (`networkStatus`).

use std::collections::BTreeMap;

use capi_core::api::validation;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::tags::{Tags, user_tags};

/// The VPC: an existing one (`id`), or one the provider creates (`cidrBlock`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VpcSpec {
    /// An existing VPC (`vpc-…`), used as it is: the provider never changes or deletes it. The
    /// provider creates one when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255), pattern(r"^vpc-[0-9a-f]+$"))]
    pub id: Option<String>,
    /// The CIDR of a VPC the provider creates (`10.0.0.0/16` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 43), pattern(validation::CIDR))]
    pub cidr_block: Option<String>,
    /// An existing internet gateway of an existing VPC.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "internetGatewayId"
    )]
    #[schemars(length(min = 1, max = 255), pattern(r"^igw-[0-9a-f]+$"))]
    pub internet_gateway_id: Option<String>,
    /// How many availability zones the provider spreads created subnets over (3 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub availability_zone_usage_limit: Option<i32>,
    /// Which zones: the first ones in name order, or a random choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone_selection: Option<AzSelectionScheme>,
    /// Tags on a VPC the provider creates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "user_tags")]
    pub tags: Tags,
}

/// How availability zones are chosen for created subnets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AzSelectionScheme {
    /// The first zones in name order.
    #[default]
    Ordered,
    /// A random choice of zones.
    Random,
}

/// A subnet: an existing one (`id` = `subnet-…`), or one the provider creates (`id` is then a
/// name of the user's choosing, as CAPA's placeholders).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSpec {
    /// `subnet-…` for an existing subnet; otherwise the name the created subnet is found by.
    #[schemars(length(min = 1, max = 255))]
    pub id: String,
    /// The CIDR of a subnet the provider creates (split from the VPC's when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 43), pattern(validation::CIDR))]
    pub cidr_block: Option<String>,
    /// The zone of a subnet the provider creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub availability_zone: Option<String>,
    /// Public (routed to the internet gateway; load balancers and NAT gateways go there) or
    /// private (routed through its zone's NAT gateway; machines go there).
    pub is_public: bool,
    /// An existing route table of an existing subnet.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "routeTableId"
    )]
    #[schemars(length(min = 1, max = 255))]
    pub route_table_id: Option<String>,
    /// An existing NAT gateway of an existing public subnet.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "natGatewayId"
    )]
    #[schemars(length(min = 1, max = 255))]
    pub nat_gateway_id: Option<String>,
    /// Tags on a subnet the provider creates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "user_tags")]
    pub tags: Tags,
}

/// A rule of the CNI's traffic between nodes (CAPA's `cniIngressRules`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ports_in_order)]
pub struct CniIngressRule {
    /// What the rule is for.
    #[schemars(length(max = 255))]
    pub description: String,
    /// The protocol.
    pub protocol: SecurityGroupProtocol,
    /// The first port (or ICMP type).
    #[schemars(range(min = -1, max = 65535))]
    pub from_port: i64,
    /// The last port (or ICMP code).
    #[schemars(range(min = -1, max = 65535))]
    pub to_port: i64,
}

/// The CNI's rules, added to the control-plane and node security groups.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CniSpec {
    /// The rules (Calico's BGP and IP-in-IP when `cni` is unset, as CAPA).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub cni_ingress_rules: Vec<CniIngressRule>,
}

/// A security group protocol, as EC2 names them (`-1`: all).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SecurityGroupProtocol {
    /// Every protocol.
    #[serde(rename = "-1")]
    All,
    /// IP in IP.
    #[serde(rename = "4")]
    IpInIp,
    /// TCP.
    #[default]
    #[serde(rename = "tcp")]
    Tcp,
    /// UDP.
    #[serde(rename = "udp")]
    Udp,
    /// ICMP.
    #[serde(rename = "icmp")]
    Icmp,
    /// ICMPv6.
    #[serde(rename = "58")]
    Icmpv6,
    /// ESP.
    #[serde(rename = "50")]
    Esp,
}

impl SecurityGroupProtocol {
    /// EC2's name of it (as serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "-1",
            Self::IpInIp => "4",
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Icmp => "icmp",
            Self::Icmpv6 => "58",
            Self::Esp => "50",
        }
    }
}

/// The role of one of the security groups the provider manages (CAPA's names).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum SecurityGroupRole {
    /// The API server load balancer's.
    #[serde(rename = "apiserver-lb")]
    ApiServerLb,
    /// For load balancers the cloud controller manager creates.
    #[serde(rename = "lb")]
    Lb,
    /// The control-plane machines'.
    #[serde(rename = "controlplane")]
    ControlPlane,
    /// Every node's.
    #[serde(rename = "node")]
    Node,
}

impl SecurityGroupRole {
    /// Every role, in the order the groups are created.
    pub const ALL: [Self; 4] = [Self::ApiServerLb, Self::Lb, Self::ControlPlane, Self::Node];

    /// The role's name (`controlplane`, …), as in tags and group names.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ApiServerLb => "apiserver-lb",
            Self::Lb => "lb",
            Self::ControlPlane => "controlplane",
            Self::Node => "node",
        }
    }
}

/// `fromPort ≤ toPort` for TCP and UDP, each within 0–65535 (a CEL rule).
fn ports_in_order(schema: &mut schemars::Schema) {
    validation::add_rule(
        schema,
        "!(self.protocol in ['tcp', 'udp']) || (self.fromPort >= 0 && self.fromPort <= self.toPort)",
        "for tcp and udp, fromPort and toPort are a port range (0 ≤ fromPort ≤ toPort ≤ 65535)",
    );
}

/// Sources of an ingress rule: CIDRs, or security groups (by ID or by the role of one the
/// provider manages) — not both (a CEL rule).
fn one_kind_of_source(schema: &mut schemars::Schema) {
    ports_in_order(schema);
    validation::add_rule(
        schema,
        "!has(self.cidrBlocks) || (!has(self.sourceSecurityGroupIds) && !has(self.sourceSecurityGroupRoles))",
        "cidrBlocks and sourceSecurityGroupIds/sourceSecurityGroupRoles cannot be used together",
    );
}

/// An ingress rule of a security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = one_kind_of_source)]
pub struct IngressRule {
    /// What the rule is for.
    #[schemars(length(max = 255))]
    pub description: String,
    /// The protocol.
    pub protocol: SecurityGroupProtocol,
    /// The first port (or ICMP type; -1 for all).
    #[schemars(range(min = -1, max = 65535))]
    pub from_port: i64,
    /// The last port (or ICMP code; -1 for all).
    #[schemars(range(min = -1, max = 65535))]
    pub to_port: i64,
    /// Source CIDRs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(length(min = 1, max = 43), pattern(validation::CIDR))
    )]
    pub cidr_blocks: Vec<String>,
    /// Source security groups, by ID.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "sourceSecurityGroupIds"
    )]
    #[schemars(length(max = 16), inner(length(min = 1, max = 255)))]
    pub source_security_group_ids: Vec<String>,
    /// Source security groups, by the role of one the provider manages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    pub source_security_group_roles: Vec<SecurityGroupRole>,
}

/// The roles `securityGroupOverrides` may replace (a CEL rule on the map's keys).
fn override_roles(schema: &mut schemars::Schema) {
    let roles: Vec<String> = SecurityGroupRole::ALL
        .iter()
        .map(|r| format!("'{}'", r.as_str()))
        .collect();
    validation::add_rule(
        schema,
        &format!("self.all(k, k in [{}])", roles.join(", ")),
        &format!(
            "securityGroupOverrides keys are security group roles: {}",
            SecurityGroupRole::ALL
                .map(SecurityGroupRole::as_str)
                .join(", ")
        ),
    );
}

/// Subnets are keyed by `id` (a list-map, as CAPA's).
fn subnets_by_id(schema: &mut schemars::Schema) {
    validation::list_map(schema, &["id"]);
}

/// The cluster's network (CAPA's `NetworkSpec`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    /// The VPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<VpcSpec>,
    /// Subnets: existing ones (then every subnet of the cluster is listed), or those to create
    /// (one public and one private per availability zone when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), transform = subnets_by_id)]
    pub subnets: Vec<SubnetSpec>,
    /// The CNI's rules between nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni: Option<CniSpec>,
    /// Existing security groups to use instead of creating the one of a role (`sg-…` by role).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(
        extend("maxProperties" = 4),
        transform = override_roles
    )]
    pub security_group_overrides: BTreeMap<String, String>,
    /// More rules for the control-plane security group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub additional_control_plane_ingress_rules: Vec<IngressRule>,
    /// More rules for the nodes' security group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub additional_node_ingress_rules: Vec<IngressRule>,
}

/// The VPC the cluster uses, as found or created.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VpcStatus {
    /// `vpc-…`.
    pub id: String,
    /// Its CIDR.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cidr_block: String,
}

/// A subnet the cluster uses, as found or created.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetStatus {
    /// The spec's `id` (a name of the user's choosing, or the subnet's ID), or for a subnet the
    /// provider planned itself, `public-<zone>`/`private-<zone>`.
    pub id: String,
    /// `subnet-…`.
    #[serde(rename = "resourceID")]
    pub resource_id: String,
    /// Its zone.
    pub availability_zone: String,
    /// Its CIDR.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cidr_block: String,
    /// Public or private.
    pub is_public: bool,
    /// Its route table.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "routeTableId"
    )]
    pub route_table_id: Option<String>,
    /// The NAT gateway in it (public subnets).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "natGatewayId"
    )]
    pub nat_gateway_id: Option<String>,
}

/// A security group the cluster uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupStatus {
    /// `sg-…`.
    pub id: String,
    /// Its name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// The API server's load balancer, as created.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerStatus {
    /// Its ARN.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub arn: String,
    /// Its name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Its DNS name: the cluster's endpoint host.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dns_name: String,
    /// `internet-facing` or `internal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<LoadBalancerScheme>,
    /// Its type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_type: Option<LoadBalancerType>,
    /// The target group the control-plane machines are registered in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_group_arn: Option<String>,
    /// The listener on the API server port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener_arn: Option<String>,
}

/// Whether a load balancer is reachable from the internet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LoadBalancerScheme {
    /// Reachable from the internet (in public subnets).
    #[default]
    #[serde(rename = "internet-facing")]
    InternetFacing,
    /// Reachable from inside the VPC only (in private subnets).
    #[serde(rename = "internal")]
    Internal,
}

/// The API server's load balancer type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LoadBalancerType {
    /// An ELBv2 network load balancer (TCP on the API server port).
    #[default]
    #[serde(rename = "nlb")]
    Nlb,
    /// None: `spec.controlPlaneEndpoint` must be set by the user.
    #[serde(rename = "disabled")]
    Disabled,
}

/// What the provider found or created of the cluster's network (CAPA's `networkStatus`, with the
/// VPC and subnets that CAPA writes back into the spec).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    /// The VPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<VpcStatus>,
    /// The internet gateway.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "internetGatewayId"
    )]
    pub internet_gateway_id: Option<String>,
    /// The subnets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<SubnetStatus>,
    /// The security groups, by role.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub security_groups: BTreeMap<String, SecurityGroupStatus>,
    /// The API server's load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_elb: Option<LoadBalancerStatus>,
    /// The NAT gateways' public addresses.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "natGatewaysIPs"
    )]
    pub nat_gateways_ips: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_named_as_serialised() {
        for role in SecurityGroupRole::ALL {
            assert_eq!(
                serde_json::to_value(role).ok(),
                Some(serde_json::Value::String(role.as_str().to_string()))
            );
        }
    }

    #[test]
    fn protocols_take_ec2s_names() {
        let names: Vec<String> = [
            SecurityGroupProtocol::All,
            SecurityGroupProtocol::IpInIp,
            SecurityGroupProtocol::Tcp,
            SecurityGroupProtocol::Icmpv6,
            SecurityGroupProtocol::Esp,
        ]
        .iter()
        .filter_map(|p| {
            let serialised = serde_json::to_value(p).ok()?;
            assert_eq!(serialised.as_str(), Some(p.as_str()));
            serialised.as_str().map(str::to_string)
        })
        .collect();
        assert_eq!(names, ["-1", "4", "tcp", "58", "50"]);
    }
}
