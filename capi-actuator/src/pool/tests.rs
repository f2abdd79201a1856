//! The pool loop's decisions, with a mock actuator and no API server — among them one test per
//! failure of upstream providers that the loop makes impossible.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{
    Cluster, ClusterInitializationStatus, ClusterStatus, Machine, MachinePool, MachineStatus,
};
use capi_core::condition::{self, ConditionStatus};
use capi_core::infra::{InfraMachinePool, InfraMachinePoolStatus, InfraMachineStatus};
use capi_core::{
    ActuatorError, BootstrapData, BootstrapFormat, Found, InstanceState, MockPoolActuator,
    PoolInstance, ScaleSetReport, labels,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::CustomResource;
use kube::ResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::decide::{
    INFRA_MACHINE_POOL_FINALIZER, Plan, SCALE_SET_MODEL, SCALE_SET_REPLICAS, Snapshot, decide,
};
use super::members::{MISSING_GRACE, POOL_MACHINE_FINALIZER};
use crate::bootstrap_data::BootstrapLookup;
use crate::cluster::tests::{TestCluster, TestClusterSpec};
use crate::machine::tests::{TestMachine, TestMachineSpec};
use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::reasons;

#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.test.io",
    version = "v1alpha1",
    kind = "TestMachinePool",
    namespaced,
    status = "InfraMachinePoolStatus"
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TestMachinePoolSpec {
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    provider_id: Option<String>,
    #[serde(
        rename = "providerIDList",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    provider_id_list: Vec<String>,
    size: String,
}

impl InfraMachinePool for TestMachinePool {
    type Machine = TestMachine;

    fn machine_for(&self, instance: &PoolInstance) -> TestMachine {
        TestMachine::new(
            "",
            TestMachineSpec {
                provider_id: Some(instance.provider_id.clone()),
            },
        )
    }
    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }
    fn provider_id_list(&self) -> &[String] {
        &self.spec.provider_id_list
    }
    fn pool_status(&self) -> Option<&InfraMachinePoolStatus> {
        self.status.as_ref()
    }
}

const POLL: Duration = Duration::from_secs(5);
const POOL_UID: &str = "5b0e9c1d";
const INFRA_UID: &str = "77aa";

fn infra() -> TestMachinePool {
    let mut infra = TestMachinePool::new(
        "workers",
        TestMachinePoolSpec {
            size: "large".into(),
            ..Default::default()
        },
    );
    infra.metadata.namespace = Some("ns".into());
    infra.metadata.uid = Some(INFRA_UID.into());
    infra.metadata.generation = Some(1);
    infra.metadata.finalizers = Some(vec![INFRA_MACHINE_POOL_FINALIZER.into()]);
    infra.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "MachinePool".into(),
        name: "workers".into(),
        uid: POOL_UID.into(),
        ..OwnerReference::default()
    }]);
    infra
}

fn machine_pool(replicas: i32) -> MachinePool {
    let mut pool = MachinePool::default();
    pool.metadata.name = Some("workers".into());
    pool.metadata.namespace = Some("ns".into());
    pool.metadata.uid = Some(POOL_UID.into());
    pool.spec.cluster_name = "demo".into();
    pool.spec.replicas = Some(replicas);
    pool.spec.template.spec.bootstrap.data_secret_name = Some("workers-bootstrap".into());
    pool.spec.template.spec.version = Some("v1.33.1".into());
    pool
}

fn cluster() -> Cluster {
    let mut cluster = Cluster::default();
    cluster.metadata.name = Some("demo".into());
    cluster.status = Some(ClusterStatus {
        initialization: Some(ClusterInitializationStatus {
            infrastructure_provisioned: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    });
    cluster
}

fn infra_cluster() -> TestCluster {
    let mut infra_cluster = TestCluster::new("demo", TestClusterSpec::default());
    infra_cluster.metadata.namespace = Some("ns".into());
    infra_cluster
}

fn snapshot(infra: TestMachinePool, replicas: i32) -> Snapshot<TestMachinePool, TestCluster> {
    Snapshot {
        infra: Arc::new(infra),
        owner_uid: Some(POOL_UID.into()),
        machine_pool: Some(Arc::new(machine_pool(replicas))),
        cluster: Some(Arc::new(cluster())),
        infra_cluster: Some(Arc::new(infra_cluster())),
        bootstrap: BootstrapLookup::Ready(BootstrapData::new(
            BootstrapFormat::CloudConfig,
            b"#cloud-config\n".to_vec(),
        )),
        members: Vec::new(),
        machines: BTreeMap::new(),
        stray_machines: Vec::new(),
        now: jiff::Timestamp::now(),
        invalid_at_generation: None,
    }
}

/// The revision the loop computes for `infra()` and `machine_pool(_)`.
fn current_revision() -> capi_core::ModelRevision {
    super::revision::of(&infra(), &machine_pool(1))
}

fn instance(name: &str, up_to_date: bool, state: InstanceState) -> PoolInstance {
    let revision = if up_to_date {
        current_revision()
    } else {
        capi_core::ModelRevision::new("r-old")
    };
    PoolInstance::new(format!("test:///{name}"), name, state).from_revision(revision)
}

fn report(instances: Vec<PoolInstance>) -> ScaleSetReport {
    let capacity = u32::try_from(instances.len()).unwrap_or_default();
    instances.into_iter().fold(
        ScaleSetReport::new("test:///pools/workers", capacity),
        |r, i| r.with_instance(i),
    )
}

/// The machine the loop made for `instance`, as the API server stores it.
fn member(name: &str) -> Arc<TestMachine> {
    let mut member = TestMachine::new(
        &format!("workers-{name}"),
        TestMachineSpec {
            provider_id: Some(format!("test:///{name}")),
        },
    );
    member.metadata.namespace = Some("ns".into());
    member.metadata.finalizers = Some(vec![POOL_MACHINE_FINALIZER.into()]);
    member.metadata.labels =
        Some([(labels::MACHINE_POOL_NAME.to_string(), "workers".to_string())].into());
    member.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "infrastructure.test.io/v1alpha1".into(),
        kind: "TestMachinePool".into(),
        name: "workers".into(),
        uid: INFRA_UID.into(),
        ..OwnerReference::default()
    }]);
    Arc::new(member)
}

fn deleting(member: &Arc<TestMachine>) -> Arc<TestMachine> {
    let mut member = member.as_ref().clone();
    member.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    Arc::new(member)
}

/// The `Machine` of member `name`, ready or not.
fn machine_of(name: &str, ready: bool) -> (String, Arc<Machine>) {
    let mut machine = Machine::default();
    machine.metadata.name = Some(format!("workers-{name}"));
    machine.metadata.namespace = Some("ns".into());
    machine.spec.infrastructure_ref.name = format!("workers-{name}");
    machine.status = Some(MachineStatus {
        conditions: vec![Condition {
            type_: condition::READY.into(),
            status: if ready { "True" } else { "False" }.into(),
            reason: "Test".into(),
            message: String::new(),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }],
        ..Default::default()
    });
    (format!("workers-{name}"), Arc::new(machine))
}

fn condition_of(plan: &Plan<TestMachine>, type_: &str) -> Option<(ConditionStatus, String)> {
    plan.conditions
        .iter()
        .rev()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason.clone()))
}

fn ready(plan: &Plan<TestMachine>) -> Option<(ConditionStatus, String)> {
    condition_of(plan, condition::READY)
}

fn recorded_ids(plan: &Plan<TestMachine>) -> Vec<String> {
    plan.record.provider_ids.clone()
}

#[tokio::test]
async fn the_finalizer_and_the_key_come_before_any_scale_set() {
    let mut new = infra();
    new.metadata.finalizers = None;
    let mut actuator = MockPoolActuator::new();
    actuator.expect_exists().never();
    actuator.expect_create().never();
    let plan = decide(&actuator, snapshot(new, 2), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Add);
    assert_eq!(
        plan.record.idempotency_key.map(|k| k.to_string()),
        Some(format!("capi-{POOL_UID}"))
    );
}

#[tokio::test]
async fn a_new_scale_set_is_made_at_the_pools_size_with_its_model_and_a_machine_per_instance() {
    let mut actuator = MockPoolActuator::new();
    actuator.expect_exists().times(1).returning(|_| Ok(None));
    actuator
        .expect_create()
        .times(1)
        .withf(|scope, bootstrap| {
            scope.size.capacity == Some(3)
                && scope.revision == current_revision()
                && bootstrap.format() == BootstrapFormat::CloudConfig
        })
        .returning(|_, _| {
            Ok(report(vec![instance(
                "i-1",
                true,
                InstanceState::Provisioning,
            )]))
        });
    let plan = decide(&actuator, snapshot(infra(), 3), POLL).await;
    assert_eq!(recorded_ids(&plan), ["test:///i-1"]);
    assert_eq!(plan.record.members.create.len(), 1);
    let made = &plan.record.members.create[0];
    assert_eq!(made.name_any(), "workers-i-1");
    assert_eq!(made.spec.provider_id.as_deref(), Some("test:///i-1"));
    assert_eq!(made.finalizers(), [POOL_MACHINE_FINALIZER]);
    assert_eq!(
        made.labels()
            .get(labels::MACHINE_POOL_NAME)
            .map(String::as_str),
        Some("workers")
    );
    assert_eq!(made.owner_references()[0].uid, INFRA_UID);
    assert_eq!(
        condition_of(&plan, SCALE_SET_REPLICAS),
        Some((ConditionStatus::False, reasons::SCALING_UP.into()))
    );
    assert_eq!(
        ready(&plan),
        Some((ConditionStatus::True, reasons::SCALE_SET_READY.into())),
        "a scaling pool is not an unready one"
    );
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == reasons::SCALE_SET_CREATED)
    );
}

/// CAPA #4618, CAPI #10541: a pool whose instances have not settled is looked at again, so its
/// provider ID list cannot stay stale until some unrelated event.
#[tokio::test]
async fn an_unsettled_pool_is_looked_at_again_and_a_settled_one_at_resync() {
    let mut actuator = MockPoolActuator::new();
    actuator.expect_exists().returning(|_| {
        Ok(Some(Found::new(report(vec![
            instance("i-1", true, InstanceState::Running),
            instance("i-2", true, InstanceState::Provisioning),
        ]))))
    });
    actuator
        .expect_update()
        .returning(|_, found, _| Ok(found.reported));
    let plan = decide(&actuator, snapshot(infra(), 2), POLL).await;
    assert!(
        matches!(plan.next, Next::Requeue(d) if d == POLL),
        "{:?}",
        plan.next
    );
    assert_eq!(
        condition_of(&plan, SCALE_SET_REPLICAS),
        Some((
            ConditionStatus::False,
            reasons::INSTANCE_PROVISIONING.into()
        ))
    );

    let mut settled = MockPoolActuator::new();
    settled.expect_exists().returning(|_| {
        Ok(Some(Found::new(report(vec![
            instance("i-1", true, InstanceState::Running),
            instance("i-2", true, InstanceState::Running),
        ]))))
    });
    settled
        .expect_update()
        .returning(|_, found, _| Ok(found.reported));
    let plan = decide(&settled, snapshot(infra(), 2), POLL).await;
    assert!(matches!(plan.next, Next::Resync), "{:?}", plan.next);
    assert_eq!(
        condition_of(&plan, SCALE_SET_REPLICAS),
        Some((ConditionStatus::True, reasons::SCALE_SET_READY.into()))
    );
    assert_eq!(
        condition_of(&plan, SCALE_SET_MODEL),
        Some((ConditionStatus::True, reasons::UP_TO_DATE.into()))
    );
}

/// CAPZ #4982: a pool that is not ready, or whose update fails, or whose bootstrap data is away,
/// still records the instances its scale set has.
#[tokio::test]
async fn the_provider_id_list_is_recorded_whatever_else_fails() {
    let seen = || {
        Ok(Some(Found::new(report(vec![
            instance("i-1", true, InstanceState::Running),
            instance(
                "i-2",
                true,
                InstanceState::Failed {
                    reason: "OutOfCapacity".into(),
                    message: "no capacity".into(),
                },
            ),
        ]))))
    };
    let mut failing = MockPoolActuator::new();
    failing.expect_exists().returning(move |_| seen());
    failing
        .expect_update()
        .returning(|_, _, _| Err(ActuatorError::transient_message("Throttled", "try again")));
    let plan = decide(&failing, snapshot(infra(), 2), POLL).await;
    assert_eq!(recorded_ids(&plan), ["test:///i-1", "test:///i-2"]);
    assert!(matches!(plan.next, Next::Failed(_)));

    // Without bootstrap data the size and removals are still done; the model waits.
    let mut no_model = MockPoolActuator::new();
    no_model.expect_exists().returning(move |_| seen());
    no_model
        .expect_update()
        .times(1)
        .withf(|_, _, bootstrap| bootstrap.is_none())
        .returning(|_, found, _| Ok(found.reported));
    let mut away = snapshot(infra(), 2);
    away.bootstrap = BootstrapLookup::SecretMissing("workers-bootstrap".into());
    let plan = decide(&no_model, away, POLL).await;
    assert_eq!(recorded_ids(&plan), ["test:///i-1", "test:///i-2"]);
    assert_eq!(
        plan.record.members.create.len(),
        2,
        "machines are made all the same"
    );
    assert_eq!(
        condition_of(&plan, SCALE_SET_MODEL),
        Some((
            ConditionStatus::False,
            reasons::WAITING_FOR_BOOTSTRAP_DATA.into()
        ))
    );
    assert_eq!(
        ready(&plan),
        Some((ConditionStatus::True, reasons::SCALE_SET_READY.into()))
    );
    assert!(matches!(plan.next, Next::Requeue(_)));
}

/// CAPZ #4940, CAPZ #3077: scale-down deletes the `Machine`s of the chosen instances (drained
/// first) and keeps the cloud's capacity until their machines are being deleted; then exactly
/// those instances are removed and their machines released.
#[tokio::test]
async fn scale_down_drains_through_the_machines_then_removes_exactly_those_instances() {
    let members: Vec<Arc<TestMachine>> = ["i-1", "i-2", "i-3"].iter().map(|n| member(n)).collect();
    let machines: BTreeMap<String, Arc<Machine>> = ["i-1", "i-2", "i-3"]
        .iter()
        .map(|n| machine_of(n, true))
        .collect();
    let three = || {
        report(vec![
            instance("i-1", true, InstanceState::Running),
            instance("i-2", true, InstanceState::Running),
            instance("i-3", true, InstanceState::Running),
        ])
    };
    let mut actuator = MockPoolActuator::new();
    actuator
        .expect_exists()
        .returning(move |_| Ok(Some(Found::new(three()))));
    actuator
        .expect_update()
        .withf(|scope, _, _| scope.size.capacity == Some(3) && scope.size.remove.is_empty())
        .returning(|_, found, _| Ok(found.reported));
    let mut observed = snapshot(infra(), 1);
    observed.members = members.clone();
    observed.machines = machines.clone();
    let plan = decide(&actuator, observed, POLL).await;
    assert_eq!(
        plan.record.members.delete_machines,
        ["workers-i-1", "workers-i-2"]
    );
    assert!(
        plan.record.members.delete_members.is_empty(),
        "never the machine under a Machine"
    );

    // The Machine controller drained i-1 and i-2 and deleted their machines.
    let mut actuator = MockPoolActuator::new();
    actuator
        .expect_exists()
        .returning(move |_| Ok(Some(Found::new(three()))));
    actuator
        .expect_update()
        .withf(|scope, _, _| {
            scope.size.capacity == Some(1)
                && scope.size.remove
                    == ["test:///i-1", "test:///i-2"]
                        .map(String::from)
                        .into_iter()
                        .collect()
        })
        .returning(|_, _, _| Ok(report(vec![instance("i-3", true, InstanceState::Running)])));
    let mut observed = snapshot(infra(), 1);
    observed.members = vec![
        deleting(&members[0]),
        deleting(&members[1]),
        Arc::clone(&members[2]),
    ];
    // Their Machines are gone (the Machine controller deletes the machine last).
    observed.machines = machines
        .into_iter()
        .filter(|(name, _)| name == "workers-i-3")
        .collect();
    let plan = decide(&actuator, observed, POLL).await;
    let released: Vec<String> = plan
        .record
        .members
        .release_finalizer
        .iter()
        .map(|m| m.name_any())
        .collect();
    assert_eq!(released, ["workers-i-1", "workers-i-2"]);
    assert!(matches!(plan.next, Next::Resync));
}

/// CAPZ #4955: a pool being deleted makes no machine for the instances its scale set still has,
/// and once the scale set is gone, no machine is left holding the loop's finalizer.
#[tokio::test]
async fn deletion_makes_no_machine_and_releases_every_one_once_the_scale_set_is_gone() {
    let mut gone = infra();
    gone.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    gone.metadata.annotations = Some(
        [(
            labels::IDEMPOTENCY_KEY.to_string(),
            format!("capi-{POOL_UID}"),
        )]
        .into(),
    );
    let members = vec![member("i-1"), deleting(&member("i-2"))];

    let mut in_progress = MockPoolActuator::new();
    in_progress.expect_exists().never();
    in_progress.expect_delete().times(1).returning(|_| {
        Err(ActuatorError::requeue_after(
            Duration::from_secs(10),
            "DeletingScaleSet",
            "deleting",
        ))
    });
    let mut observed = snapshot(gone.clone(), 2);
    observed.members = members.clone();
    let plan = decide(&in_progress, observed, POLL).await;
    assert!(plan.record.members.create.is_empty());
    assert!(plan.record.members.release_finalizer.is_empty());
    assert_eq!(plan.finalizer, FinalizerChange::Keep);

    let mut done = MockPoolActuator::new();
    done.expect_delete().times(2).returning(|_| Ok(()));
    let mut observed = snapshot(gone.clone(), 2);
    observed.members = members;
    let plan = decide(&done, observed, POLL).await;
    assert_eq!(plan.record.members.release_finalizer.len(), 2);
    assert_eq!(plan.record.members.delete_members, ["workers-i-1"]);
    assert!(plan.record.members.create.is_empty());
    assert_eq!(
        plan.finalizer,
        FinalizerChange::Keep,
        "the pool's finalizer waits until the API server lists none of its machines"
    );
    let plan = decide(&done, snapshot(gone, 2), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Remove);
}

/// An instance the scale set no longer lists is given one more look before its `Machine` goes: a
/// listing that lags once deletes nothing.
#[tokio::test]
async fn a_missing_instance_is_marked_first_and_released_at_the_next_miss() {
    let mut actuator = MockPoolActuator::new();
    actuator
        .expect_exists()
        .returning(|_| Ok(Some(Found::new(report(vec![])))));
    actuator
        .expect_update()
        .returning(|_, found, _| Ok(found.reported));
    let (name, machine) = machine_of("i-1", true);
    let mut observed = snapshot(infra(), 0);
    observed.members = vec![member("i-1")];
    observed.machines = [(name.clone(), Arc::clone(&machine))].into();
    let plan = decide(&actuator, observed, POLL).await;
    assert!(plan.record.members.delete_machines.is_empty());
    assert_eq!(
        recorded_ids(&plan),
        ["test:///i-1"],
        "its node must not be deleted by upstream on one missed listing"
    );
    let (marked, status) = &plan.record.members.status[0];
    assert_eq!(marked, "workers-i-1");
    assert_eq!(
        condition::get(&status.conditions, condition::READY).map(|c| c.reason.as_str()),
        Some(reasons::INSTANCE_NOT_FOUND)
    );

    let mut missing_again = member("i-1").as_ref().clone();
    missing_again.status = Some(InfraMachineStatus {
        conditions: status.conditions.clone(),
        ..Default::default()
    });
    let again = |after: Duration| {
        let mut observed = snapshot(infra(), 0);
        observed.members = vec![Arc::new(missing_again.clone())];
        observed.machines = [(name.clone(), Arc::clone(&machine))].into();
        observed.now = jiff::Timestamp::now() + after;
        observed
    };
    let plan = decide(&actuator, again(Duration::from_secs(1)), POLL).await;
    assert!(
        plan.record.members.delete_machines.is_empty(),
        "missing for a second only"
    );
    let plan = decide(
        &actuator,
        again(MISSING_GRACE + Duration::from_secs(1)),
        POLL,
    )
    .await;
    assert_eq!(plan.record.members.delete_machines, ["workers-i-1"]);
    assert!(
        recorded_ids(&plan).is_empty(),
        "it leaves the list as its Machine goes"
    );
}

/// CAPA #4071: a new model (a spec change here) rolls the pool — the loop surges and, once the
/// new instance's Machine is ready, releases an outdated one.
#[tokio::test]
async fn a_spec_change_rolls_instances_through_a_surge() {
    let members: Vec<Arc<TestMachine>> = ["i-1", "i-2", "i-3"].iter().map(|n| member(n)).collect();
    let mut machines: BTreeMap<String, Arc<Machine>> =
        ["i-1", "i-2"].iter().map(|n| machine_of(n, true)).collect();
    let surged = || {
        report(vec![
            instance("i-1", false, InstanceState::Running),
            instance("i-2", false, InstanceState::Running),
            instance("i-3", true, InstanceState::Running),
        ])
    };
    let mut actuator = MockPoolActuator::new();
    actuator
        .expect_exists()
        .returning(move |_| Ok(Some(Found::new(surged()))));
    actuator
        .expect_update()
        .withf(|scope, _, _| scope.size.capacity == Some(3))
        .returning(|_, found, _| Ok(found.reported));
    // The new instance's Machine is not ready yet: nothing goes.
    machines.insert(machine_of("i-3", false).0, machine_of("i-3", false).1);
    let mut observed = snapshot(infra(), 2);
    observed.members = members.clone();
    observed.machines = machines.clone();
    let plan = decide(&actuator, observed, POLL).await;
    assert!(plan.record.members.delete_machines.is_empty());
    assert_eq!(
        condition_of(&plan, SCALE_SET_MODEL),
        Some((ConditionStatus::False, reasons::ROLLING_OUT.into()))
    );

    machines.insert(machine_of("i-3", true).0, machine_of("i-3", true).1);
    let mut observed = snapshot(infra(), 2);
    observed.members = members;
    observed.machines = machines;
    let plan = decide(&actuator, observed, POLL).await;
    assert_eq!(plan.record.members.delete_machines, ["workers-i-1"]);
}

#[tokio::test]
async fn a_paused_pool_calls_nothing() {
    let mut paused = infra();
    paused.metadata.annotations = Some([(labels::PAUSED.to_string(), String::new())].into());
    let mut actuator = MockPoolActuator::new();
    actuator.expect_exists().never();
    actuator.expect_delete().never();
    let plan = decide(&actuator, snapshot(paused, 2), POLL).await;
    assert!(plan.record.report.is_none());
    assert!(matches!(plan.next, Next::AwaitChange));
}

#[test]
fn the_contract_fields_are_not_part_of_the_model() {
    let mut written = infra();
    written.spec.provider_id = Some("test:///pools/workers".into());
    written.spec.provider_id_list = vec!["test:///i-1".into()];
    assert_eq!(
        super::revision::of(&written, &machine_pool(1)),
        current_revision()
    );
    let mut bigger = infra();
    bigger.spec.size = "xlarge".into();
    assert_ne!(
        super::revision::of(&bigger, &machine_pool(1)),
        current_revision()
    );
}

/// A machine deleted by hand while its `Machine` lives does not take its instance along: the
/// `Machine` is deleted first (its node drained), and only then does the instance leave.
#[tokio::test]
async fn a_machine_deleted_directly_drains_through_its_machine_first() {
    let mut actuator = MockPoolActuator::new();
    actuator.expect_exists().returning(|_| {
        Ok(Some(Found::new(report(vec![instance(
            "i-1",
            true,
            InstanceState::Running,
        )]))))
    });
    actuator
        .expect_update()
        .withf(|scope, _, _| scope.size.remove.is_empty())
        .returning(|_, found, _| Ok(found.reported));
    let mut observed = snapshot(infra(), 1);
    observed.members = vec![deleting(&member("i-1"))];
    observed.machines = [machine_of("i-1", true)].into();
    let plan = decide(&actuator, observed, POLL).await;
    assert_eq!(plan.record.members.delete_machines, ["workers-i-1"]);
    assert!(plan.record.members.release_finalizer.is_empty());
}

/// A deleting machine whose instance a lagging listing hides keeps its finalizer until the grace
/// is over: the instance may still be there, and must be removed, not forgotten.
#[tokio::test]
async fn an_unlisted_instance_of_a_deleting_machine_is_not_forgotten_at_once() {
    let mut actuator = MockPoolActuator::new();
    actuator
        .expect_exists()
        .returning(|_| Ok(Some(Found::new(report(vec![])))));
    actuator
        .expect_update()
        .returning(|_, found, _| Ok(found.reported));
    let mut leaving = member("i-1").as_ref().clone();
    leaving.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    let observed = |now: jiff::Timestamp| {
        let mut observed = snapshot(infra(), 0);
        observed.members = vec![Arc::new(leaving.clone())];
        observed.now = now;
        observed
    };
    let plan = decide(&actuator, observed(jiff::Timestamp::now()), POLL).await;
    assert!(plan.record.members.release_finalizer.is_empty());
    assert!(matches!(plan.next, Next::Requeue(_)), "looked at again");
    let later = jiff::Timestamp::now() + MISSING_GRACE + Duration::from_secs(1);
    let plan = decide(&actuator, observed(later), POLL).await;
    assert_eq!(plan.record.members.release_finalizer.len(), 1);
}

/// A pass counts machines only from stores that hold their first lists, and waits for them no
/// longer than its bound: with a watch that never lists (an API server out of reach) it requeues
/// instead of holding its worker for good — the pool reconciler of `cargo xtask chaos --pool` once
/// waited forever after a failover, and reconciled nothing again.
#[tokio::test]
async fn a_pass_waits_for_its_stores_first_lists_no_longer_than_its_bound() {
    use super::observe::Owners;
    use capi_runtime::cache::informer::Informers;
    use capi_runtime::cache::lookup::Cached;
    use kube::Api;
    use kube::runtime::watcher;

    // Nothing listens there: the watches retry, and never list.
    let client = kube::Client::try_from(kube::Config::new(
        "http://127.0.0.1:9".parse().expect("a URL"),
    ))
    .expect("a client");
    let informers = Informers::default();
    let never_listed = Owners::<TestMachinePool, TestCluster> {
        machine_pools: Cached::new(kube::runtime::reflector::store().0, client.clone()),
        clusters: Cached::new(kube::runtime::reflector::store().0, client.clone()),
        infra_clusters: Cached::new(kube::runtime::reflector::store().0, client.clone()),
        machines: Cached::of(
            informers.informer(Api::all(client.clone()), watcher::Config::default()),
            client.clone(),
        ),
        members: Cached::of(
            informers.informer(Api::all(client.clone()), watcher::Config::default()),
            client.clone(),
        ),
    };
    let bound = Duration::from_millis(200);
    let waited = tokio::time::timeout(Duration::from_secs(10), never_listed.listed_within(bound))
        .await
        .expect("the wait ends at its bound");
    assert!(!waited, "not listed: the pass requeues");

    // Stores given filled count as listed: no wait.
    let listed = Owners::<TestMachinePool, TestCluster> {
        machines: Cached::new(kube::runtime::reflector::store().0, client.clone()),
        members: Cached::new(kube::runtime::reflector::store().0, client.clone()),
        ..never_listed
    };
    assert!(listed.listed_within(Duration::ZERO).await);
}
