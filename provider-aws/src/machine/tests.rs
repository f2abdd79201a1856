//! Every branch of the machine actuator over mocked clouds (`mockall`), and — for what moto
//! cannot show (it ignores `ClientToken` and is never behind) — a small stateful stand-in for
//! EC2 that honours client tokens, loses answers and shows new instances late.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use capi_core::api::{Cluster, Machine};
use capi_core::{ActuatorErrorKind, BootstrapData, BootstrapFormat, IdempotencyKey};
use capi_provider::support::redact::Redaction;

use super::*;
use crate::cloud::{
    Compute, Image, InstanceTypeInfo, MockCompute, MockLoadBalancing, MockNetwork, RunInstance,
};
use crate::connector::MockConnector;

const KEY: &str = "capi-uid-1";
/// A nonce as `bootstrap_secrets` makes them: 128 bits in hex.
const NONCE: &str = "000102030405060708090a0b0c0d0e0f";
const TARGET_GROUP: &str = "arn:aws:elasticloadbalancing:us-east-1:1:targetgroup/demo-tg/1";

fn aws_cluster() -> AWSCluster {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSCluster",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {"region": "us-east-1", "sshKeyName": "ops",
                 "additionalTags": {"team": "a"}},
        "status": {"networkStatus": {
            "vpc": {"id": "vpc-1"},
            "subnets": [
                {"id": "demo-subnet-private-us-east-1a", "resourceID": "subnet-a",
                 "availabilityZone": "us-east-1a", "isPublic": false},
                {"id": "demo-subnet-private-us-east-1b", "resourceID": "subnet-b",
                 "availabilityZone": "us-east-1b", "isPublic": false},
                {"id": "demo-subnet-public-us-east-1a", "resourceID": "subnet-pa",
                 "availabilityZone": "us-east-1a", "isPublic": true}],
            "securityGroups": {"controlplane": {"id": "sg-cp"}, "node": {"id": "sg-node"}},
            "apiServerElb": {"targetGroupArn": TARGET_GROUP}}},
    }))
    .unwrap()
}

fn infra(control_plane: bool) -> AWSMachine {
    let mut labels = serde_json::json!({"cluster.x-k8s.io/cluster-name": "demo"});
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = serde_json::json!("");
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSMachine",
        "metadata": {"name": "demo-md-0-abc", "namespace": "ns", "labels": labels},
        "spec": {"instanceType": "t3.large", "ami": {"id": "ami-0abc"}},
    }))
    .unwrap()
}

fn bootstrap() -> BootstrapData {
    BootstrapData::new(BootstrapFormat::CloudConfig, "#cloud-config\nruncmd: []\n")
}

fn scope_of(infra: AWSMachine) -> MachineScope<AWSMachine, AWSCluster> {
    scope_in(aws_cluster(), infra)
}

/// The scope of a machine of `cluster`.
fn scope_in(cluster: AWSCluster, infra: AWSMachine) -> MachineScope<AWSMachine, AWSCluster> {
    let mut machine = Machine::default();
    machine.metadata.uid = Some("uid-1".into());
    machine.spec.cluster_name = "demo".into();
    machine.spec.failure_domain = Some("us-east-1b".into());
    machine.spec.version = Some("v1.33.1".into());
    MachineScope {
        cluster: Arc::new(Cluster::default()),
        infra_cluster: Some(Arc::new(cluster)),
        idempotency_key: IdempotencyKey::for_machine(&machine).unwrap(),
        machine: Arc::new(machine),
        infra_machine: Arc::new(infra),
    }
}

fn scope() -> MachineScope<AWSMachine, AWSCluster> {
    scope_of(infra(false))
}

fn recorded(mut infra: AWSMachine, id: &str) -> AWSMachine {
    infra.spec.provider_id = Some(provider_id("us-east-1b", id));
    infra
}

fn clients(
    compute: impl Compute + 'static,
    network: MockNetwork,
    load_balancing: MockLoadBalancing,
) -> Clients {
    Clients {
        compute: Arc::new(compute),
        network: Arc::new(network),
        load_balancing: Arc::new(load_balancing),
        secrets: Arc::new(stored_secrets()),
        scaling: Arc::new(crate::cloud::MockScaling::new()),
        redaction: Redaction::default().secret("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    }
}

/// Secrets Manager that takes every store and delete, and holds nothing.
fn stored_secrets() -> crate::cloud::MockSecrets {
    let mut secrets = crate::cloud::MockSecrets::new();
    secrets.expect_put_secret().returning(|_, _, _| Ok(()));
    secrets.expect_delete_secret().returning(|_| Ok(()));
    secrets.expect_secret_names().returning(|_| Ok(Vec::new()));
    secrets
}

fn actuator_with(clients: Clients) -> AwsMachineActuator {
    let mut connector = MockConnector::new();
    connector
        .expect_connect()
        .returning(move |_| Ok(clients.clone()));
    AwsMachineActuator::new(Arc::new(connector))
}

fn actuator(compute: MockCompute) -> AwsMachineActuator {
    actuator_with(clients(
        compute,
        MockNetwork::new(),
        MockLoadBalancing::new(),
    ))
}

fn instance(id: &str, state: InstanceState) -> Instance {
    Instance {
        id: id.into(),
        state: Some(state),
        zone: Some("us-east-1b".into()),
        subnet_id: Some("subnet-b".into()),
        security_group_ids: vec!["sg-node".into()],
        instance_type: "t3.large".into(),
        image_id: Some("ami-0abc".into()),
        key_name: Some("ops".into()),
        private_ip: Some("10.0.1.7".into()),
        private_dns: Some("ip-10-0-1-7.ec2.internal".into()),
        tags: ours(),
        ..Instance::default()
    }
}

/// The tags of an instance of this machine: the cluster's ownership tags, the machine's name
/// and key.
fn ours() -> BTreeMap<String, String> {
    let mut tags = BTreeMap::from(ClusterNaming::new("ns", "demo").ownership());
    tags.insert(IDEMPOTENCY_KEY_TAG.to_string(), KEY.to_string());
    tags.insert(MACHINE_NAME_TAG.to_string(), "ns/demo-md-0-abc".to_string());
    tags
}

fn is_key_lookup(filters: &[Filter]) -> bool {
    filters
        .iter()
        .any(|f| f.name == format!("tag:{IDEMPOTENCY_KEY_TAG}") && f.values == [KEY])
}

#[tokio::test]
async fn a_launch_carries_the_key_as_client_token_and_is_tagged_at_creation() {
    let mut compute = MockCompute::new();
    compute
        .expect_instances()
        .withf(is_key_lookup)
        .times(1)
        .returning(|_| Ok(vec![]));
    compute
        .expect_run_instance()
        .times(1)
        .withf(|request: &RunInstance| {
            request.client_token == KEY
                && request.tags.get(IDEMPOTENCY_KEY_TAG).map(String::as_str) == Some(KEY)
                && request.tags.get("team").map(String::as_str) == Some("a")
                && request.tags.get("Name").map(String::as_str) == Some("demo-md-0-abc")
                && request.tags.get("MachineName").map(String::as_str) == Some("ns/demo-md-0-abc")
                && request.subnet_id == "subnet-b"
                && request.security_group_ids == ["sg-node"]
                && request.key_name.as_deref() == Some("ops")
                && request.image_id == "ami-0abc"
        })
        .returning(|_| Ok(instance("i-1", InstanceState::Pending)));
    let created = actuator(compute)
        .create(&scope(), &bootstrap())
        .await
        .unwrap();
    assert_eq!(created.provider_id, "aws:///us-east-1b/i-1");
    assert_eq!(created.state, LoopState::Provisioning);
    assert_eq!(created.failure_domain.as_deref(), Some("us-east-1b"));
    assert_eq!(
        created.provider_status.fields().get("instanceID"),
        Some(&serde_json::json!("i-1"))
    );
    assert_eq!(
        created.provider_status.fields().get("instanceState"),
        Some(&serde_json::json!("pending"))
    );
}

#[tokio::test]
async fn an_instance_found_by_its_key_is_never_launched_again() {
    let mut compute = MockCompute::new();
    compute
        .expect_instances()
        .returning(|_| Ok(vec![instance("i-1", InstanceState::Running)]));
    compute.expect_run_instance().never();
    let actuator = actuator(compute);
    let found = actuator.exists(&scope()).await.unwrap().unwrap().reported;
    assert_eq!(found.provider_id, "aws:///us-east-1b/i-1");
    assert_eq!(found.state, LoopState::Running);
    let created = actuator.create(&scope(), &bootstrap()).await.unwrap();
    assert_eq!(created.provider_id, found.provider_id);
}

#[tokio::test]
async fn a_recorded_instance_is_found_by_its_id_and_reported_with_its_addresses() {
    let mut compute = MockCompute::new();
    compute
        .expect_instances_by_id()
        .withf(|ids| ids == ["i-7"])
        .returning(|_| Ok(vec![instance("i-7", InstanceState::Running)]));
    compute.expect_instances().never();
    let found = actuator(compute)
        .exists(&scope_of(recorded(infra(false), "i-7")))
        .await
        .unwrap()
        .unwrap()
        .reported;
    let addresses: Vec<(MachineAddressType, &str)> = found
        .addresses
        .iter()
        .map(|a| (a.type_, a.address.as_str()))
        .collect();
    assert_eq!(
        addresses,
        [
            (MachineAddressType::InternalIp, "10.0.1.7"),
            (MachineAddressType::InternalDns, "ip-10-0-1-7.ec2.internal")
        ]
    );
}

#[tokio::test]
async fn a_terminating_or_stopped_instance_is_reported_failed_not_replaced() {
    for (state, reason) in [
        (InstanceState::ShuttingDown, "InstanceTerminated"),
        (InstanceState::Stopped, "InstanceStopped"),
    ] {
        let mut compute = MockCompute::new();
        compute
            .expect_instances_by_id()
            .returning(move |_| Ok(vec![instance("i-7", state)]));
        compute.expect_run_instance().never();
        let found = actuator(compute)
            .exists(&scope_of(recorded(infra(false), "i-7")))
            .await
            .unwrap()
            .unwrap()
            .reported;
        assert!(
            matches!(&found.state, LoopState::Failed { reason: r, .. } if r == reason),
            "{found:?}"
        );
    }
}

#[tokio::test]
async fn a_terminated_instance_is_gone_though_ec2_still_shows_it() {
    let mut compute = MockCompute::new();
    compute
        .expect_instances_by_id()
        .returning(|_| Ok(vec![instance("i-7", InstanceState::Terminated)]));
    compute.expect_terminate_instance().never();
    let actuator = actuator(compute);
    let scope = scope_of(recorded(infra(false), "i-7"));
    assert_eq!(actuator.exists(&scope).await.unwrap(), None);
    actuator.delete(&scope).await.unwrap();
}

#[tokio::test]
async fn an_instance_a_provider_id_names_that_is_not_this_machines_is_never_touched() {
    let foreign = |tags: BTreeMap<String, String>| {
        let mut instance = instance("i-other", InstanceState::Running);
        instance.tags = tags;
        instance
    };
    let mut other_cluster = BTreeMap::from(ClusterNaming::new("other-ns", "demo").ownership());
    other_cluster.insert(IDEMPOTENCY_KEY_TAG.to_string(), KEY.to_string());
    let mut other_machine = ours();
    other_machine.insert(IDEMPOTENCY_KEY_TAG.to_string(), "capi-uid-2".to_string());
    // This machine's key (a copied annotation), another machine's name.
    let mut other_name = ours();
    other_name.insert(MACHINE_NAME_TAG.to_string(), "ns/demo-md-0-xyz".to_string());
    for (tags, missing) in [
        (BTreeMap::new(), "ownership tags"),
        (other_cluster, "ownership tags"),
        (other_machine, "idempotency key"),
        (other_name, "name tag"),
    ] {
        let mut compute = MockCompute::new();
        let found = foreign(tags);
        compute
            .expect_instances_by_id()
            .returning(move |_| Ok(vec![found.clone()]));
        compute.expect_terminate_instance().never();
        compute.expect_run_instance().never();
        let mut load_balancing = MockLoadBalancing::new();
        load_balancing.expect_deregister_instance().never();
        let actuator = actuator_with(clients(compute, MockNetwork::new(), load_balancing));
        let scope = scope_of(recorded(infra(true), "i-other"));
        for error in [
            actuator.exists(&scope).await.unwrap_err(),
            actuator.delete(&scope).await.unwrap_err(),
        ] {
            assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
            let message = error.to_string();
            assert!(
                message.contains("i-other") && message.contains(missing),
                "{message}"
            );
        }
    }
}

#[tokio::test]
async fn a_recorded_instance_ec2_does_not_show_is_gone_unless_just_launched() {
    let mut compute = MockCompute::new();
    compute.expect_instances_by_id().returning(|_| Ok(vec![]));
    compute.expect_instances().returning(|_| Ok(vec![]));
    let actuator = actuator(compute);
    let scope = scope_of(recorded(infra(false), "i-7"));
    assert_eq!(actuator.exists(&scope).await.unwrap(), None, "gone");

    actuator.visibility.launched("i-7");
    let waiting = actuator.exists(&scope).await.unwrap_err();
    assert_eq!(waiting.kind(), ActuatorErrorKind::RequeueAfter);
    assert_eq!(waiting.reason(), "InstanceNotVisibleYet");
    let deleting = actuator.delete(&scope).await.unwrap_err();
    assert_eq!(
        deleting.reason(),
        "InstanceNotVisibleYet",
        "a deletion must not finish before the instance can be seen, or it is leaked"
    );
}

/// EC2 as far as exactly-once needs it, which moto is not: a replayed `ClientToken` answers with
/// the first instance, an answer can be lost after the launch happened, and new instances stay
/// invisible to lookups for a number of reads.
#[derive(Default)]
struct TokenHonouringEc2 {
    instances: Mutex<Vec<(String, Instance)>>,
    lose_next_answer: AtomicBool,
    invisible_reads: AtomicUsize,
    launches: AtomicUsize,
}

impl TokenHonouringEc2 {
    fn visible(&self) -> bool {
        self.invisible_reads
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_err()
    }
}

#[async_trait]
impl Compute for TokenHonouringEc2 {
    async fn instances_by_id(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        if !self.visible() {
            return Ok(vec![]);
        }
        let instances = self.instances.lock().unwrap();
        Ok(instances
            .iter()
            .filter(|(_, i)| ids.contains(&i.id))
            .map(|(_, i)| i.clone())
            .collect())
    }

    async fn instances(&self, filters: &[Filter]) -> Result<Vec<Instance>, CloudError> {
        assert!(is_key_lookup(filters));
        if !self.visible() {
            return Ok(vec![]);
        }
        let instances = self.instances.lock().unwrap();
        Ok(instances
            .iter()
            .filter(|(_, i)| i.tags.get(IDEMPOTENCY_KEY_TAG).map(String::as_str) == Some(KEY))
            .map(|(_, i)| i.clone())
            .collect())
    }

    async fn run_instance(&self, request: &RunInstance) -> Result<Instance, CloudError> {
        self.launches.fetch_add(1, Ordering::SeqCst);
        let mut instances = self.instances.lock().unwrap();
        let launched = match instances.iter().find(|(t, _)| *t == request.client_token) {
            Some((_, first)) => first.clone(),
            None => {
                let mut new = instance(
                    &format!("i-{}", instances.len() + 1),
                    InstanceState::Pending,
                );
                new.tags = request.tags.clone();
                instances.push((request.client_token.clone(), new.clone()));
                new
            }
        };
        if self.lose_next_answer.swap(false, Ordering::SeqCst) {
            return Err(CloudError::new(
                "RunInstances",
                None,
                "dispatch failure: connection reset",
            ));
        }
        Ok(launched)
    }

    async fn terminate_instance(&self, _: &str) -> Result<(), CloudError> {
        unreachable!("not deleting here")
    }

    async fn create_tags(&self, _: &str, _: &crate::api::Tags) -> Result<(), CloudError> {
        Ok(())
    }

    async fn set_security_groups(&self, _: &str, _: &[String]) -> Result<(), CloudError> {
        Ok(())
    }

    async fn images(&self, _: &[String], _: &[Filter]) -> Result<Vec<Image>, CloudError> {
        Ok(vec![])
    }

    async fn instance_type(&self, _: &str) -> Result<Option<InstanceTypeInfo>, CloudError> {
        Ok(None)
    }
}

/// The mock variant of the "lost create response, then a restart": the launch happens,
/// its answer is lost, the manager restarts (a new actuator, nothing remembered), and EC2 does
/// not show the instance yet. The replayed launch carries the same token and gets the first
/// instance back: one instance in the end.
#[tokio::test]
async fn a_lost_launch_answer_and_a_restart_end_with_exactly_one_instance() {
    let ec2 = Arc::new(TokenHonouringEc2::default());
    ec2.lose_next_answer.store(true, Ordering::SeqCst);
    let shared = Clients {
        compute: ec2.clone(),
        network: Arc::new(MockNetwork::new()),
        load_balancing: Arc::new(MockLoadBalancing::new()),
        secrets: Arc::new(stored_secrets()),
        scaling: Arc::new(crate::cloud::MockScaling::new()),
        redaction: Redaction::default(),
    };
    let before = actuator_with(shared.clone());
    assert_eq!(before.exists(&scope()).await.unwrap(), None);
    let lost = before.create(&scope(), &bootstrap()).await.unwrap_err();
    assert_eq!(lost.kind(), ActuatorErrorKind::Transient, "{lost}");
    assert_eq!(
        ec2.instances.lock().unwrap().len(),
        1,
        "the launch happened"
    );

    // The restart: a new process remembers nothing, and EC2 is behind.
    ec2.invisible_reads.store(2, Ordering::SeqCst);
    let after = actuator_with(shared);
    assert_eq!(
        after.exists(&scope()).await.unwrap(),
        None,
        "not visible yet"
    );
    let created = after.create(&scope(), &bootstrap()).await.unwrap();
    assert_eq!(created.provider_id, "aws:///us-east-1b/i-1");
    assert_eq!(ec2.launches.load(Ordering::SeqCst), 2, "one replay");
    assert_eq!(
        ec2.instances.lock().unwrap().len(),
        1,
        "exactly one instance"
    );

    // Recorded now; the next reconcile finds it by ID.
    let found = after
        .exists(&scope_of(recorded(infra(false), "i-1")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.reported.provider_id, created.provider_id);
}

#[tokio::test]
async fn a_replay_with_changed_parameters_finds_the_first_instance() {
    let mut compute = MockCompute::new();
    let lookups = AtomicUsize::new(0);
    compute.expect_instances().returning(move |_| {
        if lookups.fetch_add(1, Ordering::SeqCst) == 0 {
            Ok(vec![])
        } else {
            Ok(vec![instance("i-1", InstanceState::Running)])
        }
    });
    compute.expect_run_instance().times(1).returning(|_| {
        Err(CloudError::new(
            "RunInstances",
            Some("IdempotentParameterMismatch".into()),
            "The client token you have provided is associated with a resource that is already \
             deleted or with different parameters.",
        ))
    });
    let created = actuator(compute)
        .create(&scope(), &bootstrap())
        .await
        .unwrap();
    assert_eq!(created.provider_id, "aws:///us-east-1b/i-1");
}

#[tokio::test]
async fn aws_errors_become_waits_or_conditions_never_latches_and_never_secrets() {
    let cases = [
        (
            "RequestLimitExceeded",
            ActuatorErrorKind::RequeueAfter,
            "Throttled",
        ),
        (
            "InstanceLimitExceeded",
            ActuatorErrorKind::RequeueAfter,
            "QuotaExceeded",
        ),
        (
            "VcpuLimitExceeded",
            ActuatorErrorKind::RequeueAfter,
            "QuotaExceeded",
        ),
        (
            "InvalidParameterValue",
            ActuatorErrorKind::InvalidConfiguration,
            "InvalidRequest",
        ),
        (
            "InvalidAMIID.NotFound",
            ActuatorErrorKind::InvalidConfiguration,
            "InvalidRequest",
        ),
        (
            "InvalidInstanceType",
            ActuatorErrorKind::InvalidConfiguration,
            "InstanceTypeNotFound",
        ),
        (
            "InternalError",
            ActuatorErrorKind::Transient,
            "CloudAPIError",
        ),
    ];
    for (code, kind, reason) in cases {
        let mut compute = MockCompute::new();
        compute.expect_instances().returning(|_| Ok(vec![]));
        compute.expect_run_instance().returning(move |_| {
            let error = CloudError::new(
                "RunInstances",
                Some(code.into()),
                "refused; the key was wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            );
            Err(if code == "RequestLimitExceeded" {
                error.with_retry_after(Duration::from_secs(17))
            } else {
                error
            })
        });
        let error = actuator(compute)
            .create(&scope(), &bootstrap())
            .await
            .unwrap_err();
        assert_eq!(error.kind(), kind, "{code}: {error}");
        assert_eq!(error.reason(), reason, "{code}");
        assert!(!error.to_string().contains("wJalr"), "{error}");
        if code == "RequestLimitExceeded" {
            assert_eq!(
                error.requeue_delay(),
                Some(Duration::from_secs(17)),
                "the region budget's wait"
            );
        }
    }
}

#[tokio::test]
async fn user_data_over_ec2s_limit_is_refused_before_any_launch() {
    let mut compute = MockCompute::new();
    compute.expect_instances().returning(|_| Ok(vec![]));
    compute.expect_run_instance().never();
    let too_large = BootstrapData::new(BootstrapFormat::Ignition, "x".repeat(20_000));
    let error = actuator(compute)
        .create(&scope(), &too_large)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
    assert_eq!(error.reason(), "UserDataTooLarge");
}

#[tokio::test]
async fn without_an_ami_id_the_newest_capa_image_for_the_version_and_architecture_is_used() {
    let mut infra = infra(false);
    infra.spec.ami = None;
    let mut compute = MockCompute::new();
    compute.expect_instances().returning(|_| Ok(vec![]));
    compute.expect_instance_type().returning(|name| {
        Ok(Some(InstanceTypeInfo {
            name: name.into(),
            vcpus: 2,
            memory_mib: 8192,
            architectures: vec!["arm64".into()],
            instance_storage_gb: None,
        }))
    });
    compute
        .expect_images()
        .withf(|owners, filters| {
            owners == [DEFAULT_IMAGE_LOOKUP_ORG]
                && filters
                    .iter()
                    .any(|f| f.name == "name" && f.values == ["capa-ami-ubuntu-24.04-?1.33.1-*"])
                && filters
                    .iter()
                    .any(|f| f.name == "architecture" && f.values == ["arm64"])
        })
        .returning(|_, _| {
            Ok(vec![
                Image {
                    id: "ami-new".into(),
                    creation_date: "2026-10-01T00:00:00.000Z".into(),
                    ..Image::default()
                },
                Image {
                    id: "ami-old".into(),
                    creation_date: "2026-01-01T00:00:00.000Z".into(),
                    ..Image::default()
                },
            ])
        });
    compute
        .expect_run_instance()
        .withf(|r| r.image_id == "ami-new")
        .returning(|_| Ok(instance("i-1", InstanceState::Pending)));
    actuator(compute)
        .create(&scope_of(infra), &bootstrap())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_failure_domain_without_a_subnet_of_the_cluster_is_the_users_to_fix() {
    let mut compute = MockCompute::new();
    compute.expect_instances().returning(|_| Ok(vec![]));
    compute.expect_run_instance().never();
    let mut scope = scope();
    let mut machine = (*scope.machine).clone();
    machine.spec.failure_domain = Some("us-east-1f".into());
    scope.machine = Arc::new(machine);
    let error = actuator(compute)
        .create(&scope, &bootstrap())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
    assert_eq!(error.reason(), "NoSubnetInFailureDomain");
}

/// The fixture cluster with only `subnets` (JSON `SubnetStatus`es).
fn cluster_with_subnets(subnets: serde_json::Value) -> AWSCluster {
    let mut cluster = aws_cluster();
    let mut status = serde_json::to_value(&cluster.status).unwrap();
    status["networkStatus"]["subnets"] = subnets;
    cluster.status = serde_json::from_value(status).unwrap();
    cluster
}

fn no_launch() -> MockCompute {
    let mut compute = MockCompute::new();
    compute.expect_instances().returning(|_| Ok(vec![]));
    compute.expect_run_instance().never();
    compute
}

#[tokio::test]
async fn a_cluster_of_public_subnets_only_tells_a_private_machine_to_ask_for_a_public_address() {
    let public_only = cluster_with_subnets(serde_json::json!([
        {"id": "pub-a", "resourceID": "subnet-pa", "availabilityZone": "us-east-1a", "isPublic": true},
        {"id": "pub-b", "resourceID": "subnet-pb", "availabilityZone": "us-east-1b", "isPublic": true},
    ]));
    let mut scope = scope_in(public_only.clone(), infra(false));
    let mut machine = (*scope.machine).clone();
    machine.spec.failure_domain = None;
    scope.machine = Arc::new(machine);
    let actuator = || {
        actuator_with(clients(
            no_launch(),
            MockNetwork::new(),
            MockLoadBalancing::new(),
        ))
    };
    let error = actuator().create(&scope, &bootstrap()).await.unwrap_err();
    assert_eq!(error.kind(), ActuatorErrorKind::Transient, "{error}");
    assert_eq!(error.reason(), "NoPrivateSubnet");
    assert!(error.to_string().contains("spec.publicIP: true"), "{error}");

    // In a failure domain, the same is the user's to fix, with the same advice.
    let error = actuator()
        .create(&scope_in(public_only, infra(false)), &bootstrap())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
    assert_eq!(error.reason(), "NoSubnetInFailureDomain");
    assert!(error.to_string().contains("spec.publicIP: true"), "{error}");

    // A cluster that reports no subnet yet is waited for, failure domain or not.
    let no_subnets = scope_in(cluster_with_subnets(serde_json::json!([])), infra(false));
    let error = actuator()
        .create(&no_subnets, &bootstrap())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ActuatorErrorKind::Transient);
    assert_eq!(error.reason(), "WaitingForSubnets");
}

#[tokio::test]
async fn update_converges_tags_groups_and_target_group_and_reports_immutable_changes() {
    let mut running = instance("i-7", InstanceState::Running);
    running.instance_type = "t3.medium".into();
    running.security_group_ids = vec!["sg-node".into()];
    let mut compute = MockCompute::new();
    let seen = running.clone();
    compute
        .expect_instances_by_id()
        .returning(move |_| Ok(vec![seen.clone()]));
    compute
        .expect_create_tags()
        .times(1)
        .withf(|id, tags| id == "i-7" && tags.get("team").map(String::as_str) == Some("a"))
        .returning(|_, _| Ok(()));
    compute
        .expect_set_security_groups()
        .times(1)
        .withf(|id, groups| id == "i-7" && groups == ["sg-cp"])
        .returning(|_, _| Ok(()));
    let mut load_balancing = MockLoadBalancing::new();
    load_balancing
        .expect_registered_instances()
        .returning(|_| Ok(vec!["i-other".into()]));
    load_balancing
        .expect_register_instance()
        .times(1)
        .withf(|tg, id, port| tg == TARGET_GROUP && id == "i-7" && *port == 6443)
        .returning(|_, _, _| Ok(()));
    let actuator = actuator_with(clients(compute, MockNetwork::new(), load_balancing));
    let scope = scope_of(recorded(infra(true), "i-7"));
    let found = actuator.exists(&scope).await.unwrap().unwrap();
    let outcome = actuator.update(&scope, found).await.unwrap();
    assert_eq!(
        outcome.immutable_changes,
        [ImmutableChange {
            field: "spec.instanceType".into(),
            current: "t3.medium".into(),
            desired: "t3.large".into(),
        }]
    );
}

/// The cloud calls of one reconcile of a running machine in its desired state, as the loop makes
/// it: `exists`, then `update` with what `exists` found. The mocks are strict (a call not
/// expected here fails the test) and count every call they answer.
async fn cloud_calls_of_a_steady_reconcile(control_plane: bool) -> usize {
    let scope = scope_of(recorded(infra(control_plane), "i-7"));
    let mut steady = instance("i-7", InstanceState::Running);
    let ctx = actuator(MockCompute::new()).context(&scope).await.unwrap();
    steady.tags = launch::tags(&ctx);
    steady.security_group_ids = launch::security_groups(&ctx).await.unwrap();

    let calls = Arc::new(AtomicUsize::new(0));
    let mut compute = MockCompute::new();
    let counted = Arc::clone(&calls);
    compute.expect_instances_by_id().returning(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(vec![steady.clone()])
    });
    let mut load_balancing = MockLoadBalancing::new();
    let counted = Arc::clone(&calls);
    load_balancing
        .expect_registered_instances()
        .returning(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(vec!["i-7".into()])
        });
    let actuator = actuator_with(clients(compute, MockNetwork::new(), load_balancing));

    let found = actuator.exists(&scope).await.unwrap().unwrap();
    let outcome = actuator.update(&scope, found).await.unwrap();
    assert_eq!(outcome.instance.state, LoopState::Running);
    assert!(
        outcome.immutable_changes.is_empty(),
        "{:?}",
        outcome.immutable_changes
    );
    calls.load(Ordering::SeqCst)
}

#[tokio::test]
async fn a_steady_worker_costs_one_describe_instances_per_reconcile() {
    assert_eq!(
        cloud_calls_of_a_steady_reconcile(false).await,
        1,
        "DescribeInstances in exists; update converges what exists found without asking again"
    );
}

#[tokio::test]
async fn a_steady_control_plane_adds_one_target_group_read_per_reconcile() {
    assert_eq!(
        cloud_calls_of_a_steady_reconcile(true).await,
        2,
        "DescribeInstances in exists, DescribeTargetHealth in update"
    );
}

#[tokio::test]
async fn deletion_leaves_the_target_group_terminates_and_waits_for_terminated() {
    let states = Arc::new(Mutex::new(vec![
        InstanceState::Terminated,
        InstanceState::ShuttingDown,
        InstanceState::Running,
    ]));
    let mut compute = MockCompute::new();
    let next = states.clone();
    compute.expect_instances_by_id().returning(move |_| {
        let state = next.lock().unwrap().pop().unwrap();
        Ok(vec![instance("i-7", state)])
    });
    compute
        .expect_terminate_instance()
        .times(1)
        .withf(|id| id == "i-7")
        .returning(|_| Ok(()));
    let mut load_balancing = MockLoadBalancing::new();
    load_balancing
        .expect_deregister_instance()
        .times(2)
        .withf(|tg, id, _| tg == TARGET_GROUP && id == "i-7")
        .returning(|_, _, _| Ok(()));
    let actuator = actuator_with(clients(compute, MockNetwork::new(), load_balancing));
    let scope = scope_of(recorded(infra(true), "i-7"));
    for _ in 0..2 {
        let waiting = actuator.delete(&scope).await.unwrap_err();
        assert_eq!(waiting.kind(), ActuatorErrorKind::RequeueAfter);
        assert_eq!(waiting.reason(), "Terminating");
    }
    actuator.delete(&scope).await.unwrap();
}

#[tokio::test]
async fn deleting_a_machine_whose_instance_never_existed_is_done() {
    let mut compute = MockCompute::new();
    compute.expect_instances().returning(|_| Ok(vec![]));
    compute.expect_terminate_instance().never();
    actuator(compute).delete(&scope()).await.unwrap();
}

#[test]
fn provider_ids_name_zone_and_instance() {
    assert_eq!(instance_id_of("aws:///us-east-1a/i-0abc"), Some("i-0abc"));
    assert_eq!(instance_id_of("aws:////i-0abc"), Some("i-0abc"));
    assert_eq!(instance_id_of("openstack:///i-0abc"), None);
    assert_eq!(instance_id_of("aws:///us-east-1a/"), None);
    assert_eq!(provider_id("eu-west-1c", "i-9"), "aws:///eu-west-1c/i-9");
}

/// The bootstrap data secrets of a running instance stay while its node has not registered (the
/// instance may not have fetched them yet), and go at the first reconcile after it has: then
/// the instance's tag says none are left, so later reconciles make no Secrets Manager call.
#[tokio::test]
async fn bootstrap_data_secrets_go_once_the_node_registers_and_never_before() {
    let reconcile = |node: bool, deleted: Arc<std::sync::Mutex<Vec<String>>>| async move {
        let mut scope = scope_of(recorded(infra(true), "i-7"));
        if node {
            let mut machine = (*scope.machine).clone();
            machine.status.get_or_insert_default().node_ref =
                Some(capi_core::api::MachineNodeReference {
                    name: "node-1".into(),
                });
            scope.machine = Arc::new(machine);
        }
        let ctx = actuator(MockCompute::new()).context(&scope).await.unwrap();
        let mut running = instance("i-7", InstanceState::Running);
        running.tags = launch::tags(&ctx);
        running
            .tags
            .insert(bootstrap_secrets::COUNT_TAG.into(), "2".into());
        running.security_group_ids = launch::security_groups(&ctx).await.unwrap();
        let mut compute = MockCompute::new();
        compute
            .expect_instances_by_id()
            .returning(move |_| Ok(vec![running.clone()]));
        compute
            .expect_create_tags()
            .times(usize::from(node))
            .withf(|id, tags| {
                id == "i-7"
                    && tags.len() == 1
                    && tags.get(bootstrap_secrets::COUNT_TAG).map(String::as_str) == Some("0")
            })
            .returning(|_, _| Ok(()));
        // Without a node, no Secrets Manager call is made.
        let mut secrets = crate::cloud::MockSecrets::new();
        let key = ctx.key.clone();
        secrets
            .expect_secret_names()
            .times(usize::from(node))
            .withf(move |start| *start == bootstrap_secrets::names_start(&key))
            .returning(|start| {
                Ok(vec![
                    format!("{start}{NONCE}-0"),
                    format!("{start}{NONCE}-1"),
                ])
            });
        secrets
            .expect_delete_secret()
            .times(2 * usize::from(node))
            .returning(move |name| {
                deleted.lock().unwrap().push(name.to_string());
                Ok(())
            });
        let mut load_balancing = MockLoadBalancing::new();
        load_balancing
            .expect_registered_instances()
            .returning(|_| Ok(vec!["i-7".into()]));
        let mut clients = clients(compute, MockNetwork::new(), load_balancing);
        clients.secrets = Arc::new(secrets);
        let actuator = actuator_with(clients);
        let found = actuator.exists(&scope).await.unwrap().unwrap();
        actuator.update(&scope, found).await.unwrap();
        ctx.key.clone()
    };
    let deleted = Arc::new(std::sync::Mutex::new(Vec::new()));
    reconcile(false, deleted.clone()).await;
    assert_eq!(*deleted.lock().unwrap(), Vec::<String>::new());
    let key = reconcile(true, deleted.clone()).await;
    assert_eq!(
        *deleted.lock().unwrap(),
        bootstrap_secrets::names(&key, NONCE, 2)
    );
}
