//! `AWSCluster` (a cluster's VPC, subnets, gateways, security groups and API server load
//! balancer) and `AWSClusterTemplate`.

use std::collections::BTreeMap;

use capi_core::api::validation;
use capi_core::api::{ApiEndpoint, TemplateMetadata};
use capi_core::infra::{InfraCluster, InfraClusterStatus};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::network::{
    IngressRule, LoadBalancerScheme, LoadBalancerType, NetworkSpec, NetworkStatus,
};
use super::tags::{Tags, user_tags};

/// An AWS region (`us-east-1`, `eu-central-2`, `us-gov-west-1`).
pub(crate) const REGION: &str = r"^[a-z]{2}(-[a-z]+)+-[0-9]+$";

/// Where the provider's AWS credentials come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AwsIdentityKind {
    /// A Secret in the object's own namespace with keys `AccessKeyID`, `SecretAccessKey` and
    /// optionally `SessionToken` (the keys of CAPA's static identity Secret).
    #[default]
    Secret,
    /// The manager's own credentials ([`super::AWSClusterControllerIdentity`]; its name is
    /// `default`).
    #[serde(rename = "AWSClusterControllerIdentity")]
    ControllerIdentity,
    /// An access key in a Secret of the manager's namespace ([`super::AWSClusterStaticIdentity`]).
    #[serde(rename = "AWSClusterStaticIdentity")]
    StaticIdentity,
    /// A role assumed through STS ([`super::AWSClusterRoleIdentity`]).
    #[serde(rename = "AWSClusterRoleIdentity")]
    RoleIdentity,
}

/// The credentials an `AWSCluster`'s resources are managed with (CAPA's `identityRef`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsIdentityReference {
    /// The name of the Secret or of the identity (`default` for the controller identity).
    #[schemars(length(min = 1, max = 253), pattern(validation::DNS_SUBDOMAIN))]
    pub name: String,
    /// What `name` names.
    pub kind: AwsIdentityKind,
}

/// The API server's load balancer (CAPA's `AWSLoadBalancerSpec`, network load balancers only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsLoadBalancerSpec {
    /// Its name (`<cluster>-apiserver`, or a hash of it when longer than 32, when unset).
    /// Immutable once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 32),
        pattern(r"^[A-Za-z0-9]([A-Za-z0-9]{0,31}|[-A-Za-z0-9]{0,30}[A-Za-z0-9])$")
    )]
    pub name: Option<String>,
    /// `internet-facing` (in public subnets; the default) or `internal` (in private ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<LoadBalancerScheme>,
    /// Spread each request over the targets of every zone, not only the zone it arrived in.
    #[serde(default)]
    pub cross_zone_load_balancing: bool,
    /// Subnets to put it in, by ID (the cluster's public or private ones, by scheme, when
    /// empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 255)))]
    pub subnets: Vec<String>,
    /// Security groups added to its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4), inner(length(min = 1, max = 255)))]
    pub additional_security_groups: Vec<String>,
    /// Rules of its security group (the API server port from anywhere when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub ingress_rules: Vec<IngressRule>,
    /// `nlb` (the default) or `disabled` (no load balancer: `controlPlaneEndpoint` must be set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_type: Option<LoadBalancerType>,
    /// Keep the client's address on the way to the API server (the target group's
    /// `preserve_client_ip`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preserve_client_ip: bool,
}

/// The cluster-wide infrastructure of a workload cluster on AWS.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AWSCluster",
    plural = "awsclusters",
    shortname = "awsc",
    namespaced,
    status = "AWSClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AWSCluster is the VPC, subnets, gateways, security groups and API server load balancer of a cluster on AWS.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(
        name = "VPC",
        type_ = "string",
        json_path = ".status.networkStatus.vpc.id"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AWSClusterSpec {
    /// The region.
    #[schemars(length(min = 1, max = 64), pattern(REGION))]
    pub region: String,
    /// The network.
    #[serde(default, skip_serializing_if = "is_default_network")]
    pub network: NetworkSpec,
    /// The credentials: the controller identity `default` (the manager's own credentials, if it
    /// allows this namespace) when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<AwsIdentityReference>,
    /// An EC2 key pair for SSH on every machine that names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub ssh_key_name: Option<String>,
    /// The endpoint: set by the provider to the load balancer's DNS name, or by the user when
    /// the load balancer is disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Tags on every resource the provider creates for the cluster and its machines.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "user_tags")]
    pub additional_tags: Tags,
    /// The API server's load balancer (a network load balancer when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_load_balancer: Option<AwsLoadBalancerSpec>,
    /// The AMI name format for machines that name no AMI (CAPA's
    /// `capa-ami-{{.BaseOS}}-?{{.K8sVersion}}-*` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub image_lookup_format: Option<String>,
    /// The AWS account that owns those AMIs (CAPA's, `258751437250`, when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub image_lookup_org: Option<String>,
    /// The base OS in the AMI name (`ubuntu-24.04` when unset).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "imageLookupBaseOS"
    )]
    #[schemars(length(min = 1, max = 64))]
    pub image_lookup_base_os: Option<String>,
}

fn is_default_network(network: &NetworkSpec) -> bool {
    network == &NetworkSpec::default()
}

/// The observed state of an `AWSCluster`: the contract fields and what was found or created.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSClusterStatus {
    /// `initialization`, `failureDomains`, `conditions` (infrastructure provider contract).
    #[serde(flatten)]
    pub contract: InfraClusterStatus,
    /// The network, security groups and load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_status: Option<NetworkStatus>,
}

impl InfraCluster for AWSCluster {
    fn control_plane_endpoint(&self) -> Option<&ApiEndpoint> {
        self.spec.control_plane_endpoint.as_ref()
    }

    fn infra_status(&self) -> Option<&InfraClusterStatus> {
        self.status.as_ref().map(|s| &s.contract)
    }
}

/// A template for `AWSCluster`s, used by a `ClusterClass`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AWSClusterTemplate",
    plural = "awsclustertemplates",
    shortname = "awsct",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AWSClusterTemplate stamps out AWSClusters for a ClusterClass.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AWSClusterTemplateSpec {
    /// What each cluster gets.
    pub template: AWSClusterTemplateResource,
}

/// `AWSClusterTemplate.spec.template`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSClusterTemplateResource {
    /// Labels and annotations for the clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The spec of each cluster.
    pub spec: AWSClusterSpec,
}
