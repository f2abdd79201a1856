//! `AzureMachine` (a virtual machine, its network interface and disks for one Machine) and
//! `AzureMachineTemplate`.

use std::collections::BTreeMap;

use capi_core::api::TemplateMetadata;
use capi_core::api::validation;
use capi_core::infra::{
    InfraMachine, InfraMachineStatus, InfraMachineTemplate, MachineTemplateStatus,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::operations::{LongRunningOperation, operations_by_resource};
use super::tags::{Tags, user_tags};

/// A marketplace image (CAPZ's `AzureMarketplaceImage`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MarketplaceImage {
    /// Its publisher (`Canonical`).
    #[schemars(length(min = 1, max = 128))]
    pub publisher: String,
    /// Its offer (`ubuntu-24_04-lts`).
    #[schemars(length(min = 1, max = 128))]
    pub offer: String,
    /// Its SKU (`server`).
    #[schemars(length(min = 1, max = 128))]
    pub sku: String,
    /// Its version (`latest`, `24.04.202410170`).
    #[schemars(length(min = 1, max = 64))]
    pub version: String,
    /// A third party's image, which needs a purchase plan (the image's publisher, offer and SKU).
    #[serde(default)]
    pub third_party_image: bool,
}

/// An image of an Azure Compute Gallery shared with the community (CAPZ's
/// `AzureComputeGalleryImage` without a private gallery's subscription, resource group or plan).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComputeGalleryImage {
    /// The gallery's public name.
    #[schemars(length(min = 1, max = 128))]
    pub gallery: String,
    /// The image definition.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// The image version.
    #[schemars(length(min = 1, max = 64))]
    pub version: String,
}

/// At most one of `id`, `marketplace` or `computeGallery` (a CEL rule, as CAPZ's webhook checks
/// it).
fn one_kind_of_image(schema: &mut schemars::Schema) {
    validation::add_rule(
        schema,
        "[has(self.id), has(self.marketplace), has(self.computeGallery)].filter(x, x).size() == 1",
        "exactly one of id, marketplace or computeGallery must be set",
    );
}

/// The image a machine boots (CAPZ's `Image`). When a machine names none, CAPZ's reference
/// image for its Kubernetes version is used (the community gallery
/// `ClusterAPI-f72ceb4f-5159-4c26-a0fe-2ea738f0d019`, image `capi-ubun2-2404`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = one_kind_of_image)]
pub struct Image {
    /// An image's ARM resource ID (a managed image or a gallery image version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 1024),
        pattern(r"^/subscriptions/.+/providers/Microsoft\.Compute/.+$")
    )]
    pub id: Option<String>,
    /// A marketplace image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marketplace: Option<MarketplaceImage>,
    /// A community gallery image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_gallery: Option<ComputeGalleryImage>,
}

/// The operating system of the OS disk (Linux only: the bootstrap data is cloud-init's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum OsType {
    /// Linux.
    #[default]
    Linux,
}

/// A managed disk's storage (Ultra disks are not taken for the OS disk, as in CAPZ).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StorageAccountType {
    /// Standard HDD, locally redundant.
    #[serde(rename = "Standard_LRS")]
    StandardLrs,
    /// Standard SSD, locally redundant.
    #[serde(rename = "StandardSSD_LRS")]
    StandardSsdLrs,
    /// Standard SSD, zone redundant.
    #[serde(rename = "StandardSSD_ZRS")]
    StandardSsdZrs,
    /// Premium SSD, locally redundant.
    #[serde(rename = "Premium_LRS")]
    PremiumLrs,
    /// Premium SSD, zone redundant.
    #[serde(rename = "Premium_ZRS")]
    PremiumZrs,
    /// Premium SSD v2, locally redundant (data disks).
    #[serde(rename = "PremiumV2_LRS")]
    PremiumV2Lrs,
}

impl StorageAccountType {
    /// ARM's name of it (`Premium_LRS`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StandardLrs => "Standard_LRS",
            Self::StandardSsdLrs => "StandardSSD_LRS",
            Self::StandardSsdZrs => "StandardSSD_ZRS",
            Self::PremiumLrs => "Premium_LRS",
            Self::PremiumZrs => "Premium_ZRS",
            Self::PremiumV2Lrs => "PremiumV2_LRS",
        }
    }
}

/// A managed disk's parameters (CAPZ's `ManagedDiskParameters`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedDisk {
    /// Its storage (the VM size's default when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_account_type: Option<StorageAccountType>,
}

/// A disk's host caching.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CachingType {
    /// None.
    #[default]
    None,
    /// Reads.
    ReadOnly,
    /// Reads and writes.
    ReadWrite,
}

/// The OS disk (CAPZ's `OSDisk`), named `<machine>_OSDisk` and deleted with the machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OsDisk {
    /// The operating system (`Linux`).
    #[serde(default)]
    pub os_type: OsType,
    /// Its size in GiB (the image's when unset).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "diskSizeGB"
    )]
    #[schemars(range(min = 1, max = 2048))]
    pub disk_size_gb: Option<i32>,
    /// Its storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_disk: Option<ManagedDisk>,
    /// Its host caching (`None` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caching_type: Option<CachingType>,
}

/// An empty data disk (CAPZ's `DataDisk`), named `<machine>_<nameSuffix>` and deleted with the
/// machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataDisk {
    /// The end of its name, unique among the machine's data disks (`etcddisk`).
    #[schemars(length(min = 1, max = 64), pattern(r"^[-\w\.]+$"))]
    pub name_suffix: String,
    /// Its size in GiB.
    #[serde(rename = "diskSizeGB")]
    #[schemars(range(min = 4, max = 32767))]
    pub disk_size_gb: i32,
    /// Its logical unit number, unique among the machine's data disks (the lowest free one
    /// when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 63))]
    pub lun: Option<i32>,
    /// Its storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_disk: Option<ManagedDisk>,
    /// Its host caching (`ReadWrite` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caching_type: Option<CachingType>,
}

/// Data disks are keyed by `nameSuffix` (a list-map), and their LUNs are unique (a CEL rule).
fn data_disks_by_name(schema: &mut schemars::Schema) {
    validation::list_map(schema, &["nameSuffix"]);
    validation::add_rule(
        schema,
        "self.all(x, !has(x.lun) || self.exists_one(y, has(y.lun) && y.lun == x.lun))",
        "data disk LUNs must be unique",
    );
}

/// What Azure does with an evicted spot VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SpotEvictionPolicy {
    /// Stop and deallocate it (the default).
    Deallocate,
    /// Delete it.
    Delete,
}

/// Run the VM as a spot VM (CAPZ's `SpotVMOptions`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpotVmOptions {
    /// The highest hourly price, in USD (the on-demand price, `-1`, when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), pattern(r"^(-1|[0-9]+(\.[0-9]+)?)$"))]
    pub max_price: Option<String>,
    /// What happens on eviction (`Deallocate` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_policy: Option<SpotEvictionPolicy>,
}

/// What an `AzureMachine` runs: a virtual machine for one Machine, with its network interface
/// (`<machine>-nic`, in the API server's backend pool for a control-plane machine), OS disk and
/// data disks. Everything but the tags is immutable (a change is reported, and applied by
/// replacing the machine).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AzureMachine",
    plural = "azuremachines",
    shortname = "azm",
    namespaced,
    status = "AzureMachineStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AzureMachine is a virtual machine for one Machine.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(name = "State", type_ = "string", json_path = ".status.vmState"),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(
        name = "Provider ID",
        type_ = "string",
        json_path = ".spec.providerID",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AzureMachineSpec {
    /// `azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachines/<name>`;
    /// set by the provider.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 1024), pattern(r"^azure:///subscriptions/.+$"))]
    pub provider_id: Option<String>,
    /// The VM size (`Standard_D2s_v3`).
    #[schemars(length(min = 1, max = 64), pattern(r"^[A-Za-z0-9_\-]+$"))]
    pub vm_size: String,
    /// The zone (`1`, `2`, `3`), overriding the Machine's failure domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 8))]
    pub failure_domain: Option<String>,
    /// The image (CAPZ's reference image for the Machine's version when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Image>,
    /// The OS disk.
    pub os_disk: OsDisk,
    /// Empty data disks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), transform = data_disks_by_name)]
    pub data_disks: Vec<DataDisk>,
    /// An SSH public key for the `capi` user, base64-encoded in `authorized_keys` format. Unset
    /// or empty (CAPZ templates' default): no SSH access — Azure then gets a key nobody holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16384), pattern(r"^([A-Za-z0-9+/]+={0,2})?$"))]
    pub ssh_public_key: Option<String>,
    /// Tags on the VM, its network interface and disks (with the cluster's `additionalTags`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "user_tags")]
    pub additional_tags: Tags,
    /// Give the VM a public IP address (`pip-<machine>`).
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        rename = "allocatePublicIP"
    )]
    pub allocate_public_ip: bool,
    /// Let the network interface forward packets not addressed to it.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        rename = "enableIPForwarding"
    )]
    pub enable_ip_forwarding: bool,
    /// Run it as a spot VM.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "spotVMOptions"
    )]
    pub spot_vm_options: Option<SpotVmOptions>,
}

/// ARM's provisioning state of a VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum VmState {
    /// Being created.
    Creating,
    /// Being updated.
    Updating,
    /// Created or updated.
    Succeeded,
    /// Its last operation failed.
    Failed,
    /// Its last operation was canceled.
    Canceled,
    /// Being deleted.
    Deleting,
    /// Being migrated.
    Migrating,
}

/// The observed state of an `AzureMachine`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureMachineStatus {
    /// `initialization`, `addresses`, `failureDomain`, `conditions` (infrastructure provider
    /// contract).
    #[serde(flatten)]
    pub contract: InfraMachineStatus,
    /// ARM's provisioning state of the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_state: Option<VmState>,
    /// Long-running operations in flight, resumed by the next reconcile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), transform = operations_by_resource)]
    pub long_running_operation_states: Vec<LongRunningOperation>,
}

impl InfraMachine for AzureMachine {
    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }

    fn infra_status(&self) -> Option<&InfraMachineStatus> {
        self.status.as_ref().map(|s| &s.contract)
    }
}

/// A template for `AzureMachine`s, used by `MachineSet`s, `MachineDeployment`s and control
/// planes.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AzureMachineTemplate",
    plural = "azuremachinetemplates",
    shortname = "azmt",
    namespaced,
    status = "MachineTemplateStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AzureMachineTemplate stamps out AzureMachines.",
    printcolumn(name = "CPU", type_ = "string", json_path = ".status.capacity.cpu"),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.capacity.memory"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AzureMachineTemplateSpec {
    /// What each machine gets.
    pub template: AzureMachineTemplateResource,
}

/// `AzureMachineTemplate.spec.template`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureMachineTemplateResource {
    /// Labels and annotations for the machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The spec of each machine.
    pub spec: AzureMachineSpec,
}

impl InfraMachineTemplate for AzureMachineTemplate {
    fn template_status(&self) -> Option<&MachineTemplateStatus> {
        self.status.as_ref()
    }
}
