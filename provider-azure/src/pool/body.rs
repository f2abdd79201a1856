//! A pool's scale set as the provider wants it: Flexible orchestration, the VM model made from
//! the `AzureMachinePool`'s template (as an `AzureMachine`'s VM is), in the cluster's node
//! subnet. The body is checked in the tests against `azure-mgmt-compute`'s
//! `VirtualMachineScaleSet` model.

use capi_core::{ActuatorError, ModelRevision};
use serde_json::{Value, json};
use sha2::Digest;

use crate::api::SubnetRole;
use crate::arm::models::Tags;
use crate::machine::{ADMIN_USER, existing_ssh_key, image_reference, ssh_key};
use crate::naming::Role;

use super::{DATA_DIGEST_TAG, POOL_TAG, PoolCtx, REVISION_TAG, user_data};

/// The network api-version the scale set creates its VMs' NICs with (the one Flexible
/// orchestration requires).
pub(super) const NETWORK_API_VERSION: &str = "2020-11-01";

/// The longest part of the pool's name in the computer name prefix (a digest of the pool's key
/// and Azure's six characters follow it).
const MAX_PREFIX: usize = 14;

impl PoolCtx {
    /// The scale set's tags: the user's, the cluster's ownership, the node role, the pool's key,
    /// the model's revision and the digest of its bootstrap data.
    pub(super) fn scale_set_tags(&self, revision: &ModelRevision, digest: &str) -> Tags {
        let mut additional = self.pool.spec.additional_tags.clone();
        for (k, v) in &self.cluster.cluster.spec.additional_tags {
            additional.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let mut tags = self.cluster.naming.tags(Role::Node, &self.key, &additional);
        tags.insert(POOL_TAG.into(), self.key.clone());
        tags.insert(REVISION_TAG.into(), revision.as_str().into());
        tags.insert(DATA_DIGEST_TAG.into(), digest.into());
        tags
    }

    /// The prefix of the VMs' computer (and node) names: the pool's name (lower case, letters,
    /// digits and `-` only, cut short) and four hex digits of the pool's key, so that two pools
    /// of one cluster whose names start alike never share a node name.
    pub(super) fn computer_name_prefix(&self) -> String {
        let name = kube::ResourceExt::name_any(self.pool.as_ref()).to_ascii_lowercase();
        let mut prefix: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(MAX_PREFIX)
            .collect();
        prefix = prefix.trim_matches('-').to_string();
        if prefix.is_empty() {
            prefix = "pool".into();
        }
        let digest = sha2::Sha256::digest(self.key.as_bytes());
        format!("{prefix}-{:02x}{:02x}-", digest[0], digest[1])
    }

    /// The scale set at `capacity`, its model of `revision` with `custom_data` (base64 of the
    /// bootstrap data, whose digest is `digest`), and the SSH key and zones of `existing` (the
    /// scale set as ARM answered it, when it is put again) or else the pool's failure domains.
    pub(super) fn scale_set_body(
        &self,
        capacity: u32,
        revision: &ModelRevision,
        digest: &str,
        custom_data: String,
        existing: Option<&Value>,
    ) -> Result<Value, ActuatorError> {
        let template = &self.pool.spec.template;
        let image = image_reference(template.image.as_ref(), self.version.as_deref())?;
        let mut os_disk = json!({
            "osType": "Linux",
            "createOption": "FromImage",
            "deleteOption": "Delete",
        });
        if let Some(size) = template.os_disk.disk_size_gb {
            os_disk["diskSizeGB"] = json!(size);
        }
        if let Some(caching) = &template.os_disk.caching_type {
            os_disk["caching"] = serde_json::to_value(caching).unwrap_or(Value::Null);
        }
        if let Some(kind) = template
            .os_disk
            .managed_disk
            .as_ref()
            .and_then(|d| d.storage_account_type)
        {
            os_disk["managedDisk"] = json!({ "storageAccountType": kind.as_str() });
        }
        let subnet = self.cluster.subnet_id(SubnetRole::Node).to_string();
        // Zones are chosen when the scale set is made, and kept.
        let zones: Vec<String> = match existing {
            Some(set) => super::zones_of(set),
            None => {
                let mut zones = self.zones.clone();
                zones.sort();
                zones.dedup();
                zones
            }
        };
        let mut body = json!({
            "location": self.cluster.cluster.spec.location,
            "tags": self.scale_set_tags(revision, digest),
            "sku": {"name": template.vm_size, "capacity": capacity},
            "properties": {
                "orchestrationMode": "Flexible",
                // New models reach only new VMs: the loop replaces VMs itself.
                "upgradePolicy": {"mode": "Manual"},
                "platformFaultDomainCount": 1,
                "singlePlacementGroup": false,
                "virtualMachineProfile": {
                    "osProfile": {
                        "computerNamePrefix": self.computer_name_prefix(),
                        "adminUsername": ADMIN_USER,
                        "customData": custom_data,
                        "linuxConfiguration": {
                            "disablePasswordAuthentication": true,
                            "ssh": {"publicKeys": [{
                                "path": format!("/home/{ADMIN_USER}/.ssh/authorized_keys"),
                                "keyData": ssh_key(
                                    template.ssh_public_key.as_deref(),
                                    existing.and_then(|set| existing_ssh_key(
                                        &set["properties"]["virtualMachineProfile"]["osProfile"],
                                    )),
                                )?,
                            }]},
                        },
                    },
                    "storageProfile": {
                        "imageReference": image,
                        "osDisk": os_disk,
                    },
                    "networkProfile": {
                        "networkApiVersion": NETWORK_API_VERSION,
                        "networkInterfaceConfigurations": [{
                            "name": "nic",
                            "properties": {
                                "primary": true,
                                "deleteOption": "Delete",
                                "ipConfigurations": [{
                                    "name": "ipconfig",
                                    "properties": {"primary": true, "subnet": {"id": subnet}},
                                }],
                            },
                        }],
                    },
                    "userData": user_data(revision),
                },
            },
        });
        if !zones.is_empty() {
            body["zones"] = json!(zones);
        }
        Ok(body)
    }
}
