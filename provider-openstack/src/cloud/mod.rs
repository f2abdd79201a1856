//! The OpenStack services the actuators use, each behind a narrow trait so that the actuators can be
//! unit-tested with `mockall` mocks (feature `mock`).
//!
//! - [`Compute`] (Nova): servers, flavors, server groups;
//! - [`Images`] (Glance): image lookup;
//! - [`Networking`] (Neutron): networks, subnets, routers, security groups, ports, floating IPs;
//! - [`LoadBalancing`] (Octavia): load balancers, listeners, pools, members, monitors.
//!
//! [`session::Session`] implements all four over one authenticated `openstack_sdk` session (token
//! cached and renewed by the SDK, endpoints from the service catalog); [`session::Sessions`] shares
//! sessions between reconciles and drops one when its credentials Secret changes.
//!
//! The types here are the few fields the provider reads, deserialized from the services' JSON.

mod compute;
mod load_balancer;
mod message;
mod network;
pub mod session;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use session::{Session, Sessions};

/// The log targets under which `openstack_sdk` writes whole request and response bodies (a
/// password, user data) at TRACE level; a manager drops their TRACE events
/// (`capi_runtime::telemetry::init_logging_without_bodies`).
pub const SDK_BODY_LOG_TARGETS: &[&str] = &["openstack_sdk"];

/// Why a cloud call failed, classified for the reconcile loop.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// The resource does not exist (404).
    #[error("{what} not found")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// The service refused because of the resource's state (409: in use, `PENDING_*`, quota of a
    /// conflicting kind). Retrying later is the remedy.
    #[error("{what}: conflict: {message}")]
    Conflict {
        /// The call.
        what: String,
        /// The service's message.
        message: String,
    },
    /// The request is wrong in a way only the user can fix (400, 403 on a resource, no valid host…).
    #[error("{what}: rejected: {message}")]
    Rejected {
        /// The call.
        what: String,
        /// The service's message.
        message: String,
    },
    /// Authentication failed or the catalog lacks the service.
    #[error("cannot authenticate with the cloud or find its service endpoints: {message}")]
    Auth {
        /// What went wrong (never the credentials themselves).
        message: String,
    },
    /// Anything else: network errors, 5xx, unexpected responses. Retried with backoff.
    #[error("{what}: {message}")]
    Transient {
        /// The call.
        what: String,
        /// What happened.
        message: String,
    },
}

impl CloudError {
    /// Whether the error is a 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// Whether the same call may succeed if made again at once: a network error, a 5xx, an
    /// answer that could not be read — not a refusal, a conflict or an authentication failure.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient { .. })
    }
}

/// Results of cloud calls.
pub type CloudResult<T> = Result<T, CloudError>;

/// A Nova server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Server {
    /// Its ID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// `BUILD`, `ACTIVE`, `ERROR`, `DELETED`, …
    #[serde(default)]
    pub status: String,
    /// Its metadata (the provider's machine UID key among them).
    #[serde(default)]
    pub metadata: std::collections::BTreeMap<String, String>,
    /// Its tags (Nova 2.26+; the cluster's tag among them).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Nova's fault, when `status` is `ERROR`.
    #[serde(default)]
    pub fault: Option<ServerFault>,
    /// The availability zone it runs in.
    #[serde(default, rename = "OS-EXT-AZ:availability_zone")]
    pub availability_zone: Option<String>,
    /// The flavor it was booted with, as Nova (2.47+) describes it.
    #[serde(default)]
    pub flavor: Option<ServerFlavor>,
    /// The ID of the image it was booted from (none when it boots from a volume).
    #[serde(default, rename = "image", deserialize_with = "image_id")]
    pub image_id: Option<String>,
}

/// A server's flavor, as Nova reports it on the server (its name, not its ID).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerFlavor {
    /// The flavor's name when the server was booted.
    #[serde(default)]
    pub original_name: Option<String>,
}

/// Nova reports `"image": {"id": …}`, or `""` for a server booted from a volume.
fn image_id<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(value["id"].as_str().map(str::to_string))
}

/// Why a server is in `ERROR`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerFault {
    /// Nova's message.
    #[serde(default)]
    pub message: String,
}

/// What to boot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerCreate {
    /// The server name.
    pub name: String,
    /// The flavor's ID.
    pub flavor_id: String,
    /// The image's ID.
    pub image_id: String,
    /// The Nova key pair, if any.
    pub key_name: Option<String>,
    /// The ports to attach, in order.
    pub port_ids: Vec<String>,
    /// The user data (bootstrap data), sent base64-encoded.
    pub user_data: Vec<u8>,
    /// Server metadata.
    pub metadata: std::collections::BTreeMap<String, String>,
    /// Server tags.
    pub tags: Vec<String>,
    /// Availability zone.
    pub availability_zone: Option<String>,
    /// Server group (scheduler hint).
    pub server_group_id: Option<String>,
    /// Config drive.
    pub config_drive: bool,
}

/// A Nova flavor, with the sizes Nova reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Flavor {
    /// Its ID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Virtual CPUs.
    #[serde(default)]
    pub vcpus: u32,
    /// Memory, in MiB.
    #[serde(default)]
    pub ram: u64,
    /// Root disk, in GiB (0: the root disk is a volume sized by the machine).
    #[serde(default)]
    pub disk: u64,
}

/// A Glance image, with the properties that describe the nodes booted from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Image {
    /// Its ID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// The `architecture` property (`x86_64`, `aarch64`, ...), when set.
    #[serde(default)]
    pub architecture: Option<String>,
    /// The `os_type` property (`linux`, `windows`), when set.
    #[serde(default)]
    pub os_type: Option<String>,
}

/// A named thing with an ID (server group, network…).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Named {
    /// Its ID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
}

/// A Neutron network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Network {
    /// Its ID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its description (the owner, for what this provider creates: see [`crate::naming`]);
    /// empty when the cloud gives none (or `null`).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub description: String,
    /// Its subnets' IDs.
    #[serde(default)]
    pub subnets: Vec<String>,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Whether it is an external network.
    #[serde(default, rename = "router:external")]
    pub external: bool,
}

/// A string field a cloud may send as `null`: empty then.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_default())
}

/// A Neutron subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Subnet {
    /// Its ID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its description (the owner, for what this provider creates: see [`crate::naming`]);
    /// empty when the cloud gives none (or `null`).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub description: String,
    /// Its network.
    #[serde(default)]
    pub network_id: String,
    /// Its CIDR.
    #[serde(default)]
    pub cidr: String,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A Neutron router.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Router {
    /// Its ID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its description (the owner, for what this provider creates: see [`crate::naming`]);
    /// empty when the cloud gives none (or `null`).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub description: String,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A Neutron security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct SecurityGroup {
    /// Its ID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its description (the owner, for what this provider creates: see [`crate::naming`]);
    /// empty when the cloud gives none (or `null`).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub description: String,
    /// Its rules.
    #[serde(default)]
    pub security_group_rules: Vec<SecurityGroupRule>,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A rule of a security group. Equality ignores the ID, so desired and actual rules compare.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct SecurityGroupRule {
    /// Its ID (absent in a desired rule).
    #[serde(default, skip_serializing)]
    pub id: String,
    /// `ingress` or `egress`.
    pub direction: String,
    /// `IPv4` or `IPv6`.
    #[serde(default = "ipv4")]
    pub ethertype: String,
    /// `tcp`, `udp`, `icmp`, a number, or none for any.
    #[serde(default)]
    pub protocol: Option<String>,
    /// The first port.
    #[serde(default)]
    pub port_range_min: Option<u16>,
    /// The last port.
    #[serde(default)]
    pub port_range_max: Option<u16>,
    /// The source CIDR.
    #[serde(default)]
    pub remote_ip_prefix: Option<String>,
    /// The source security group.
    #[serde(default)]
    pub remote_group_id: Option<String>,
    /// A human-readable purpose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

fn ipv4() -> String {
    "IPv4".to_string()
}

impl Eq for SecurityGroupRule {}

impl PartialEq for SecurityGroupRule {
    fn eq(&self, other: &Self) -> bool {
        self.direction == other.direction
            && self.ethertype == other.ethertype
            && self.protocol == other.protocol
            && self.port_range_min == other.port_range_min
            && self.port_range_max == other.port_range_max
            && self.remote_ip_prefix == other.remote_ip_prefix
            && self.remote_group_id == other.remote_group_id
    }
}

/// A Neutron resource the provider creates and tags.
pub trait NeutronResource {
    /// Its collection in Neutron's URLs (`networks`, `security-groups`, …), as
    /// [`Networking::set_tags`] takes it.
    const COLLECTION: &'static str;
    /// Its ID.
    fn id(&self) -> &str;
    /// Its description.
    fn description(&self) -> &str;
}

macro_rules! neutron_resource {
    ($($kind:ty => $collection:literal),* $(,)?) => {$(
        impl NeutronResource for $kind {
            const COLLECTION: &'static str = $collection;
            fn id(&self) -> &str {
                &self.id
            }
            fn description(&self) -> &str {
                &self.description
            }
        }
    )*};
}

neutron_resource!(
    Network => "networks",
    Subnet => "subnets",
    Router => "routers",
    SecurityGroup => "security-groups",
    Port => "ports",
    FloatingIp => "floatingips",
);

/// A Neutron port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Port {
    /// Its ID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its network.
    #[serde(default)]
    pub network_id: String,
    /// The server (or router, load balancer…) using it.
    #[serde(default)]
    pub device_id: String,
    /// `compute:nova`, `network:router_interface`, …
    #[serde(default)]
    pub device_owner: String,
    /// Its fixed IPs.
    #[serde(default)]
    pub fixed_ips: Vec<PortFixedIp>,
    /// Its allowed address pairs.
    #[serde(default)]
    pub allowed_address_pairs: Vec<PortAddressPair>,
    /// Its security groups.
    #[serde(default)]
    pub security_groups: Vec<String>,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Its description.
    #[serde(default)]
    pub description: String,
}

/// A fixed IP of a port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct PortFixedIp {
    /// The subnet.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subnet_id: String,
    /// The address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip_address: String,
}

/// An allowed address pair of a port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct PortAddressPair {
    /// An address or CIDR.
    pub ip_address: String,
    /// The MAC (the port's own when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
}

/// A port to create.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortCreate {
    /// Its name.
    pub name: String,
    /// Its description (carries the owner's identity).
    pub description: String,
    /// Its network.
    pub network_id: String,
    /// Fixed IPs to request (empty: one from any subnet).
    pub fixed_ips: Vec<PortFixedIp>,
    /// Security groups (empty: none, not the project default).
    pub security_group_ids: Vec<String>,
    /// Allowed address pairs.
    pub allowed_address_pairs: Vec<PortAddressPair>,
    /// Tags.
    pub tags: Vec<String>,
}

/// A Neutron floating IP.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct FloatingIp {
    /// Its ID.
    pub id: String,
    /// The address.
    #[serde(default)]
    pub floating_ip_address: String,
    /// The port it is associated with.
    #[serde(default)]
    pub port_id: Option<String>,
    /// Its description.
    #[serde(default)]
    pub description: String,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// An Octavia load balancer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct LoadBalancer {
    /// Its ID.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its description (the owner, for what this provider creates: see [`crate::naming`]);
    /// empty when the cloud gives none (or `null`).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub description: String,
    /// `ACTIVE`, `PENDING_CREATE`, `PENDING_UPDATE`, `PENDING_DELETE`, `ERROR`, `DELETED`.
    #[serde(default)]
    pub provisioning_status: String,
    /// The VIP address.
    #[serde(default)]
    pub vip_address: String,
    /// The VIP's Neutron port (may not exist in Neutron with some drivers).
    #[serde(default)]
    pub vip_port_id: Option<String>,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

impl LoadBalancer {
    /// Whether changes are accepted now (`ACTIVE`); Octavia answers 409 while `PENDING_*`.
    pub fn is_active(&self) -> bool {
        self.provisioning_status == "ACTIVE"
    }
}

/// An Octavia listener, pool, monitor or member: an ID and a name is all the provider reads.
pub type LbChild = Named;

/// A pool member.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Member {
    /// Its ID.
    pub id: String,
    /// Its name (the machine's).
    #[serde(default)]
    pub name: String,
    /// Its address.
    #[serde(default)]
    pub address: String,
    /// Its port.
    #[serde(default)]
    pub protocol_port: u16,
}

/// Nova and the flavors and server groups it knows.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Compute: Send + Sync {
    /// The server with this ID, if it exists (and is not `DELETED`).
    async fn get_server(&self, id: &str) -> CloudResult<Option<Server>>;
    /// Servers whose name is exactly `name`.
    async fn servers_named(&self, name: &str) -> CloudResult<Vec<Server>>;
    /// Servers carrying `tag`.
    async fn servers_tagged(&self, tag: &str) -> CloudResult<Vec<Server>>;
    /// Boots a server.
    async fn create_server(&self, server: &ServerCreate) -> CloudResult<Server>;
    /// Deletes a server (a 404 is success).
    async fn delete_server(&self, id: &str) -> CloudResult<()>;
    /// The flavor with this name or ID.
    async fn find_flavor(&self, name_or_id: &str) -> CloudResult<Option<Flavor>>;
    /// The server group with this name or ID.
    async fn find_server_group(&self, name_or_id: &str) -> CloudResult<Option<Named>>;
}

/// Glance.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Images: Send + Sync {
    /// Images with this name (or the one with this ID), optionally also carrying all `tags`.
    async fn find_images(&self, name_or_id: &str, tags: &[String]) -> CloudResult<Vec<Image>>;
}

/// Neutron.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Networking: Send + Sync {
    /// Networks matching every given query parameter (e.g. `name`, `tags`, `id`,
    /// `router:external`).
    async fn networks(&self, query: &[(String, String)]) -> CloudResult<Vec<Network>>;
    /// Creates a network.
    async fn create_network(&self, name: &str, description: &str) -> CloudResult<Network>;
    /// Deletes a network (a 404 is success).
    async fn delete_network(&self, id: &str) -> CloudResult<()>;

    /// Subnets matching every given query parameter.
    async fn subnets(&self, query: &[(String, String)]) -> CloudResult<Vec<Subnet>>;
    /// Creates an IPv4 subnet.
    async fn create_subnet(
        &self,
        network_id: &str,
        name: &str,
        cidr: &str,
        dns_nameservers: &[String],
        description: &str,
    ) -> CloudResult<Subnet>;
    /// Deletes a subnet (a 404 is success).
    async fn delete_subnet(&self, id: &str) -> CloudResult<()>;

    /// Routers matching every given query parameter.
    async fn routers(&self, query: &[(String, String)]) -> CloudResult<Vec<Router>>;
    /// Creates a router with a gateway on `external_network_id` (if any).
    async fn create_router(
        &self,
        name: &str,
        external_network_id: Option<String>,
        description: &str,
    ) -> CloudResult<Router>;
    /// Attaches a subnet to a router (attaching twice is success).
    async fn add_router_interface(&self, router_id: &str, subnet_id: &str) -> CloudResult<()>;
    /// Detaches a subnet from a router (a missing interface is success).
    async fn remove_router_interface(&self, router_id: &str, subnet_id: &str) -> CloudResult<()>;
    /// Deletes a router (a 404 is success).
    async fn delete_router(&self, id: &str) -> CloudResult<()>;

    /// Security groups matching every given query parameter, with their rules.
    async fn security_groups(&self, query: &[(String, String)]) -> CloudResult<Vec<SecurityGroup>>;
    /// Creates a security group (Neutron adds its default egress rules).
    async fn create_security_group(
        &self,
        name: &str,
        description: &str,
    ) -> CloudResult<SecurityGroup>;
    /// Adds a rule.
    async fn create_security_group_rule(
        &self,
        group_id: &str,
        rule: &SecurityGroupRule,
    ) -> CloudResult<()>;
    /// Removes a rule (a 404 is success).
    async fn delete_security_group_rule(&self, rule_id: &str) -> CloudResult<()>;
    /// Deletes a security group (a 404 is success; 409 while ports use it).
    async fn delete_security_group(&self, id: &str) -> CloudResult<()>;

    /// Ports matching every given query parameter.
    async fn ports(&self, query: &[(String, String)]) -> CloudResult<Vec<Port>>;
    /// Creates a port, tagged with `port.tags`; the port as created, with those tags.
    async fn create_port(&self, port: &PortCreate) -> CloudResult<Port>;
    /// Replaces a port's allowed address pairs.
    async fn set_allowed_address_pairs(
        &self,
        port_id: &str,
        pairs: &[PortAddressPair],
    ) -> CloudResult<()>;
    /// Deletes a port (a 404 is success).
    async fn delete_port(&self, id: &str) -> CloudResult<()>;

    /// Replaces the tags of a `resource` (`networks`, `subnets`, `routers`, `security-groups`,
    /// `ports`, `floatingips`).
    async fn set_tags(&self, resource: &str, id: &str, tags: &[String]) -> CloudResult<()>;

    /// Floating IPs matching every given query parameter.
    async fn floating_ips(&self, query: &[(String, String)]) -> CloudResult<Vec<FloatingIp>>;
    /// Allocates a floating IP on `network_id` (a given `address` if set), associated with
    /// `port_id` if set.
    async fn create_floating_ip(
        &self,
        network_id: &str,
        address: Option<String>,
        port_id: Option<String>,
        description: &str,
    ) -> CloudResult<FloatingIp>;
    /// Associates (or with `None` disassociates) a floating IP.
    async fn associate_floating_ip(&self, id: &str, port_id: Option<String>) -> CloudResult<()>;
    /// Releases a floating IP (a 404 is success).
    async fn delete_floating_ip(&self, id: &str) -> CloudResult<()>;
}

/// Octavia.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait LoadBalancing: Send + Sync {
    /// Load balancers with exactly this name.
    async fn load_balancers_named(&self, name: &str) -> CloudResult<Vec<LoadBalancer>>;
    /// The load balancer with this ID, if it exists.
    async fn get_load_balancer(&self, id: &str) -> CloudResult<Option<LoadBalancer>>;
    /// Creates a load balancer with its VIP on `subnet_id`.
    async fn create_load_balancer(
        &self,
        name: &str,
        subnet_id: &str,
        provider: Option<String>,
        tags: &[String],
        description: &str,
    ) -> CloudResult<LoadBalancer>;
    /// Deletes a load balancer and everything in it (cascade; a 404 is success).
    async fn delete_load_balancer(&self, id: &str) -> CloudResult<()>;

    /// Listeners of a load balancer.
    async fn listeners(&self, lb_id: &str) -> CloudResult<Vec<LbChild>>;
    /// Creates a TCP listener.
    async fn create_listener(
        &self,
        lb_id: &str,
        name: &str,
        port: u16,
        allowed_cidrs: &[String],
    ) -> CloudResult<LbChild>;
    /// Pools of a load balancer.
    async fn pools(&self, lb_id: &str) -> CloudResult<Vec<LbChild>>;
    /// Creates a round-robin TCP pool behind `listener_id`.
    async fn create_pool(&self, listener_id: &str, name: &str) -> CloudResult<LbChild>;
    /// Health monitors of a pool.
    async fn monitors(&self, pool_id: &str) -> CloudResult<Vec<LbChild>>;
    /// Creates a TCP health monitor on a pool.
    async fn create_monitor(&self, pool_id: &str, name: &str) -> CloudResult<LbChild>;
    /// Members of a pool.
    async fn members(&self, pool_id: &str) -> CloudResult<Vec<Member>>;
    /// Adds a member.
    async fn create_member(
        &self,
        pool_id: &str,
        name: &str,
        address: &str,
        port: u16,
        subnet_id: Option<String>,
    ) -> CloudResult<Member>;
    /// Removes a member (a 404 is success).
    async fn delete_member(&self, pool_id: &str, member_id: &str) -> CloudResult<()>;
}

#[cfg(test)]
mod description_tests {
    use super::*;

    #[test]
    fn a_null_description_reads_as_empty() {
        let router: Router = serde_json::from_value(serde_json::json!(
            {"id": "r", "name": "n", "description": null}
        ))
        .unwrap_or_default();
        assert_eq!((router.id.as_str(), router.description.as_str()), ("r", ""));
        let lb: LoadBalancer =
            serde_json::from_value(serde_json::json!({"id": "lb"})).unwrap_or_default();
        assert_eq!((lb.id.as_str(), lb.description.as_str()), ("lb", ""));
    }
}
