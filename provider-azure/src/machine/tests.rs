//! Every branch of the machine actuator over a mocked ARM (`crate::fake_arm`).

use base64::Engine;
use capi_core::api::{Cluster, Machine};
use capi_core::{ActuatorErrorKind, BootstrapData, BootstrapFormat, IdempotencyKey};
use serde_json::json;

use super::*;
use crate::api::AzureCluster;
use crate::arm::{ArmError, MockArm, Poll};
use crate::connector::MockConnector;
use crate::fake_arm::{SUB, azure_cluster, connector, fake, lock};

const VM: &str = "demo-control-plane-x7k2p";

fn infra(control_plane: bool, status: serde_json::Value) -> AzureMachine {
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": "demo"});
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
    }
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureMachine",
        "metadata": {"name": VM, "namespace": "ns", "labels": labels},
        "spec": {"vmSize": "Standard_D2s_v3", "osDisk": {"osType": "Linux", "diskSizeGB": 128},
                 "dataDisks": [{"nameSuffix": "etcddisk", "diskSizeGB": 256, "lun": 0}]},
        "status": status,
    }))
    .unwrap_or_default()
}

fn scope_of(infra: AzureMachine) -> MachineScope<AzureMachine, AzureCluster> {
    let mut machine = Machine::default();
    machine.metadata.uid = Some("uid-1".into());
    machine.spec.cluster_name = "demo".into();
    machine.spec.failure_domain = Some("2".into());
    machine.spec.version = Some("v1.33.1".into());
    let idempotency_key =
        IdempotencyKey::for_machine(&machine).unwrap_or_else(|_| panic!("the machine has a UID"));
    MachineScope {
        cluster: Arc::new(Cluster::default()),
        infra_cluster: Some(Arc::new(azure_cluster())),
        idempotency_key,
        machine: Arc::new(machine),
        infra_machine: Arc::new(infra),
    }
}

fn scope(control_plane: bool) -> MachineScope<AzureMachine, AzureCluster> {
    scope_of(infra(control_plane, json!({})))
}

fn bootstrap_data(value: &str) -> BootstrapData {
    BootstrapData::new(BootstrapFormat::CloudConfig, value)
}

fn bootstrap() -> BootstrapData {
    bootstrap_data("#cloud-config\nruncmd: []\n")
}

fn actuator(arm: MockArm) -> AzureMachineActuator {
    AzureMachineActuator::new(Arc::new(connector(arm)))
}

/// `body` with the cluster's tags, as the provider makes everything.
fn ours(mut body: serde_json::Value) -> serde_json::Value {
    let tags = crate::naming::ClusterNaming::new("ns", "demo").tags(
        crate::naming::Role::Node,
        "x",
        &Default::default(),
    );
    body["tags"] = serde_json::to_value(tags).unwrap_or_default();
    body
}

fn id(kind: ResourceType, name: &str) -> ResourceId {
    ResourceId::new(SUB, "demo", kind, name)
}

#[tokio::test]
async fn nothing_is_asked_of_azure_for_bootstrap_data_it_would_refuse() {
    let mut connector = MockConnector::new();
    connector.expect_connect().never();
    let actuator = AzureMachineActuator::new(Arc::new(connector));
    let huge = bootstrap_data(&"x".repeat(MAX_CUSTOM_DATA + 1));
    let error = actuator
        .create(&scope(false), &huge)
        .await
        .err()
        .unwrap_or_else(|| panic!("too large"));
    assert_eq!(error.reason(), "BootstrapDataTooLarge");
}

#[tokio::test]
async fn a_control_plane_vm_is_made_after_its_nic_in_the_backend_pool_and_its_operation_recorded() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    let nic = id(ResourceType::NetworkInterface, &format!("{VM}-nic"));
    let created = actuator.create(&scope(true), &bootstrap()).await;
    let reported = created.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        reported.provider_id,
        format!(
            "azure:///subscriptions/{SUB}/resourceGroups/demo/providers/Microsoft.Compute/virtualMachines/{VM}"
        )
    );
    let st = lock(&state);
    assert_eq!(st.calls("PUT"), vec![format!("{VM}-nic"), VM.to_string()]);
    let nic_body = st.get(&nic).cloned().unwrap_or_default();
    assert_eq!(
        nic_body["properties"]["ipConfigurations"][0]["properties"]["loadBalancerBackendAddressPools"]
            [0]["id"],
        format!(
            "/subscriptions/{SUB}/resourceGroups/demo/providers/Microsoft.Network/loadBalancers/demo-public-lb/backendAddressPools/demo-public-lb-backendPool"
        )
    );
    assert!(
        nic_body["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"]
            .as_str()
            .is_some_and(|s| s.ends_with("/subnets/demo-controlplane-subnet"))
    );
    let vm = st
        .get(&id(ResourceType::VirtualMachine, VM))
        .cloned()
        .unwrap_or_default();
    assert_eq!(vm["zones"], json!(["2"]));
    assert_eq!(
        vm["properties"]["osProfile"]["customData"],
        base64::engine::general_purpose::STANDARD.encode("#cloud-config\nruncmd: []\n")
    );
    assert_eq!(
        vm["properties"]["storageProfile"]["osDisk"]["name"],
        format!("{VM}_OSDisk")
    );
    assert_eq!(
        vm["properties"]["storageProfile"]["osDisk"]["deleteOption"],
        "Delete"
    );
    assert_eq!(
        vm["properties"]["storageProfile"]["dataDisks"][0]["name"],
        format!("{VM}_etcddisk")
    );
    assert_eq!(
        vm["properties"]["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"],
        "Delete"
    );
    assert_eq!(
        vm["properties"]["storageProfile"]["imageReference"]["communityGalleryImageId"],
        format!("/CommunityGalleries/{REFERENCE_GALLERY}/Images/{REFERENCE_IMAGE}/Versions/1.33.1")
    );
}

#[tokio::test]
async fn a_vm_still_being_created_is_provisioning_and_its_operation_is_kept() {
    let (arm, state) = fake();
    {
        let mut st = lock(&state);
        st.put_state = "Creating".into();
        st.slow_kind = Some(ResourceType::VirtualMachine);
    }
    let actuator = actuator(arm);
    let reported = actuator
        .create(&scope(false), &bootstrap())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(reported.state, capi_core::InstanceState::Provisioning);
    let operations = &reported.provider_status.fields()["longRunningOperationStates"];
    assert_eq!(operations[0]["serviceName"], "virtualmachine");
    assert_eq!(operations[0]["type"], "PUT");
    assert_eq!(reported.provider_status.fields()["vmState"], "Creating");
    assert_eq!(
        lock(&state).calls("PUT"),
        vec![format!("{VM}-nic"), VM.to_string()]
    );

    // The next reconcile — this manager or a restarted one — reads the recorded operation.
    let status = serde_json::Value::Object(reported.provider_status.fields().clone());
    let found = actuator
        .exists(&scope_of(infra(false, status)))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("the VM exists"))
        .reported;
    assert_eq!(found.state, capi_core::InstanceState::Provisioning);
    assert_eq!(
        found.provider_status.fields()["longRunningOperationStates"][0]["name"],
        VM
    );
}

#[tokio::test]
async fn a_nic_still_being_made_is_waited_for_before_the_vm() {
    let (arm, state) = fake();
    lock(&state).put_state = "Updating".into();
    let error = actuator(arm)
        .create(&scope(false), &bootstrap())
        .await
        .err()
        .unwrap_or_else(|| panic!("the NIC is being made"));
    assert_eq!(error.reason(), "WaitingForNetworkInterface");
    assert_eq!(lock(&state).calls("PUT"), vec![format!("{VM}-nic")]);
}

#[tokio::test]
async fn a_running_vm_is_reported_with_its_addresses_and_zone() {
    let (arm, state) = fake();
    {
        let mut st = lock(&state);
        st.insert(
            &id(ResourceType::VirtualMachine, VM),
            ours(
                json!({"zones": ["2"], "properties": {"provisioningState": "Succeeded",
                   "hardwareProfile": {"vmSize": "Standard_D2s_v3"}}}),
            ),
        );
        st.insert(
            &id(ResourceType::NetworkInterface, &format!("{VM}-nic")),
            ours(
                json!({"properties": {"ipConfigurations": [{"name": "pipConfig",
                   "properties": {"privateIPAddress": "10.1.0.5"}}]}}),
            ),
        );
    }
    let actuator = actuator(arm);
    let found = actuator
        .exists(&scope(false))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("found"));
    let reported = &found.reported;
    assert_eq!(reported.state, capi_core::InstanceState::Running);
    assert_eq!(reported.failure_domain.as_deref(), Some("2"));
    assert!(
        reported
            .addresses
            .iter()
            .any(|a| a.address == "10.1.0.5" && a.type_ == MachineAddressType::InternalIp)
    );
    assert_eq!(reported.provider_status.fields()["vmState"], "Succeeded");
    // update: the image differs (none is recorded), so it is reported as immutable.
    let outcome = actuator
        .update(&scope(false), found)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        outcome
            .immutable_changes
            .iter()
            .any(|c| c.field == "spec.image")
    );
    assert!(
        !outcome
            .immutable_changes
            .iter()
            .any(|c| c.field == "spec.vmSize")
    );
}

#[tokio::test]
async fn a_running_machine_is_read_once_by_exists_and_update_asks_arm_nothing() {
    let (arm, state) = fake();
    let actuator = actuator(arm);
    let created = actuator
        .create(&scope(true), &bootstrap())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(created.state, capi_core::InstanceState::Running);
    let status = serde_json::Value::Object(created.provider_status.fields().clone());
    let machine = scope_of(infra(true, status));
    let start = lock(&state).calls.len();
    let found = actuator
        .exists(&machine)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("found"));
    let read = lock(&state).calls.len();
    assert_eq!(
        lock(&state).calls[start..],
        [
            ("GET".to_string(), VM.to_string()),
            ("GET".to_string(), format!("{VM}-nic"))
        ],
        "exists reads the VM and its NIC, once each"
    );
    let outcome = actuator
        .update(&machine, found)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.instance.state, capi_core::InstanceState::Running);
    assert!(
        outcome.immutable_changes.is_empty(),
        "{:?}",
        outcome.immutable_changes
    );
    assert!(
        outcome
            .instance
            .addresses
            .iter()
            .any(|a| a.type_ == MachineAddressType::InternalDns && a.address == VM)
    );
    let st = lock(&state);
    assert!(
        st.calls[read..].is_empty(),
        "update converges from what exists read; it asked ARM {:?}",
        &st.calls[read..]
    );
}

#[tokio::test]
async fn a_vm_made_between_the_poll_and_the_read_is_running_with_no_operation_recorded() {
    let (arm, state) = fake();
    // The recorded operation is polled first and still under way (the fake's answer); the VM,
    // read after it, has been made meanwhile.
    lock(&state).insert(
        &id(ResourceType::VirtualMachine, VM),
        ours(json!({"properties": {"provisioningState": "Succeeded",
                    "hardwareProfile": {"vmSize": "Standard_D2s_v3"}}})),
    );
    let recorded = json!({"longRunningOperationStates": [{
        "type": "PUT", "serviceName": "virtualmachine", "name": VM,
        "pollingURL": "https://arm.test/operations/vm", "startedAt": jiff::Timestamp::now().to_string(),
    }]});
    let actuator = actuator(arm);
    let machine = scope_of(infra(false, recorded));
    let found = actuator
        .exists(&machine)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("found"));
    assert_eq!(found.reported.state, capi_core::InstanceState::Running);
    assert_eq!(
        found.reported.provider_status.fields()["longRunningOperationStates"],
        json!([]),
        "Running, and the operation still recorded in the same status write"
    );
    let outcome = actuator
        .update(&machine, found)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.instance.state, capi_core::InstanceState::Running);
    assert_eq!(
        outcome.instance.provider_status.fields()["longRunningOperationStates"],
        json!([])
    );
}

#[tokio::test]
async fn nothing_found_is_nothing_and_exists_never_writes() {
    let (arm, state) = fake();
    let found = actuator(arm)
        .exists(&scope(false))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(found.is_none());
    assert!(lock(&state).calls("PUT").is_empty());
    assert!(lock(&state).calls("DELETE").is_empty());
}

#[tokio::test]
async fn a_vm_whose_provisioning_failed_is_put_again() {
    let (arm, state) = fake();
    {
        let mut st = lock(&state);
        st.insert(
            &id(ResourceType::VirtualMachine, VM),
            ours(json!({"properties": {"provisioningState": "Failed"}})),
        );
        st.poll = Some(Poll::Failed(ArmError::new(
            Some(200),
            "OSProvisioningTimedOut",
            "the OS did not report ready",
        )));
    }
    let recorded = json!({"longRunningOperationStates": [{
        "type": "PUT", "serviceName": "virtualmachine", "name": VM,
        "pollingURL": "https://arm.test/operations/vm", "startedAt": jiff::Timestamp::now().to_string(),
    }]});
    let actuator = actuator(arm);
    let machine = scope_of(infra(false, recorded));
    let found = actuator
        .exists(&machine)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("found"));
    assert_eq!(found.reported.state, capi_core::InstanceState::Provisioning);
    assert!(
        found.reported.conditions.iter().any(
            |c| c.reason == "VMProvisionFailed" && c.message.contains("OSProvisioningTimedOut")
        )
    );
    {
        let mut st = lock(&state);
        st.put_state = "Updating".into();
        st.slow_kind = Some(ResourceType::VirtualMachine);
    }
    let outcome = actuator
        .update(&machine, found)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(lock(&state).calls("PUT").contains(&VM.to_string()));
    assert_eq!(
        outcome.instance.state,
        capi_core::InstanceState::Provisioning
    );
    let put_again = lock(&state)
        .get(&id(ResourceType::VirtualMachine, VM))
        .cloned()
        .unwrap_or_default();
    assert!(
        put_again["properties"]["osProfile"]
            .get("customData")
            .is_none(),
        "put again without customData: ARM keeps what the VM was created with"
    );
}

#[tokio::test]
async fn quota_and_oversized_bootstrap_data_are_told_apart() {
    let (arm, state) = fake();
    lock(&state).errors.insert(
        (
            "PUT".into(),
            id(ResourceType::VirtualMachine, VM)
                .to_string()
                .to_lowercase(),
        ),
        ArmError::new(
            Some(409),
            "OperationNotAllowed",
            "exceeding approved standardDSv3Family Cores quota",
        ),
    );
    let error = actuator(arm)
        .create(&scope(false), &bootstrap())
        .await
        .err()
        .unwrap_or_else(|| panic!("quota"));
    assert_eq!(error.kind(), ActuatorErrorKind::Transient);
    assert_eq!(error.reason(), "QuotaExceeded");

    let (arm, _) = fake();
    let huge = bootstrap_data(&"x".repeat(MAX_CUSTOM_DATA + 1));
    let error = actuator(arm)
        .create(&scope(false), &huge)
        .await
        .err()
        .unwrap_or_else(|| panic!("too large"));
    assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
}

#[tokio::test]
async fn deletion_removes_the_vm_then_whatever_it_left_behind() {
    let (arm, state) = fake();
    {
        let mut st = lock(&state);
        st.slow_delete = true;
        st.insert(
            &id(ResourceType::VirtualMachine, VM),
            ours(json!({"properties": {"provisioningState": "Succeeded"}})),
        );
        st.insert(
            &id(ResourceType::NetworkInterface, &format!("{VM}-nic")),
            ours(json!({"properties": {}})),
        );
        st.insert(
            &id(ResourceType::Disk, &format!("{VM}_OSDisk")),
            json!({"properties": {}}),
        );
        st.insert(
            &id(ResourceType::Disk, &format!("{VM}_etcddisk")),
            json!({"properties": {}}),
        );
    }
    let actuator = actuator(arm);
    let error = actuator
        .delete(&scope(false))
        .await
        .err()
        .unwrap_or_else(|| panic!("deleting"));
    assert_eq!(error.kind(), ActuatorErrorKind::RequeueAfter);
    assert_eq!(
        lock(&state).calls("DELETE"),
        vec![VM.to_string()],
        "the VM first, alone"
    );
    // Still deleting: not asked again.
    let _ = actuator.delete(&scope(false)).await;
    assert_eq!(lock(&state).calls("DELETE").len(), 1);
    // The VM is gone; ARM left the NIC and the disks.
    {
        let mut st = lock(&state);
        st.resources.remove(
            &id(ResourceType::VirtualMachine, VM)
                .to_string()
                .to_lowercase(),
        );
        st.slow_delete = false;
    }
    actuator
        .delete(&scope(false))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let st = lock(&state);
    assert!(st.resources.is_empty(), "left: {:?}", st.resources.keys());
    assert_eq!(
        st.calls("DELETE"),
        vec![
            VM.to_string(),
            format!("{VM}-nic"),
            format!("{VM}_OSDisk"),
            format!("{VM}_etcddisk")
        ]
    );
}

#[tokio::test]
async fn a_vm_of_the_machines_name_that_is_not_the_clusters_is_never_taken_over() {
    let (arm, state) = fake();
    {
        let mut st = lock(&state);
        st.insert(
            &id(ResourceType::VirtualMachine, VM),
            json!({"tags": {"owner": "someone"}, "properties": {"provisioningState": "Succeeded"}}),
        );
        st.insert(
            &id(ResourceType::Disk, &format!("{VM}_OSDisk")),
            json!({"properties": {}}),
        );
        st.insert(
            &id(ResourceType::NetworkInterface, &format!("{VM}-nic")),
            json!({"tags": {"owner": "someone"}, "properties": {}}),
        );
    }
    let actuator = actuator(arm);
    let error = actuator
        .exists(&scope(false))
        .await
        .err()
        .unwrap_or_else(|| panic!("refused"));
    assert_eq!(error.reason(), "VMNotOwned");
    actuator
        .delete(&scope(false))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        lock(&state).calls("DELETE").is_empty(),
        "nothing of another's deleted"
    );
    // Nor is a NIC of the machine's name that is another's put over.
    lock(&state).resources.remove(
        &id(ResourceType::VirtualMachine, VM)
            .to_string()
            .to_lowercase(),
    );
    let error = actuator
        .create(&scope(false), &bootstrap())
        .await
        .err()
        .unwrap_or_else(|| panic!("refused"));
    assert_eq!(error.reason(), "ResourceNotOwned");
    assert!(lock(&state).calls("PUT").is_empty());
}

#[test]
fn the_provider_id_has_the_resource_group_in_lower_case_as_the_cloud_provider_sets_it() {
    let vm = ResourceId::new(SUB, "MyRG", ResourceType::VirtualMachine, "m-0");
    assert_eq!(
        provider_id(&vm),
        format!(
            "azure:///subscriptions/{SUB}/resourceGroups/myrg/providers/Microsoft.Compute/virtualMachines/m-0"
        )
    );
}
