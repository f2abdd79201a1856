//! The `AWSMachine` actuator on its SDK adapters against real `moto_server` (no proxy): what
//! reaches EC2 and ELBv2 — the instance's tags, subnet, security groups and user data, the
//! target group membership of control planes, AMI lookup by CAPA's name format — and that a
//! second `create` for one Machine finds the first instance (moto ignores `ClientToken`, so this
//! is the lookup by idempotency-key tag alone; the token replay is covered by the unit tests'
//! token-honouring stand-in). State changes are instant in moto, so nothing here waits.
#![cfg(feature = "sdk")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use aws_sdk_ec2::types::InstanceAttributeName;
use base64::Engine;
use capi_core::{Actuator, ActuatorErrorKind, InstanceState};
use common::Moto;
use common::world::{BOOTSTRAP, bootstrap, recorded, world};
use provider_aws::naming::IDEMPOTENCY_KEY_TAG;

#[tokio::test]
async fn a_worker_is_launched_once_tagged_placed_and_terminated() {
    let world = world(Moto::new()).await;
    let image = world.moto.any_image().await;
    let actuator = world.actuator();
    let scope = world.scope(
        "demo-md-0-abc",
        "uid-worker",
        serde_json::json!({"instanceType": "t3.large", "ami": {"id": image},
                           "additionalTags": {"cost-center": "42"}}),
    );
    assert_eq!(actuator.exists(&scope).await.unwrap(), None);
    let created = actuator.create(&scope, &bootstrap()).await.unwrap();
    let id = created.provider_id.rsplit('/').next().unwrap().to_string();
    assert_eq!(created.provider_id, format!("aws:///us-east-1b/{id}"));
    assert_eq!(created.failure_domain.as_deref(), Some("us-east-1b"));

    let key = scope.idempotency_key.to_string();
    let key = key.as_str();
    let live = world.instances_of(key).await;
    assert_eq!(live.len(), 1);
    let instance = &live[0];
    let tags: std::collections::BTreeMap<&str, &str> = instance
        .tags()
        .iter()
        .map(|t| (t.key().unwrap(), t.value().unwrap()))
        .collect();
    for (k, v) in [
        ("Name", "demo-md-0-abc"),
        ("team", "a"),
        ("cost-center", "42"),
        ("MachineName", "ns/demo-md-0-abc"),
        ("sigs.k8s.io/cluster-api-provider-aws/cluster/demo", "owned"),
        ("sigs.k8s.io/cluster-api-provider-aws/role", "node"),
        ("capi-rs.dev/cluster", "ns/demo"),
        ("kubernetes.io/cluster/demo", "owned"),
        (IDEMPOTENCY_KEY_TAG, key),
    ] {
        assert_eq!(tags.get(k), Some(&v), "tag {k}: {tags:?}");
    }
    let subnet = world.cluster.status.as_ref().unwrap();
    let subnet = &subnet.network_status.as_ref().unwrap().subnets[1].resource_id;
    assert_eq!(instance.subnet_id(), Some(subnet.as_str()));
    // IMDSv2 only, one hop: no IMDSv1 read of the instance's credentials or user data.
    let metadata = instance.metadata_options().unwrap();
    assert_eq!(
        metadata.http_tokens(),
        Some(&aws_sdk_ec2::types::HttpTokensState::Required)
    );
    assert_eq!(metadata.http_put_response_hop_limit(), Some(1));
    assert_eq!(
        metadata.http_endpoint(),
        Some(&aws_sdk_ec2::types::InstanceMetadataEndpointState::Enabled)
    );
    let user_data = world
        .moto
        .ec2
        .describe_instance_attribute()
        .instance_id(&id)
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .unwrap();
    let sent = user_data.user_data().and_then(|u| u.value()).unwrap();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(sent)
            .unwrap(),
        BOOTSTRAP.as_bytes()
    );

    // Another attempt for the same Machine (a restart before the ID was recorded) finds it.
    let again = world.actuator().create(&scope, &bootstrap()).await.unwrap();
    assert_eq!(again.provider_id, created.provider_id);
    assert_eq!(
        world.instances_of(key).await.len(),
        1,
        "exactly one instance"
    );

    let scope = recorded(scope, &created.provider_id);
    let found = actuator.exists(&scope).await.unwrap().unwrap();
    assert_eq!(found.reported.state, InstanceState::Running);
    assert!(!found.reported.addresses.is_empty(), "{found:?}");
    let outcome = actuator.update(&scope, found).await.unwrap();
    assert!(
        outcome.immutable_changes.is_empty(),
        "{:?}",
        outcome.immutable_changes
    );

    let waiting = actuator.delete(&scope).await.unwrap_err();
    assert_eq!(waiting.kind(), ActuatorErrorKind::RequeueAfter);
    actuator.delete(&scope).await.unwrap();
    assert!(world.instances_of(key).await.is_empty());
}

#[tokio::test]
async fn a_control_plane_joins_the_target_group_when_running_and_leaves_it_on_deletion() {
    let world = world(Moto::new()).await;
    let image = world.moto.any_image().await;
    let actuator = world.actuator();
    let scope = world.scope(
        "demo-control-plane-xyz",
        "uid-cp",
        serde_json::json!({"instanceType": "t3.large", "ami": {"id": image}}),
    );
    let created = actuator.create(&scope, &bootstrap()).await.unwrap();
    let scope = recorded(scope, &created.provider_id);
    let found = actuator.exists(&scope).await.unwrap().unwrap();
    actuator.update(&scope, found).await.unwrap();
    let id = created.provider_id.rsplit('/').next().unwrap().to_string();
    let members = || async {
        world
            .moto
            .elb
            .describe_target_health()
            .target_group_arn(&world.target_group)
            .send()
            .await
            .unwrap()
            .target_health_descriptions()
            .iter()
            .filter_map(|d| d.target().and_then(|t| t.id()).map(str::to_string))
            .collect::<Vec<_>>()
    };
    assert_eq!(members().await, std::slice::from_ref(&id));
    let tags = world.instances_of(scope.idempotency_key.as_str()).await[0]
        .tags()
        .iter()
        .find(|t| t.key() == Some("sigs.k8s.io/cluster-api-provider-aws/role"))
        .and_then(|t| t.value().map(str::to_string));
    assert_eq!(tags.as_deref(), Some("control-plane"));
    // A second reconcile finds it registered and registers nothing.
    let found = actuator.exists(&scope).await.unwrap().unwrap();
    actuator.update(&scope, found).await.unwrap();
    assert_eq!(members().await, [id]);

    let _ = actuator.delete(&scope).await.unwrap_err();
    assert!(
        members().await.is_empty(),
        "deregistered before termination"
    );
    actuator.delete(&scope).await.unwrap();
}

#[tokio::test]
async fn an_ami_is_looked_up_by_capas_name_format_for_the_machines_version() {
    let world = world(Moto::new()).await;
    let base = world.moto.any_image().await;
    // Two matching AMIs of this account (moto dates them now, so the second is the newest or
    // equal) and one of another version.
    let source = world
        .moto
        .ec2
        .run_instances()
        .image_id(&base)
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .unwrap();
    let source = source.instances()[0].instance_id().unwrap().to_string();
    let mut made = Vec::new();
    for name in [
        "capa-ami-ubuntu-24.04-v1.32.0-1",
        "capa-ami-ubuntu-24.04-v1.33.1-1",
    ] {
        let image = world
            .moto
            .ec2
            .create_image()
            .instance_id(&source)
            .name(name)
            .send()
            .await
            .unwrap();
        made.push(image.image_id().unwrap().to_string());
    }
    let actuator = world.actuator();
    let scope = world.scope(
        "demo-md-0-ami",
        "uid-ami",
        serde_json::json!({"instanceType": "t3.large", "imageLookupOrg": world.moto.account}),
    );
    let created = actuator.create(&scope, &bootstrap()).await.unwrap();
    let live = world.instances_of(scope.idempotency_key.as_str()).await;
    assert_eq!(live[0].image_id(), Some(made[1].as_str()), "{created:?}");

    let missing = world.scope(
        "demo-md-0-noami",
        "uid-noami",
        serde_json::json!({"instanceType": "t3.large", "imageLookupOrg": world.moto.account,
                           "imageLookupBaseOS": "flatcar"}),
    );
    let error = actuator.create(&missing, &bootstrap()).await.unwrap_err();
    assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
    assert_eq!(error.reason(), "ImageNotFound");
    assert!(
        error.message().contains("capa-ami-flatcar-?1.33.1-*"),
        "{error}"
    );
}
