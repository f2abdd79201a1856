//! `AWSMachine` (an EC2 instance for one Machine) and `AWSMachineTemplate`.

use std::collections::BTreeMap;

use capi_core::api::TemplateMetadata;
use capi_core::api::validation;
use capi_core::infra::{
    InfraMachine, InfraMachineStatus, InfraMachineTemplate, MachineTemplateStatus,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::tags::{Tags, user_tags};

/// An EC2 filter: a name (`tag:Name`, `vpc-id`, …) and the values any of which matches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Filter {
    /// The filter's name, as EC2 names it.
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// The values.
    #[schemars(length(min = 1, max = 32), inner(length(min = 1, max = 255)))]
    pub values: Vec<String>,
}

/// Exactly one of `id` or `filters` (a CEL rule).
fn one_of_id_or_filters(schema: &mut schemars::Schema) {
    validation::exactly_one_of(schema, "id", "filters");
}

/// An EC2 resource (a subnet, a security group): by ID, or by filters that must match exactly
/// one (CAPA's `AWSResourceReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = one_of_id_or_filters)]
pub struct AwsResourceReference {
    /// The resource's ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub id: Option<String>,
    /// Filters that must match exactly one resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub filters: Option<Vec<Filter>>,
}

/// The AMI a machine boots (CAPA's `AMIReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiReference {
    /// The AMI (`ami-…`); looked up by name when unset (see `imageLookupFormat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255), pattern(r"^ami-[0-9a-f]+$"))]
    pub id: Option<String>,
}

/// An EBS volume type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    /// General purpose SSD, gp2.
    Gp2,
    /// General purpose SSD, gp3.
    Gp3,
    /// Provisioned IOPS SSD, io1.
    Io1,
    /// Provisioned IOPS SSD, io2.
    Io2,
    /// Throughput optimised HDD.
    St1,
    /// Cold HDD.
    Sc1,
    /// Magnetic.
    Standard,
}

impl VolumeType {
    /// EC2's name of it (`gp3`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gp2 => "gp2",
            Self::Gp3 => "gp3",
            Self::Io1 => "io1",
            Self::Io2 => "io2",
            Self::St1 => "st1",
            Self::Sc1 => "sc1",
            Self::Standard => "standard",
        }
    }
}

/// The root volume (CAPA's `Volume`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    /// The device name (the AMI's root device when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub device_name: Option<String>,
    /// Its size in GiB.
    #[schemars(range(min = 8, max = 65536))]
    pub size: i64,
    /// Its type (the region's default when unset).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<VolumeType>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 256000))]
    pub iops: Option<i64>,
    /// Throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 125, max = 2000))]
    pub throughput: Option<i64>,
    /// Encrypt it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// The KMS key to encrypt it with (the account's default when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub encryption_key: Option<String>,
}

/// Run the instance as a spot instance (CAPA's `SpotMarketOptions`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpotMarketOptions {
    /// The highest hourly price, in USD (the on-demand price when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), pattern(r"^[0-9]+(\.[0-9]+)?$"))]
    pub max_price: Option<String>,
}

/// Whether the instance metadata service (or its tags) is on (CAPA's `InstanceMetadataState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMetadataState {
    /// On.
    Enabled,
    /// Off.
    Disabled,
}

/// Whether the instance metadata service asks for a session token (IMDSv2) (CAPA's
/// `HTTPTokensState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HttpTokensState {
    /// IMDSv1 answers too: any process (or forwarded request) reading a URL reads the instance's
    /// credentials and user data.
    Optional,
    /// IMDSv2 only: a token from a PUT first.
    Required,
}

/// The instance metadata service of the instance (CAPA's `InstanceMetadataOptions`). Unset fields
/// take this provider's defaults: endpoint enabled, IMDSv2 required, hop limit 1, tags off — so
/// that neither a pod nor a request forwarded by a workload reads the instance's role credentials
/// or user data through IMDSv1.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceMetadataOptions {
    /// The metadata endpoint (default `enabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_endpoint: Option<InstanceMetadataState>,
    /// How many network hops a metadata response may travel (default 1: the instance only; 2
    /// lets containers not on the host network reach it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub http_put_response_hop_limit: Option<i64>,
    /// IMDSv2 (`required`, the default) or IMDSv1 too (`optional`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_tokens: Option<HttpTokensState>,
    /// The instance's tags in its metadata (default `disabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_metadata_tags: Option<InstanceMetadataState>,
}

/// The metadata options an instance is launched with: [`InstanceMetadataOptions`] with its
/// defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadataOptions {
    /// The endpoint is on.
    pub endpoint: bool,
    /// Hop limit (1–64).
    pub hop_limit: i64,
    /// IMDSv2 only.
    pub tokens_required: bool,
    /// Tags in the metadata.
    pub tags: bool,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        Self {
            endpoint: true,
            hop_limit: 1,
            tokens_required: true,
            tags: false,
        }
    }
}

impl InstanceMetadataOptions {
    /// These options, defaults applied.
    pub fn resolve(&self) -> MetadataOptions {
        let defaults = MetadataOptions::default();
        MetadataOptions {
            endpoint: self
                .http_endpoint
                .map_or(defaults.endpoint, |s| s == InstanceMetadataState::Enabled),
            hop_limit: self
                .http_put_response_hop_limit
                .map_or(defaults.hop_limit, |h| h.clamp(1, 64)),
            tokens_required: self
                .http_tokens
                .map_or(defaults.tokens_required, |t| t == HttpTokensState::Required),
            tags: self
                .instance_metadata_tags
                .map_or(defaults.tags, |s| s == InstanceMetadataState::Enabled),
        }
    }
}

/// What an `AWSMachine` runs: an EC2 instance for one Machine. Everything but the tags and
/// security groups is immutable (a change is reported, and applied by replacing the machine).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AWSMachine",
    plural = "awsmachines",
    shortname = "awsm",
    namespaced,
    status = "AWSMachineStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AWSMachine is an EC2 instance for one Machine.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(name = "State", type_ = "string", json_path = ".status.instanceState"),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(name = "Provider ID", type_ = "string", json_path = ".spec.providerID"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachineSpec {
    /// `aws:///<zone>/<instance-id>`; set by the provider.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,
    /// The AMI (looked up by the cluster's or this machine's lookup settings when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami: Option<AmiReference>,
    /// The AMI name format, overriding the cluster's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub image_lookup_format: Option<String>,
    /// The account owning the AMIs, overriding the cluster's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub image_lookup_org: Option<String>,
    /// The base OS in the AMI name, overriding the cluster's.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "imageLookupBaseOS"
    )]
    #[schemars(length(min = 1, max = 64))]
    pub image_lookup_base_os: Option<String>,
    /// The instance type (`m6i.large`).
    #[schemars(length(min = 2, max = 64))]
    pub instance_type: String,
    /// Tags on the instance and its volumes (with the cluster's `additionalTags`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "user_tags")]
    pub additional_tags: Tags,
    /// The IAM instance profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub iam_instance_profile: Option<String>,
    /// Give the instance a public address (the subnet's setting when unset).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "publicIP")]
    pub public_ip: Option<bool>,
    /// Security groups besides the cluster's for the machine's role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub additional_security_groups: Vec<AwsResourceReference>,
    /// The subnet (a private subnet of the Machine's failure domain when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<AwsResourceReference>,
    /// An EC2 key pair for SSH (the cluster's when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub ssh_key_name: Option<String>,
    /// The root volume (the AMI's when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<Volume>,
    /// Run it as a spot instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_market_options: Option<SpotMarketOptions>,
    /// The instance metadata service (IMDSv2 required, hop limit 1 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_metadata_options: Option<InstanceMetadataOptions>,
    /// How cloud-init bootstrap data reaches the instance (through Secrets Manager when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init: Option<CloudInit>,
}

/// How cloud-init bootstrap data reaches the instance (CAPA's `CloudInit`). By default it is
/// stored, gzip-compressed, in Secrets Manager secrets named
/// `aws.cluster.x-k8s.io/<idempotency key>-<random>-<n>`, and the user data is a script that
/// fetches and deletes them at boot: the cluster's CA keys never sit in the instance's user data, which
/// anything reaching its metadata service can read. The AMI needs the AWS CLI and the instance
/// profile `secretsmanager:GetSecretValue` and `DeleteSecret` on
/// `arn:*:secretsmanager:*:*:secret:aws.cluster.x-k8s.io/*` (CAPA's node policies). Ignition
/// data always goes in the user data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudInit {
    /// Put the bootstrap data in the user data instead (for AMIs without the AWS CLI): whoever
    /// reads the instance's user data reads the data, keys included.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_secrets_manager: bool,
    /// Where the data is kept: `secrets-manager` (the only backend implemented; CAPA's
    /// `ssm-parameter-store` is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_secrets_backend: Option<SecretBackend>,
}

/// Where secure bootstrap data is kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SecretBackend {
    /// AWS Secrets Manager.
    #[default]
    #[serde(rename = "secrets-manager")]
    SecretsManager,
}

/// EC2's state of an instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    /// Starting.
    Pending,
    /// Running.
    Running,
    /// Being terminated.
    ShuttingDown,
    /// Terminated.
    Terminated,
    /// Stopping.
    Stopping,
    /// Stopped.
    Stopped,
}

impl InstanceState {
    /// EC2's name of it (`shutting-down`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::ShuttingDown => "shutting-down",
            Self::Terminated => "terminated",
            Self::Stopping => "stopping",
            Self::Stopped => "stopped",
        }
    }
}

/// The observed state of an `AWSMachine`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachineStatus {
    /// `initialization`, `addresses`, `failureDomain`, `conditions` (infrastructure provider
    /// contract).
    #[serde(flatten)]
    pub contract: InfraMachineStatus,
    /// The instance (`i-…`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "instanceID"
    )]
    pub instance_id: Option<String>,
    /// EC2's state of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_state: Option<InstanceState>,
    /// A spot instance, which AWS may interrupt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interruptible: bool,
}

impl InfraMachine for AWSMachine {
    fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref()
    }

    fn infra_status(&self) -> Option<&InfraMachineStatus> {
        self.status.as_ref().map(|s| &s.contract)
    }
}

/// A template for `AWSMachine`s, used by `MachineSet`s, `MachineDeployment`s and control planes.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AWSMachineTemplate",
    plural = "awsmachinetemplates",
    shortname = "awsmt",
    namespaced,
    status = "MachineTemplateStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AWSMachineTemplate stamps out AWSMachines.",
    printcolumn(name = "CPU", type_ = "string", json_path = ".status.capacity.cpu"),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.capacity.memory"
    ),
    printcolumn(
        name = "Architecture",
        type_ = "string",
        json_path = ".status.nodeInfo.architecture"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachineTemplateSpec {
    /// What each machine gets.
    pub template: AWSMachineTemplateResource,
}

/// `AWSMachineTemplate.spec.template`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachineTemplateResource {
    /// Labels and annotations for the machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The spec of each machine.
    pub spec: AWSMachineSpec,
}

impl InfraMachineTemplate for AWSMachineTemplate {
    fn template_status(&self) -> Option<&MachineTemplateStatus> {
        self.status.as_ref()
    }
}
