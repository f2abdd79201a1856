//! The cluster's network, in CAPA's order: VPC → subnets → internet gateway → NAT gateways →
//! route tables. With `spec.network.vpc.id` the VPC and its subnets are the user's: they are
//! described, reported and used, and nothing of the network is created or changed.
//!
//! Without subnets in the spec, each of the first `availabilityZoneUsageLimit` zones of the
//! region (3 by default; `Random` selection rotates the list by a hash of the cluster, so that
//! clusters spread) gets a public and a private subnet: the VPC's range is split into one block
//! per zone (rounded up to a power of two) and each block into a public and a private half.

use std::collections::BTreeMap;

use capi_core::ActuatorError;
use sha2::{Digest, Sha256};

use super::{Ctx, Progress};
use crate::api::{AzSelectionScheme, Filter, SubnetStatus, VpcStatus};
use crate::cloud::{NatGateway, RouteTable, RouteTarget, Subnet, Vpc};
use crate::naming::{ELB_ROLE_TAG, INTERNAL_ELB_ROLE_TAG, OWNED, Role, SUBNET_TAG};

/// The VPC's range when the spec gives none (CAPA's).
pub const DEFAULT_VPC_CIDR: &str = "10.0.0.0/16";
/// How many zones get subnets when the spec does not say (CAPA's).
pub const DEFAULT_AZ_USAGE_LIMIT: usize = 3;
/// Where the default routes lead.
const ANYWHERE: &str = "0.0.0.0/0";

fn filter(name: &str, value: &str) -> Filter {
    Filter {
        name: name.to_string(),
        values: vec![value.to_string()],
    }
}

/// A subnet the cluster should have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannedSubnet {
    /// Its identity in the spec and the status (`<cluster>-subnet-private-<zone>`), or the ID of
    /// an existing subnet (`subnet-…`).
    pub(crate) id: String,
    pub(crate) cidr_block: String,
    pub(crate) zone: String,
    pub(crate) public: bool,
}

impl PlannedSubnet {
    fn existing(&self) -> bool {
        self.id.starts_with("subnet-")
    }
}

/// Splits an IPv4 range into `parts` equal blocks (the block count rounded up to a power of
/// two; the first `parts` returned).
pub(crate) fn split(cidr: &str, parts: usize) -> Result<Vec<String>, String> {
    let (address, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| format!("{cidr:?} is not an IPv4 range"))?;
    let address: std::net::Ipv4Addr = address
        .parse()
        .map_err(|_| format!("{cidr:?} is not an IPv4 range"))?;
    let prefix: u32 = prefix
        .parse()
        .ok()
        .filter(|p| *p <= 32)
        .ok_or_else(|| format!("{cidr:?} has no valid prefix length"))?;
    let bits = usize::BITS - parts.max(1).saturating_sub(1).leading_zeros();
    let new_prefix = prefix + bits;
    if new_prefix > 28 {
        return Err(format!(
            "{cidr} is too small for {parts} subnets (EC2's smallest subnet is a /28)"
        ));
    }
    let base = u32::from(address) & u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    let size = 1u32 << (32 - new_prefix);
    Ok((0..parts)
        .map(|i| {
            let start = base + size * u32::try_from(i).unwrap_or(0);
            format!("{}/{new_prefix}", std::net::Ipv4Addr::from(start))
        })
        .collect())
}

/// The subnets of a managed VPC: the spec's, or a public and a private one per zone.
async fn plan(ctx: &Ctx, vpc_cidr: &str) -> Result<Vec<PlannedSubnet>, ActuatorError> {
    let network = &ctx.cluster.spec.network;
    if !network.subnets.is_empty() {
        return network
            .subnets
            .iter()
            .map(|s| {
                let existing = s.id.starts_with("subnet-");
                match (&s.cidr_block, &s.availability_zone) {
                    (Some(cidr), Some(zone)) => Ok(PlannedSubnet {
                        id: s.id.clone(),
                        cidr_block: cidr.clone(),
                        zone: zone.clone(),
                        public: s.is_public,
                    }),
                    _ if existing => Ok(PlannedSubnet {
                        id: s.id.clone(),
                        cidr_block: String::new(),
                        zone: String::new(),
                        public: s.is_public,
                    }),
                    _ => Err(ActuatorError::invalid_configuration(
                        "SubnetSpecIncomplete",
                        format!(
                            "spec.network.subnets entry {:?} names no existing subnet (subnet-…) \
                             and lacks cidrBlock or availabilityZone to create one",
                            s.id
                        ),
                    )),
                }
            })
            .collect();
    }
    let vpc = network.vpc.clone().unwrap_or_default();
    let limit = vpc
        .availability_zone_usage_limit
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(DEFAULT_AZ_USAGE_LIMIT);
    let mut zones = ctx
        .clients
        .network
        .availability_zones()
        .await
        .map_err(|e| ctx.error(e))?;
    if zones.is_empty() {
        return Err(ActuatorError::transient_message(
            "NoAvailabilityZones",
            format!(
                "region {} reports no available zone",
                ctx.cluster.spec.region
            ),
        ));
    }
    if vpc.availability_zone_selection == Some(AzSelectionScheme::Random) {
        let seed = Sha256::digest(ctx.naming.qualified().as_bytes());
        let turn = usize::from(seed[0]) % zones.len();
        zones.rotate_left(turn);
    }
    zones.truncate(limit.max(1));
    let blocks = split(vpc_cidr, zones.len())
        .map_err(|e| ActuatorError::invalid_configuration("VPCRangeTooSmall", e))?;
    let mut planned = Vec::new();
    for (zone, block) in zones.iter().zip(blocks) {
        let halves = split(&block, 2)
            .map_err(|e| ActuatorError::invalid_configuration("VPCRangeTooSmall", e))?;
        for (public, cidr) in [(true, &halves[0]), (false, &halves[1])] {
            planned.push(PlannedSubnet {
                id: ctx.naming.subnet(public, zone),
                cidr_block: cidr.clone(),
                zone: zone.clone(),
                public,
            });
        }
    }
    Ok(planned)
}

/// The network; fills `status.vpc`, `internetGatewayId`, `subnets` and `natGatewaysIPs`.
pub(super) async fn reconcile(
    ctx: &Ctx,
    status: &mut crate::api::NetworkStatus,
) -> Result<Progress, ActuatorError> {
    let spec = ctx.cluster.spec.network.vpc.clone().unwrap_or_default();
    if let Some(id) = &spec.id {
        return existing(ctx, id, status).await;
    }
    let vpc = vpc(ctx, spec.cidr_block.as_deref().unwrap_or(DEFAULT_VPC_CIDR)).await?;
    status.vpc = Some(VpcStatus {
        id: vpc.id.clone(),
        cidr_block: vpc.cidr_block.clone(),
    });
    let planned = plan(ctx, &vpc.cidr_block).await?;
    let subnets = subnets(ctx, &vpc, &planned).await?;
    let managed = |s: &&(PlannedSubnet, Subnet)| !s.0.existing();
    let public: Vec<&(PlannedSubnet, Subnet)> = subnets
        .iter()
        .filter(managed)
        .filter(|s| s.0.public)
        .collect();
    let private: Vec<&(PlannedSubnet, Subnet)> = subnets
        .iter()
        .filter(managed)
        .filter(|s| !s.0.public)
        .collect();

    let gateway = if public.is_empty() {
        None
    } else {
        Some(internet_gateway(ctx, &vpc).await?)
    };
    status.internet_gateway_id = gateway.clone();

    // One NAT gateway per zone with private subnets, in that zone's public subnet (or the
    // first public subnet).
    let mut nats: BTreeMap<String, NatGateway> = BTreeMap::new();
    let mut waiting = Vec::new();
    if !public.is_empty() && !private.is_empty() {
        let existing = ctx
            .clients
            .network
            .nat_gateways(&ctx.owned_and(&[("vpc-id", &vpc.id)]))
            .await
            .map_err(|e| ctx.error(e))?;
        let mut zones: Vec<&str> = private.iter().map(|s| s.1.zone.as_str()).collect();
        zones.sort_unstable();
        zones.dedup();
        for zone in zones {
            let host = public
                .iter()
                .find(|s| s.1.zone == zone)
                .or_else(|| public.first())
                .map(|s| (*s).clone());
            let Some((host_plan, host)) = host else {
                continue;
            };
            let nat = match existing
                .iter()
                .find(|n| n.subnet_id == host.id && n.state != "deleting" && n.state != "failed")
            {
                Some(nat) => nat.clone(),
                None => nat_gateway(ctx, &host_plan, &host).await?,
            };
            if nat.state != "available" {
                waiting.push(format!("NAT gateway {} is {}", nat.id, nat.state));
            }
            status
                .nat_gateways_ips
                .extend(nat.public_ips.iter().cloned());
            nats.insert(zone.to_string(), nat);
        }
    }

    let tables = ctx
        .clients
        .network
        .route_tables(&ctx.owned_and(&[("vpc-id", &vpc.id)]))
        .await
        .map_err(|e| ctx.error(e))?;
    for (planned, subnet) in &subnets {
        let mut entry = SubnetStatus {
            id: planned.id.clone(),
            resource_id: subnet.id.clone(),
            availability_zone: subnet.zone.clone(),
            cidr_block: subnet.cidr_block.clone(),
            is_public: planned.public,
            route_table_id: None,
            nat_gateway_id: None,
        };
        if !planned.existing() {
            let target = if planned.public {
                gateway.clone().map(RouteTarget::InternetGateway)
            } else {
                nats.get(&subnet.zone)
                    .filter(|n| n.state == "available")
                    .map(|n| RouteTarget::NatGateway(n.id.clone()))
            };
            let table = route_table(ctx, &vpc, planned, subnet, &tables, target).await?;
            entry.route_table_id = Some(table);
            entry.nat_gateway_id = nats
                .get(&subnet.zone)
                .filter(|_| !planned.public)
                .map(|n| n.id.clone());
        }
        status.subnets.push(entry);
    }
    Ok(if waiting.is_empty() {
        Progress::Ready
    } else {
        Progress::Waiting(waiting.join("; "))
    })
}

/// The user's VPC and subnets: described and reported, never changed.
async fn existing(
    ctx: &Ctx,
    id: &str,
    status: &mut crate::api::NetworkStatus,
) -> Result<Progress, ActuatorError> {
    let vpc = ctx
        .clients
        .network
        .vpcs(&[filter("vpc-id", id)])
        .await
        .map_err(|e| ctx.error(e))?
        .into_iter()
        .next()
        .ok_or_else(|| {
            ActuatorError::invalid_configuration(
                "VPCNotFound",
                format!("VPC {id} (spec.network.vpc.id) does not exist in this region"),
            )
        })?;
    status.vpc = Some(VpcStatus {
        id: vpc.id.clone(),
        cidr_block: vpc.cidr_block.clone(),
    });
    let wanted = &ctx.cluster.spec.network.subnets;
    if wanted.is_empty() {
        return Err(ActuatorError::invalid_configuration(
            "SubnetsMissing",
            "with an existing VPC (spec.network.vpc.id), list its subnets by ID in \
             spec.network.subnets",
        ));
    }
    let found = ctx
        .clients
        .network
        .subnets(&[filter("vpc-id", id)])
        .await
        .map_err(|e| ctx.error(e))?;
    for spec in wanted {
        let subnet = found.iter().find(|s| s.id == spec.id).ok_or_else(|| {
            ActuatorError::invalid_configuration(
                "SubnetNotFound",
                format!("subnet {:?} is not a subnet of VPC {id}", spec.id),
            )
        })?;
        status.subnets.push(SubnetStatus {
            id: spec.id.clone(),
            resource_id: subnet.id.clone(),
            availability_zone: subnet.zone.clone(),
            cidr_block: subnet.cidr_block.clone(),
            is_public: spec.is_public,
            route_table_id: spec.route_table_id.clone(),
            nat_gateway_id: spec.nat_gateway_id.clone(),
        });
    }
    Ok(Progress::Ready)
}

/// The cluster's VPC: found by its tags, else created.
async fn vpc(ctx: &Ctx, cidr: &str) -> Result<Vpc, ActuatorError> {
    let name = ctx.naming.vpc();
    let mut found = ctx
        .clients
        .network
        .vpcs(&ctx.owned_and(&[("tag:Name", &name)]))
        .await
        .map_err(|e| ctx.error(e))?;
    found.sort_by(|a, b| a.id.cmp(&b.id));
    if let Some(vpc) = found.into_iter().next() {
        return Ok(vpc);
    }
    let mut tags = ctx.tags(Role::Common, &name);
    if let Some(extra) = ctx.cluster.spec.network.vpc.as_ref().map(|v| &v.tags) {
        for (k, v) in extra {
            tags.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let vpc = ctx
        .clients
        .network
        .create_vpc(cidr, &tags)
        .await
        .map_err(|e| ctx.error(e))?;
    tracing::info!(vpc = %vpc.id, cluster = %ctx.naming.qualified(), "created the VPC");
    Ok(vpc)
}

/// The planned subnets, found by their `capi-rs.dev/subnet` tag or ID, the missing ones
/// created.
async fn subnets(
    ctx: &Ctx,
    vpc: &Vpc,
    planned: &[PlannedSubnet],
) -> Result<Vec<(PlannedSubnet, Subnet)>, ActuatorError> {
    let network = &ctx.clients.network;
    let in_vpc = network
        .subnets(&[filter("vpc-id", &vpc.id)])
        .await
        .map_err(|e| ctx.error(e))?;
    let mut result = Vec::new();
    for plan in planned {
        if plan.existing() {
            let subnet = in_vpc.iter().find(|s| s.id == plan.id).ok_or_else(|| {
                ActuatorError::invalid_configuration(
                    "SubnetNotFound",
                    format!(
                        "subnet {} is not a subnet of the cluster's VPC {}",
                        plan.id, vpc.id
                    ),
                )
            })?;
            result.push((plan.clone(), subnet.clone()));
            continue;
        }
        let found = in_vpc.iter().find(|s| {
            ctx.owns(&s.tags) && s.tags.get(SUBNET_TAG).map(String::as_str) == Some(&plan.id)
        });
        let subnet = match found {
            Some(subnet) => subnet.clone(),
            None => {
                let role = if plan.public {
                    Role::Public
                } else {
                    Role::Private
                };
                let mut tags = ctx.tags(role, &ctx.naming.subnet(plan.public, &plan.zone));
                tags.insert(SUBNET_TAG.to_string(), plan.id.clone());
                tags.insert(ctx.naming.kubernetes_cluster_tag(), OWNED.to_string());
                let elb_role = if plan.public {
                    ELB_ROLE_TAG
                } else {
                    INTERNAL_ELB_ROLE_TAG
                };
                tags.insert(elb_role.to_string(), "1".to_string());
                if let Some(extra) = ctx
                    .cluster
                    .spec
                    .network
                    .subnets
                    .iter()
                    .find(|s| s.id == plan.id)
                {
                    for (k, v) in &extra.tags {
                        tags.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                let created = network
                    .create_subnet(&vpc.id, &plan.cidr_block, &plan.zone, &tags)
                    .await
                    .map_err(|e| ctx.error(e))?;
                tracing::info!(subnet = %created.id, id = %plan.id, "created a subnet");
                created
            }
        };
        if plan.public && !subnet.map_public_ip_on_launch {
            network
                .set_map_public_ip_on_launch(&subnet.id, true)
                .await
                .map_err(|e| ctx.error(e))?;
        }
        result.push((plan.clone(), subnet));
    }
    Ok(result)
}

/// The internet gateway, found by its tags or created, attached to the VPC.
async fn internet_gateway(ctx: &Ctx, vpc: &Vpc) -> Result<String, ActuatorError> {
    let network = &ctx.clients.network;
    let mut found = network
        .internet_gateways(&ctx.owned())
        .await
        .map_err(|e| ctx.error(e))?;
    found.sort_by_key(|g| !g.vpc_ids.contains(&vpc.id));
    let gateway = match found.into_iter().next() {
        Some(gateway) => gateway,
        None => network
            .create_internet_gateway(&ctx.tags(Role::Common, &ctx.naming.internet_gateway()))
            .await
            .map_err(|e| ctx.error(e))?,
    };
    if !gateway.vpc_ids.contains(&vpc.id) {
        network
            .attach_internet_gateway(&gateway.id, &vpc.id)
            .await
            .map_err(|e| ctx.error(e))?;
    }
    Ok(gateway.id)
}

/// A NAT gateway in `host` with an elastic address of its own (one left by an earlier attempt
/// is reused).
async fn nat_gateway(
    ctx: &Ctx,
    host_plan: &PlannedSubnet,
    host: &Subnet,
) -> Result<NatGateway, ActuatorError> {
    let network = &ctx.clients.network;
    let addresses = network
        .addresses(&ctx.owned_and(&[(&format!("tag:{SUBNET_TAG}"), &host_plan.id)]))
        .await
        .map_err(|e| ctx.error(e))?;
    let allocation = match addresses.into_iter().find(|a| a.association_id.is_none()) {
        Some(address) => address.allocation_id,
        None => {
            let mut tags = ctx.tags(Role::Common, &ctx.naming.nat_address());
            tags.insert(SUBNET_TAG.to_string(), host_plan.id.clone());
            network
                .allocate_address(&tags)
                .await
                .map_err(|e| ctx.error(e))?
                .allocation_id
        }
    };
    let mut tags = ctx.tags(Role::Common, &ctx.naming.nat_gateway());
    tags.insert(SUBNET_TAG.to_string(), host_plan.id.clone());
    // EC2 answers a replay of this token with the gateway the first call made.
    let token: String = Sha256::digest(format!("{}/{}", ctx.naming.qualified(), host.id))
        .iter()
        .take(24)
        .map(|b| format!("{b:02x}"))
        .collect();
    let nat = network
        .create_nat_gateway(&host.id, &allocation, &token, &tags)
        .await
        .map_err(|e| ctx.error(e))?;
    tracing::info!(nat = %nat.id, subnet = %host.id, "created a NAT gateway");
    Ok(nat)
}

/// The subnet's route table, found by its tag or created, with its default route and its
/// association; returns its ID.
async fn route_table(
    ctx: &Ctx,
    vpc: &Vpc,
    plan: &PlannedSubnet,
    subnet: &Subnet,
    tables: &[RouteTable],
    target: Option<RouteTarget>,
) -> Result<String, ActuatorError> {
    let network = &ctx.clients.network;
    let found = tables
        .iter()
        .find(|t| t.tags.get(SUBNET_TAG).map(String::as_str) == Some(&plan.id));
    let table = match found {
        Some(table) => table.clone(),
        None => {
            let mut tags = ctx.tags(
                Role::Common,
                &ctx.naming.route_table(plan.public, &plan.zone),
            );
            tags.insert(SUBNET_TAG.to_string(), plan.id.clone());
            network
                .create_route_table(&vpc.id, &tags)
                .await
                .map_err(|e| ctx.error(e))?
        }
    };
    if let Some(target) = target
        && !table
            .routes
            .iter()
            .any(|r| r.destination == ANYWHERE && r.target.is_some())
    {
        network
            .create_route(&table.id, ANYWHERE, &target)
            .await
            .map_err(|e| ctx.error(e))?;
    }
    if !table
        .associations
        .iter()
        .any(|(_, s)| s.as_deref() == Some(subnet.id.as_str()))
    {
        network
            .associate_route_table(&table.id, &subnet.id)
            .await
            .map_err(|e| ctx.error(e))?;
    }
    Ok(table.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_splits_into_power_of_two_blocks() {
        assert_eq!(
            split("10.0.0.0/16", 3).unwrap(),
            ["10.0.0.0/18", "10.0.64.0/18", "10.0.128.0/18"]
        );
        assert_eq!(
            split("10.0.64.0/18", 2).unwrap(),
            ["10.0.64.0/19", "10.0.96.0/19"]
        );
        assert_eq!(split("10.1.2.3/24", 1).unwrap(), ["10.1.2.0/24"]);
        assert_eq!(
            split("10.0.0.0/27", 2).unwrap(),
            ["10.0.0.0/28", "10.0.0.16/28"]
        );
        assert!(split("10.0.0.0/28", 2).unwrap_err().contains("/28"));
        assert!(split("ten/8", 2).is_err());
    }
}
