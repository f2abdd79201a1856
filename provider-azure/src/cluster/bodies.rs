//! The bodies of a cluster's resources as the provider wants them, built from the
//! `AzureCluster` through the typed ARM models (which the tests check against Azure's).

use serde_json::Value;

use crate::api::{SecurityRule as SpecRule, SubnetRole};
use crate::arm::models::{
    AddressSpace, BackendAddressPoolProperties, Child, DnsSettings,
    FrontendIpConfigurationProperties, LoadBalancer, LoadBalancerProperties,
    LoadBalancingRuleProperties, NatGateway, NatGatewayProperties, NetworkSecurityGroup,
    NetworkSecurityGroupProperties, ProbeProperties, PublicIpAddress, PublicIpAddressProperties,
    ResourceGroup, SecurityRule, SecurityRuleProperties, Sku, SubResource, SubnetProperties, Tags,
    VirtualNetwork, VirtualNetworkProperties,
};
use crate::arm::{ResourceId, ResourceType};
use crate::naming::{DEFAULT_CONTROL_PLANE_CIDR, DEFAULT_NODE_CIDR, DEFAULT_VNET_CIDR, Role};

use super::Ctx;

/// The load balancer's health probe (CAPZ's).
pub const PROBE: &str = "HTTPSProbe";
/// The load balancer's rule (CAPZ's).
pub const RULE: &str = "LBRuleHTTPS";
/// The default idle timeout of the API server's connections, in minutes (CAPZ's).
pub const DEFAULT_IDLE_TIMEOUT: i32 = 4;

fn json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

impl Ctx {
    pub(crate) fn tags(&self, role: Role, name: &str) -> Tags {
        self.naming
            .tags(role, name, &self.cluster.spec.additional_tags)
    }

    pub(crate) fn group_id(&self) -> ResourceId {
        ResourceId::resource_group(&self.subscription, &self.resource_group)
    }

    pub(crate) fn vnet_id(&self) -> ResourceId {
        ResourceId::new(
            &self.subscription,
            &self.naming.vnet_resource_group(&self.cluster),
            ResourceType::VirtualNetwork,
            &self.naming.vnet(&self.cluster),
        )
    }

    pub(crate) fn subnet_id(&self, role: SubnetRole) -> ResourceId {
        self.vnet_id().child(
            ResourceType::Subnet,
            &self.naming.subnet(&self.cluster, role),
        )
    }

    pub(crate) fn security_group_id(&self, role: SubnetRole) -> ResourceId {
        ResourceId::new(
            &self.subscription,
            &self.naming.vnet_resource_group(&self.cluster),
            ResourceType::NetworkSecurityGroup,
            &self.naming.security_group(&self.cluster, role),
        )
    }

    pub(crate) fn public_ip_id(&self) -> ResourceId {
        ResourceId::new(
            &self.subscription,
            &self.resource_group,
            ResourceType::PublicIpAddress,
            &self.naming.public_ip(&self.cluster),
        )
    }

    pub(crate) fn nat_gateway_id(&self) -> ResourceId {
        ResourceId::new(
            &self.subscription,
            &self.naming.vnet_resource_group(&self.cluster),
            ResourceType::NatGateway,
            &self.naming.nat_gateway(),
        )
    }

    pub(crate) fn nat_gateway_ip_id(&self) -> ResourceId {
        ResourceId::new(
            &self.subscription,
            &self.naming.vnet_resource_group(&self.cluster),
            ResourceType::PublicIpAddress,
            &self.naming.nat_gateway_ip(),
        )
    }

    pub(crate) fn nat_gateway_ip_body(&self) -> Value {
        json(&PublicIpAddress {
            location: self.cluster.spec.location.clone(),
            tags: self.tags(Role::Common, &self.naming.nat_gateway_ip()),
            sku: Some(Sku {
                name: "Standard".into(),
            }),
            properties: PublicIpAddressProperties {
                public_ip_allocation_method: "Static".into(),
                public_ip_address_version: "IPv4".into(),
                ..PublicIpAddressProperties::default()
            },
            ..PublicIpAddress::default()
        })
    }

    pub(crate) fn nat_gateway_body(&self) -> Value {
        json(&NatGateway {
            location: self.cluster.spec.location.clone(),
            tags: self.tags(Role::Common, &self.naming.nat_gateway()),
            sku: Some(Sku {
                name: "Standard".into(),
            }),
            properties: NatGatewayProperties {
                public_ip_addresses: vec![SubResource::to(self.nat_gateway_ip_id())],
                idle_timeout_in_minutes: Some(DEFAULT_IDLE_TIMEOUT),
                ..NatGatewayProperties::default()
            },
            ..NatGateway::default()
        })
    }

    pub(crate) fn load_balancer_id(&self) -> ResourceId {
        ResourceId::new(
            &self.subscription,
            &self.resource_group,
            ResourceType::LoadBalancer,
            &self.naming.load_balancer(&self.cluster),
        )
    }

    pub(crate) fn group_body(&self) -> Value {
        json(&ResourceGroup {
            location: self.cluster.spec.location.clone(),
            tags: self.tags(Role::Common, &self.resource_group),
            ..ResourceGroup::default()
        })
    }

    pub(crate) fn vnet_body(&self) -> Value {
        let cidrs = self
            .cluster
            .spec
            .network_spec
            .vnet
            .as_ref()
            .map(|v| v.cidr_blocks.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| vec![DEFAULT_VNET_CIDR.to_string()]);
        let mut tags = self.tags(Role::Common, &self.naming.vnet(&self.cluster));
        if let Some(vnet) = &self.cluster.spec.network_spec.vnet {
            for (k, v) in &vnet.tags {
                tags.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        json(&VirtualNetwork {
            location: self.cluster.spec.location.clone(),
            tags,
            properties: VirtualNetworkProperties {
                address_space: AddressSpace {
                    address_prefixes: cidrs,
                },
                ..VirtualNetworkProperties::default()
            },
            ..VirtualNetwork::default()
        })
    }

    pub(crate) fn subnet_cidrs(&self, role: SubnetRole) -> Vec<String> {
        self.cluster
            .spec
            .network_spec
            .subnets
            .iter()
            .find(|s| s.role == role)
            .map(|s| s.cidr_blocks.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| {
                vec![
                    match role {
                        SubnetRole::ControlPlane => DEFAULT_CONTROL_PLANE_CIDR,
                        SubnetRole::Node => DEFAULT_NODE_CIDR,
                    }
                    .to_string(),
                ]
            })
    }

    pub(crate) fn subnet_body(&self, role: SubnetRole) -> Value {
        json(&crate::arm::models::Subnet {
            properties: Some(SubnetProperties {
                address_prefixes: self.subnet_cidrs(role),
                network_security_group: Some(SubResource::to(self.security_group_id(role))),
                // The nodes' outbound path: they have no public IP and are in no load
                // balancer (CAPZ's default).
                nat_gateway: (role == SubnetRole::Node)
                    .then(|| SubResource::to(self.nat_gateway_id())),
                ..SubnetProperties::default()
            }),
            ..crate::arm::models::Subnet::default()
        })
    }

    /// The security group's rules: the spec's, else CAPZ's defaults (SSH and the API server
    /// on the control plane's, none on the nodes').
    pub(crate) fn security_rules(&self, role: SubnetRole) -> Vec<SecurityRule> {
        let spec = self
            .cluster
            .spec
            .network_spec
            .subnets
            .iter()
            .find(|s| s.role == role)
            .and_then(|s| s.security_group.as_ref());
        let rules: Vec<SpecRule> = match spec {
            Some(group) if !group.security_rules.is_empty() => group.security_rules.clone(),
            _ if role == SubnetRole::ControlPlane => vec![
                SpecRule {
                    name: "allow_ssh".into(),
                    description: "Allow SSH".into(),
                    priority: Some(2200),
                    source_ports: Some("*".into()),
                    destination_ports: Some("22".into()),
                    source: Some("*".into()),
                    destination: Some("*".into()),
                    ..SpecRule::default()
                },
                SpecRule {
                    name: "allow_apiserver".into(),
                    description: "Allow K8s API Server".into(),
                    priority: Some(2201),
                    source_ports: Some("*".into()),
                    destination_ports: Some(self.api_server_port.to_string()),
                    source: Some("*".into()),
                    destination: Some("*".into()),
                    ..SpecRule::default()
                },
            ],
            _ => Vec::new(),
        };
        rules
            .iter()
            .enumerate()
            .map(|(i, rule)| SecurityRule {
                id: None,
                name: rule.name.clone(),
                properties: SecurityRuleProperties {
                    description: Some(rule.description.clone()).filter(|d| !d.is_empty()),
                    protocol: json(&rule.protocol).as_str().unwrap_or("*").to_string(),
                    source_port_range: Some(
                        rule.source_ports.clone().unwrap_or_else(|| "*".into()),
                    ),
                    destination_port_range: Some(
                        rule.destination_ports.clone().unwrap_or_else(|| "*".into()),
                    ),
                    source_address_prefix: if rule.sources.is_empty() {
                        Some(rule.source.clone().unwrap_or_else(|| "*".into()))
                    } else {
                        None
                    },
                    source_address_prefixes: rule.sources.clone(),
                    destination_address_prefix: Some(
                        rule.destination.clone().unwrap_or_else(|| "*".into()),
                    ),
                    access: json(&rule.action).as_str().unwrap_or("Allow").to_string(),
                    priority: rule
                        .priority
                        .unwrap_or_else(|| 2300 + i32::try_from(i).unwrap_or(0)),
                    direction: json(&rule.direction)
                        .as_str()
                        .unwrap_or("Inbound")
                        .to_string(),
                    provisioning_state: None,
                },
            })
            .collect()
    }

    pub(crate) fn security_group_body(&self, role: SubnetRole) -> Value {
        let mut tags = self.tags(
            Role::Common,
            &self.naming.security_group(&self.cluster, role),
        );
        if let Some(group) = self
            .cluster
            .spec
            .network_spec
            .subnets
            .iter()
            .find(|s| s.role == role)
            .and_then(|s| s.security_group.as_ref())
        {
            for (k, v) in &group.tags {
                tags.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        json(&NetworkSecurityGroup {
            location: self.cluster.spec.location.clone(),
            tags,
            properties: NetworkSecurityGroupProperties {
                security_rules: self.security_rules(role),
                ..NetworkSecurityGroupProperties::default()
            },
            ..NetworkSecurityGroup::default()
        })
    }

    pub(crate) fn public_ip_body(&self) -> Value {
        json(&PublicIpAddress {
            location: self.cluster.spec.location.clone(),
            tags: self.tags(Role::ApiServer, &self.naming.public_ip(&self.cluster)),
            sku: Some(Sku {
                name: "Standard".into(),
            }),
            zones: crate::naming::zones(&self.cluster.spec.location),
            properties: PublicIpAddressProperties {
                public_ip_allocation_method: "Static".into(),
                public_ip_address_version: "IPv4".into(),
                dns_settings: Some(DnsSettings {
                    domain_name_label: self.naming.dns_label(&self.cluster),
                    fqdn: None,
                }),
                ..PublicIpAddressProperties::default()
            },
            ..PublicIpAddress::default()
        })
    }

    pub(crate) fn load_balancer_body(&self) -> Value {
        let id = self.load_balancer_id();
        let frontend = self.naming.frontend(&self.cluster);
        let pool = self.naming.backend_pool(&self.cluster);
        let port = i32::from(self.api_server_port);
        let idle = self
            .cluster
            .spec
            .network_spec
            .api_server_lb
            .as_ref()
            .and_then(|lb| lb.idle_timeout_in_minutes)
            .unwrap_or(DEFAULT_IDLE_TIMEOUT);
        json(&LoadBalancer {
            location: self.cluster.spec.location.clone(),
            tags: self.tags(Role::ApiServer, &self.naming.load_balancer(&self.cluster)),
            sku: Some(Sku {
                name: "Standard".into(),
            }),
            properties: LoadBalancerProperties {
                frontend_ip_configurations: vec![Child {
                    id: None,
                    name: frontend.clone(),
                    properties: Some(FrontendIpConfigurationProperties {
                        public_ip_address: Some(SubResource::to(self.public_ip_id())),
                        provisioning_state: None,
                    }),
                }],
                backend_address_pools: vec![Child {
                    id: None,
                    name: pool.clone(),
                    properties: Some(BackendAddressPoolProperties::default()),
                }],
                probes: vec![Child {
                    id: None,
                    name: PROBE.into(),
                    properties: Some(ProbeProperties {
                        protocol: "Https".into(),
                        port,
                        request_path: Some("/readyz".into()),
                        interval_in_seconds: Some(15),
                        number_of_probes: Some(4),
                        provisioning_state: None,
                    }),
                }],
                load_balancing_rules: vec![Child {
                    id: None,
                    name: RULE.into(),
                    properties: Some(LoadBalancingRuleProperties {
                        frontend_ip_configuration: SubResource::to(format!(
                            "{id}/frontendIPConfigurations/{frontend}"
                        )),
                        backend_address_pool: SubResource::to(format!(
                            "{id}/backendAddressPools/{pool}"
                        )),
                        probe: SubResource::to(format!("{id}/probes/{PROBE}")),
                        protocol: "Tcp".into(),
                        frontend_port: port,
                        backend_port: port,
                        idle_timeout_in_minutes: Some(idle),
                        enable_floating_ip: false,
                        // The control plane's outbound traffic goes out through the rule's
                        // frontend (there is no separate outbound rule).
                        disable_outbound_snat: false,
                        provisioning_state: None,
                    }),
                }],
                provisioning_state: None,
            },
            ..LoadBalancer::default()
        })
    }
}

/// The ID of the API server's backend pool of `cluster`'s load balancer.
pub(crate) fn backend_pool_id(ctx: &Ctx) -> String {
    format!(
        "{}/backendAddressPools/{}",
        ctx.load_balancer_id(),
        ctx.naming.backend_pool(&ctx.cluster)
    )
}
