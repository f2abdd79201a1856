//! A canary on moto itself (real `moto_server`, no proxy): the gaps the provider's tests must not
//! build on, as found on moto 5.2, and the account isolation every moto test relies on. When a
//! moto upgrade changes one of these, this fails, and the tests (and their doc comments, which
//! say what moto cannot show) are to be revisited.
#![cfg(feature = "sdk")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use aws_sdk_ec2::types::Filter;
use aws_sdk_elasticloadbalancingv2::types::LoadBalancerTypeEnum;
use common::Moto;

#[tokio::test]
async fn each_test_sees_only_its_own_account() {
    let mine = Moto::new();
    let other = Moto::new();
    assert_ne!(mine.account, other.account);
    let (vpc, _) = mine.network().await;
    let seen = other
        .ec2
        .describe_vpcs()
        .filters(Filter::builder().name("vpc-id").values(&vpc).build())
        .send()
        .await
        .unwrap();
    assert!(seen.vpcs().is_empty(), "another account sees {vpc}");
    let own = mine.ec2.describe_vpcs().vpc_ids(&vpc).send().await.unwrap();
    assert_eq!(own.vpcs().len(), 1);
}

#[tokio::test]
async fn moto_ignores_client_tokens_and_cannot_filter_by_them() {
    let moto = Moto::new();
    let image = moto.any_image().await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let reservation = moto
            .ec2
            .run_instances()
            .image_id(&image)
            .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
            .min_count(1)
            .max_count(1)
            .client_token("capi-same-token")
            .send()
            .await
            .unwrap();
        let instance = &reservation.instances()[0];
        ids.push(instance.instance_id().unwrap().to_string());
        // State changes are instant: a describe right after the create already says running.
        let described = moto
            .ec2
            .describe_instances()
            .instance_ids(&ids[ids.len() - 1])
            .send()
            .await
            .unwrap();
        let state = described.reservations()[0].instances()[0]
            .state()
            .and_then(|s| s.name())
            .cloned();
        assert_eq!(state, Some(aws_sdk_ec2::types::InstanceStateName::Running));
    }
    assert_ne!(
        ids[0], ids[1],
        "moto now honours ClientToken: the exactly-once tests may use it directly"
    );
    let filtered = moto
        .ec2
        .describe_instances()
        .filters(
            Filter::builder()
                .name("client-token")
                .values("capi-same-token")
                .build(),
        )
        .send()
        .await;
    assert!(
        filtered.is_err(),
        "moto now implements the client-token filter: {filtered:?}"
    );
}

#[tokio::test]
async fn moto_makes_a_second_load_balancer_of_a_taken_name_and_calls_an_nlb_app() {
    let moto = Moto::new();
    let (_, subnets) = moto.network().await;
    let mut arns = Vec::new();
    for _ in 0..2 {
        let created = moto
            .elb
            .create_load_balancer()
            .name("demo-apiserver")
            .r#type(LoadBalancerTypeEnum::Network)
            .set_subnets(Some(subnets.clone()))
            .send()
            .await
            .unwrap();
        arns.push(
            created.load_balancers()[0]
                .load_balancer_arn()
                .unwrap()
                .to_string(),
        );
    }
    assert_ne!(
        arns[0], arns[1],
        "moto now refuses a taken load balancer name"
    );
    assert!(
        arns[0].contains("loadbalancer/app/"),
        "moto now names NLBs by their type: {}",
        arns[0]
    );
    let listed = moto.elb.describe_load_balancers().send().await.unwrap();
    let named = listed
        .load_balancers()
        .iter()
        .filter(|lb| lb.load_balancer_name() == Some("demo-apiserver"))
        .count();
    assert_eq!(named, 2);
}

/// A group and a launch template in `moto`'s account, the template tagging its instances
/// `rev=<revision>`.
async fn template(moto: &Moto, name: &str, revision: &str) -> String {
    use aws_sdk_ec2::types::{
        LaunchTemplateTagSpecificationRequest, RequestLaunchTemplateData, ResourceType, Tag,
    };
    let image = moto.any_image().await;
    moto.ec2
        .create_launch_template()
        .launch_template_name(name)
        .launch_template_data(
            RequestLaunchTemplateData::builder()
                .image_id(image)
                .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
                .tag_specifications(
                    LaunchTemplateTagSpecificationRequest::builder()
                        .resource_type(ResourceType::Instance)
                        .tags(Tag::builder().key("rev").value(revision).build())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap()
        .launch_template()
        .and_then(|t| t.launch_template_id())
        .unwrap()
        .to_string()
}

async fn create_group(moto: &Moto, template: &str, subnet: &str, desired: i32) {
    moto.autoscaling
        .create_auto_scaling_group()
        .auto_scaling_group_name("g")
        .launch_template(
            aws_sdk_autoscaling::types::LaunchTemplateSpecification::builder()
                .launch_template_id(template)
                .version("$Default")
                .build(),
        )
        .min_size(0)
        .max_size(10)
        .desired_capacity(desired)
        .vpc_zone_identifier(subnet)
        .send()
        .await
        .unwrap();
}

async fn members(moto: &Moto) -> Vec<aws_sdk_autoscaling::types::Instance> {
    let groups = moto
        .autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names("g")
        .send()
        .await
        .unwrap();
    groups.auto_scaling_groups()[0].instances().to_vec()
}

/// AWS refuses a second group of a name (`AlreadyExists`); moto replaces the first with it. The
/// pool actuator looks a group up by name before it creates one, which keeps a pool single on
/// both.
#[tokio::test]
async fn moto_replaces_a_group_created_twice_under_one_name() {
    let moto = Moto::new();
    let (_, subnets) = moto.network().await;
    let first = template(&moto, "lt-first", "r1").await;
    create_group(&moto, &first, &subnets[0], 2).await;
    let before: Vec<String> = members(&moto)
        .await
        .iter()
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect();
    create_group(&moto, &first, &subnets[0], 1).await;
    let after: Vec<String> = members(&moto)
        .await
        .iter()
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect();
    assert_eq!(
        after.len(),
        1,
        "moto now refuses a second group of one name"
    );
    assert!(after.iter().all(|id| !before.contains(id)));
}

/// AWS reports, per instance of a group, the template it was launched from; moto reports the
/// group's current template for every instance. The template's own instance tags are right
/// (EC2 keeps them), which is what the pool actuator reads an instance's revision from.
#[tokio::test]
async fn moto_reports_the_groups_current_template_for_every_member() {
    let moto = Moto::new();
    let (_, subnets) = moto.network().await;
    let first = template(&moto, "lt-r1", "r1").await;
    let second = template(&moto, "lt-r2", "r2").await;
    create_group(&moto, &first, &subnets[0], 1).await;
    moto.autoscaling
        .update_auto_scaling_group()
        .auto_scaling_group_name("g")
        .launch_template(
            aws_sdk_autoscaling::types::LaunchTemplateSpecification::builder()
                .launch_template_id(&second)
                .version("$Default")
                .build(),
        )
        .desired_capacity(2)
        .send()
        .await
        .unwrap();
    let members = members(&moto).await;
    let reported: BTreeSet<String> = members
        .iter()
        .filter_map(|i| {
            i.launch_template()?
                .launch_template_id()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        reported,
        BTreeSet::from([second.clone()]),
        "moto now reports each member's own template"
    );
    let ids: Vec<String> = members
        .iter()
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect();
    let described = moto
        .ec2
        .describe_instances()
        .set_instance_ids(Some(ids))
        .send()
        .await
        .unwrap();
    let revisions: BTreeSet<String> = described
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .flat_map(|i| i.tags())
        .filter(|t| t.key() == Some("rev"))
        .filter_map(|t| t.value().map(str::to_string))
        .collect();
    assert_eq!(
        revisions,
        BTreeSet::from(["r1".to_string(), "r2".to_string()])
    );
}
