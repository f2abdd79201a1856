//! The cloud traits on the official AWS SDK (`aws-sdk-ec2`, `aws-sdk-elasticloadbalancingv2`).
//!
//! Every call first takes a permit of its region's [`RegionBudget`]; a throttled answer tells the
//! budget (which slows the region down) and comes back as a [`CloudError`] carrying the wait the
//! budget asks for. The SDK's own retries are off ([`sdk_retry_config`]): a retry is the
//! reconcile's decision (RequeueAfter or backoff), so that one budget sees every call and a
//! throttled region is not hammered three times per call.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types as ec2;
use aws_sdk_elasticloadbalancingv2::types as elb;

use super::compute::{Compute, Image, Instance, InstanceTypeInfo, RunInstance};
use super::error::{CloudError, ErrorClass};
use super::load_balancing::LoadBalancing;
use super::network::{Network, SecurityGroup, Subnet};
use crate::api::{Filter, InstanceState, Tags};
use crate::throttle::RegionBudget;

/// The longest an API call may take, retries excluded (there are none), before it fails as a
/// transient error.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The SDK's retry settings for the provider's clients: none (see the module's documentation).
pub fn sdk_retry_config() -> aws_sdk_ec2::config::retry::RetryConfig {
    aws_sdk_ec2::config::retry::RetryConfig::disabled()
}

/// The SDK's timeouts for the provider's clients: [`OPERATION_TIMEOUT`] per call.
pub fn sdk_timeout_config() -> aws_sdk_ec2::config::timeout::TimeoutConfig {
    aws_sdk_ec2::config::timeout::TimeoutConfig::builder()
        .operation_timeout(OPERATION_TIMEOUT)
        .connect_timeout(Duration::from_secs(10))
        .build()
}

/// A [`CloudError`] of an SDK error: AWS's code and message, or for a call that got no answer
/// (a timeout, a refused connection) the transport's description.
fn cloud_error<E, R>(operation: &str, error: SdkError<E, R>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = error.code().map(str::to_string);
    let message = match error.message() {
        Some(message) => message.to_string(),
        None => DisplayErrorContext(&error).to_string(),
    };
    CloudError::new(operation, code, message)
}

/// One API call under `budget`: a permit first, the budget told of a throttled answer after.
async fn call<T, E, R>(
    budget: &RegionBudget,
    operation: &str,
    send: impl Future<Output = Result<T, SdkError<E, R>>>,
) -> Result<T, CloudError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    budget.acquire().await;
    match send.await {
        Ok(answer) => {
            budget.succeeded();
            Ok(answer)
        }
        Err(error) => {
            let error = cloud_error(operation, error);
            if error.class() == ErrorClass::Throttled {
                let wait = budget.throttled();
                Err(error.with_retry_after(wait))
            } else {
                budget.succeeded();
                Err(error)
            }
        }
    }
}

fn ec2_filters(filters: &[Filter]) -> Vec<ec2::Filter> {
    filters
        .iter()
        .map(|f| {
            ec2::Filter::builder()
                .name(&f.name)
                .set_values(Some(f.values.clone()))
                .build()
        })
        .collect()
}

fn ec2_tags(tags: &Tags) -> Vec<ec2::Tag> {
    tags.iter()
        .map(|(key, value)| ec2::Tag::builder().key(key).value(value).build())
        .collect()
}

fn tags_of(tags: &[ec2::Tag]) -> Tags {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_string(),
                t.value().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

fn owned(value: Option<&str>) -> Option<String> {
    value.filter(|v| !v.is_empty()).map(str::to_string)
}

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

/// EC2 in one region, under that region's budget.
#[derive(Clone, Debug)]
pub struct Ec2 {
    client: aws_sdk_ec2::Client,
    budget: RegionBudget,
}

impl Ec2 {
    /// EC2 through `client` (configured for one region), under `budget`.
    pub fn new(client: aws_sdk_ec2::Client, budget: RegionBudget) -> Self {
        Self { client, budget }
    }

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
        match call(
            &self.budget,
            "TerminateInstances",
            self.client.terminate_instances().instance_ids(id).send(),
        )
        .await
        {
            Err(error) if error.is_not_found() => Ok(()),
            answer => answer.map(drop),
        }
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

#[async_trait]
impl Network for Ec2 {
    async fn subnets(&self, filters: &[Filter]) -> Result<Vec<Subnet>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeSubnets",
            self.client
                .describe_subnets()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .subnets()
            .iter()
            .filter_map(|s| {
                Some(Subnet {
                    id: s.subnet_id()?.to_string(),
                    vpc_id: s.vpc_id().unwrap_or_default().to_string(),
                    zone: s.availability_zone().unwrap_or_default().to_string(),
                    cidr_block: s.cidr_block().unwrap_or_default().to_string(),
                    map_public_ip_on_launch: s.map_public_ip_on_launch().unwrap_or(false),
                    tags: tags_of(s.tags()),
                })
            })
            .collect())
    }

    async fn security_groups(&self, filters: &[Filter]) -> Result<Vec<SecurityGroup>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeSecurityGroups",
            self.client
                .describe_security_groups()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .security_groups()
            .iter()
            .filter_map(|g| {
                Some(SecurityGroup {
                    id: g.group_id()?.to_string(),
                    name: g.group_name().unwrap_or_default().to_string(),
                    vpc_id: g.vpc_id().unwrap_or_default().to_string(),
                    tags: tags_of(g.tags()),
                })
            })
            .collect())
    }
}

/// ELBv2 in one region, under that region's budget.
#[derive(Clone, Debug)]
pub struct Elb {
    client: aws_sdk_elasticloadbalancingv2::Client,
    budget: RegionBudget,
}

impl Elb {
    /// ELBv2 through `client` (configured for one region), under `budget`.
    pub fn new(client: aws_sdk_elasticloadbalancingv2::Client, budget: RegionBudget) -> Self {
        Self { client, budget }
    }
}

fn target(instance_id: &str, port: u16) -> elb::TargetDescription {
    elb::TargetDescription::builder()
        .id(instance_id)
        .port(i32::from(port))
        .build()
}

#[async_trait]
impl LoadBalancing for Elb {
    async fn registered_instances(
        &self,
        target_group_arn: &str,
    ) -> Result<Vec<String>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeTargetHealth",
            self.client
                .describe_target_health()
                .target_group_arn(target_group_arn)
                .send(),
        )
        .await?;
        Ok(answer
            .target_health_descriptions()
            .iter()
            .filter_map(|d| d.target().and_then(|t| t.id()).map(str::to_string))
            .collect())
    }

    async fn register_instance(
        &self,
        target_group_arn: &str,
        instance_id: &str,
        port: u16,
    ) -> Result<(), CloudError> {
        call(
            &self.budget,
            "RegisterTargets",
            self.client
                .register_targets()
                .target_group_arn(target_group_arn)
                .targets(target(instance_id, port))
                .send(),
        )
        .await
        .map(drop)
    }

    async fn deregister_instance(
        &self,
        target_group_arn: &str,
        instance_id: &str,
        port: u16,
    ) -> Result<(), CloudError> {
        match call(
            &self.budget,
            "DeregisterTargets",
            self.client
                .deregister_targets()
                .target_group_arn(target_group_arn)
                .targets(target(instance_id, port))
                .send(),
        )
        .await
        {
            // Not registered (or the instance is gone): nothing to take out.
            Err(error) if error.code.as_deref() == Some("InvalidTarget") => Ok(()),
            answer => answer.map(drop),
        }
    }
}
