//! `AWSMachinePool`: an Auto Scaling group running a `MachinePool`'s machines (CAPA's kind of
//! the same name, in this provider's group).

use std::collections::BTreeMap;

use capi_core::api::validation;
use capi_core::infra::{InfraMachinePool, InfraMachinePoolStatus};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::machine::{
    AWSMachine, AWSMachineSpec, AmiReference, AwsResourceReference, CloudInit,
    InstanceMetadataOptions, SpotMarketOptions, Volume,
};
use super::tags::{Tags, user_tags};

/// `minSize` is at most `maxSize` (a CEL rule).
fn bounds_in_order(schema: &mut schemars::Schema) {
    validation::add_rule(
        schema,
        "!has(self.minSize) || !has(self.maxSize) || self.minSize <= self.maxSize",
        "minSize must not be greater than maxSize",
    );
}

/// What an `AWSMachinePool` runs: one Auto Scaling group of instances launched from a launch
/// template the provider makes from `awsLaunchTemplate`. A change of `awsLaunchTemplate` or
/// `cloudInit` (or of the `MachinePool`'s version or bootstrap configuration) rolls the
/// instances, surge first; sizes, subnets and tags change in place (a tag removed from
/// `additionalTags` stays on the group and its instances).
///
/// Differences from CAPA's `AWSMachinePool`: no `mixedInstancesPolicy`, `lifecycleHooks`,
/// `refreshPreferences` (the pool loop replaces instances itself, one at a time with none
/// missing, and never starts an instance refresh), `suspendProcesses` (`AZRebalance` and
/// `ReplaceUnhealthy` are always suspended: either would terminate an instance whose node
/// nobody drained), `awsLaunchTemplate.name`/`versionNumber` (the provider names and versions
/// its templates) or `ignition`; cloud-init data goes through Secrets Manager unless
/// `cloudInit.insecureSkipSecretsManager` (as for an `AWSMachine`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AWSMachinePool",
    plural = "awsmachinepools",
    shortname = "awsmp",
    namespaced,
    status = "AWSMachinePoolStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AWSMachinePool is an Auto Scaling group running a MachinePool's machines.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(
        name = "Instance type",
        type_ = "string",
        json_path = ".spec.awsLaunchTemplate.instanceType"
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
#[schemars(transform = bounds_in_order)]
pub struct AWSMachinePoolSpec {
    /// The Auto Scaling group's ARN; set by the provider.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 1600))]
    pub provider_id: Option<String>,

    /// The provider IDs of the group's instances (`aws:///<zone>/<instance-id>`); set by the
    /// provider.
    #[serde(
        rename = "providerIDList",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 10000), inner(length(min = 1, max = 512)))]
    pub provider_id_list: Vec<String>,

    /// The group's lower bound (lowered to the pool's size when that is smaller).
    #[serde(default = "one")]
    #[schemars(range(min = 0, max = 10000))]
    pub min_size: u32,

    /// The group's upper bound (raised to the pool's size, surge included, when that is
    /// larger).
    #[serde(default = "one")]
    #[schemars(range(min = 0, max = 10000))]
    pub max_size: u32,

    /// The zones the instances launch in: the cluster's subnets there (when `subnets` is
    /// unset). All the cluster's zones when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 64)))]
    pub availability_zones: Vec<String>,

    /// Which of the cluster's subnets in those zones: `private` (the default), `public` or
    /// `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone_subnet_type: Option<SubnetType>,

    /// The subnets the instances launch in, instead of the cluster's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub subnets: Vec<AwsResourceReference>,

    /// Tags on the group, its instances and their volumes (with the cluster's
    /// `additionalTags`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "user_tags")]
    pub additional_tags: Tags,

    /// What every instance is launched with.
    pub aws_launch_template: AWSLaunchTemplate,

    /// Have Auto Scaling replace spot instances at an elevated risk of interruption ahead of
    /// time. It picks those instances itself: their nodes are not drained first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capacity_rebalance: bool,

    /// How cloud-init bootstrap data reaches the instances (through Secrets Manager when
    /// unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init: Option<CloudInit>,
}

fn one() -> u32 {
    1
}

/// `AWSMachinePool.spec.availabilityZoneSubnetType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SubnetType {
    /// Public subnets.
    Public,
    /// Private subnets.
    Private,
    /// Both.
    All,
}

/// What every instance of a pool is launched with (CAPA's `AWSLaunchTemplate`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSLaunchTemplate {
    /// The AMI (looked up by the cluster's or these lookup settings when unset).
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
    /// The IAM instance profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub iam_instance_profile: Option<String>,
    /// An EC2 key pair for SSH (the cluster's when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub ssh_key_name: Option<String>,
    /// The root volume (the AMI's when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<Volume>,
    /// Security groups besides the cluster's for nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub additional_security_groups: Vec<AwsResourceReference>,
    /// Launch spot instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_market_options: Option<SpotMarketOptions>,
    /// The instance metadata service (IMDSv2 required, hop limit 1 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_metadata_options: Option<InstanceMetadataOptions>,
}

/// The observed state of an `AWSMachinePool`: the contract's fields and the group's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachinePoolStatus {
    /// `initialization`, `ready`, `replicas`, `infrastructureMachineKind`, `conditions`
    /// (infrastructure machine pool contract).
    #[serde(flatten)]
    pub contract: InfraMachinePoolStatus,
    /// The launch template new instances are launched from.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "launchTemplateID"
    )]
    #[schemars(length(max = 64))]
    pub launch_template_id: Option<String>,
    /// The revision of the model new instances are launched from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub model_revision: Option<String>,
}

impl AWSMachinePool {
    /// The spec of an `AWSMachine` describing one of the pool's instances (without its
    /// provider ID): the launch template's fields, the pool's tags and `cloudInit`.
    pub fn machine_spec(&self) -> AWSMachineSpec {
        let template = &self.spec.aws_launch_template;
        AWSMachineSpec {
            provider_id: None,
            ami: template.ami.clone(),
            image_lookup_format: template.image_lookup_format.clone(),
            image_lookup_org: template.image_lookup_org.clone(),
            image_lookup_base_os: template.image_lookup_base_os.clone(),
            instance_type: template.instance_type.clone(),
            additional_tags: self.spec.additional_tags.clone(),
            iam_instance_profile: template.iam_instance_profile.clone(),
            public_ip: None,
            additional_security_groups: template.additional_security_groups.clone(),
            subnet: None,
            ssh_key_name: template.ssh_key_name.clone(),
            root_volume: template.root_volume.clone(),
            spot_market_options: template.spot_market_options.clone(),
            instance_metadata_options: template.instance_metadata_options.clone(),
            cloud_init: self.spec.cloud_init.clone(),
        }
    }
}

impl InfraMachinePool for AWSMachinePool {
    type Machine = AWSMachine;

    fn machine_for(&self, instance: &capi_core::PoolInstance) -> AWSMachine {
        let mut spec = self.machine_spec();
        spec.provider_id = Some(instance.provider_id.clone());
        AWSMachine::new("", spec)
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

    /// The launch template and how bootstrap data reaches the instances make an instance:
    /// sizes, zones, subnets and tags change in place and roll nothing.
    fn model(&self) -> serde_json::Value {
        serde_json::json!({
            "awsLaunchTemplate": self.spec.aws_launch_template,
            "cloudInit": self.spec.cloud_init,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(json: serde_json::Value) -> AWSMachinePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSMachinePool",
            "metadata": {"name": "workers"},
            "spec": json,
        }))
        .unwrap()
    }

    #[test]
    fn sizes_default_to_one_and_a_capa_manifest_reads_the_same() {
        let pool = pool(serde_json::json!({
            "availabilityZones": ["us-east-1a"],
            "awsLaunchTemplate": {"instanceType": "t3.large", "ami": {"id": "ami-0123"}},
        }));
        assert_eq!((pool.spec.min_size, pool.spec.max_size), (1, 1));
        assert_eq!(pool.spec.aws_launch_template.instance_type, "t3.large");
    }

    #[test]
    fn only_the_launch_template_and_cloud_init_make_the_model() {
        let small = pool(serde_json::json!({"awsLaunchTemplate": {"instanceType": "t3.small"}}));
        let mut resized = small.clone();
        resized.spec.max_size = 10;
        resized.spec.availability_zones = vec!["us-east-1b".into()];
        resized
            .spec
            .additional_tags
            .insert("team".into(), "a".into());
        resized.spec.provider_id_list = vec!["aws:///us-east-1a/i-1".into()];
        assert_eq!(small.model(), resized.model());
        let mut larger = small.clone();
        larger.spec.aws_launch_template.instance_type = "t3.large".into();
        assert_ne!(small.model(), larger.model());
    }

    #[test]
    fn an_instances_machine_describes_it_as_the_template_does() {
        let pool = pool(serde_json::json!({
            "additionalTags": {"team": "a"},
            "awsLaunchTemplate": {"instanceType": "t3.small", "sshKeyName": "ops"},
        }));
        let instance = capi_core::PoolInstance::new(
            "aws:///us-east-1a/i-1",
            "i-1",
            capi_core::InstanceState::Running,
        );
        let machine = pool.machine_for(&instance);
        assert_eq!(
            machine.spec.provider_id.as_deref(),
            Some("aws:///us-east-1a/i-1")
        );
        assert_eq!(machine.spec.instance_type, "t3.small");
        assert_eq!(machine.spec.ssh_key_name.as_deref(), Some("ops"));
        assert_eq!(machine.spec.additional_tags.get("team").unwrap(), "a");
    }
}
