//! [`LoadBalancing`] on ELBv2: network load balancers, target groups and listeners.

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_elasticloadbalancingv2::types as elb;

use super::{call, gone_is_done};
use crate::api::{LoadBalancerScheme, Tags};
use crate::cloud::error::CloudError;
use crate::cloud::load_balancing::{
    CreateLoadBalancer, CreateTargetGroup, Listener, LoadBalancer, LoadBalancing, TargetGroup,
};
use crate::throttle::RegionBudget;

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
