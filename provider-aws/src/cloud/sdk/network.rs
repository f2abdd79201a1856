//! [`Network`] on EC2: VPCs, subnets, gateways, route tables, addresses, security groups and
//! network interfaces.

use async_trait::async_trait;
use aws_sdk_ec2::types as ec2;

use super::{Ec2, call, ec2_filters, ec2_tags, gone_is_done, owned, tags_of};
use crate::api::{Filter, Tags};
use crate::cloud::error::CloudError;
use crate::cloud::network::{
    Address, InternetGateway, NatGateway, Network, NetworkInterface, Permission, PermissionSource,
    Route, RouteTable, RouteTarget, SecurityGroup, Subnet, Vpc,
};

fn subnet_of(s: &ec2::Subnet) -> Option<Subnet> {
    Some(Subnet {
        id: s.subnet_id()?.to_string(),
        vpc_id: s.vpc_id().unwrap_or_default().to_string(),
        zone: s.availability_zone().unwrap_or_default().to_string(),
        cidr_block: s.cidr_block().unwrap_or_default().to_string(),
        map_public_ip_on_launch: s.map_public_ip_on_launch().unwrap_or(false),
        tags: tags_of(s.tags()),
    })
}

/// EC2's permissions flattened to one source each.
fn permissions_of(permissions: &[ec2::IpPermission]) -> Vec<Permission> {
    let mut flat = Vec::new();
    for p in permissions {
        let protocol = p.ip_protocol().unwrap_or("-1").to_string();
        let from_port = p.from_port().unwrap_or(-1);
        let to_port = p.to_port().unwrap_or(-1);
        for range in p.ip_ranges() {
            if let Some(cidr) = range.cidr_ip() {
                flat.push(Permission {
                    protocol: protocol.clone(),
                    from_port,
                    to_port,
                    source: PermissionSource::Cidr(cidr.to_string()),
                    description: range.description().unwrap_or_default().to_string(),
                });
            }
        }
        for pair in p.user_id_group_pairs() {
            if let Some(group) = pair.group_id() {
                flat.push(Permission {
                    protocol: protocol.clone(),
                    from_port,
                    to_port,
                    source: PermissionSource::Group(group.to_string()),
                    description: pair.description().unwrap_or_default().to_string(),
                });
            }
        }
    }
    flat
}

fn ip_permissions(rules: &[Permission]) -> Vec<ec2::IpPermission> {
    rules
        .iter()
        .map(|rule| {
            let all = rule.protocol == "-1";
            let builder = ec2::IpPermission::builder()
                .ip_protocol(&rule.protocol)
                .set_from_port((!all).then_some(rule.from_port))
                .set_to_port((!all).then_some(rule.to_port));
            let description = (!rule.description.is_empty()).then(|| rule.description.clone());
            match &rule.source {
                PermissionSource::Cidr(cidr) => builder.ip_ranges(
                    ec2::IpRange::builder()
                        .cidr_ip(cidr)
                        .set_description(description)
                        .build(),
                ),
                PermissionSource::Group(group) => builder.user_id_group_pairs(
                    ec2::UserIdGroupPair::builder()
                        .group_id(group)
                        .set_description(description)
                        .build(),
                ),
            }
            .build()
        })
        .collect()
}

fn tagged(resource: ec2::ResourceType, tags: &Tags) -> ec2::TagSpecification {
    ec2::TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(ec2_tags(tags)))
        .build()
}

fn on() -> ec2::AttributeBooleanValue {
    ec2::AttributeBooleanValue::builder().value(true).build()
}

fn vpc_of(v: &ec2::Vpc) -> Option<Vpc> {
    Some(Vpc {
        id: v.vpc_id()?.to_string(),
        cidr_block: v.cidr_block().unwrap_or_default().to_string(),
        tags: tags_of(v.tags()),
    })
}

fn gateway_of(g: &ec2::InternetGateway) -> Option<InternetGateway> {
    Some(InternetGateway {
        id: g.internet_gateway_id()?.to_string(),
        vpc_ids: g
            .attachments()
            .iter()
            .filter_map(|a| a.vpc_id().map(str::to_string))
            .collect(),
        tags: tags_of(g.tags()),
    })
}

fn nat_of(n: &ec2::NatGateway) -> Option<NatGateway> {
    Some(NatGateway {
        id: n.nat_gateway_id()?.to_string(),
        subnet_id: n.subnet_id().unwrap_or_default().to_string(),
        state: n
            .state()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        allocation_ids: n
            .nat_gateway_addresses()
            .iter()
            .filter_map(|a| a.allocation_id().map(str::to_string))
            .collect(),
        public_ips: n
            .nat_gateway_addresses()
            .iter()
            .filter_map(|a| a.public_ip().map(str::to_string))
            .collect(),
        tags: tags_of(n.tags()),
    })
}

fn route_table_of(t: &ec2::RouteTable) -> Option<RouteTable> {
    Some(RouteTable {
        id: t.route_table_id()?.to_string(),
        routes: t
            .routes()
            .iter()
            .filter_map(|r| {
                let target = match (r.gateway_id(), r.nat_gateway_id()) {
                    (_, Some(nat)) => Some(RouteTarget::NatGateway(nat.to_string())),
                    (Some(igw), None) if igw.starts_with("igw-") => {
                        Some(RouteTarget::InternetGateway(igw.to_string()))
                    }
                    _ => None,
                };
                Some(Route {
                    destination: r.destination_cidr_block()?.to_string(),
                    target,
                })
            })
            .collect(),
        associations: t
            .associations()
            .iter()
            .filter_map(|a| {
                Some((
                    a.route_table_association_id()?.to_string(),
                    a.subnet_id().map(str::to_string),
                ))
            })
            .collect(),
        tags: tags_of(t.tags()),
    })
}

fn group_of(g: &ec2::SecurityGroup) -> Option<SecurityGroup> {
    Some(SecurityGroup {
        id: g.group_id()?.to_string(),
        name: g.group_name().unwrap_or_default().to_string(),
        vpc_id: g.vpc_id().unwrap_or_default().to_string(),
        tags: tags_of(g.tags()),
        ingress: permissions_of(g.ip_permissions()),
    })
}

#[async_trait]
impl Network for Ec2 {
    async fn subnets(&self, filters: &[Filter]) -> Result<Vec<Subnet>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeSubnets",
            self.client
                .describe_subnets()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer.subnets().iter().filter_map(subnet_of).collect())
    }

    async fn security_groups(&self, filters: &[Filter]) -> Result<Vec<SecurityGroup>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeSecurityGroups",
            self.client
                .describe_security_groups()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .security_groups()
            .iter()
            .filter_map(group_of)
            .collect())
    }

    async fn availability_zones(&self) -> Result<Vec<String>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeAvailabilityZones",
            self.client
                .describe_availability_zones()
                .filters(
                    ec2::Filter::builder()
                        .name("state")
                        .values("available")
                        .build(),
                )
                .send(),
        )
        .await?;
        let mut zones: Vec<String> = answer
            .availability_zones()
            .iter()
            .filter(|z| z.zone_type().is_none_or(|t| t == "availability-zone"))
            .filter_map(|z| z.zone_name().map(str::to_string))
            .collect();
        zones.sort();
        Ok(zones)
    }

    async fn vpcs(&self, filters: &[Filter]) -> Result<Vec<Vpc>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeVpcs",
            self.client
                .describe_vpcs()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer.vpcs().iter().filter_map(vpc_of).collect())
    }

    async fn create_vpc(&self, cidr_block: &str, tags: &Tags) -> Result<Vpc, CloudError> {
        let answer = call(
            &self.budget,
            "CreateVpc",
            self.client
                .create_vpc()
                .cidr_block(cidr_block)
                .tag_specifications(tagged(ec2::ResourceType::Vpc, tags))
                .send(),
        )
        .await?;
        let vpc = answer
            .vpc()
            .and_then(vpc_of)
            .ok_or_else(|| CloudError::new("CreateVpc", None, "EC2 answered without a VPC"))?;
        // One attribute per call, as EC2 requires.
        call(
            &self.budget,
            "ModifyVpcAttribute",
            self.client
                .modify_vpc_attribute()
                .vpc_id(&vpc.id)
                .enable_dns_support(on())
                .send(),
        )
        .await?;
        call(
            &self.budget,
            "ModifyVpcAttribute",
            self.client
                .modify_vpc_attribute()
                .vpc_id(&vpc.id)
                .enable_dns_hostnames(on())
                .send(),
        )
        .await?;
        Ok(vpc)
    }

    async fn delete_vpc(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteVpc",
                self.client.delete_vpc().vpc_id(id).send(),
            )
            .await
            .map(drop),
        )
    }

    async fn create_subnet(
        &self,
        vpc_id: &str,
        cidr_block: &str,
        zone: &str,
        tags: &Tags,
    ) -> Result<Subnet, CloudError> {
        let answer = call(
            &self.budget,
            "CreateSubnet",
            self.client
                .create_subnet()
                .vpc_id(vpc_id)
                .cidr_block(cidr_block)
                .availability_zone(zone)
                .tag_specifications(tagged(ec2::ResourceType::Subnet, tags))
                .send(),
        )
        .await?;
        answer
            .subnet()
            .and_then(subnet_of)
            .ok_or_else(|| CloudError::new("CreateSubnet", None, "EC2 answered without a subnet"))
    }

    async fn set_map_public_ip_on_launch(
        &self,
        subnet_id: &str,
        enabled: bool,
    ) -> Result<(), CloudError> {
        call(
            &self.budget,
            "ModifySubnetAttribute",
            self.client
                .modify_subnet_attribute()
                .subnet_id(subnet_id)
                .map_public_ip_on_launch(
                    ec2::AttributeBooleanValue::builder().value(enabled).build(),
                )
                .send(),
        )
        .await
        .map(drop)
    }

    async fn delete_subnet(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteSubnet",
                self.client.delete_subnet().subnet_id(id).send(),
            )
            .await
            .map(drop),
        )
    }

    async fn internet_gateways(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InternetGateway>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeInternetGateways",
            self.client
                .describe_internet_gateways()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .internet_gateways()
            .iter()
            .filter_map(gateway_of)
            .collect())
    }

    async fn create_internet_gateway(&self, tags: &Tags) -> Result<InternetGateway, CloudError> {
        let answer = call(
            &self.budget,
            "CreateInternetGateway",
            self.client
                .create_internet_gateway()
                .tag_specifications(tagged(ec2::ResourceType::InternetGateway, tags))
                .send(),
        )
        .await?;
        answer
            .internet_gateway()
            .and_then(gateway_of)
            .ok_or_else(|| {
                CloudError::new(
                    "CreateInternetGateway",
                    None,
                    "EC2 answered without a gateway",
                )
            })
    }

    async fn attach_internet_gateway(&self, id: &str, vpc_id: &str) -> Result<(), CloudError> {
        call(
            &self.budget,
            "AttachInternetGateway",
            self.client
                .attach_internet_gateway()
                .internet_gateway_id(id)
                .vpc_id(vpc_id)
                .send(),
        )
        .await
        .map(drop)
    }

    async fn detach_internet_gateway(&self, id: &str, vpc_id: &str) -> Result<(), CloudError> {
        match call(
            &self.budget,
            "DetachInternetGateway",
            self.client
                .detach_internet_gateway()
                .internet_gateway_id(id)
                .vpc_id(vpc_id)
                .send(),
        )
        .await
        {
            Err(error) if error.code.as_deref() == Some("Gateway.NotAttached") => Ok(()),
            answer => gone_is_done(answer.map(drop)),
        }
    }

    async fn delete_internet_gateway(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteInternetGateway",
                self.client
                    .delete_internet_gateway()
                    .internet_gateway_id(id)
                    .send(),
            )
            .await
            .map(drop),
        )
    }

    async fn addresses(&self, filters: &[Filter]) -> Result<Vec<Address>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeAddresses",
            self.client
                .describe_addresses()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .addresses()
            .iter()
            .filter_map(|a| {
                Some(Address {
                    allocation_id: a.allocation_id()?.to_string(),
                    public_ip: a.public_ip().unwrap_or_default().to_string(),
                    association_id: owned(a.association_id()),
                    tags: tags_of(a.tags()),
                })
            })
            .collect())
    }

    async fn allocate_address(&self, tags: &Tags) -> Result<Address, CloudError> {
        let answer = call(
            &self.budget,
            "AllocateAddress",
            self.client
                .allocate_address()
                .domain(ec2::DomainType::Vpc)
                .tag_specifications(tagged(ec2::ResourceType::ElasticIp, tags))
                .send(),
        )
        .await?;
        Ok(Address {
            allocation_id: answer
                .allocation_id()
                .ok_or_else(|| {
                    CloudError::new(
                        "AllocateAddress",
                        None,
                        "EC2 answered without an allocation",
                    )
                })?
                .to_string(),
            public_ip: answer.public_ip().unwrap_or_default().to_string(),
            association_id: None,
            tags: tags.clone(),
        })
    }

    async fn release_address(&self, allocation_id: &str) -> Result<(), CloudError> {
        match call(
            &self.budget,
            "ReleaseAddress",
            self.client
                .release_address()
                .allocation_id(allocation_id)
                .send(),
        )
        .await
        {
            Err(error) if error.code.as_deref() == Some("InvalidAllocationID.NotFound") => Ok(()),
            answer => gone_is_done(answer.map(drop)),
        }
    }

    async fn nat_gateways(&self, filters: &[Filter]) -> Result<Vec<NatGateway>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeNatGateways",
            self.client
                .describe_nat_gateways()
                .set_filter(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .nat_gateways()
            .iter()
            .filter_map(nat_of)
            .filter(|n| n.state != "deleted")
            .collect())
    }

    async fn create_nat_gateway(
        &self,
        subnet_id: &str,
        allocation_id: &str,
        client_token: &str,
        tags: &Tags,
    ) -> Result<NatGateway, CloudError> {
        let answer = call(
            &self.budget,
            "CreateNatGateway",
            self.client
                .create_nat_gateway()
                .subnet_id(subnet_id)
                .allocation_id(allocation_id)
                .client_token(client_token)
                .tag_specifications(tagged(ec2::ResourceType::Natgateway, tags))
                .send(),
        )
        .await?;
        answer.nat_gateway().and_then(nat_of).ok_or_else(|| {
            CloudError::new("CreateNatGateway", None, "EC2 answered without a gateway")
        })
    }

    async fn delete_nat_gateway(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteNatGateway",
                self.client.delete_nat_gateway().nat_gateway_id(id).send(),
            )
            .await
            .map(drop),
        )
    }

    async fn route_tables(&self, filters: &[Filter]) -> Result<Vec<RouteTable>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeRouteTables",
            self.client
                .describe_route_tables()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .route_tables()
            .iter()
            .filter_map(route_table_of)
            .collect())
    }

    async fn create_route_table(
        &self,
        vpc_id: &str,
        tags: &Tags,
    ) -> Result<RouteTable, CloudError> {
        let answer = call(
            &self.budget,
            "CreateRouteTable",
            self.client
                .create_route_table()
                .vpc_id(vpc_id)
                .tag_specifications(tagged(ec2::ResourceType::RouteTable, tags))
                .send(),
        )
        .await?;
        answer
            .route_table()
            .and_then(route_table_of)
            .ok_or_else(|| {
                CloudError::new("CreateRouteTable", None, "EC2 answered without a table")
            })
    }

    async fn create_route(
        &self,
        table_id: &str,
        destination: &str,
        target: &RouteTarget,
    ) -> Result<(), CloudError> {
        let request = self
            .client
            .create_route()
            .route_table_id(table_id)
            .destination_cidr_block(destination);
        let request = match target {
            RouteTarget::InternetGateway(id) => request.gateway_id(id),
            RouteTarget::NatGateway(id) => request.nat_gateway_id(id),
        };
        call(&self.budget, "CreateRoute", request.send())
            .await
            .map(drop)
    }

    async fn associate_route_table(
        &self,
        table_id: &str,
        subnet_id: &str,
    ) -> Result<(), CloudError> {
        call(
            &self.budget,
            "AssociateRouteTable",
            self.client
                .associate_route_table()
                .route_table_id(table_id)
                .subnet_id(subnet_id)
                .send(),
        )
        .await
        .map(drop)
    }

    async fn disassociate_route_table(&self, association_id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DisassociateRouteTable",
                self.client
                    .disassociate_route_table()
                    .association_id(association_id)
                    .send(),
            )
            .await
            .map(drop),
        )
    }

    async fn delete_route_table(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteRouteTable",
                self.client.delete_route_table().route_table_id(id).send(),
            )
            .await
            .map(drop),
        )
    }

    async fn create_security_group(
        &self,
        vpc_id: &str,
        name: &str,
        description: &str,
        tags: &Tags,
    ) -> Result<SecurityGroup, CloudError> {
        let answer = call(
            &self.budget,
            "CreateSecurityGroup",
            self.client
                .create_security_group()
                .vpc_id(vpc_id)
                .group_name(name)
                .description(description)
                .tag_specifications(tagged(ec2::ResourceType::SecurityGroup, tags))
                .send(),
        )
        .await?;
        Ok(SecurityGroup {
            id: answer
                .group_id()
                .ok_or_else(|| {
                    CloudError::new("CreateSecurityGroup", None, "EC2 answered without a group")
                })?
                .to_string(),
            name: name.to_string(),
            vpc_id: vpc_id.to_string(),
            tags: tags.clone(),
            ingress: Vec::new(),
        })
    }

    async fn authorize_ingress(
        &self,
        group_id: &str,
        rules: &[Permission],
    ) -> Result<(), CloudError> {
        if rules.is_empty() {
            return Ok(());
        }
        match call(
            &self.budget,
            "AuthorizeSecurityGroupIngress",
            self.client
                .authorize_security_group_ingress()
                .group_id(group_id)
                .set_ip_permissions(Some(ip_permissions(rules)))
                .send(),
        )
        .await
        {
            // Added by an earlier attempt whose answer was lost.
            Err(error) if error.code.as_deref() == Some("InvalidPermission.Duplicate") => Ok(()),
            answer => answer.map(drop),
        }
    }

    async fn revoke_ingress(&self, group_id: &str, rules: &[Permission]) -> Result<(), CloudError> {
        if rules.is_empty() {
            return Ok(());
        }
        match call(
            &self.budget,
            "RevokeSecurityGroupIngress",
            self.client
                .revoke_security_group_ingress()
                .group_id(group_id)
                .set_ip_permissions(Some(ip_permissions(rules)))
                .send(),
        )
        .await
        {
            Err(error) if error.code.as_deref() == Some("InvalidPermission.NotFound") => Ok(()),
            answer => answer.map(drop),
        }
    }

    async fn delete_security_group(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteSecurityGroup",
                self.client.delete_security_group().group_id(id).send(),
            )
            .await
            .map(drop),
        )
    }

    async fn network_interfaces(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeNetworkInterfaces",
            self.client
                .describe_network_interfaces()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .network_interfaces()
            .iter()
            .filter_map(|n| {
                Some(NetworkInterface {
                    id: n.network_interface_id()?.to_string(),
                    status: n
                        .status()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default(),
                    description: n.description().unwrap_or_default().to_string(),
                    group_ids: n
                        .groups()
                        .iter()
                        .filter_map(|g| g.group_id().map(str::to_string))
                        .collect(),
                })
            })
            .collect())
    }

    async fn delete_network_interface(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteNetworkInterface",
                self.client
                    .delete_network_interface()
                    .network_interface_id(id)
                    .send(),
            )
            .await
            .map(drop),
        )
    }
}
