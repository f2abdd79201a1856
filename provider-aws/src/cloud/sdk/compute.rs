//! [`Compute`] on EC2: instances, images and instance types.

use async_trait::async_trait;
use aws_sdk_ec2::types as ec2;

use super::{Ec2, call, ec2_filters, ec2_tags, gone_is_done, owned, tags_of};
use crate::api::{Filter, InstanceState, Tags};
use crate::cloud::compute::{Compute, Image, Instance, InstanceTypeInfo, RunInstance};
use crate::cloud::error::CloudError;

fn instance_state(name: &ec2::InstanceStateName) -> Option<InstanceState> {
    Some(match name {
        ec2::InstanceStateName::Pending => InstanceState::Pending,
        ec2::InstanceStateName::Running => InstanceState::Running,
        ec2::InstanceStateName::ShuttingDown => InstanceState::ShuttingDown,
        ec2::InstanceStateName::Terminated => InstanceState::Terminated,
        ec2::InstanceStateName::Stopping => InstanceState::Stopping,
        ec2::InstanceStateName::Stopped => InstanceState::Stopped,
        _ => return None,
    })
}

fn instance_of(instance: &ec2::Instance) -> Option<Instance> {
    Some(Instance {
        id: instance.instance_id()?.to_string(),
        state: instance
            .state()
            .and_then(|s| s.name())
            .and_then(instance_state),
        state_reason: instance
            .state_reason()
            .and_then(|r| r.message())
            .map(str::to_string),
        zone: owned(instance.placement().and_then(|p| p.availability_zone())),
        subnet_id: owned(instance.subnet_id()),
        security_group_ids: instance
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_string))
            .collect(),
        instance_type: instance
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        image_id: owned(instance.image_id()),
        key_name: owned(instance.key_name()),
        private_ip: owned(instance.private_ip_address()),
        public_ip: owned(instance.public_ip_address()),
        private_dns: owned(instance.private_dns_name()),
        public_dns: owned(instance.public_dns_name()),
        tags: tags_of(instance.tags()),
        spot: instance.instance_lifecycle() == Some(&ec2::InstanceLifecycleType::Spot),
        launch_time: instance.launch_time().map(|t| t.secs()),
    })
}

impl Ec2 {
    async fn describe_instances(
        &self,
        ids: &[String],
        filters: &[Filter],
    ) -> Result<Vec<Instance>, CloudError> {
        let mut found = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let page = call(
                &self.budget,
                "DescribeInstances",
                self.client
                    .describe_instances()
                    .set_instance_ids((!ids.is_empty()).then(|| ids.to_vec()))
                    .set_filters((!filters.is_empty()).then(|| ec2_filters(filters)))
                    .set_next_token(next.take())
                    .send(),
            )
            .await?;
            found.extend(
                page.reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .filter_map(instance_of),
            );
            match page.next_token() {
                Some(token) if !token.is_empty() => next = Some(token.to_string()),
                _ => return Ok(found),
            }
        }
    }
}

#[async_trait]
impl Compute for Ec2 {
    async fn instances_by_id(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        match self.describe_instances(ids, &[]).await {
            // EC2 refuses the whole call for one unknown ID (`InvalidInstanceID.NotFound`);
            // asked one by one, that is an empty answer.
            Err(error) if error.is_not_found() && ids.len() == 1 => Ok(Vec::new()),
            Err(error) if error.is_not_found() => {
                let mut found = Vec::new();
                for id in ids {
                    found.extend(self.instances_by_id(std::slice::from_ref(id)).await?);
                }
                Ok(found)
            }
            answer => answer,
        }
    }

    async fn instances(&self, filters: &[Filter]) -> Result<Vec<Instance>, CloudError> {
        self.describe_instances(&[], filters).await
    }

    async fn run_instance(&self, request: &RunInstance) -> Result<Instance, CloudError> {
        let tags = ec2_tags(&request.tags);
        let tag_specifications = [
            ec2::ResourceType::Instance,
            ec2::ResourceType::Volume,
            ec2::ResourceType::NetworkInterface,
        ]
        .into_iter()
        .map(|resource| {
            ec2::TagSpecification::builder()
                .resource_type(resource)
                .set_tags(Some(tags.clone()))
                .build()
        })
        .collect();
        let mut run = self
            .client
            .run_instances()
            .client_token(&request.client_token)
            .image_id(&request.image_id)
            .instance_type(ec2::InstanceType::from(request.instance_type.as_str()))
            .min_count(1)
            .max_count(1)
            .user_data(&request.user_data)
            .set_key_name(request.key_name.clone())
            .set_tag_specifications(Some(tag_specifications));
        run = match request.public_ip {
            // A public address is a property of the network interface: the subnet and groups
            // move there with it (EC2 refuses them in both places).
            Some(public) => run.network_interfaces(
                ec2::InstanceNetworkInterfaceSpecification::builder()
                    .device_index(0)
                    .subnet_id(&request.subnet_id)
                    .set_groups(Some(request.security_group_ids.clone()))
                    .associate_public_ip_address(public)
                    .delete_on_termination(true)
                    .build(),
            ),
            None => run
                .subnet_id(&request.subnet_id)
                .set_security_group_ids(Some(request.security_group_ids.clone())),
        };
        if let Some(profile) = &request.iam_instance_profile {
            run = run.iam_instance_profile(
                ec2::IamInstanceProfileSpecification::builder()
                    .name(profile)
                    .build(),
            );
        }
        if let Some((device, volume)) = &request.root_volume {
            let ebs = ec2::EbsBlockDevice::builder()
                .delete_on_termination(true)
                .volume_size(i32::try_from(volume.size).unwrap_or(i32::MAX))
                .set_volume_type(volume.type_.map(|t| ec2::VolumeType::from(t.as_str())))
                .set_iops(volume.iops.and_then(|v| i32::try_from(v).ok()))
                .set_throughput(volume.throughput.and_then(|v| i32::try_from(v).ok()))
                .set_encrypted(volume.encrypted)
                .set_kms_key_id(volume.encryption_key.clone())
                .build();
            run = run.block_device_mappings(
                ec2::BlockDeviceMapping::builder()
                    .device_name(volume.device_name.as_deref().unwrap_or(device))
                    .ebs(ebs)
                    .build(),
            );
        }
        let metadata = request.metadata_options;
        let state = |on: bool| match on {
            true => ec2::InstanceMetadataEndpointState::Enabled,
            false => ec2::InstanceMetadataEndpointState::Disabled,
        };
        run = run.metadata_options(
            ec2::InstanceMetadataOptionsRequest::builder()
                .http_endpoint(state(metadata.endpoint))
                .http_tokens(match metadata.tokens_required {
                    true => ec2::HttpTokensState::Required,
                    false => ec2::HttpTokensState::Optional,
                })
                .http_put_response_hop_limit(i32::try_from(metadata.hop_limit).unwrap_or(1))
                .instance_metadata_tags(match metadata.tags {
                    true => ec2::InstanceMetadataTagsState::Enabled,
                    false => ec2::InstanceMetadataTagsState::Disabled,
                })
                .build(),
        );
        if let Some(spot) = &request.spot {
            run = run.instance_market_options(
                ec2::InstanceMarketOptionsRequest::builder()
                    .market_type(ec2::MarketType::Spot)
                    .spot_options(
                        ec2::SpotMarketOptions::builder()
                            .set_max_price(spot.max_price.clone())
                            .build(),
                    )
                    .build(),
            );
        }
        let answer = call(&self.budget, "RunInstances", run.send()).await?;
        answer
            .instances()
            .iter()
            .find_map(instance_of)
            .ok_or_else(|| {
                CloudError::new("RunInstances", None, "EC2 answered without an instance ID")
            })
    }

    async fn terminate_instance(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "TerminateInstances",
                self.client.terminate_instances().instance_ids(id).send(),
            )
            .await
            .map(drop),
        )
    }

    async fn create_tags(&self, resource_id: &str, tags: &Tags) -> Result<(), CloudError> {
        if tags.is_empty() {
            return Ok(());
        }
        call(
            &self.budget,
            "CreateTags",
            self.client
                .create_tags()
                .resources(resource_id)
                .set_tags(Some(ec2_tags(tags)))
                .send(),
        )
        .await
        .map(drop)
    }

    async fn set_security_groups(
        &self,
        instance_id: &str,
        group_ids: &[String],
    ) -> Result<(), CloudError> {
        call(
            &self.budget,
            "ModifyInstanceAttribute",
            self.client
                .modify_instance_attribute()
                .instance_id(instance_id)
                .set_groups(Some(group_ids.to_vec()))
                .send(),
        )
        .await
        .map(drop)
    }

    async fn images(
        &self,
        owners: &[String],
        filters: &[Filter],
    ) -> Result<Vec<Image>, CloudError> {
        let mut filters = ec2_filters(filters);
        filters.push(
            ec2::Filter::builder()
                .name("state")
                .values("available")
                .build(),
        );
        let answer = call(
            &self.budget,
            "DescribeImages",
            self.client
                .describe_images()
                .set_owners((!owners.is_empty()).then(|| owners.to_vec()))
                .set_filters(Some(filters))
                .send(),
        )
        .await?;
        Ok(answer
            .images()
            .iter()
            .filter_map(|image| {
                Some(Image {
                    id: image.image_id()?.to_string(),
                    name: image.name().unwrap_or_default().to_string(),
                    creation_date: image.creation_date().unwrap_or_default().to_string(),
                    root_device_name: owned(image.root_device_name()),
                    architecture: image.architecture().map(|a| a.as_str().to_string()),
                })
            })
            .collect())
    }

    async fn instance_type(&self, name: &str) -> Result<Option<InstanceTypeInfo>, CloudError> {
        let answer = match call(
            &self.budget,
            "DescribeInstanceTypes",
            self.client
                .describe_instance_types()
                .instance_types(ec2::InstanceType::from(name))
                .send(),
        )
        .await
        {
            // An instance type the region does not offer.
            Err(error) if error.code.as_deref() == Some("InvalidInstanceType") => return Ok(None),
            answer => answer?,
        };
        Ok(answer
            .instance_types()
            .first()
            .map(|info| InstanceTypeInfo {
                name: name.to_string(),
                vcpus: info
                    .v_cpu_info()
                    .and_then(|v| v.default_v_cpus())
                    .and_then(|v| u32::try_from(v).ok())
                    .unwrap_or_default(),
                memory_mib: info
                    .memory_info()
                    .and_then(|m| m.size_in_mib())
                    .and_then(|m| u64::try_from(m).ok())
                    .unwrap_or_default(),
                architectures: info
                    .processor_info()
                    .map(|p| {
                        p.supported_architectures()
                            .iter()
                            .map(|a| a.as_str().to_string())
                            .collect()
                    })
                    .unwrap_or_default(),
                instance_storage_gb: info
                    .instance_storage_info()
                    .and_then(|s| s.total_size_in_gb())
                    .and_then(|s| u64::try_from(s).ok()),
            }))
    }
}
