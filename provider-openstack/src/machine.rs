//! The `OpenStackMachine` actuator: ports first (named after the machine, adopted when they exist),
//! then the Nova server with the bootstrap data as user data and the machine's idempotency key in
//! its metadata; control-plane machines join the API server pool once ACTIVE and leave it before
//! deletion.
//!
//! At most one server per machine: `exists` finds a server by provider ID, else by name *and* the
//! idempotency key in its metadata, so a create retried after a crash or a lost response finds the
//! server the first attempt made (Nova records it before answering). Nova deduplicates nothing,
//! so a request whose answer was lost may still be on its way into Nova when the retry looks: the
//! machine's first port carries the time its server was last asked for (a Neutron tag written
//! right before the request), and a retry that finds the machine's ports but no server waits until
//! [`OpenStackMachineActuator::server_request_settle`] has passed since then before it asks again
//! — and a deletion before it removes the ports, so that a server Nova records late is still found
//! and deleted (a deletion that finds the server removes the mark). The mark is by the managers'
//! clocks, assumed in step.
//!
//! One reconcile of an existing machine reads its server from Nova and the server's ports from
//! Neutron once: `exists` hands both to `update` as a [`ServerRecord`]. The cluster's settings
//! (credentials, network, security groups, load balancer) come from the `OpenStackCluster` in the
//! scope; the only object the actuator reads from the API server is the credentials Secret, through
//! its [`Connector`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::api::{MachineAddress, MachineAddressType};
use capi_core::{
    Actuator, ActuatorError, BootstrapData, Found, ImmutableChange, InstanceState, MachineInstance,
    MachineScope, ProviderStatus, UpdateOutcome,
};
use kube::ResourceExt;

use crate::api::{OpenStackCluster, OpenStackMachine, OpenStackMachineSpec, PortOpts};
use crate::cloud::{
    NeutronResource, Port, PortAddressPair, PortCreate, PortFixedIp, Server, ServerCreate,
};
use crate::cluster::api_server_port;
use crate::connector::{Clients, Connector, actuator_error};
use crate::naming::{
    ClusterNames, MACHINE_KEY_METADATA, is_server_requested_tag, machine_port,
    machine_port_description, server_requested_at, server_requested_tag,
};
use crate::resolve::{self, by_name};

/// The provider ID prefix: `openstack:///<server-id>`, what the OpenStack cloud provider sets on
/// the node.
pub const PROVIDER_ID_PREFIX: &str = "openstack:///";

const BUILD_POLL: Duration = Duration::from_secs(5);
const DELETE_POLL: Duration = Duration::from_secs(2);

/// The longest marking a machine's port may take for the server request to follow it at once.
const MARK_BUDGET: Duration = Duration::from_secs(5);

/// `tags` without server-requested marks.
fn without_marks(tags: &[String]) -> Vec<String> {
    tags.iter()
        .filter(|t| !is_server_requested_tag(t))
        .cloned()
        .collect()
}

/// Seconds since the Unix epoch, by this machine's clock.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// How long after a request for a server whose answer never came (a crash, a lost connection, a
/// timeout) the provider assumes Nova has recorded it or never will: twice the longest a request
/// may take.
pub const SERVER_REQUEST_SETTLE: Duration =
    Duration::from_secs(2 * crate::cloud::session::REQUEST_TIMEOUT.as_secs());

/// Reconciles `OpenStackMachine`s in the cloud their scope's `OpenStackCluster` names, with the
/// clients its [`Connector`] gives for that cluster's `identityRef`.
pub struct OpenStackMachineActuator {
    pub(crate) connector: Arc<dyn Connector>,
    server_request_settle: Duration,
}

/// What [`Actuator::exists`] found of a machine's instance, handed unchanged to
/// [`Actuator::update`] of the same reconcile: the server as Nova answered, and every port
/// attached to it as Neutron answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerRecord {
    /// The Nova server.
    pub server: Server,
    /// The Neutron ports whose `device_id` is the server: this provider's and any others.
    pub ports: Vec<Port>,
}

impl OpenStackMachineActuator {
    /// An actuator reaching the cloud through `connector`, waiting [`SERVER_REQUEST_SETTLE`]
    /// before it asks again for a server whose earlier request went unanswered.
    pub fn new(connector: Arc<dyn Connector>) -> Self {
        Self {
            connector,
            server_request_settle: SERVER_REQUEST_SETTLE,
        }
    }

    /// The same actuator, waiting `settle` instead: how long after a request for a server whose
    /// answer never came a retry waits before it asks Nova again. Shorter than the time Nova may
    /// take to record a request risks a second server; a cloud known to record within seconds (a
    /// test cloud) may use less than the default.
    pub fn with_server_request_settle(mut self, settle: Duration) -> Self {
        self.server_request_settle = settle;
        self
    }

    /// How long after a request for a server whose answer never came a retry waits before it
    /// asks Nova again.
    pub fn server_request_settle(&self) -> Duration {
        self.server_request_settle
    }

    async fn context(
        &self,
        scope: &MachineScope<OpenStackMachine, OpenStackCluster>,
    ) -> Result<Ctx, ActuatorError> {
        let machine = &scope.infra_machine;
        let namespace = machine.namespace().unwrap_or_default();
        let cluster_name = scope.cluster_name()?;
        let cluster = Arc::clone(scope.infra_cluster()?);
        let clients = self
            .connector
            .connect(&namespace, &cluster.spec.identity_ref)
            .await?;
        Ok(Ctx {
            clients,
            names: ClusterNames::new(&namespace, &cluster_name),
            api_port: api_server_port(&cluster, &scope.cluster),
            cluster,
            name: machine.name_any(),
            key: scope.idempotency_key.as_str().to_string(),
            control_plane: scope.is_control_plane(),
        })
    }
}

/// One reconcile of one machine.
struct Ctx {
    clients: Clients,
    names: ClusterNames,
    cluster: Arc<OpenStackCluster>,
    name: String,
    key: String,
    control_plane: bool,
    /// Where the API server listens on control-plane machines (the pool members' port).
    api_port: u16,
}

/// The ports a machine's spec asks for: its `ports`, else one port on the cluster network.
fn wanted_ports(spec: &OpenStackMachineSpec) -> Cow<'_, [PortOpts]> {
    if spec.ports.is_empty() {
        Cow::Owned(vec![PortOpts::default()])
    } else {
        Cow::Borrowed(&spec.ports)
    }
}

/// The allowed address pairs a port of the spec asks for, as Neutron reports them.
fn address_pairs(opts: &PortOpts) -> Vec<PortAddressPair> {
    opts.allowed_address_pairs
        .iter()
        .map(|p| PortAddressPair {
            ip_address: p.ip_address.clone(),
            mac_address: p.mac_address.clone(),
        })
        .collect()
}

/// What the loop records of `server` with `ports` attached: its provider ID, its addresses (every
/// fixed IP of its ports, then its name), its state (Nova's fault for a server in `ERROR`), its
/// availability zone, and its ID and Nova state for `status.instanceID` and
/// `status.instanceState`.
fn reported(server: &Server, ports: &[Port]) -> Result<MachineInstance, ActuatorError> {
    let addresses = ports
        .iter()
        .flat_map(|p| p.fixed_ips.iter())
        .map(|ip| MachineAddress {
            type_: MachineAddressType::InternalIp,
            address: ip.ip_address.clone(),
        })
        .chain(std::iter::once(MachineAddress {
            type_: MachineAddressType::Hostname,
            address: server.name.clone(),
        }))
        .collect();
    let state = match server.status.as_str() {
        "ACTIVE" => InstanceState::Running,
        "ERROR" => InstanceState::Failed {
            reason: "InstanceError".into(),
            message: server
                .fault
                .as_ref()
                .map(|f| f.message.clone())
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "Nova reports the server in ERROR".into()),
        },
        _ => InstanceState::Provisioning,
    };
    let nova_state: Option<crate::api::InstanceState> =
        serde_json::from_value(serde_json::Value::String(server.status.clone())).ok();
    let provider_status = ProviderStatus::from_typed(&serde_json::json!({
        "instanceID": server.id,
        "instanceState": nova_state,
    }))
    .map_err(|e| ActuatorError::transient("ProviderStatusInvalid", e))?;
    let mut instance = MachineInstance::new(
        format!("{PROVIDER_ID_PREFIX}{}", server.id),
        addresses,
        state,
    )
    .with_provider_status(provider_status);
    if let Some(zone) = server.availability_zone.clone().filter(|z| !z.is_empty()) {
        instance = instance.in_failure_domain(zone);
    }
    Ok(instance)
}

impl Ctx {
    fn lb_managed(&self) -> bool {
        self.cluster
            .spec
            .api_server
            .as_ref()
            .and_then(|a| a.managed_load_balancer.as_ref())
            .is_some_and(|lb| lb.enabled)
    }

    /// The server of this machine, by provider ID, else by name and idempotency key.
    async fn find_server(
        &self,
        provider_id: Option<&str>,
    ) -> Result<Option<Server>, ActuatorError> {
        let compute = &self.clients.compute;
        if let Some(id) = provider_id.and_then(|p| p.strip_prefix(PROVIDER_ID_PREFIX)) {
            let server = compute
                .get_server(id)
                .await
                .map_err(|e| actuator_error("looking up the server", e))?;
            return server.map(|server| self.ensure_ours(server)).transpose();
        }
        let named = compute
            .servers_named(&self.name)
            .await
            .map_err(|e| actuator_error("looking up the server by name", e))?;
        Ok(named
            .into_iter()
            .find(|s| self.carries_key(s) && self.carries_cluster_tag(s)))
    }

    /// Whether `server`'s metadata carries this machine's idempotency key.
    fn carries_key(&self, server: &Server) -> bool {
        server
            .metadata
            .get(MACHINE_KEY_METADATA)
            .map(String::as_str)
            == Some(self.key.as_str())
    }

    /// Whether `server` carries this cluster's tag, as every server this provider creates does.
    /// The key is read from an annotation a tenant may write, so the tag also must match: it is
    /// made of the namespace and the cluster's name joined by `-` and cut at 60 characters, so
    /// only clusters whose names collide there share it.
    fn carries_cluster_tag(&self, server: &Server) -> bool {
        server.tags.contains(&self.names.tag())
    }

    /// A server found by `spec.providerID` — which whoever may write the `OpenStackMachine`
    /// writes, a tenant among them — is this machine's only if it carries this cluster's tag
    /// and this machine's idempotency key. Anything else is an invalid configuration and is
    /// never touched: not updated, not deleted, its ports and floating IPs left alone.
    fn ensure_ours(&self, server: Server) -> Result<Server, ActuatorError> {
        let missing = if !self.carries_cluster_tag(&server) {
            "this cluster's tag"
        } else if !self.carries_key(&server) {
            "this machine's idempotency key"
        } else {
            return Ok(server);
        };
        Err(ActuatorError::invalid_configuration(
            "ServerNotOwned",
            format!(
                "server {} named by spec.providerID does not carry {missing}: it is not this \
                 machine's and is left untouched; correct spec.providerID",
                server.id
            ),
        ))
    }

    /// `server` with the ports attached to it (one Neutron call), and what the loop records of
    /// them.
    async fn observe(&self, server: Server) -> Result<Found<ServerRecord>, ActuatorError> {
        let ports = self
            .clients
            .network
            .ports(&[("device_id".into(), server.id.clone())])
            .await
            .map_err(|e| actuator_error("listing the server's ports", e))?;
        let reported = reported(&server, &ports)?;
        Ok(Found::with(reported, ServerRecord { server, ports }))
    }

    /// The ports among `attached` this provider made for this machine (by their description);
    /// others (attached by hand, a CNI, a trunk) are not the spec's.
    fn ours<'a>(&self, attached: &'a [Port]) -> Vec<&'a Port> {
        let description = machine_port_description(&self.key);
        attached
            .iter()
            .filter(|p| p.description == description)
            .collect()
    }

    /// The machine's ports as the spec asks (one on the cluster network by default), created or
    /// adopted, in order.
    async fn ensure_ports(&self, machine: &OpenStackMachine) -> Result<Vec<Port>, ActuatorError> {
        let net = self.clients.network.as_ref();
        let mut groups = Vec::new();
        if self.cluster.spec.managed_security_groups.is_some() {
            let name = if self.control_plane {
                self.names.control_plane_group()
            } else {
                self.names.worker_group()
            };
            let found = net
                .security_groups(&by_name(&name))
                .await
                .map_err(|e| actuator_error("finding the cluster security group", e))?;
            let group = found
                .into_iter()
                .find(|g| g.description == self.names.description)
                .ok_or_else(|| {
                    ActuatorError::requeue_after(
                        BUILD_POLL,
                        "WaitingForClusterInfrastructure",
                        format!("security group {name} does not exist yet"),
                    )
                })?;
            groups.push(group.id);
        }
        for (i, param) in machine.spec.security_groups.iter().enumerate() {
            let field = format!("spec.securityGroups[{i}]");
            groups.push(resolve::security_group(net, param, &field).await?.id);
        }
        let description = machine_port_description(&self.key);
        let mut ports = Vec::new();
        for (i, opts) in wanted_ports(&machine.spec).iter().enumerate() {
            let name = machine_port(&self.name, i, opts.name_suffix.as_deref());
            let pairs = address_pairs(opts);
            let mut existing = net
                .ports(&by_name(&name))
                .await
                .map_err(|e| actuator_error("finding the machine's ports", e))?;
            let mine = existing.iter().position(|p| p.description == description);
            if let Some(port) = mine.map(|i| existing.swap_remove(i)) {
                if port.allowed_address_pairs != pairs {
                    net.set_allowed_address_pairs(&port.id, &pairs)
                        .await
                        .map_err(|e| actuator_error("updating allowed address pairs", e))?;
                }
                ports.push(port);
                continue;
            }
            if !existing.is_empty() {
                return Err(ActuatorError::invalid_configuration(
                    "PortNameTaken",
                    format!(
                        "a port named {name} exists that this machine did not create; rename or delete it"
                    ),
                ));
            }
            let network_id = self.port_network(opts, i).await?;
            let mut fixed_ips = Vec::new();
            for (j, fixed) in opts.fixed_ips.iter().enumerate() {
                let subnet_id = match &fixed.subnet {
                    Some(param) => {
                        let field = format!("spec.ports[{i}].fixedIPs[{j}].subnet");
                        resolve::subnet(net, param, Some(&network_id), &field)
                            .await?
                            .id
                    }
                    None => String::new(),
                };
                fixed_ips.push(PortFixedIp {
                    subnet_id,
                    ip_address: fixed.ip_address.clone().unwrap_or_default(),
                });
            }
            let port = net
                .create_port(&PortCreate {
                    name,
                    description: description.clone(),
                    network_id,
                    fixed_ips,
                    security_group_ids: groups.clone(),
                    allowed_address_pairs: pairs,
                    tags: vec![self.names.tag()],
                })
                .await
                .map_err(|e| actuator_error("creating the machine's port", e))?;
            ports.push(port);
        }
        Ok(ports)
    }

    /// Refuses to go on while a request for this machine's server may still be on its way into
    /// Nova: when the latest server-requested tag among `ports` was less than `settle` old at
    /// `looked_at` (the second before Nova was last asked for the server and showed none), that
    /// request's answer was lost and Nova may not have recorded it by then. Whole seconds on both
    /// sides: a mark exactly `settle` old still waits. `then` says what waits. Nothing latches: a
    /// time more than `settle` ahead of this clock (a clock set back) is taken as stale.
    /// Replicas' clocks are assumed in step (NTP).
    fn wait_for_earlier_server_request(
        ports: &[Port],
        looked_at: u64,
        settle: Duration,
        then: &str,
    ) -> Result<(), ActuatorError> {
        let Some(at) = server_requested_at(ports.iter().flat_map(|p| &p.tags)) else {
            return Ok(());
        };
        let waited = Duration::from_secs(looked_at.saturating_sub(at));
        let ahead = Duration::from_secs(at.saturating_sub(looked_at));
        if waited <= settle && ahead <= settle {
            return Err(ActuatorError::requeue_after(
                (settle + Duration::from_secs(1)).saturating_sub(waited),
                "WaitingForEarlierServerRequest",
                format!(
                    "the answer to an earlier request for this machine's server was lost and Nova \
                     shows no server yet; {then} once {}s have passed since that request",
                    settle.as_secs()
                ),
            ));
        }
        Ok(())
    }

    /// Marks `ports`' first port with the time a server is asked for now, keeping its other
    /// tags (and adding the cluster's, should creating the port have failed to), unless
    /// [`Ctx::wait_for_earlier_server_request`] refuses for Nova's answer at `looked_at`. The
    /// request must follow at once: when marking took long (Neutron retried), it is not made
    /// this time, so that no request ever leaves later than its mark says.
    async fn mark_server_request(
        &self,
        ports: &[Port],
        looked_at: u64,
        settle: Duration,
    ) -> Result<(), ActuatorError> {
        Self::wait_for_earlier_server_request(ports, looked_at, settle, "asking again")?;
        let Some(first) = ports.first() else {
            return Ok(());
        };
        let mut tags = without_marks(&first.tags);
        if !tags.contains(&self.names.tag()) {
            tags.push(self.names.tag());
        }
        tags.push(server_requested_tag(unix_now()));
        let started = std::time::Instant::now();
        self.clients
            .network
            .set_tags(Port::COLLECTION, &first.id, &tags)
            .await
            .map_err(|e| {
                actuator_error("marking the machine's port before asking for its server", e)
            })?;
        if started.elapsed() > MARK_BUDGET {
            return Err(ActuatorError::requeue_after(
                settle,
                "WaitingForEarlierServerRequest",
                "marking the machine's port took long; asking for its server once the mark has \
                 settled",
            ));
        }
        Ok(())
    }

    /// Removes the server-requested marks from the machine's ports (listing them by their
    /// description; one call per marked port): the request they announced has its server.
    async fn consume_server_request_marks(&self) -> Result<(), ActuatorError> {
        let net = &self.clients.network;
        let ports = net
            .ports(&[("description".into(), machine_port_description(&self.key))])
            .await
            .map_err(|e| actuator_error("finding the machine's ports", e))?;
        for port in &ports {
            if !port.tags.iter().any(|t| is_server_requested_tag(t)) {
                continue;
            }
            let tags = without_marks(&port.tags);
            net.set_tags(Port::COLLECTION, &port.id, &tags)
                .await
                .map_err(|e| actuator_error("unmarking the machine's port", e))?;
        }
        Ok(())
    }

    /// Sets the allowed address pairs (mutable in Neutron) the spec asks for on the machine's
    /// ports among `attached`, and on nothing else: a port the spec asks for that is not attached
    /// is never created here (it waits for a new machine). Lists nothing; calls Neutron once per
    /// port whose pairs differ.
    async fn converge_address_pairs(
        &self,
        machine: &OpenStackMachine,
        attached: &[Port],
    ) -> Result<(), ActuatorError> {
        let ours = self.ours(attached);
        for (i, opts) in wanted_ports(&machine.spec).iter().enumerate() {
            let name = machine_port(&self.name, i, opts.name_suffix.as_deref());
            let pairs = address_pairs(opts);
            if let Some(port) = ours.iter().find(|p| p.name == name)
                && port.allowed_address_pairs != pairs
            {
                self.clients
                    .network
                    .set_allowed_address_pairs(&port.id, &pairs)
                    .await
                    .map_err(|e| actuator_error("updating allowed address pairs", e))?;
            }
        }
        Ok(())
    }

    /// What of `machine`'s spec the server in `record` cannot take without being replaced:
    /// another flavor, another image, other ports of this provider's (by name or network; once
    /// the server is `ACTIVE` and they are bound). Names are compared where the spec names things
    /// (an image re-uploaded under the same name is no change), IDs where it gives IDs. The server
    /// and its ports are `record`'s, never read again; what the spec names is looked up, and what
    /// cannot be looked up right now (a cloud error, a flavor or image gone, a filter that matches
    /// nothing) is not compared: only a difference seen is reported, and the lookups never fail
    /// `update`.
    async fn immutable_changes(
        &self,
        machine: &OpenStackMachine,
        record: &ServerRecord,
    ) -> Vec<ImmutableChange> {
        let spec = &machine.spec;
        let server = &record.server;
        let mut changes = Vec::new();
        let mut change = |field: &str, current: String, desired: String| {
            if current != desired {
                changes.push(ImmutableChange {
                    field: field.to_string(),
                    current,
                    desired,
                });
            }
        };
        let named = |filter: Option<&crate::api::NameFilter>| filter.and_then(|f| f.name.clone());
        if let Some(current) = server.flavor.as_ref().and_then(|f| f.original_name.clone()) {
            let desired = match (&spec.flavor.id, named(spec.flavor.filter.as_ref())) {
                (Some(_), _) => resolve::flavor(self.clients.compute.as_ref(), spec)
                    .await
                    .ok()
                    .map(|f| f.name),
                (None, name) => name,
            };
            if let Some(desired) = desired {
                change("spec.flavor", current, desired);
            }
        }
        if let Some(current_id) = &server.image_id {
            match (&spec.image.id, named(spec.image.filter.as_ref())) {
                (Some(id), _) => change("spec.image", current_id.clone(), id.clone()),
                (None, Some(name)) => {
                    let running = self.clients.images.find_images(current_id, &[]).await;
                    if let Some(image) = running
                        .ok()
                        .and_then(|found| found.into_iter().find(|i| &i.id == current_id))
                    {
                        change("spec.image", image.name, name);
                    }
                }
                (None, None) => {}
            }
        }
        if server.status != "ACTIVE" {
            // Nova binds the ports while it builds the server: compare them once it runs.
            return changes;
        }
        let ours = self.ours(&record.ports);
        let mut current: Vec<String> = ours.iter().map(|p| p.name.clone()).collect();
        current.sort();
        let mut desired = Vec::new();
        for (i, opts) in wanted_ports(spec).iter().enumerate() {
            let name = machine_port(&self.name, i, opts.name_suffix.as_deref());
            if opts.network.is_some()
                && let Some(port) = ours.iter().find(|p| p.name == name)
                && let Ok(network) = self.port_network(opts, i).await
            {
                change(
                    &format!("spec.ports[{i}].network"),
                    port.network_id.clone(),
                    network,
                );
            }
            desired.push(name);
        }
        desired.sort();
        change("spec.ports", current.join(","), desired.join(","));
        changes
    }

    async fn port_network(&self, opts: &PortOpts, index: usize) -> Result<String, ActuatorError> {
        let net = self.clients.network.as_ref();
        if let Some(param) = &opts.network {
            let field = format!("spec.ports[{index}].network");
            return Ok(resolve::network(net, param, &field).await?.id);
        }
        if let Some(param) = &self.cluster.spec.network {
            return Ok(
                resolve::network(net, param, "OpenStackCluster spec.network")
                    .await?
                    .id,
            );
        }
        let found = net
            .networks(&by_name(&self.names.network()))
            .await
            .map_err(|e| actuator_error("finding the cluster network", e))?;
        found.into_iter().next().map(|n| n.id).ok_or_else(|| {
            ActuatorError::requeue_after(
                BUILD_POLL,
                "WaitingForClusterInfrastructure",
                format!(
                    "the cluster network {} does not exist yet",
                    self.names.network()
                ),
            )
        })
    }

    /// The API server pool (`None` when the cluster has no managed load balancer or it has no
    /// pool yet); `RequeueAfter` while the load balancer is busy.
    async fn api_pool(&self) -> Result<Option<String>, ActuatorError> {
        if !self.control_plane || !self.lb_managed() {
            return Ok(None);
        }
        let octavia = &self.clients.load_balancer;
        let name = self.names.load_balancer();
        let Some(lb) = octavia
            .load_balancers_named(&name)
            .await
            .map_err(|e| actuator_error("finding the API server load balancer", e))?
            .into_iter()
            .find(|lb| lb.description == self.names.description)
        else {
            return Ok(None);
        };
        if !lb.is_active() {
            return Err(ActuatorError::requeue_after(
                Duration::from_secs(2),
                "WaitingForLoadBalancer",
                format!("load balancer {name} is {}", lb.provisioning_status),
            ));
        }
        let pools = octavia
            .pools(&lb.id)
            .await
            .map_err(|e| actuator_error("listing the API server pools", e))?;
        Ok(pools.into_iter().find(|p| p.name == name).map(|p| p.id))
    }

    /// Adds a control-plane machine's `instance` to the API server pool under the machine's name,
    /// at its first internal IP, unless a member of that name is there.
    async fn join_api_pool(&self, instance: &MachineInstance) -> Result<(), ActuatorError> {
        let Some(pool) = self.api_pool().await? else {
            return Ok(());
        };
        let octavia = &self.clients.load_balancer;
        let members = octavia
            .members(&pool)
            .await
            .map_err(|e| actuator_error("listing the API server pool members", e))?;
        let address = instance
            .addresses
            .iter()
            .find(|a| a.type_ == MachineAddressType::InternalIp)
            .map(|a| a.address.as_str());
        if let Some(address) = address
            && !members.iter().any(|m| m.name == self.name)
        {
            octavia
                .create_member(&pool, &self.name, address, self.api_port, None)
                .await
                .map_err(|e| actuator_error("adding the machine to the API server pool", e))?;
        }
        Ok(())
    }
}

#[async_trait]
impl Actuator<OpenStackMachine, OpenStackCluster> for OpenStackMachineActuator {
    type Instance = ServerRecord;

    async fn exists(
        &self,
        scope: &MachineScope<OpenStackMachine, OpenStackCluster>,
    ) -> Result<Option<Found<ServerRecord>>, ActuatorError> {
        let ctx = self.context(scope).await?;
        match ctx
            .find_server(scope.infra_machine.spec.provider_id.as_deref())
            .await?
        {
            Some(server) => ctx.observe(server).await.map(Some),
            None => Ok(None),
        }
    }

    async fn create(
        &self,
        scope: &MachineScope<OpenStackMachine, OpenStackCluster>,
        bootstrap: &BootstrapData,
    ) -> Result<MachineInstance, ActuatorError> {
        let ctx = self.context(scope).await?;
        // Never a second server: look again right before creating.
        // The mark of an earlier request is judged against when Nova last showed no server.
        let looked_at = unix_now();
        if let Some(server) = ctx.find_server(None).await? {
            return Ok(ctx.observe(server).await?.reported);
        }
        let spec = &scope.infra_machine.spec;
        let compute = ctx.clients.compute.as_ref();
        let flavor = resolve::flavor(compute, spec).await?;
        let image = resolve::image(ctx.clients.images.as_ref(), spec).await?;
        let server_group_id = match &spec.server_group {
            Some(group) => {
                let wanted = resolve::name_or_id(group.id.as_ref(), group.filter.as_ref())
                    .unwrap_or_default();
                Some(
                    compute
                        .find_server_group(&wanted)
                        .await
                        .map_err(|e| actuator_error("looking up the server group", e))?
                        .ok_or_else(|| {
                            ActuatorError::invalid_configuration(
                                "ServerGroupNotFound",
                                format!("spec.serverGroup: no server group {wanted:?}"),
                            )
                        })?
                        .id,
                )
            }
            None => None,
        };
        let ports = ctx.ensure_ports(&scope.infra_machine).await?;
        ctx.mark_server_request(&ports, looked_at, self.server_request_settle)
            .await?;
        let mut metadata: BTreeMap<String, String> = spec
            .server_metadata
            .iter()
            .map(|m| (m.key.clone(), m.value.clone()))
            .collect();
        metadata.insert(MACHINE_KEY_METADATA.into(), ctx.key.clone());
        let mut tags = spec.tags.clone();
        tags.push(ctx.names.tag());
        let server = compute
            .create_server(&ServerCreate {
                name: ctx.name.clone(),
                flavor_id: flavor.id,
                image_id: image.id,
                key_name: spec.ssh_key_name.clone(),
                port_ids: ports.into_iter().map(|p| p.id).collect(),
                user_data: bootstrap.expose().to_vec(),
                metadata,
                tags,
                availability_zone: scope.machine.spec.failure_domain.clone(),
                server_group_id,
                config_drive: spec.config_drive.unwrap_or(false),
            })
            .await
            .map_err(|e| actuator_error("creating the server", e))?;
        Ok(ctx.observe(server).await?.reported)
    }

    /// Reports the immutable changes between the spec and the server `exists` found, and, while
    /// the server runs, converges the allowed address pairs of its ports and joins a
    /// control-plane machine to the API server pool. Reads neither the server nor its ports
    /// again: they are `found`'s.
    async fn update(
        &self,
        scope: &MachineScope<OpenStackMachine, OpenStackCluster>,
        found: Found<ServerRecord>,
    ) -> Result<UpdateOutcome, ActuatorError> {
        let ctx = self.context(scope).await?;
        let Found {
            reported,
            instance: record,
        } = found;
        let immutable_changes = ctx.immutable_changes(&scope.infra_machine, &record).await;
        if reported.state == InstanceState::Running {
            let ports_changed = immutable_changes.iter().any(|c| c.field == "spec.ports");
            if !ports_changed {
                ctx.converge_address_pairs(&scope.infra_machine, &record.ports)
                    .await?;
            }
            ctx.join_api_pool(&reported).await?;
        }
        Ok(UpdateOutcome {
            instance: reported,
            immutable_changes,
        })
    }

    async fn delete(
        &self,
        scope: &MachineScope<OpenStackMachine, OpenStackCluster>,
    ) -> Result<(), ActuatorError> {
        let ctx = self.context(scope).await?;
        // Leave the API server pool first, so traffic stops before the server goes.
        if let Some(pool) = ctx.api_pool().await? {
            let members = ctx
                .clients
                .load_balancer
                .members(&pool)
                .await
                .map_err(|e| actuator_error("listing the API server pool members", e))?;
            if let Some(member) = members.iter().find(|m| m.name == ctx.name) {
                ctx.clients
                    .load_balancer
                    .delete_member(&pool, &member.id)
                    .await
                    .map_err(|e| {
                        actuator_error("removing the machine from the API server pool", e)
                    })?;
                return Err(ActuatorError::requeue_after(
                    DELETE_POLL,
                    "LeavingLoadBalancer",
                    "removed from the API server pool; deleting the server next",
                ));
            }
        }
        let provider_id = scope.infra_machine.spec.provider_id.as_deref();
        let looked_at = unix_now();
        let mut server = ctx.find_server(provider_id).await?;
        if server.is_none() && provider_id.is_some() {
            // Recorded ID gone: make sure no server of this machine exists under its name either.
            server = ctx.find_server(None).await?;
        }
        if let Some(server) = server {
            ctx.clients
                .compute
                .delete_server(&server.id)
                .await
                .map_err(|e| actuator_error("deleting the server", e))?;
            // The request the ports' mark announced has its server: once it is gone, the ports
            // go without waiting for another.
            ctx.consume_server_request_marks().await?;
            return Err(ActuatorError::requeue_after(
                DELETE_POLL,
                "DeletingServer",
                format!("server {} is being deleted", server.name),
            ));
        }
        let net = &ctx.clients.network;
        let ports = net
            .ports(&[("description".into(), machine_port_description(&ctx.key))])
            .await
            .map_err(|e| actuator_error("finding the machine's ports", e))?;
        // A server Nova records after this would be no machine's: look for it once more later.
        Ctx::wait_for_earlier_server_request(
            &ports,
            looked_at,
            self.server_request_settle,
            "deleting the ports",
        )?;
        for port in ports {
            net.delete_port(&port.id)
                .await
                .map_err(|e| actuator_error("deleting the machine's port", e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::cloud::{
        Flavor, Image, MockCompute, MockImages, MockLoadBalancing, MockNetworking, Network,
        ServerFault, ServerFlavor,
    };
    use crate::connector::MockConnector;
    use capi_core::api::{Cluster, Machine};
    use capi_core::{BootstrapFormat, IdempotencyKey};

    /// A worker `m-0` of cluster `demo` with flavor `m1` and image `img`, by name.
    fn scope() -> MachineScope<OpenStackMachine, OpenStackCluster> {
        scope_with(serde_json::json!({
            "flavor": {"filter": {"name": "m1"}}, "image": {"filter": {"name": "img"}},
        }))
    }

    fn scope_with(spec: serde_json::Value) -> MachineScope<OpenStackMachine, OpenStackCluster> {
        let infra: OpenStackMachine = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackMachine",
            "metadata": {"name": "m-0", "namespace": "ns",
                         "labels": {"cluster.x-k8s.io/cluster-name": "demo"}},
            "spec": spec,
        }))
        .unwrap();
        let infra_cluster: OpenStackCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackCluster",
            "metadata": {"name": "demo", "namespace": "ns"},
            "spec": {"identityRef": {"name": "c", "cloudName": "c"}},
        }))
        .unwrap();
        let mut machine = Machine::default();
        machine.metadata.uid = Some("uid-1".into());
        MachineScope {
            cluster: Arc::new(Cluster::default()),
            infra_cluster: Some(Arc::new(infra_cluster)),
            idempotency_key: IdempotencyKey::for_machine(&machine).unwrap(),
            machine: Arc::new(machine),
            infra_machine: Arc::new(infra),
        }
    }

    /// `scope` with the provider ID of `server_id` recorded, as the loop does after `create`.
    fn recorded(
        scope: MachineScope<OpenStackMachine, OpenStackCluster>,
        server_id: &str,
    ) -> MachineScope<OpenStackMachine, OpenStackCluster> {
        let mut infra = (*scope.infra_machine).clone();
        infra.spec.provider_id = Some(format!("{PROVIDER_ID_PREFIX}{server_id}"));
        MachineScope {
            infra_machine: Arc::new(infra),
            ..scope
        }
    }

    fn actuator(compute: MockCompute, network: MockNetworking) -> OpenStackMachineActuator {
        actuator_over(compute, MockImages::new(), network)
    }

    fn actuator_over(
        compute: MockCompute,
        images: MockImages,
        network: MockNetworking,
    ) -> OpenStackMachineActuator {
        let clients = Clients {
            compute: Arc::new(compute),
            images: Arc::new(images),
            network: Arc::new(network),
            load_balancer: Arc::new(MockLoadBalancing::new()),
        };
        let mut connector = MockConnector::new();
        connector
            .expect_connect()
            .returning(move |_, _| Ok(clients.clone()));
        OpenStackMachineActuator::new(Arc::new(connector))
    }

    fn server(key: &str, status: &str) -> Server {
        Server {
            id: format!("srv-{key}"),
            name: "m-0".into(),
            status: status.into(),
            metadata: BTreeMap::from([(MACHINE_KEY_METADATA.to_string(), key.to_string())]),
            tags: vec![ClusterNames::new("ns", "demo").tag()],
            fault: Some(ServerFault {
                message: "No valid host was found.".into(),
            }),
            ..Server::default()
        }
    }

    /// The running server of `scope()`'s machine as Nova and Neutron describe it: booted with
    /// flavor `m1` from image `img-1` (named `img`), with the machine's one port attached.
    fn running_worker(key: &str) -> ServerRecord {
        let server = Server {
            fault: None,
            flavor: Some(ServerFlavor {
                original_name: Some("m1".into()),
            }),
            image_id: Some("img-1".into()),
            ..server(key, "ACTIVE")
        };
        let port = Port {
            id: "port-1".into(),
            name: machine_port("m-0", 0, None),
            description: machine_port_description(key),
            device_id: server.id.clone(),
            fixed_ips: vec![PortFixedIp {
                subnet_id: "subnet-1".into(),
                ip_address: "10.6.0.7".into(),
            }],
            ..Port::default()
        };
        ServerRecord {
            server,
            ports: vec![port],
        }
    }

    fn flavor_m1() -> Flavor {
        Flavor {
            id: "flavor-1".into(),
            name: "m1".into(),
            ..Flavor::default()
        }
    }

    fn image_img() -> Image {
        Image {
            id: "img-1".into(),
            name: "img".into(),
            ..Image::default()
        }
    }

    /// Counts the calls a mocked cloud answers.
    #[derive(Clone, Default)]
    struct Calls(Arc<AtomicUsize>);

    impl Calls {
        fn answer<T>(&self, value: T) -> T {
            self.0.fetch_add(1, Ordering::SeqCst);
            value
        }

        fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    #[tokio::test]
    async fn a_server_a_provider_id_names_that_is_not_this_machines_is_never_touched() {
        let scope = recorded(scope(), "srv-other");
        let mut compute = MockCompute::new();
        compute
            .expect_get_server()
            .returning(|_| Ok(Some(server("capi-another-machine", "ACTIVE"))));
        compute.expect_delete_server().never();
        compute.expect_create_server().never();
        let mut network = MockNetworking::new();
        network.expect_ports().never();
        let actuator = actuator(compute, network);
        for error in [
            actuator.exists(&scope).await.unwrap_err(),
            actuator.delete(&scope).await.unwrap_err(),
        ] {
            assert_eq!(
                error.kind(),
                capi_core::ActuatorErrorKind::InvalidConfiguration
            );
            let message = error.to_string();
            assert!(message.contains("srv-capi-another-machine"), "{message}");
            assert!(message.contains("idempotency key"), "{message}");
        }
    }

    #[tokio::test]
    async fn another_clusters_server_under_this_machines_key_is_never_this_machines() {
        // The key is read from an annotation a tenant may write: another cluster's server in the
        // same project may carry it.
        let scope = scope();
        let key = scope.idempotency_key.as_str().to_string();
        let theirs = move || Server {
            tags: vec![ClusterNames::new("team-b", "demo").tag()],
            ..server(&key, "ACTIVE")
        };
        let mut compute = MockCompute::new();
        let by_name = theirs.clone();
        compute
            .expect_servers_named()
            .returning(move |_| Ok(vec![by_name()]));
        compute
            .expect_get_server()
            .returning(move |_| Ok(Some(theirs())));
        compute.expect_delete_server().never();
        let mut network = MockNetworking::new();
        network.expect_ports().never();
        let actuator = actuator(compute, network);
        assert_eq!(actuator.exists(&scope).await.unwrap(), None);
        let named = recorded(scope, "srv-theirs");
        for error in [
            actuator.exists(&named).await.unwrap_err(),
            actuator.delete(&named).await.unwrap_err(),
        ] {
            assert_eq!(error.reason(), "ServerNotOwned");
            let message = error.to_string();
            assert!(message.contains("this cluster's tag"), "{message}");
        }
    }

    #[tokio::test]
    async fn a_running_workers_reconcile_reads_its_server_and_ports_once() {
        let scope = scope();
        let running = running_worker(scope.idempotency_key.as_str());
        let scope = recorded(scope, &running.server.id);
        let calls = Calls::default();
        let mut compute = MockCompute::new();
        let answers = calls.clone();
        let server = running.server.clone();
        compute
            .expect_get_server()
            .times(1)
            .returning(move |_| Ok(answers.answer(Some(server.clone()))));
        let mut network = MockNetworking::new();
        let answers = calls.clone();
        let ports = running.ports.clone();
        network
            .expect_ports()
            .times(1)
            .returning(move |_| Ok(answers.answer(ports.clone())));
        let mut images = MockImages::new();
        let answers = calls.clone();
        images
            .expect_find_images()
            .times(1)
            .returning(move |_, _| Ok(answers.answer(vec![image_img()])));
        let actuator = actuator_over(compute, images, network);

        let found = actuator.exists(&scope).await.unwrap().unwrap();
        assert_eq!(found.reported.state, InstanceState::Running);
        assert_eq!(found.instance, running);
        let by_exists = calls.count();
        let outcome = actuator.update(&scope, found).await.unwrap();
        assert_eq!(outcome.immutable_changes, vec![]);
        assert_eq!(
            (by_exists, calls.count() - by_exists),
            (2, 1),
            "exists: the server (Nova) and its ports (Neutron); update: the running image's name \
             (Glance) and nothing exists read"
        );
    }

    #[tokio::test]
    async fn update_sets_address_pairs_on_the_ports_exists_found_without_listing_them() {
        let scope = scope_with(serde_json::json!({
            "flavor": {"filter": {"name": "m1"}}, "image": {"filter": {"name": "img"}},
            "ports": [{"allowedAddressPairs": [{"ipAddress": "192.168.7.0/24"}]}],
        }));
        let running = running_worker(scope.idempotency_key.as_str());
        let scope = recorded(scope, &running.server.id);
        let mut network = MockNetworking::new();
        network.expect_ports().never();
        network
            .expect_set_allowed_address_pairs()
            .times(1)
            .withf(|port, pairs| {
                port == "port-1"
                    && pairs
                        == [PortAddressPair {
                            ip_address: "192.168.7.0/24".into(),
                            mac_address: None,
                        }]
            })
            .returning(|_, _| Ok(()));
        let mut compute = MockCompute::new();
        compute.expect_get_server().never();
        let mut images = MockImages::new();
        images
            .expect_find_images()
            .returning(|_, _| Ok(vec![image_img()]));
        let found = Found::with(reported(&running.server, &running.ports).unwrap(), running);
        let outcome = actuator_over(compute, images, network)
            .update(&scope, found)
            .await
            .unwrap();
        assert_eq!(outcome.immutable_changes, vec![]);
    }

    #[tokio::test]
    async fn a_server_of_the_same_name_but_another_machine_is_not_adopted() {
        let mut compute = MockCompute::new();
        compute
            .expect_servers_named()
            .returning(|_| Ok(vec![server("someone-else", "ACTIVE")]));
        let found = actuator(compute, MockNetworking::new())
            .exists(&scope())
            .await
            .unwrap();
        assert_eq!(found, None);
    }

    #[tokio::test]
    async fn an_errored_server_reports_novas_fault() {
        let scope = scope();
        let key = scope.idempotency_key.as_str().to_string();
        let mut compute = MockCompute::new();
        compute
            .expect_servers_named()
            .returning(move |_| Ok(vec![server(&key, "ERROR")]));
        let mut network = MockNetworking::new();
        network.expect_ports().returning(|_| Ok(vec![]));
        let found = actuator(compute, network)
            .exists(&scope)
            .await
            .unwrap()
            .unwrap()
            .reported;
        assert_eq!(
            found.state,
            InstanceState::Failed {
                reason: "InstanceError".into(),
                message: "No valid host was found.".into()
            }
        );
        // The server's ID and Nova's state, for `status.instanceID` and `status.instanceState`.
        assert_eq!(found.provider_status.fields()["instanceState"], "ERROR");
        assert_eq!(
            found.provider_status.fields()["instanceID"],
            found.provider_id.trim_start_matches(PROVIDER_ID_PREFIX)
        );
        assert!(found.provider_id.starts_with(PROVIDER_ID_PREFIX));
    }

    #[tokio::test]
    async fn create_boots_the_server_with_the_bootstrap_data_it_is_given() {
        let scope = scope();
        let key = scope.idempotency_key.as_str().to_string();
        let mut compute = MockCompute::new();
        compute.expect_servers_named().returning(|_| Ok(vec![]));
        compute
            .expect_find_flavor()
            .returning(|_| Ok(Some(flavor_m1())));
        compute
            .expect_create_server()
            .times(1)
            .withf(|create| {
                create.user_data == b"#cloud-config\nruncmd: [kubeadm join]\n"
                    && create.port_ids == ["port-1"]
                    && create.image_id == "img-1"
            })
            .returning(move |_| Ok(server(&key, "BUILD")));
        let mut images = MockImages::new();
        images
            .expect_find_images()
            .returning(|_, _| Ok(vec![image_img()]));
        let mut network = MockNetworking::new();
        network.expect_ports().returning(|_| Ok(vec![]));
        network.expect_networks().returning(|_| {
            Ok(vec![Network {
                id: "net-1".into(),
                ..Network::default()
            }])
        });
        network
            .expect_create_port()
            .times(1)
            .withf(|port| port.network_id == "net-1" && port.name == "m-0-0")
            .returning(|create| {
                Ok(Port {
                    id: "port-1".into(),
                    tags: create.tags.clone(),
                    ..Port::default()
                })
            });
        let cluster_tag = ClusterNames::new("ns", "demo").tag();
        network
            .expect_set_tags()
            .times(1)
            .withf(move |collection, id, tags| {
                collection == "ports"
                    && id == "port-1"
                    && server_requested_at(tags).is_some()
                    && tags.contains(&cluster_tag)
            })
            .returning(|_, _, _| Ok(()));
        let bootstrap = BootstrapData::new(
            BootstrapFormat::CloudConfig,
            b"#cloud-config\nruncmd: [kubeadm join]\n".to_vec(),
        );
        let created = actuator_over(compute, images, network)
            .create(&scope, &bootstrap)
            .await
            .unwrap();
        assert_eq!(created.state, InstanceState::Provisioning);
        assert_eq!(
            created.provider_id,
            format!("{PROVIDER_ID_PREFIX}srv-{}", scope.idempotency_key)
        );
    }

    /// A create that finds `port` (the machine's, adopted) and no server, with an image and a
    /// flavor to boot from; `booted` counts the servers it asks Nova for.
    fn retried_create(port: Port, booted: &Calls) -> OpenStackMachineActuator {
        let scope = scope();
        let key = scope.idempotency_key.as_str().to_string();
        let mut compute = MockCompute::new();
        compute.expect_servers_named().returning(|_| Ok(vec![]));
        compute
            .expect_find_flavor()
            .returning(|_| Ok(Some(flavor_m1())));
        let booted = booted.clone();
        compute
            .expect_create_server()
            .returning(move |_| Ok(booted.answer(server(&key, "BUILD"))));
        let mut images = MockImages::new();
        images
            .expect_find_images()
            .returning(|_, _| Ok(vec![image_img()]));
        let mut network = MockNetworking::new();
        network
            .expect_ports()
            .returning(move |_| Ok(vec![port.clone()]));
        network.expect_set_tags().returning(|_, _, _| Ok(()));
        actuator_over(compute, images, network)
    }

    fn adopted_port(tags: Vec<String>) -> Port {
        Port {
            id: "port-1".into(),
            name: machine_port("m-0", 0, None),
            description: machine_port_description(scope().idempotency_key.as_str()),
            tags,
            ..Port::default()
        }
    }

    #[tokio::test]
    async fn a_server_request_whose_answer_was_lost_is_not_repeated_until_nova_has_had_time_to_record_it()
     {
        let bootstrap =
            BootstrapData::new(BootstrapFormat::CloudConfig, b"#cloud-config\n".to_vec());
        let booted = Calls::default();
        let just_asked = adopted_port(vec![server_requested_tag(unix_now() - 3)]);
        let error = retried_create(just_asked, &booted)
            .create(&scope(), &bootstrap)
            .await
            .unwrap_err();
        assert_eq!(
            booted.count(),
            0,
            "no second request while the first may be in flight"
        );
        let wait = error.requeue_delay().expect("a requeue, not a failure");
        assert!(
            wait <= SERVER_REQUEST_SETTLE - Duration::from_secs(2)
                && wait >= Duration::from_secs(50),
            "{wait:?}"
        );

        let long_ago = adopted_port(vec![server_requested_tag(unix_now() - 61)]);
        retried_create(long_ago, &booted)
            .create(&scope(), &bootstrap)
            .await
            .unwrap();
        assert_eq!(
            booted.count(),
            1,
            "asked again once the first cannot be in flight"
        );

        // A request time far ahead of this clock (a clock set back) does not hold the machine.
        let ahead = adopted_port(vec![server_requested_tag(unix_now() + 3600)]);
        retried_create(ahead, &booted)
            .create(&scope(), &bootstrap)
            .await
            .unwrap();
        assert_eq!(booted.count(), 2);

        // A shorter settle, for a cloud that records within seconds.
        let recent = adopted_port(vec![server_requested_tag(unix_now() - 10)]);
        retried_create(recent, &booted)
            .with_server_request_settle(Duration::from_secs(5))
            .create(&scope(), &bootstrap)
            .await
            .unwrap();
        assert_eq!(booted.count(), 3);
    }

    #[tokio::test]
    async fn delete_waits_until_the_server_is_gone_before_removing_ports() {
        let scope = scope();
        let key = scope.idempotency_key.as_str().to_string();
        let mut compute = MockCompute::new();
        compute
            .expect_servers_named()
            .returning(move |_| Ok(vec![server(&key, "ACTIVE")]));
        compute
            .expect_delete_server()
            .times(1)
            .returning(|_| Ok(()));
        let mut network = MockNetworking::new();
        network.expect_delete_port().never();
        // The mark of the request that made the server goes with it, the cluster's tag stays.
        let port = adopted_port(vec![
            "capi-rs-ns-demo".into(),
            server_requested_tag(unix_now() - 3),
        ]);
        network
            .expect_ports()
            .returning(move |_| Ok(vec![port.clone()]));
        network
            .expect_set_tags()
            .times(1)
            .withf(|_, id, tags| id == "port-1" && tags == ["capi-rs-ns-demo"])
            .returning(|_, _, _| Ok(()));
        let error = actuator(compute, network).delete(&scope).await.unwrap_err();
        assert_eq!(error.reason(), "DeletingServer");
    }

    #[tokio::test]
    async fn delete_keeps_the_ports_while_a_lost_server_request_may_still_reach_nova() {
        let deleted = Calls::default();
        let delete_with = |tags: Vec<String>| {
            let mut compute = MockCompute::new();
            compute.expect_servers_named().returning(|_| Ok(vec![]));
            let mut network = MockNetworking::new();
            let port = adopted_port(tags);
            network
                .expect_ports()
                .returning(move |_| Ok(vec![port.clone()]));
            let deleted = deleted.clone();
            network.expect_delete_port().returning(move |_| {
                deleted.answer(());
                Ok(())
            });
            actuator(compute, network)
        };
        let error = delete_with(vec![server_requested_tag(unix_now() - 3)])
            .delete(&scope())
            .await
            .unwrap_err();
        assert_eq!(error.reason(), "WaitingForEarlierServerRequest");
        assert_eq!(
            deleted.count(),
            0,
            "a port went while a server may still come"
        );

        delete_with(vec![server_requested_tag(unix_now() - 61)])
            .delete(&scope())
            .await
            .unwrap();
        assert_eq!(deleted.count(), 1);
    }
}
