//! What a machine's instance is launched with, from its `AWSMachine`, its `Machine` and its
//! `AWSCluster`: the AMI (named, or looked up by CAPA's name format), the subnet (named, or a
//! subnet of the cluster in the Machine's failure domain), the security groups (the cluster's for
//! the machine's role and the additional ones), the user data (a script fetching the data from
//! Secrets Manager: [`super::bootstrap_secrets`]) and the tags.

use capi_core::{ActuatorError, BootstrapData};

use super::{Ctx, bootstrap_secrets, user_data};
use crate::api::{
    AwsResourceReference, Filter, LoadBalancerType, SecurityGroupRole, SubnetStatus, Tags,
};
use crate::cloud::{Image, RunInstance};
use crate::naming::{
    IDEMPOTENCY_KEY_TAG, KUBERNETES_CLUSTER_TAG_PREFIX, MACHINE_NAME_TAG, OWNED, instance_role,
};

/// CAPA's AMI name format.
pub const DEFAULT_IMAGE_LOOKUP_FORMAT: &str = "capa-ami-{{.BaseOS}}-?{{.K8sVersion}}-*";
/// The AWS account that publishes CAPA's AMIs.
pub const DEFAULT_IMAGE_LOOKUP_ORG: &str = "258751437250";
/// The base OS of the looked-up AMIs.
pub const DEFAULT_IMAGE_LOOKUP_BASE_OS: &str = "ubuntu-24.04";

fn filter(name: &str, values: &[&str]) -> Filter {
    Filter {
        name: name.to_string(),
        values: values.iter().map(|v| (*v).to_string()).collect(),
    }
}

/// The instance for `ctx`, ready for `RunInstances`.
pub(super) async fn plan(
    ctx: &Ctx,
    bootstrap: &BootstrapData,
) -> Result<RunInstance, ActuatorError> {
    let spec = &ctx.infra.spec;
    let secure = bootstrap_secrets::applies(&ctx.infra, bootstrap.format());
    let plain_user_data =
        if secure {
            None
        } else {
            Some(user_data::encode(bootstrap).map_err(|e| {
                ActuatorError::invalid_configuration("UserDataTooLarge", e.to_string())
            })?)
        };
    let image = image(ctx).await?;
    let root_volume = root_volume(ctx, &image)?;
    let subnet_id = subnet(ctx).await?;
    let security_group_ids = security_groups(ctx).await?;
    let mut tags = tags(ctx);
    // Stored last, once everything else of the launch is known to be there.
    let user_data = match plain_user_data {
        Some(user_data) => user_data,
        None => {
            let (user_data, count) =
                bootstrap_secrets::store(ctx, bootstrap, &secret_tags(ctx)).await?;
            tags.insert(bootstrap_secrets::COUNT_TAG.to_string(), count.to_string());
            user_data
        }
    };
    Ok(RunInstance {
        client_token: ctx.key.clone(),
        image_id: image.id,
        instance_type: spec.instance_type.clone(),
        subnet_id,
        security_group_ids,
        public_ip: spec.public_ip,
        user_data,
        key_name: key_name(ctx),
        iam_instance_profile: spec.iam_instance_profile.clone(),
        root_volume,
        spot: spec.spot_market_options.clone(),
        metadata_options: spec
            .instance_metadata_options
            .clone()
            .unwrap_or_default()
            .resolve(),
        tags,
    })
}

/// The root volume and the device it goes on: the volume's own device, else the AMI's root
/// device.
pub(crate) fn root_volume(
    ctx: &Ctx,
    image: &Image,
) -> Result<Option<(String, crate::api::Volume)>, ActuatorError> {
    let Some(volume) = &ctx.infra.spec.root_volume else {
        return Ok(None);
    };
    let device = match (&volume.device_name, &image.root_device_name) {
        (Some(device), _) | (None, Some(device)) => device.clone(),
        (None, None) => {
            return Err(ActuatorError::invalid_configuration(
                "RootDeviceUnknown",
                format!(
                    "AMI {} names no root device; set the root volume's deviceName",
                    image.id
                ),
            ));
        }
    };
    Ok(Some((device, volume.clone())))
}

/// The SSH key pair: the machine's, else the cluster's.
pub(crate) fn key_name(ctx: &Ctx) -> Option<String> {
    ctx.infra
        .spec
        .ssh_key_name
        .clone()
        .or_else(|| ctx.cluster.spec.ssh_key_name.clone())
}

/// The user's tags: the cluster's `additionalTags`, then the machine's.
pub(crate) fn additional_tags(ctx: &Ctx) -> Tags {
    let mut tags = ctx.cluster.spec.additional_tags.clone();
    tags.extend(ctx.infra.spec.additional_tags.clone());
    tags
}

/// Every tag of the instance: the user's, then CAPA's and the provider's (which win), the
/// idempotency key, the Machine, and the Kubernetes cloud provider's cluster tag.
pub(super) fn tags(ctx: &Ctx) -> Tags {
    owned_tags(ctx, MACHINE_NAME_TAG)
}

/// The tags of what `ctx` launches: the user's, then CAPA's and the provider's (which win), the
/// idempotency key, `owner_tag` = `<namespace>/<name>`, and the Kubernetes cloud provider's
/// cluster tag.
pub(crate) fn owned_tags(ctx: &Ctx, owner_tag: &str) -> Tags {
    let mut tags = ctx.naming.tags(
        instance_role(ctx.control_plane),
        &ctx.name,
        &additional_tags(ctx),
    );
    tags.insert(IDEMPOTENCY_KEY_TAG.to_string(), ctx.key.clone());
    tags.insert(
        owner_tag.to_string(),
        format!("{}/{}", ctx.namespace, ctx.name),
    );
    tags.insert(
        format!("{KUBERNETES_CLUSTER_TAG_PREFIX}{}", ctx.cluster_name),
        OWNED.to_string(),
    );
    tags
}

/// The tags of the machine's bootstrap data secrets: the cluster's ownership, the machine's
/// role, name and idempotency key; not the user's additional tags, whose characters Secrets
/// Manager may refuse.
fn secret_tags(ctx: &Ctx) -> Tags {
    let mut tags = ctx
        .naming
        .tags(instance_role(ctx.control_plane), &ctx.name, &Tags::new());
    tags.insert(IDEMPOTENCY_KEY_TAG.to_string(), ctx.key.clone());
    tags.insert(
        MACHINE_NAME_TAG.to_string(),
        format!("{}/{}", ctx.namespace, ctx.name),
    );
    tags
}

/// The AMI: `spec.ami.id` (described only when its root device is needed), else the newest AMI
/// of the lookup's owner whose name matches the lookup format for the Machine's version and the
/// instance type's architecture.
pub(crate) async fn image(ctx: &Ctx) -> Result<Image, ActuatorError> {
    let spec = &ctx.infra.spec;
    if let Some(id) = spec.ami.as_ref().and_then(|a| a.id.clone()) {
        let needs_device = spec
            .root_volume
            .as_ref()
            .is_some_and(|v| v.device_name.is_none());
        if !needs_device {
            return Ok(Image {
                id,
                ..Image::default()
            });
        }
        let found = ctx
            .clients
            .compute
            .images(&[], &[filter("image-id", &[&id])])
            .await
            .map_err(|e| ctx.clients.error(e))?;
        return found.into_iter().next().ok_or_else(|| {
            ActuatorError::invalid_configuration(
                "ImageNotFound",
                format!("AMI {id} (spec.ami.id) does not exist or is not available"),
            )
        });
    }
    let cluster = &ctx.cluster.spec;
    let format = spec
        .image_lookup_format
        .as_deref()
        .or(cluster.image_lookup_format.as_deref())
        .unwrap_or(DEFAULT_IMAGE_LOOKUP_FORMAT);
    let org = spec
        .image_lookup_org
        .as_deref()
        .or(cluster.image_lookup_org.as_deref())
        .unwrap_or(DEFAULT_IMAGE_LOOKUP_ORG);
    let base_os = spec
        .image_lookup_base_os
        .as_deref()
        .or(cluster.image_lookup_base_os.as_deref())
        .unwrap_or(DEFAULT_IMAGE_LOOKUP_BASE_OS);
    let Some(version) = ctx.machine_version.as_deref() else {
        return Err(ActuatorError::invalid_configuration(
            "ImageLookupNeedsVersion",
            "spec.ami.id is not set and the Machine has no spec.version to look an AMI up by; set \
             one of them",
        ));
    };
    let name = format
        .replace("{{.BaseOS}}", base_os)
        .replace("{{.K8sVersion}}", version.trim_start_matches('v'));
    let architecture = ctx
        .clients
        .compute
        .instance_type(&spec.instance_type)
        .await
        .map_err(|e| ctx.clients.error(e))?
        .ok_or_else(|| unknown_instance_type(&spec.instance_type))?
        .architectures
        .iter()
        .find(|a| a.as_str() == "x86_64" || a.as_str() == "arm64")
        .cloned()
        .unwrap_or_else(|| "x86_64".to_string());
    let mut found = ctx
        .clients
        .compute
        .images(
            &[org.to_string()],
            &[
                filter("name", &[&name]),
                filter("architecture", &[&architecture]),
            ],
        )
        .await
        .map_err(|e| ctx.clients.error(e))?;
    found.sort_by(|a, b| a.creation_date.cmp(&b.creation_date));
    found.pop().ok_or_else(|| {
        ActuatorError::invalid_configuration(
            "ImageNotFound",
            format!(
                "no {architecture} AMI named {name:?} owned by {org}; set spec.ami.id or the \
                 image lookup fields (imageLookupFormat, imageLookupOrg, imageLookupBaseOS)"
            ),
        )
    })
}

/// The invalid configuration of an instance type the region does not offer.
pub fn unknown_instance_type(name: &str) -> ActuatorError {
    ActuatorError::invalid_configuration(
        "InstanceTypeNotFound",
        format!("instance type {name:?} (spec.instanceType) is not offered in this region"),
    )
}

/// The subnet: `spec.subnet` (by ID or filters matching exactly one), else one of the cluster's
/// subnets — private ones, or public ones for a machine asking for a public address — in the
/// Machine's failure domain when it has one.
async fn subnet(ctx: &Ctx) -> Result<String, ActuatorError> {
    if let Some(reference) = &ctx.infra.spec.subnet {
        let found = resolve(ctx, reference, "subnet-id", Kind::Subnet).await?;
        return match found.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(ActuatorError::invalid_configuration(
                "SubnetNotFound",
                format!("no subnet matches spec.subnet {}", describe(reference)),
            )),
            many => Err(ActuatorError::invalid_configuration(
                "SubnetAmbiguous",
                format!(
                    "spec.subnet {} matches {} subnets ({}); it must match one",
                    describe(reference),
                    many.len(),
                    many.join(", ")
                ),
            )),
        };
    }
    let public = ctx.infra.spec.public_ip == Some(true);
    let subnets = ctx
        .cluster
        .status
        .as_ref()
        .and_then(|s| s.network_status.as_ref())
        .map(|n| n.subnets.as_slice())
        .unwrap_or_default();
    let zone = ctx.failure_domain.as_deref();
    subnets
        .iter()
        .filter(|s| s.is_public == public)
        .find(|s| zone.is_none_or(|z| s.availability_zone == z))
        .map(|s| s.resource_id.clone())
        .ok_or_else(|| no_subnet(subnets, public, zone))
}

/// Why no subnet of the cluster's fits a machine (`public`: it asks for a public address; `zone`:
/// its failure domain): the cluster reports none yet (waited for), none in the failure domain
/// (the user's to fix), or only subnets of the other kind — with what to change.
fn no_subnet(subnets: &[SubnetStatus], public: bool, zone: Option<&str>) -> ActuatorError {
    if subnets.is_empty() {
        return ActuatorError::transient_message(
            "WaitingForSubnets",
            "the AWSCluster reports no subnet yet",
        );
    }
    let kind = if public { "public" } else { "private" };
    let other_kind_only = subnets
        .iter()
        .any(|s| zone.is_none_or(|z| s.availability_zone == z));
    let there = if zone.is_some() { " there" } else { "" };
    let hint = match (other_kind_only, public) {
        (false, _) => String::new(),
        (true, false) => format!(
            "; its subnets{there} are public: set spec.publicIP: true on the AWSMachine (or its \
             template) to launch in one, or add a private subnet to the AWSCluster's \
             spec.network.subnets"
        ),
        (true, true) => format!(
            "; its subnets{there} are private: unset spec.publicIP on the AWSMachine (or its \
             template), or add a public subnet to the AWSCluster's spec.network.subnets"
        ),
    };
    match zone {
        Some(zone) => ActuatorError::invalid_configuration(
            "NoSubnetInFailureDomain",
            format!(
                "the AWSCluster has no {kind} subnet in failure domain {zone:?} (the Machine's \
                 spec.failureDomain){}",
                if hint.is_empty() {
                    "; add one or choose another zone"
                } else {
                    &hint
                }
            ),
        ),
        // Retried: the AWSCluster's subnets may still change.
        None => ActuatorError::transient_message(
            if public {
                "NoPublicSubnet"
            } else {
                "NoPrivateSubnet"
            },
            format!("the AWSCluster has no {kind} subnet{hint}"),
        ),
    }
}

/// The security groups: the cluster's for the machine's role, then `additionalSecurityGroups`.
pub(crate) async fn security_groups(ctx: &Ctx) -> Result<Vec<String>, ActuatorError> {
    let role = if ctx.control_plane {
        SecurityGroupRole::ControlPlane
    } else {
        SecurityGroupRole::Node
    };
    let own = ctx
        .cluster
        .status
        .as_ref()
        .and_then(|s| s.network_status.as_ref())
        .and_then(|n| n.security_groups.get(role.as_str()))
        .map(|g| g.id.clone())
        .ok_or_else(|| {
            ActuatorError::transient_message(
                "WaitingForSecurityGroups",
                format!(
                    "the AWSCluster reports no {} security group yet",
                    role.as_str()
                ),
            )
        })?;
    let mut groups = vec![own];
    for reference in &ctx.infra.spec.additional_security_groups {
        let found = resolve(ctx, reference, "group-id", Kind::SecurityGroup).await?;
        if found.is_empty() {
            return Err(ActuatorError::invalid_configuration(
                "SecurityGroupNotFound",
                format!(
                    "no security group matches spec.additionalSecurityGroups entry {}",
                    describe(reference)
                ),
            ));
        }
        for id in found {
            if !groups.contains(&id) {
                groups.push(id);
            }
        }
    }
    Ok(groups)
}

#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Subnet,
    SecurityGroup,
}

/// The IDs a reference matches (an ID is checked to exist).
pub(crate) async fn resolve(
    ctx: &Ctx,
    reference: &AwsResourceReference,
    id_filter: &str,
    kind: Kind,
) -> Result<Vec<String>, ActuatorError> {
    let filters = match (&reference.id, &reference.filters) {
        (Some(id), _) => vec![filter(id_filter, &[id])],
        (None, Some(filters)) => filters.clone(),
        (None, None) => Vec::new(),
    };
    if filters.is_empty() {
        return Ok(Vec::new());
    }
    let network = &ctx.clients.network;
    let ids = match kind {
        Kind::Subnet => network
            .subnets(&filters)
            .await
            .map_err(|e| ctx.clients.error(e))?
            .into_iter()
            .map(|s| s.id)
            .collect(),
        Kind::SecurityGroup => network
            .security_groups(&filters)
            .await
            .map_err(|e| ctx.clients.error(e))?
            .into_iter()
            .map(|g| g.id)
            .collect(),
    };
    Ok(ids)
}

pub(crate) fn describe(reference: &AwsResourceReference) -> String {
    match (&reference.id, &reference.filters) {
        (Some(id), _) => format!("id {id}"),
        (None, Some(filters)) => {
            let shown: Vec<String> = filters
                .iter()
                .map(|f| format!("{}={}", f.name, f.values.join("|")))
                .collect();
            format!("filters {}", shown.join(", "))
        }
        (None, None) => "(empty)".to_string(),
    }
}

/// The API server target group a control-plane instance belongs in, when the cluster has a
/// load balancer and reports its target group.
pub(super) fn target_group(ctx: &Ctx) -> Option<String> {
    if !ctx.control_plane {
        return None;
    }
    let disabled = ctx
        .cluster
        .spec
        .control_plane_load_balancer
        .as_ref()
        .and_then(|lb| lb.load_balancer_type)
        == Some(LoadBalancerType::Disabled);
    if disabled {
        return None;
    }
    ctx.cluster
        .status
        .as_ref()
        .and_then(|s| s.network_status.as_ref())
        .and_then(|n| n.api_server_elb.as_ref())
        .and_then(|lb| lb.target_group_arn.clone())
}
