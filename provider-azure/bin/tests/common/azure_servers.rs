//! One cluster's VMs in the ARM test server as a [`CloudServers`]: the server runs no VM, so a
//! [`provider_inmemory::fake_hypervisor::FakeHypervisor`] boots each VM whose provisioning
//! succeeded from the `customData` it was created with (what cloud-init reads from Azure's
//! instance metadata), at its NIC's private address. A VM's node is named by its computer name,
//! as kubeadm names it with the templates' `{{ ds.meta_data["local_hostname"] }}`; the VMs of
//! the cluster's scale sets are booted too.

use std::net::Ipv4Addr;
use std::sync::Arc;

use base64::Engine;
use provider_azure::arm::{ResourceId, ResourceType};
use provider_inmemory::cloud::UserData;
use provider_inmemory::fake_hypervisor::{BootData, CloudServers, Server};

use super::arm_server::ArmServer;

/// The VMs tagged `capi-rs.dev_cluster=<namespace>/<name>`, and those of scale sets so tagged
/// (a Flexible scale set's VMs carry no tags of their own).
pub struct AzureServers {
    pub server: Arc<ArmServer>,
    pub cluster: String,
}

impl AzureServers {
    fn tagged(&self, tags: &serde_json::Value) -> bool {
        tags[provider_azure::naming::CLUSTER_TAG].as_str() == Some(self.cluster.as_str())
    }
}

#[async_trait::async_trait]
impl CloudServers for AzureServers {
    async fn running(&self) -> Result<Vec<Server>, String> {
        let world = self.server.world.lock().unwrap();
        Ok(world
            .of_kind(ResourceType::VirtualMachine)
            .into_iter()
            .filter(|vm| {
                vm.state == "Succeeded"
                    && (self.tagged(&vm.body["tags"])
                        || vm.body["properties"]["virtualMachineScaleSet"]["id"]
                            .as_str()
                            .and_then(|set| world.read(set))
                            .is_some_and(|set| self.tagged(&set["tags"])))
            })
            .map(|vm| {
                // The host is named by its computer name (a scale set's VM name has a `_`).
                let name = vm.body["properties"]["osProfile"]["computerName"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| vm.id.rsplit('/').next().unwrap_or_default().to_string());
                Server {
                    id: vm.id.clone(),
                    name,
                    provider_id: format!("azure://{}", vm.id),
                    zone: vm.body["zones"][0].as_str().map(str::to_string),
                }
            })
            .collect())
    }

    async fn boot_data(&self, server: &Server) -> Result<BootData, String> {
        let vm = ResourceId::parse(&server.id).map_err(|e| e.to_string())?;
        let nic = ResourceId::new(
            &vm.subscription,
            &vm.resource_group,
            ResourceType::NetworkInterface,
            &format!("{}-nic", vm.name),
        );
        let world = self.server.world.lock().unwrap();
        let address: Ipv4Addr = world
            .private_address(&nic.to_string())
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("{} has no private address", nic.name))?;
        let user_data = match world.custom_data(&server.id) {
            None => None,
            Some(encoded) => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|e| format!("customData is not base64: {e}"))?;
                Some(UserData::new(
                    String::from_utf8(raw).map_err(|_| "customData is not text".to_string())?,
                ))
            }
        };
        Ok(BootData { address, user_data })
    }
}
