//! The pool actuator's decisions over mocked clouds: whose group it takes, which instances it
//! removes, a create whose answer was lost, and deletion step by step. What moto shows — a group
//! created, scaled, rolled and deleted for real — is in `tests/pool_on_moto.rs`.

use std::collections::BTreeSet;

use capi_core::api::{Cluster, MachinePool};
use capi_core::{ActuatorErrorKind, BootstrapData, BootstrapFormat, IdempotencyKey, PoolSize};
use capi_provider::support::redact::Redaction;

use super::*;
use crate::cloud::{
    CloudError, GroupInstance, LaunchTemplate, MockCompute, MockLoadBalancing, MockNetwork,
    MockScaling, MockSecrets, StoredSecret,
};
use crate::connector::MockConnector;
use crate::naming::{CLUSTER_TAG, OWNED};

const KEY: &str = "capi-pool-uid-1";
/// A nonce as the provider makes them: 128 bits in hex.
const NONCE: &str = "000102030405060708090a0b0c0d0e0f";
const ARN: &str =
    "arn:aws:autoscaling:us-east-1:1:autoScalingGroup:0-1:autoScalingGroupName/capi-pool-uid-1";

fn aws_cluster() -> AWSCluster {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSCluster",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {"region": "us-east-1"},
        "status": {"networkStatus": {
            "vpc": {"id": "vpc-1"},
            "subnets": [
                {"id": "a", "resourceID": "subnet-a", "availabilityZone": "us-east-1a",
                 "isPublic": false},
                {"id": "pa", "resourceID": "subnet-pa", "availabilityZone": "us-east-1a",
                 "isPublic": true}],
            "securityGroups": {"node": {"id": "sg-node"}}}},
    }))
    .unwrap()
}

fn pool(provider_id: Option<&str>) -> AWSMachinePool {
    let mut pool: AWSMachinePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSMachinePool",
        "metadata": {"name": "workers", "namespace": "ns",
                     "labels": {"cluster.x-k8s.io/cluster-name": "demo"}},
        "spec": {"minSize": 1, "maxSize": 5,
                 "awsLaunchTemplate": {"instanceType": "t3.large", "ami": {"id": "ami-0abc"}}},
    }))
    .unwrap();
    pool.spec.provider_id = provider_id.map(str::to_string);
    pool
}

fn scope(
    pool: AWSMachinePool,
    capacity: u32,
    remove: &[&str],
) -> PoolScope<AWSMachinePool, AWSCluster> {
    let mut machine_pool = MachinePool::default();
    machine_pool.metadata.uid = Some("pool-uid-1".into());
    machine_pool.spec.cluster_name = "demo".into();
    let idempotency_key = IdempotencyKey::for_machine_pool(&machine_pool).unwrap();
    assert_eq!(idempotency_key.as_str(), KEY);
    PoolScope {
        cluster: Arc::new(Cluster::default()),
        infra_cluster: Some(Arc::new(aws_cluster())),
        machine_pool: Arc::new(machine_pool),
        infra_pool: Arc::new(pool),
        idempotency_key,
        size: PoolSize {
            capacity: Some(capacity),
            remove: remove.iter().map(|id| (*id).to_string()).collect(),
        },
        revision: ModelRevision::new("r-1"),
    }
}

/// The tags of a group made for the pool of [`scope`].
fn our_tags() -> Tags {
    [
        (
            "sigs.k8s.io/cluster-api-provider-aws/cluster/demo".to_string(),
            OWNED.to_string(),
        ),
        (CLUSTER_TAG.to_string(), "ns/demo".to_string()),
        (IDEMPOTENCY_KEY_TAG.to_string(), KEY.to_string()),
    ]
    .into()
}

fn group(instances: &[(&str, &str)]) -> Group {
    Group {
        name: KEY.into(),
        arn: ARN.into(),
        desired: u32::try_from(instances.len()).unwrap(),
        min: 1,
        max: 5,
        launch_template_id: Some("lt-1".into()),
        subnet_ids: vec!["subnet-a".into()],
        tags: our_tags(),
        suspended: SUSPENDED_PROCESSES
            .iter()
            .map(|p| (*p).to_string())
            .collect(),
        instances: instances
            .iter()
            .map(|(id, lifecycle)| GroupInstance {
                id: (*id).to_string(),
                zone: Some("us-east-1a".into()),
                lifecycle: (*lifecycle).to_string(),
                unhealthy: false,
                launch_template_id: Some("lt-1".into()),
            })
            .collect(),
        deleting: false,
        capacity_rebalance: false,
    }
}

fn described(id: &str) -> Instance {
    Instance {
        id: id.into(),
        state: Some(InstanceState::Running),
        zone: Some("us-east-1a".into()),
        private_ip: Some("10.0.0.1".into()),
        tags: [
            (model::REVISION_TAG.to_string(), "r-1".to_string()),
            (model::LAUNCHED_FROM_TAG.to_string(), "lt-1".to_string()),
        ]
        .into(),
        ..Instance::default()
    }
}

/// EC2 describing every instance asked for as running, of revision `r-1`.
fn compute() -> MockCompute {
    let mut compute = MockCompute::new();
    compute
        .expect_instances_by_id()
        .returning(|ids| Ok(ids.iter().map(|id| described(id)).collect()));
    compute
}

fn actuator(compute: MockCompute, scaling: MockScaling, secrets: MockSecrets) -> AwsPoolActuator {
    let clients = Clients {
        compute: Arc::new(compute),
        network: Arc::new(MockNetwork::new()),
        load_balancing: Arc::new(MockLoadBalancing::new()),
        secrets: Arc::new(secrets),
        scaling: Arc::new(scaling),
        redaction: Redaction::default(),
    };
    let mut connector = MockConnector::new();
    connector
        .expect_connect()
        .returning(move |_| Ok(clients.clone()));
    AwsPoolActuator::new(Arc::new(connector))
}

fn bootstrap() -> BootstrapData {
    BootstrapData::new(BootstrapFormat::CloudConfig, "#cloud-config\nruncmd: []\n")
}

/// The template of revision `r-1` for [`bootstrap`], as `model::ensure` names it.
fn current_template() -> LaunchTemplate {
    LaunchTemplate {
        id: "lt-1".into(),
        name: String::new(),
        tags: our_tags(),
    }
}

#[test]
fn the_group_name_is_read_off_its_arn() {
    assert_eq!(group_name_of(ARN), Some(KEY));
    assert_eq!(group_name_of("aws:///us-east-1a/i-1"), None);
    assert_eq!(
        group_name_of("arn:aws:autoscaling:r:1:autoScalingGroup:x:autoScalingGroupName/"),
        None
    );
}

#[tokio::test]
async fn a_group_named_in_the_provider_id_without_the_pools_tags_is_never_touched() {
    let mut scaling = MockScaling::new();
    scaling.expect_group().returning(|name| {
        let mut other = group(&[("i-1", "InService")]);
        other.name = name.to_string();
        other
            .tags
            .insert(IDEMPOTENCY_KEY_TAG.into(), "capi-another".into());
        Ok(Some(other))
    });
    let arn = ARN.replace(KEY, "someone-elses");
    let actuator = actuator(compute(), scaling, MockSecrets::new());
    let error = actuator
        .exists(&scope(pool(Some(&arn)), 1, &[]))
        .await
        .err()
        .unwrap();
    assert_eq!(error.reason(), "ScaleSetNotOwned");
    assert!(matches!(
        error.kind(),
        ActuatorErrorKind::InvalidConfiguration
    ));
}

/// EC2 lags behind Auto Scaling's launches: an instance it does not describe yet is of the
/// revision the tag of its template says — never of no revision (which the loop takes for
/// outdated, and surges to replace), whatever the pool's status records.
#[tokio::test]
async fn an_instance_ec2_does_not_describe_yet_is_of_the_revision_its_template_was_made_for() {
    let mut scaling = MockScaling::new();
    scaling.expect_group().returning(|_| {
        let mut found = group(&[
            ("i-1", "InService"),
            ("i-2", "Pending"),
            ("i-3", "Pending"),
            ("i-4", "Pending"),
        ]);
        found.instances[1].launch_template_id = Some("lt-1".into());
        found.instances[2].launch_template_id = Some("lt-0".into());
        found.instances[3].launch_template_id = Some("lt-2".into());
        Ok(Some(found))
    });
    let template = |id: &str, revision: &str| {
        let mut tags = our_tags();
        tags.insert(model::REVISION_TAG.into(), revision.into());
        LaunchTemplate {
            id: id.into(),
            name: format!("{KEY}-{id}"),
            tags,
        }
    };
    let templates = vec![template("lt-1", "r-1"), template("lt-2", "r-2")];
    scaling
        .expect_launch_templates()
        .times(1)
        .returning(move |_, _| Ok(templates.clone()));
    let mut compute = MockCompute::new();
    compute.expect_instances_by_id().returning(|ids| {
        Ok(ids
            .iter()
            .filter(|id| *id == "i-1")
            .map(|id| described(id))
            .collect())
    });
    // The status records another template for r-1 (the one before a rotated token): it is not
    // what tells.
    let mut recorded = pool(Some(ARN));
    recorded.status = Some(crate::api::AWSMachinePoolStatus {
        launch_template_id: Some("lt-9".into()),
        model_revision: Some("r-1".into()),
        ..Default::default()
    });
    let actuator = actuator(compute, scaling, MockSecrets::new());
    let found = actuator
        .exists(&scope(recorded, 4, &[]))
        .await
        .unwrap()
        .unwrap();
    let revisions: Vec<(&str, Option<&str>)> = found
        .reported
        .instances
        .iter()
        .map(|i| {
            (
                i.name.as_str(),
                i.revision.as_ref().map(ModelRevision::as_str),
            )
        })
        .collect();
    assert_eq!(
        revisions,
        [
            ("i-1", Some("r-1")),
            ("i-2", Some("r-1")),
            // Launched from a template not found.
            ("i-3", None),
            // Launched from the template of another revision: outdated.
            ("i-4", Some("r-2")),
        ]
    );
    let current = ModelRevision::new("r-1");
    assert!(
        found.reported.instances[1].state == LoopState::Provisioning
            && found.reported.instances[1].is_up_to_date(&current)
    );
    assert!(!found.reported.instances[3].is_up_to_date(&current));
}

#[tokio::test]
async fn update_removes_exactly_the_named_instances_that_are_not_leaving_already() {
    let mut scaling = MockScaling::new();
    let removed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&removed);
    scaling.expect_terminate_instance().returning(move |id| {
        seen.lock().unwrap().push(id.to_string());
        Ok(())
    });
    scaling
        .expect_update_group()
        .withf(|_, update| {
            update.size
                == Some(GroupSize {
                    min: 1,
                    max: 5,
                    desired: Some(2),
                })
                && update.launch_template_id.is_none()
        })
        .times(1)
        .returning(|_, _| Ok(()));
    scaling
        .expect_group()
        .returning(|_| Ok(Some(group(&[("i-1", "InService"), ("i-4", "InService")]))));
    scaling.expect_tag_group().returning(|_, _| Ok(()));
    let before = group(&[
        ("i-1", "InService"),
        ("i-2", "InService"),
        ("i-3", "Terminating"),
        ("i-4", "InService"),
    ]);
    let found = FoundGroup {
        instances: before.instances.iter().map(|i| described(&i.id)).collect(),
        group: before,
        template_revisions: Default::default(),
    };
    let actuator = actuator(compute(), scaling, MockSecrets::new());
    let scope = scope(
        pool(Some(ARN)),
        2,
        &[
            "aws:///us-east-1a/i-2",
            "aws:///us-east-1a/i-3",
            "aws:///us-east-1a/i-9",
        ],
    );
    let reported = actuator
        .update(
            &scope,
            Found::with(report(&found, None, None).unwrap(), found),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        *removed.lock().unwrap(),
        ["i-2"],
        "i-3 is leaving, i-9 is not the group's"
    );
    assert_eq!(
        reported.provider_ids(),
        ["aws:///us-east-1a/i-1", "aws:///us-east-1a/i-4"]
    );
    assert!(
        reported
            .instances
            .iter()
            .all(|i| i.is_up_to_date(&ModelRevision::new("r-1")))
    );
}

#[tokio::test]
async fn a_create_whose_answer_was_lost_takes_the_group_it_made() {
    let mut scaling = MockScaling::new();
    let mut looked = 0;
    scaling.expect_group().returning(move |_| {
        looked += 1;
        // Not described yet on the first look; there once the create is refused.
        Ok((looked > 1).then(|| group(&[("i-1", "Pending")])))
    });
    scaling
        .expect_launch_templates()
        .returning(|_, _| Ok(Vec::new()));
    scaling
        .expect_create_launch_template()
        .times(1)
        .returning(|_| Ok(current_template()));
    scaling.expect_create_group().times(1).returning(|_| {
        Err(CloudError::new(
            "CreateAutoScalingGroup",
            Some("AlreadyExists".into()),
            "AutoScalingGroup by this name already exists",
        ))
    });
    let mut secrets = MockSecrets::new();
    secrets
        .expect_put_secret()
        .times(1)
        .returning(|_, _, _| Ok(()));
    let actuator = actuator(compute(), scaling, secrets);
    let reported = actuator
        .create(&scope(pool(None), 1, &[]), &bootstrap())
        .await
        .unwrap();
    assert_eq!(reported.provider_id, ARN);
    assert_eq!(reported.provider_ids(), ["aws:///us-east-1a/i-1"]);
    assert_eq!(reported.instances[0].state, LoopState::Provisioning);
}

/// The template of revision `r-1` made for other data.
fn old_template() -> LaunchTemplate {
    LaunchTemplate {
        id: "lt-1".into(),
        name: format!("{KEY}-old"),
        tags: {
            let mut tags = our_tags();
            tags.insert(model::SECRETS_TAG.into(), format!("{NONCE}-1"));
            tags
        },
    }
}

/// `update` of a pool of one instance (launched from `lt-1` at `launched`, in seconds since
/// the epoch; `None`: EC2 does not say) with new bootstrap data: the group is switched to a new
/// template `lt-2`.
async fn rotate(
    launched: Option<i64>,
    mut scaling: MockScaling,
    mut secrets: MockSecrets,
) -> ScaleSetReport {
    // Left by a creation that failed after storing them, long ago; and by one moments ago (its
    // template may be listed late).
    secrets.expect_secrets().returning(|start| {
        Ok(vec![
            StoredSecret {
                name: format!("{start}{}-0", "f".repeat(32)),
                created: Some(0),
            },
            StoredSecret {
                name: format!("{start}{}-0", "e".repeat(32)),
                created: None,
            },
        ])
    });
    secrets
        .expect_delete_secret()
        .withf(|name| name.contains(&"f".repeat(32)))
        .times(1)
        .returning(|_| Ok(()));
    scaling
        .expect_launch_templates()
        .returning(|_, _| Ok(vec![old_template()]));
    scaling
        .expect_create_launch_template()
        .times(1)
        .returning(|request| {
            assert!(request.tags.contains_key(model::SECRETS_TAG));
            Ok(LaunchTemplate {
                id: "lt-2".into(),
                name: request.name.clone(),
                tags: request.tags.clone(),
            })
        });
    scaling
        .expect_update_group()
        .withf(|_, update| {
            update.launch_template_id.as_deref() == Some("lt-2") && update.size.is_none()
        })
        .times(1)
        .returning(|_, _| Ok(()));
    scaling.expect_tag_group().returning(|_, _| Ok(()));
    scaling
        .expect_group()
        .returning(|_| Ok(Some(group(&[("i-1", "InService")]))));
    let mut compute = MockCompute::new();
    compute.expect_instances_by_id().returning(move |ids| {
        Ok(ids
            .iter()
            .map(|id| Instance {
                launch_time: launched,
                ..described(id)
            })
            .collect())
    });
    let found = FoundGroup {
        instances: vec![described("i-1")],
        group: group(&[("i-1", "InService")]),
        template_revisions: Default::default(),
    };
    actuator(compute, scaling, secrets)
        .update(
            &scope(pool(Some(ARN)), 1, &[]),
            Found::with(report(&found, None, None).unwrap(), found),
            Some(bootstrap()),
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn a_rotated_token_makes_a_template_with_secrets_of_its_own_and_rolls_nothing() {
    let mut scaling = MockScaling::new();
    // An instance was launched from the old template moments ago: it may still be fetching.
    scaling.expect_delete_launch_template().never();
    let mut secrets = MockSecrets::new();
    secrets
        .expect_put_secret()
        .times(1)
        .returning(|_, _, _| Ok(()));
    secrets
        .expect_delete_secret()
        .withf(|name| name.contains(NONCE))
        .never();
    let reported = rotate(None, scaling, secrets).await;
    assert!(reported.instances[0].is_up_to_date(&ModelRevision::new("r-1")));
}

#[tokio::test]
async fn a_template_nothing_was_launched_from_lately_goes_with_its_secrets() {
    let mut scaling = MockScaling::new();
    scaling
        .expect_delete_launch_template()
        .withf(|id| id == "lt-1")
        .times(1)
        .returning(|_| Ok(()));
    let mut secrets = MockSecrets::new();
    secrets
        .expect_put_secret()
        .times(1)
        .returning(|_, _, _| Ok(()));
    secrets
        .expect_delete_secret()
        .withf(|name| *name == format!("aws.cluster.x-k8s.io/{KEY}-{NONCE}-0"))
        .times(1)
        .returning(|_| Ok(()));
    // Launched at the epoch: long before the grace.
    rotate(Some(0), scaling, secrets).await;
}

#[tokio::test]
async fn deletion_empties_the_group_deletes_it_then_its_templates_and_secrets() {
    let state = Arc::new(std::sync::Mutex::new(Some(group(&[("i-1", "InService")]))));
    let mut scaling = MockScaling::new();
    let current = Arc::clone(&state);
    scaling
        .expect_group()
        .returning(move |_| Ok(current.lock().unwrap().clone()));
    let emptied = Arc::clone(&state);
    scaling
        .expect_update_group()
        .withf(|_, update| {
            update
                .size
                .is_some_and(|s| s.desired == Some(0) && s.min == 0)
        })
        .times(1)
        .returning(move |_, _| {
            let mut state = emptied.lock().unwrap();
            if let Some(group) = state.as_mut() {
                group.instances.clear();
                group.desired = 0;
                group.min = 0;
            }
            Ok(())
        });
    let deleted = Arc::clone(&state);
    scaling.expect_delete_group().times(1).returning(move |_| {
        *deleted.lock().unwrap() = None;
        Ok(())
    });
    scaling
        .expect_launch_templates()
        .returning(|_, _| Ok(vec![current_template()]));
    scaling
        .expect_delete_launch_template()
        .withf(|id| id == "lt-1")
        .times(1)
        .returning(|_| Ok(()));
    let mut compute = compute();
    compute.expect_instances().returning(|_| Ok(Vec::new()));
    let mut secrets = MockSecrets::new();
    secrets.expect_secret_names().returning(|_| {
        Ok(vec![
            format!("aws.cluster.x-k8s.io/{KEY}-{NONCE}-0"),
            // Not a name this pool's key makes: another key's that starts like it.
            format!("aws.cluster.x-k8s.io/{KEY}-aaaa-{NONCE}-0"),
        ])
    });
    secrets
        .expect_delete_secret()
        .withf(|name| *name == format!("aws.cluster.x-k8s.io/{KEY}-{NONCE}-0"))
        .times(1)
        .returning(|_| Ok(()));
    let actuator = actuator(compute, scaling, secrets);
    let scope = scope(pool(Some(ARN)), 0, &[]);
    let mut steps = BTreeSet::new();
    for _ in 0..3 {
        let error = actuator.delete(&scope).await.err().unwrap();
        assert!(matches!(error.kind(), ActuatorErrorKind::RequeueAfter));
        steps.insert(error.reason().to_string());
        if state.lock().unwrap().is_none() {
            break;
        }
    }
    assert_eq!(steps, BTreeSet::from(["DeletingScaleSet".to_string()]));
    actuator.delete(&scope).await.unwrap();
}

#[tokio::test]
async fn a_removal_below_the_groups_lower_bound_lowers_the_bound_before_the_instance_goes() {
    let mut sequence = mockall::Sequence::new();
    let mut scaling = MockScaling::new();
    scaling
        .expect_update_group()
        .withf(|_, update| {
            update.size
                == Some(GroupSize {
                    min: 0,
                    max: 5,
                    desired: None,
                })
        })
        .times(1)
        .in_sequence(&mut sequence)
        .returning(|_, _| Ok(()));
    scaling
        .expect_terminate_instance()
        .withf(|id| id == "i-1")
        .times(1)
        .in_sequence(&mut sequence)
        .returning(|_| Ok(()));
    scaling
        .expect_update_group()
        .withf(|_, update| {
            update.size
                == Some(GroupSize {
                    min: 0,
                    max: 5,
                    desired: Some(0),
                })
        })
        .times(1)
        .in_sequence(&mut sequence)
        .returning(|_, _| Ok(()));
    scaling.expect_tag_group().returning(|_, _| Ok(()));
    scaling.expect_group().returning(|_| Ok(Some(group(&[]))));
    let before = group(&[("i-1", "InService")]);
    let found = FoundGroup {
        instances: vec![described("i-1")],
        group: before,
        template_revisions: Default::default(),
    };
    let reported = actuator(compute(), scaling, MockSecrets::new())
        .update(
            &scope(pool(Some(ARN)), 0, &["aws:///us-east-1a/i-1"]),
            Found::with(report(&found, None, None).unwrap(), found),
            None,
        )
        .await
        .unwrap();
    assert!(reported.instances.is_empty());
}

#[test]
fn an_autoscaled_groups_bounds_never_narrow_below_what_it_holds() {
    let mut pool = pool(None);
    pool.spec.min_size = 2;
    pool.spec.max_size = 3;
    // An autoscaler holds the group at 5, above the pool's upper bound: Auto Scaling would
    // terminate two instances of its choosing were the bound set to 3.
    assert_eq!(
        size_for(&pool, None, 5),
        GroupSize {
            min: 2,
            max: 5,
            desired: None
        }
    );
    assert_eq!(
        size_for(&pool, Some(1), 5),
        GroupSize {
            min: 1,
            max: 3,
            desired: Some(1)
        }
    );
}

#[tokio::test]
async fn an_autoscaled_pools_removal_is_never_replaced() {
    let mut scaling = MockScaling::new();
    // Whatever is sent, the lower bound never exceeds what the group holds after the removal:
    // Auto Scaling would raise the desired capacity to it and launch a replacement.
    scaling
        .expect_update_group()
        .withf(|_, update| {
            update
                .size
                .is_some_and(|s| s.min <= 1 && s.desired.is_none())
        })
        .times(1..)
        .returning(|_, _| Ok(()));
    scaling
        .expect_terminate_instance()
        .times(1)
        .returning(|_| Ok(()));
    scaling.expect_tag_group().returning(|_, _| Ok(()));
    scaling
        .expect_group()
        .returning(|_| Ok(Some(group(&[("i-2", "InService")]))));
    let mut pool = pool(Some(ARN));
    pool.spec.min_size = 2;
    let mut before = group(&[("i-1", "InService"), ("i-2", "InService")]);
    before.min = 2;
    let found = FoundGroup {
        instances: vec![described("i-1"), described("i-2")],
        group: before,
        template_revisions: Default::default(),
    };
    let mut scope = scope(pool, 0, &["aws:///us-east-1a/i-1"]);
    scope.size.capacity = None;
    actuator(compute(), scaling, MockSecrets::new())
        .update(
            &scope,
            Found::with(report(&found, None, None).unwrap(), found),
            None,
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_model_that_cannot_be_made_adds_no_surge_of_the_old_one_and_is_reported() {
    let mut scaling = MockScaling::new();
    scaling
        .expect_launch_templates()
        .returning(|_, _| Ok(Vec::new()));
    scaling.expect_create_launch_template().returning(|_| {
        Err(CloudError::new(
            "CreateLaunchTemplate",
            Some("InvalidParameterValue".into()),
            "the template is refused",
        ))
    });
    // The group holds two and launches another revision: the surge to three is not made.
    scaling
        .expect_update_group()
        .withf(|_, update| update.size.is_some_and(|s| s.desired == Some(3)))
        .never();
    scaling.expect_update_group().returning(|_, _| Ok(()));
    scaling.expect_tag_group().returning(|_, _| Ok(()));
    let mut secrets = MockSecrets::new();
    secrets.expect_put_secret().returning(|_, _, _| Ok(()));
    let before = group(&[("i-1", "InService"), ("i-2", "InService")]);
    let found = FoundGroup {
        instances: vec![described("i-1"), described("i-2")],
        group: before,
        template_revisions: Default::default(),
    };
    let error = actuator(compute(), scaling, secrets)
        .update(
            &scope(pool(Some(ARN)), 3, &[]),
            Found::with(report(&found, None, None).unwrap(), found),
            Some(bootstrap()),
        )
        .await
        .err()
        .unwrap();
    assert!(
        error.to_string().contains("InvalidParameterValue"),
        "{error}"
    );
}
