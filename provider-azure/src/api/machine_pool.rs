//! `AzureMachinePool`: a virtual machine scale set in Flexible orchestration running a
//! `MachinePool`'s machines (CAPZ's kind of the same name, in this provider's group).

use std::collections::BTreeMap;

use capi_core::infra::{InfraMachinePool, InfraMachinePoolStatus};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::machine::{AzureMachine, AzureMachineSpec, Image, OsDisk};
use super::operations::{LongRunningOperation, operations_by_resource};
use super::tags::{Tags, user_tags};

/// What an `AzureMachinePool` runs: one virtual machine scale set in Flexible orchestration
/// whose VMs are made from `template`. A change of `template` (or of the `MachinePool`'s version
/// or bootstrap configuration) rolls the VMs, surge first; tags change in place.
///
/// Differences from CAPZ's `AzureMachinePool`:
/// - `orchestrationMode` is `Flexible` only, and is the default (CAPZ defaults to `Uniform`):
///   a Uniform scale set's instances are not VMs of their own, cannot be removed as VMs by
///   name through the VM API, and Azure recommends Flexible for new scale sets;
/// - no `strategy` (the pool loop replaces VMs itself, one at a time with none missing, and
///   removes only the VMs whose machines were drained — never a VM Azure picks), no identities,
///   role assignments, extensions, diagnostics, data disks, spot options or accelerated
///   networking; the schema is closed, so a CAPZ manifest using them is refused, never cut;
/// - `location`, when set, must be the `AzureCluster`'s (the scale set lives in its network).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AzureMachinePool",
    plural = "azuremachinepools",
    shortname = "amp",
    namespaced,
    status = "AzureMachinePoolStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AzureMachinePool is a virtual machine scale set running a MachinePool's machines.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(
        name = "VM size",
        type_ = "string",
        json_path = ".spec.template.vmSize"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AzureMachinePoolSpec {
    /// The scale set's resource ID, `azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachineScaleSets/<name>`;
    /// set by the provider.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 1024), pattern(r"^azure:///subscriptions/.+$"))]
    pub provider_id: Option<String>,

    /// The provider IDs of the scale set's VMs; set by the pool loop.
    #[serde(
        rename = "providerIDList",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 10000), inner(length(min = 1, max = 512)))]
    pub provider_id_list: Vec<String>,

    /// The region; the `AzureCluster`'s when unset, and refused when it is another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), pattern(r"^[a-z][a-z0-9]*$"))]
    pub location: Option<String>,

    /// What each VM is made of.
    pub template: AzureMachinePoolMachineTemplate,

    /// Tags on the scale set, besides the cluster's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "user_tags")]
    pub additional_tags: Tags,

    /// The scale set's orchestration; `Flexible`, the only one taken.
    #[serde(default)]
    pub orchestration_mode: OrchestrationMode,
}

/// How a scale set orchestrates its VMs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum OrchestrationMode {
    /// Each instance is a VM of its own, removed by name.
    #[default]
    Flexible,
}

/// A scale set's VM (CAPZ's `AzureMachinePoolMachineTemplate`, the fields this provider
/// implements).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureMachinePoolMachineTemplate {
    /// The VM size (`Standard_D2s_v3`).
    #[schemars(length(min = 1, max = 64), pattern(r"^[A-Za-z0-9_\-]+$"))]
    pub vm_size: String,
    /// The image (CAPZ's reference image for the `MachinePool`'s version when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Image>,
    /// The OS disk.
    pub os_disk: OsDisk,
    /// An SSH public key for the `capi` user, base64-encoded in `authorized_keys` format. Unset,
    /// the VMs get a random key whose private half nobody holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16384), pattern(r"^([A-Za-z0-9+/]+={0,2})?$"))]
    pub ssh_public_key: Option<String>,
}

/// The revision of the model one VM of the scale set was made from, as the provider learned it
/// (from the VM's `userData`, read once).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceRevision {
    /// The VM's name.
    #[schemars(length(min = 1, max = 80))]
    pub name: String,
    /// The model revision it was made from.
    #[schemars(length(min = 1, max = 63))]
    pub revision: String,
}

/// The status of an `AzureMachinePool`: the contract's fields, and what the provider keeps of
/// the scale set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureMachinePoolStatus {
    /// The contract's fields.
    #[serde(flatten)]
    pub contract: InfraMachinePoolStatus,
    /// The revision of the scale set's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub model_revision: Option<String>,
    /// The revision each VM was made from. A record the provider reads back, not a source of
    /// truth: lost, it is learned again from the VMs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10000))]
    pub instance_revisions: Vec<InstanceRevision>,
    /// The ARM operations in flight on the scale set and its VMs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), transform = operations_by_resource)]
    pub long_running_operation_states: Vec<LongRunningOperation>,
}

impl AzureMachinePool {
    /// The `AzureMachine` spec of one of the pool's VMs, as its template describes it.
    pub fn machine_spec(&self) -> AzureMachineSpec {
        let template = &self.spec.template;
        AzureMachineSpec {
            provider_id: None,
            vm_size: template.vm_size.clone(),
            failure_domain: None,
            image: template.image.clone(),
            os_disk: template.os_disk.clone(),
            data_disks: Vec::new(),
            ssh_public_key: template.ssh_public_key.clone(),
            additional_tags: self.spec.additional_tags.clone(),
            allocate_public_ip: false,
            enable_ip_forwarding: false,
            spot_vm_options: None,
        }
    }
}

impl InfraMachinePool for AzureMachinePool {
    type Machine = AzureMachine;

    fn machine_for(&self, instance: &capi_core::PoolInstance) -> AzureMachine {
        let mut spec = self.machine_spec();
        spec.provider_id = Some(instance.provider_id.clone());
        spec.failure_domain = instance.failure_domain.clone();
        AzureMachine::new("", spec)
    }

    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }

    fn provider_id_list(&self) -> &[String] {
        &self.spec.provider_id_list
    }

    fn pool_status(&self) -> Option<&InfraMachinePoolStatus> {
        self.status.as_ref().map(|s| &s.contract)
    }

    /// The VM template makes a VM: tags and location change nothing of a running VM.
    fn model(&self) -> serde_json::Value {
        serde_json::json!({ "template": self.spec.template })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(json: serde_json::Value) -> AzureMachinePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureMachinePool",
            "metadata": {"name": "workers"},
            "spec": json,
        }))
        .unwrap()
    }

    #[test]
    fn a_capz_manifest_reads_the_same_and_is_flexible() {
        let pool = pool(serde_json::json!({
            "location": "westeurope",
            "template": {"vmSize": "Standard_D2s_v3", "osDisk": {"osType": "Linux", "diskSizeGB": 30}},
        }));
        assert_eq!(pool.spec.template.vm_size, "Standard_D2s_v3");
        assert_eq!(pool.spec.orchestration_mode, OrchestrationMode::Flexible);
        assert_eq!(pool.spec.location.as_deref(), Some("westeurope"));
    }

    #[test]
    fn only_the_template_makes_the_model() {
        let small = pool(serde_json::json!({
            "template": {"vmSize": "Standard_B2s", "osDisk": {}},
        }));
        let mut tagged = small.clone();
        tagged
            .spec
            .additional_tags
            .insert("team".into(), "a".into());
        tagged.spec.provider_id_list = vec!["azure:///subscriptions/s/x".into()];
        assert_eq!(small.model(), tagged.model());
        let mut larger = small.clone();
        larger.spec.template.vm_size = "Standard_D4s_v3".into();
        assert_ne!(small.model(), larger.model());
    }

    #[test]
    fn a_vms_machine_describes_it_as_the_template_does() {
        let pool = pool(serde_json::json!({
            "template": {"vmSize": "Standard_B2s", "osDisk": {"diskSizeGB": 40}, "sshPublicKey": "c3No"},
        }));
        let instance = capi_core::PoolInstance::new(
            "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/w_1",
            "w_1",
            capi_core::InstanceState::Running,
        )
        .in_failure_domain("2");
        let machine = pool.machine_for(&instance);
        assert_eq!(machine.spec.vm_size, "Standard_B2s");
        assert_eq!(machine.spec.os_disk.disk_size_gb, Some(40));
        assert_eq!(machine.spec.failure_domain.as_deref(), Some("2"));
        assert_eq!(
            machine.spec.provider_id.as_deref(),
            Some(instance.provider_id.as_str())
        );
    }
}
