//! The `AWSMachinePool` actuator: one Auto Scaling group per `MachinePool`, exactly once, and
//! only the instances the pool loop names ever leave it.
//!
//! - **One group.** The group is named after the pool's idempotency key (`capi-<MachinePool
//!   UID>`), which Auto Scaling keeps unique in a region: `create` looks the name up first and
//!   takes an `AlreadyExists` answer as the group a lost answer made. (moto replaces a group
//!   created twice under one name instead of refusing the second: the look-up first is what
//!   keeps it single there.) A group found by name or by `spec.providerID` is the pool's only if
//!   it carries the cluster's ownership tags and the pool's key.
//! - **Only named instances leave.** An instance leaves through
//!   `TerminateInstanceInAutoScalingGroup` with the desired capacity lowered with it, and only
//!   once the loop names it (after its `Machine` drained it). The processes that would pick
//!   instances on their own — `AZRebalance`, `ReplaceUnhealthy` — are suspended on every group,
//!   and no instance refresh is ever started: a rollout is the loop's surge and removals.
//! - **Rollouts.** Each model revision gets a launch template of its own ([`model`]); its
//!   instances carry the revision as a tag, which is what `update` reports per instance. An
//!   instance EC2 does not describe yet — it shows launches a while after Auto Scaling made
//!   them — is of the revision the tag of the template Auto Scaling says it launched from
//!   carries: reported of none, the loop would take it for outdated and surge to replace an
//!   instance it just asked for.
//! - **Deletion.** The group is scaled to zero, deleted once empty, then its templates and
//!   secrets; `Ok` only when all are gone.
//!
//! The scale set's provider ID is the group's ARN; an instance's is `aws:///<zone>/<id>`, as
//! for an `AWSMachine`.

pub mod model;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::{
    ActuatorError, BootstrapData, Found, InstanceState as LoopState, ModelRevision, PoolActuator,
    PoolInstance, PoolScope, ProviderStatus, ScaleSetReport,
};
use kube::ResourceExt;
use serde::Serialize;

use crate::api::{AWSCluster, AWSMachine, AWSMachinePool, Filter, InstanceState, SubnetType, Tags};
use crate::cloud::scaling::SUSPENDED_PROCESSES;
use crate::cloud::{Clients, CreateGroup, Group, GroupSize, GroupUpdate, Instance};
use crate::connector::Connector;
use crate::machine::{Ctx, addresses, instance_id_of, launch, provider_id};
use crate::naming::{ClusterNaming, IDEMPOTENCY_KEY_TAG};

/// The tag naming the `MachinePool` (`<namespace>/<name>`) on its group and instances.
pub const POOL_NAME_TAG: &str = "MachinePoolName";

/// How soon a group being emptied or deleted is looked at again.
const DELETE_POLL: Duration = Duration::from_secs(5);

/// The instance states of EC2 that are not gone yet.
const LIVE_STATES: [&str; 5] = ["pending", "running", "shutting-down", "stopping", "stopped"];

/// Reconciles `AWSMachinePool`s in the region and with the credentials of the scope's
/// `AWSCluster`, through a [`Connector`]. It reads nothing from the API server but what the
/// connector reads (an `identityRef` Secret).
pub struct AwsPoolActuator {
    connector: Arc<dyn Connector>,
}

/// What `exists` found, for `update` to converge without asking again.
#[derive(Clone, Debug)]
pub struct FoundGroup {
    /// The group.
    pub group: Group,
    /// Its instances as EC2 describes them.
    pub instances: Vec<Instance>,
    /// The model revision of each of the pool's launch templates, by ID, as the template's tag
    /// says; read only when EC2 does not describe an instance of the group yet.
    pub template_revisions: BTreeMap<String, String>,
}

/// One call for one pool: the machine context of the pool's launch settings (an `AWSMachine`
/// made of its launch template), and the group's name.
pub(crate) struct PoolCtx {
    pub(crate) machine: Ctx,
    pool: Arc<AWSMachinePool>,
}

impl PoolCtx {
    fn clients(&self) -> &Clients {
        &self.machine.clients
    }

    /// The group's name: the pool's idempotency key.
    fn group_name(&self) -> &str {
        &self.machine.key
    }

    /// The tags of the group, put on every instance it launches: the user's, the cluster's
    /// ownership, the node role, the pool's key and name, and the Kubernetes cloud provider's
    /// cluster tag.
    fn instance_tags(&self) -> Tags {
        launch::owned_tags(&self.machine, POOL_NAME_TAG)
    }

    /// Whether `tags` mark a group or an instance as this pool's.
    fn owns(&self, tags: &Tags) -> bool {
        self.machine
            .naming
            .owns(tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            && tags.get(IDEMPOTENCY_KEY_TAG) == Some(&self.machine.key)
    }
}

/// What the provider reports of a group in `AWSMachinePool.status`, beyond the contract.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupStatus<'a> {
    #[serde(rename = "launchTemplateID", skip_serializing_if = "Option::is_none")]
    launch_template_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_revision: Option<&'a str>,
}

/// The group name in an Auto Scaling group's ARN (`…:autoScalingGroupName/<name>`).
pub fn group_name_of(arn: &str) -> Option<&str> {
    arn.strip_prefix("arn:")?
        .rsplit_once(":autoScalingGroupName/")
        .map(|(_, name)| name)
        .filter(|name| !name.is_empty())
}

impl AwsPoolActuator {
    /// An actuator using `connector` for the clients of each pool's `AWSCluster`.
    pub fn new(connector: Arc<dyn Connector>) -> Self {
        Self { connector }
    }

    async fn context(
        &self,
        scope: &PoolScope<AWSMachinePool, AWSCluster>,
    ) -> Result<PoolCtx, ActuatorError> {
        let pool = &scope.infra_pool;
        let namespace = pool.namespace().unwrap_or_default();
        let cluster = scope.infra_cluster.clone().ok_or_else(|| {
            ActuatorError::requeue_after(
                Duration::from_secs(60),
                "WaitingForClusterInfrastructure",
                format!(
                    "the AWSCluster of pool {} does not exist, and its Auto Scaling group is \
                     reached through it: recreate the AWSCluster, or delete the group by hand \
                     and remove the finalizer",
                    pool.name_any()
                ),
            )
        })?;
        let cluster_name = Some(scope.machine_pool.spec.cluster_name.clone())
            .filter(|n| !n.is_empty())
            .or_else(|| capi_core::labels::cluster_name(&pool.metadata).map(str::to_string))
            .unwrap_or_else(|| scope.cluster.name_any());
        let clients = self.connector.connect(&cluster).await?;
        let mut infra = AWSMachine::new(&pool.name_any(), pool.machine_spec());
        infra.metadata.namespace = Some(namespace.clone());
        Ok(PoolCtx {
            machine: Ctx {
                clients,
                naming: ClusterNaming::new(&namespace, &cluster_name),
                api_server_port: crate::cluster::api_server_port(&scope.cluster),
                cluster,
                infra: Arc::new(infra),
                namespace,
                cluster_name,
                name: pool.name_any(),
                key: scope.idempotency_key.as_str().to_string(),
                control_plane: false,
                failure_domain: None,
                machine_version: scope.machine_pool.spec.template.spec.version.clone(),
            },
            pool: Arc::clone(pool),
        })
    }

    /// The pool's group: by the ARN in `spec.providerID`, else by its name.
    async fn find(&self, ctx: &PoolCtx) -> Result<Option<Group>, ActuatorError> {
        let recorded = ctx.pool.spec.provider_id.as_deref().and_then(group_name_of);
        let names = recorded
            .into_iter()
            .chain(std::iter::once(ctx.group_name()));
        let mut looked = BTreeSet::new();
        for name in names {
            if !looked.insert(name) {
                continue;
            }
            let found = ctx
                .clients()
                .scaling
                .group(name)
                .await
                .map_err(|e| ctx.clients().error(e))?;
            if let Some(group) = found {
                return ensure_ours(ctx, group).map(Some);
            }
        }
        Ok(None)
    }

    /// `group` with its instances as EC2 describes them.
    async fn described(&self, ctx: &PoolCtx, group: Group) -> Result<FoundGroup, ActuatorError> {
        let ids: Vec<String> = group.instances.iter().map(|i| i.id.clone()).collect();
        let mut instances = Vec::with_capacity(ids.len());
        for batch in ids.chunks(100) {
            instances.extend(
                ctx.clients()
                    .compute
                    .instances_by_id(batch)
                    .await
                    .map_err(|e| ctx.clients().error(e))?,
            );
        }
        // An instance EC2 does not describe yet is of the revision of the template it was
        // launched from, which carries it (a template is made for one revision, never changed).
        let undescribed = group
            .instances
            .iter()
            .any(|member| !instances.iter().any(|i: &Instance| i.id == member.id));
        let template_revisions = if undescribed {
            model::templates(ctx)
                .await?
                .into_iter()
                .filter_map(|t| Some((t.id, t.tags.get(model::REVISION_TAG)?.clone())))
                .collect()
        } else {
            BTreeMap::new()
        };
        Ok(FoundGroup {
            group,
            instances,
            template_revisions,
        })
    }

    /// Sends `update` to group `name`, unless it changes nothing.
    async fn update_group(
        &self,
        name: &str,
        ctx: &PoolCtx,
        update: GroupUpdate,
    ) -> Result<(), ActuatorError> {
        if update == GroupUpdate::default() {
            return Ok(());
        }
        ctx.clients()
            .scaling
            .update_group(name, &update)
            .await
            .map_err(|e| ctx.clients().error(e))
    }

    /// The group of this pool as it is now, described; waited for when not visible yet.
    async fn current(&self, ctx: &PoolCtx) -> Result<FoundGroup, ActuatorError> {
        let group = ctx
            .clients()
            .scaling
            .group(ctx.group_name())
            .await
            .map_err(|e| ctx.clients().error(e))?
            .ok_or_else(|| {
                ActuatorError::requeue_after(
                    Duration::from_secs(2),
                    "GroupNotVisibleYet",
                    format!(
                        "Auto Scaling group {} was created and is not described yet",
                        ctx.group_name()
                    ),
                )
            })?;
        let group = ensure_ours(ctx, group)?;
        self.described(ctx, group).await
    }
}

/// `group`, if it carries the cluster's ownership tags and the pool's key: a provider ID written
/// by hand, or a group another party named after the key, is never touched.
fn ensure_ours(ctx: &PoolCtx, group: Group) -> Result<Group, ActuatorError> {
    if ctx.owns(&group.tags) {
        return Ok(group);
    }
    Err(ActuatorError::invalid_configuration(
        "ScaleSetNotOwned",
        format!(
            "Auto Scaling group {} does not carry this cluster's ownership tags and this pool's \
             idempotency key: it is not this pool's and is left untouched; correct spec.providerID",
            group.name
        ),
    ))
}

/// The group's bounds and desired capacity for `capacity` (`None`: an autoscaler's, the group
/// holding `current`): the pool's bounds, widened to take the capacity — never narrowed below
/// what the group holds, which would have Auto Scaling terminate instances of its choosing.
fn size_for(pool: &AWSMachinePool, capacity: Option<u32>, current: u32) -> GroupSize {
    let held = capacity.unwrap_or(current);
    GroupSize {
        min: pool.spec.min_size.min(held),
        max: pool.spec.max_size.max(held),
        desired: capacity,
    }
}

/// The subnets the pool's instances launch in: `spec.subnets`, else the cluster's subnets of the
/// pool's type in its zones (`availabilityZones`, else the `MachinePool`'s failure domains,
/// else all).
async fn subnets(ctx: &PoolCtx, failure_domains: &[String]) -> Result<Vec<String>, ActuatorError> {
    let spec = &ctx.pool.spec;
    let mut ids = Vec::new();
    if !spec.subnets.is_empty() {
        for reference in &spec.subnets {
            let found =
                launch::resolve(&ctx.machine, reference, "subnet-id", launch::Kind::Subnet).await?;
            if found.is_empty() {
                return Err(ActuatorError::invalid_configuration(
                    "SubnetNotFound",
                    format!(
                        "no subnet matches spec.subnets entry {}",
                        launch::describe(reference)
                    ),
                ));
            }
            ids.extend(found);
        }
    } else {
        let zones = if spec.availability_zones.is_empty() {
            failure_domains
        } else {
            &spec.availability_zones
        };
        let kind = spec
            .availability_zone_subnet_type
            .unwrap_or(SubnetType::Private);
        let subnets = ctx
            .machine
            .cluster
            .status
            .as_ref()
            .and_then(|s| s.network_status.as_ref())
            .map(|n| n.subnets.as_slice())
            .unwrap_or_default();
        if subnets.is_empty() {
            return Err(ActuatorError::transient_message(
                "WaitingForSubnets",
                "the AWSCluster reports no subnet yet",
            ));
        }
        ids.extend(
            subnets
                .iter()
                .filter(|s| match kind {
                    SubnetType::Public => s.is_public,
                    SubnetType::Private => !s.is_public,
                    SubnetType::All => true,
                })
                .filter(|s| zones.is_empty() || zones.contains(&s.availability_zone))
                .map(|s| s.resource_id.clone()),
        );
        if ids.is_empty() {
            return Err(ActuatorError::invalid_configuration(
                "NoSubnetInZones",
                format!(
                    "the AWSCluster has no {} subnet in zones {zones:?}; change \
                     spec.availabilityZones or spec.availabilityZoneSubnetType, or name \
                     spec.subnets",
                    serde_json::to_value(kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                ),
            ));
        }
    }
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// What the loop records of `found`; `template` and `revision` when `update` or `create` knows
/// what new instances launch from.
///
/// An instance EC2 does not describe yet (EC2 shows a launch a while after Auto Scaling made it)
/// is of the revision of the template Auto Scaling launched it from, as that template's tag
/// says (`found.template_revisions`, or `template` itself): reported of no revision, it would
/// count as outdated, and the loop would surge to replace an instance it just asked for. One
/// launched from a template not found is reported of no revision.
fn report(
    found: &FoundGroup,
    template: Option<&str>,
    revision: Option<&ModelRevision>,
) -> Result<ScaleSetReport, ActuatorError> {
    let known = template.zip(revision.map(ModelRevision::as_str));
    let revision_of = |template: &str| {
        known
            .filter(|(id, _)| *id == template)
            .map(|(_, revision)| revision)
            .or_else(|| found.template_revisions.get(template).map(String::as_str))
    };
    let group = &found.group;
    let status = ProviderStatus::from_typed(&GroupStatus {
        launch_template_id: template.or(group.launch_template_id.as_deref()),
        model_revision: revision.map(ModelRevision::as_str),
    })
    .map_err(|e| ActuatorError::transient("ProviderStatusInvalid", e))?;
    let mut reported =
        ScaleSetReport::new(group.arn.clone(), group.desired).with_provider_status(status);
    for member in &group.instances {
        let described = found.instances.iter().find(|i| i.id == member.id);
        let zone = member
            .zone
            .clone()
            .or_else(|| described.and_then(|i| i.zone.clone()))
            .unwrap_or_default();
        let state = instance_state(member, described);
        let mut instance = PoolInstance::new(provider_id(&zone, &member.id), &member.id, state);
        let launched = match described {
            Some(described) => {
                instance = instance.with_addresses(addresses(described));
                described.tags.get(model::REVISION_TAG).map(String::as_str)
            }
            None => member.launch_template_id.as_deref().and_then(revision_of),
        };
        if let Some(revision) = launched {
            instance = instance.from_revision(ModelRevision::new(revision));
        }
        if !zone.is_empty() {
            instance = instance.in_failure_domain(zone);
        }
        if member.is_leaving() || described.is_some_and(Instance::is_gone) {
            instance = instance.terminating();
        }
        reported = reported.with_instance(instance);
    }
    Ok(reported)
}

/// The loop's state of an instance of a group.
fn instance_state(member: &crate::cloud::GroupInstance, described: Option<&Instance>) -> LoopState {
    let failed = |reason: &str, message: String| LoopState::Failed {
        reason: reason.to_string(),
        message,
    };
    if member.unhealthy {
        return failed(
            "InstanceUnhealthy",
            format!("Auto Scaling reports instance {} unhealthy", member.id),
        );
    }
    if member.lifecycle == "Standby" {
        return failed(
            "InstanceOnStandby",
            format!(
                "instance {} is on standby; exit standby, or delete its Machine to replace it",
                member.id
            ),
        );
    }
    match described.and_then(|i| i.state) {
        Some(InstanceState::Running) if member.lifecycle == "InService" => LoopState::Running,
        Some(InstanceState::Stopping | InstanceState::Stopped) => failed(
            "InstanceStopped",
            format!(
                "instance {} is stopped; start it, or delete its Machine to replace it",
                member.id
            ),
        ),
        _ => LoopState::Provisioning,
    }
}

/// The templates an instance of `found` was launched from in the last [`model::GRACE`]; `None`
/// when EC2 does not describe an instance, or a recent one does not say which (then no
/// template may be deleted).
fn recently_launched(found: &FoundGroup) -> Option<BTreeSet<String>> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    let since = i64::try_from(now.saturating_sub(model::GRACE.as_secs())).ok()?;
    let mut recent = BTreeSet::new();
    for member in &found.group.instances {
        let described = found.instances.iter().find(|i| i.id == member.id)?;
        // An instance whose launch EC2 does not date counts as recent.
        if described
            .launch_time
            .is_some_and(|launched| launched < since)
        {
            continue;
        }
        recent.insert(described.tags.get(model::LAUNCHED_FROM_TAG)?.clone());
    }
    Some(recent)
}

/// Suspends the processes of [`SUSPENDED_PROCESSES`] that are not on `group`.
async fn suspend_processes(ctx: &PoolCtx, group: &Group) -> Result<(), ActuatorError> {
    let missing: Vec<String> = SUSPENDED_PROCESSES
        .iter()
        .filter(|p| !group.suspended.iter().any(|s| s == *p))
        .map(|p| (*p).to_string())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    ctx.clients()
        .scaling
        .suspend_processes(&group.name, &missing)
        .await
        .map_err(|e| ctx.clients().error(e))
}

#[async_trait]
impl PoolActuator<AWSMachinePool, AWSCluster> for AwsPoolActuator {
    /// The group and its instances as Auto Scaling and EC2 described them.
    type ScaleSet = FoundGroup;

    async fn exists(
        &self,
        scope: &PoolScope<AWSMachinePool, AWSCluster>,
    ) -> Result<Option<Found<FoundGroup, ScaleSetReport>>, ActuatorError> {
        let ctx = self.context(scope).await?;
        let Some(group) = self.find(&ctx).await? else {
            return Ok(None);
        };
        let found = self.described(&ctx, group).await?;
        Ok(Some(Found::with(report(&found, None, None)?, found)))
    }

    async fn create(
        &self,
        scope: &PoolScope<AWSMachinePool, AWSCluster>,
        bootstrap: &BootstrapData,
    ) -> Result<ScaleSetReport, ActuatorError> {
        let ctx = self.context(scope).await?;
        // Looked up first: a create whose answer was lost made the group already.
        if let Some(group) = self.find(&ctx).await? {
            return report(&self.described(&ctx, group).await?, None, None);
        }
        let templates = model::templates(&ctx).await?;
        let template = model::ensure(&ctx, &templates, &scope.revision, bootstrap).await?;
        let request = CreateGroup {
            name: ctx.group_name().to_string(),
            launch_template_id: template.id.clone(),
            size: size_for(
                &ctx.pool,
                Some(scope.size.capacity.unwrap_or(ctx.pool.spec.min_size)),
                0,
            ),
            subnet_ids: subnets(&ctx, &scope.machine_pool.spec.failure_domains).await?,
            tags: ctx.instance_tags(),
            capacity_rebalance: ctx.pool.spec.capacity_rebalance,
        };
        match ctx.clients().scaling.create_group(&request).await {
            Ok(()) => tracing::info!(group = %request.name, "created an Auto Scaling group"),
            Err(error) if error.code.as_deref() == Some("AlreadyExists") => {}
            Err(error) => return Err(ctx.clients().error(error)),
        }
        let found = self.current(&ctx).await?;
        suspend_processes(&ctx, &found.group).await?;
        report(&found, Some(&template.id), Some(&scope.revision))
    }

    async fn update(
        &self,
        scope: &PoolScope<AWSMachinePool, AWSCluster>,
        found: Found<FoundGroup, ScaleSetReport>,
        bootstrap: Option<BootstrapData>,
    ) -> Result<ScaleSetReport, ActuatorError> {
        let ctx = self.context(scope).await?;
        let found = found.instance;
        let group = &found.group;
        // What new instances launch from, and where, first: whatever the capacity launches is of
        // the current model. Should either not be known (an AMI not found, the cluster's subnets
        // not reported yet), the size is done all the same — no drained machine waits, no
        // scale-up is held back — and the error reported after.
        let (templates, template) = match &bootstrap {
            None => (Vec::new(), None),
            Some(bootstrap) => match model::templates(&ctx).await {
                Ok(templates) => {
                    let template =
                        model::ensure(&ctx, &templates, &scope.revision, bootstrap).await;
                    (templates, Some(template))
                }
                Err(error) => (Vec::new(), Some(Err(error))),
            },
        };
        let subnet_ids = subnets(&ctx, &scope.machine_pool.spec.failure_domains).await;
        let mut current_subnets = group.subnet_ids.clone();
        current_subnets.sort();
        // Auto Scaling may refuse a template or subnets itself (an instance profile that does
        // not exist): reported after the size too.
        let switched = self
            .update_group(
                &group.name,
                &ctx,
                GroupUpdate {
                    launch_template_id: template
                        .as_ref()
                        .and_then(|t| t.as_ref().ok())
                        .filter(|t| group.launch_template_id.as_deref() != Some(t.id.as_str()))
                        .map(|t| t.id.clone()),
                    subnet_ids: subnet_ids
                        .as_ref()
                        .ok()
                        .filter(|ids| **ids != current_subnets)
                        .cloned(),
                    ..GroupUpdate::default()
                },
            )
            .await;
        // The named instances removed, the capacity set.
        let leaving: Vec<&str> = scope
            .size
            .remove
            .iter()
            .filter_map(|provider_id| instance_id_of(provider_id))
            .filter(|id| {
                group
                    .instances
                    .iter()
                    .any(|m| m.id == *id && !m.is_leaving())
            })
            .collect();
        let after = group
            .desired
            .saturating_sub(u32::try_from(leaving.len()).unwrap_or(u32::MAX));
        // While the current model cannot be launched and the group launches another revision, a
        // surge would launch outdated instances for the loop to replace again: none is added.
        let launches_current = match &template {
            Some(Ok(_)) | None => switched.is_ok(),
            Some(Err(_)) => templates.iter().any(|t| {
                group.launch_template_id.as_deref() == Some(t.id.as_str())
                    && t.tags.get(model::REVISION_TAG).map(String::as_str)
                        == Some(scope.revision.as_str())
            }),
        };
        let capacity = match launches_current {
            true => scope.size.capacity,
            false => scope.size.capacity.map(|c| c.min(after)),
        };
        let size = size_for(&ctx.pool, capacity, after);
        if !leaving.is_empty() && after < group.min {
            // Auto Scaling refuses to take the desired capacity below the group's lower bound:
            // the bound goes down first (which changes nothing else).
            self.update_group(
                &group.name,
                &ctx,
                GroupUpdate {
                    size: Some(GroupSize {
                        min: size.min.min(after),
                        max: group.max,
                        desired: None,
                    }),
                    ..GroupUpdate::default()
                },
            )
            .await?;
        }
        for id in &leaving {
            ctx.clients()
                .scaling
                .terminate_instance(id)
                .await
                .map_err(|e| ctx.clients().error(e))?;
            tracing::info!(instance = %id, group = %group.name, "removed an instance");
        }
        let resized = size.min != group.min
            || size.max != group.max
            || size.desired.is_some_and(|d| d != group.desired)
            || !leaving.is_empty();
        let rebalance = ctx.pool.spec.capacity_rebalance;
        self.update_group(
            &group.name,
            &ctx,
            GroupUpdate {
                size: resized.then_some(size),
                capacity_rebalance: (rebalance != group.capacity_rebalance).then_some(rebalance),
                ..GroupUpdate::default()
            },
        )
        .await?;
        suspend_processes(&ctx, group).await?;
        let missing: Tags = ctx
            .instance_tags()
            .into_iter()
            .filter(|(k, v)| group.tags.get(k) != Some(v))
            .collect();
        if !missing.is_empty() {
            ctx.clients()
                .scaling
                .tag_group(&group.name, &missing)
                .await
                .map_err(|e| ctx.clients().error(e))?;
        }
        switched?;
        subnet_ids?;
        let template = template.transpose()?;
        let now = self.current(&ctx).await?;
        if let (Some(template), Some(recent)) = (&template, recently_launched(&now)) {
            model::sweep(&ctx, &templates, template, &recent).await?;
        }
        report(
            &now,
            template.as_ref().map(|t| t.id.as_str()),
            template.is_some().then_some(&scope.revision),
        )
    }

    async fn delete(
        &self,
        scope: &PoolScope<AWSMachinePool, AWSCluster>,
    ) -> Result<(), ActuatorError> {
        let ctx = self.context(scope).await?;
        if let Some(group) = self.find(&ctx).await? {
            let at_zero = group.desired == 0 && group.min == 0;
            let on_standby = group
                .instances
                .iter()
                .filter(|m| m.lifecycle.starts_with("Standby"))
                .count();
            let settled = group
                .instances
                .iter()
                .all(|m| m.is_leaving() || m.lifecycle.starts_with("Standby"));
            if group.deleting {
                // Auto Scaling is deleting it already.
            } else if !at_zero {
                ctx.clients()
                    .scaling
                    .update_group(
                        &group.name,
                        &GroupUpdate {
                            size: Some(GroupSize {
                                min: 0,
                                max: group.max,
                                desired: Some(0),
                            }),
                            ..GroupUpdate::default()
                        },
                    )
                    .await
                    .map_err(|e| ctx.clients().error(e))?;
            } else if group.instances.is_empty() || (settled && on_standby > 0) {
                // Empty, or holding only instances on standby, which a capacity of zero keeps:
                // the group goes with them.
                ctx.clients()
                    .scaling
                    .delete_group(&group.name)
                    .await
                    .map_err(|e| ctx.clients().error(e))?;
                tracing::info!(group = %group.name, on_standby, "deleting the Auto Scaling group");
            }
            return Err(ActuatorError::requeue_after(
                DELETE_POLL,
                "DeletingScaleSet",
                format!(
                    "waiting for Auto Scaling group {} ({} instances) to be deleted",
                    group.name,
                    group.instances.len()
                ),
            ));
        }
        // The group is gone: instances of the pool it left behind (terminated with it, or
        // launched by a group another party deleted) go before the templates they need.
        let left = ctx
            .clients()
            .compute
            .instances(&[
                Filter {
                    name: format!("tag:{IDEMPOTENCY_KEY_TAG}"),
                    values: vec![ctx.machine.key.clone()],
                },
                Filter {
                    name: "instance-state-name".into(),
                    values: LIVE_STATES.iter().map(|s| (*s).to_string()).collect(),
                },
            ])
            .await
            .map_err(|e| ctx.clients().error(e))?;
        let left: Vec<Instance> = left.into_iter().filter(|i| ctx.owns(&i.tags)).collect();
        if !left.is_empty() {
            for instance in left.iter().filter(|i| !i.is_gone()) {
                ctx.clients()
                    .compute
                    .terminate_instance(&instance.id)
                    .await
                    .map_err(|e| ctx.clients().error(e))?;
            }
            return Err(ActuatorError::requeue_after(
                DELETE_POLL,
                "TerminatingInstances",
                format!(
                    "waiting for {} instances of the pool to be terminated",
                    left.len()
                ),
            ));
        }
        model::release(&ctx).await
    }
}

#[cfg(test)]
mod tests;
