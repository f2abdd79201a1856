//! A canary on moto itself (real `moto_server`, no proxy): the gaps the provider's tests must not
//! build on, as found on moto 5.2, and the account isolation every moto test relies on. When a
//! moto upgrade changes one of these, this fails, and the tests (and their doc comments, which
//! say what moto cannot show) are to be revisited.
#![cfg(feature = "sdk")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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
