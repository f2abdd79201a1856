//! The model checker itself: Azure's own models (the official Python SDKs, `cargo xtask
//! azure-models`) accept well-formed ARM bodies of the resources the provider uses, and refuse a
//! deliberately malformed request — an unknown property, a read-only one sent, a wrong type, a
//! value outside the enum, a required one missing — naming each problem's path; a response with
//! a property ARM does not have is refused too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::model_checker::{Direction, ModelChecker};
use serde_json::json;

#[tokio::test]
async fn well_formed_bodies_pass_and_a_malformed_request_is_refused_naming_each_problem() {
    let checker = ModelChecker::start();
    let nic = "/subscriptions/5b3ab0a0-7f4c-4b4e-9d8f-1c2d3e4f5a6b/resourceGroups/demo/providers/Microsoft.Network/networkInterfaces/demo-md-0-abc-nic";
    let vm = json!({
        "location": "westeurope",
        "tags": {"sigs.k8s.io_cluster-api-provider-azure_cluster_demo": "owned"},
        "zones": ["1"],
        "properties": {
            "hardwareProfile": {"vmSize": "Standard_D2s_v3"},
            "storageProfile": {
                "imageReference": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts",
                                   "sku": "server", "version": "latest"},
                "osDisk": {"name": "demo-md-0-abc_OSDisk", "createOption": "FromImage",
                           "deleteOption": "Delete", "diskSizeGB": 128,
                           "managedDisk": {"storageAccountType": "Premium_LRS"}},
            },
            "osProfile": {
                "computerName": "demo-md-0-abc", "adminUsername": "capi",
                "customData": "I2Nsb3VkLWNvbmZpZwo=",
                "linuxConfiguration": {"disablePasswordAuthentication": true, "ssh": {
                    "publicKeys": [{"path": "/home/capi/.ssh/authorized_keys",
                                    "keyData": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA"}]}},
            },
            "networkProfile": {"networkInterfaces": [
                {"id": nic, "properties": {"primary": true, "deleteOption": "Delete"}}]},
        },
    });
    checker
        .check("compute:VirtualMachine", Direction::Request, &vm)
        .await
        .unwrap();
    checker
        .check(
            "resource:ResourceGroup",
            Direction::Response,
            &json!({"id": "/subscriptions/5b3ab0a0-7f4c-4b4e-9d8f-1c2d3e4f5a6b/resourceGroups/demo",
                    "name": "demo", "type": "Microsoft.Resources/resourceGroups",
                    "location": "westeurope", "properties": {"provisioningState": "Succeeded"}}),
        )
        .await
        .unwrap();

    let mut malformed = vm.clone();
    let properties = &mut malformed["properties"];
    let hardware = properties
        .as_object_mut()
        .and_then(|p| p.remove("hardwareProfile"))
        .unwrap();
    properties["hardwareProfil"] = hardware;
    properties["provisioningState"] = json!("Succeeded");
    properties["storageProfile"]["osDisk"]["diskSizeGB"] = json!("128");
    properties["storageProfile"]["osDisk"]["createOption"] = json!("Sideways");
    if let Some(object) = malformed.as_object_mut() {
        object.remove("location");
    }
    let problems = checker
        .check("compute:VirtualMachine", Direction::Request, &malformed)
        .await
        .unwrap_err();
    for expected in [
        "$.properties.hardwareProfil: VirtualMachineProperties has no property",
        "$.properties.provisioningState: read-only",
        "$.properties.storageProfile.osDisk.diskSizeGB: expected an integer",
        "$.properties.storageProfile.osDisk.createOption: 'Sideways' is not one of",
        "$.location: required in VirtualMachine, missing",
    ] {
        assert!(
            problems.iter().any(|p| p.starts_with(expected)),
            "{expected:?} not among {problems:#?}"
        );
    }
    assert_eq!(problems.len(), 5, "{problems:#?}");

    let invented = json!({"id": "/subscriptions/x/resourceGroups/demo", "name": "demo",
                          "location": "westeurope", "etag": "W/\"1\""});
    let problems = checker
        .check("resource:ResourceGroup", Direction::Response, &invented)
        .await
        .unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("$.etag: ResourceGroup has no property")),
        "{problems:#?}"
    );
    assert_eq!(checker.checked(), 4);
}
