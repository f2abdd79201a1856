//! The `AWSCluster` actuator: a cluster's network, security groups and API server load balancer,
//! made in CAPA's order and taken down in reverse.
//!
//! - `network`: the VPC (created, or an existing one by ID), a public and a
//!   private subnet per availability zone (planned from the VPC's range, or as the spec lists
//!   them), the internet gateway, a NAT gateway with an elastic address per zone, a route table
//!   per subnet;
//! - `security_groups`: one group per role (`apiserver-lb`, `lb`,
//!   `controlplane`, `node`, or the spec's overrides) with their ingress rules converged —
//!   missing rules added, rules nobody asked for removed;
//! - `load_balancer`: a network load balancer in the public (or private)
//!   subnets, a TCP target group on the API server port and a listener; its DNS name is the
//!   cluster's endpoint;
//! - `teardown`: deletion in reverse that keeps going past individual failures,
//!   deals with what makes EC2 answer `DependencyViolation` (load balancers the cloud provider
//!   made for Services, detached network interfaces, security groups referencing each other) and
//!   reports what is still left and why.
//!
//! Everything is found again by its tags (CAPA's ownership and role tags and
//! `capi-rs.dev/cluster=<namespace>/<name>`), never only by IDs recorded in the status: a
//! resource made by an attempt whose answer was lost is adopted by the next, and found by the
//! teardown. Only what carries both ownership tags is ever changed or deleted; an existing VPC,
//! subnets or security groups named in the spec are used, never modified.

mod load_balancer;
mod network;
mod security_groups;
mod teardown;

use std::sync::Arc;

use async_trait::async_trait;
use capi_core::api::FailureDomain;
use capi_core::condition::{ConditionStatus, DesiredCondition};
use capi_core::{
    ActuatorError, ClusterActuator, ClusterInfrastructure, ClusterScope, ProviderStatus,
};
use kube::ResourceExt;
use serde::Serialize;

use crate::api::{AWSCluster, Filter, NetworkStatus, Tags};
use crate::cloud::{Clients, CloudError};
use crate::connector::Connector;
use crate::naming::{ClusterNaming, Role};

pub use network::{DEFAULT_AZ_USAGE_LIMIT, DEFAULT_VPC_CIDR};
pub use teardown::TEARDOWN_RETRY;

/// The port the API server listens on, and the load balancer's listener, when the `Cluster`
/// does not say.
pub const DEFAULT_API_SERVER_PORT: u16 = 6443;

/// The port the `Cluster`'s API server listens on (`spec.clusterNetwork.apiServerPort`, else
/// [`DEFAULT_API_SERVER_PORT`]): the load balancer's listener and target port.
pub fn api_server_port(cluster: &capi_core::api::Cluster) -> u16 {
    cluster
        .spec
        .cluster_network
        .as_ref()
        .and_then(|n| n.api_server_port)
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(DEFAULT_API_SERVER_PORT)
}

/// Reconciles `AWSCluster`s through a [`Connector`].
pub struct AwsClusterActuator {
    connector: Arc<dyn Connector>,
}

impl AwsClusterActuator {
    /// An actuator using `connector` for clients.
    pub fn new(connector: Arc<dyn Connector>) -> Self {
        Self { connector }
    }

    async fn context(&self, scope: &ClusterScope<AWSCluster>) -> Result<Ctx, ActuatorError> {
        let infra = Arc::clone(&scope.infra_cluster);
        let namespace = infra.namespace().unwrap_or_default();
        let name = scope
            .cluster
            .metadata
            .name
            .clone()
            .or_else(|| infra.labels().get(capi_core::labels::CLUSTER_NAME).cloned())
            .unwrap_or_else(|| infra.name_any());
        let clients = self.connector.connect(&infra).await?;
        let api_server_port = api_server_port(&scope.cluster);
        Ok(Ctx {
            clients,
            naming: ClusterNaming::new(&namespace, &name),
            additional: infra.spec.additional_tags.clone(),
            cluster: infra,
            name,
            api_server_port,
        })
    }
}

/// One reconcile of one cluster.
pub(crate) struct Ctx {
    pub(crate) clients: Clients,
    pub(crate) cluster: Arc<AWSCluster>,
    pub(crate) naming: ClusterNaming,
    /// The `Cluster`'s name.
    pub(crate) name: String,
    pub(crate) additional: Tags,
    pub(crate) api_server_port: u16,
}

impl Ctx {
    /// Filters matching what this cluster owns.
    pub(crate) fn owned(&self) -> Vec<Filter> {
        self.naming
            .ownership()
            .into_iter()
            .map(|(key, value)| Filter {
                name: format!("tag:{key}"),
                values: vec![value],
            })
            .collect()
    }

    /// [`Self::owned`] and more.
    pub(crate) fn owned_and(&self, more: &[(&str, &str)]) -> Vec<Filter> {
        let mut filters = self.owned();
        filters.extend(more.iter().map(|(name, value)| Filter {
            name: (*name).to_string(),
            values: vec![(*value).to_string()],
        }));
        filters
    }

    /// The tags of a resource of this cluster with `role` and `name`.
    pub(crate) fn tags(&self, role: Role, name: &str) -> Tags {
        self.naming.tags(role, name, &self.additional)
    }

    /// Whether `tags` mark a resource as this cluster's.
    pub(crate) fn owns(&self, tags: &Tags) -> bool {
        self.naming
            .owns(tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// The actuator's answer to a cloud error, sanitised.
    pub(crate) fn error(&self, error: CloudError) -> ActuatorError {
        self.clients.error(error)
    }
}

/// What one part of the infrastructure reports.
pub(crate) enum Progress {
    /// Done.
    Ready,
    /// Made, but waiting for AWS (a NAT gateway or load balancer still provisioning); the
    /// message says what.
    Waiting(String),
}

fn condition(type_: &str, progress: &Progress, ready_reason: &str) -> DesiredCondition {
    match progress {
        Progress::Ready => DesiredCondition::new(type_, ConditionStatus::True, ready_reason),
        Progress::Waiting(message) => {
            DesiredCondition::new(type_, ConditionStatus::False, "Provisioning").message(message)
        }
    }
}

/// What the provider reports in `AWSCluster.status` beyond the contract.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterStatus<'a> {
    network_status: &'a NetworkStatus,
}

/// The cluster's failure domains: the zones of its subnets (where machines are placed: private
/// subnets, or public ones when there are no private ones).
fn failure_domains(status: &NetworkStatus) -> Vec<FailureDomain> {
    let private = status.subnets.iter().any(|s| !s.is_public);
    let mut zones: Vec<String> = status
        .subnets
        .iter()
        .filter(|s| s.is_public != private)
        .map(|s| s.availability_zone.clone())
        .collect();
    zones.sort();
    zones.dedup();
    zones
        .into_iter()
        .map(|name| FailureDomain {
            name,
            control_plane: Some(true),
            attributes: Default::default(),
        })
        .collect()
}

#[async_trait]
impl ClusterActuator<AWSCluster> for AwsClusterActuator {
    async fn reconcile(
        &self,
        scope: &ClusterScope<AWSCluster>,
    ) -> Result<ClusterInfrastructure, ActuatorError> {
        let ctx = self.context(scope).await?;
        let mut status = NetworkStatus::default();
        let network = network::reconcile(&ctx, &mut status).await?;
        security_groups::reconcile(&ctx, &mut status).await?;
        let (endpoint, balancer) = load_balancer::reconcile(&ctx, &mut status).await?;
        let conditions = vec![
            condition("NetworkInfrastructureReady", &network, "NetworkReady"),
            DesiredCondition::new(
                "ClusterSecurityGroupsReady",
                ConditionStatus::True,
                "SecurityGroupsReady",
            ),
            condition("LoadBalancerReady", &balancer, "LoadBalancerReady"),
        ];
        let provisioned = matches!(network, Progress::Ready)
            && matches!(balancer, Progress::Ready)
            && endpoint.is_some();
        let provider_status = ProviderStatus::from_typed(&ClusterStatus {
            network_status: &status,
        })
        .map_err(|e| ActuatorError::transient("ProviderStatusInvalid", e))?;
        Ok(ClusterInfrastructure {
            control_plane_endpoint: endpoint,
            failure_domains: failure_domains(&status),
            provisioned,
            provider_status,
            conditions,
        })
    }

    async fn delete(&self, scope: &ClusterScope<AWSCluster>) -> Result<(), ActuatorError> {
        let ctx = self.context(scope).await?;
        teardown::run(&ctx).await
    }
}

#[cfg(test)]
mod tests;
