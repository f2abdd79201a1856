//! Every branch of the machine loop's decision, with a mock actuator and no API server.

use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{
    Cluster, ClusterInitializationStatus, ClusterStatus, Machine, MachineAddress,
    MachineAddressType,
};
use capi_core::condition::{self, ConditionStatus};
use capi_core::infra::{InfraMachine, InfraMachineStatus};
use capi_core::{
    ActuatorError, BootstrapData, BootstrapFormat, Found, ImmutableChange, InstanceState,
    MachineInstance, MockActuator, UpdateOutcome,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster::tests::{TestCluster, TestClusterSpec};

use super::decide::{BootstrapLookup, INFRA_MACHINE_FINALIZER, Plan, Snapshot, decide};
use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::reasons;

#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.test.io",
    version = "v1alpha1",
    kind = "TestMachine",
    namespaced,
    status = "InfraMachineStatus"
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TestMachineSpec {
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) provider_id: Option<String>,
}

impl InfraMachine for TestMachine {
    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }
    fn infra_status(&self) -> Option<&InfraMachineStatus> {
        self.status.as_ref()
    }
}

fn infra_cluster() -> TestCluster {
    let mut infra_cluster = TestCluster::new("demo", TestClusterSpec::default());
    infra_cluster.metadata.namespace = Some("ns".into());
    infra_cluster
}

const POLL: Duration = Duration::from_secs(5);
const OWNER_UID: &str = "6a1e2f0c";

fn infra() -> TestMachine {
    let mut infra = TestMachine::new("m-0", TestMachineSpec::default());
    infra.metadata.namespace = Some("ns".into());
    infra.metadata.generation = Some(1);
    infra.metadata.finalizers = Some(vec![INFRA_MACHINE_FINALIZER.into()]);
    infra.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Machine".into(),
        name: "m-0".into(),
        uid: OWNER_UID.into(),
        ..OwnerReference::default()
    }]);
    infra
}

fn machine() -> Machine {
    let mut machine = Machine::default();
    machine.metadata.name = Some("m-0".into());
    machine.metadata.uid = Some(OWNER_UID.into());
    machine.spec.cluster_name = "demo".into();
    machine
}

fn cluster(provisioned: bool) -> Cluster {
    let mut cluster = Cluster::default();
    cluster.metadata.name = Some("demo".into());
    cluster.status = Some(ClusterStatus {
        initialization: Some(ClusterInitializationStatus {
            infrastructure_provisioned: Some(provisioned),
            ..Default::default()
        }),
        ..Default::default()
    });
    cluster
}

fn snapshot(infra: TestMachine) -> Snapshot<TestMachine, TestCluster> {
    Snapshot {
        infra: Arc::new(infra),
        owner_uid: Some(OWNER_UID.into()),
        machine: Some(Arc::new(machine())),
        cluster: Some(Arc::new(cluster(true))),
        infra_cluster: Some(Arc::new(infra_cluster())),
        bootstrap: BootstrapLookup::Ready(BootstrapData::new(
            BootstrapFormat::CloudConfig,
            b"#cloud-config\n".to_vec(),
        )),
        invalid_at_generation: None,
    }
}

fn running(id: &str) -> MachineInstance {
    MachineInstance::new(
        id,
        vec![MachineAddress {
            type_: MachineAddressType::InternalIp,
            address: "10.0.0.7".into(),
        }],
        InstanceState::Running,
    )
}

fn ready(plan: &Plan) -> Option<(ConditionStatus, String)> {
    plan.conditions
        .iter()
        .rev()
        .find(|c| c.type_ == condition::READY)
        .map(|c| (c.status, c.reason.clone()))
}

/// A mock that fails the test on any call.
fn untouched() -> MockActuator<TestMachine, TestCluster> {
    let mut actuator = MockActuator::new();
    actuator.expect_exists().never();
    actuator.expect_create().never();
    actuator.expect_update().never();
    actuator.expect_delete().never();
    actuator
}

#[tokio::test]
async fn paused_cluster_calls_nothing_and_says_so() {
    let mut snap = snapshot(infra());
    let mut paused = cluster(true);
    paused.spec.paused = Some(true);
    snap.cluster = Some(Arc::new(paused));
    let plan = decide(&untouched(), snap, POLL).await;
    assert!(
        plan.conditions
            .iter()
            .any(|c| c.type_ == condition::PAUSED && c.status == ConditionStatus::True)
    );
    assert!(matches!(plan.next, Next::AwaitChange));
    assert_eq!(plan.finalizer, FinalizerChange::Keep);
}

#[tokio::test]
async fn paused_annotation_pauses_even_deletion() {
    let mut infra = infra();
    infra.metadata.annotations =
        Some([(capi_core::labels::PAUSED.to_string(), String::new())].into());
    infra.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    let plan = decide(&untouched(), snapshot(infra), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Keep);
}

#[tokio::test]
async fn missing_owner_waits_without_failing() {
    let mut infra = infra();
    infra.metadata.owner_references = None;
    let mut snap = snapshot(infra);
    snap.owner_uid = None;
    snap.machine = None;
    let plan = decide(&untouched(), snap, POLL).await;
    assert_eq!(
        ready(&plan),
        Some((ConditionStatus::False, reasons::WAITING_FOR_OWNER.into()))
    );
    assert!(matches!(plan.next, Next::AwaitChange));
}

#[tokio::test]
async fn owner_reference_to_a_machine_not_yet_visible_polls() {
    let mut snap = snapshot(infra());
    snap.machine = None;
    let plan = decide(&untouched(), snap, POLL).await;
    assert!(matches!(plan.next, Next::Requeue(d) if d == POLL));
}

#[tokio::test]
async fn missing_cluster_polls() {
    let mut snap = snapshot(infra());
    snap.cluster = None;
    let plan = decide(&untouched(), snap, POLL).await;
    assert_eq!(
        ready(&plan),
        Some((ConditionStatus::False, reasons::WAITING_FOR_CLUSTER.into()))
    );
    assert!(matches!(plan.next, Next::Requeue(_)));
}

#[tokio::test]
async fn finalizer_is_added_before_anything_is_created() {
    let mut infra = infra();
    infra.metadata.finalizers = None;
    let plan = decide(&untouched(), snapshot(infra), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Add);
    assert!(plan.record.provider_id.is_none());
    assert!(
        plan.conditions.is_empty(),
        "the finalizer's pass writes no status: the pass it triggers does, once"
    );
    // The idempotency key is recorded with the finalizer, before any instance exists.
    assert_eq!(
        plan.record.idempotency_key.map(|k| k.as_str().to_string()),
        Some(format!("capi-{OWNER_UID}"))
    );
}

/// The key recorded on the object before it was moved, whose Machine had another UID.
const MOVED_KEY: &str = "capi-0ld0e1d";

/// `infra` as `clusterctl move` recreates it: the key recorded on the source kept, the owner's
/// UID (the Machine's, [`OWNER_UID`], on the target) new.
fn moved(mut infra: TestMachine) -> TestMachine {
    infra.metadata.annotations = Some(
        [(
            capi_core::labels::IDEMPOTENCY_KEY.to_string(),
            MOVED_KEY.to_string(),
        )]
        .into(),
    );
    infra
}

#[tokio::test]
async fn a_moved_machine_finds_its_instance_under_the_key_recorded_before_the_move() {
    let mut actuator = MockActuator::new();
    actuator.expect_exists().times(1).returning(|scope| {
        assert_eq!(scope.idempotency_key.as_str(), MOVED_KEY);
        Ok(Some(Found::new(running("test:///i-1"))))
    });
    actuator.expect_create().never();
    actuator.expect_update().times(1).returning(|_, found| {
        Ok(UpdateOutcome {
            instance: found.reported,
            immutable_changes: Vec::new(),
        })
    });
    let plan = decide(&actuator, snapshot(moved(infra())), POLL).await;
    assert!(
        plan.record.idempotency_key.is_none(),
        "the recorded key is kept, not replaced by the new UID's"
    );
    assert_eq!(
        ready(&plan),
        Some((ConditionStatus::True, reasons::INSTANCE_RUNNING.into()))
    );
}

#[tokio::test]
async fn the_finalizers_pass_replaces_a_key_copied_onto_a_new_object() {
    let mut infra = moved(infra());
    infra.metadata.finalizers = None;
    let plan = decide(&untouched(), snapshot(infra), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Add);
    assert_eq!(
        plan.record.idempotency_key.map(|k| k.as_str().to_string()),
        Some(format!("capi-{OWNER_UID}")),
        "a key on an object that has created nothing yet is this Machine's, not a copy's"
    );
}

#[tokio::test]
async fn a_malformed_key_is_an_invalid_configuration_and_nothing_is_called() {
    let malformed = |mut infra: TestMachine| {
        infra.metadata.annotations = Some(
            [(
                capi_core::labels::IDEMPOTENCY_KEY.to_string(),
                "not a key".to_string(),
            )]
            .into(),
        );
        infra
    };
    let plan = decide(&untouched(), snapshot(malformed(infra())), POLL).await;
    assert_eq!(
        ready(&plan),
        Some((
            ConditionStatus::False,
            reasons::INVALID_IDEMPOTENCY_KEY.into()
        ))
    );
    assert!(plan.record.idempotency_key.is_none(), "not replaced");
    assert!(matches!(plan.next, Next::InvalidConfiguration));
    // Nor deleted under another key: the finalizer stays.
    let plan = decide(&untouched(), snapshot(malformed(deleting())), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Keep);
}

#[tokio::test]
async fn a_moved_machine_is_deleted_under_the_key_recorded_before_the_move() {
    let mut actuator = MockActuator::<TestMachine, TestCluster>::new();
    actuator.expect_delete().times(1).returning(|scope| {
        assert_eq!(scope.idempotency_key.as_str(), MOVED_KEY);
        Ok(())
    });
    let plan = decide(&actuator, snapshot(moved(deleting())), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Remove);
}

#[tokio::test]
async fn an_object_from_before_keys_were_recorded_gets_the_key_it_was_created_under() {
    let mut actuator = MockActuator::new();
    actuator
        .expect_exists()
        .times(1)
        .returning(|_| Ok(Some(Found::new(running("test:///i-1")))));
    actuator.expect_update().times(1).returning(|_, found| {
        Ok(UpdateOutcome {
            instance: found.reported,
            immutable_changes: Vec::new(),
        })
    });
    let plan = decide(&actuator, snapshot(infra()), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Keep);
    assert_eq!(
        plan.record.idempotency_key.map(|k| k.as_str().to_string()),
        Some(format!("capi-{OWNER_UID}"))
    );
}

#[tokio::test]
async fn waits_for_cluster_infrastructure() {
    let mut snap = snapshot(infra());
    snap.cluster = Some(Arc::new(cluster(false)));
    let plan = decide(&untouched(), snap, POLL).await;
    assert_eq!(
        ready(&plan),
        Some((
            ConditionStatus::False,
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE.into()
        ))
    );
    assert!(matches!(plan.next, Next::AwaitChange));
}

#[tokio::test]
async fn missing_bootstrap_data_waits_without_calling_the_cloud() {
    for (lookup, next_is_poll) in [
        (BootstrapLookup::NotSet, false),
        (BootstrapLookup::SecretMissing("m-0-bootstrap".into()), true),
        (BootstrapLookup::Invalid("no value key".into()), false),
    ] {
        let mut snap = snapshot(infra());
        snap.bootstrap = lookup;
        let plan = decide(&untouched(), snap, POLL).await;
        let (status, reason) = ready(&plan).unwrap();
        assert_eq!(status, ConditionStatus::False);
        assert!(
            reason == reasons::WAITING_FOR_BOOTSTRAP_DATA
                || reason == reasons::BOOTSTRAP_DATA_INVALID,
            "{reason}"
        );
        assert_eq!(matches!(plan.next, Next::Requeue(_)), next_is_poll);
    }
}

#[tokio::test]
async fn creates_once_when_nothing_exists_and_records_everything() {
    let mut actuator = MockActuator::new();
    actuator.expect_exists().times(1).returning(|_| Ok(None));
    actuator
        .expect_create()
        .times(1)
        .returning(|scope, bootstrap| {
            assert_eq!(scope.idempotency_key.as_str(), format!("capi-{OWNER_UID}"));
            assert_eq!(bootstrap.expose(), b"#cloud-config\n");
            Ok(running("test:///i-1"))
        });
    actuator.expect_update().never();
    let plan = decide(&actuator, snapshot(infra()), POLL).await;
    assert_eq!(plan.record.provider_id.as_deref(), Some("test:///i-1"));
    assert!(plan.record.provisioned);
    assert_eq!(plan.record.addresses.as_ref().map(Vec::len), Some(1));
    assert_eq!(
        ready(&plan),
        Some((ConditionStatus::True, reasons::INSTANCE_RUNNING.into()))
    );
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == reasons::INSTANCE_CREATED && !e.warning)
    );
    assert!(matches!(plan.next, Next::Resync));
    assert!(
        plan.conditions
            .iter()
            .any(|c| c.type_ == condition::UP_TO_DATE && c.status == ConditionStatus::True),
        "made from its spec just now: up to date without another pass"
    );
    // The provider ID's spec write moves the generation on: the status written after it
    // observes the new one (else the next pass writes it again just to say so).
    let written = plan.generation().map(|g| g + 1);
    let status = super::record::desired_status(&InfraMachineStatus::default(), &plan, written);
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.observed_generation == written),
        "{:?}",
        status.conditions
    );
}

#[tokio::test]
async fn booting_instance_is_recorded_but_not_provisioned() {
    let mut actuator = MockActuator::new();
    actuator.expect_exists().returning(|_| Ok(None));
    actuator.expect_create().times(1).returning(|_, _| {
        Ok(MachineInstance {
            state: InstanceState::Provisioning,
            ..running("test:///i-2")
        })
    });
    let plan = decide(&actuator, snapshot(infra()), POLL).await;
    assert_eq!(plan.record.provider_id.as_deref(), Some("test:///i-2"));
    assert!(!plan.record.provisioned);
    assert!(matches!(plan.next, Next::Requeue(d) if d == POLL));
}

#[tokio::test]
async fn existing_instance_is_updated_never_created() {
    let mut actuator = MockActuator::new();
    actuator
        .expect_exists()
        .times(1)
        .returning(|_| Ok(Some(Found::new(running("test:///i-1")))));
    actuator.expect_create().never();
    actuator.expect_update().times(1).returning(|_, found| {
        Ok(UpdateOutcome {
            instance: found.reported,
            immutable_changes: vec![ImmutableChange {
                field: "spec.flavor".into(),
                current: "m1.small".into(),
                desired: "m1.large".into(),
            }],
        })
    });
    let plan = decide(&actuator, snapshot(infra()), POLL).await;
    assert!(plan.record.provisioned);
    let up_to_date = plan
        .conditions
        .iter()
        .find(|c| c.type_ == condition::UP_TO_DATE)
        .unwrap();
    assert_eq!(up_to_date.status, ConditionStatus::False);
    assert!(
        up_to_date.message.contains("spec.flavor"),
        "{}",
        up_to_date.message
    );
}

#[tokio::test]
async fn an_instance_that_vanished_is_reported_and_never_recreated() {
    let mut infra = infra();
    infra.spec.provider_id = Some("test:///i-1".into());
    let mut actuator = MockActuator::new();
    actuator.expect_exists().times(1).returning(|_| Ok(None));
    actuator.expect_create().never();
    let plan = decide(&actuator, snapshot(infra), POLL).await;
    assert_eq!(
        ready(&plan),
        Some((ConditionStatus::False, reasons::INSTANCE_NOT_FOUND.into()))
    );
    assert!(
        plan.events
            .iter()
            .any(|e| e.warning && e.reason == reasons::INSTANCE_NOT_FOUND)
    );
}

#[tokio::test]
async fn requeue_after_is_not_a_failure() {
    let mut actuator = MockActuator::new();
    actuator.expect_exists().returning(|_| Ok(None));
    actuator.expect_create().returning(|_, _| {
        Err(ActuatorError::requeue_after(
            Duration::from_secs(7),
            "WaitingForQuota",
            "quota busy",
        ))
    });
    let plan = decide(&actuator, snapshot(infra()), POLL).await;
    assert!(matches!(plan.next, Next::Requeue(d) if d == Duration::from_secs(7)));
    assert_eq!(
        ready(&plan),
        Some((ConditionStatus::False, "WaitingForQuota".into()))
    );
}

#[tokio::test]
async fn transient_errors_are_failures_with_a_condition() {
    let mut actuator = MockActuator::new();
    actuator.expect_exists().returning(|_| {
        Err(ActuatorError::transient_message(
            "CloudAPIError",
            "HTTP 503",
        ))
    });
    actuator.expect_create().never();
    let plan = decide(&actuator, snapshot(infra()), POLL).await;
    assert!(matches!(plan.next, Next::Failed(ref e) if e.reason() == "CloudAPIError"));
    assert_eq!(
        ready(&plan),
        Some((ConditionStatus::False, "CloudAPIError".into()))
    );
}

#[tokio::test]
async fn invalid_configuration_waits_for_a_new_generation() {
    let mut actuator = MockActuator::new();
    actuator.expect_exists().times(1).returning(|_| Ok(None));
    actuator.expect_create().times(1).returning(|_, _| {
        Err(ActuatorError::invalid_configuration(
            "ImageNotFound",
            "image \"ubuntu-99\" does not exist",
        ))
    });
    let plan = decide(&actuator, snapshot(infra()), POLL).await;
    assert!(matches!(plan.next, Next::InvalidConfiguration));
    assert!(
        plan.events
            .iter()
            .any(|e| e.warning && e.reason == reasons::INVALID_CONFIGURATION)
    );

    // Same generation, recently found invalid: the cloud is not called again, and the memo is
    // kept (the plan says invalid again, so the retry state does not clear it).
    let mut snap = snapshot(infra());
    snap.invalid_at_generation = Some(1);
    let plan = decide(&untouched(), snap, POLL).await;
    assert!(matches!(plan.next, Next::InvalidConfiguration));

    // A new generation: tried again.
    let mut edited = infra();
    edited.metadata.generation = Some(2);
    let mut snap = snapshot(edited);
    snap.invalid_at_generation = Some(1);
    let mut actuator = MockActuator::new();
    actuator.expect_exists().times(1).returning(|_| Ok(None));
    actuator
        .expect_create()
        .times(1)
        .returning(|_, _| Ok(running("test:///i-3")));
    let plan = decide(&actuator, snap, POLL).await;
    assert!(plan.record.provisioned);
}

fn deleting() -> TestMachine {
    let mut infra = infra();
    infra.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    infra
}

#[tokio::test]
async fn deletion_in_progress_keeps_the_finalizer_and_requeues() {
    let mut actuator = MockActuator::new();
    actuator.expect_delete().times(1).returning(|_| {
        Err(ActuatorError::requeue_after(
            Duration::from_secs(3),
            "Deleting",
            "instance shutting down",
        ))
    });
    let plan = decide(&actuator, snapshot(deleting()), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Keep);
    assert!(matches!(plan.next, Next::Requeue(d) if d == Duration::from_secs(3)));
}

#[tokio::test]
async fn deletion_done_removes_the_finalizer_even_without_owners() {
    let mut snap = snapshot(deleting());
    snap.machine = None;
    snap.cluster = None;
    let mut actuator = MockActuator::new();
    actuator.expect_delete().times(1).returning(|scope| {
        assert_eq!(scope.idempotency_key.as_str(), format!("capi-{OWNER_UID}"));
        Ok(())
    });
    let plan = decide(&actuator, snap, POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Remove);
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == reasons::INSTANCE_DELETED)
    );
}

#[tokio::test]
async fn deletion_failures_back_off_and_keep_the_finalizer() {
    for error in [
        ActuatorError::transient_message("CloudAPIError", "HTTP 500"),
        ActuatorError::invalid_configuration(
            "CredentialsMissing",
            "Secret cloud-credentials not found",
        ),
    ] {
        let mut actuator = MockActuator::new();
        let mut error = Some(error);
        actuator
            .expect_delete()
            .times(1)
            .returning(move |_| Err(error.take().unwrap()));
        let plan = decide(&actuator, snapshot(deleting()), POLL).await;
        assert_eq!(plan.finalizer, FinalizerChange::Keep);
        assert!(matches!(plan.next, Next::Failed(_)));
    }
}

#[tokio::test]
async fn a_missing_infrastructure_cluster_is_waited_for_without_calling_the_cloud() {
    let mut snap = snapshot(infra());
    snap.infra_cluster = None;
    let plan = decide(&untouched(), snap, POLL).await;
    let (status, reason) = ready(&plan).unwrap();
    assert_eq!(
        (status, reason.as_str()),
        (
            ConditionStatus::False,
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE
        )
    );
    let message = &plan.conditions.last().unwrap().message;
    assert!(message.contains("TestCluster"), "{message}");
    assert!(matches!(plan.next, Next::Requeue(d) if d == POLL));
}

#[tokio::test]
async fn deletion_without_the_infrastructure_cluster_asks_the_actuator_all_the_same() {
    let mut snap = snapshot(deleting());
    snap.infra_cluster = None;
    let mut actuator = MockActuator::<TestMachine, TestCluster>::new();
    // As a provider that reaches its cloud through the object does.
    actuator
        .expect_delete()
        .times(1)
        .returning(|scope| scope.infra_cluster().map(|_| ()));
    let plan = decide(&actuator, snap, POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Keep);
    assert!(matches!(plan.next, Next::Requeue(d) if d == Duration::from_secs(60)));

    // A provider that needs nothing of it deletes, and the finalizer goes.
    let mut snap = snapshot(deleting());
    snap.infra_cluster = None;
    snap.cluster = None;
    let mut actuator = MockActuator::<TestMachine, TestCluster>::new();
    actuator.expect_delete().times(1).returning(|scope| {
        assert!(scope.infra_cluster.is_none());
        Ok(())
    });
    let plan = decide(&actuator, snap, POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Remove);
}

#[tokio::test]
async fn a_cluster_whose_infrastructure_is_another_kind_is_an_invalid_configuration() {
    let mut snap = snapshot(infra());
    snap.infra_cluster = None;
    let mut other = cluster(true);
    other.spec.infrastructure_ref = Some(
        serde_json::from_value(serde_json::json!({
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "demo"
        }))
        .unwrap(),
    );
    snap.cluster = Some(Arc::new(other));
    let plan = decide(&untouched(), snap, POLL).await;
    let (status, reason) = ready(&plan).unwrap();
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, reasons::INVALID_CONFIGURATION)
    );
    let message = &plan.conditions.last().unwrap().message;
    assert!(message.contains("DockerCluster"), "{message}");
    assert!(matches!(plan.next, Next::AwaitChange));
}

#[tokio::test]
async fn the_actuator_sees_the_infrastructure_cluster_and_what_exists_found() {
    let mut actuator = MockActuator::<TestMachine, TestCluster>::new();
    actuator.expect_exists().times(1).returning(|scope| {
        let name = scope
            .infra_cluster
            .as_ref()
            .and_then(|c| c.metadata.name.clone());
        assert_eq!(name.as_deref(), Some("demo"));
        Ok(Some(Found::new(running("test:///i-5"))))
    });
    actuator.expect_create().never();
    actuator.expect_update().times(1).returning(|scope, found| {
        let name = scope
            .infra_cluster
            .as_ref()
            .and_then(|c| c.metadata.name.clone());
        assert_eq!(name.as_deref(), Some("demo"));
        assert_eq!(found.reported.provider_id, "test:///i-5");
        Ok(UpdateOutcome {
            instance: found.reported,
            immutable_changes: Vec::new(),
        })
    });
    let plan = decide(&actuator, snapshot(infra()), POLL).await;
    assert!(plan.record.provisioned);
}

#[tokio::test]
async fn deletion_of_a_never_owned_object_calls_nothing() {
    let mut infra = deleting();
    infra.metadata.owner_references = None;
    let mut snap = snapshot(infra);
    snap.owner_uid = None;
    let plan = decide(&untouched(), snap, POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Remove);
}

#[tokio::test]
async fn deletion_without_our_finalizer_does_nothing() {
    let mut infra = deleting();
    infra.metadata.finalizers = None;
    let plan = decide(&untouched(), snapshot(infra), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Keep);
}

#[test]
fn unchanged_plan_means_unchanged_status() {
    use super::record::desired_status;
    let mut current = InfraMachineStatus::default();
    condition::mark_true(
        &mut current.conditions,
        condition::READY,
        reasons::INSTANCE_RUNNING,
        Some(1),
    );
    condition::mark_false(
        &mut current.conditions,
        condition::PAUSED,
        reasons::NOT_PAUSED,
        "",
        Some(1),
    );
    current.initialization = Some(capi_core::infra::InfraInitialization {
        provisioned: Some(true),
    });
    current.addresses = running("x").addresses;
    let mut plan = Plan::new(Some(1));
    plan.record.provisioned = true;
    plan.record.addresses = Some(running("x").addresses);
    plan.conditions = vec![
        condition::DesiredCondition::new(
            condition::PAUSED,
            ConditionStatus::False,
            reasons::NOT_PAUSED,
        )
        .observed_generation(Some(1)),
        condition::DesiredCondition::new(
            condition::READY,
            ConditionStatus::True,
            reasons::INSTANCE_RUNNING,
        )
        .observed_generation(Some(1)),
    ];
    assert_eq!(
        desired_status(&current, &plan, plan.generation()),
        current,
        "a converged pass must not write"
    );
}

#[tokio::test]
async fn decide_once_takes_the_loops_branch_without_an_api_server() {
    let observed = |bootstrap| super::Observed {
        infra_machine: infra(),
        infra_cluster: Some(infra_cluster()),
        machine: machine(),
        cluster: cluster(true),
        bootstrap,
    };
    let waiting = super::decide_once(&untouched(), observed(None)).await;
    assert_eq!(waiting.provider_id, None);
    assert!(
        waiting
            .conditions
            .iter()
            .any(|c| c.reason == reasons::WAITING_FOR_BOOTSTRAP_DATA)
    );

    let mut actuator = MockActuator::new();
    actuator.expect_exists().times(1).returning(|_| Ok(None));
    actuator
        .expect_create()
        .times(1)
        .returning(|_, _| Ok(running("test:///i-9")));
    let data = BootstrapData::new(BootstrapFormat::CloudConfig, b"#cloud-config\n".to_vec());
    let created = super::decide_once(&actuator, observed(Some(data))).await;
    assert_eq!(created.provider_id.as_deref(), Some("test:///i-9"));
    assert!(created.provisioned);
    assert!(!created.adds_finalizer);
    assert_eq!(created.events, [reasons::INSTANCE_CREATED]);
}

#[tokio::test]
async fn the_providers_status_failure_domain_and_conditions_are_recorded_ready_stays_the_loops() {
    let mut actuator = MockActuator::new();
    actuator.expect_exists().returning(|_| Ok(None));
    actuator.expect_create().times(1).returning(|_, _| {
        Ok(running("test:///i-3")
            .in_failure_domain("zone-b")
            .with_provider_status(
                capi_core::ProviderStatus::from_typed(&serde_json::json!({"instanceID": "i-3"}))
                    .unwrap(),
            )
            .with_condition(condition::DesiredCondition::new(
                "VolumeAttached",
                ConditionStatus::True,
                "Attached",
            ))
            .with_condition(condition::DesiredCondition::new(
                condition::READY,
                ConditionStatus::False,
                "ProviderSaysNo",
            )))
    });
    let plan = decide(&actuator, snapshot(infra()), POLL).await;
    assert_eq!(plan.record.failure_domain.as_deref(), Some("zone-b"));
    assert_eq!(plan.record.provider_status.fields()["instanceID"], "i-3");
    let status =
        super::record::desired_status(&InfraMachineStatus::default(), &plan, plan.generation());
    assert_eq!(status.failure_domain.as_deref(), Some("zone-b"));
    assert!(condition::is_true(&status.conditions, "VolumeAttached"));
    assert_eq!(
        condition::get(&status.conditions, "VolumeAttached").and_then(|c| c.observed_generation),
        plan.conditions
            .iter()
            .find(|c| c.type_ == condition::READY)
            .and_then(|c| c.observed_generation),
        "stamped with the loop's generation"
    );
    assert_eq!(
        ready(&plan),
        Some((ConditionStatus::True, reasons::INSTANCE_RUNNING.into())),
        "Ready is the loop's"
    );
}

#[tokio::test]
async fn a_failed_instance_carries_the_clouds_reason() {
    let mut actuator = MockActuator::new();
    actuator.expect_exists().returning(|_| Ok(None));
    actuator.expect_create().times(1).returning(|_, _| {
        Ok(MachineInstance {
            state: InstanceState::Failed {
                reason: "OutOfCapacity".into(),
                message: "no host has room".into(),
            },
            ..running("test:///i-4")
        })
    });
    let plan = decide(&actuator, snapshot(infra()), POLL).await;
    assert_eq!(
        ready(&plan),
        Some((ConditionStatus::False, "OutOfCapacity".into()))
    );
}

#[tokio::test]
async fn a_machine_standing_for_a_pool_instance_is_left_to_the_pool_loop() {
    let mut member = infra();
    member.metadata.labels = Some(
        [(
            capi_core::labels::MACHINE_POOL_NAME.to_string(),
            "workers".to_string(),
        )]
        .into(),
    );
    member.metadata.finalizers = None;
    // The label alone (copied from a template, say) does not make a machine a pool's.
    let mut labelled_only = member.clone();
    labelled_only.metadata.finalizers = Some(vec![INFRA_MACHINE_FINALIZER.into()]);
    let mut actuator = MockActuator::new();
    actuator.expect_exists().times(1).returning(|_| Ok(None));
    actuator
        .expect_create()
        .times(1)
        .returning(|_, _| Ok(running("test:///m-0")));
    let plan = decide(&actuator, snapshot(labelled_only), POLL).await;
    assert_eq!(plan.record.provider_id.as_deref(), Some("test:///m-0"));

    member
        .metadata
        .owner_references
        .get_or_insert_with(Vec::new)
        .push(OwnerReference {
            api_version: "infrastructure.test.io/v1alpha1".into(),
            kind: "TestMachinePool".into(),
            name: "workers".into(),
            uid: "77aa".into(),
            ..OwnerReference::default()
        });
    let plan = decide(&untouched(), snapshot(member), POLL).await;
    assert!(plan.conditions.is_empty(), "nothing written: {plan:?}");
    assert_eq!(plan.finalizer, FinalizerChange::Keep);
    assert!(plan.record.provider_id.is_none());
    assert!(matches!(plan.next, Next::AwaitChange));
}
