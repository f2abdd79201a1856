//! [`Scaling`] on Auto Scaling (groups) and EC2 (launch templates).

use async_trait::async_trait;
use aws_sdk_autoscaling::types as asg;
use aws_sdk_ec2::types as ec2;

use super::{call, ec2_tags, gone_is_done, tags_of};
use crate::api::Tags;
use crate::cloud::error::CloudError;
use crate::cloud::scaling::{
    CreateGroup, CreateLaunchTemplate, Group, GroupInstance, GroupSize, GroupUpdate,
    LaunchTemplate, Scaling,
};
use crate::throttle::RegionBudget;

/// Auto Scaling and EC2's launch templates in one region, under that region's budget.
#[derive(Clone, Debug)]
pub struct AutoScaling {
    client: aws_sdk_autoscaling::Client,
    ec2: aws_sdk_ec2::Client,
    budget: RegionBudget,
}

impl AutoScaling {
    /// Auto Scaling through `client` and launch templates through `ec2` (both configured for one
    /// region), under `budget`.
    pub fn new(
        client: aws_sdk_autoscaling::Client,
        ec2: aws_sdk_ec2::Client,
        budget: RegionBudget,
    ) -> Self {
        Self {
            client,
            ec2,
            budget,
        }
    }
}

/// A count as Auto Scaling takes it.
fn count(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// A count as Auto Scaling reports it (a negative one never is).
fn reported(value: Option<i32>) -> u32 {
    value.and_then(|v| u32::try_from(v).ok()).unwrap_or(0)
}

fn group_of(group: &asg::AutoScalingGroup) -> Option<Group> {
    Some(Group {
        name: group.auto_scaling_group_name()?.to_string(),
        arn: group
            .auto_scaling_group_arn()
            .unwrap_or_default()
            .to_string(),
        desired: reported(group.desired_capacity()),
        min: reported(group.min_size()),
        max: reported(group.max_size()),
        launch_template_id: group
            .launch_template()
            .and_then(|t| t.launch_template_id())
            .map(str::to_string),
        subnet_ids: group
            .vpc_zone_identifier()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        tags: group
            .tags()
            .iter()
            .filter_map(|t| {
                Some((
                    t.key()?.to_string(),
                    t.value().unwrap_or_default().to_string(),
                ))
            })
            .collect(),
        suspended: group
            .suspended_processes()
            .iter()
            .filter_map(|p| p.process_name().map(str::to_string))
            .collect(),
        instances: group
            .instances()
            .iter()
            .filter_map(|i| {
                Some(GroupInstance {
                    id: i.instance_id()?.to_string(),
                    zone: i.availability_zone().map(str::to_string),
                    lifecycle: i
                        .lifecycle_state()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default(),
                    unhealthy: i.health_status() == Some("Unhealthy"),
                    launch_template_id: i
                        .launch_template()
                        .and_then(|t| t.launch_template_id())
                        .map(str::to_string),
                })
            })
            .collect(),
        deleting: group.status().is_some_and(|s| s.starts_with("Delete")),
        capacity_rebalance: group.capacity_rebalance().unwrap_or(false),
    })
}

/// `tags` as tags of group `name`, each put on every instance it launches.
fn group_tags(name: &str, tags: &Tags) -> Vec<asg::Tag> {
    tags.iter()
        .map(|(key, value)| {
            asg::Tag::builder()
                .key(key)
                .value(value)
                .propagate_at_launch(true)
                .resource_id(name)
                .resource_type("auto-scaling-group")
                .build()
        })
        .collect()
}

fn template_of(template: &ec2::LaunchTemplate) -> Option<LaunchTemplate> {
    Some(LaunchTemplate {
        id: template.launch_template_id()?.to_string(),
        name: template
            .launch_template_name()
            .unwrap_or_default()
            .to_string(),
        tags: tags_of(template.tags()),
    })
}

fn template_data(request: &CreateLaunchTemplate) -> ec2::RequestLaunchTemplateData {
    let instance_tags = ec2_tags(&request.instance_tags);
    let tag_specifications = [ec2::ResourceType::Instance, ec2::ResourceType::Volume]
        .into_iter()
        .map(|resource| {
            ec2::LaunchTemplateTagSpecificationRequest::builder()
                .resource_type(resource)
                .set_tags(Some(instance_tags.clone()))
                .build()
        })
        .collect();
    let metadata = request.metadata_options;
    let mut data = ec2::RequestLaunchTemplateData::builder()
        .image_id(&request.image_id)
        .instance_type(ec2::InstanceType::from(request.instance_type.as_str()))
        .set_security_group_ids(Some(request.security_group_ids.clone()))
        .user_data(&request.user_data)
        .set_key_name(request.key_name.clone())
        .set_tag_specifications(Some(tag_specifications))
        .metadata_options(
            ec2::LaunchTemplateInstanceMetadataOptionsRequest::builder()
                .http_endpoint(match metadata.endpoint {
                    true => ec2::LaunchTemplateInstanceMetadataEndpointState::Enabled,
                    false => ec2::LaunchTemplateInstanceMetadataEndpointState::Disabled,
                })
                .http_tokens(match metadata.tokens_required {
                    true => ec2::LaunchTemplateHttpTokensState::Required,
                    false => ec2::LaunchTemplateHttpTokensState::Optional,
                })
                .http_put_response_hop_limit(i32::try_from(metadata.hop_limit).unwrap_or(1))
                .instance_metadata_tags(match metadata.tags {
                    true => ec2::LaunchTemplateInstanceMetadataTagsState::Enabled,
                    false => ec2::LaunchTemplateInstanceMetadataTagsState::Disabled,
                })
                .build(),
        );
    if let Some(profile) = &request.iam_instance_profile {
        data = data.iam_instance_profile(
            ec2::LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(profile)
                .build(),
        );
    }
    if let Some((device, volume)) = &request.root_volume {
        let ebs = ec2::LaunchTemplateEbsBlockDeviceRequest::builder()
            .delete_on_termination(true)
            .volume_size(i32::try_from(volume.size).unwrap_or(i32::MAX))
            .set_volume_type(volume.type_.map(|t| ec2::VolumeType::from(t.as_str())))
            .set_iops(volume.iops.and_then(|v| i32::try_from(v).ok()))
            .set_throughput(volume.throughput.and_then(|v| i32::try_from(v).ok()))
            .set_encrypted(volume.encrypted)
            .set_kms_key_id(volume.encryption_key.clone())
            .build();
        data = data.block_device_mappings(
            ec2::LaunchTemplateBlockDeviceMappingRequest::builder()
                .device_name(volume.device_name.as_deref().unwrap_or(device))
                .ebs(ebs)
                .build(),
        );
    }
    if let Some(spot) = &request.spot {
        data = data.instance_market_options(
            ec2::LaunchTemplateInstanceMarketOptionsRequest::builder()
                .market_type(ec2::MarketType::Spot)
                .spot_options(
                    ec2::LaunchTemplateSpotMarketOptionsRequest::builder()
                        .set_max_price(spot.max_price.clone())
                        .build(),
                )
                .build(),
        );
    }
    data.build()
}

fn size_update(
    mut update: aws_sdk_autoscaling::operation::update_auto_scaling_group::builders::UpdateAutoScalingGroupFluentBuilder,
    size: &GroupSize,
) -> aws_sdk_autoscaling::operation::update_auto_scaling_group::builders::UpdateAutoScalingGroupFluentBuilder{
    update = update.min_size(count(size.min)).max_size(count(size.max));
    if let Some(desired) = size.desired {
        update = update.desired_capacity(count(desired));
    }
    update
}

#[async_trait]
impl Scaling for AutoScaling {
    async fn group(&self, name: &str) -> Result<Option<Group>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeAutoScalingGroups",
            self.client
                .describe_auto_scaling_groups()
                .auto_scaling_group_names(name)
                .send(),
        )
        .await?;
        Ok(answer
            .auto_scaling_groups()
            .iter()
            .filter_map(group_of)
            .find(|g| g.name == name))
    }

    async fn create_group(&self, request: &CreateGroup) -> Result<(), CloudError> {
        let mut create = self
            .client
            .create_auto_scaling_group()
            .auto_scaling_group_name(&request.name)
            .launch_template(
                asg::LaunchTemplateSpecification::builder()
                    .launch_template_id(&request.launch_template_id)
                    .version("$Default")
                    .build(),
            )
            .min_size(count(request.size.min))
            .max_size(count(request.size.max))
            .vpc_zone_identifier(request.subnet_ids.join(","))
            .set_tags(Some(group_tags(&request.name, &request.tags)))
            .capacity_rebalance(request.capacity_rebalance);
        if let Some(desired) = request.size.desired {
            create = create.desired_capacity(count(desired));
        }
        call(&self.budget, "CreateAutoScalingGroup", create.send()).await?;
        Ok(())
    }

    async fn update_group(&self, name: &str, update: &GroupUpdate) -> Result<(), CloudError> {
        let mut request = self
            .client
            .update_auto_scaling_group()
            .auto_scaling_group_name(name);
        if let Some(size) = &update.size {
            request = size_update(request, size);
        }
        if let Some(template) = &update.launch_template_id {
            request = request.launch_template(
                asg::LaunchTemplateSpecification::builder()
                    .launch_template_id(template)
                    .version("$Default")
                    .build(),
            );
        }
        if let Some(subnets) = &update.subnet_ids {
            request = request.vpc_zone_identifier(subnets.join(","));
        }
        if let Some(rebalance) = update.capacity_rebalance {
            request = request.capacity_rebalance(rebalance);
        }
        call(&self.budget, "UpdateAutoScalingGroup", request.send()).await?;
        Ok(())
    }

    async fn tag_group(&self, name: &str, tags: &Tags) -> Result<(), CloudError> {
        call(
            &self.budget,
            "CreateOrUpdateTags",
            self.client
                .create_or_update_tags()
                .set_tags(Some(group_tags(name, tags)))
                .send(),
        )
        .await?;
        Ok(())
    }

    async fn suspend_processes(&self, name: &str, processes: &[String]) -> Result<(), CloudError> {
        call(
            &self.budget,
            "SuspendProcesses",
            self.client
                .suspend_processes()
                .auto_scaling_group_name(name)
                .set_scaling_processes(Some(processes.to_vec()))
                .send(),
        )
        .await?;
        Ok(())
    }

    async fn terminate_instance(&self, instance_id: &str) -> Result<(), CloudError> {
        call(
            &self.budget,
            "TerminateInstanceInAutoScalingGroup",
            self.client
                .terminate_instance_in_auto_scaling_group()
                .instance_id(instance_id)
                .should_decrement_desired_capacity(true)
                .send(),
        )
        .await?;
        Ok(())
    }

    async fn delete_group(&self, name: &str) -> Result<(), CloudError> {
        if self.group(name).await?.is_none() {
            return Ok(());
        }
        call(
            &self.budget,
            "DeleteAutoScalingGroup",
            self.client
                .delete_auto_scaling_group()
                .auto_scaling_group_name(name)
                .force_delete(true)
                .send(),
        )
        .await?;
        Ok(())
    }

    async fn launch_templates(
        &self,
        key: &str,
        value: &str,
    ) -> Result<Vec<LaunchTemplate>, CloudError> {
        let mut found = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let page = call(
                &self.budget,
                "DescribeLaunchTemplates",
                self.ec2
                    .describe_launch_templates()
                    .filters(
                        ec2::Filter::builder()
                            .name(format!("tag:{key}"))
                            .values(value)
                            .build(),
                    )
                    .set_next_token(next.take())
                    .send(),
            )
            .await?;
            found.extend(page.launch_templates().iter().filter_map(template_of));
            match page.next_token() {
                Some(token) if !token.is_empty() => next = Some(token.to_string()),
                _ => return Ok(found),
            }
        }
    }

    async fn create_launch_template(
        &self,
        request: &CreateLaunchTemplate,
    ) -> Result<LaunchTemplate, CloudError> {
        let answer = call(
            &self.budget,
            "CreateLaunchTemplate",
            self.ec2
                .create_launch_template()
                .launch_template_name(&request.name)
                .launch_template_data(template_data(request))
                .tag_specifications(
                    ec2::TagSpecification::builder()
                        .resource_type(ec2::ResourceType::LaunchTemplate)
                        .set_tags(Some(ec2_tags(&request.tags)))
                        .build(),
                )
                .send(),
        )
        .await?;
        let mut made = answer
            .launch_template()
            .and_then(template_of)
            .ok_or_else(|| {
                CloudError::new(
                    "CreateLaunchTemplate",
                    None,
                    "EC2 answered without a launch template ID",
                )
            })?;
        if made.tags.is_empty() {
            made.tags = request.tags.clone();
        }
        Ok(made)
    }

    async fn tag_launch_template(&self, id: &str, tags: &Tags) -> Result<(), CloudError> {
        call(
            &self.budget,
            "CreateTags",
            self.ec2
                .create_tags()
                .resources(id)
                .set_tags(Some(ec2_tags(tags)))
                .send(),
        )
        .await?;
        Ok(())
    }

    async fn delete_launch_template(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteLaunchTemplate",
                self.ec2
                    .delete_launch_template()
                    .launch_template_id(id)
                    .send(),
            )
            .await
            .map(|_| ()),
        )
    }
}
