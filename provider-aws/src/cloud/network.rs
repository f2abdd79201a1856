//! EC2's networking side as the provider sees it: the VPC, subnets, gateways, elastic addresses,
//! route tables, security groups and their ingress rules, and network interfaces (what a
//! deletion may find left behind).

use async_trait::async_trait;

use super::error::CloudError;
use crate::api::{Filter, Tags};

/// A subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subnet {
    /// `subnet-…`.
    pub id: String,
    /// Its VPC.
    pub vpc_id: String,
    /// Its availability zone.
    pub zone: String,
    /// Its IPv4 range.
    pub cidr_block: String,
    /// Instances launched in it get a public address by default.
    pub map_public_ip_on_launch: bool,
    /// Its tags.
    pub tags: Tags,
}

/// A security group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecurityGroup {
    /// `sg-…`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its VPC.
    pub vpc_id: String,
    /// Its tags.
    pub tags: Tags,
    /// Its ingress rules, one source each.
    pub ingress: Vec<Permission>,
}

/// One ingress rule with one source: what EC2 calls a permission, flattened so that two sets of
/// rules compare entry by entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permission {
    /// `tcp`, `udp`, `icmp`, `-1` (all), or a protocol number (`4`).
    pub protocol: String,
    /// The first port (`-1` for all).
    pub from_port: i32,
    /// The last port (`-1` for all).
    pub to_port: i32,
    /// Where traffic may come from.
    pub source: PermissionSource,
    /// What the rule is for (not compared by [`Permission::same_rule`]).
    pub description: String,
}

impl Permission {
    /// Whether two permissions allow the same traffic (descriptions aside).
    pub fn same_rule(&self, other: &Self) -> bool {
        (&self.protocol, self.from_port, self.to_port, &self.source)
            == (
                &other.protocol,
                other.from_port,
                other.to_port,
                &other.source,
            )
    }
}

/// Where a [`Permission`] lets traffic come from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PermissionSource {
    /// An IPv4 range.
    Cidr(String),
    /// Members of a security group.
    Group(String),
}

impl Default for PermissionSource {
    fn default() -> Self {
        Self::Cidr("0.0.0.0/0".into())
    }
}

/// A VPC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vpc {
    /// `vpc-…`.
    pub id: String,
    /// Its IPv4 range.
    pub cidr_block: String,
    /// Its tags.
    pub tags: Tags,
}

/// An internet gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InternetGateway {
    /// `igw-…`.
    pub id: String,
    /// The VPCs it is attached to.
    pub vpc_ids: Vec<String>,
    /// Its tags.
    pub tags: Tags,
}

/// An elastic IP address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Address {
    /// `eipalloc-…`.
    pub allocation_id: String,
    /// The address.
    pub public_ip: String,
    /// Its association, while it is associated.
    pub association_id: Option<String>,
    /// Its tags.
    pub tags: Tags,
}

/// A NAT gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatGateway {
    /// `nat-…`.
    pub id: String,
    /// Its (public) subnet.
    pub subnet_id: String,
    /// `pending`, `available`, `deleting`, `deleted`, `failed`.
    pub state: String,
    /// Its elastic addresses' allocations.
    pub allocation_ids: Vec<String>,
    /// Its public addresses.
    pub public_ips: Vec<String>,
    /// Its tags.
    pub tags: Tags,
}

/// Where a route sends traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteTarget {
    /// An internet gateway.
    InternetGateway(String),
    /// A NAT gateway.
    NatGateway(String),
}

/// A route of a route table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Its destination range.
    pub destination: String,
    /// Its target (`None`: the VPC's local route, or a target this provider does not make).
    pub target: Option<RouteTarget>,
}

/// A route table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteTable {
    /// `rtb-…`.
    pub id: String,
    /// Its routes.
    pub routes: Vec<Route>,
    /// Its associations: `(association ID, subnet ID)`; the VPC's main association has no
    /// subnet.
    pub associations: Vec<(String, Option<String>)>,
    /// Its tags.
    pub tags: Tags,
}

/// A network interface.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkInterface {
    /// `eni-…`.
    pub id: String,
    /// `available` (detached) or `in-use`.
    pub status: String,
    /// What made it, in its description (`ELB net/…`).
    pub description: String,
    /// Its security groups.
    pub group_ids: Vec<String>,
}

/// EC2 networking. Every method is one or a few API calls, each taking a permit of the region's
/// budget ([`crate::throttle`]).
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Network: Send + Sync {
    /// The subnets matching every filter (`subnet-id`, `vpc-id`, `tag:<key>`, …).
    async fn subnets(&self, filters: &[Filter]) -> Result<Vec<Subnet>, CloudError>;

    /// The security groups matching every filter (`group-id`, `vpc-id`, `tag:<key>`, …).
    async fn security_groups(&self, filters: &[Filter]) -> Result<Vec<SecurityGroup>, CloudError>;

    /// The region's available availability zones (not local or wavelength zones), by name.
    async fn availability_zones(&self) -> Result<Vec<String>, CloudError>;

    /// The VPCs matching every filter.
    async fn vpcs(&self, filters: &[Filter]) -> Result<Vec<Vpc>, CloudError>;

    /// Creates a VPC, tagged at creation, with DNS support and DNS host names on.
    async fn create_vpc(&self, cidr_block: &str, tags: &Tags) -> Result<Vpc, CloudError>;

    /// Deletes a VPC (gone already: success).
    async fn delete_vpc(&self, id: &str) -> Result<(), CloudError>;

    /// Creates a subnet, tagged at creation.
    async fn create_subnet(
        &self,
        vpc_id: &str,
        cidr_block: &str,
        zone: &str,
        tags: &Tags,
    ) -> Result<Subnet, CloudError>;

    /// Makes instances launched in a subnet get a public address by default, or not.
    async fn set_map_public_ip_on_launch(
        &self,
        subnet_id: &str,
        enabled: bool,
    ) -> Result<(), CloudError>;

    /// Deletes a subnet (gone already: success).
    async fn delete_subnet(&self, id: &str) -> Result<(), CloudError>;

    /// The internet gateways matching every filter.
    async fn internet_gateways(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InternetGateway>, CloudError>;

    /// Creates an internet gateway, tagged at creation.
    async fn create_internet_gateway(&self, tags: &Tags) -> Result<InternetGateway, CloudError>;

    /// Attaches an internet gateway to a VPC.
    async fn attach_internet_gateway(&self, id: &str, vpc_id: &str) -> Result<(), CloudError>;

    /// Detaches an internet gateway from a VPC (not attached: success).
    async fn detach_internet_gateway(&self, id: &str, vpc_id: &str) -> Result<(), CloudError>;

    /// Deletes an internet gateway (gone already: success).
    async fn delete_internet_gateway(&self, id: &str) -> Result<(), CloudError>;

    /// The elastic addresses matching every filter.
    async fn addresses(&self, filters: &[Filter]) -> Result<Vec<Address>, CloudError>;

    /// Allocates an elastic address in the VPC scope, tagged at creation.
    async fn allocate_address(&self, tags: &Tags) -> Result<Address, CloudError>;

    /// Releases an elastic address (gone already: success).
    async fn release_address(&self, allocation_id: &str) -> Result<(), CloudError>;

    /// The NAT gateways matching every filter, deleted ones left out.
    async fn nat_gateways(&self, filters: &[Filter]) -> Result<Vec<NatGateway>, CloudError>;

    /// Creates a NAT gateway in a public subnet with an elastic address, tagged at creation;
    /// `client_token` makes a replay answer with the first one.
    async fn create_nat_gateway(
        &self,
        subnet_id: &str,
        allocation_id: &str,
        client_token: &str,
        tags: &Tags,
    ) -> Result<NatGateway, CloudError>;

    /// Deletes a NAT gateway (gone already: success); it takes a while to go.
    async fn delete_nat_gateway(&self, id: &str) -> Result<(), CloudError>;

    /// The route tables matching every filter.
    async fn route_tables(&self, filters: &[Filter]) -> Result<Vec<RouteTable>, CloudError>;

    /// Creates a route table in a VPC, tagged at creation.
    async fn create_route_table(&self, vpc_id: &str, tags: &Tags)
    -> Result<RouteTable, CloudError>;

    /// Adds a route to a route table.
    async fn create_route(
        &self,
        table_id: &str,
        destination: &str,
        target: &RouteTarget,
    ) -> Result<(), CloudError>;

    /// Associates a route table with a subnet.
    async fn associate_route_table(
        &self,
        table_id: &str,
        subnet_id: &str,
    ) -> Result<(), CloudError>;

    /// Removes a route table's association (gone already: success).
    async fn disassociate_route_table(&self, association_id: &str) -> Result<(), CloudError>;

    /// Deletes a route table (gone already: success).
    async fn delete_route_table(&self, id: &str) -> Result<(), CloudError>;

    /// Creates a security group in a VPC, tagged at creation.
    async fn create_security_group(
        &self,
        vpc_id: &str,
        name: &str,
        description: &str,
        tags: &Tags,
    ) -> Result<SecurityGroup, CloudError>;

    /// Adds ingress rules to a security group.
    async fn authorize_ingress(
        &self,
        group_id: &str,
        rules: &[Permission],
    ) -> Result<(), CloudError>;

    /// Removes ingress rules from a security group.
    async fn revoke_ingress(&self, group_id: &str, rules: &[Permission]) -> Result<(), CloudError>;

    /// Deletes a security group (gone already: success).
    async fn delete_security_group(&self, id: &str) -> Result<(), CloudError>;

    /// The network interfaces matching every filter.
    async fn network_interfaces(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<NetworkInterface>, CloudError>;

    /// Deletes a detached network interface (gone already: success).
    async fn delete_network_interface(&self, id: &str) -> Result<(), CloudError>;
}
