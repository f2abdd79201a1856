//! The `AWSMachine` actuator on its SDK adapters against real `moto_server` (no proxy): what
//! reaches EC2 and ELBv2 — the instance's tags, subnet, security groups and user data, the
//! target group membership of control planes, AMI lookup by CAPA's name format — and that a
//! second `create` for one Machine finds the first instance (moto ignores `ClientToken`, so this
//! is the lookup by idempotency-key tag alone; the token replay is covered by the unit tests'
//! token-honouring stand-in). State changes are instant in moto, so nothing here waits.
#![cfg(feature = "sdk")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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
                           "additionalTags": {"cost-center": "42"},
                           "cloudInit": {"insecureSkipSecretsManager": true}}),
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
    // Asked for (`insecureSkipSecretsManager`): the data itself is the user data.
    assert_eq!(world.user_data(&id).await, BOOTSTRAP.as_bytes());

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

/// The bootstrap data of a control plane holds the cluster's CA keys: it never sits in the
/// instance's user data (which anything reaching the metadata service reads), only in Secrets
/// Manager, named by the machine's idempotency key, until the node registers; a machine deleted
/// before that takes its secrets with it.
#[tokio::test]
async fn control_plane_bootstrap_data_travels_through_secrets_manager_never_user_data() {
    use std::io::Read;

    let world = world(Moto::new()).await;
    let image = world.moto.any_image().await;
    let actuator = world.actuator();
    let scope = world.scope(
        "demo-control-plane-keys",
        "uid-cp-keys",
        serde_json::json!({"instanceType": "t3.large", "ami": {"id": image}}),
    );
    // A control plane's data: the CA key among kilobytes of files (several secrets' worth).
    let key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAnotarealkey\n-----END RSA PRIVATE KEY-----";
    let filler: String = (0..3000u32)
        .map(|i| format!("{:08x}", i.wrapping_mul(2_654_435_761)))
        .collect();
    let data = format!(
        "#cloud-config\nwrite_files:\n- path: /etc/kubernetes/pki/ca.key\n  content: |\n    {key}\n- path: /etc/filler\n  content: {filler}\n"
    );
    let bootstrap =
        capi_core::BootstrapData::new(capi_core::BootstrapFormat::CloudConfig, data.clone());
    let created = actuator.create(&scope, &bootstrap).await.unwrap();
    let id = created.provider_id.rsplit('/').next().unwrap().to_string();

    let sent = String::from_utf8(world.user_data(&id).await).unwrap();
    assert!(
        !sent.contains("PRIVATE KEY") && !sent.contains("notarealkey"),
        "{sent}"
    );
    assert!(sent.contains("text/cloud-boothook"), "{sent}");

    // The secrets hold the data, gzip-compressed, in order.
    let key_id = scope.idempotency_key.to_string();
    let mut names: Vec<String> = world
        .moto
        .secrets
        .list_secrets()
        .send()
        .await
        .unwrap()
        .secret_list()
        .iter()
        .filter_map(|s| s.name().map(str::to_string))
        .collect();
    let count = names.len();
    assert!(count >= 2, "{names:?}");
    let index = |name: &String| -> usize { name.rsplit('-').next().unwrap().parse().unwrap() };
    names.sort_by_key(index);
    let start = provider_aws::machine::bootstrap_secrets::names_start(&key_id);
    let mut compressed = Vec::new();
    for name in &names {
        assert!(name.starts_with(&start), "{name}");
        assert!(sent.contains(name.as_str()), "the script fetches {name}");
        let value = world
            .moto
            .secrets
            .get_secret_value()
            .secret_id(name)
            .send()
            .await
            .unwrap();
        compressed.extend_from_slice(value.secret_binary().unwrap().as_ref());
    }
    let mut stored = String::new();
    flate2::read::GzDecoder::new(compressed.as_slice())
        .read_to_string(&mut stored)
        .unwrap();
    assert_eq!(stored, data);
    let instance = &world.instances_of(&key_id).await[0];
    let tag = |instance: &aws_sdk_ec2::types::Instance| {
        instance
            .tags()
            .iter()
            .find(|t| t.key() == Some(provider_aws::machine::bootstrap_secrets::COUNT_TAG))
            .and_then(|t| t.value().map(str::to_string))
    };
    assert_eq!(tag(instance), Some(count.to_string()));
    // The names' random part is in the user data only: no tag gives it away.
    let nonce = names[0][start.len()..].rsplit_once('-').unwrap().0;
    assert_eq!(nonce.len(), 32, "{nonce}");
    assert!(
        instance
            .tags()
            .iter()
            .all(|t| !t.value().unwrap_or_default().contains(nonce)),
        "{:?}",
        instance.tags()
    );

    // Until the node registers, the secrets stay (the instance may not have booted yet).
    let scope = recorded(scope, &created.provider_id);
    let found = actuator.exists(&scope).await.unwrap().unwrap();
    actuator.update(&scope, found).await.unwrap();
    let left = || async {
        world
            .moto
            .secrets
            .list_secrets()
            .send()
            .await
            .unwrap()
            .secret_list()
            .len()
    };
    assert_eq!(left().await, count);

    // A second machine is deleted before its node registers: its secrets go with it.
    let other = world.scope(
        "demo-control-plane-early",
        "uid-cp-early",
        serde_json::json!({"instanceType": "t3.large", "ami": {"id": image}}),
    );
    let early = actuator.create(&other, &bootstrap).await.unwrap();
    assert_eq!(left().await, 2 * count);
    let other = recorded(other, &early.provider_id);
    let _ = actuator.delete(&other).await.unwrap_err();
    actuator.delete(&other).await.unwrap();
    assert_eq!(
        left().await,
        count,
        "the deleted machine's secrets are gone"
    );

    // The node registers: the next reconcile deletes the secrets and says so on the instance.
    let mut machine = (*scope.machine).clone();
    machine.status.get_or_insert_default().node_ref = Some(capi_core::api::MachineNodeReference {
        name: "node-1".into(),
    });
    let scope = capi_core::MachineScope {
        machine: std::sync::Arc::new(machine),
        ..scope
    };
    let found = actuator.exists(&scope).await.unwrap().unwrap();
    actuator.update(&scope, found).await.unwrap();
    assert_eq!(left().await, 0);
    assert_eq!(tag(&world.instances_of(&key_id).await[0]), Some("0".into()));
    let _ = actuator.delete(&scope).await.unwrap_err();
    actuator.delete(&scope).await.unwrap();
}

/// A tenant writes `spec.providerID` naming an instance of another team (another cluster's, in
/// the same account): the actuator never adopts, updates or terminates it — `exists`, `update`
/// and `delete` all end in `InstanceNotOwned`, and the instance keeps running untouched.
#[tokio::test]
async fn a_provider_id_naming_another_tenants_instance_is_never_touched() {
    let world = world(Moto::new()).await;
    let image = world.moto.any_image().await;
    // The other team's instance, with the other cluster's ownership tags.
    let theirs = world
        .moto
        .ec2
        .run_instances()
        .image_id(&image)
        .instance_type(aws_sdk_ec2::types::InstanceType::T3Large)
        .min_count(1)
        .max_count(1)
        .tag_specifications(
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::Instance)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("capi-rs.dev/cluster")
                        .value("team-b/prod")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let theirs = theirs.instances()[0].instance_id().unwrap().to_string();
    let actuator = world.actuator();
    let scope = world.scope(
        "demo-md-0-hijack",
        "uid-hijack",
        serde_json::json!({"instanceType": "t3.large", "ami": {"id": image},
                           "providerID": format!("aws:///us-east-1a/{theirs}")}),
    );
    let refused = actuator.exists(&scope).await.unwrap_err();
    assert_eq!(refused.kind(), ActuatorErrorKind::InvalidConfiguration);
    assert_eq!(refused.reason(), "InstanceNotOwned");
    assert!(refused.to_string().contains(&theirs), "{refused}");
    let refused = actuator.delete(&scope).await.unwrap_err();
    assert_eq!(refused.reason(), "InstanceNotOwned");

    let described = world
        .moto
        .ec2
        .describe_instances()
        .instance_ids(&theirs)
        .send()
        .await
        .unwrap();
    let instance = &described.reservations()[0].instances()[0];
    assert_eq!(
        instance.state().and_then(|s| s.name()),
        Some(&aws_sdk_ec2::types::InstanceStateName::Running),
        "the other team's instance keeps running"
    );
    let tags: Vec<_> = instance.tags().iter().filter_map(|t| t.key()).collect();
    assert_eq!(tags, ["capi-rs.dev/cluster"], "and carries no tag of ours");
}
