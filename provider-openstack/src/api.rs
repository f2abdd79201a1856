//! The OpenStack provider's kinds — `OpenStackCluster`, `OpenStackMachine`,
//! `OpenStackMachineTemplate` — in group `infrastructure.capi-rs.dev` (upstream CAPO's kinds live
//! in `infrastructure.cluster.x-k8s.io`, so both can be installed side by side). Field names and
//! shapes follow CAPO's `v1beta2` API where they overlap; what is supported is listed here, and
//! nothing else is accepted (the schema is closed).
//!
//! References to OpenStack resources are *params*: either an `id`, or a `filter` that must match
//! exactly one resource — never both (the schema rejects an object with both or neither).

use capi_core::api::validation;
use capi_core::api::{ApiEndpoint, TemplateMetadata};
use capi_core::infra::{
    InfraCluster, InfraClusterStatus, InfraMachine, InfraMachineStatus, InfraMachineTemplate,
    MachineTemplateStatus,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the OpenStack provider's kinds.
pub const GROUP: &str = "infrastructure.capi-rs.dev";
/// Their version, recorded in the CRDs' contract label.
pub const VERSION: &str = "v1alpha1";

/// Exactly one of `id` or `filter` (a CEL rule): what every param's schema adds.
fn one_of_id_or_filter(schema: &mut schemars::Schema) {
    validation::exactly_one_of(schema, "id", "filter");
}

/// Filters by name and tags (every tag must be present).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NameFilter {
    /// The resource's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub name: Option<String>,
    /// Tags the resource carries, all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 255)))]
    pub tags: Vec<String>,
}

macro_rules! param {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "camelCase")]
        #[schemars(transform = one_of_id_or_filter)]
        pub struct $name {
            /// The resource's UUID.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(length(min = 1, max = 255))]
            pub id: Option<String>,
            /// A filter that must match exactly one resource.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub filter: Option<NameFilter>,
        }
    };
}

param!(
    /// A Neutron network.
    NetworkParam
);
param!(
    /// A Neutron subnet.
    SubnetParam
);
param!(
    /// A Neutron security group.
    SecurityGroupParam
);
param!(
    /// A Glance image.
    ImageParam
);
param!(
    /// A Nova flavor.
    FlavorParam
);
param!(
    /// A Nova server group.
    ServerGroupParam
);

/// Where the cloud credentials are: a Secret in the object's namespace holding `clouds.yaml`
/// (and optionally `cacert`, a PEM CA bundle for the cloud's TLS endpoints).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityReference {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253), pattern(validation::DNS_SUBDOMAIN))]
    pub name: String,
    /// The cloud's entry in `clouds.yaml`.
    #[schemars(length(min = 1, max = 255))]
    pub cloud_name: String,
    /// The region, when `clouds.yaml` names none or another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub region: Option<String>,
}

/// A subnet the provider creates in the cluster's managed network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSpec {
    /// The subnet's CIDR, e.g. `10.6.0.0/24`.
    #[schemars(length(min = 1, max = 43), pattern(validation::CIDR))]
    pub cidr: String,
    /// DNS servers handed out on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), inner(length(min = 1, max = 45)))]
    pub dns_nameservers: Vec<String>,
}

/// The security groups the provider manages: one for control-plane nodes, one for workers, with
/// rules for the API server (6443), kubelet (10250), etcd between control-plane nodes and the
/// CNI's traffic between nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedSecurityGroups {
    /// Allow all traffic between the cluster's nodes (instead of the per-port rules).
    #[serde(default)]
    pub allow_all_in_cluster_traffic: bool,
}

/// The API server's Octavia load balancer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiServerLoadBalancer {
    /// Create and manage it (listener, pool and health monitor on the API server port).
    #[serde(default)]
    pub enabled: bool,
    /// CIDRs allowed to reach the listener (all when empty).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "allowedCIDRs"
    )]
    #[schemars(
        length(max = 64),
        inner(length(min = 1, max = 43), pattern(validation::CIDR))
    )]
    pub allowed_cidrs: Vec<String>,
    /// The Octavia provider (`amphora`, `ovn`); the cloud's default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub provider: Option<String>,
}

/// How the API server is reached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiServer {
    /// The port (6443 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// A floating IP to use as the endpoint (allocated when unset and floating IPs are enabled).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "floatingIP"
    )]
    #[schemars(length(min = 1, max = 45))]
    pub floating_ip: Option<String>,
    /// Put a floating IP in front of the API server (default true with an external network).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "enableFloatingIP"
    )]
    pub enable_floating_ip: Option<bool>,
    /// A fixed IP for the load balancer's VIP.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "fixedIP")]
    #[schemars(length(min = 1, max = 45))]
    pub fixed_ip: Option<String>,
    /// The managed load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_load_balancer: Option<ApiServerLoadBalancer>,
}

/// The cluster-wide infrastructure of a workload cluster on OpenStack.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "OpenStackCluster",
    plural = "openstackclusters",
    namespaced,
    status = "OpenStackClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "OpenStackCluster is the network, security groups and API server endpoint of a cluster on OpenStack.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(name = "Network", type_ = "string", json_path = ".status.network.id"),
    printcolumn(
        name = "Load Balancer",
        type_ = "string",
        json_path = ".status.apiServerLoadBalancer.id"
    ),
    printcolumn(
        name = "Router",
        type_ = "string",
        json_path = ".status.router.id",
        priority = 1
    ),
    printcolumn(
        name = "Floating IP",
        type_ = "string",
        json_path = ".status.apiServerLoadBalancer.floatingIPID",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackClusterSpec {
    /// The cloud credentials.
    pub identity_ref: IdentityReference,
    /// The external network for the router and floating IPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_network: Option<NetworkParam>,
    /// Subnets of a network the provider creates (with a router to the external network).
    /// Exclusive with `network`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub managed_subnets: Vec<SubnetSpec>,
    /// An existing network to use instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkParam>,
    /// Subnets of the existing network to use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub subnets: Vec<SubnetParam>,
    /// Security groups the provider manages; none when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_security_groups: Option<ManagedSecurityGroups>,
    /// How the API server is reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server: Option<ApiServer>,
    /// The endpoint, set by the provider (or by the user, for a fixed endpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Availability zones for control-plane machines (reported as failure domains).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 255)))]
    pub control_plane_availability_zones: Vec<String>,
    /// Tags put on every resource the provider creates (besides the cluster's own tag).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 255)))]
    pub tags: Vec<String>,
}

/// An OpenStack resource the provider created or uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    /// Its UUID.
    pub id: String,
    /// Its name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// The API server's load balancer and the addresses in front of it (CAPO's
/// `apiServerLoadBalancer`, plus the floating IP's UUID).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerStatus {
    /// The Octavia load balancer's UUID.
    pub id: String,
    /// Its name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The address clients reach the API server on: the floating IP, else the VIP.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ip")]
    pub ip: Option<String>,
    /// The load balancer's VIP on the cluster's subnet.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "internalIP"
    )]
    pub internal_ip: Option<String>,
    /// The UUID of the floating IP in front of the VIP, when there is one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "floatingIPID"
    )]
    pub floating_ip_id: Option<String>,
}

/// The observed state of an `OpenStackCluster`: the contract fields and what was created.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackClusterStatus {
    /// `initialization`, `failureDomains`, `conditions` (infrastructure provider contract).
    #[serde(flatten)]
    pub contract: InfraClusterStatus,
    /// The cluster's network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<ResourceStatus>,
    /// Its subnets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<ResourceStatus>,
    /// The router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<ResourceStatus>,
    /// The external network the router and floating IPs use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_network: Option<ResourceStatus>,
    /// The API server's load balancer and floating IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_load_balancer: Option<LoadBalancerStatus>,
    /// The control-plane security group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_security_group: Option<ResourceStatus>,
    /// The workers' security group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_security_group: Option<ResourceStatus>,
}

impl InfraCluster for OpenStackCluster {
    fn control_plane_endpoint(&self) -> Option<&ApiEndpoint> {
        self.spec.control_plane_endpoint.as_ref()
    }

    fn infra_status(&self) -> Option<&InfraClusterStatus> {
        self.status.as_ref().map(|s| &s.contract)
    }
}

/// A fixed IP on a port: in a subnet, optionally at an address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FixedIp {
    /// The subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<SubnetParam>,
    /// The address.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ipAddress")]
    #[schemars(length(min = 1, max = 45))]
    pub ip_address: Option<String>,
}

/// An address the port may also answer for (per-node pod CIDRs without an overlay).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddressPair {
    /// An IP address or CIDR.
    #[serde(rename = "ipAddress")]
    #[schemars(length(min = 1, max = 49))]
    pub ip_address: String,
    /// A MAC address (the port's when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 17))]
    pub mac_address: Option<String>,
}

/// A port of the server, created before it (named after the machine and adopted if it exists).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortOpts {
    /// The network (the cluster's when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkParam>,
    /// Fixed IPs.
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "fixedIPs")]
    #[schemars(length(max = 8))]
    pub fixed_ips: Vec<FixedIp>,
    /// Security groups (the cluster's managed ones for the machine's role when unset).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub security_groups: Vec<SecurityGroupParam>,
    /// Allowed address pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub allowed_address_pairs: Vec<AddressPair>,
    /// Appended to the port's name (`<machine>-<suffix>`; the port's index when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(validation::DNS_LABEL))]
    pub name_suffix: Option<String>,
}

/// A key/value of the server's metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerMetadata {
    /// The key.
    #[schemars(length(min = 1, max = 255))]
    pub key: String,
    /// The value.
    #[schemars(length(max = 255))]
    pub value: String,
}

/// What an `OpenStackMachine` boots: a Nova server with its ports for one Machine.
#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "OpenStackMachine",
    plural = "openstackmachines",
    namespaced,
    status = "OpenStackMachineStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "OpenStackMachine is a Nova server with its ports for one Machine.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(name = "Provider ID", type_ = "string", json_path = ".spec.providerID"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.instanceState"),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackMachineSpec {
    /// `openstack:///<server-id>`; set by the provider.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,
    /// The flavor. Immutable.
    pub flavor: FlavorParam,
    /// The image. Immutable.
    pub image: ImageParam,
    /// A Nova keypair for SSH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub ssh_key_name: Option<String>,
    /// The server's ports; one on the cluster's network when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub ports: Vec<PortOpts>,
    /// Extra security groups on every port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub security_groups: Vec<SecurityGroupParam>,
    /// A server group (anti-affinity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_group: Option<ServerGroupParam>,
    /// Server metadata (the provider adds the machine's UID).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub server_metadata: Vec<ServerMetadata>,
    /// Tags on the server and its ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 255)))]
    pub tags: Vec<String>,
    /// Attach a config drive (for clouds without a metadata service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_drive: Option<bool>,
    /// Put the cloud provider's `cloud.conf` — the cluster's OpenStack credentials — on this
    /// machine (with `openstack-manager --with-bootstrap`; see `provider_openstack::cloud_conf`).
    /// Off unless set: only the machines that run the cloud controller manager (usually the
    /// control plane) need it, and every machine that has it can act as the project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_cloud_conf: Option<bool>,
}

/// Nova's state of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum InstanceState {
    /// Being built.
    #[serde(rename = "BUILD")]
    Build,
    /// Running.
    #[serde(rename = "ACTIVE")]
    Active,
    /// Failed; the Ready condition carries Nova's fault message.
    #[serde(rename = "ERROR")]
    Error,
    /// Stopped.
    #[serde(rename = "SHUTOFF")]
    Shutoff,
    /// Deleted.
    #[serde(rename = "DELETED")]
    Deleted,
}

/// The observed state of an `OpenStackMachine`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackMachineStatus {
    /// `initialization`, `addresses`, `conditions` (infrastructure provider contract).
    #[serde(flatten)]
    pub contract: InfraMachineStatus,
    /// The server's UUID.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "instanceID"
    )]
    pub instance_id: Option<String>,
    /// Nova's state of the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_state: Option<InstanceState>,
}

impl InfraMachine for OpenStackMachine {
    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }

    fn infra_status(&self) -> Option<&InfraMachineStatus> {
        self.status.as_ref().map(|s| &s.contract)
    }
}

/// A template for `OpenStackMachine`s, used by `MachineSet`s and `MachineDeployment`s.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "OpenStackMachineTemplate",
    plural = "openstackmachinetemplates",
    namespaced,
    status = "MachineTemplateStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "OpenStackMachineTemplate stamps out OpenStackMachines.",
    printcolumn(name = "CPU", type_ = "string", json_path = ".status.capacity.cpu"),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.capacity.memory"
    ),
    printcolumn(
        name = "Architecture",
        type_ = "string",
        json_path = ".status.nodeInfo.architecture"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackMachineTemplateSpec {
    /// What each machine gets.
    pub template: OpenStackMachineTemplateResource,
}

/// `OpenStackMachineTemplate.spec.template`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackMachineTemplateResource {
    /// The spec of each machine.
    pub spec: OpenStackMachineSpec,
}

impl InfraMachineTemplate for OpenStackMachineTemplate {
    fn template_status(&self) -> Option<&MachineTemplateStatus> {
        self.status.as_ref()
    }
}

/// A template for `OpenStackCluster`s, used by a `ClusterClass`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "OpenStackClusterTemplate",
    plural = "openstackclustertemplates",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "OpenStackClusterTemplate stamps out OpenStackClusters for a ClusterClass.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackClusterTemplateSpec {
    /// What each cluster gets.
    pub template: OpenStackClusterTemplateResource,
}

/// `OpenStackClusterTemplate.spec.template`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackClusterTemplateResource {
    /// Labels and annotations for the clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The spec of each cluster.
    pub spec: OpenStackClusterSpec,
}

/// The provider's CRDs, labelled with the Cluster API contract version.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    [
        OpenStackCluster::crd(),
        OpenStackClusterTemplate::crd(),
        OpenStackMachine::crd(),
        OpenStackMachineTemplate::crd(),
    ]
    .into_iter()
    .map(|crd| capi_core::crd::with_contract_version(crd, VERSION))
    .collect()
}
