//! The API server's network load balancer: in the cluster's public subnets (private ones for an
//! `internal` scheme), one per zone, with the `apiserver-lb` security group; a TCP target group
//! of instances on the API server port; a listener on that port. The endpoint is the load
//! balancer's DNS name, reported once it is `active`.
//!
//! A load balancer or target group of the planned name is adopted only when it carries the
//! cluster's ownership tags; one that does not is someone else's, and the name must change. With
//! `loadBalancerType: disabled` there is none, and `spec.controlPlaneEndpoint` must be set.

use capi_core::ActuatorError;
use capi_core::api::ApiEndpoint;

use super::{Ctx, Progress};
use crate::api::{LoadBalancerScheme, LoadBalancerStatus, LoadBalancerType, NetworkStatus};
use crate::cloud::{CreateLoadBalancer, CreateTargetGroup, LoadBalancer, TargetGroup};
use crate::naming::{OWNED, Role};

/// Whether the spec asks for a load balancer.
pub(crate) fn enabled(ctx: &Ctx) -> bool {
    ctx.cluster
        .spec
        .control_plane_load_balancer
        .as_ref()
        .and_then(|lb| lb.load_balancer_type)
        != Some(LoadBalancerType::Disabled)
}

/// The load balancer's name.
pub(crate) fn name(ctx: &Ctx) -> String {
    ctx.cluster
        .spec
        .control_plane_load_balancer
        .as_ref()
        .and_then(|lb| lb.name.clone())
        .unwrap_or_else(|| ctx.naming.load_balancer())
}

/// Of `named` (load balancers or target groups, by ARN), those that carry this cluster's
/// ownership tags; `taken` when there are some and none is the cluster's.
async fn ours<T>(
    ctx: &Ctx,
    named: Vec<T>,
    arn: impl Fn(&T) -> &str,
    taken: impl FnOnce() -> ActuatorError,
) -> Result<Vec<T>, ActuatorError> {
    if named.is_empty() {
        return Ok(named);
    }
    let arns: Vec<String> = named.iter().map(|n| arn(n).to_string()).collect();
    let tags = ctx
        .clients
        .load_balancing
        .tags(&arns)
        .await
        .map_err(|e| ctx.error(e))?;
    let (ours, theirs): (Vec<T>, Vec<T>) = named
        .into_iter()
        .partition(|n| tags.get(arn(n)).is_some_and(|t| ctx.owns(t)));
    if ours.is_empty() && !theirs.is_empty() {
        return Err(taken());
    }
    Ok(ours)
}

/// The load balancers named `name` that are this cluster's; an error when the name is taken
/// by something else.
pub(crate) async fn owned_named(ctx: &Ctx, name: &str) -> Result<Vec<LoadBalancer>, ActuatorError> {
    let named = ctx
        .clients
        .load_balancing
        .load_balancers_named(name)
        .await
        .map_err(|e| ctx.error(e))?;
    ours(
        ctx,
        named,
        |l| &l.arn,
        || {
            ActuatorError::invalid_configuration(
                "LoadBalancerNameTaken",
                format!(
                    "a load balancer named {name:?} exists and is not this cluster's; set \
                 spec.controlPlaneLoadBalancer.name to another name"
                ),
            )
        },
    )
    .await
}

/// The target groups named `name` that are this cluster's.
pub(crate) async fn owned_target_groups(
    ctx: &Ctx,
    name: &str,
) -> Result<Vec<TargetGroup>, ActuatorError> {
    let named = ctx
        .clients
        .load_balancing
        .target_groups_named(name)
        .await
        .map_err(|e| ctx.error(e))?;
    ours(
        ctx,
        named,
        |g| &g.arn,
        || {
            ActuatorError::invalid_configuration(
                "TargetGroupNameTaken",
                format!(
                    "a target group named {name:?} exists and is not this cluster's (target group \
                 names are unique per account and region)"
                ),
            )
        },
    )
    .await
}

/// The load balancer, target group and listener; the endpoint once the load balancer is
/// active. Fills `status.apiServerElb`.
pub(super) async fn reconcile(
    ctx: &Ctx,
    status: &mut NetworkStatus,
) -> Result<(Option<ApiEndpoint>, Progress), ActuatorError> {
    if !enabled(ctx) {
        let endpoint = ctx
            .cluster
            .spec
            .control_plane_endpoint
            .clone()
            .filter(ApiEndpoint::is_valid)
            .ok_or_else(|| {
                ActuatorError::invalid_configuration(
                    "ControlPlaneEndpointMissing",
                    "spec.controlPlaneLoadBalancer.loadBalancerType is disabled: set \
                     spec.controlPlaneEndpoint to the API server's address",
                )
            })?;
        return Ok((Some(endpoint), Progress::Ready));
    }
    let Some(vpc) = status.vpc.as_ref().map(|v| v.id.clone()) else {
        return Ok((None, Progress::Waiting("no VPC yet".into())));
    };
    let spec = ctx
        .cluster
        .spec
        .control_plane_load_balancer
        .clone()
        .unwrap_or_default();
    let scheme = spec.scheme.unwrap_or_default();
    let name = name(ctx);
    let lb = &ctx.clients.load_balancing;

    let mut ours = owned_named(ctx, &name).await?;
    ours.sort_by(|a, b| a.arn.cmp(&b.arn));
    let balancer = match ours.into_iter().next() {
        Some(found) => found,
        None => {
            let subnet_ids = if spec.subnets.is_empty() {
                let public = scheme == LoadBalancerScheme::InternetFacing;
                let mut seen_zones = Vec::new();
                status
                    .subnets
                    .iter()
                    .filter(|s| s.is_public == public)
                    .filter(|s| {
                        let first = !seen_zones.contains(&s.availability_zone);
                        seen_zones.push(s.availability_zone.clone());
                        first
                    })
                    .map(|s| s.resource_id.clone())
                    .collect()
            } else {
                spec.subnets.clone()
            };
            if subnet_ids.is_empty() {
                return Err(ActuatorError::invalid_configuration(
                    "NoSubnetsForLoadBalancer",
                    format!(
                        "the cluster has no {} subnets to put an {} load balancer in",
                        if scheme == LoadBalancerScheme::InternetFacing {
                            "public"
                        } else {
                            "private"
                        },
                        serde_json::to_value(scheme)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default()
                    ),
                ));
            }
            let mut security_group_ids: Vec<String> = status
                .security_groups
                .get("apiserver-lb")
                .map(|g| g.id.clone())
                .into_iter()
                .collect();
            security_group_ids.extend(spec.additional_security_groups.iter().cloned());
            let mut tags = ctx.tags(Role::ApiServer, &name);
            tags.insert(ctx.naming.kubernetes_cluster_tag(), OWNED.to_string());
            let created = lb
                .create_load_balancer(&CreateLoadBalancer {
                    name: name.clone(),
                    scheme,
                    subnet_ids,
                    security_group_ids,
                    tags,
                })
                .await
                .map_err(|e| ctx.error(e))?;
            if spec.cross_zone_load_balancing {
                lb.set_cross_zone(&created.arn, true)
                    .await
                    .map_err(|e| ctx.error(e))?;
            }
            tracing::info!(load_balancer = %created.arn, "created the API server load balancer");
            created
        }
    };

    let group_name = ctx.naming.target_group();
    let mut groups = owned_target_groups(ctx, &group_name).await?;
    groups.sort_by(|a, b| a.arn.cmp(&b.arn));
    let group = match groups.into_iter().next() {
        Some(group) => group,
        None => lb
            .create_target_group(&CreateTargetGroup {
                name: group_name.clone(),
                vpc_id: vpc,
                port: ctx.api_server_port,
                preserve_client_ip: spec.preserve_client_ip,
                tags: ctx.tags(Role::ApiServer, &group_name),
            })
            .await
            .map_err(|e| ctx.error(e))?,
    };

    let listeners = lb
        .listeners(&balancer.arn)
        .await
        .map_err(|e| ctx.error(e))?;
    let listener = match listeners
        .into_iter()
        .find(|l| l.port == ctx.api_server_port)
    {
        Some(listener) => listener,
        None => lb
            .create_listener(&balancer.arn, ctx.api_server_port, &group.arn)
            .await
            .map_err(|e| ctx.error(e))?,
    };

    status.api_server_elb = Some(LoadBalancerStatus {
        arn: balancer.arn.clone(),
        name: balancer.name.clone(),
        dns_name: balancer.dns_name.clone(),
        scheme: Some(scheme),
        load_balancer_type: Some(LoadBalancerType::Nlb),
        target_group_arn: Some(group.arn.clone()),
        listener_arn: Some(listener.arn),
    });
    let active = balancer.state.is_empty() || balancer.state == "active";
    if !active || balancer.dns_name.is_empty() {
        return Ok((
            None,
            Progress::Waiting(format!(
                "load balancer {} is {}",
                balancer.name,
                if balancer.state.is_empty() {
                    "without a DNS name"
                } else {
                    balancer.state.as_str()
                }
            )),
        ));
    }
    Ok((
        Some(ApiEndpoint {
            host: balancer.dns_name,
            port: i32::from(ctx.api_server_port),
        }),
        Progress::Ready,
    ))
}
