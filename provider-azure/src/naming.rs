//! Every name and tag the provider gives what it creates in Azure, in one place. ARM names are
//! the identity of a resource: a PUT by name is a create-or-update, so a replayed request (after
//! a lost answer or a restart) is the same resource and a duplicate cannot exist. The names are
//! CAPZ's defaults, so CAPZ users recognise them, and must never change for an existing cluster.
//!
//! Each resource carries CAPZ's tags — `sigs.k8s.io_cluster-api-provider-azure_cluster_<name>=owned`
//! and `sigs.k8s.io_cluster-api-provider-azure_role=<role>` — and `capi-rs.dev_cluster=<namespace>/<name>`
//! (CAPZ's tag names the cluster without its namespace). Only what carries both ownership tags
//! is ever changed or deleted; a resource group or network the spec names that is not tagged so
//! is used as it is. The provider's tags are applied after the user's `additionalTags`, which may
//! not use their prefixes (the schema refuses them).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::api::{AzureCluster, SubnetRole, Tags};

/// The prefix of CAPZ's ownership tag; the cluster's name follows.
pub const CAPZ_CLUSTER_TAG_PREFIX: &str = "sigs.k8s.io_cluster-api-provider-azure_cluster_";
/// CAPZ's role tag.
pub const ROLE_TAG: &str = "sigs.k8s.io_cluster-api-provider-azure_role";
/// The value of the ownership tag on what the provider created (and deletes).
pub const OWNED: &str = "owned";
/// The cluster a resource belongs to, as `<namespace>/<name>`.
pub const CLUSTER_TAG: &str = "capi-rs.dev_cluster";
/// The name Azure's portal shows.
pub const NAME_TAG: &str = "Name";

/// The default virtual network range (CAPZ's).
pub const DEFAULT_VNET_CIDR: &str = "10.0.0.0/8";
/// The default control-plane subnet range (CAPZ's).
pub const DEFAULT_CONTROL_PLANE_CIDR: &str = "10.0.0.0/16";
/// The default node subnet range (CAPZ's).
pub const DEFAULT_NODE_CIDR: &str = "10.1.0.0/16";

/// What a resource is for (CAPZ's role tag values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The resource group, network, subnets and security groups.
    Common,
    /// The API server's load balancer and public IP.
    ApiServer,
    /// A control-plane machine's VM, NIC and disks.
    ControlPlane,
    /// A worker's.
    Node,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Self::Common => "common",
            Self::ApiServer => "apiserver",
            Self::ControlPlane => "control-plane",
            Self::Node => "node",
        }
    }
}

/// The names of one cluster's resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNaming {
    /// The cluster's namespace.
    pub namespace: String,
    /// The `Cluster`'s name.
    pub name: String,
}

impl ClusterNaming {
    /// The names of cluster `name` in `namespace`.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The cluster's resource group: the spec's, else the cluster's name.
    pub fn resource_group(&self, cluster: &AzureCluster) -> String {
        cluster
            .spec
            .resource_group
            .clone()
            .filter(|g| !g.is_empty())
            .unwrap_or_else(|| self.name.clone())
    }

    /// The virtual network: the spec's, else `<cluster>-vnet`.
    pub fn vnet(&self, cluster: &AzureCluster) -> String {
        cluster
            .spec
            .network_spec
            .vnet
            .as_ref()
            .and_then(|v| v.name.clone())
            .unwrap_or_else(|| format!("{}-vnet", self.name))
    }

    /// The virtual network's resource group: the spec's, else the cluster's.
    pub fn vnet_resource_group(&self, cluster: &AzureCluster) -> String {
        cluster
            .spec
            .network_spec
            .vnet
            .as_ref()
            .and_then(|v| v.resource_group.clone())
            .unwrap_or_else(|| self.resource_group(cluster))
    }

    /// The subnet of `role`: the spec's name, else `<cluster>-<role>-subnet`.
    pub fn subnet(&self, cluster: &AzureCluster, role: SubnetRole) -> String {
        cluster
            .spec
            .network_spec
            .subnets
            .iter()
            .find(|s| s.role == role)
            .map(|s| s.name.clone())
            .unwrap_or_else(|| format!("{}-{}-subnet", self.name, role.name_part()))
    }

    /// The security group of `role`'s subnet: the spec's name, else `<cluster>-<role>-nsg`.
    pub fn security_group(&self, cluster: &AzureCluster, role: SubnetRole) -> String {
        cluster
            .spec
            .network_spec
            .subnets
            .iter()
            .find(|s| s.role == role)
            .and_then(|s| s.security_group.as_ref())
            .and_then(|g| g.name.clone())
            .unwrap_or_else(|| format!("{}-{}-nsg", self.name, role.name_part()))
    }

    /// The API server's load balancer: the spec's, else `<cluster>-public-lb`.
    pub fn load_balancer(&self, cluster: &AzureCluster) -> String {
        cluster
            .spec
            .network_spec
            .api_server_lb
            .as_ref()
            .and_then(|lb| lb.name.clone())
            .unwrap_or_else(|| format!("{}-public-lb", self.name))
    }

    /// The load balancer's frontend: the spec's, else `<lb>-frontEnd`.
    pub fn frontend(&self, cluster: &AzureCluster) -> String {
        cluster
            .spec
            .network_spec
            .api_server_lb
            .as_ref()
            .and_then(|lb| lb.frontend_ips.first())
            .map(|f| f.name.clone())
            .unwrap_or_else(|| format!("{}-frontEnd", self.load_balancer(cluster)))
    }

    /// The load balancer's backend pool: the spec's, else `<lb>-backendPool`.
    pub fn backend_pool(&self, cluster: &AzureCluster) -> String {
        cluster
            .spec
            .network_spec
            .api_server_lb
            .as_ref()
            .and_then(|lb| lb.backend_pool.as_ref())
            .and_then(|p| p.name.clone())
            .unwrap_or_else(|| format!("{}-backendPool", self.load_balancer(cluster)))
    }

    /// The API server's public IP: the spec's, else `pip-<cluster>-apiserver`.
    pub fn public_ip(&self, cluster: &AzureCluster) -> String {
        cluster
            .spec
            .network_spec
            .api_server_lb
            .as_ref()
            .and_then(|lb| lb.frontend_ips.first())
            .and_then(|f| f.public_ip.as_ref())
            .map(|p| p.name.clone())
            .unwrap_or_else(|| format!("pip-{}-apiserver", self.name))
    }

    /// The node subnet's NAT gateway (CAPZ's default): `<cluster>-node-natgw`.
    pub fn nat_gateway(&self) -> String {
        format!("{}-node-natgw", self.name)
    }

    /// The NAT gateway's public IP: `pip-<cluster>-node-natgw`.
    pub fn nat_gateway_ip(&self) -> String {
        format!("pip-{}", self.nat_gateway())
    }

    /// The public IP's DNS label: the spec's DNS name's first label, else
    /// `<cluster>-<6 hex digits of the cluster's namespace/name>` (unique per cluster within a
    /// location, and the same on every reconcile).
    pub fn dns_label(&self, cluster: &AzureCluster) -> String {
        if let Some(name) = cluster
            .spec
            .network_spec
            .api_server_lb
            .as_ref()
            .and_then(|lb| lb.frontend_ips.first())
            .and_then(|f| f.public_ip.as_ref())
            .and_then(|p| p.dns_name.as_ref())
        {
            return name.split('.').next().unwrap_or(name).to_string();
        }
        let digest = Sha256::digest(format!("{}/{}", self.namespace, self.name).as_bytes());
        let suffix: String = digest.iter().take(3).map(|b| format!("{b:02x}")).collect();
        let base: String = self.name.to_ascii_lowercase().chars().take(55).collect();
        format!("{base}-{suffix}")
    }

    /// The tags of a resource of this cluster with `role` and `name`, over `additional`.
    pub fn tags(&self, role: Role, name: &str, additional: &Tags) -> Tags {
        let mut tags: BTreeMap<String, String> = additional.clone();
        tags.insert(
            format!("{CAPZ_CLUSTER_TAG_PREFIX}{}", self.name),
            OWNED.into(),
        );
        tags.insert(ROLE_TAG.into(), role.as_str().into());
        tags.insert(
            CLUSTER_TAG.into(),
            format!("{}/{}", self.namespace, self.name),
        );
        tags.insert(NAME_TAG.into(), name.into());
        tags
    }

    /// The `<namespace>/<name>` of another cluster of this name whose resource `tags` mark
    /// (CAPZ's ownership tag names the cluster without its namespace).
    pub fn claimed_by_other(&self, tags: &serde_json::Value) -> Option<String> {
        let capz_owned = tags[format!("{CAPZ_CLUSTER_TAG_PREFIX}{}", self.name)]
            .as_str()
            .is_some_and(|v| v.eq_ignore_ascii_case(OWNED));
        let cluster = tags[CLUSTER_TAG].as_str()?;
        (capz_owned && cluster != format!("{}/{}", self.namespace, self.name))
            .then(|| cluster.to_string())
    }

    /// Whether `tags` (an ARM resource's `tags` object) mark it as this cluster's.
    pub fn owns(&self, tags: &serde_json::Value) -> bool {
        let owned = tags[format!("{CAPZ_CLUSTER_TAG_PREFIX}{}", self.name)]
            .as_str()
            .is_some_and(|v| v.eq_ignore_ascii_case(OWNED));
        let cluster =
            tags[CLUSTER_TAG].as_str() == Some(&format!("{}/{}", self.namespace, self.name));
        owned && cluster
    }
}

/// The names of a machine's resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineNaming {
    /// The VM's name: the `AzureMachine`'s.
    pub vm: String,
}

impl MachineNaming {
    /// The network interface: `<vm>-nic`.
    pub fn nic(&self) -> String {
        format!("{}-nic", self.vm)
    }

    /// The NIC's IP configuration (CAPZ's).
    pub fn ip_configuration(&self) -> &'static str {
        "pipConfig"
    }

    /// The OS disk: `<vm>_OSDisk`.
    pub fn os_disk(&self) -> String {
        format!("{}_OSDisk", self.vm)
    }

    /// A data disk: `<vm>_<suffix>`.
    pub fn data_disk(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.vm)
    }

    /// The machine's own public IP: `pip-<vm>`.
    pub fn public_ip(&self) -> String {
        format!("pip-{}", self.vm)
    }
}

/// Azure locations with availability zones `1`, `2` and `3` (Microsoft's published list of
/// regions with availability zone support); a location not listed has none, and its machines
/// are placed without a zone.
pub const ZONED_LOCATIONS: &[&str] = &[
    "australiaeast",
    "austriaeast",
    "belgiumcentral",
    "brazilsouth",
    "canadacentral",
    "centralindia",
    "centralus",
    "chilecentral",
    "eastasia",
    "eastus",
    "eastus2",
    "francecentral",
    "germanywestcentral",
    "indonesiacentral",
    "israelcentral",
    "italynorth",
    "japaneast",
    "japanwest",
    "koreacentral",
    "malaysiawest",
    "mexicocentral",
    "newzealandnorth",
    "northeurope",
    "norwayeast",
    "polandcentral",
    "qatarcentral",
    "southafricanorth",
    "southcentralus",
    "southeastasia",
    "spaincentral",
    "swedencentral",
    "switzerlandnorth",
    "uaenorth",
    "uksouth",
    "westeurope",
    "westus2",
    "westus3",
    "usgovvirginia",
    "chinanorth3",
];

/// The availability zones of `location` (compared without case or spaces).
pub fn zones(location: &str) -> Vec<String> {
    let normalized: String = location
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    if ZONED_LOCATIONS.contains(&normalized.as_str()) {
        vec!["1".into(), "2".into(), "3".into()]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AzureClusterSpec;

    fn cluster() -> AzureCluster {
        AzureCluster::new(
            "demo",
            AzureClusterSpec {
                location: "westeurope".into(),
                ..AzureClusterSpec::default()
            },
        )
    }

    #[test]
    fn the_defaults_are_capzs() {
        let naming = ClusterNaming::new("team-a", "demo");
        let c = cluster();
        assert_eq!(naming.resource_group(&c), "demo");
        assert_eq!(naming.vnet(&c), "demo-vnet");
        assert_eq!(
            naming.subnet(&c, SubnetRole::ControlPlane),
            "demo-controlplane-subnet"
        );
        assert_eq!(naming.security_group(&c, SubnetRole::Node), "demo-node-nsg");
        assert_eq!(naming.load_balancer(&c), "demo-public-lb");
        assert_eq!(naming.backend_pool(&c), "demo-public-lb-backendPool");
        assert_eq!(naming.public_ip(&c), "pip-demo-apiserver");
        let machine = MachineNaming {
            vm: "demo-cp-x1".into(),
        };
        assert_eq!(machine.nic(), "demo-cp-x1-nic");
        assert_eq!(machine.os_disk(), "demo-cp-x1_OSDisk");
    }

    #[test]
    fn the_dns_label_is_stable_and_differs_between_namespaces() {
        let c = cluster();
        let a = ClusterNaming::new("team-a", "demo").dns_label(&c);
        assert_eq!(a, ClusterNaming::new("team-a", "demo").dns_label(&c));
        assert_ne!(a, ClusterNaming::new("team-b", "demo").dns_label(&c));
        assert!(
            a.starts_with("demo-") && a.len() == "demo-".len() + 6,
            "{a}"
        );
    }

    #[test]
    fn ownership_needs_both_tags_and_survives_user_tags() {
        let naming = ClusterNaming::new("team-a", "demo");
        let mut additional = Tags::new();
        additional.insert(NAME_TAG.into(), "mine".into());
        let tags = naming.tags(Role::Common, "demo-vnet", &additional);
        assert_eq!(tags[NAME_TAG], "demo-vnet");
        let json = serde_json::to_value(&tags).unwrap_or_default();
        assert!(naming.owns(&json));
        assert!(!ClusterNaming::new("team-b", "demo").owns(&json));
        assert!(!naming.owns(&serde_json::json!({})));
    }

    #[test]
    fn zones_are_known_per_location() {
        assert_eq!(zones("West Europe"), vec!["1", "2", "3"]);
        assert!(zones("westcentralus").is_empty());
    }
}
