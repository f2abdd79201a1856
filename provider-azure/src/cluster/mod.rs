//! The `AzureCluster` actuator: a cluster's resource group, virtual network, security groups,
//! subnets, the nodes' NAT gateway (their outbound path, CAPZ's default), public IP and API
//! server load balancer, made in CAPZ's order and taken down in reverse — without ever waiting
//! on ARM.
//!
//! Each reconcile reads the operations recorded in status ([`crate::operations`]), then walks
//! the resources: what is missing is PUT, what differs (or failed) is PUT again, what ARM is
//! still making is waited for — and resources that do not depend on it go on meanwhile (the
//! network, the security groups and the public IP in the same pass; the subnets once their
//! network and security group are there; the load balancer once its public IP is). Every name
//! is deterministic ([`crate::naming`]), so a PUT replayed after a lost answer or a restart is
//! the same resource.
//!
//! **Deletion** deletes the resource group when the cluster owns it (ARM takes everything in
//! it); otherwise each of the cluster's own resources in reverse, going on past refusals (a
//! subnet still in use) and reporting what is left and why. A resource group or network the
//! user brought is never changed or deleted.

mod bodies;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::api::{ApiEndpoint, FailureDomain};
use capi_core::condition::{ConditionStatus, DesiredCondition};
use capi_core::{
    ActuatorError, ClusterActuator, ClusterInfrastructure, ClusterScope, ProviderStatus,
};
use kube::ResourceExt;
use serde::Serialize;

use crate::api::{
    AzureCluster, LoadBalancerStatus, LongRunningOperation, NetworkStatus, ResourceStatus,
    SubnetRole, SubnetStatus,
};
use crate::arm::{Arm, ResourceId};
use crate::connector::Connector;
use crate::naming::ClusterNaming;
use crate::operations::Operations;
use crate::resource::{Foreign, Removal, Step, ensure, remove};

pub(crate) use bodies::backend_pool_id;
pub use bodies::{DEFAULT_IDLE_TIMEOUT, PROBE, RULE};

/// The port the API server listens on when the `Cluster` does not say.
pub const DEFAULT_API_SERVER_PORT: u16 = 6443;

/// How soon a teardown looks again.
pub const TEARDOWN_RETRY: Duration = Duration::from_secs(5);

/// The port the `Cluster`'s API server listens on.
pub fn api_server_port(cluster: &capi_core::api::Cluster) -> u16 {
    cluster
        .spec
        .cluster_network
        .as_ref()
        .and_then(|n| n.api_server_port)
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(DEFAULT_API_SERVER_PORT)
}

/// One reconcile of one cluster (also what a machine's reconcile knows of its cluster).
pub(crate) struct Ctx {
    pub(crate) arm: Arc<dyn Arm>,
    pub(crate) cluster: Arc<AzureCluster>,
    pub(crate) naming: ClusterNaming,
    pub(crate) subscription: String,
    pub(crate) resource_group: String,
    pub(crate) api_server_port: u16,
}

impl Ctx {
    /// The context of `cluster` (named `name`, the `Cluster`'s) over `arm`.
    pub(crate) fn new(
        arm: Arc<dyn Arm>,
        cluster: Arc<AzureCluster>,
        name: &str,
        api_server_port: u16,
    ) -> Self {
        let naming = ClusterNaming::new(&cluster.namespace().unwrap_or_default(), name);
        Self {
            arm,
            subscription: cluster.spec.subscription_id.clone(),
            resource_group: naming.resource_group(&cluster),
            naming,
            cluster,
            api_server_port,
        }
    }
}

/// Reconciles `AzureCluster`s through a [`Connector`].
pub struct AzureClusterActuator {
    connector: Arc<dyn Connector>,
}

/// What the provider reports in `AzureCluster.status` beyond the contract.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterStatus<'a> {
    network: &'a NetworkStatus,
    long_running_operation_states: Vec<LongRunningOperation>,
}

fn resource_status(id: &ResourceId) -> ResourceStatus {
    ResourceStatus {
        id: id.to_string(),
        name: id.name.clone(),
    }
}

fn condition(type_: &str, waiting: &[String], ready_reason: &str) -> DesiredCondition {
    if waiting.is_empty() {
        DesiredCondition::new(type_, ConditionStatus::True, ready_reason)
    } else {
        DesiredCondition::new(type_, ConditionStatus::False, "Provisioning")
            .message(waiting.join("; "))
    }
}

impl AzureClusterActuator {
    /// An actuator using `connector` for ARM clients.
    pub fn new(connector: Arc<dyn Connector>) -> Self {
        Self { connector }
    }

    async fn context(&self, scope: &ClusterScope<AzureCluster>) -> Result<Ctx, ActuatorError> {
        let infra = Arc::clone(&scope.infra_cluster);
        let name = scope
            .cluster
            .metadata
            .name
            .clone()
            .or_else(|| infra.labels().get(capi_core::labels::CLUSTER_NAME).cloned())
            .unwrap_or_else(|| infra.name_any());
        let arm = self.connector.connect(&infra).await?;
        Ok(Ctx::new(arm, infra, &name, api_server_port(&scope.cluster)))
    }
}

/// What one pass found.
#[derive(Default)]
struct Pass {
    status: NetworkStatus,
    network_waiting: Vec<String>,
    balancer_waiting: Vec<String>,
    endpoint: Option<ApiEndpoint>,
}

impl Pass {
    fn wait(list: &mut Vec<String>, step: &Step) {
        if let Step::Waiting(message) = step {
            list.push(message.clone());
        }
    }
}

async fn reconcile_network(
    ctx: &Ctx,
    ops: &mut Operations,
    pass: &mut Pass,
) -> Result<(), ActuatorError> {
    let arm = ctx.arm.as_ref();
    let group_id = ctx.group_id();
    let group = ensure(
        arm,
        ops,
        &ctx.naming,
        Foreign::UseAsFound,
        &group_id,
        &ctx.group_body(),
        "resource group",
    )
    .await?;
    Pass::wait(&mut pass.network_waiting, &group);
    if group.ready().is_none() {
        pass.balancer_waiting.push("the resource group".into());
        return Ok(());
    }
    pass.status.resource_group = Some(resource_status(&group_id));
    let vnet_group = ResourceId::resource_group(
        &ctx.subscription,
        &ctx.naming.vnet_resource_group(&ctx.cluster),
    );
    if !vnet_group.same(&group_id) {
        let found = arm
            .get(&vnet_group)
            .await
            .map_err(|e| e.into_actuator("reading the virtual network's resource group"))?;
        if found.is_none() {
            // Retried: creating the group does not change the AzureCluster.
            return Err(ActuatorError::transient_message(
                "VnetResourceGroupNotFound",
                format!(
                    "spec.networkSpec.vnet.resourceGroup {} does not exist; create it, or leave \
                     the field unset to use the cluster's resource group",
                    vnet_group.name
                ),
            ));
        }
    }

    // Independent of each other: the network, the security groups, the public IP.
    let vnet_id = ctx.vnet_id();
    let vnet = ensure(
        arm,
        ops,
        &ctx.naming,
        Foreign::UseAsFound,
        &vnet_id,
        &ctx.vnet_body(),
        "virtual network",
    )
    .await?;
    Pass::wait(&mut pass.network_waiting, &vnet);
    // A network being made is the cluster's; one found untagged is the user's, whose subnets
    // (and their security groups) the provider uses as they are and never changes.
    let vnet_owned = vnet.ready().is_none_or(|v| ctx.naming.owns(&v["tags"]));
    let mut groups = Vec::new();
    let mut nat = Step::Waiting("the NAT gateway waits for its public IP".into());
    if vnet_owned {
        let nat_ip_id = ctx.nat_gateway_ip_id();
        let nat_ip = ensure(
            arm,
            ops,
            &ctx.naming,
            Foreign::UseAsFound,
            &nat_ip_id,
            &ctx.nat_gateway_ip_body(),
            "public IP address",
        )
        .await?;
        Pass::wait(&mut pass.network_waiting, &nat_ip);
        if nat_ip.ready().is_some() {
            let nat_id = ctx.nat_gateway_id();
            nat = ensure(
                arm,
                ops,
                &ctx.naming,
                Foreign::UseAsFound,
                &nat_id,
                &ctx.nat_gateway_body(),
                "NAT gateway",
            )
            .await?;
            Pass::wait(&mut pass.network_waiting, &nat);
        }
        for role in SubnetRole::ALL {
            let id = ctx.security_group_id(role);
            let step = ensure(
                arm,
                ops,
                &ctx.naming,
                Foreign::UseAsFound,
                &id,
                &ctx.security_group_body(role),
                "network security group",
            )
            .await?;
            Pass::wait(&mut pass.network_waiting, &step);
            groups.push((role, id, step));
        }
    }
    let pip_id = ctx.public_ip_id();
    let pip = ensure(
        arm,
        ops,
        &ctx.naming,
        Foreign::UseAsFound,
        &pip_id,
        &ctx.public_ip_body(),
        "public IP address",
    )
    .await?;
    Pass::wait(&mut pass.balancer_waiting, &pip);

    // The subnets, once their network and security group are there.
    if vnet.ready().is_some() {
        pass.status.vnet = Some(resource_status(&vnet_id));
        if vnet_owned {
            for (role, group_id, group) in &groups {
                if group.ready().is_none() {
                    pass.network_waiting.push(format!(
                        "the {} subnet waits for its security group",
                        role.as_str()
                    ));
                    continue;
                }
                if *role == SubnetRole::Node && nat.ready().is_none() {
                    pass.network_waiting
                        .push("the node subnet waits for its NAT gateway".into());
                    continue;
                }
                let id = ctx.subnet_id(*role);
                let step = ensure(
                    arm,
                    ops,
                    &ctx.naming,
                    Foreign::Converge,
                    &id,
                    &ctx.subnet_body(*role),
                    "subnet",
                )
                .await?;
                Pass::wait(&mut pass.network_waiting, &step);
                if step.ready().is_some() {
                    pass.status.subnets.push(SubnetStatus {
                        id: id.to_string(),
                        name: id.name.clone(),
                        role: *role,
                        cidr_blocks: ctx.subnet_cidrs(*role),
                        security_group_id: Some(group_id.to_string()),
                    });
                }
            }
        } else {
            for role in SubnetRole::ALL {
                let id = ctx.subnet_id(role);
                let found = arm
                    .get(&id)
                    .await
                    .map_err(|e| e.into_actuator(&format!("reading subnet {}", id.name)))?;
                match found {
                    Some(subnet) => {
                        let properties = &subnet["properties"];
                        let mut cidrs: Vec<String> = properties["addressPrefixes"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|c| c.as_str().map(str::to_string))
                            .collect();
                        cidrs.extend(properties["addressPrefix"].as_str().map(str::to_string));
                        pass.status.subnets.push(SubnetStatus {
                            id: id.to_string(),
                            name: id.name.clone(),
                            role,
                            cidr_blocks: cidrs,
                            security_group_id: properties["networkSecurityGroup"]["id"]
                                .as_str()
                                .map(str::to_string),
                        });
                    }
                    None => pass.network_waiting.push(format!(
                        "subnet {} does not exist in virtual network {}, which is not this \
                         cluster's: create it (the provider never changes a network it does not \
                         own)",
                        id.name, vnet_id.name
                    )),
                }
            }
        }
    } else {
        pass.network_waiting
            .push("the subnets wait for the virtual network".into());
    }

    // The load balancer, once its public IP is there.
    let Some(pip_body) = pip.ready() else {
        pass.balancer_waiting
            .push("the load balancer waits for its public IP".into());
        return Ok(());
    };
    let lb_id = ctx.load_balancer_id();
    let lb = ensure(
        arm,
        ops,
        &ctx.naming,
        Foreign::UseAsFound,
        &lb_id,
        &ctx.load_balancer_body(),
        "load balancer",
    )
    .await?;
    Pass::wait(&mut pass.balancer_waiting, &lb);
    let fqdn = pip_body["properties"]["dnsSettings"]["fqdn"]
        .as_str()
        .map(str::to_string);
    let address = pip_body["properties"]["ipAddress"]
        .as_str()
        .map(str::to_string);
    if lb.ready().is_some() {
        pass.status.api_server_lb = Some(LoadBalancerStatus {
            id: lb_id.to_string(),
            name: lb_id.name.clone(),
            backend_pool_id: backend_pool_id(ctx),
            public_ip: address.clone(),
            dns_name: fqdn.clone(),
        });
        match fqdn.or(address) {
            Some(host) => {
                pass.endpoint = Some(ApiEndpoint {
                    host,
                    port: i32::from(ctx.api_server_port),
                });
            }
            None => pass
                .balancer_waiting
                .push("the public IP has no address or DNS name yet".into()),
        }
    }
    Ok(())
}

/// The cluster's failure domains: its location's availability zones.
fn failure_domains(cluster: &AzureCluster) -> Vec<FailureDomain> {
    crate::naming::zones(&cluster.spec.location)
        .into_iter()
        .map(|name| FailureDomain {
            name,
            control_plane: Some(true),
            attributes: Default::default(),
        })
        .collect()
}

fn recorded(cluster: &AzureCluster) -> Vec<LongRunningOperation> {
    cluster
        .status
        .as_ref()
        .map(|s| s.long_running_operation_states.clone())
        .unwrap_or_default()
}

#[async_trait]
impl ClusterActuator<AzureCluster> for AzureClusterActuator {
    async fn reconcile(
        &self,
        scope: &ClusterScope<AzureCluster>,
    ) -> Result<ClusterInfrastructure, ActuatorError> {
        let ctx = self.context(scope).await?;
        let mut ops = Operations::resume(ctx.arm.as_ref(), &recorded(&ctx.cluster)).await;
        let mut pass = Pass::default();
        reconcile_network(&ctx, &mut ops, &mut pass).await?;
        if let Some(failed) = ops.failure_message() {
            pass.network_waiting
                .push(format!("retrying after a failed operation: {failed}"));
        }
        let conditions = vec![
            condition(
                "NetworkInfrastructureReady",
                &pass.network_waiting,
                "NetworkReady",
            ),
            condition(
                "LoadBalancerReady",
                &pass.balancer_waiting,
                "LoadBalancerReady",
            ),
        ];
        let provisioned = pass.network_waiting.is_empty()
            && pass.balancer_waiting.is_empty()
            && pass.endpoint.is_some();
        let provider_status = ProviderStatus::from_typed(&ClusterStatus {
            network: &pass.status,
            long_running_operation_states: ops.to_record(),
        })
        .map_err(|e| ActuatorError::transient("ProviderStatusInvalid", e))?;
        Ok(ClusterInfrastructure {
            control_plane_endpoint: pass.endpoint,
            failure_domains: failure_domains(&ctx.cluster),
            provisioned,
            provider_status,
            conditions,
        })
    }

    async fn delete(&self, scope: &ClusterScope<AzureCluster>) -> Result<(), ActuatorError> {
        let ctx = self.context(scope).await?;
        teardown(&ctx).await
    }
}

/// Deletes what the cluster owns (module docs).
async fn teardown(ctx: &Ctx) -> Result<(), ActuatorError> {
    let arm = ctx.arm.as_ref();
    let mut left: Vec<String> = Vec::new();
    let mut note = |what: &str,
                    id: &ResourceId,
                    removal: Result<Removal, crate::arm::ArmError>|
     -> Result<bool, ActuatorError> {
        match removal {
            Ok(Removal::Gone) => Ok(true),
            Ok(Removal::Deleting) => {
                left.push(format!("{what} {} (being deleted)", id.name));
                Ok(false)
            }
            Ok(Removal::Refused(error)) => {
                left.push(format!("{what} {} ({error})", id.name));
                Ok(false)
            }
            Err(error) if matches!(error.class(), crate::arm::ErrorClass::Throttled(_)) => {
                Err(error.into_actuator(&format!("deleting {what} {}", id.name)))
            }
            Err(error) => {
                left.push(format!("{what} {} ({error})", id.name));
                Ok(false)
            }
        }
    };
    let group_id = ctx.group_id();
    let group = arm
        .get(&group_id)
        .await
        .map_err(|e| e.into_actuator("reading the resource group"))?;
    let group_owned = group.as_ref().is_some_and(|g| ctx.naming.owns(&g["tags"]));
    let vnet_elsewhere = !ResourceId::resource_group(
        &ctx.subscription,
        &ctx.naming.vnet_resource_group(&ctx.cluster),
    )
    .same(&group_id);
    if group.is_some() && !group_owned || vnet_elsewhere {
        // Each of the cluster's resources, in reverse.
        let lb = ctx.load_balancer_id();
        note(
            "load balancer",
            &lb,
            remove(arm, Some(&ctx.naming), &lb).await,
        )?;
        let pip = ctx.public_ip_id();
        note(
            "public IP address",
            &pip,
            remove(arm, Some(&ctx.naming), &pip).await,
        )?;
        let vnet_id = ctx.vnet_id();
        let vnet = arm
            .get(&vnet_id)
            .await
            .map_err(|e| e.into_actuator("reading the virtual network"))?;
        let vnet_owned = vnet.as_ref().is_some_and(|v| ctx.naming.owns(&v["tags"]));
        if vnet_owned {
            let mut subnets_gone = true;
            for role in SubnetRole::ALL {
                let id = ctx.subnet_id(role);
                subnets_gone &= note("subnet", &id, remove(arm, None, &id).await)?;
            }
            if subnets_gone {
                note(
                    "virtual network",
                    &vnet_id,
                    remove(arm, Some(&ctx.naming), &vnet_id).await,
                )?;
                // Free of its subnet, the NAT gateway, then its address.
                let nat = ctx.nat_gateway_id();
                if note(
                    "NAT gateway",
                    &nat,
                    remove(arm, Some(&ctx.naming), &nat).await,
                )? {
                    let nat_ip = ctx.nat_gateway_ip_id();
                    note(
                        "public IP address",
                        &nat_ip,
                        remove(arm, Some(&ctx.naming), &nat_ip).await,
                    )?;
                }
            }
        }
        for role in SubnetRole::ALL {
            let id = ctx.security_group_id(role);
            note(
                "network security group",
                &id,
                remove(arm, Some(&ctx.naming), &id).await,
            )?;
        }
    }
    if group_owned {
        note(
            "resource group",
            &group_id,
            remove(arm, Some(&ctx.naming), &group_id).await,
        )?;
    }
    if left.is_empty() {
        return Ok(());
    }
    Err(ActuatorError::requeue_after(
        TEARDOWN_RETRY,
        "DeletingInfrastructure",
        format!("still deleting: {}", left.join("; ")),
    ))
}

#[cfg(test)]
mod tests;
