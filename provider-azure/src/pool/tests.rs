//! Every branch of the pool actuator over a mocked ARM (`crate::fake_arm`).

use std::collections::BTreeSet;
use std::sync::Mutex;

use capi_core::api::{Cluster, MachinePool};
use capi_core::{ActuatorErrorKind, BootstrapData, BootstrapFormat, IdempotencyKey, PoolSize};
use serde_json::json;

use super::*;
use crate::arm::{MockArm, Poll};
use crate::connector::MockConnector;
use crate::fake_arm::{SUB, State, azure_cluster, connector, fake, lock};
use crate::machine::MAX_CUSTOM_DATA;

const KEY: &str = "capi-pool-uid-1";

fn infra_pool(status: Value) -> AzureMachinePool {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureMachinePool",
        "metadata": {"name": "workers", "namespace": "ns",
                     "labels": {"cluster.x-k8s.io/cluster-name": "demo"}},
        "spec": {"template": {"vmSize": "Standard_D2s_v3", "osDisk": {"diskSizeGB": 64}}},
        "status": status,
    }))
    .unwrap_or_default()
}

fn scope_with(
    pool: AzureMachinePool,
    capacity: Option<u32>,
    remove: &[&str],
    revision: &str,
) -> PoolScope<AzureMachinePool, AzureCluster> {
    let mut machine_pool = MachinePool::default();
    machine_pool.metadata.uid = Some("pool-uid-1".into());
    machine_pool.spec.cluster_name = "demo".into();
    machine_pool.spec.template.spec.version = Some("v1.33.1".into());
    let idempotency_key = IdempotencyKey::for_machine_pool(&machine_pool)
        .unwrap_or_else(|_| panic!("the pool has a UID"));
    PoolScope {
        cluster: Arc::new(Cluster::default()),
        infra_cluster: Some(Arc::new(azure_cluster())),
        machine_pool: Arc::new(machine_pool),
        infra_pool: Arc::new(pool),
        idempotency_key,
        size: PoolSize {
            capacity,
            remove: remove
                .iter()
                .map(|r| (*r).to_string())
                .collect::<BTreeSet<_>>(),
        },
        revision: ModelRevision::new(revision),
    }
}

fn scope(
    capacity: u32,
    remove: &[&str],
    revision: &str,
) -> PoolScope<AzureMachinePool, AzureCluster> {
    scope_with(infra_pool(json!({})), Some(capacity), remove, revision)
}

fn bootstrap_data(value: &str) -> BootstrapData {
    BootstrapData::new(BootstrapFormat::CloudConfig, value)
}

fn bootstrap() -> BootstrapData {
    bootstrap_data("#cloud-config\nruncmd: []\n")
}

fn actuator(arm: MockArm) -> AzurePoolActuator {
    AzurePoolActuator::new(Arc::new(connector(arm)))
}

fn set_id() -> ResourceId {
    ResourceId::new(SUB, "demo", ResourceType::VirtualMachineScaleSet, KEY)
}

fn vm_id(name: &str) -> ResourceId {
    ResourceId::new(SUB, "demo", ResourceType::VirtualMachine, name)
}

/// A VM of the scale set, made from the model of `revision`.
fn vm(name: &str, state: &str, revision: &str) -> Value {
    json!({
        "id": vm_id(name).to_string(), "name": name, "location": "westeurope",
        "properties": {
            "provisioningState": state,
            "virtualMachineScaleSet": {"id": set_id().to_string()},
            "osProfile": {"computerName": format!("workers-{name}")},
            "userData": user_data(&ModelRevision::new(revision)),
        },
    })
}

/// Puts the scale set the provider would make (capacity, revision, data) and `vms` into the
/// fake, all settled.
async fn existing(
    state: &Arc<Mutex<State>>,
    actuator: &AzurePoolActuator,
    vms: &[(&str, &str)],
    revision: &str,
) {
    let created = actuator
        .create(
            &scope(u32::try_from(vms.len()).unwrap_or(0), &[], revision),
            &bootstrap(),
        )
        .await;
    assert!(created.is_ok(), "{created:?}");
    let mut st = lock(state);
    for (name, rev) in vms {
        st.insert(&vm_id(name), vm(name, "Succeeded", rev));
    }
    st.calls.clear();
}

async fn look(
    actuator: &AzurePoolActuator,
    scope: &PoolScope<AzureMachinePool, AzureCluster>,
) -> Found<ScaleSetRecord, ScaleSetReport> {
    match actuator.exists(scope).await {
        Ok(Some(found)) => found,
        other => panic!("the scale set exists: {other:?}"),
    }
}

#[tokio::test]
async fn nothing_is_asked_of_azure_for_bootstrap_data_it_would_refuse() {
    let mut connector = MockConnector::new();
    connector.expect_connect().never();
    let actuator = AzurePoolActuator::new(Arc::new(connector));
    let huge = bootstrap_data(&"x".repeat(MAX_CUSTOM_DATA + 1));
    let error = actuator.create(&scope(2, &[], "r1"), &huge).await.err();
    assert_eq!(
        error.map(|e| e.reason().to_string()).as_deref(),
        Some("BootstrapDataTooLarge")
    );
}

#[tokio::test]
async fn a_flexible_scale_set_is_made_once_at_the_pools_size_with_its_model_and_operation() {
    let (arm, state) = fake();
    lock(&state).put_state = "Creating".into();
    let actuator = actuator(arm);
    let report = actuator.create(&scope(3, &[], "r1"), &bootstrap()).await;
    let report = report.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.capacity, 3);
    assert!(
        report
            .provider_id
            .ends_with(&format!("/virtualMachineScaleSets/{KEY}"))
    );
    assert!(report.provider_id.starts_with("azure:///subscriptions/"));
    let operations = &report.provider_status.fields()["longRunningOperationStates"];
    assert_eq!(operations[0]["serviceName"], "scalesets");
    {
        let st = lock(&state);
        let body = st.get(&set_id()).cloned().unwrap_or_default();
        assert_eq!(body["properties"]["orchestrationMode"], "Flexible");
        assert_eq!(body["sku"]["name"], "Standard_D2s_v3");
        let profile = &body["properties"]["virtualMachineProfile"];
        let custom = profile["osProfile"]["customData"]
            .as_str()
            .unwrap_or_default();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(custom)
            .unwrap_or_default();
        assert_eq!(decoded, bootstrap().expose());
        assert_eq!(
            revision_in_user_data(profile["userData"].as_str().unwrap_or_default()).as_deref(),
            Some("r1")
        );
        assert_eq!(body["tags"][POOL_TAG], KEY);
        assert_eq!(body["tags"][REVISION_TAG], "r1");
    }
    // A create replayed (its answer lost) finds the scale set and puts nothing.
    lock(&state).calls.clear();
    let again = actuator.create(&scope(3, &[], "r1"), &bootstrap()).await;
    assert!(again.is_ok());
    assert!(lock(&state).calls("PUT").is_empty());
}

#[tokio::test]
async fn a_scale_set_of_the_name_that_is_not_the_pools_is_never_touched() {
    let (arm, state) = fake();
    lock(&state).insert(
        &set_id(),
        json!({"name": KEY, "sku": {"capacity": 1}, "tags": {"team": "other"},
               "properties": {"provisioningState": "Succeeded"}}),
    );
    let actuator = actuator(arm);
    let error = actuator.exists(&scope(1, &[], "r1")).await.err();
    assert_eq!(
        error.map(|e| e.reason().to_string()).as_deref(),
        Some("ScaleSetNotOwned")
    );
    assert!(actuator.delete(&scope(1, &[], "r1")).await.is_ok());
    assert!(lock(&state).calls("DELETE").is_empty());
    assert!(lock(&state).get(&set_id()).is_some());
}

#[tokio::test]
async fn only_the_named_vms_leave_and_the_capacity_goes_down_with_them_never_by_a_put() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    existing(
        &state,
        &actuator,
        &[("vm-a", "r1"), ("vm-b", "r1"), ("vm-c", "r1")],
        "r1",
    )
    .await;
    let leaving = provider_id(&vm_id("vm-b"));
    let scope = scope(2, &[leaving.as_str()], "r1");
    let found = look(&actuator, &scope).await;
    let report = actuator.update(&scope, found, Some(bootstrap())).await;
    let report = report.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.capacity, 2);
    {
        let st = lock(&state);
        assert_eq!(st.calls("POST delete"), [KEY]);
        assert!(
            st.calls("PUT").is_empty(),
            "a PUT would let Azure pick the VMs"
        );
        assert!(st.get(&vm_id("vm-b")).is_none());
        assert!(st.get(&vm_id("vm-a")).is_some() && st.get(&vm_id("vm-c")).is_some());
    }
    // A smaller size with no VM named waits: nothing is removed, nothing put.
    lock(&state).calls.clear();
    lock(&state).poll = Some(Poll::Succeeded);
    let smaller = scope_with(infra_pool(json!({})), Some(1), &[], "r1");
    let found = look(&actuator, &smaller).await;
    let report = actuator.update(&smaller, found, Some(bootstrap())).await;
    assert_eq!(report.map(|r| r.capacity).ok(), Some(2));
    assert!(lock(&state).calls("PUT").is_empty());
    assert!(lock(&state).calls("POST delete").is_empty());
}

#[tokio::test]
async fn nothing_is_sent_to_a_scale_set_while_its_operation_runs() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    existing(&state, &actuator, &[("vm-a", "r1")], "r1").await;
    // A removal under way (the scale set itself says Succeeded meanwhile).
    let status = json!({"longRunningOperationStates": [{
        "type": "DELETE", "serviceName": "scalesets", "name": KEY,
        "pollingURL": "https://arm.test/operations/x",
        "startedAt": jiff::Timestamp::now().to_string(),
    }]});
    lock(&state).poll = Some(Poll::InProgress { retry_after: None });
    let leaving = provider_id(&vm_id("vm-a"));
    let scope = scope_with(infra_pool(status), Some(3), &[leaving.as_str()], "r2");
    let found = look(&actuator, &scope).await;
    let report = actuator.update(&scope, found, Some(bootstrap())).await;
    assert!(report.is_ok());
    assert!(lock(&state).calls("PUT").is_empty() && lock(&state).calls("POST delete").is_empty());
    // A PUT under way, as the scale set's own state says.
    if let Some(set) = lock(&state)
        .resources
        .get_mut(&set_id().to_string().to_lowercase())
    {
        set["properties"]["provisioningState"] = json!("Updating");
    }
    let scope = scope_with(infra_pool(json!({})), Some(3), &[leaving.as_str()], "r2");
    let found = look(&actuator, &scope).await;
    assert!(
        actuator
            .update(&scope, found, Some(bootstrap()))
            .await
            .is_ok()
    );
    assert!(lock(&state).calls("PUT").is_empty() && lock(&state).calls("POST delete").is_empty());
}

#[tokio::test]
async fn each_vms_revision_is_read_from_its_user_data_once_and_outdated_vms_are_reported() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    existing(&state, &actuator, &[("vm-a", "r1"), ("vm-b", "r2")], "r1").await;
    let scope = scope(2, &[], "r2");
    let found = look(&actuator, &scope).await;
    assert_eq!(lock(&state).calls("GET+expand").len(), 2);
    let up_to_date: Vec<bool> = found
        .reported
        .instances
        .iter()
        .map(|i| i.is_up_to_date(&ModelRevision::new("r2")))
        .collect();
    assert_eq!(up_to_date, [false, true]);
    // Recorded in status, the revisions are not read again.
    let recorded = found.reported.provider_status.fields()["instanceRevisions"].clone();
    assert_eq!(recorded[0], json!({"name": "vm-a", "revision": "r1"}));
    lock(&state).calls.clear();
    let again = scope_with(
        infra_pool(json!({"instanceRevisions": recorded})),
        Some(2),
        &[],
        "r2",
    );
    let _ = look(&actuator, &again).await;
    assert!(lock(&state).calls("GET+expand").is_empty());
}

#[tokio::test]
async fn a_new_revision_or_rotated_data_puts_the_model_and_a_surge_raises_the_capacity() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    existing(&state, &actuator, &[("vm-a", "r1")], "r1").await;
    // The same model, size and data: nothing is put.
    let same = scope(1, &[], "r1");
    let found_same = look(&actuator, &same).await;
    assert!(
        actuator
            .update(&same, found_same, Some(bootstrap()))
            .await
            .is_ok()
    );
    assert!(lock(&state).calls("PUT").is_empty());
    // A rotated token within the revision reaches the model, and no VM is touched.
    let rotated = bootstrap_data("#cloud-config\nruncmd: [rotated]\n");
    let found_rotated = look(&actuator, &same).await;
    assert!(
        actuator
            .update(&same, found_rotated, Some(rotated.clone()))
            .await
            .is_ok()
    );
    assert_eq!(lock(&state).calls("PUT"), [KEY]);
    assert!(lock(&state).calls("POST delete").is_empty());
    // A new revision with a surge of one: the model and the capacity in one PUT.
    lock(&state).calls.clear();
    let surge = scope(2, &[], "r2");
    let found_surge = look(&actuator, &surge).await;
    let report = actuator.update(&surge, found_surge, Some(rotated)).await;
    assert_eq!(report.map(|r| r.capacity).ok(), Some(2));
    let body = lock(&state).get(&set_id()).cloned().unwrap_or_default();
    assert_eq!(body["tags"][REVISION_TAG], "r2");
    assert_eq!(body["sku"]["capacity"], 2);
}

#[tokio::test]
async fn without_bootstrap_data_the_model_stays_and_removals_are_done_all_the_same() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    existing(&state, &actuator, &[("vm-a", "r1"), ("vm-b", "r1")], "r1").await;
    let grow = scope(4, &[], "r2");
    let found_grow = look(&actuator, &grow).await;
    assert!(actuator.update(&grow, found_grow, None).await.is_ok());
    assert!(
        lock(&state).calls("PUT").is_empty(),
        "a PUT would drop the customData"
    );
    let leaving = provider_id(&vm_id("vm-a"));
    let shrink = scope(1, &[leaving.as_str()], "r1");
    let found_shrink = look(&actuator, &shrink).await;
    assert!(actuator.update(&shrink, found_shrink, None).await.is_ok());
    assert_eq!(lock(&state).calls("POST delete"), [KEY]);
}

#[tokio::test]
async fn deletion_takes_the_scale_set_then_any_vm_it_left_and_ends_when_none_is_left() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    existing(&state, &actuator, &[("vm-a", "r1")], "r1").await;
    let scope = scope(1, &[], "r1");
    let first = actuator.delete(&scope).await.err();
    assert!(matches!(
        first.as_ref().map(ActuatorError::kind),
        Some(ActuatorErrorKind::RequeueAfter)
    ));
    assert!(lock(&state).get(&set_id()).is_none());
    // The fake leaves the VM behind, as a scale set deleted by another party may.
    let second = actuator.delete(&scope).await.err();
    assert_eq!(
        second.map(|e| e.reason().to_string()).as_deref(),
        Some("DeletingVirtualMachines")
    );
    assert!(lock(&state).get(&vm_id("vm-a")).is_none());
    assert!(actuator.delete(&scope).await.is_ok());
}

#[tokio::test]
async fn a_provider_id_naming_another_scale_set_is_refused_before_anything_is_made() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    let mut pool = infra_pool(json!({}));
    pool.spec.provider_id = Some(format!(
        "azure:///subscriptions/{SUB}/resourceGroups/old-group/providers/Microsoft.Compute/virtualMachineScaleSets/{KEY}"
    ));
    let scope = scope_with(pool, Some(1), &[], "r1");
    let error = actuator.exists(&scope).await.err();
    assert_eq!(
        error.map(|e| e.reason().to_string()).as_deref(),
        Some("ProviderIDMismatch")
    );
    let error = actuator.create(&scope, &bootstrap()).await.err();
    assert_eq!(
        error.map(|e| e.reason().to_string()).as_deref(),
        Some("ProviderIDMismatch")
    );
    assert!(lock(&state).calls("PUT").is_empty());
}

#[tokio::test]
async fn a_pool_with_a_wrong_location_is_refused_and_still_deleted() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    existing(&state, &actuator, &[("vm-a", "r1")], "r1").await;
    let mut pool = infra_pool(json!({}));
    pool.spec.location = Some("eastus".into());
    let scope = scope_with(pool, Some(1), &[], "r1");
    let error = actuator.exists(&scope).await.err();
    assert_eq!(
        error.map(|e| e.reason().to_string()).as_deref(),
        Some("LocationMismatch")
    );
    let mut attempts = 0;
    while actuator.delete(&scope).await.is_err() {
        attempts += 1;
        assert!(attempts < 5, "the pool's deletion is stuck");
    }
    assert!(lock(&state).get(&set_id()).is_none());
}

#[tokio::test]
async fn a_removal_arm_refuses_is_retried_not_frozen_and_nothing_is_put_while_vms_leave() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    existing(&state, &actuator, &[("vm-a", "r1"), ("vm-b", "r1")], "r1").await;
    lock(&state).errors.insert(
        ("POST".into(), "*".into()),
        crate::arm::ArmError::new(Some(400), "InvalidParameter", "vm-a is not in the set"),
    );
    let leaving = provider_id(&vm_id("vm-a"));
    let scope = scope(1, &[leaving.as_str()], "r1");
    let found = look(&actuator, &scope).await;
    let error = actuator
        .update(&scope, found, Some(bootstrap()))
        .await
        .err();
    assert_eq!(
        error.as_ref().map(|e| e.reason().to_string()).as_deref(),
        Some("RemovalRefused")
    );
    assert!(matches!(
        error.as_ref().map(ActuatorError::kind),
        Some(ActuatorErrorKind::Transient)
    ));
    // A VM still leaving (its removal's record lost): a new model waits for it to go.
    if let Some(vm) = lock(&state)
        .resources
        .get_mut(&vm_id("vm-b").to_string().to_lowercase())
    {
        vm["properties"]["provisioningState"] = json!("Deleting");
    }
    let grow = scope_with(infra_pool(json!({})), Some(3), &[], "r2");
    let found = look(&actuator, &grow).await;
    assert!(
        actuator
            .update(&grow, found, Some(bootstrap()))
            .await
            .is_ok()
    );
    assert!(lock(&state).calls("PUT").is_empty());
}

#[tokio::test]
async fn a_model_put_again_keeps_the_scale_sets_ssh_key() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    existing(&state, &actuator, &[("vm-a", "r1")], "r1").await;
    let key_of = |state: &Arc<Mutex<State>>| {
        lock(state).get(&set_id()).cloned().unwrap_or_default()["properties"]
            ["virtualMachineProfile"]["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]
            ["keyData"]
            .clone()
    };
    let first = key_of(&state);
    assert!(
        first
            .as_str()
            .is_some_and(|k| k.starts_with("ssh-ed25519 "))
    );
    let scope = scope(2, &[], "r2");
    let found = look(&actuator, &scope).await;
    assert!(
        actuator
            .update(&scope, found, Some(bootstrap()))
            .await
            .is_ok()
    );
    assert_eq!(lock(&state).calls("PUT"), [KEY]);
    assert_eq!(key_of(&state), first);
}

#[tokio::test]
async fn a_capacity_an_autoscaler_raised_after_the_read_is_never_lowered_by_the_model_put() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    existing(&state, &actuator, &[("vm-a", "r1"), ("vm-b", "r1")], "r1").await;
    // Autoscaled (no capacity asked), with a new revision to put: the scale set is read at 2 …
    let autoscaled = scope_with(infra_pool(json!({})), None, &[], "r2");
    let found = look(&actuator, &autoscaled).await;
    // … and the autoscaler raises it to 5 before the model is put.
    {
        let mut st = lock(&state);
        let etag = st.next_etag();
        let mut set = st.get(&set_id()).cloned().unwrap_or_default();
        set["sku"]["capacity"] = json!(5);
        set["etag"] = json!(etag);
        st.insert(&set_id(), set);
    }
    let raced = actuator.update(&autoscaled, found, Some(bootstrap())).await;
    assert!(
        matches!(&raced, Err(ActuatorError::RequeueAfter { .. })),
        "the stale PUT is refused and the pool looks again soon: {raced:?}"
    );
    assert_eq!(
        lock(&state)
            .get(&set_id())
            .map(|s| s["sku"]["capacity"].clone()),
        Some(json!(5)),
        "the autoscaler's capacity stands"
    );
    // The next pass reads 5 and puts the model at 5.
    let found = look(&actuator, &autoscaled).await;
    let report = actuator.update(&autoscaled, found, Some(bootstrap())).await;
    assert_eq!(report.map(|r| r.capacity).ok(), Some(5));
    let st = lock(&state);
    let body = st.get(&set_id()).cloned().unwrap_or_default();
    assert_eq!(body["tags"][REVISION_TAG], "r2");
    assert_eq!(body["sku"]["capacity"], 5);
    assert_eq!(
        st.if_match.len(),
        2,
        "every PUT of the existing scale set is conditional"
    );
}

/// `scope` for a `MachinePool` whose `spec.failureDomains` are `zones`.
fn zoned(
    scope: PoolScope<AzureMachinePool, AzureCluster>,
    zones: &[&str],
) -> PoolScope<AzureMachinePool, AzureCluster> {
    let mut machine_pool = (*scope.machine_pool).clone();
    machine_pool.spec.failure_domains = zones.iter().map(|z| (*z).to_string()).collect();
    PoolScope {
        machine_pool: Arc::new(machine_pool),
        ..scope
    }
}

#[tokio::test]
async fn a_scale_set_spreads_over_the_pools_failure_domains_chosen_when_it_is_made() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    let first = zoned(scope(2, &[], "r1"), &["2", "1", "2"]);
    let made = actuator.create(&first, &bootstrap()).await;
    let condition = |report: &ScaleSetReport| {
        report
            .conditions
            .iter()
            .find(|c| c.type_ == FAILURE_DOMAINS_APPLIED)
            .map(|c| (c.status, c.reason.clone()))
    };
    assert_eq!(
        made.as_ref().ok().and_then(condition),
        Some((ConditionStatus::True, "Applied".to_string())),
        "{made:?}"
    );
    let body = lock(&state).get(&set_id()).cloned().unwrap_or_default();
    assert_eq!(body["zones"], json!(["1", "2"]));

    // The failure domains changed, and a new revision is put: the zones stay, and the change is
    // reported.
    let moved = zoned(scope(2, &[], "r2"), &["3"]);
    let found = look(&actuator, &moved).await;
    let report = actuator.update(&moved, found, Some(bootstrap())).await;
    let body = lock(&state).get(&set_id()).cloned().unwrap_or_default();
    assert_eq!(body["tags"][REVISION_TAG], "r2", "the model was put");
    assert_eq!(body["zones"], json!(["1", "2"]), "its zones kept");
    let reported = report.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        condition(&reported),
        Some((ConditionStatus::False, "ZonesImmutable".to_string()))
    );
    let message = reported
        .conditions
        .iter()
        .find(|c| c.type_ == FAILURE_DOMAINS_APPLIED)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("1, 2") && message.contains('3'),
        "{message}"
    );

    // A regional pool stays regional.
    let (arm, state) = fake();
    let actuator = self::actuator(arm);
    let regional = actuator.create(&scope(1, &[], "r1"), &bootstrap()).await;
    assert_eq!(
        regional.as_ref().ok().and_then(condition),
        Some((ConditionStatus::True, "Applied".to_string()))
    );
    let body = lock(&state).get(&set_id()).cloned().unwrap_or_default();
    assert!(body.get("zones").is_none(), "{body}");
}
