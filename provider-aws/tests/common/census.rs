//! What a moto account holds of one cluster: its live instances and its infrastructure, found by
//! the provider's tag `capi-rs.dev/cluster=<namespace>/<name>`, and — the account being the
//! test's own — every load balancer and target group in it. Shared with the manager's end-to-end
//! test (`provider-aws/bin/tests`), which includes this file alone.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeSet;

use aws_sdk_ec2::types::Filter;

/// The kinds [`resources`] names, in the order the cluster builds them, with their prefixes.
pub const KINDS: [(&str, &str); 9] = [
    ("vpcs", "vpc/"),
    ("subnets", "subnet/"),
    ("internet gateways", "igw/"),
    ("NAT gateways", "nat/"),
    ("route tables", "rtb/"),
    ("security groups", "sg/"),
    ("elastic IPs", "eip/"),
    ("load balancers", "lb/"),
    ("target groups", "tg/"),
];

/// The filter on the provider's tag of cluster `cluster` (`<namespace>/<name>`).
pub fn owned(cluster: &str) -> Filter {
    Filter::builder()
        .name("tag:capi-rs.dev/cluster")
        .values(cluster)
        .build()
}

fn text(e: &dyn std::fmt::Display) -> String {
    e.to_string()
}

/// The IDs of the cluster's instances that are not `terminated`.
pub async fn live_instances(
    ec2: &aws_sdk_ec2::Client,
    cluster: &str,
) -> Result<BTreeSet<String>, String> {
    let answer = ec2
        .describe_instances()
        .filters(owned(cluster))
        .send()
        .await
        .map_err(|e| text(&e))?;
    Ok(answer
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) != Some("terminated"))
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect())
}

/// Everything of the cluster, as `<kind>/<id>`: `instance/` for live instances, then the
/// prefixes of [`KINDS`].
pub async fn resources(
    ec2: &aws_sdk_ec2::Client,
    elb: &aws_sdk_elasticloadbalancingv2::Client,
    cluster: &str,
) -> Result<BTreeSet<String>, String> {
    let mut all: BTreeSet<String> = live_instances(ec2, cluster)
        .await?
        .into_iter()
        .map(|id| format!("instance/{id}"))
        .collect();
    let mut add = |prefix: &str, ids: Vec<Option<&str>>| {
        all.extend(ids.into_iter().flatten().map(|id| format!("{prefix}{id}")));
    };
    let vpcs = ec2
        .describe_vpcs()
        .filters(owned(cluster))
        .send()
        .await
        .map_err(|e| text(&e))?;
    add("vpc/", vpcs.vpcs().iter().map(|v| v.vpc_id()).collect());
    let subnets = ec2
        .describe_subnets()
        .filters(owned(cluster))
        .send()
        .await
        .map_err(|e| text(&e))?;
    add(
        "subnet/",
        subnets.subnets().iter().map(|s| s.subnet_id()).collect(),
    );
    let gateways = ec2
        .describe_internet_gateways()
        .filters(owned(cluster))
        .send()
        .await
        .map_err(|e| text(&e))?;
    add(
        "igw/",
        gateways
            .internet_gateways()
            .iter()
            .map(|g| g.internet_gateway_id())
            .collect(),
    );
    let nats = ec2
        .describe_nat_gateways()
        .filter(owned(cluster))
        .send()
        .await
        .map_err(|e| text(&e))?;
    add(
        "nat/",
        nats.nat_gateways()
            .iter()
            .filter(|n| n.state().map(|s| s.as_str()) != Some("deleted"))
            .map(|n| n.nat_gateway_id())
            .collect(),
    );
    let tables = ec2
        .describe_route_tables()
        .filters(owned(cluster))
        .send()
        .await
        .map_err(|e| text(&e))?;
    add(
        "rtb/",
        tables
            .route_tables()
            .iter()
            .map(|t| t.route_table_id())
            .collect(),
    );
    let groups = ec2
        .describe_security_groups()
        .filters(owned(cluster))
        .send()
        .await
        .map_err(|e| text(&e))?;
    add(
        "sg/",
        groups
            .security_groups()
            .iter()
            .map(|g| g.group_id())
            .collect(),
    );
    let addresses = ec2
        .describe_addresses()
        .filters(owned(cluster))
        .send()
        .await
        .map_err(|e| text(&e))?;
    add(
        "eip/",
        addresses
            .addresses()
            .iter()
            .map(|a| a.allocation_id())
            .collect(),
    );
    // The account is the test's own: every load balancer and target group in it is the
    // cluster's.
    let balancers = elb
        .describe_load_balancers()
        .send()
        .await
        .map_err(|e| text(&e))?;
    add(
        "lb/",
        balancers
            .load_balancers()
            .iter()
            .map(|l| l.load_balancer_arn())
            .collect(),
    );
    let target_groups = elb
        .describe_target_groups()
        .send()
        .await
        .map_err(|e| text(&e))?;
    add(
        "tg/",
        target_groups
            .target_groups()
            .iter()
            .map(|g| g.target_group_arn())
            .collect(),
    );
    Ok(all)
}

/// How many of each of [`KINDS`] the account holds of the cluster (instances aside).
pub async fn census(
    ec2: &aws_sdk_ec2::Client,
    elb: &aws_sdk_elasticloadbalancingv2::Client,
    cluster: &str,
) -> Result<Vec<(&'static str, usize)>, String> {
    let all = resources(ec2, elb, cluster).await?;
    Ok(KINDS
        .iter()
        .map(|(kind, prefix)| (*kind, all.iter().filter(|r| r.starts_with(prefix)).count()))
        .collect())
}
