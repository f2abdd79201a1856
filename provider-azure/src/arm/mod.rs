//! Azure Resource Manager as this provider speaks it: the kinds of resource it manages, each at a
//! pinned `api-version` ([`ResourceType`]), their IDs ([`ResourceId`]) and the provider's own
//! typed models of their bodies ([`models`]).
//!
//! No maintained Rust management-plane SDK exists for Compute and Network (the
//! `azure_resourcemanager_*` crates are empty placeholders, the `azure_mgmt_*` ones unmaintained),
//! so the provider models the few resources it uses itself. The api-versions are those of the
//! official Python SDK releases its tests check every body against (`azure-mgmt-compute` 39.0.0,
//! `azure-mgmt-network` 33.1.0, `azure-mgmt-resource` 26.0.0): a model here that disagrees with
//! Azure's — a property ARM does not have, a read-only one sent, a wrong type — fails the tests.

pub mod client;
pub mod error;
mod id;
pub mod models;

#[cfg(any(test, feature = "mock"))]
pub use client::MockArm;
pub use client::{Accepted, Arm, ArmClient, Deletion, PendingOperation, Poll};
pub use error::{ArmError, ErrorClass};
pub use id::{ResourceId, ResourceIdError};

/// A kind of ARM resource the provider manages, with the api-version it is spoken at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    /// `Microsoft.Resources/resourceGroups`.
    ResourceGroup,
    /// `Microsoft.Network/virtualNetworks`.
    VirtualNetwork,
    /// `Microsoft.Network/virtualNetworks/subnets`.
    Subnet,
    /// `Microsoft.Network/networkSecurityGroups`.
    NetworkSecurityGroup,
    /// `Microsoft.Network/publicIPAddresses`.
    PublicIpAddress,
    /// `Microsoft.Network/loadBalancers`.
    LoadBalancer,
    /// `Microsoft.Network/natGateways`.
    NatGateway,
    /// `Microsoft.Network/networkInterfaces`.
    NetworkInterface,
    /// `Microsoft.Compute/virtualMachines`.
    VirtualMachine,
    /// `Microsoft.Compute/disks`.
    Disk,
    /// `Microsoft.Compute/virtualMachineScaleSets` (Flexible orchestration).
    VirtualMachineScaleSet,
}

/// The api-version of Microsoft.Compute's virtual machines.
pub const COMPUTE_API_VERSION: &str = "2026-04-01";
/// The api-version of Microsoft.Compute's managed disks.
pub const DISKS_API_VERSION: &str = "2026-03-02";
/// The api-version of Microsoft.Network's resources.
pub const NETWORK_API_VERSION: &str = "2026-03-01";
/// The api-version of resource groups.
pub const RESOURCES_API_VERSION: &str = "2025-04-01";

impl ResourceType {
    /// Every kind, children after their parents.
    pub const ALL: [Self; 11] = [
        Self::ResourceGroup,
        Self::VirtualNetwork,
        Self::Subnet,
        Self::NetworkSecurityGroup,
        Self::PublicIpAddress,
        Self::LoadBalancer,
        Self::NatGateway,
        Self::NetworkInterface,
        Self::VirtualMachine,
        Self::Disk,
        Self::VirtualMachineScaleSet,
    ];

    /// The api-version requests for it carry.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::ResourceGroup => RESOURCES_API_VERSION,
            Self::VirtualMachine | Self::VirtualMachineScaleSet => COMPUTE_API_VERSION,
            Self::Disk => DISKS_API_VERSION,
            Self::VirtualNetwork
            | Self::Subnet
            | Self::NetworkSecurityGroup
            | Self::PublicIpAddress
            | Self::LoadBalancer
            | Self::NatGateway
            | Self::NetworkInterface => NETWORK_API_VERSION,
        }
    }

    /// Its resource provider namespace (`Microsoft.Network`); `None` for a resource group.
    pub fn namespace(self) -> Option<&'static str> {
        match self {
            Self::ResourceGroup => None,
            Self::VirtualMachine | Self::Disk | Self::VirtualMachineScaleSet => {
                Some("Microsoft.Compute")
            }
            _ => Some("Microsoft.Network"),
        }
    }

    /// The segment naming its collection (`virtualNetworks`, `subnets`).
    pub fn collection(self) -> &'static str {
        match self {
            Self::ResourceGroup => "resourceGroups",
            Self::VirtualNetwork => "virtualNetworks",
            Self::Subnet => "subnets",
            Self::NetworkSecurityGroup => "networkSecurityGroups",
            Self::PublicIpAddress => "publicIPAddresses",
            Self::LoadBalancer => "loadBalancers",
            Self::NatGateway => "natGateways",
            Self::NetworkInterface => "networkInterfaces",
            Self::VirtualMachine => "virtualMachines",
            Self::Disk => "disks",
            Self::VirtualMachineScaleSet => "virtualMachineScaleSets",
        }
    }

    /// Its name in `longRunningOperationStates` (CAPZ's service names).
    pub fn service_name(self) -> &'static str {
        match self {
            Self::ResourceGroup => "group",
            Self::VirtualNetwork => "vnet",
            Self::Subnet => "subnets",
            Self::NetworkSecurityGroup => "securitygroups",
            Self::PublicIpAddress => "publicips",
            Self::LoadBalancer => "loadbalancers",
            Self::NatGateway => "natgateways",
            Self::NetworkInterface => "interfaces",
            Self::VirtualMachine => "virtualmachine",
            Self::Disk => "disks",
            Self::VirtualMachineScaleSet => "scalesets",
        }
    }

    /// The kind its resources are children of (a subnet's virtual network).
    pub fn parent(self) -> Option<Self> {
        match self {
            Self::Subnet => Some(Self::VirtualNetwork),
            _ => None,
        }
    }

    /// The name of the Python SDK model of its body (`network:VirtualNetwork`), which the tests
    /// check bodies against.
    pub fn model(self) -> &'static str {
        match self {
            Self::ResourceGroup => "resource:ResourceGroup",
            Self::VirtualNetwork => "network:VirtualNetwork",
            Self::Subnet => "network:Subnet",
            Self::NetworkSecurityGroup => "network:NetworkSecurityGroup",
            Self::PublicIpAddress => "network:PublicIPAddress",
            Self::LoadBalancer => "network:LoadBalancer",
            Self::NatGateway => "network:NatGateway",
            Self::NetworkInterface => "network:NetworkInterface",
            Self::VirtualMachine => "compute:VirtualMachine",
            Self::Disk => "compute:Disk",
            Self::VirtualMachineScaleSet => "compute:VirtualMachineScaleSet",
        }
    }

    /// The kind at `namespace`/`collection` (compared without case, as ARM does), given its
    /// parent's kind.
    pub fn from_segments(
        namespace: Option<&str>,
        parent: Option<Self>,
        collection: &str,
    ) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| {
            kind.parent() == parent
                && kind.collection().eq_ignore_ascii_case(collection)
                && match (kind.namespace(), namespace) {
                    (None, None) => true,
                    (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
                    _ => false,
                }
        })
    }
}
