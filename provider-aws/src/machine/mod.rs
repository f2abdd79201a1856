//! The `AWSMachine` actuator: one EC2 instance per Machine, exactly once.
//!
//! How a second instance is ruled out, each step covering what the one before cannot:
//!
//! 1. **Found before launched.** `exists` and `create` look the instance up by its provider ID,
//!    else by the tag `capi-rs.dev/idempotency-key=capi-<Machine UID>` that `RunInstances` puts
//!    on it at creation (`TagSpecifications`: there is no moment when it exists untagged).
//! 2. **A replayed launch is the same launch.** `RunInstances` carries `ClientToken =` the
//!    idempotency key: when the answer to a launch was lost and the lookup cannot see the
//!    instance yet (EC2 is eventually consistent), the replay answers with the first instance.
//!    A replay whose parameters changed in between (`IdempotentParameterMismatch`) looks the
//!    instance up again and waits for it.
//! 3. **Not yet visible is not gone** ([`visibility`]): an instance this process launched that
//!    `DescribeInstances` does not show yet is waited for (bounded), never reported lost or
//!    taken as deleted.
//!
//! Every call reaches EC2 in the region and with the credentials of the scope's `AWSCluster`.
//! `update` converges the instance `exists` found in the same reconcile (handed over in
//! [`Found`]) and never looks it up again.
//!
//! The provider ID is `aws:///<zone>/<instance-id>`, what the AWS cloud provider gives the node.
//! Control-plane instances join the API server's target group once running and leave it before
//! they are terminated. Deletion terminates and waits, with RequeueAfter, until EC2 says
//! `terminated`.
//!
//! Cloud-init bootstrap data reaches the instance through Secrets Manager, never its user data
//! ([`bootstrap_secrets`]); the secrets go once the Machine has a node or the instance is gone,
//! and what is left once a deleted machine's instance is.

pub mod bootstrap_secrets;
pub(crate) mod launch;
pub mod user_data;
pub mod visibility;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::api::{MachineAddress, MachineAddressType};
use capi_core::{
    Actuator, ActuatorError, BootstrapData, Found, ImmutableChange, InstanceState as LoopState,
    MachineInstance, MachineScope, ProviderStatus, UpdateOutcome,
};
use kube::ResourceExt;
use serde::Serialize;

use crate::api::{AWSCluster, AWSMachine, Filter, InstanceState};
use crate::cloud::{Clients, CloudError, Instance};
use crate::connector::Connector;
use crate::naming::{ClusterNaming, IDEMPOTENCY_KEY_TAG, MACHINE_NAME_TAG};

pub use launch::{
    DEFAULT_IMAGE_LOOKUP_BASE_OS, DEFAULT_IMAGE_LOOKUP_FORMAT, DEFAULT_IMAGE_LOOKUP_ORG,
    unknown_instance_type,
};
use visibility::Visibility;

/// The provider ID prefix: `aws:///<zone>/<instance-id>`.
pub const PROVIDER_ID_PREFIX: &str = "aws:///";

/// How soon a terminating instance is looked at again.
const TERMINATE_POLL: Duration = Duration::from_secs(5);

/// The instance states a lookup by idempotency key considers: all but `terminated`.
const LIVE_STATES: [&str; 5] = ["pending", "running", "shutting-down", "stopping", "stopped"];

/// The instance ID in a provider ID (`aws:///<zone>/<id>`, or CAPA's older `aws:////<id>`).
pub fn instance_id_of(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix("aws://")
        .and_then(|rest| rest.rsplit('/').next())
        .filter(|id| id.starts_with("i-"))
}

/// The addresses of `instance`: private and public, addresses and DNS names, those it has.
pub(crate) fn addresses(instance: &Instance) -> Vec<MachineAddress> {
    [
        (MachineAddressType::InternalIp, &instance.private_ip),
        (MachineAddressType::ExternalIp, &instance.public_ip),
        (MachineAddressType::InternalDns, &instance.private_dns),
        (MachineAddressType::ExternalDns, &instance.public_dns),
    ]
    .into_iter()
    .filter_map(|(type_, address)| {
        address.as_ref().map(|address| MachineAddress {
            type_,
            address: address.clone(),
        })
    })
    .collect()
}

/// The provider ID of instance `id` in `zone`.
pub fn provider_id(zone: &str, id: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{zone}/{id}")
}

/// Reconciles `AWSMachine`s in the region and with the credentials of the scope's `AWSCluster`,
/// through a [`Connector`]. It reads nothing from the API server but what the connector reads
/// (an `identityRef` Secret).
pub struct AwsMachineActuator {
    pub(crate) connector: Arc<dyn Connector>,
    /// This process's launches, so that an instance EC2 does not show yet is waited for.
    visibility: Visibility,
}

/// One call for one machine.
pub(crate) struct Ctx {
    pub(crate) clients: Clients,
    /// The machine's `AWSCluster`, as the scope holds it.
    pub(crate) cluster: Arc<AWSCluster>,
    pub(crate) infra: Arc<AWSMachine>,
    pub(crate) naming: ClusterNaming,
    pub(crate) namespace: String,
    pub(crate) cluster_name: String,
    /// The `AWSMachine`'s name.
    pub(crate) name: String,
    pub(crate) key: String,
    pub(crate) control_plane: bool,
    pub(crate) failure_domain: Option<String>,
    pub(crate) machine_version: Option<String>,
    pub(crate) api_server_port: u16,
}

/// What a lookup of the machine's instance found.
enum Lookup {
    /// The instance, in any state but `terminated`.
    Instance(Box<Instance>),
    /// Nothing is visible, but this process launched it less than [`visibility::GRACE`] ago.
    NotVisibleYet(String),
    /// Nothing.
    Nothing,
}

/// What the provider reports of an instance in `AWSMachine.status`, beyond the contract.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InstanceStatus<'a> {
    #[serde(rename = "instanceID")]
    instance_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance_state: Option<InstanceState>,
    interruptible: bool,
}

impl AwsMachineActuator {
    /// An actuator using `connector` for the clients of each machine's `AWSCluster`.
    pub fn new(connector: Arc<dyn Connector>) -> Self {
        Self {
            connector,
            visibility: Visibility::default(),
        }
    }

    async fn context(
        &self,
        scope: &MachineScope<AWSMachine, AWSCluster>,
    ) -> Result<Ctx, ActuatorError> {
        let infra = &scope.infra_machine;
        let namespace = infra.namespace().unwrap_or_default();
        let cluster_name = scope.cluster_name()?;
        let cluster = Arc::clone(scope.infra_cluster()?);
        let clients = self.connector.connect(&cluster).await?;
        let control_plane = scope.is_control_plane();
        let api_server_port = crate::cluster::api_server_port(&scope.cluster);
        Ok(Ctx {
            clients,
            naming: ClusterNaming::new(&namespace, &cluster_name),
            cluster,
            infra: Arc::clone(infra),
            namespace,
            cluster_name,
            name: infra.name_any(),
            key: scope.idempotency_key.as_str().to_string(),
            control_plane,
            failure_domain: scope.machine.spec.failure_domain.clone(),
            machine_version: scope.machine.spec.version.clone(),
            api_server_port,
        })
    }

    /// The recorded instance ID: `spec.providerID`, else `status.instanceID`.
    fn recorded_id(infra: &AWSMachine) -> Option<String> {
        infra
            .spec
            .provider_id
            .as_deref()
            .and_then(instance_id_of)
            .map(str::to_string)
            .or_else(|| infra.status.as_ref().and_then(|s| s.instance_id.clone()))
    }

    /// The machine's instance: by recorded ID, else by idempotency key.
    async fn find(&self, ctx: &Ctx) -> Result<Lookup, ActuatorError> {
        let recorded = Self::recorded_id(&ctx.infra);
        if let Some(id) = &recorded {
            let found = ctx
                .clients
                .compute
                .instances_by_id(std::slice::from_ref(id))
                .await
                .map_err(|e| ctx.clients.error(e))?;
            if let Some(instance) = found.into_iter().next() {
                self.visibility.seen(id);
                // EC2 shows a terminated instance for a while; it is gone all the same.
                if instance.state == Some(InstanceState::Terminated) {
                    return Ok(Lookup::Nothing);
                }
                Self::ensure_ours(ctx, &instance)?;
                return Ok(Lookup::Instance(Box::new(instance)));
            }
        }
        if let Some(instance) = self.by_key(ctx).await? {
            self.visibility.seen(&ctx.key);
            return Ok(Lookup::Instance(Box::new(instance)));
        }
        let pending = recorded
            .iter()
            .chain(std::iter::once(&ctx.key))
            .find(|name| self.visibility.pending(name));
        Ok(match pending {
            Some(name) => Lookup::NotVisibleYet(name.clone()),
            None => Lookup::Nothing,
        })
    }

    /// An instance found by a recorded ID — `spec.providerID` and `status.instanceID` are
    /// written by whoever may write the `AWSMachine`, a tenant among them — is this machine's
    /// only if it carries this cluster's ownership tags and this machine's idempotency key.
    /// Anything else is an invalid configuration naming what is missing, and is never touched:
    /// not updated, not deregistered, not terminated.
    fn ensure_ours(ctx: &Ctx, instance: &Instance) -> Result<(), ActuatorError> {
        let tags = instance.tags.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let missing = if !ctx.naming.owns(tags) {
            "this cluster's ownership tags"
        } else if !Self::named_for(ctx, instance) {
            "this machine's name tag"
        } else if instance.tags.get(IDEMPOTENCY_KEY_TAG) != Some(&ctx.key) {
            "this machine's idempotency key tag"
        } else {
            return Ok(());
        };
        Err(ActuatorError::invalid_configuration(
            "InstanceNotOwned",
            format!(
                "instance {} (from spec.providerID or status.instanceID) does not carry {missing}: \
                 it is not this machine's and is left untouched; correct spec.providerID",
                instance.id
            ),
        ))
    }

    /// Whether `instance` was made for a machine of this namespace and name (which a move keeps).
    fn named_for(ctx: &Ctx, instance: &Instance) -> bool {
        instance.tags.get(MACHINE_NAME_TAG).map(String::as_str)
            == Some(format!("{}/{}", ctx.namespace, ctx.name).as_str())
    }

    /// The live instance of this cluster tagged with the machine's name and idempotency key (the
    /// oldest, should there ever be more than one).
    async fn by_key(&self, ctx: &Ctx) -> Result<Option<Instance>, ActuatorError> {
        let mut found = ctx
            .clients
            .compute
            .instances(&[
                Filter {
                    name: format!("tag:{IDEMPOTENCY_KEY_TAG}"),
                    values: vec![ctx.key.clone()],
                },
                Filter {
                    name: "instance-state-name".into(),
                    values: LIVE_STATES.iter().map(|s| (*s).to_string()).collect(),
                },
            ])
            .await
            .map_err(|e| ctx.clients.error(e))?;
        // The key is recorded on an object a tenant may write (and templates may copy): only an
        // instance of this cluster, made for a machine of this name, is adopted under it.
        found.retain(|i| {
            ctx.naming
                .owns(i.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                && Self::named_for(ctx, i)
        });
        if found.len() > 1 {
            tracing::warn!(
                key = %ctx.key,
                instances = ?found.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
                "more than one instance carries this machine's idempotency key; using the oldest"
            );
        }
        found.sort_by(|a, b| (a.launch_time, &a.id).cmp(&(b.launch_time, &b.id)));
        Ok(found.into_iter().next())
    }

    /// An instance this process launched is not visible yet: look again soon.
    fn not_visible(name: &str) -> ActuatorError {
        ActuatorError::requeue_after(
            visibility::RECHECK,
            "InstanceNotVisibleYet",
            format!("{name} was launched moments ago and EC2 does not show it yet"),
        )
    }

    /// What the loop records of `instance`.
    fn report(instance: &Instance) -> Result<MachineInstance, ActuatorError> {
        let zone = instance.zone.clone().unwrap_or_default();
        let addresses = addresses(instance);
        let reason = instance
            .state_reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        let state = match instance.state {
            None | Some(InstanceState::Pending) => LoopState::Provisioning,
            Some(InstanceState::Running) => LoopState::Running,
            Some(InstanceState::ShuttingDown | InstanceState::Terminated) => LoopState::Failed {
                reason: "InstanceTerminated".into(),
                message: format!(
                    "instance {} was terminated outside Cluster API{reason}; delete the Machine \
                     to replace it",
                    instance.id
                ),
            },
            Some(InstanceState::Stopping | InstanceState::Stopped) => LoopState::Failed {
                reason: "InstanceStopped".into(),
                message: format!(
                    "instance {} is stopped{reason}; start it, or delete the Machine to replace it",
                    instance.id
                ),
            },
        };
        let status = ProviderStatus::from_typed(&InstanceStatus {
            instance_id: &instance.id,
            instance_state: instance.state,
            interruptible: instance.spot,
        })
        .map_err(|e| ActuatorError::transient("ProviderStatusInvalid", e))?;
        let mut reported = MachineInstance::new(provider_id(&zone, &instance.id), addresses, state)
            .with_provider_status(status);
        if !zone.is_empty() {
            reported = reported.in_failure_domain(zone);
        }
        Ok(reported)
    }

    /// A launch refused with `IdempotentParameterMismatch`: the token launched an instance
    /// with other parameters (the spec or the looked-up AMI changed between two attempts).
    /// That instance is this machine's: found by key, or waited for.
    async fn launched_before(&self, ctx: &Ctx) -> Result<MachineInstance, ActuatorError> {
        match self.by_key(ctx).await? {
            Some(instance) => Self::report(&instance),
            None => Err(Self::not_visible(&ctx.key)),
        }
    }

    /// Converges what may change on a running instance; returns the immutable differences.
    async fn converge(
        &self,
        ctx: &Ctx,
        instance: &Instance,
    ) -> Result<Vec<ImmutableChange>, ActuatorError> {
        let wanted_tags = launch::tags(ctx);
        let missing: crate::api::Tags = wanted_tags
            .into_iter()
            .filter(|(k, v)| instance.tags.get(k) != Some(v))
            .collect();
        if !missing.is_empty() {
            ctx.clients
                .compute
                .create_tags(&instance.id, &missing)
                .await
                .map_err(|e| ctx.clients.error(e))?;
        }
        let mut groups = launch::security_groups(ctx).await?;
        let mut current = instance.security_group_ids.clone();
        groups.sort();
        current.sort();
        if groups != current && !instance.is_gone() {
            ctx.clients
                .compute
                .set_security_groups(&instance.id, &groups)
                .await
                .map_err(|e| ctx.clients.error(e))?;
        }
        if let Some(target_group) = launch::target_group(ctx)
            && instance.state == Some(InstanceState::Running)
        {
            let registered = ctx
                .clients
                .load_balancing
                .registered_instances(&target_group)
                .await
                .map_err(|e| ctx.clients.error(e))?;
            if !registered.contains(&instance.id) {
                ctx.clients
                    .load_balancing
                    .register_instance(&target_group, &instance.id, ctx.api_server_port)
                    .await
                    .map_err(|e| ctx.clients.error(e))?;
            }
        }
        Ok(immutable_changes(ctx, instance))
    }
}

fn immutable_changes(ctx: &Ctx, instance: &Instance) -> Vec<ImmutableChange> {
    let spec = &ctx.infra.spec;
    let mut changes = Vec::new();
    let mut compare = |field: &str, current: Option<&str>, desired: Option<&str>| {
        if let Some(desired) = desired
            && current != Some(desired)
        {
            changes.push(ImmutableChange {
                field: field.to_string(),
                current: current.unwrap_or("(none)").to_string(),
                desired: desired.to_string(),
            });
        }
    };
    compare(
        "spec.instanceType",
        Some(instance.instance_type.as_str()),
        Some(spec.instance_type.as_str()),
    );
    compare(
        "spec.ami.id",
        instance.image_id.as_deref(),
        spec.ami.as_ref().and_then(|a| a.id.as_deref()),
    );
    compare(
        "spec.sshKeyName",
        instance.key_name.as_deref(),
        launch::key_name(ctx).as_deref(),
    );
    compare(
        "spec.subnet.id",
        instance.subnet_id.as_deref(),
        spec.subnet.as_ref().and_then(|s| s.id.as_deref()),
    );
    changes
}

#[async_trait]
impl Actuator<AWSMachine, AWSCluster> for AwsMachineActuator {
    /// The instance as `DescribeInstances` answered, for `update` to converge without asking
    /// again.
    type Instance = Box<Instance>;

    async fn exists(
        &self,
        scope: &MachineScope<AWSMachine, AWSCluster>,
    ) -> Result<Option<Found<Box<Instance>>>, ActuatorError> {
        let ctx = self.context(scope).await?;
        match self.find(&ctx).await? {
            Lookup::Instance(instance) => Ok(Some(Found::with(Self::report(&instance)?, instance))),
            // With nothing recorded, "not found" lets `create` replay the launch: its token
            // answers with the first instance.
            Lookup::NotVisibleYet(_) if Self::recorded_id(&ctx.infra).is_none() => Ok(None),
            Lookup::NotVisibleYet(name) => Err(Self::not_visible(&name)),
            Lookup::Nothing => Ok(None),
        }
    }

    async fn create(
        &self,
        scope: &MachineScope<AWSMachine, AWSCluster>,
        bootstrap: &BootstrapData,
    ) -> Result<MachineInstance, ActuatorError> {
        let ctx = self.context(scope).await?;
        if let Some(instance) = self.by_key(&ctx).await? {
            return Self::report(&instance);
        }
        let request = launch::plan(&ctx, bootstrap).await?;
        let answer = ctx.clients.compute.run_instance(&request).await;
        // Remembered once EC2 has the request: a launch answered, or one whose answer never came
        // (it may have happened). A launch EC2 refused made nothing, and a call abandoned before
        // it was answered belongs to a process that is going away.
        if answer
            .as_ref()
            .is_err_and(|e| e.class() == crate::cloud::ErrorClass::Transient)
        {
            self.visibility.launched(&ctx.key);
        }
        match answer {
            Ok(instance) => {
                self.visibility.launched(&ctx.key);
                self.visibility.launched(&instance.id);
                tracing::info!(instance = %instance.id, key = %ctx.key, "launched an instance");
                Self::report(&instance)
            }
            Err(error) if error.code.as_deref() == Some("IdempotentParameterMismatch") => {
                self.launched_before(&ctx).await
            }
            Err(error) if error.code.as_deref() == Some("InvalidInstanceType") => {
                Err(launch::unknown_instance_type(&request.instance_type))
            }
            Err(error) => Err(ctx.clients.error(error)),
        }
    }

    async fn update(
        &self,
        scope: &MachineScope<AWSMachine, AWSCluster>,
        found: Found<Box<Instance>>,
    ) -> Result<UpdateOutcome, ActuatorError> {
        let ctx = self.context(scope).await?;
        let immutable_changes = self.converge(&ctx, &found.instance).await?;
        let node_registered = scope
            .machine
            .status
            .as_ref()
            .is_some_and(|s| s.node_ref.is_some());
        bootstrap_secrets::release_when_done(&ctx, &found.instance, node_registered).await?;
        Ok(UpdateOutcome {
            instance: found.reported,
            immutable_changes,
        })
    }

    async fn delete(
        &self,
        scope: &MachineScope<AWSMachine, AWSCluster>,
    ) -> Result<(), ActuatorError> {
        let ctx = self.context(scope).await?;
        let instance = match self.find(&ctx).await? {
            Lookup::Instance(instance) => *instance,
            // Deleting now would leave it behind once it shows up.
            Lookup::NotVisibleYet(name) => return Err(Self::not_visible(&name)),
            Lookup::Nothing => {
                // The instance is gone: what it was given, or what a launch that never
                // happened left, goes before the machine does.
                bootstrap_secrets::release(&ctx).await?;
                return Ok(());
            }
        };
        if let Some(target_group) = launch::target_group(&ctx) {
            ctx.clients
                .load_balancing
                .deregister_instance(&target_group, &instance.id, ctx.api_server_port)
                .await
                .map_err(|e| ctx.clients.error(e))?;
        }
        if instance.state != Some(InstanceState::ShuttingDown) {
            ctx.clients
                .compute
                .terminate_instance(&instance.id)
                .await
                .map_err(|e: CloudError| ctx.clients.error(e))?;
            tracing::info!(instance = %instance.id, "terminating the instance");
        }
        Err(ActuatorError::requeue_after(
            TERMINATE_POLL,
            "Terminating",
            format!("waiting for instance {} to be terminated", instance.id),
        ))
    }
}

#[cfg(test)]
mod tests;
