//! Bad input the Azure schemas can judge: every constraint of `AzureCluster`,
//! `AzureClusterTemplate`, `AzureMachine`, `AzureMachineTemplate`, `AzureMachinePool` and `AzureClusterIdentity` gets proptest-generated edits
//! that break it, sent to a real API server, which must refuse each naming the field
//! (`capi_testing::schema_violations`). The base objects set every field, so that every
//! constraint has something to break.
//!
//! Not covered here: the CEL rules (one kind of image, one kind of source, one subnet per role,
//! unique data disk LUNs, tag names: `api_server.rs` sends each by hand), and what only the
//! controller can judge (an unknown VM size or image, missing credentials).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_testing::TestEnv;
use capi_testing::schema_violations::check_crds_refuse_all;
use serde_json::{Value, json};

/// An `AzureMachine` spec with every field set.
fn machine_spec() -> Value {
    json!({
        "providerID": "azure:///subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/demo/providers/Microsoft.Compute/virtualMachines/demo-md-0-abc",
        "vmSize": "Standard_D2s_v3",
        "failureDomain": "1",
        "image": {"marketplace": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts",
                                   "sku": "server", "version": "latest", "thirdPartyImage": false}},
        "osDisk": {"osType": "Linux", "diskSizeGB": 128,
                   "managedDisk": {"storageAccountType": "Premium_LRS"}, "cachingType": "ReadWrite"},
        "dataDisks": [{"nameSuffix": "etcddisk", "diskSizeGB": 256, "lun": 0,
                       "managedDisk": {"storageAccountType": "Premium_LRS"}, "cachingType": "ReadWrite"}],
        "sshPublicKey": "c3NoLWVkMjU1MTkgQUFBQQ==",
        "additionalTags": {"team": "a"},
        "allocatePublicIP": true,
        "enableIPForwarding": true,
        "spotVMOptions": {"maxPrice": "0.05", "evictionPolicy": "Delete"},
    })
}

/// An `AzureCluster` spec with every field set.
fn cluster_spec() -> Value {
    let rule = json!({"name": "allow_bgp", "description": "bgp", "protocol": "Tcp",
                      "direction": "Inbound", "priority": 2300, "sourcePorts": "*",
                      "destinationPorts": "179", "source": "VirtualNetwork",
                      "destination": "*", "action": "Allow"});
    json!({
        "subscriptionID": "00000000-0000-0000-0000-000000000000",
        "location": "westeurope",
        "resourceGroup": "demo",
        "networkSpec": {
            "vnet": {"resourceGroup": "demo", "name": "demo-vnet", "cidrBlocks": ["10.0.0.0/8"],
                     "tags": {"team": "a"}},
            "subnets": [{"name": "demo-node-subnet", "role": "node", "cidrBlocks": ["10.1.0.0/16"],
                         "securityGroup": {"name": "demo-node-nsg", "securityRules": [rule],
                                           "tags": {"team": "a"}}}],
            "apiServerLB": {"name": "demo-public-lb",
                            "frontendIPs": [{"name": "demo-public-lb-frontEnd",
                                             "publicIP": {"name": "pip-demo-apiserver",
                                                          "dnsName": "demo-a1b2c3d4.westeurope.cloudapp.azure.com"}}],
                            "backendPool": {"name": "demo-public-lb-backendPool"},
                            "type": "Public", "sku": "Standard", "idleTimeoutInMinutes": 4},
        },
        "identityRef": {"kind": "Secret", "name": "demo-azure-credentials"},
        "azureEnvironment": "AzurePublicCloud",
        "controlPlaneEndpoint": {"host": "demo-a1b2c3d4.westeurope.cloudapp.azure.com", "port": 6443},
        "additionalTags": {"team": "a"},
    })
}

/// A valid object of each kind with every field set: the base every edit starts from.
fn base(kind: &str) -> Value {
    let spec = match kind {
        "AzureCluster" => cluster_spec(),
        "AzureClusterTemplate" => {
            json!({"template": {"metadata": {"labels": {"a": "b"}}, "spec": cluster_spec()}})
        }
        "AzureMachine" => machine_spec(),
        "AzureMachineTemplate" => {
            json!({"template": {"metadata": {"labels": {"a": "b"}}, "spec": machine_spec()}})
        }
        "AzureMachinePool" => json!({
            "providerID": "azure:///subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/demo/providers/Microsoft.Compute/virtualMachineScaleSets/capi-x",
            "providerIDList": ["azure:///subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/demo/providers/Microsoft.Compute/virtualMachines/capi-x_0a1b2c3d"],
            "location": "westeurope",
            "template": {
                "vmSize": "Standard_D2s_v3",
                "image": {"marketplace": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts",
                                           "sku": "server", "version": "latest", "thirdPartyImage": false}},
                "osDisk": {"osType": "Linux", "diskSizeGB": 128,
                           "managedDisk": {"storageAccountType": "Premium_LRS"}, "cachingType": "ReadWrite"},
                "sshPublicKey": "c3NoLWVkMjU1MTkgQUFBQQ==",
            },
            "additionalTags": {"team": "a"},
            "orchestrationMode": "Flexible",
        }),
        "AzureClusterIdentity" => json!({
            "type": "ServicePrincipal",
            "clientID": "0b3c6e4a-1f2d-4c5b-8a9e-7d6c5b4a3f2e",
            "tenantID": "72f988bf-86f1-41af-91ab-2d7cd011db47",
            "clientSecret": {"name": "azure-sp", "namespace": "ops"},
            "allowedNamespaces": {"list": ["team-a"], "selector": {"matchLabels": {"team": "a"}}},
        }),
        other => panic!("no base object for {other}"),
    };
    json!({"metadata": {"name": "bad-input"}, "spec": spec})
}

#[tokio::test]
async fn the_api_server_refuses_what_the_azure_schemas_forbid_and_names_the_field() {
    let crds = provider_azure::api::crds();
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    if let Err(misses) = check_crds_refuse_all(&env.client(), &ns, &crds, base).await {
        panic!("{misses}");
    }
}
