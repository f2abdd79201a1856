//! The bodies of the ARM resources the provider manages, as the provider reads and writes them:
//! only the properties it uses. A request body leaves every read-only property (`id`, `name`,
//! `type`, `provisioningState`, ...) unset; a response may carry properties not modelled here,
//! which are ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Tags by name.
pub type Tags = BTreeMap<String, String>;

/// A reference to another resource by ID (ARM's `SubResource`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubResource {
    /// The resource's ID.
    pub id: String,
}

impl SubResource {
    /// A reference to `id`.
    pub fn to(id: impl ToString) -> Self {
        Self { id: id.to_string() }
    }
}

/// ARM's provisioning state of a resource (`Succeeded`, `Failed`, `Canceled`, `Creating`,
/// `Updating`, `Deleting`, ...), compared without case.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProvisioningState(pub String);

impl ProvisioningState {
    /// `Succeeded`.
    pub fn succeeded(&self) -> bool {
        self.0.eq_ignore_ascii_case("Succeeded")
    }

    /// `Failed` or `Canceled`: the last operation did not complete.
    pub fn failed(&self) -> bool {
        self.0.eq_ignore_ascii_case("Failed") || self.0.eq_ignore_ascii_case("Canceled")
    }

    /// Neither succeeded nor failed: an operation is under way.
    pub fn in_progress(&self) -> bool {
        !self.succeeded() && !self.failed()
    }
}

/// The read-only properties every ARM resource answers with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Its ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its type (`Microsoft.Network/virtualNetworks`).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<String>,
}

/// `provisioningState` alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateOnly {
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A resource group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceGroup {
    /// Read-only.
    #[serde(flatten)]
    pub identity: Identity,
    /// Its location.
    pub location: String,
    /// Its tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<StateOnly>,
}

/// A virtual network's address space.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressSpace {
    /// Its CIDRs.
    pub address_prefixes: Vec<String>,
}

/// A virtual network's properties. Its subnets are managed as resources of their own, so a PUT
/// of the network carries those it has (never fewer: ARM deletes subnets a PUT leaves out).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualNetworkProperties {
    /// Its address space.
    pub address_space: AddressSpace,
    /// Its subnets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<Subnet>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A virtual network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtualNetwork {
    /// Read-only.
    #[serde(flatten)]
    pub identity: Identity,
    /// Its location.
    pub location: String,
    /// Its tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    /// Its properties.
    pub properties: VirtualNetworkProperties,
}

/// A subnet's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubnetProperties {
    /// Its CIDRs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub address_prefixes: Vec<String>,
    /// Its CIDR, as ARM answers when it has one only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_prefix: Option<String>,
    /// Its network security group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_security_group: Option<SubResource>,
    /// Its NAT gateway (its outbound path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_gateway: Option<SubResource>,
    /// Read-only: the IP configurations (network interfaces) in it, which keep it from being
    /// deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_configurations: Vec<SubResource>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A subnet (a child of its virtual network; its `name` is writable inside the network's body).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subnet {
    /// Its ID (read-only at the top level of a subnet's own PUT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<SubnetProperties>,
}

/// A security rule's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityRuleProperties {
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `Tcp`, `Udp`, `Icmp` or `*`.
    pub protocol: String,
    /// Source ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_port_range: Option<String>,
    /// Destination ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_port_range: Option<String>,
    /// The source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_address_prefix: Option<String>,
    /// Several sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_address_prefixes: Vec<String>,
    /// The destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_address_prefix: Option<String>,
    /// `Allow` or `Deny`.
    pub access: String,
    /// Lower first, 100–4096.
    pub priority: i32,
    /// `Inbound` or `Outbound`.
    pub direction: String,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A security rule of a network security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityRule {
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Its name.
    pub name: String,
    /// Its properties.
    pub properties: SecurityRuleProperties,
}

/// A network security group's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSecurityGroupProperties {
    /// Its rules.
    #[serde(default)]
    pub security_rules: Vec<SecurityRule>,
    /// Read-only: the subnets using it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<SubResource>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A network security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkSecurityGroup {
    /// Read-only.
    #[serde(flatten)]
    pub identity: Identity,
    /// Its location.
    pub location: String,
    /// Its tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    /// Its properties.
    pub properties: NetworkSecurityGroupProperties,
}

/// A SKU by name (`Standard`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sku {
    /// Its name.
    pub name: String,
}

/// A public IP address's DNS settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsSettings {
    /// The label: `<label>.<location>.cloudapp.azure.com`.
    pub domain_name_label: String,
    /// The full name (ARM fills it in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fqdn: Option<String>,
}

/// A public IP address's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublicIpAddressProperties {
    /// `Static`.
    #[serde(rename = "publicIPAllocationMethod")]
    pub public_ip_allocation_method: String,
    /// `IPv4`.
    #[serde(rename = "publicIPAddressVersion")]
    pub public_ip_address_version: String,
    /// Its DNS name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_settings: Option<DnsSettings>,
    /// The address (ARM assigns it).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ipAddress")]
    pub ip_address: Option<String>,
    /// Read-only: what uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_configuration: Option<SubResource>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A public IP address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicIpAddress {
    /// Read-only.
    #[serde(flatten)]
    pub identity: Identity,
    /// Its location.
    pub location: String,
    /// Its tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    /// `Standard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<Sku>,
    /// Its zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Its properties.
    pub properties: PublicIpAddressProperties,
}

/// A NAT gateway's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NatGatewayProperties {
    /// Its public IP addresses (what its traffic leaves from).
    #[serde(default)]
    pub public_ip_addresses: Vec<SubResource>,
    /// Minutes an idle flow is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_in_minutes: Option<i32>,
    /// Read-only: the subnets using it, which keep it from being deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<SubResource>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A NAT gateway: the outbound path of a subnet whose machines have no public IP.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NatGateway {
    /// Read-only.
    #[serde(flatten)]
    pub identity: Identity,
    /// Its location.
    pub location: String,
    /// Its tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    /// `Standard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<Sku>,
    /// Its properties.
    pub properties: NatGatewayProperties,
}

/// A load balancer's frontend IP configuration's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendIpConfigurationProperties {
    /// Its public IP address.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "publicIPAddress"
    )]
    pub public_ip_address: Option<SubResource>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A child of a load balancer (frontend, pool, probe, rule): named, with an ID ARM assigns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Child<P> {
    /// Its ID (ARM assigns it; references to it use `<load balancer ID>/<collection>/<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Its name.
    pub name: String,
    /// Its properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<P>,
}

/// A backend pool's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendAddressPoolProperties {
    /// Read-only: the network interfaces' IP configurations in it.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "backendIPConfigurations"
    )]
    pub backend_ip_configurations: Vec<SubResource>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A health probe's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeProperties {
    /// `Https`, `Http` or `Tcp`.
    pub protocol: String,
    /// The port.
    pub port: i32,
    /// The path (`/readyz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_path: Option<String>,
    /// Seconds between probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_in_seconds: Option<i32>,
    /// Failures before a backend is out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number_of_probes: Option<i32>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A load-balancing rule's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancingRuleProperties {
    /// Its frontend.
    #[serde(rename = "frontendIPConfiguration")]
    pub frontend_ip_configuration: SubResource,
    /// Its backend pool.
    pub backend_address_pool: SubResource,
    /// Its probe.
    pub probe: SubResource,
    /// `Tcp`.
    pub protocol: String,
    /// The frontend port.
    pub frontend_port: i32,
    /// The backend port.
    pub backend_port: i32,
    /// Minutes an idle connection is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_in_minutes: Option<i32>,
    /// Floating IP (direct server return).
    #[serde(rename = "enableFloatingIP")]
    pub enable_floating_ip: bool,
    /// No outbound SNAT through this rule's frontend.
    pub disable_outbound_snat: bool,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A load balancer's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerProperties {
    /// Its frontends.
    #[serde(default, rename = "frontendIPConfigurations")]
    pub frontend_ip_configurations: Vec<Child<FrontendIpConfigurationProperties>>,
    /// Its backend pools.
    #[serde(default)]
    pub backend_address_pools: Vec<Child<BackendAddressPoolProperties>>,
    /// Its probes.
    #[serde(default)]
    pub probes: Vec<Child<ProbeProperties>>,
    /// Its rules.
    #[serde(default)]
    pub load_balancing_rules: Vec<Child<LoadBalancingRuleProperties>>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A load balancer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadBalancer {
    /// Read-only.
    #[serde(flatten)]
    pub identity: Identity,
    /// Its location.
    pub location: String,
    /// Its tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    /// `Standard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<Sku>,
    /// Its properties.
    pub properties: LoadBalancerProperties,
}

/// A network interface's IP configuration's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpConfigurationProperties {
    /// Its subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<SubResource>,
    /// `Dynamic` or `Static`.
    #[serde(rename = "privateIPAllocationMethod")]
    pub private_ip_allocation_method: String,
    /// The address (ARM assigns a dynamic one).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "privateIPAddress"
    )]
    pub private_ip_address: Option<String>,
    /// The primary configuration of its interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<bool>,
    /// A public IP address.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "publicIPAddress"
    )]
    pub public_ip_address: Option<SubResource>,
    /// Load balancer backend pools it is in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_balancer_backend_address_pools: Vec<SubResource>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A network interface's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterfaceProperties {
    /// Its IP configurations.
    #[serde(default)]
    pub ip_configurations: Vec<Child<IpConfigurationProperties>>,
    /// Forward packets not addressed to it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "enableIPForwarding"
    )]
    pub enable_ip_forwarding: Option<bool>,
    /// Read-only: the VM it is attached to, which keeps it from being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine: Option<SubResource>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A network interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkInterface {
    /// Read-only.
    #[serde(flatten)]
    pub identity: Identity,
    /// Its location.
    pub location: String,
    /// Its tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    /// Its properties.
    pub properties: NetworkInterfaceProperties,
}

/// A VM's size.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HardwareProfile {
    /// `Standard_D2s_v3`.
    pub vm_size: String,
}

/// The image a VM boots: a marketplace image, a community gallery image, or an image by ID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageReference {
    /// A managed image's or gallery image version's ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// A marketplace image's publisher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher: Option<String>,
    /// Its offer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer: Option<String>,
    /// Its SKU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    /// Its version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `/CommunityGalleries/<gallery>/Images/<image>/Versions/<version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub community_gallery_image_id: Option<String>,
}

/// A managed disk's parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedDiskParameters {
    /// Its storage (`Premium_LRS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_account_type: Option<String>,
    /// Its ID (ARM fills it in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// The OS disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OsDisk {
    /// `<vm>_OSDisk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `Linux`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_type: Option<String>,
    /// `FromImage`.
    pub create_option: String,
    /// `Delete`: the disk goes with the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<String>,
    /// `None`, `ReadOnly`, `ReadWrite`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caching: Option<String>,
    /// Its size.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "diskSizeGB"
    )]
    pub disk_size_gb: Option<i32>,
    /// Its storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_disk: Option<ManagedDiskParameters>,
}

/// An empty data disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataDisk {
    /// Its logical unit number.
    pub lun: i32,
    /// `<vm>_<suffix>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `Empty`.
    pub create_option: String,
    /// `Delete`: the disk goes with the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<String>,
    /// Host caching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caching: Option<String>,
    /// Its size.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "diskSizeGB"
    )]
    pub disk_size_gb: Option<i32>,
    /// Its storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_disk: Option<ManagedDiskParameters>,
}

/// The VM's disks and image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageProfile {
    /// The image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_reference: Option<ImageReference>,
    /// The OS disk.
    pub os_disk: OsDisk,
    /// Data disks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_disks: Vec<DataDisk>,
}

/// An SSH public key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SshPublicKey {
    /// `/home/<user>/.ssh/authorized_keys`.
    pub path: String,
    /// The key, in `authorized_keys` format.
    pub key_data: String,
}

/// The VM's SSH keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SshConfiguration {
    /// Its keys.
    pub public_keys: Vec<SshPublicKey>,
}

/// Linux settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinuxConfiguration {
    /// No password logins.
    pub disable_password_authentication: bool,
    /// SSH keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<SshConfiguration>,
}

/// The VM's OS settings. `customData` is write-only (ARM never returns it) and carries the
/// bootstrap data: it never appears in logs, errors or status.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OsProfile {
    /// The host name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer_name: Option<String>,
    /// The admin user (`capi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_username: Option<String>,
    /// The bootstrap data, base64-encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_data: Option<String>,
    /// Linux settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linux_configuration: Option<LinuxConfiguration>,
}

impl std::fmt::Debug for OsProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OsProfile")
            .field("computer_name", &self.computer_name)
            .field("admin_username", &self.admin_username)
            .field(
                "custom_data",
                &self.custom_data.as_ref().map(|_| "(redacted)"),
            )
            .field("linux_configuration", &self.linux_configuration)
            .finish()
    }
}

/// A network interface of the VM's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterfaceReferenceProperties {
    /// The primary interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<bool>,
    /// `Delete`: the interface goes with the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<String>,
}

/// A reference to a network interface of the VM's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkInterfaceReference {
    /// The interface's ID.
    pub id: String,
    /// How the VM uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<NetworkInterfaceReferenceProperties>,
}

/// The VM's network interfaces.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkProfile {
    /// Its interfaces.
    pub network_interfaces: Vec<NetworkInterfaceReference>,
}

/// The most a spot VM may cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BillingProfile {
    /// USD per hour; `-1`: the on-demand price.
    pub max_price: f64,
}

/// A VM's properties.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineProperties {
    /// Its size.
    pub hardware_profile: HardwareProfile,
    /// Its disks and image.
    pub storage_profile: StorageProfile,
    /// Its OS settings (ARM answers without `customData`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_profile: Option<OsProfile>,
    /// Its network interfaces.
    pub network_profile: NetworkProfile,
    /// `Spot` for a spot VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// `Deallocate` or `Delete` for a spot VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_policy: Option<String>,
    /// The price cap of a spot VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing_profile: Option<BillingProfile>,
    /// Read-only: ARM's unique ID of the VM.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "vmId")]
    pub vm_id: Option<String>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A virtual machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VirtualMachine {
    /// Read-only.
    #[serde(flatten)]
    pub identity: Identity,
    /// Its location.
    pub location: String,
    /// Its tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    /// Its zone (one at most).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Its properties.
    pub properties: VirtualMachineProperties,
}

/// A managed disk's properties, as ARM answers them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskProperties {
    /// Its size.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "diskSizeGB"
    )]
    pub disk_size_gb: Option<i32>,
    /// `Attached`, `Unattached`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_state: Option<String>,
    /// Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<ProvisioningState>,
}

/// A managed disk (read only: the provider finds disks a VM left behind and deletes them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    /// Read-only.
    #[serde(flatten)]
    pub identity: Identity,
    /// Its location.
    pub location: String,
    /// Its tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    /// Read-only: the VM it is attached to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    /// Its properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<DiskProperties>,
}

/// ARM's error body: `{"error": {"code", "message", "target", "details"}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudError {
    /// The error.
    pub error: ErrorDetail,
}

/// One error of ARM's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Its code (`ResourceNotFound`, `InUseSubnetCannotBeDeleted`, `QuotaExceeded`, ...).
    #[serde(default)]
    pub code: String,
    /// What ARM says.
    #[serde(default)]
    pub message: String,
    /// What it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Errors it is made of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<ErrorDetail>,
}

/// A long-running operation's status (the body of its `Azure-AsyncOperation` URL).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationStatus {
    /// `InProgress`, `Succeeded`, `Failed`, `Canceled`.
    pub status: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}
