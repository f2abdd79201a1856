//! The `OpenStackCluster` actuator: network → subnet → router → security groups → API server load
//! balancer → floating IP, in CAPO's order; deletion in reverse.
//!
//! Nothing is recorded between steps: every resource has a deterministic name (see
//! [`crate::naming`]) and carries the cluster's description and tag, so a reconcile after a crash
//! finds what an earlier one created, and deletion finds everything even if status was never
//! written. Octavia refuses changes while a load balancer is `PENDING_*`; each change waits for
//! `ACTIVE` (a `RequeueAfter`, not an error).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::api::{ApiEndpoint, Cluster, FailureDomain};
use capi_core::{
    ActuatorError, ClusterActuator, ClusterInfrastructure, ClusterScope, ProviderStatus,
};
use kube::ResourceExt;

use crate::api::{LoadBalancerStatus, NetworkParam, OpenStackCluster, ResourceStatus, SubnetParam};
use crate::cloud::{
    CloudResult, FloatingIp, LoadBalancer, Network, NeutronResource, SecurityGroup,
    SecurityGroupRule, Subnet,
};
use crate::connector::{Clients, Connector, actuator_error};
use crate::naming::ClusterNames;
use crate::resolve::{self, by_name};

/// How long to wait before looking at a load balancer in `PENDING_*` again.
const LB_POLL: Duration = Duration::from_secs(2);
/// How long to wait before retrying a deletion step the cloud is still busy with.
const DELETE_POLL: Duration = Duration::from_secs(3);

/// Reconciles `OpenStackCluster`s through a [`Connector`].
pub struct OpenStackClusterActuator {
    connector: Arc<dyn Connector>,
}

impl OpenStackClusterActuator {
    /// An actuator using `connector` for credentials.
    pub fn new(connector: Arc<dyn Connector>) -> Self {
        Self { connector }
    }
}

/// The namespace and Cluster name an `OpenStackCluster` belongs to (its `cluster-name` label, the
/// owning Cluster's name, or its own name).
pub(crate) fn cluster_identity(scope: &ClusterScope<OpenStackCluster>) -> (String, String) {
    let infra = &scope.infra_cluster;
    let namespace = infra.namespace().unwrap_or_default();
    let name = infra
        .labels()
        .get(capi_core::labels::CLUSTER_NAME)
        .cloned()
        .or_else(|| scope.cluster.metadata.name.clone())
        .unwrap_or_else(|| infra.name_any());
    (namespace, name)
}

#[async_trait]
impl ClusterActuator<OpenStackCluster> for OpenStackClusterActuator {
    async fn reconcile(
        &self,
        scope: &ClusterScope<OpenStackCluster>,
    ) -> Result<ClusterInfrastructure, ActuatorError> {
        let infra = self.infra(scope).await?;
        let external = infra.external_network().await?;
        let mut resources = ClusterResources {
            external_network: external.as_ref().map(|n| resource(&n.id, &n.name)),
            ..ClusterResources::default()
        };
        let subnet = infra.network(external.as_ref(), &mut resources).await?;
        infra.security_groups(&mut resources).await?;
        let host = infra
            .api_endpoint_host(&subnet, external.as_ref(), &mut resources)
            .await?;
        let failure_domains = scope
            .infra_cluster
            .spec
            .control_plane_availability_zones
            .iter()
            .map(|zone| FailureDomain {
                name: zone.clone(),
                control_plane: Some(true),
                attributes: Default::default(),
            })
            .collect();
        Ok(ClusterInfrastructure {
            control_plane_endpoint: Some(ApiEndpoint {
                host,
                port: i32::from(infra.api_port),
            }),
            failure_domains,
            provisioned: true,
            provider_status: ProviderStatus::from_typed(&resources)
                .map_err(|e| ActuatorError::transient("ProviderStatusInvalid", e))?,
            conditions: Vec::new(),
        })
    }

    async fn delete(&self, scope: &ClusterScope<OpenStackCluster>) -> Result<(), ActuatorError> {
        self.infra(scope).await?.delete().await
    }
}

impl OpenStackClusterActuator {
    async fn infra(&self, scope: &ClusterScope<OpenStackCluster>) -> Result<Infra, ActuatorError> {
        let (namespace, name) = cluster_identity(scope);
        let clients = self
            .connector
            .connect(&namespace, &scope.infra_cluster.spec.identity_ref)
            .await?;
        Ok(Infra {
            clients,
            names: ClusterNames::new(&namespace, &name),
            api_port: api_server_port(&scope.infra_cluster, &scope.cluster),
            cluster: scope.infra_cluster.clone(),
        })
    }
}

/// The API server's port, the same for the endpoint, the listener and the pool members:
/// `spec.apiServer.port`, else the Cluster's `clusterNetwork.apiServerPort`, else 6443.
pub(crate) fn api_server_port(infra: &OpenStackCluster, cluster: &Cluster) -> u16 {
    infra
        .spec
        .api_server
        .as_ref()
        .and_then(|a| a.port)
        .or_else(|| {
            cluster
                .spec
                .cluster_network
                .as_ref()
                .and_then(|n| n.api_server_port)
        })
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(6443)
}

/// One reconcile of one cluster.
struct Infra {
    clients: Clients,
    names: ClusterNames,
    cluster: Arc<OpenStackCluster>,
    api_port: u16,
}

impl Infra {
    /// The external network: the one the spec names, else the cloud's only external network, else
    /// none (no router gateway, no floating IPs).
    async fn external_network(&self) -> Result<Option<Network>, ActuatorError> {
        let net = &self.clients.network;
        if let Some(param) = &self.cluster.spec.external_network {
            return resolve::network(net.as_ref(), param, "spec.externalNetwork")
                .await
                .map(Some);
        }
        let external = net
            .networks(&[("router:external".into(), "true".into())])
            .await
            .map_err(|e| actuator_error("listing external networks", e))?;
        match external.len() {
            0 | 1 => Ok(external.into_iter().next()),
            n => Err(ActuatorError::invalid_configuration(
                "ExternalNetworkAmbiguous",
                format!(
                    "the cloud has {n} external networks ({}); choose one with spec.externalNetwork",
                    external
                        .iter()
                        .map(|n| n.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// The cluster's subnet: the managed network, subnet and router (created if missing), or the
    /// existing network the spec names; recorded in `resources`.
    async fn network(
        &self,
        external: Option<&Network>,
        resources: &mut ClusterResources,
    ) -> Result<Subnet, ActuatorError> {
        let spec = &self.cluster.spec;
        if let Some(param) = &spec.network {
            return self.existing_network(param, &spec.subnets, resources).await;
        }
        let Some(first) = spec.managed_subnets.first() else {
            return Err(ActuatorError::invalid_configuration(
                "NoNetwork",
                "set spec.managedSubnets (the provider creates the network) or spec.network (an existing one)",
            ));
        };
        let net = &self.clients.network;
        let network = self
            .found_or_created(
                "the cluster network",
                net.networks(&by_name(&self.names.network())).await,
                net.create_network(&self.names.network(), &self.names.description),
            )
            .await?;
        resources.network = Some(resource(&network.id, &network.name));
        let subnet_name = self.names.subnet(0);
        let subnet = self
            .found_or_created(
                "the cluster subnet",
                net.subnets(&[
                    ("name".into(), subnet_name.clone()),
                    ("network_id".into(), network.id.clone()),
                ])
                .await,
                net.create_subnet(
                    &network.id,
                    &subnet_name,
                    &first.cidr,
                    &first.dns_nameservers,
                    &self.names.description,
                ),
            )
            .await?;
        resources.subnets = vec![resource(&subnet.id, &subnet.name)];
        if let Some(external) = external {
            let router = self
                .found_or_created(
                    "the cluster router",
                    net.routers(&by_name(&self.names.router())).await,
                    net.create_router(
                        &self.names.router(),
                        Some(external.id.clone()),
                        &self.names.description,
                    ),
                )
                .await?;
            resources.router = Some(resource(&router.id, &router.name));
            let interfaces = net
                .ports(&[
                    ("device_id".into(), router.id.clone()),
                    ("network_id".into(), network.id.clone()),
                ])
                .await
                .map_err(|e| actuator_error("listing the router's interfaces", e))?;
            if interfaces.is_empty() {
                net.add_router_interface(&router.id, &subnet.id)
                    .await
                    .map_err(|e| actuator_error("attaching the subnet to the router", e))?;
            }
        }
        Ok(subnet)
    }

    async fn existing_network(
        &self,
        param: &NetworkParam,
        subnets: &[SubnetParam],
        resources: &mut ClusterResources,
    ) -> Result<Subnet, ActuatorError> {
        let net = self.clients.network.as_ref();
        let network = resolve::network(net, param, "spec.network").await?;
        resources.network = Some(resource(&network.id, &network.name));
        if let Some(subnet) = subnets.first() {
            let subnet = resolve::subnet(net, subnet, Some(&network.id), "spec.subnets[0]").await?;
            resources.subnets = vec![resource(&subnet.id, &subnet.name)];
            return Ok(subnet);
        }
        let mut found = net
            .subnets(&[("network_id".into(), network.id.clone())])
            .await
            .map_err(|e| actuator_error("listing the network's subnets", e))?;
        if found.len() != 1 {
            return Err(ActuatorError::invalid_configuration(
                "SubnetAmbiguous",
                format!(
                    "network {} has {} subnets; name one in spec.subnets",
                    network.name,
                    found.len()
                ),
            ));
        }
        let subnet = found.remove(0);
        resources.subnets = vec![resource(&subnet.id, &subnet.name)];
        Ok(subnet)
    }

    /// The two managed security groups and their rules (missing rules added, stray ingress rules
    /// removed).
    async fn security_groups(&self, resources: &mut ClusterResources) -> Result<(), ActuatorError> {
        let Some(managed) = &self.cluster.spec.managed_security_groups else {
            return Ok(());
        };
        let control_plane = self.ensure_group(&self.names.control_plane_group()).await?;
        let worker = self.ensure_group(&self.names.worker_group()).await?;
        resources.control_plane_security_group =
            Some(resource(&control_plane.id, &control_plane.name));
        resources.worker_security_group = Some(resource(&worker.id, &worker.name));
        let (cp_rules, worker_rules) = desired_rules(
            &control_plane.id,
            &worker.id,
            managed.allow_all_in_cluster_traffic,
        );
        self.converge_rules(&control_plane, &cp_rules).await?;
        self.converge_rules(&worker, &worker_rules).await
    }

    async fn ensure_group(&self, name: &str) -> Result<SecurityGroup, ActuatorError> {
        let net = &self.clients.network;
        self.found_or_created(
            "a cluster security group",
            net.security_groups(&by_name(name)).await,
            net.create_security_group(name, &self.names.description),
        )
        .await
    }

    /// The first of `found` that carries this cluster's description, else what `create` makes
    /// (it runs only then), tagged with the cluster so that deletion and the leftover checks
    /// find it. One of the name that is another's (names of two clusters can coincide, as
    /// `capi-rs-team-a-prod` for `team-a/prod` and `team/a-prod`) is never adopted: an
    /// `InvalidConfiguration`.
    async fn found_or_created<T: NeutronResource>(
        &self,
        what: &str,
        found: CloudResult<Vec<T>>,
        create: impl Future<Output = CloudResult<T>>,
    ) -> Result<T, ActuatorError> {
        let found = found.map_err(|e| actuator_error(&format!("finding {what}"), e))?;
        let (ours, others): (Vec<T>, Vec<T>) = found
            .into_iter()
            .partition(|r| r.description() == self.names.description);
        if let Some(existing) = ours.into_iter().next() {
            return Ok(existing);
        }
        if let Some(other) = others.first() {
            return Err(name_taken(what, other.id()));
        }
        let created = create
            .await
            .map_err(|e| actuator_error(&format!("creating {what}"), e))?;
        self.clients
            .network
            .set_tags(T::COLLECTION, created.id(), &[self.names.tag()])
            .await
            .map_err(|e| actuator_error(&format!("tagging {what}"), e))?;
        Ok(created)
    }

    async fn converge_rules(
        &self,
        group: &SecurityGroup,
        desired: &[SecurityGroupRule],
    ) -> Result<(), ActuatorError> {
        let net = &self.clients.network;
        for rule in desired {
            if !group.security_group_rules.contains(rule) {
                net.create_security_group_rule(&group.id, rule)
                    .await
                    .map_err(|e| actuator_error("adding a security group rule", e))?;
            }
        }
        for rule in &group.security_group_rules {
            if rule.direction == "ingress" && !desired.contains(rule) {
                net.delete_security_group_rule(&rule.id)
                    .await
                    .map_err(|e| actuator_error("removing a stray security group rule", e))?;
            }
        }
        Ok(())
    }

    /// The API server's address: the load balancer's floating IP or VIP, or the fixed endpoint.
    async fn api_endpoint_host(
        &self,
        subnet: &Subnet,
        external: Option<&Network>,
        resources: &mut ClusterResources,
    ) -> Result<String, ActuatorError> {
        let spec = &self.cluster.spec;
        let api = spec.api_server.clone().unwrap_or_default();
        let managed = api.managed_load_balancer.clone().unwrap_or_default();
        if !managed.enabled {
            if let Some(endpoint) = &spec.control_plane_endpoint
                && !endpoint.host.is_empty()
            {
                return Ok(endpoint.host.clone());
            }
            return api.fixed_ip.clone().ok_or_else(|| {
                ActuatorError::invalid_configuration(
                    "NoAPIServerEndpoint",
                    "without spec.apiServer.managedLoadBalancer.enabled, set spec.controlPlaneEndpoint \
                     or spec.apiServer.fixedIP",
                )
            });
        }
        let lb = self.load_balancer(subnet, &managed).await?;
        let mut status = LoadBalancerStatus {
            id: lb.id.clone(),
            name: lb.name.clone(),
            ip: Some(lb.vip_address.clone()),
            internal_ip: Some(lb.vip_address.clone()),
            floating_ip_id: None,
        };
        let floating = api.enable_floating_ip.unwrap_or(true) && external.is_some();
        let host = match (floating, external) {
            (true, Some(external)) => {
                let fip = self.api_floating_ip(&lb, external).await?;
                status.ip = Some(fip.floating_ip_address.clone());
                status.floating_ip_id = Some(fip.id);
                fip.floating_ip_address
            }
            _ => lb.vip_address,
        };
        resources.api_server_load_balancer = Some(status);
        Ok(host)
    }

    /// The load balancer, listener, pool and monitor; `RequeueAfter` while Octavia is busy.
    async fn load_balancer(
        &self,
        subnet: &Subnet,
        managed: &crate::api::ApiServerLoadBalancer,
    ) -> Result<LoadBalancer, ActuatorError> {
        let octavia = &self.clients.load_balancer;
        let name = self.names.load_balancer();
        let (ours, others): (Vec<LoadBalancer>, Vec<LoadBalancer>) = octavia
            .load_balancers_named(&name)
            .await
            .map_err(|e| actuator_error("finding the API server load balancer", e))?
            .into_iter()
            .partition(|lb| lb.description == self.names.description);
        let lb = match ours.into_iter().next() {
            Some(lb) => lb,
            None if !others.is_empty() => {
                return Err(name_taken("the API server load balancer", &others[0].id));
            }
            None => {
                octavia
                    .create_load_balancer(
                        &name,
                        &subnet.id,
                        managed.provider.clone(),
                        &[self.names.tag()],
                        &self.names.description,
                    )
                    .await
                    .map_err(|e| actuator_error("creating the API server load balancer", e))?;
                return Err(wait_for_lb(&name, "PENDING_CREATE"));
            }
        };
        ensure_active(&lb)?;
        let listeners = octavia
            .listeners(&lb.id)
            .await
            .map_err(|e| actuator_error("listing the load balancer's listeners", e))?;
        let Some(listener) = listeners.into_iter().find(|l| l.name == name) else {
            octavia
                .create_listener(&lb.id, &name, self.api_port, &managed.allowed_cidrs)
                .await
                .map_err(|e| actuator_error("creating the API server listener", e))?;
            return Err(wait_for_lb(&name, "PENDING_UPDATE"));
        };
        let pools = octavia
            .pools(&lb.id)
            .await
            .map_err(|e| actuator_error("listing the load balancer's pools", e))?;
        let Some(pool) = pools.into_iter().find(|p| p.name == name) else {
            octavia
                .create_pool(&listener.id, &name)
                .await
                .map_err(|e| actuator_error("creating the API server pool", e))?;
            return Err(wait_for_lb(&name, "PENDING_UPDATE"));
        };
        let monitors = octavia
            .monitors(&pool.id)
            .await
            .map_err(|e| actuator_error("listing the pool's health monitors", e))?;
        if monitors.is_empty() {
            octavia
                .create_monitor(&pool.id, &name)
                .await
                .map_err(|e| actuator_error("creating the API server health monitor", e))?;
            return Err(wait_for_lb(&name, "PENDING_UPDATE"));
        }
        Ok(lb)
    }

    /// The floating IP in front of the load balancer's VIP (the given address or an allocated
    /// one), found again by its description.
    async fn api_floating_ip(
        &self,
        lb: &LoadBalancer,
        external: &Network,
    ) -> Result<FloatingIp, ActuatorError> {
        let net = &self.clients.network;
        let description = self.names.api_floating_ip_description();
        let wanted = self
            .cluster
            .spec
            .api_server
            .as_ref()
            .and_then(|a| a.floating_ip.clone());
        let query = match &wanted {
            Some(address) => vec![("floating_ip_address".to_string(), address.clone())],
            None => vec![("description".to_string(), description.clone())],
        };
        let found = net
            .floating_ips(&query)
            .await
            .map_err(|e| actuator_error("finding the API server floating IP", e))?
            .into_iter()
            .next();
        let fip = match found {
            Some(fip) => fip,
            None => net
                .create_floating_ip(&external.id, wanted, None, &description)
                .await
                .map_err(|e| actuator_error("allocating the API server floating IP", e))?,
        };
        if let Some(vip_port) = &lb.vip_port_id
            && fip.port_id.as_deref() != Some(vip_port.as_str())
        {
            net.associate_floating_ip(&fip.id, Some(vip_port.clone()))
                .await
                .map_err(|e| {
                    actuator_error("associating the floating IP with the load balancer VIP", e)
                })?;
        }
        Ok(fip)
    }

    /// Everything in reverse order; keeps going past busy resources and reports what is left.
    async fn delete(&self) -> Result<(), ActuatorError> {
        let tag = self.names.tag();
        let servers = self
            .clients
            .compute
            .servers_tagged(&tag)
            .await
            .map_err(|e| actuator_error("listing the cluster's servers", e))?;
        if !servers.is_empty() {
            return Err(ActuatorError::requeue_after(
                DELETE_POLL,
                "WaitingForMachines",
                format!(
                    "{} server(s) of the cluster still exist ({}); machines are deleted first",
                    servers.len(),
                    servers
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let mut left: Vec<String> = Vec::new();
        self.delete_load_balancer(&mut left).await?;
        self.delete_floating_ips().await?;
        let net = &self.clients.network;
        let networks = net
            .networks(&by_name(&self.names.network()))
            .await
            .map_err(|e| actuator_error("finding the cluster network", e))?
            .into_iter()
            .filter(|n| self.ours_network(n))
            .collect::<Vec<_>>();
        // Ports left behind on the managed network (CAPO's users know them for blocking deletes).
        for network in &networks {
            let ports = net
                .ports(&[("network_id".into(), network.id.clone())])
                .await
                .map_err(|e| actuator_error("listing leftover ports", e))?;
            for port in ports
                .iter()
                .filter(|p| !p.device_owner.starts_with("network:"))
            {
                net.delete_port(&port.id)
                    .await
                    .map_err(|e| actuator_error("deleting a leftover port", e))?;
            }
        }
        self.delete_security_groups(&mut left).await?;
        for router in net
            .routers(&by_name(&self.names.router()))
            .await
            .map_err(|e| actuator_error("finding the cluster router", e))?
            .into_iter()
            .filter(|r| r.description == self.names.description)
        {
            for network in &networks {
                for subnet in &network.subnets {
                    net.remove_router_interface(&router.id, subnet)
                        .await
                        .map_err(|e| actuator_error("detaching the subnet from the router", e))?;
                }
            }
            if let Err(e) = net.delete_router(&router.id).await {
                left.push(format!("router {} ({e})", router.name));
            }
        }
        for network in &networks {
            for subnet in &network.subnets {
                if let Err(e) = net.delete_subnet(subnet).await {
                    left.push(format!("subnet {subnet} ({e})"));
                }
            }
            if let Err(e) = net.delete_network(&network.id).await {
                left.push(format!("network {} ({e})", network.name));
            }
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(ActuatorError::requeue_after(
                DELETE_POLL,
                "DeletingInfrastructure",
                format!("still deleting: {}", left.join("; ")),
            ))
        }
    }

    fn ours_network(&self, network: &Network) -> bool {
        network.tags.contains(&self.names.tag()) && network.description == self.names.description
    }

    async fn delete_load_balancer(&self, left: &mut Vec<String>) -> Result<(), ActuatorError> {
        let octavia = &self.clients.load_balancer;
        for lb in octavia
            .load_balancers_named(&self.names.load_balancer())
            .await
            .map_err(|e| actuator_error("finding the API server load balancer", e))?
            .into_iter()
            .filter(|lb| lb.description == self.names.description)
        {
            if lb.provisioning_status.starts_with("PENDING_") {
                left.push(format!(
                    "load balancer {} ({})",
                    lb.name, lb.provisioning_status
                ));
                continue;
            }
            match octavia.delete_load_balancer(&lb.id).await {
                Ok(()) => left.push(format!("load balancer {} (PENDING_DELETE)", lb.name)),
                Err(e) => left.push(format!("load balancer {} ({e})", lb.name)),
            }
        }
        if !left.is_empty() {
            // Subnets and ports cannot go while the load balancer's VIP uses them.
            return Err(ActuatorError::requeue_after(
                DELETE_POLL,
                "DeletingLoadBalancer",
                format!("still deleting: {}", left.join("; ")),
            ));
        }
        Ok(())
    }

    async fn delete_floating_ips(&self) -> Result<(), ActuatorError> {
        let net = &self.clients.network;
        let description = self.names.api_floating_ip_description();
        for fip in net
            .floating_ips(&[("description".into(), description)])
            .await
            .map_err(|e| actuator_error("finding the API server floating IP", e))?
        {
            // An address the user brought (spec.apiServer.floatingIP) is only disassociated.
            let brought = self
                .cluster
                .spec
                .api_server
                .as_ref()
                .and_then(|a| a.floating_ip.as_deref())
                == Some(fip.floating_ip_address.as_str());
            let result = if brought {
                net.associate_floating_ip(&fip.id, None).await
            } else {
                net.delete_floating_ip(&fip.id).await
            };
            result.map_err(|e| actuator_error("releasing the API server floating IP", e))?;
        }
        Ok(())
    }

    async fn delete_security_groups(&self, left: &mut Vec<String>) -> Result<(), ActuatorError> {
        let net = &self.clients.network;
        let mut groups = Vec::new();
        for name in [self.names.control_plane_group(), self.names.worker_group()] {
            groups.extend(
                net.security_groups(&by_name(&name))
                    .await
                    .map_err(|e| actuator_error("finding the cluster security groups", e))?
                    .into_iter()
                    .filter(|g| g.description == self.names.description),
            );
        }
        // Rules referring to the other group go first, so neither group is "in use" by the other.
        for group in &groups {
            for rule in group
                .security_group_rules
                .iter()
                .filter(|r| r.remote_group_id.is_some())
            {
                net.delete_security_group_rule(&rule.id)
                    .await
                    .map_err(|e| actuator_error("removing a security group rule", e))?;
            }
        }
        for group in &groups {
            if let Err(e) = net.delete_security_group(&group.id).await {
                left.push(format!("security group {} ({e})", group.name));
            }
        }
        Ok(())
    }
}

fn wait_for_lb(name: &str, state: &str) -> ActuatorError {
    ActuatorError::requeue_after(
        LB_POLL,
        "WaitingForLoadBalancer",
        format!("load balancer {name} is {state}"),
    )
}

/// The cloud's resources of a cluster, as `OpenStackCluster.status` reports them (the provider's
/// own status fields: [`crate::api::OpenStackClusterStatus`] without the contract's).
#[derive(Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterResources {
    #[serde(skip_serializing_if = "Option::is_none")]
    network: Option<ResourceStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    subnets: Vec<ResourceStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    router: Option<ResourceStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    external_network: Option<ResourceStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_server_load_balancer: Option<LoadBalancerStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    control_plane_security_group: Option<ResourceStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_security_group: Option<ResourceStatus>,
}

fn resource(id: &str, name: &str) -> ResourceStatus {
    ResourceStatus {
        id: id.to_string(),
        name: name.to_string(),
    }
}

fn ensure_active(lb: &LoadBalancer) -> Result<(), ActuatorError> {
    match lb.provisioning_status.as_str() {
        "ACTIVE" => Ok(()),
        "ERROR" => Err(ActuatorError::transient_message(
            "LoadBalancerError",
            format!(
                "load balancer {} is in ERROR; delete it in Octavia to have it recreated",
                lb.name
            ),
        )),
        other => Err(wait_for_lb(&lb.name, other)),
    }
}

/// The rules of the control-plane and worker groups.
pub(crate) fn desired_rules(
    control_plane: &str,
    worker: &str,
    allow_all_in_cluster: bool,
) -> (Vec<SecurityGroupRule>, Vec<SecurityGroupRule>) {
    let tcp =
        |min: u16, max: u16, remote_ip: Option<&str>, remote_group: Option<&str>, what: &str| {
            SecurityGroupRule {
                direction: "ingress".into(),
                ethertype: "IPv4".into(),
                protocol: Some("tcp".into()),
                port_range_min: Some(min),
                port_range_max: Some(max),
                remote_ip_prefix: remote_ip.map(str::to_string),
                remote_group_id: remote_group.map(str::to_string),
                description: Some(what.into()),
                ..SecurityGroupRule::default()
            }
        };
    let any_from = |group: &str, what: &str| SecurityGroupRule {
        direction: "ingress".into(),
        ethertype: "IPv4".into(),
        remote_group_id: Some(group.to_string()),
        description: Some(what.into()),
        ..SecurityGroupRule::default()
    };
    let ipip_from = |group: &str| SecurityGroupRule {
        direction: "ingress".into(),
        ethertype: "IPv4".into(),
        protocol: Some("4".into()),
        remote_group_id: Some(group.to_string()),
        description: Some("CNI IP-in-IP".into()),
        ..SecurityGroupRule::default()
    };
    let egress = |ethertype: &str| SecurityGroupRule {
        direction: "egress".into(),
        ethertype: ethertype.into(),
        ..SecurityGroupRule::default()
    };
    let mut cp = vec![
        egress("IPv4"),
        egress("IPv6"),
        tcp(6443, 6443, Some("0.0.0.0/0"), None, "Kubernetes API"),
    ];
    let mut w = vec![
        egress("IPv4"),
        egress("IPv6"),
        tcp(30000, 32767, Some("0.0.0.0/0"), None, "NodePort services"),
    ];
    if allow_all_in_cluster {
        for rules in [&mut cp, &mut w] {
            rules.push(any_from(control_plane, "in-cluster traffic"));
            rules.push(any_from(worker, "in-cluster traffic"));
        }
    } else {
        cp.push(tcp(2379, 2380, None, Some(control_plane), "etcd"));
        for rules in [&mut cp, &mut w] {
            for group in [control_plane, worker] {
                rules.push(tcp(10250, 10250, None, Some(group), "kubelet"));
                rules.push(tcp(179, 179, None, Some(group), "CNI BGP"));
                rules.push(ipip_from(group));
            }
        }
    }
    (cp, w)
}

/// A resource of this cluster's name that another made (its description names another owner).
fn name_taken(what: &str, id: &str) -> ActuatorError {
    ActuatorError::invalid_configuration(
        "NameTaken",
        format!(
            "{what} has this cluster's name but was not made for it ({id}); it is left untouched: \
             rename or delete it"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::{
        FloatingIp, MockCompute, MockImages, MockLoadBalancing, MockNetworking, Named,
    };
    use crate::connector::MockConnector;
    use capi_core::api::Cluster;

    fn scope(spec: serde_json::Value) -> ClusterScope<OpenStackCluster> {
        let infra: OpenStackCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackCluster",
            "metadata": {"name": "demo", "namespace": "ns"}, "spec": spec,
        }))
        .unwrap();
        ClusterScope {
            cluster: Arc::new(Cluster::default()),
            infra_cluster: Arc::new(infra),
        }
    }

    fn actuator(network: MockNetworking, lb: MockLoadBalancing) -> OpenStackClusterActuator {
        actuator_with(MockCompute::new(), network, lb)
    }

    fn actuator_with(
        compute: MockCompute,
        network: MockNetworking,
        lb: MockLoadBalancing,
    ) -> OpenStackClusterActuator {
        let clients = Clients {
            compute: Arc::new(compute),
            images: Arc::new(MockImages::new()),
            network: Arc::new(network),
            load_balancer: Arc::new(lb),
        };
        let mut connector = MockConnector::new();
        connector
            .expect_connect()
            .returning(move |_, _| Ok(clients.clone()));
        OpenStackClusterActuator::new(Arc::new(connector))
    }

    /// A network with the subnet the managed path would create already there.
    fn existing_network(network: &mut MockNetworking) {
        network.expect_networks().returning(|q| {
            Ok(if q.iter().any(|(k, _)| k == "router:external") {
                vec![Network {
                    id: "ext".into(),
                    name: "public".into(),
                    external: true,
                    ..Network::default()
                }]
            } else {
                vec![Network {
                    id: "net".into(),
                    name: "capi-rs-ns-demo".into(),
                    description: OURS.into(),
                    ..Network::default()
                }]
            })
        });
        network.expect_subnets().returning(|_| {
            Ok(vec![Subnet {
                id: "sub".into(),
                description: OURS.into(),
                ..Subnet::default()
            }])
        });
        network.expect_routers().returning(|_| {
            Ok(vec![crate::cloud::Router {
                id: "r".into(),
                description: OURS.into(),
                ..Default::default()
            }])
        });
        network.expect_ports().returning(|_| {
            Ok(vec![crate::cloud::Port {
                id: "if".into(),
                ..Default::default()
            }])
        });
    }

    fn lb(status: &str) -> LoadBalancer {
        LoadBalancer {
            id: "lb".into(),
            name: "capi-rs-ns-demo-kubeapi".into(),
            provisioning_status: status.into(),
            vip_address: "10.6.0.9".into(),
            vip_port_id: Some("vip-port".into()),
            description: OURS.into(),
            ..LoadBalancer::default()
        }
    }

    /// The description of cluster `ns/demo`'s resources.
    const OURS: &str = "capi-rs cluster ns/demo";

    const LB_SPEC: &str = r#"{"identityRef": {"name": "c", "cloudName": "c"},
        "managedSubnets": [{"cidr": "10.6.0.0/24"}],
        "apiServer": {"managedLoadBalancer": {"enabled": true}}}"#;

    #[tokio::test]
    async fn a_pending_load_balancer_is_waited_for_and_not_changed() {
        let mut network = MockNetworking::new();
        existing_network(&mut network);
        let mut octavia = MockLoadBalancing::new();
        octavia
            .expect_load_balancers_named()
            .returning(|_| Ok(vec![lb("PENDING_UPDATE")]));
        octavia.expect_create_listener().never();
        octavia.expect_create_pool().never();
        let error = actuator(network, octavia)
            .reconcile(&scope(serde_json::from_str(LB_SPEC).unwrap()))
            .await
            .unwrap_err();
        assert_eq!(error.reason(), "WaitingForLoadBalancer");
        assert!(error.requeue_delay().is_some());
    }

    /// The floating IP on the VIP (which the local cloud's noop Octavia cannot show: its VIP port
    /// is not in Neutron) is allocated on the external network and associated with the VIP port.
    #[tokio::test]
    async fn the_endpoint_is_a_floating_ip_associated_with_the_vip() {
        let mut network = MockNetworking::new();
        existing_network(&mut network);
        network.expect_floating_ips().returning(|_| Ok(vec![]));
        network
            .expect_create_floating_ip()
            .withf(|net, address, port, _| net == "ext" && address.is_none() && port.is_none())
            .times(1)
            .returning(|_, _, _, _| {
                Ok(FloatingIp {
                    id: "fip".into(),
                    floating_ip_address: "172.24.4.10".into(),
                    ..FloatingIp::default()
                })
            });
        network
            .expect_associate_floating_ip()
            .withf(|id, port| id == "fip" && port.as_deref() == Some("vip-port"))
            .times(1)
            .returning(|_, _| Ok(()));
        let mut octavia = MockLoadBalancing::new();
        octavia
            .expect_load_balancers_named()
            .returning(|_| Ok(vec![lb("ACTIVE")]));
        let named = |n: &str| Named {
            id: n.into(),
            name: "capi-rs-ns-demo-kubeapi".into(),
        };
        octavia
            .expect_listeners()
            .returning(move |_| Ok(vec![named("l")]));
        octavia
            .expect_pools()
            .returning(move |_| Ok(vec![named("p")]));
        octavia
            .expect_monitors()
            .returning(move |_| Ok(vec![named("m")]));
        let infra = actuator(network, octavia)
            .reconcile(&scope(serde_json::from_str(LB_SPEC).unwrap()))
            .await
            .unwrap();
        assert_eq!(
            infra.control_plane_endpoint,
            Some(ApiEndpoint {
                host: "172.24.4.10".into(),
                port: 6443
            })
        );
    }

    #[tokio::test]
    async fn two_external_networks_without_a_choice_is_an_actionable_error() {
        let mut network = MockNetworking::new();
        network.expect_networks().returning(|_| {
            Ok(vec![
                Network {
                    name: "public".into(),
                    ..Network::default()
                },
                Network {
                    name: "provider".into(),
                    ..Network::default()
                },
            ])
        });
        let error = actuator(network, MockLoadBalancing::new())
            .reconcile(&scope(serde_json::from_str(LB_SPEC).unwrap()))
            .await
            .unwrap_err();
        assert_eq!(error.reason(), "ExternalNetworkAmbiguous");
        assert!(error.message().contains("spec.externalNetwork"));
    }

    /// `team-a/prod` and `team/a-prod` share the name `capi-rs-team-a-prod`: what the other made
    /// (another description) is neither adopted nor deleted.
    #[tokio::test]
    async fn a_same_named_resource_of_another_cluster_is_never_adopted_or_deleted() {
        const THEIRS: &str = "capi-rs cluster team/a-prod";
        let mut network = MockNetworking::new();
        network.expect_networks().returning(|q| {
            Ok(if q.iter().any(|(k, _)| k == "router:external") {
                vec![]
            } else {
                vec![Network {
                    id: "their-net".into(),
                    name: "capi-rs-ns-demo".into(),
                    description: THEIRS.into(),
                    tags: vec!["capi-rs-ns-demo".into()],
                    ..Network::default()
                }]
            })
        });
        network.expect_create_network().never();
        let spec = r#"{"identityRef": {"name": "c", "cloudName": "c"},
            "managedSubnets": [{"cidr": "10.6.0.0/24"}]}"#;
        let error = actuator(network, MockLoadBalancing::new())
            .reconcile(&scope(serde_json::from_str(spec).unwrap()))
            .await
            .unwrap_err();
        assert_eq!(error.reason(), "NameTaken");
        assert!(error.message().contains("their-net"), "{}", error.message());

        // Deleting this cluster leaves every same-named resource of the other alone.
        let mut network = MockNetworking::new();
        network.expect_networks().returning(|_| {
            Ok(vec![Network {
                id: "their-net".into(),
                name: "capi-rs-ns-demo".into(),
                description: THEIRS.into(),
                tags: vec!["capi-rs-ns-demo".into()],
                subnets: vec!["their-subnet".into()],
                ..Network::default()
            }])
        });
        network.expect_routers().returning(|_| {
            Ok(vec![crate::cloud::Router {
                id: "their-router".into(),
                name: "capi-rs-ns-demo".into(),
                description: THEIRS.into(),
                ..Default::default()
            }])
        });
        network.expect_security_groups().returning(|_| {
            Ok(vec![SecurityGroup {
                id: "their-group".into(),
                name: "capi-rs-ns-demo-controlplane".into(),
                description: THEIRS.into(),
                ..SecurityGroup::default()
            }])
        });
        network.expect_floating_ips().returning(|_| Ok(vec![]));
        network.expect_delete_network().never();
        network.expect_delete_subnet().never();
        network.expect_delete_router().never();
        network.expect_remove_router_interface().never();
        network.expect_delete_security_group().never();
        network.expect_delete_security_group_rule().never();
        network.expect_delete_port().never();
        let mut octavia = MockLoadBalancing::new();
        octavia.expect_load_balancers_named().returning(|_| {
            Ok(vec![LoadBalancer {
                id: "their-lb".into(),
                description: THEIRS.into(),
                ..lb("ACTIVE")
            }])
        });
        octavia.expect_delete_load_balancer().never();
        let mut compute = MockCompute::new();
        compute.expect_servers_tagged().returning(|_| Ok(vec![]));
        actuator_with(compute, network, octavia)
            .delete(&scope(serde_json::from_str(spec).unwrap()))
            .await
            .unwrap();
    }

    #[test]
    fn allow_all_replaces_the_per_port_rules_between_nodes() {
        let (cp, w) = desired_rules("cp", "w", true);
        assert!(cp.iter().all(|r| r.port_range_min != Some(2379)));
        assert!(
            w.iter()
                .any(|r| r.remote_group_id.as_deref() == Some("cp") && r.protocol.is_none())
        );
        let (cp, _) = desired_rules("cp", "w", false);
        assert!(cp.iter().any(|r| r.port_range_min == Some(2379)));
    }
}
