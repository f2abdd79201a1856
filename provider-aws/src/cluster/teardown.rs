//! Deleting a cluster's infrastructure in reverse order of creation: load balancers → target
//! groups → security groups → route tables → NAT gateways → elastic addresses → internet
//! gateway → subnets → VPC.
//!
//! Every resource is found by the cluster's ownership tags (not by the status, which a lost write
//! may have left behind), and only what carries them is deleted. One pass tries everything and
//! keeps going past individual failures; what could not go yet is listed, with why, in the
//! RequeueAfter that brings the next pass — the causes of EC2's `DependencyViolation` are dealt
//! with on the way (CAPA #3810, #4985):
//!
//! - load balancers the Kubernetes cloud provider made for the cluster's Services
//!   (`kubernetes.io/cluster/<name>=owned`) are deleted with the API server's, since their network
//!   interfaces hold the subnets and security groups;
//! - security groups lose their ingress rules before any is deleted, so that groups referring to
//!   each other do not block each other;
//! - detached (`available`) network interfaces left in a subnet or a group are deleted; attached
//!   ones are named in the report.
//!
//! A throttled answer stops the pass at once (the region's budget says when to come back); any
//! other failure is recorded and the pass goes on.

use std::collections::BTreeSet;
use std::time::Duration;

use capi_core::ActuatorError;

use super::{Ctx, load_balancer};
use crate::api::Filter;
use crate::cloud::{CloudError, ErrorClass};
use crate::naming::OWNED;

/// How soon a teardown with something left looks again.
pub const TEARDOWN_RETRY: Duration = Duration::from_secs(10);

/// What one pass could not delete yet.
struct Left<'a> {
    ctx: &'a Ctx,
    items: Vec<String>,
}

impl Left<'_> {
    /// Records a failed deletion, or returns the error when it must stop the pass (throttled).
    fn failed(&mut self, what: &str, error: CloudError) -> Result<(), ActuatorError> {
        if error.class() == ErrorClass::Throttled {
            return Err(self.ctx.error(error));
        }
        let why = match error.class() {
            ErrorClass::DependencyViolation => "still in use".to_string(),
            _ => error.message(&self.ctx.clients.redaction),
        };
        self.items.push(format!("{what} ({why})"));
        Ok(())
    }

    fn waiting(&mut self, what: String) {
        self.items.push(what);
    }

    /// Runs a deletion, recording its failure.
    async fn attempt(
        &mut self,
        what: &str,
        deletion: impl Future<Output = Result<(), CloudError>>,
    ) -> Result<bool, ActuatorError> {
        match deletion.await {
            Ok(()) => Ok(true),
            Err(error) => {
                self.failed(what, error)?;
                Ok(false)
            }
        }
    }
}

fn filter(name: &str, value: &str) -> Filter {
    Filter {
        name: name.to_string(),
        values: vec![value.to_string()],
    }
}

/// One pass of the teardown: `Ok` when nothing of the cluster is left.
pub(super) async fn run(ctx: &Ctx) -> Result<(), ActuatorError> {
    let network = &ctx.clients.network;
    let mut left = Left {
        ctx,
        items: Vec::new(),
    };
    let owned_vpcs: Vec<String> = if ctx
        .cluster
        .spec
        .network
        .vpc
        .as_ref()
        .and_then(|v| v.id.as_ref())
        .is_some()
    {
        Vec::new()
    } else {
        network
            .vpcs(&ctx.owned())
            .await
            .map_err(|e| ctx.error(e))?
            .into_iter()
            .map(|v| v.id)
            .collect()
    };
    let mut vpcs: BTreeSet<String> = owned_vpcs.iter().cloned().collect();
    if let Some(id) = ctx
        .cluster
        .spec
        .network
        .vpc
        .as_ref()
        .and_then(|v| v.id.clone())
    {
        vpcs.insert(id);
    }

    load_balancers(ctx, &vpcs, &mut left).await?;
    target_groups(ctx, &mut left).await?;

    for vpc in &vpcs {
        security_groups(ctx, vpc, &mut left).await?;
    }
    let mut held = BTreeSet::new();
    for vpc in &owned_vpcs {
        held.extend(routing(ctx, vpc, &mut left).await?);
    }
    addresses(ctx, &held, &mut left).await?;
    for vpc in &owned_vpcs {
        subnets_and_vpc(ctx, vpc, &mut left).await?;
    }
    if left.items.is_empty() {
        return Ok(());
    }
    Err(ActuatorError::requeue_after(
        TEARDOWN_RETRY,
        "DeletingInfrastructure",
        format!("still deleting: {}", left.items.join("; ")),
    ))
}

/// The API server's load balancer, and the Service load balancers of the cluster in its VPCs.
async fn load_balancers(
    ctx: &Ctx,
    vpcs: &BTreeSet<String>,
    left: &mut Left<'_>,
) -> Result<(), ActuatorError> {
    let lb = &ctx.clients.load_balancing;
    let mut doomed = match load_balancer::owned_named(ctx, &load_balancer::name(ctx)).await {
        Ok(found) => found,
        // Someone else's name: nothing of ours to delete under it.
        Err(error) if error.reason() == "LoadBalancerNameTaken" => Vec::new(),
        Err(error) => return Err(error),
    };
    let in_vpcs: Vec<_> = lb
        .load_balancers()
        .await
        .map_err(|e| ctx.error(e))?
        .into_iter()
        .filter(|l| vpcs.contains(&l.vpc_id))
        .filter(|l| !doomed.iter().any(|d| d.arn == l.arn))
        .collect();
    if !in_vpcs.is_empty() {
        let arns: Vec<String> = in_vpcs.iter().map(|l| l.arn.clone()).collect();
        let tags = lb.tags(&arns).await.map_err(|e| ctx.error(e))?;
        let service_tag = ctx.naming.kubernetes_cluster_tag();
        doomed.extend(in_vpcs.into_iter().filter(|l| {
            tags.get(&l.arn)
                .is_some_and(|t| t.get(&service_tag).map(String::as_str) == Some(OWNED))
        }));
    }
    for balancer in doomed {
        let what = format!("load balancer {}", balancer.name);
        if left
            .attempt(&what, lb.delete_load_balancer(&balancer.arn))
            .await?
        {
            tracing::info!(load_balancer = %balancer.arn, "deleted a load balancer");
        }
    }
    Ok(())
}

async fn target_groups(ctx: &Ctx, left: &mut Left<'_>) -> Result<(), ActuatorError> {
    let groups = match load_balancer::owned_target_groups(ctx, &ctx.naming.target_group()).await {
        Ok(groups) => groups,
        Err(error) if error.reason() == "TargetGroupNameTaken" => Vec::new(),
        Err(error) => return Err(error),
    };
    for group in groups {
        let what = format!("target group {}", group.name);
        left.attempt(
            &what,
            ctx.clients.load_balancing.delete_target_group(&group.arn),
        )
        .await?;
    }
    Ok(())
}

/// Detached network interfaces matching `filters` deleted; the attached ones described.
async fn interfaces(
    ctx: &Ctx,
    filters: &[Filter],
    left: &mut Left<'_>,
) -> Result<Vec<String>, ActuatorError> {
    let network = &ctx.clients.network;
    let found = network
        .network_interfaces(filters)
        .await
        .map_err(|e| ctx.error(e))?;
    let mut attached = Vec::new();
    for interface in found {
        if interface.status == "available" {
            let what = format!("network interface {}", interface.id);
            left.attempt(&what, network.delete_network_interface(&interface.id))
                .await?;
        } else {
            let made_by = if interface.description.is_empty() {
                String::new()
            } else {
                format!(": {}", interface.description)
            };
            attached.push(format!("{}{made_by}", interface.id));
        }
    }
    Ok(attached)
}

async fn security_groups(ctx: &Ctx, vpc: &str, left: &mut Left<'_>) -> Result<(), ActuatorError> {
    let network = &ctx.clients.network;
    let groups = network
        .security_groups(&ctx.owned_and(&[("vpc-id", vpc)]))
        .await
        .map_err(|e| ctx.error(e))?;
    for group in &groups {
        if !group.ingress.is_empty() {
            let what = format!("rules of security group {}", group.name);
            left.attempt(&what, network.revoke_ingress(&group.id, &group.ingress))
                .await?;
        }
    }
    for group in &groups {
        match network.delete_security_group(&group.id).await {
            Ok(()) => {}
            Err(error) if error.class() == ErrorClass::DependencyViolation => {
                let attached = interfaces(ctx, &[filter("group-id", &group.id)], left).await?;
                left.waiting(if attached.is_empty() {
                    format!("security group {} (still in use)", group.name)
                } else {
                    format!(
                        "security group {} (in use by {})",
                        group.name,
                        attached.join(", ")
                    )
                });
            }
            Err(error) => left.failed(&format!("security group {}", group.name), error)?,
        }
    }
    Ok(())
}

/// Route tables, then NAT gateways and the internet gateway of a VPC the cluster made; returns
/// the elastic address allocations the VPC's NAT gateways (not deleted yet) still hold.
async fn routing(
    ctx: &Ctx,
    vpc: &str,
    left: &mut Left<'_>,
) -> Result<BTreeSet<String>, ActuatorError> {
    let network = &ctx.clients.network;
    let tables = network
        .route_tables(&ctx.owned_and(&[("vpc-id", vpc)]))
        .await
        .map_err(|e| ctx.error(e))?;
    for table in tables {
        for (association, subnet) in &table.associations {
            if subnet.is_some() {
                let what = format!("association of route table {}", table.id);
                left.attempt(&what, network.disassociate_route_table(association))
                    .await?;
            }
        }
        let what = format!("route table {}", table.id);
        left.attempt(&what, network.delete_route_table(&table.id))
            .await?;
    }
    let nats = network
        .nat_gateways(&[filter("vpc-id", vpc)])
        .await
        .map_err(|e| ctx.error(e))?;
    let held = nats
        .iter()
        .flat_map(|n| n.allocation_ids.iter().cloned())
        .collect();
    for nat in nats.into_iter().filter(|n| ctx.owns(&n.tags)) {
        if nat.state != "deleting" {
            let what = format!("NAT gateway {}", nat.id);
            if !left
                .attempt(&what, network.delete_nat_gateway(&nat.id))
                .await?
            {
                continue;
            }
        }
        left.waiting(format!("NAT gateway {} (deleting)", nat.id));
    }
    let gateways = network
        .internet_gateways(&ctx.owned())
        .await
        .map_err(|e| ctx.error(e))?;
    for gateway in gateways {
        let what = format!("internet gateway {}", gateway.id);
        let mut detached = true;
        for attached in &gateway.vpc_ids {
            detached &= left
                .attempt(
                    &what,
                    network.detach_internet_gateway(&gateway.id, attached),
                )
                .await?;
        }
        if detached {
            left.attempt(&what, network.delete_internet_gateway(&gateway.id))
                .await?;
        }
    }
    Ok(held)
}

/// The cluster's elastic addresses, once no NAT gateway (`held`: the allocations of the VPCs'
/// NAT gateways that are not deleted yet) holds them.
async fn addresses(
    ctx: &Ctx,
    held: &BTreeSet<String>,
    left: &mut Left<'_>,
) -> Result<(), ActuatorError> {
    let network = &ctx.clients.network;
    let found = network
        .addresses(&ctx.owned())
        .await
        .map_err(|e| ctx.error(e))?;
    for address in found {
        if held.contains(&address.allocation_id) {
            left.waiting(format!(
                "elastic IP {} (still associated)",
                address.public_ip
            ));
            continue;
        }
        let what = format!("elastic IP {}", address.public_ip);
        left.attempt(&what, network.release_address(&address.allocation_id))
            .await?;
    }
    Ok(())
}

async fn subnets_and_vpc(ctx: &Ctx, vpc: &str, left: &mut Left<'_>) -> Result<(), ActuatorError> {
    let network = &ctx.clients.network;
    let subnets = network
        .subnets(&ctx.owned_and(&[("vpc-id", vpc)]))
        .await
        .map_err(|e| ctx.error(e))?;
    let mut all_gone = true;
    for subnet in subnets {
        match network.delete_subnet(&subnet.id).await {
            Ok(()) => {}
            Err(error) if error.class() == ErrorClass::DependencyViolation => {
                all_gone = false;
                let attached = interfaces(ctx, &[filter("subnet-id", &subnet.id)], left).await?;
                left.waiting(if attached.is_empty() {
                    format!("subnet {} (still in use)", subnet.id)
                } else {
                    format!("subnet {} (in use by {})", subnet.id, attached.join(", "))
                });
            }
            Err(error) => {
                all_gone = false;
                left.failed(&format!("subnet {}", subnet.id), error)?;
            }
        }
    }
    if all_gone {
        left.attempt(&format!("VPC {vpc}"), network.delete_vpc(vpc))
            .await?;
    } else {
        left.waiting(format!("VPC {vpc} (its subnets first)"));
    }
    Ok(())
}
