//! The cloud traits on the official AWS SDK (`aws-sdk-ec2`, `aws-sdk-elasticloadbalancingv2`).
//!
//! Every call first takes a permit of its region's [`RegionBudget`]; a throttled answer tells the
//! budget (which slows the region down) and comes back as a [`CloudError`] carrying the wait the
//! budget asks for. The SDK's own retries are off ([`sdk_retry_config`]): a retry is the
//! reconcile's decision (RequeueAfter or backoff), so that one budget sees every call and a
//! throttled region is not hammered three times per call.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types as ec2;
use aws_sdk_elasticloadbalancingv2::types as elb;

use super::compute::{Compute, Image, Instance, InstanceTypeInfo, RunInstance};
use super::error::{CloudError, ErrorClass};
use super::load_balancing::{
    CreateLoadBalancer, CreateTargetGroup, Listener, LoadBalancer, LoadBalancing, TargetGroup,
};
use super::network::{
    Address, InternetGateway, NatGateway, Network, NetworkInterface, Permission, PermissionSource,
    Route, RouteTable, RouteTarget, SecurityGroup, Subnet, Vpc,
};
use crate::api::{Filter, InstanceState, LoadBalancerScheme, Tags};
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

fn subnet_of(s: &ec2::Subnet) -> Option<Subnet> {
    Some(Subnet {
        id: s.subnet_id()?.to_string(),
        vpc_id: s.vpc_id().unwrap_or_default().to_string(),
        zone: s.availability_zone().unwrap_or_default().to_string(),
        cidr_block: s.cidr_block().unwrap_or_default().to_string(),
        map_public_ip_on_launch: s.map_public_ip_on_launch().unwrap_or(false),
        tags: tags_of(s.tags()),
    })
}

/// EC2's permissions flattened to one source each.
fn permissions_of(permissions: &[ec2::IpPermission]) -> Vec<Permission> {
    let mut flat = Vec::new();
    for p in permissions {
        let protocol = p.ip_protocol().unwrap_or("-1").to_string();
        let from_port = p.from_port().unwrap_or(-1);
        let to_port = p.to_port().unwrap_or(-1);
        for range in p.ip_ranges() {
            if let Some(cidr) = range.cidr_ip() {
                flat.push(Permission {
                    protocol: protocol.clone(),
                    from_port,
                    to_port,
                    source: PermissionSource::Cidr(cidr.to_string()),
                    description: range.description().unwrap_or_default().to_string(),
                });
            }
        }
        for pair in p.user_id_group_pairs() {
            if let Some(group) = pair.group_id() {
                flat.push(Permission {
                    protocol: protocol.clone(),
                    from_port,
                    to_port,
                    source: PermissionSource::Group(group.to_string()),
                    description: pair.description().unwrap_or_default().to_string(),
                });
            }
        }
    }
    flat
}

fn ip_permissions(rules: &[Permission]) -> Vec<ec2::IpPermission> {
    rules
        .iter()
        .map(|rule| {
            let all = rule.protocol == "-1";
            let builder = ec2::IpPermission::builder()
                .ip_protocol(&rule.protocol)
                .set_from_port((!all).then_some(rule.from_port))
                .set_to_port((!all).then_some(rule.to_port));
            let description = (!rule.description.is_empty()).then(|| rule.description.clone());
            match &rule.source {
                PermissionSource::Cidr(cidr) => builder.ip_ranges(
                    ec2::IpRange::builder()
                        .cidr_ip(cidr)
                        .set_description(description)
                        .build(),
                ),
                PermissionSource::Group(group) => builder.user_id_group_pairs(
                    ec2::UserIdGroupPair::builder()
                        .group_id(group)
                        .set_description(description)
                        .build(),
                ),
            }
            .build()
        })
        .collect()
}

fn tagged(resource: ec2::ResourceType, tags: &Tags) -> ec2::TagSpecification {
    ec2::TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(ec2_tags(tags)))
        .build()
}

fn on() -> ec2::AttributeBooleanValue {
    ec2::AttributeBooleanValue::builder().value(true).build()
}

fn vpc_of(v: &ec2::Vpc) -> Option<Vpc> {
    Some(Vpc {
        id: v.vpc_id()?.to_string(),
        cidr_block: v.cidr_block().unwrap_or_default().to_string(),
        tags: tags_of(v.tags()),
    })
}

fn gateway_of(g: &ec2::InternetGateway) -> Option<InternetGateway> {
    Some(InternetGateway {
        id: g.internet_gateway_id()?.to_string(),
        vpc_ids: g
            .attachments()
            .iter()
            .filter_map(|a| a.vpc_id().map(str::to_string))
            .collect(),
        tags: tags_of(g.tags()),
    })
}

fn nat_of(n: &ec2::NatGateway) -> Option<NatGateway> {
    Some(NatGateway {
        id: n.nat_gateway_id()?.to_string(),
        subnet_id: n.subnet_id().unwrap_or_default().to_string(),
        state: n
            .state()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        allocation_ids: n
            .nat_gateway_addresses()
            .iter()
            .filter_map(|a| a.allocation_id().map(str::to_string))
            .collect(),
        public_ips: n
            .nat_gateway_addresses()
            .iter()
            .filter_map(|a| a.public_ip().map(str::to_string))
            .collect(),
        tags: tags_of(n.tags()),
    })
}

fn route_table_of(t: &ec2::RouteTable) -> Option<RouteTable> {
    Some(RouteTable {
        id: t.route_table_id()?.to_string(),
        routes: t
            .routes()
            .iter()
            .filter_map(|r| {
                let target = match (r.gateway_id(), r.nat_gateway_id()) {
                    (_, Some(nat)) => Some(RouteTarget::NatGateway(nat.to_string())),
                    (Some(igw), None) if igw.starts_with("igw-") => {
                        Some(RouteTarget::InternetGateway(igw.to_string()))
                    }
                    _ => None,
                };
                Some(Route {
                    destination: r.destination_cidr_block()?.to_string(),
                    target,
                })
            })
            .collect(),
        associations: t
            .associations()
            .iter()
            .filter_map(|a| {
                Some((
                    a.route_table_association_id()?.to_string(),
                    a.subnet_id().map(str::to_string),
                ))
            })
            .collect(),
        tags: tags_of(t.tags()),
    })
}

fn group_of(g: &ec2::SecurityGroup) -> Option<SecurityGroup> {
    Some(SecurityGroup {
        id: g.group_id()?.to_string(),
        name: g.group_name().unwrap_or_default().to_string(),
        vpc_id: g.vpc_id().unwrap_or_default().to_string(),
        tags: tags_of(g.tags()),
        ingress: permissions_of(g.ip_permissions()),
    })
}

/// `Ok` for an answer saying the resource is gone already.
fn gone_is_done(answer: Result<(), CloudError>) -> Result<(), CloudError> {
    match answer {
        Err(error) if error.is_not_found() => Ok(()),
        answer => answer,
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
        Ok(answer.subnets().iter().filter_map(subnet_of).collect())
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
            .filter_map(group_of)
            .collect())
    }

    async fn availability_zones(&self) -> Result<Vec<String>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeAvailabilityZones",
            self.client
                .describe_availability_zones()
                .filters(
                    ec2::Filter::builder()
                        .name("state")
                        .values("available")
                        .build(),
                )
                .send(),
        )
        .await?;
        let mut zones: Vec<String> = answer
            .availability_zones()
            .iter()
            .filter(|z| z.zone_type().is_none_or(|t| t == "availability-zone"))
            .filter_map(|z| z.zone_name().map(str::to_string))
            .collect();
        zones.sort();
        Ok(zones)
    }

    async fn vpcs(&self, filters: &[Filter]) -> Result<Vec<Vpc>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeVpcs",
            self.client
                .describe_vpcs()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer.vpcs().iter().filter_map(vpc_of).collect())
    }

    async fn create_vpc(&self, cidr_block: &str, tags: &Tags) -> Result<Vpc, CloudError> {
        let answer = call(
            &self.budget,
            "CreateVpc",
            self.client
                .create_vpc()
                .cidr_block(cidr_block)
                .tag_specifications(tagged(ec2::ResourceType::Vpc, tags))
                .send(),
        )
        .await?;
        let vpc = answer
            .vpc()
            .and_then(vpc_of)
            .ok_or_else(|| CloudError::new("CreateVpc", None, "EC2 answered without a VPC"))?;
        // One attribute per call, as EC2 requires.
        call(
            &self.budget,
            "ModifyVpcAttribute",
            self.client
                .modify_vpc_attribute()
                .vpc_id(&vpc.id)
                .enable_dns_support(on())
                .send(),
        )
        .await?;
        call(
            &self.budget,
            "ModifyVpcAttribute",
            self.client
                .modify_vpc_attribute()
                .vpc_id(&vpc.id)
                .enable_dns_hostnames(on())
                .send(),
        )
        .await?;
        Ok(vpc)
    }

    async fn delete_vpc(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteVpc",
                self.client.delete_vpc().vpc_id(id).send(),
            )
            .await
            .map(drop),
        )
    }

    async fn create_subnet(
        &self,
        vpc_id: &str,
        cidr_block: &str,
        zone: &str,
        tags: &Tags,
    ) -> Result<Subnet, CloudError> {
        let answer = call(
            &self.budget,
            "CreateSubnet",
            self.client
                .create_subnet()
                .vpc_id(vpc_id)
                .cidr_block(cidr_block)
                .availability_zone(zone)
                .tag_specifications(tagged(ec2::ResourceType::Subnet, tags))
                .send(),
        )
        .await?;
        answer
            .subnet()
            .and_then(subnet_of)
            .ok_or_else(|| CloudError::new("CreateSubnet", None, "EC2 answered without a subnet"))
    }

    async fn set_map_public_ip_on_launch(
        &self,
        subnet_id: &str,
        enabled: bool,
    ) -> Result<(), CloudError> {
        call(
            &self.budget,
            "ModifySubnetAttribute",
            self.client
                .modify_subnet_attribute()
                .subnet_id(subnet_id)
                .map_public_ip_on_launch(
                    ec2::AttributeBooleanValue::builder().value(enabled).build(),
                )
                .send(),
        )
        .await
        .map(drop)
    }

    async fn delete_subnet(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteSubnet",
                self.client.delete_subnet().subnet_id(id).send(),
            )
            .await
            .map(drop),
        )
    }

    async fn internet_gateways(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InternetGateway>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeInternetGateways",
            self.client
                .describe_internet_gateways()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .internet_gateways()
            .iter()
            .filter_map(gateway_of)
            .collect())
    }

    async fn create_internet_gateway(&self, tags: &Tags) -> Result<InternetGateway, CloudError> {
        let answer = call(
            &self.budget,
            "CreateInternetGateway",
            self.client
                .create_internet_gateway()
                .tag_specifications(tagged(ec2::ResourceType::InternetGateway, tags))
                .send(),
        )
        .await?;
        answer
            .internet_gateway()
            .and_then(gateway_of)
            .ok_or_else(|| {
                CloudError::new(
                    "CreateInternetGateway",
                    None,
                    "EC2 answered without a gateway",
                )
            })
    }

    async fn attach_internet_gateway(&self, id: &str, vpc_id: &str) -> Result<(), CloudError> {
        call(
            &self.budget,
            "AttachInternetGateway",
            self.client
                .attach_internet_gateway()
                .internet_gateway_id(id)
                .vpc_id(vpc_id)
                .send(),
        )
        .await
        .map(drop)
    }

    async fn detach_internet_gateway(&self, id: &str, vpc_id: &str) -> Result<(), CloudError> {
        match call(
            &self.budget,
            "DetachInternetGateway",
            self.client
                .detach_internet_gateway()
                .internet_gateway_id(id)
                .vpc_id(vpc_id)
                .send(),
        )
        .await
        {
            Err(error) if error.code.as_deref() == Some("Gateway.NotAttached") => Ok(()),
            answer => gone_is_done(answer.map(drop)),
        }
    }

    async fn delete_internet_gateway(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteInternetGateway",
                self.client
                    .delete_internet_gateway()
                    .internet_gateway_id(id)
                    .send(),
            )
            .await
            .map(drop),
        )
    }

    async fn addresses(&self, filters: &[Filter]) -> Result<Vec<Address>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeAddresses",
            self.client
                .describe_addresses()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .addresses()
            .iter()
            .filter_map(|a| {
                Some(Address {
                    allocation_id: a.allocation_id()?.to_string(),
                    public_ip: a.public_ip().unwrap_or_default().to_string(),
                    association_id: owned(a.association_id()),
                    tags: tags_of(a.tags()),
                })
            })
            .collect())
    }

    async fn allocate_address(&self, tags: &Tags) -> Result<Address, CloudError> {
        let answer = call(
            &self.budget,
            "AllocateAddress",
            self.client
                .allocate_address()
                .domain(ec2::DomainType::Vpc)
                .tag_specifications(tagged(ec2::ResourceType::ElasticIp, tags))
                .send(),
        )
        .await?;
        Ok(Address {
            allocation_id: answer
                .allocation_id()
                .ok_or_else(|| {
                    CloudError::new(
                        "AllocateAddress",
                        None,
                        "EC2 answered without an allocation",
                    )
                })?
                .to_string(),
            public_ip: answer.public_ip().unwrap_or_default().to_string(),
            association_id: None,
            tags: tags.clone(),
        })
    }

    async fn release_address(&self, allocation_id: &str) -> Result<(), CloudError> {
        match call(
            &self.budget,
            "ReleaseAddress",
            self.client
                .release_address()
                .allocation_id(allocation_id)
                .send(),
        )
        .await
        {
            Err(error) if error.code.as_deref() == Some("InvalidAllocationID.NotFound") => Ok(()),
            answer => gone_is_done(answer.map(drop)),
        }
    }

    async fn nat_gateways(&self, filters: &[Filter]) -> Result<Vec<NatGateway>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeNatGateways",
            self.client
                .describe_nat_gateways()
                .set_filter(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .nat_gateways()
            .iter()
            .filter_map(nat_of)
            .filter(|n| n.state != "deleted")
            .collect())
    }

    async fn create_nat_gateway(
        &self,
        subnet_id: &str,
        allocation_id: &str,
        client_token: &str,
        tags: &Tags,
    ) -> Result<NatGateway, CloudError> {
        let answer = call(
            &self.budget,
            "CreateNatGateway",
            self.client
                .create_nat_gateway()
                .subnet_id(subnet_id)
                .allocation_id(allocation_id)
                .client_token(client_token)
                .tag_specifications(tagged(ec2::ResourceType::Natgateway, tags))
                .send(),
        )
        .await?;
        answer.nat_gateway().and_then(nat_of).ok_or_else(|| {
            CloudError::new("CreateNatGateway", None, "EC2 answered without a gateway")
        })
    }

    async fn delete_nat_gateway(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteNatGateway",
                self.client.delete_nat_gateway().nat_gateway_id(id).send(),
            )
            .await
            .map(drop),
        )
    }

    async fn route_tables(&self, filters: &[Filter]) -> Result<Vec<RouteTable>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeRouteTables",
            self.client
                .describe_route_tables()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .route_tables()
            .iter()
            .filter_map(route_table_of)
            .collect())
    }

    async fn create_route_table(
        &self,
        vpc_id: &str,
        tags: &Tags,
    ) -> Result<RouteTable, CloudError> {
        let answer = call(
            &self.budget,
            "CreateRouteTable",
            self.client
                .create_route_table()
                .vpc_id(vpc_id)
                .tag_specifications(tagged(ec2::ResourceType::RouteTable, tags))
                .send(),
        )
        .await?;
        answer
            .route_table()
            .and_then(route_table_of)
            .ok_or_else(|| {
                CloudError::new("CreateRouteTable", None, "EC2 answered without a table")
            })
    }

    async fn create_route(
        &self,
        table_id: &str,
        destination: &str,
        target: &RouteTarget,
    ) -> Result<(), CloudError> {
        let request = self
            .client
            .create_route()
            .route_table_id(table_id)
            .destination_cidr_block(destination);
        let request = match target {
            RouteTarget::InternetGateway(id) => request.gateway_id(id),
            RouteTarget::NatGateway(id) => request.nat_gateway_id(id),
        };
        call(&self.budget, "CreateRoute", request.send())
            .await
            .map(drop)
    }

    async fn associate_route_table(
        &self,
        table_id: &str,
        subnet_id: &str,
    ) -> Result<(), CloudError> {
        call(
            &self.budget,
            "AssociateRouteTable",
            self.client
                .associate_route_table()
                .route_table_id(table_id)
                .subnet_id(subnet_id)
                .send(),
        )
        .await
        .map(drop)
    }

    async fn disassociate_route_table(&self, association_id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DisassociateRouteTable",
                self.client
                    .disassociate_route_table()
                    .association_id(association_id)
                    .send(),
            )
            .await
            .map(drop),
        )
    }

    async fn delete_route_table(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteRouteTable",
                self.client.delete_route_table().route_table_id(id).send(),
            )
            .await
            .map(drop),
        )
    }

    async fn create_security_group(
        &self,
        vpc_id: &str,
        name: &str,
        description: &str,
        tags: &Tags,
    ) -> Result<SecurityGroup, CloudError> {
        let answer = call(
            &self.budget,
            "CreateSecurityGroup",
            self.client
                .create_security_group()
                .vpc_id(vpc_id)
                .group_name(name)
                .description(description)
                .tag_specifications(tagged(ec2::ResourceType::SecurityGroup, tags))
                .send(),
        )
        .await?;
        Ok(SecurityGroup {
            id: answer
                .group_id()
                .ok_or_else(|| {
                    CloudError::new("CreateSecurityGroup", None, "EC2 answered without a group")
                })?
                .to_string(),
            name: name.to_string(),
            vpc_id: vpc_id.to_string(),
            tags: tags.clone(),
            ingress: Vec::new(),
        })
    }

    async fn authorize_ingress(
        &self,
        group_id: &str,
        rules: &[Permission],
    ) -> Result<(), CloudError> {
        if rules.is_empty() {
            return Ok(());
        }
        match call(
            &self.budget,
            "AuthorizeSecurityGroupIngress",
            self.client
                .authorize_security_group_ingress()
                .group_id(group_id)
                .set_ip_permissions(Some(ip_permissions(rules)))
                .send(),
        )
        .await
        {
            // Added by an earlier attempt whose answer was lost.
            Err(error) if error.code.as_deref() == Some("InvalidPermission.Duplicate") => Ok(()),
            answer => answer.map(drop),
        }
    }

    async fn revoke_ingress(&self, group_id: &str, rules: &[Permission]) -> Result<(), CloudError> {
        if rules.is_empty() {
            return Ok(());
        }
        match call(
            &self.budget,
            "RevokeSecurityGroupIngress",
            self.client
                .revoke_security_group_ingress()
                .group_id(group_id)
                .set_ip_permissions(Some(ip_permissions(rules)))
                .send(),
        )
        .await
        {
            Err(error) if error.code.as_deref() == Some("InvalidPermission.NotFound") => Ok(()),
            answer => answer.map(drop),
        }
    }

    async fn delete_security_group(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteSecurityGroup",
                self.client.delete_security_group().group_id(id).send(),
            )
            .await
            .map(drop),
        )
    }

    async fn network_interfaces(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeNetworkInterfaces",
            self.client
                .describe_network_interfaces()
                .set_filters(Some(ec2_filters(filters)))
                .send(),
        )
        .await?;
        Ok(answer
            .network_interfaces()
            .iter()
            .filter_map(|n| {
                Some(NetworkInterface {
                    id: n.network_interface_id()?.to_string(),
                    status: n
                        .status()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default(),
                    description: n.description().unwrap_or_default().to_string(),
                    group_ids: n
                        .groups()
                        .iter()
                        .filter_map(|g| g.group_id().map(str::to_string))
                        .collect(),
                })
            })
            .collect())
    }

    async fn delete_network_interface(&self, id: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteNetworkInterface",
                self.client
                    .delete_network_interface()
                    .network_interface_id(id)
                    .send(),
            )
            .await
            .map(drop),
        )
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

fn elb_tags(tags: &Tags) -> Vec<elb::Tag> {
    tags.iter()
        .map(|(key, value)| elb::Tag::builder().key(key).value(value).build())
        .collect()
}

fn load_balancer_of(lb: &elb::LoadBalancer) -> Option<LoadBalancer> {
    Some(LoadBalancer {
        arn: lb.load_balancer_arn()?.to_string(),
        name: lb.load_balancer_name().unwrap_or_default().to_string(),
        dns_name: lb.dns_name().unwrap_or_default().to_string(),
        state: lb
            .state()
            .and_then(|s| s.code())
            .map(|c| c.as_str().to_string())
            .unwrap_or_default(),
        vpc_id: lb.vpc_id().unwrap_or_default().to_string(),
        kind: lb
            .r#type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
    })
}

fn target_group_of(group: &elb::TargetGroup) -> Option<TargetGroup> {
    Some(TargetGroup {
        arn: group.target_group_arn()?.to_string(),
        name: group.target_group_name().unwrap_or_default().to_string(),
        port: group
            .port()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or_default(),
        vpc_id: group.vpc_id().unwrap_or_default().to_string(),
    })
}

fn listener_of(listener: &elb::Listener) -> Option<Listener> {
    Some(Listener {
        arn: listener.listener_arn()?.to_string(),
        port: listener
            .port()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or_default(),
        target_group_arns: listener
            .default_actions()
            .iter()
            .filter_map(|a| a.target_group_arn().map(str::to_string))
            .collect(),
    })
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
    async fn load_balancers(&self) -> Result<Vec<LoadBalancer>, CloudError> {
        let mut found = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let page = call(
                &self.budget,
                "DescribeLoadBalancers",
                self.client
                    .describe_load_balancers()
                    .set_marker(marker.take())
                    .send(),
            )
            .await?;
            found.extend(page.load_balancers().iter().filter_map(load_balancer_of));
            match page.next_marker() {
                Some(next) if !next.is_empty() => marker = Some(next.to_string()),
                _ => return Ok(found),
            }
        }
    }

    async fn load_balancers_named(&self, name: &str) -> Result<Vec<LoadBalancer>, CloudError> {
        match call(
            &self.budget,
            "DescribeLoadBalancers",
            self.client.describe_load_balancers().names(name).send(),
        )
        .await
        {
            Ok(answer) => Ok(answer
                .load_balancers()
                .iter()
                .filter_map(load_balancer_of)
                .collect()),
            Err(error) if error.is_not_found() => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    async fn tags(&self, arns: &[String]) -> Result<BTreeMap<String, Tags>, CloudError> {
        let mut found = BTreeMap::new();
        // At most 20 resources per call.
        for chunk in arns.chunks(20) {
            let answer = call(
                &self.budget,
                "DescribeTags",
                self.client
                    .describe_tags()
                    .set_resource_arns(Some(chunk.to_vec()))
                    .send(),
            )
            .await?;
            for description in answer.tag_descriptions() {
                if let Some(arn) = description.resource_arn() {
                    found.insert(
                        arn.to_string(),
                        description
                            .tags()
                            .iter()
                            .filter_map(|t| {
                                Some((
                                    t.key()?.to_string(),
                                    t.value().unwrap_or_default().to_string(),
                                ))
                            })
                            .collect(),
                    );
                }
            }
        }
        Ok(found)
    }

    async fn create_load_balancer(
        &self,
        request: &CreateLoadBalancer,
    ) -> Result<LoadBalancer, CloudError> {
        let scheme = match request.scheme {
            LoadBalancerScheme::InternetFacing => elb::LoadBalancerSchemeEnum::InternetFacing,
            LoadBalancerScheme::Internal => elb::LoadBalancerSchemeEnum::Internal,
        };
        let answer = call(
            &self.budget,
            "CreateLoadBalancer",
            self.client
                .create_load_balancer()
                .name(&request.name)
                .r#type(elb::LoadBalancerTypeEnum::Network)
                .scheme(scheme)
                .set_subnets(Some(request.subnet_ids.clone()))
                .set_security_groups(
                    (!request.security_group_ids.is_empty())
                        .then(|| request.security_group_ids.clone()),
                )
                .set_tags(Some(elb_tags(&request.tags)))
                .send(),
        )
        .await?;
        answer
            .load_balancers()
            .iter()
            .find_map(load_balancer_of)
            .ok_or_else(|| {
                CloudError::new(
                    "CreateLoadBalancer",
                    None,
                    "ELB answered without a load balancer",
                )
            })
    }

    async fn set_cross_zone(&self, arn: &str, enabled: bool) -> Result<(), CloudError> {
        call(
            &self.budget,
            "ModifyLoadBalancerAttributes",
            self.client
                .modify_load_balancer_attributes()
                .load_balancer_arn(arn)
                .attributes(
                    elb::LoadBalancerAttribute::builder()
                        .key("load_balancing.cross_zone.enabled")
                        .value(enabled.to_string())
                        .build(),
                )
                .send(),
        )
        .await
        .map(drop)
    }

    async fn delete_load_balancer(&self, arn: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteLoadBalancer",
                self.client
                    .delete_load_balancer()
                    .load_balancer_arn(arn)
                    .send(),
            )
            .await
            .map(drop),
        )
    }

    async fn target_groups_named(&self, name: &str) -> Result<Vec<TargetGroup>, CloudError> {
        match call(
            &self.budget,
            "DescribeTargetGroups",
            self.client.describe_target_groups().names(name).send(),
        )
        .await
        {
            Ok(answer) => Ok(answer
                .target_groups()
                .iter()
                .filter_map(target_group_of)
                .collect()),
            Err(error) if error.is_not_found() => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    async fn create_target_group(
        &self,
        request: &CreateTargetGroup,
    ) -> Result<TargetGroup, CloudError> {
        let answer = call(
            &self.budget,
            "CreateTargetGroup",
            self.client
                .create_target_group()
                .name(&request.name)
                .protocol(elb::ProtocolEnum::Tcp)
                .port(i32::from(request.port))
                .vpc_id(&request.vpc_id)
                .target_type(elb::TargetTypeEnum::Instance)
                .health_check_protocol(elb::ProtocolEnum::Tcp)
                .set_tags(Some(elb_tags(&request.tags)))
                .send(),
        )
        .await?;
        let group = answer
            .target_groups()
            .iter()
            .find_map(target_group_of)
            .ok_or_else(|| {
                CloudError::new(
                    "CreateTargetGroup",
                    None,
                    "ELB answered without a target group",
                )
            })?;
        call(
            &self.budget,
            "ModifyTargetGroupAttributes",
            self.client
                .modify_target_group_attributes()
                .target_group_arn(&group.arn)
                .attributes(
                    elb::TargetGroupAttribute::builder()
                        .key("preserve_client_ip.enabled")
                        .value(request.preserve_client_ip.to_string())
                        .build(),
                )
                .send(),
        )
        .await?;
        Ok(group)
    }

    async fn delete_target_group(&self, arn: &str) -> Result<(), CloudError> {
        gone_is_done(
            call(
                &self.budget,
                "DeleteTargetGroup",
                self.client
                    .delete_target_group()
                    .target_group_arn(arn)
                    .send(),
            )
            .await
            .map(drop),
        )
    }

    async fn listeners(&self, load_balancer_arn: &str) -> Result<Vec<Listener>, CloudError> {
        let answer = call(
            &self.budget,
            "DescribeListeners",
            self.client
                .describe_listeners()
                .load_balancer_arn(load_balancer_arn)
                .send(),
        )
        .await?;
        Ok(answer.listeners().iter().filter_map(listener_of).collect())
    }

    async fn create_listener(
        &self,
        load_balancer_arn: &str,
        port: u16,
        target_group_arn: &str,
    ) -> Result<Listener, CloudError> {
        let answer = call(
            &self.budget,
            "CreateListener",
            self.client
                .create_listener()
                .load_balancer_arn(load_balancer_arn)
                .protocol(elb::ProtocolEnum::Tcp)
                .port(i32::from(port))
                .default_actions(
                    elb::Action::builder()
                        .r#type(elb::ActionTypeEnum::Forward)
                        .target_group_arn(target_group_arn)
                        .build(),
                )
                .send(),
        )
        .await?;
        answer
            .listeners()
            .iter()
            .find_map(listener_of)
            .ok_or_else(|| {
                CloudError::new("CreateListener", None, "ELB answered without a listener")
            })
    }
}
