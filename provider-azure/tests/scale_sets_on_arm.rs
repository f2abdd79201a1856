//! Flexible scale sets on the ARM test server, through the provider's own ARM client: a scale set
//! makes as many VMs as its capacity, each with its NIC and OS disk and none of the set's tags,
//! listed by the set's filter page by page; a VM keeps the `userData` it was made with, answered
//! only when expanded; named VMs are deleted and the capacity lowered for good; a lower capacity
//! takes the newest VMs; overlapping operations are refused; a deleted set leaves nothing
//! behind. Every body is checked against Azure's models.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use common::arm_client;
use common::arm_server::{ArmServer, PAGE_SIZE, Target};
use common::model_checker::ModelChecker;
use provider_azure::arm::{
    Arm, ArmClient, Deletion, ErrorClass, PendingOperation, Poll, ResourceId, ResourceType,
};
use serde_json::{Value, json};

const SUB: &str = "7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c";
const GROUP: &str = "rg-pools";

struct Setup {
    server: Arc<ArmServer>,
    client: Arc<ArmClient>,
}

fn group() -> ResourceId {
    ResourceId::resource_group(SUB, GROUP)
}

fn subnet() -> ResourceId {
    ResourceId::new(SUB, GROUP, ResourceType::VirtualNetwork, "pools-vnet")
        .child(ResourceType::Subnet, "node-subnet")
}

fn scale_set(name: &str) -> ResourceId {
    ResourceId::new(SUB, GROUP, ResourceType::VirtualMachineScaleSet, name)
}

fn vm(name: &str) -> ResourceId {
    ResourceId::new(SUB, GROUP, ResourceType::VirtualMachine, name)
}

fn base64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// What a scale set is: a Flexible set of `capacity` VMs of `size` on the node subnet, its
/// model's `userData` and `customData` the `revision`.
struct Model {
    capacity: u64,
    size: &'static str,
    revision: &'static str,
}

impl Model {
    fn of(capacity: u64, revision: &'static str) -> Self {
        Self {
            capacity,
            size: "Standard_D2s_v3",
            revision,
        }
    }

    fn body(&self) -> Value {
        json!({
            "location": "westeurope",
            "tags": {"capi-rs.dev_cluster": "ns/pools"},
            "sku": {"name": self.size, "capacity": self.capacity},
            "properties": {
                "orchestrationMode": "Flexible",
                "platformFaultDomainCount": 1,
                "virtualMachineProfile": {
                    "osProfile": {
                        "computerNamePrefix": "pool",
                        "adminUsername": "capi",
                        "customData": base64(&format!("#cloud-config\n# {}\n", self.revision)),
                        "linuxConfiguration": {
                            "disablePasswordAuthentication": true,
                            "ssh": {"publicKeys": [{
                                "path": "/home/capi/.ssh/authorized_keys",
                                "keyData": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHn5 capi"
                            }]}
                        }
                    },
                    "storageProfile": {
                        "imageReference": {
                            "publisher": "Canonical", "offer": "ubuntu-24_04-lts",
                            "sku": "server", "version": "latest"
                        },
                        "osDisk": {
                            "createOption": "FromImage", "deleteOption": "Delete",
                            "diskSizeGB": 30, "osType": "Linux",
                            "managedDisk": {"storageAccountType": "Premium_LRS"}
                        }
                    },
                    "networkProfile": {
                        "networkApiVersion": "2020-11-01",
                        "networkInterfaceConfigurations": [{
                            "name": "pool-nic",
                            "properties": {
                                "primary": true,
                                "deleteOption": "Delete",
                                "ipConfigurations": [{
                                    "name": "ipconfig1",
                                    "properties": {"subnet": {"id": subnet().to_string()}}
                                }]
                            }
                        }]
                    },
                    "userData": base64(self.revision)
                }
            }
        })
    }
}

/// A resource group with a network and subnet, on a fresh server.
async fn setup() -> Setup {
    let server = ArmServer::start(Arc::new(ModelChecker::start())).await;
    server.faults(|f| f.operation_time = Duration::from_millis(150));
    let client = arm_client(&server);
    client
        .put(&group(), &json!({"location": "westeurope"}))
        .await
        .unwrap();
    let vnet = ResourceId::new(SUB, GROUP, ResourceType::VirtualNetwork, "pools-vnet");
    client
        .put(
            &vnet,
            &json!({"location": "westeurope",
                    "properties": {"addressSpace": {"addressPrefixes": ["10.0.0.0/8"]}}}),
        )
        .await
        .unwrap();
    client
        .put(
            &subnet(),
            &json!({"properties": {"addressPrefixes": ["10.1.0.0/16"]}}),
        )
        .await
        .unwrap();
    Setup { server, client }
}

impl Setup {
    /// PUTs scale set `name` as `model` says; returns the operation ARM started.
    async fn put(&self, name: &str, model: &Model) -> PendingOperation {
        self.put_body(name, model.body()).await
    }

    async fn put_body(&self, name: &str, body: Value) -> PendingOperation {
        let accepted = self.client.put(&scale_set(name), &body).await.unwrap();
        accepted
            .operation
            .expect("a scale set's PUT is an operation")
    }

    async fn until_done(&self, operation: &PendingOperation) {
        for _ in 0..100 {
            match self.client.poll(&operation.polling_url).await.unwrap() {
                Poll::InProgress { .. } => tokio::time::sleep(Duration::from_millis(50)).await,
                Poll::Succeeded => return,
                other => panic!("the operation ended {other:?}"),
            }
        }
        panic!("the operation never ended");
    }

    /// The VMs of scale set `name`, as its filter lists them.
    async fn members(&self, name: &str) -> Vec<Value> {
        let filter = format!("'virtualMachineScaleSet/id' eq '{}'", scale_set(name));
        self.client
            .list(&group(), ResourceType::VirtualMachine, Some(filter))
            .await
            .unwrap()
    }

    /// The names of scale set `name`'s VMs with their provisioning states.
    async fn states(&self, name: &str) -> Vec<(String, String)> {
        let mut states: Vec<(String, String)> = self
            .members(name)
            .await
            .iter()
            .map(|vm| {
                (
                    vm["name"].as_str().unwrap().to_string(),
                    vm["properties"]["provisioningState"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect();
        states.sort();
        states
    }

    async fn capacity(&self, name: &str) -> u64 {
        let set = self.client.get(&scale_set(name)).await.unwrap().unwrap();
        set["sku"]["capacity"].as_u64().unwrap()
    }

    async fn delete_instances(&self, set: &str, names: &[&str]) -> PendingOperation {
        self.client
            .post(&scale_set(set), "delete", &json!({"instanceIds": names}))
            .await
            .unwrap()
            .expect("deleting VMs is an operation")
    }

    fn count(&self, kind: ResourceType) -> usize {
        self.server.world.lock().unwrap().of_kind(kind).len()
    }
}

/// `<set>_<8 lower-case hex>`.
fn is_named_for(set: &str, vm: &str) -> bool {
    vm.strip_prefix(&format!("{set}_")).is_some_and(|suffix| {
        suffix.len() == 8
            && suffix
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    })
}

fn names(vms: &[Value]) -> BTreeSet<String> {
    vms.iter()
        .map(|vm| vm["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_scale_set_of_three_makes_three_vms_that_its_filter_lists_and_no_other_sets() {
    let setup = setup().await;
    setup.server.faults(|f| {
        f.slow.push((
            Target::of("PUT", ResourceType::VirtualMachineScaleSet),
            Duration::from_secs(1),
        ));
    });
    let accepted = setup
        .client
        .put(&scale_set("pool-a"), &Model::of(3, "r1").body())
        .await
        .unwrap();
    assert_eq!(accepted.body["properties"]["provisioningState"], "Creating");
    let made_a = accepted.operation.unwrap();
    let mut zonal = Model::of(2, "r1").body();
    zonal["zones"] = json!(["1", "2"]);
    let made_b = setup.put_body("pool-b", zonal).await;

    let creating = setup.states("pool-a").await;
    assert_eq!(creating.len(), 3, "{creating:?}");
    assert!(creating.iter().all(|(_, state)| state == "Creating"));
    setup.until_done(&made_a).await;
    setup.until_done(&made_b).await;

    let vms = setup.members("pool-a").await;
    assert_eq!(vms.len(), 3);
    let set = setup
        .client
        .get(&scale_set("pool-a"))
        .await
        .unwrap()
        .unwrap();
    for listed in &vms {
        let name = listed["name"].as_str().unwrap();
        assert!(is_named_for("pool-a", name), "{name}");
        let read = setup.client.get(&vm(name)).await.unwrap().unwrap();
        assert_eq!(&read, listed, "listed as GET answers it");
        let properties = &read["properties"];
        assert_eq!(properties["provisioningState"], "Succeeded");
        assert!(
            properties["virtualMachineScaleSet"]["id"]
                .as_str()
                .unwrap()
                .eq_ignore_ascii_case(&scale_set("pool-a").to_string())
        );
        assert_eq!(properties["hardwareProfile"]["vmSize"], "Standard_D2s_v3");
        assert_eq!(
            properties["storageProfile"]["imageReference"]["offer"],
            "ubuntu-24_04-lts"
        );
        let computer = properties["osProfile"]["computerName"].as_str().unwrap();
        assert!(
            computer.len() == 10 && computer.starts_with("pool"),
            "{computer}"
        );
        assert_eq!(properties["osProfile"]["adminUsername"], "capi");
        assert!(properties["osProfile"].get("customData").is_none());
        assert!(properties.get("userData").is_none());
        assert!(properties["timeCreated"].is_string());
        assert!(read.get("tags").is_none(), "a set's tags are not its VMs'");
        assert!(read.get("zones").is_none(), "a regional set's VMs");

        let nic_ref = &properties["networkProfile"]["networkInterfaces"][0];
        assert_eq!(nic_ref["properties"]["deleteOption"], "Delete");
        let nic_id = ResourceId::parse(nic_ref["id"].as_str().unwrap()).unwrap();
        assert_eq!(nic_id.name, format!("{name}-nic"));
        let nic = setup.client.get(&nic_id).await.unwrap().unwrap();
        assert_eq!(nic["properties"]["virtualMachine"]["id"], read["id"]);
        let address = &nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAddress"];
        assert!(address.as_str().is_some_and(|a| a.starts_with("10.")));

        let disk_id = ResourceId::parse(
            properties["storageProfile"]["osDisk"]["managedDisk"]["id"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        let suffix = disk_id
            .name
            .strip_prefix(&format!("{name}_OsDisk_1_"))
            .unwrap();
        assert_eq!(suffix.len(), 32, "{}", disk_id.name);
        let disk = setup.client.get(&disk_id).await.unwrap().unwrap();
        assert_eq!(disk["managedBy"], read["id"]);
    }

    assert_eq!(set["sku"]["capacity"], 3);
    let properties = &set["properties"];
    assert_eq!(properties["provisioningState"], "Succeeded");
    assert_eq!(properties["orchestrationMode"], "Flexible");
    assert!(properties["uniqueId"].is_string());
    assert!(properties["timeCreated"].is_string());
    assert!(
        properties["virtualMachineProfile"]["osProfile"]
            .get("customData")
            .is_none()
    );
    assert!(
        properties["virtualMachineProfile"]
            .get("userData")
            .is_none()
    );

    let other = setup.members("pool-b").await;
    assert_eq!(other.len(), 2);
    assert!(names(&other).is_disjoint(&names(&vms)));
    let zones: BTreeSet<&str> = other
        .iter()
        .map(|vm| vm["zones"][0].as_str().unwrap())
        .collect();
    assert_eq!(
        zones,
        BTreeSet::from(["1", "2"]),
        "spread over the set's zones"
    );
    let everything = setup
        .client
        .list(&group(), ResourceType::VirtualMachine, None)
        .await
        .unwrap();
    assert_eq!(everything.len(), 5);
    let sets = setup
        .client
        .list(&group(), ResourceType::VirtualMachineScaleSet, None)
        .await
        .unwrap();
    assert_eq!(
        names(&sets),
        BTreeSet::from(["pool-a".into(), "pool-b".into()])
    );

    let refused = setup
        .client
        .list(
            &group(),
            ResourceType::VirtualMachine,
            Some("location eq 'westeurope'".into()),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.status, Some(400));
    assert_eq!(refused.code, "InvalidParameter");
    setup.server.assert_clean();
}

#[tokio::test]
async fn a_listing_longer_than_a_page_is_followed_to_its_end() {
    let setup = setup().await;
    let big = setup.put("big", &Model::of(120, "r1")).await;
    let small = setup.put("small", &Model::of(2, "r1")).await;
    setup.until_done(&big).await;
    setup.until_done(&small).await;

    let pages_read = |setup: &Setup| {
        setup
            .server
            .world
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|(method, path, _)| method == "GET" && path.ends_with("/virtualMachines"))
            .count()
    };
    let members = setup.members("big").await;
    assert_eq!(pages_read(&setup), 120_usize.div_ceil(PAGE_SIZE));
    assert_eq!(members.len(), 120);
    assert_eq!(names(&members).len(), 120, "no VM twice");
    assert!(
        members
            .iter()
            .all(|vm| vm["properties"]["provisioningState"] == "Succeeded")
    );
    let everything = setup
        .client
        .list(&group(), ResourceType::VirtualMachine, None)
        .await
        .unwrap();
    assert_eq!(names(&everything).len(), 122);
    assert_eq!(
        setup
            .server
            .world
            .lock()
            .unwrap()
            .count("GET", ResourceType::VirtualMachine),
        120_usize.div_ceil(PAGE_SIZE) + 122_usize.div_ceil(PAGE_SIZE)
    );
    setup.server.assert_clean();
}

#[tokio::test]
async fn user_data_is_answered_only_when_expanded_and_each_vm_keeps_the_model_it_was_made_from() {
    let setup = setup().await;
    let made = setup.put("pool", &Model::of(1, "revision-1")).await;
    setup.until_done(&made).await;
    let first = names(&setup.members("pool").await).pop_first().unwrap();

    let plain = setup.client.get(&vm(&first)).await.unwrap().unwrap();
    assert!(plain["properties"].get("userData").is_none());
    let expanded = setup
        .client
        .get_expanded(&vm(&first), "userData")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(expanded["properties"]["userData"], base64("revision-1"));
    let other = setup
        .client
        .get_expanded(&vm(&first), "instanceView")
        .await
        .unwrap()
        .unwrap();
    assert!(other["properties"].get("userData").is_none());
    let set = setup
        .client
        .get_expanded(&scale_set("pool"), "userData")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        set["properties"]["virtualMachineProfile"]["userData"],
        base64("revision-1")
    );

    // A new model: a second VM is made from it; the first is left as it was.
    let changed = setup
        .put(
            "pool",
            &Model {
                capacity: 2,
                size: "Standard_D4s_v3",
                revision: "revision-2",
            },
        )
        .await;
    setup.until_done(&changed).await;
    let mut both = names(&setup.members("pool").await);
    assert!(both.remove(&first));
    let second = both.pop_first().unwrap();
    for (name, revision, size) in [
        (&first, "revision-1", "Standard_D2s_v3"),
        (&second, "revision-2", "Standard_D4s_v3"),
    ] {
        let read = setup
            .client
            .get_expanded(&vm(name), "userData")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read["properties"]["userData"], base64(revision), "{name}");
        assert_eq!(read["properties"]["hardwareProfile"]["vmSize"], size);
        let booted = setup
            .server
            .world
            .lock()
            .unwrap()
            .custom_data(&vm(name).to_string())
            .unwrap();
        assert_eq!(booted, base64(&format!("#cloud-config\n# {revision}\n")));
    }
    let set = setup.client.get(&scale_set("pool")).await.unwrap().unwrap();
    assert!(
        set["properties"]["virtualMachineProfile"]
            .get("userData")
            .is_none()
    );
    let set = setup
        .client
        .get_expanded(&scale_set("pool"), "userData")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        set["properties"]["virtualMachineProfile"]["userData"],
        base64("revision-2")
    );
    setup.server.assert_clean();
}

#[tokio::test]
async fn deleting_named_vms_removes_exactly_those_and_lowers_the_capacity_for_good() {
    let setup = setup().await;
    let made = setup.put("pool", &Model::of(3, "r1")).await;
    let other = setup.put("other", &Model::of(1, "r1")).await;
    setup.until_done(&made).await;
    setup.until_done(&other).await;
    let vms: Vec<String> = names(&setup.members("pool").await).into_iter().collect();
    let stranger = names(&setup.members("other").await).pop_first().unwrap();

    setup.server.faults(|f| {
        f.slow.push((
            Target::of("POST", ResourceType::VirtualMachineScaleSet),
            Duration::from_secs(1),
        ));
    });
    let deleting = setup.delete_instances("pool", &[&vms[0], &vms[1]]).await;
    assert!(deleting.polling_url.starts_with(&setup.server.url));
    assert_eq!(setup.capacity("pool").await, 1, "lowered at once");
    let states = setup.states("pool").await;
    assert_eq!(
        states,
        vec![
            (vms[0].clone(), "Deleting".to_string()),
            (vms[1].clone(), "Deleting".to_string()),
            (vms[2].clone(), "Succeeded".to_string()),
        ]
    );
    setup.until_done(&deleting).await;
    assert_eq!(
        setup.states("pool").await,
        vec![(vms[2].clone(), "Succeeded".to_string())]
    );
    for gone in &vms[..2] {
        assert_eq!(setup.client.get(&vm(gone)).await.unwrap(), None);
        let nic = ResourceId::new(
            SUB,
            GROUP,
            ResourceType::NetworkInterface,
            &format!("{gone}-nic"),
        );
        assert_eq!(setup.client.get(&nic).await.unwrap(), None);
    }
    assert_eq!(setup.count(ResourceType::NetworkInterface), 2);
    assert_eq!(setup.count(ResourceType::Disk), 2, "the OS disks went too");

    // A name that is not one of the set's VMs: refused, nothing done.
    for names in [
        vec![vms[2].as_str(), "pool_0000beef"],
        vec![stranger.as_str()],
    ] {
        let refused = setup
            .client
            .post(&scale_set("pool"), "delete", &json!({"instanceIds": names}))
            .await
            .unwrap_err();
        assert_eq!(refused.status, Some(400));
        assert_eq!(refused.code, "InvalidParameter");
        assert!(refused.message.contains(names.last().unwrap()), "{refused}");
    }
    let unknown = setup
        .client
        .post(&scale_set("pool"), "reimageall", &json!({}))
        .await
        .unwrap_err();
    assert_eq!(unknown.status, Some(404));
    assert_eq!(setup.capacity("pool").await, 1);
    assert_eq!(setup.members("other").await.len(), 1);

    // Nothing is made to replace them, even once the server has had time to.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        setup.states("pool").await,
        vec![(vms[2].clone(), "Succeeded".to_string())]
    );
    assert_eq!(
        setup
            .server
            .world
            .lock()
            .unwrap()
            .count("DELETE", ResourceType::VirtualMachine),
        0
    );
    setup.server.assert_clean();
}

#[tokio::test]
async fn a_lower_capacity_deletes_the_newest_vms() {
    let setup = setup().await;
    let made = setup.put("pool", &Model::of(1, "r1")).await;
    setup.until_done(&made).await;
    let oldest = names(&setup.members("pool").await).pop_first().unwrap();
    let grown = setup.put("pool", &Model::of(3, "r1")).await;
    setup.until_done(&grown).await;
    assert_eq!(setup.members("pool").await.len(), 3);

    let shrunk = setup.put("pool", &Model::of(1, "r1")).await;
    let states = setup.states("pool").await;
    assert_eq!(states.len(), 3, "deleted VMs are listed until gone");
    for (name, state) in &states {
        let expected = if *name == oldest {
            "Succeeded"
        } else {
            "Deleting"
        };
        assert_eq!(state, expected, "{name}");
    }
    setup.until_done(&shrunk).await;
    assert_eq!(
        setup.states("pool").await,
        vec![(oldest, "Succeeded".to_string())]
    );
    assert_eq!(setup.count(ResourceType::NetworkInterface), 1);
    setup.server.assert_clean();
}

#[tokio::test]
async fn an_operation_under_way_on_a_scale_set_refuses_another_and_faults_apply_to_it() {
    let setup = setup().await;
    setup.server.faults(|f| {
        f.slow.push((
            Target::of("PUT", ResourceType::VirtualMachineScaleSet),
            Duration::from_secs(1),
        ));
    });
    let made = setup.put("pool", &Model::of(2, "r1")).await;
    let refused = setup
        .client
        .put(&scale_set("pool"), &Model::of(3, "r1").body())
        .await
        .unwrap_err();
    assert_eq!(refused.status, Some(409));
    assert_eq!(refused.code, "OperationNotAllowed");
    let first = names(&setup.members("pool").await).pop_first().unwrap();
    let refused = setup
        .client
        .post(
            &scale_set("pool"),
            "delete",
            &json!({"instanceIds": [first]}),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.status, Some(409));
    assert_eq!(refused.code, "OperationNotAllowed");
    assert_eq!(setup.capacity("pool").await, 2, "nothing done");
    assert_eq!(setup.members("pool").await.len(), 2);
    setup.until_done(&made).await;

    // Faults by method and kind: a POST to the set, a listing of VMs.
    setup.server.faults(|f| {
        f.conflict
            .push((Target::of("POST", ResourceType::VirtualMachineScaleSet), 1));
        f.throttle
            .push((Target::of("GET", ResourceType::VirtualMachine), 1));
    });
    let conflict = setup
        .client
        .post(
            &scale_set("pool"),
            "delete",
            &json!({"instanceIds": [first]}),
        )
        .await
        .unwrap_err();
    assert_eq!(conflict.code, "AnotherOperationInProgress");
    assert_eq!(setup.capacity("pool").await, 2);
    let throttled = setup
        .client
        .list(&group(), ResourceType::VirtualMachine, None)
        .await
        .unwrap_err();
    assert_eq!(
        throttled.class(),
        ErrorClass::Throttled(Duration::from_secs(1))
    );

    setup.server.faults(|f| {
        f.lose_response
            .push(Target::of("POST", ResourceType::VirtualMachineScaleSet));
    });
    let lost = setup
        .client
        .post(
            &scale_set("pool"),
            "delete",
            &json!({"instanceIds": [first]}),
        )
        .await
        .unwrap_err();
    assert_eq!(lost.status, None, "{lost}");
    assert_eq!(setup.capacity("pool").await, 1, "carried out all the same");
    setup.server.assert_clean();
}

#[tokio::test]
async fn a_deleted_scale_set_leaves_no_vm_nic_or_disk() {
    let setup = setup().await;
    let made = setup.put("pool", &Model::of(3, "r1")).await;
    setup.until_done(&made).await;
    assert_eq!(setup.count(ResourceType::Disk), 3);

    setup.server.faults(|f| {
        f.slow.push((
            Target::of("DELETE", ResourceType::VirtualMachineScaleSet),
            Duration::from_secs(1),
        ));
    });
    let Deletion::Started(deleting) = setup.client.delete(&scale_set("pool")).await.unwrap() else {
        panic!("a scale set's deletion is an operation");
    };
    let set = setup.client.get(&scale_set("pool")).await.unwrap().unwrap();
    assert_eq!(set["properties"]["provisioningState"], "Deleting");
    let states = setup.states("pool").await;
    assert_eq!(states.len(), 3);
    assert!(
        states.iter().all(|(_, state)| state == "Deleting"),
        "{states:?}"
    );
    let refused = setup
        .client
        .put(&scale_set("pool"), &Model::of(3, "r1").body())
        .await
        .unwrap_err();
    assert_eq!(refused.status, Some(409));

    setup.until_done(&deleting).await;
    assert_eq!(setup.client.get(&scale_set("pool")).await.unwrap(), None);
    assert!(setup.members("pool").await.is_empty());
    for kind in [
        ResourceType::VirtualMachineScaleSet,
        ResourceType::VirtualMachine,
        ResourceType::NetworkInterface,
        ResourceType::Disk,
    ] {
        assert_eq!(setup.count(kind), 0, "{kind:?} left");
    }
    assert_eq!(
        setup.server.world.lock().unwrap().census().len(),
        3,
        "the group, network and subnet alone"
    );
    // Nothing uses the subnet any more.
    assert!(matches!(
        setup.client.delete(&subnet()).await.unwrap(),
        Deletion::Started(_)
    ));
    setup.server.assert_clean();
}

#[tokio::test]
async fn only_a_flexible_scale_set_with_a_capacity_and_a_network_is_made() {
    let setup = setup().await;
    let mut uniform = Model::of(1, "r1").body();
    uniform["properties"]["orchestrationMode"] = json!("Uniform");
    let mut no_capacity = Model::of(1, "r1").body();
    no_capacity["sku"] = json!({"name": "Standard_D2s_v3"});
    let mut no_network_version = Model::of(1, "r1").body();
    no_network_version["properties"]["virtualMachineProfile"]["networkProfile"]
        .as_object_mut()
        .unwrap()
        .remove("networkApiVersion");
    for (body, code) in [
        (uniform, "InvalidParameter"),
        (no_capacity, "InvalidParameter"),
        (no_network_version, "InvalidParameter"),
    ] {
        let refused = setup
            .client
            .put(&scale_set("pool"), &body)
            .await
            .unwrap_err();
        assert_eq!(refused.status, Some(400), "{refused}");
        assert_eq!(refused.code, code);
    }
    let mut dangling = Model::of(1, "r1").body();
    dangling["properties"]["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"]
        [0]["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"] =
        json!(format!("{}-gone", subnet()));
    let refused = setup
        .client
        .put(&scale_set("pool"), &dangling)
        .await
        .unwrap_err();
    assert_eq!(refused.code, "InvalidResourceReference");
    assert_eq!(setup.count(ResourceType::VirtualMachineScaleSet), 0);
    assert_eq!(setup.count(ResourceType::VirtualMachine), 0);
    setup.server.assert_clean();
}

#[tokio::test]
async fn a_put_if_match_is_refused_once_the_scale_set_changed_and_changes_nothing() {
    let setup = setup().await;
    let made = setup.put("pool", &Model::of(2, "r1")).await;
    setup.until_done(&made).await;
    let read = setup.client.get(&scale_set("pool")).await.unwrap().unwrap();
    let etag = read["etag"]
        .as_str()
        .expect("a scale set has an etag")
        .to_string();
    let again = setup.client.get(&scale_set("pool")).await.unwrap().unwrap();
    assert_eq!(again["etag"], read["etag"], "unchanged, the same etag");

    // An autoscaler raises the capacity after the read.
    let raised = setup.put("pool", &Model::of(4, "r1")).await;
    setup.until_done(&raised).await;
    let refused = setup
        .client
        .put_if_match(&scale_set("pool"), &Model::of(2, "r2").body(), &etag)
        .await
        .expect_err("the scale set changed since its etag was read");
    assert_eq!(refused.status, Some(412));
    assert_eq!(refused.code, "PreconditionFailed");
    assert_eq!(setup.capacity("pool").await, 4, "nothing written");

    // A removal changes it too; with the etag read after it, the PUT goes through.
    let vms: Vec<String> = names(&setup.members("pool").await).into_iter().collect();
    let after_raise = setup.client.get(&scale_set("pool")).await.unwrap().unwrap();
    let removing = setup.delete_instances("pool", &[&vms[0]]).await;
    setup.until_done(&removing).await;
    let stale = after_raise["etag"].as_str().unwrap();
    let refused = setup
        .client
        .put_if_match(&scale_set("pool"), &Model::of(4, "r2").body(), stale)
        .await
        .expect_err("a removal changed it");
    assert_eq!(refused.status, Some(412));
    let current = setup.client.get(&scale_set("pool")).await.unwrap().unwrap();
    let accepted = setup
        .client
        .put_if_match(
            &scale_set("pool"),
            &Model::of(3, "r2").body(),
            current["etag"].as_str().unwrap(),
        )
        .await
        .unwrap();
    setup.until_done(&accepted.operation.unwrap()).await;
    assert_eq!(setup.capacity("pool").await, 3);
    setup.server.assert_clean();
}
