//! `KubeadmConfig` and `KubeadmConfigTemplate`, group `bootstrap.cluster.x-k8s.io`, version `v1beta2`.
//!
//! Every field of upstream Cluster API v1.14's schema, with its bounds (checked field by field
//! against upstream's CRD by `capi-testing/tests/upstream_schemas.rs`): nothing a manifest
//! written for upstream carries is pruned. The renderer ([`crate::render`]) carries out all of it
//! — kubeadm's `ClusterConfiguration`, `InitConfiguration` and `JoinConfiguration` (v1beta3 or
//! v1beta4 by the machine's version; fields only v1beta4 has are written for it only), files,
//! users with passwords (inline or from a Secret), NTP, commands, and for cloud-config also
//! `bootCommands`, `diskSetup` and `mounts` — except what it refuses by name with what to do
//! instead, in the config's `Ready` condition: `bootCommands`, `diskSetup` and `mounts` with
//! format `ignition`; partition types cloud-init cannot express; `files[].contentFormat:
//! Template`; `users[].inactive`; a `joinConfiguration.discovery.file.kubeConfig` to generate.

use std::collections::BTreeMap;

use capi_core::api::{TemplateMetadata, validation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired bootstrap of one machine.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "KubeadmConfig",
    plural = "kubeadmconfigs",
    namespaced,
    status = "KubeadmConfigStatus",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "KubeadmConfig is the Schema for the kubeadmconfigs API: how one machine bootstraps with kubeadm.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
    ),
    printcolumn(
        name = "Data Secret",
        type_ = "string",
        json_path = ".status.dataSecretName"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(remote = "Self", rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmConfigSpec {
    /// Cluster-wide kubeadm settings (used for the first control-plane machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_configuration: Option<Box<ClusterConfiguration>>,
    /// Settings of `kubeadm init`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_configuration: Option<Box<InitConfiguration>>,
    /// Settings of `kubeadm join`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_configuration: Option<Box<JoinConfiguration>>,
    /// Files written before kubeadm runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 200))]
    pub files: Vec<File>,
    /// Partitions and file systems created before kubeadm runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_setup: Option<DiskSetup>,
    /// Mounts: each entry is a cloud-init `mounts` line (device, mount point, options…).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(min = 1, max = 100),
        inner(length(min = 1, max = 100), inner(length(min = 1, max = 512)))
    )]
    pub mounts: Vec<Vec<String>>,
    /// Commands run very early in boot, on every boot (cloud-init `bootcmd`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 1000), inner(length(min = 1, max = 10240)))]
    pub boot_commands: Vec<String>,
    /// Commands run before kubeadm.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 1000), inner(length(min = 1, max = 10240)))]
    pub pre_kubeadm_commands: Vec<String>,
    /// Commands run after kubeadm.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 1000), inner(length(min = 1, max = 10240)))]
    pub post_kubeadm_commands: Vec<String>,
    /// Users created on the machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100))]
    pub users: Vec<User>,
    /// Time synchronisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntp: Option<Ntp>,
    /// The output format; `cloud-config` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// Ignition-specific settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignition: Option<IgnitionSpec>,
    /// kubeadm's `--v` log level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<i32>,
}
capi_core::absent_spec_is_default!(KubeadmConfigSpec);

/// The bootstrap data format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Format {
    /// cloud-init cloud-config (Ubuntu, CentOS, …).
    #[default]
    #[serde(rename = "cloud-config")]
    CloudConfig,
    /// Ignition v3 (Fedora CoreOS, Flatcar).
    #[serde(rename = "ignition")]
    Ignition,
}

/// A command-line argument of a component: `--name=value`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Arg {
    /// The flag's name, without dashes.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// The flag's value.
    #[schemars(length(max = 1024))]
    pub value: String,
}

/// `clusterConfiguration`: cluster-wide kubeadm settings, rendered into kubeadm's
/// `ClusterConfiguration` of the first control-plane machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ClusterConfiguration {
    /// etcd settings: stacked (`local`) or `external`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<Etcd>,
    /// A stable address of the control plane (`host` or `host:port`); the Cluster's
    /// `spec.controlPlaneEndpoint` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub control_plane_endpoint: Option<String>,
    /// kube-apiserver settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server: Option<ApiServer>,
    /// kube-controller-manager settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_manager: Option<ControlPlaneComponent>,
    /// kube-scheduler settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<ControlPlaneComponent>,
    /// CoreDNS image overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// Where certificates are kept on the node (`/etc/kubernetes/pki` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub certificates_dir: Option<String>,
    /// Where control-plane images come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image_repository: Option<String>,
    /// Feature gates for kubeadm.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
    /// The key type of the certificates kubeadm creates (kubeadm v1beta4, Kubernetes 1.31 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_algorithm: Option<EncryptionAlgorithm>,
    /// How long certificates kubeadm signs are valid, in days (kubeadm v1beta4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1095))]
    pub certificate_validity_period_days: Option<i32>,
    /// How long the CA certificates kubeadm creates are valid, in days (kubeadm v1beta4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub ca_certificate_validity_period_days: Option<i32>,
}

/// The key type of certificates kubeadm creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum EncryptionAlgorithm {
    /// ECDSA on P-256.
    #[serde(rename = "ECDSA-P256")]
    EcdsaP256,
    /// ECDSA on P-384.
    #[serde(rename = "ECDSA-P384")]
    EcdsaP384,
    /// RSA, 2048 bits.
    #[serde(rename = "RSA-2048")]
    Rsa2048,
    /// RSA, 3072 bits.
    #[serde(rename = "RSA-3072")]
    Rsa3072,
    /// RSA, 4096 bits.
    #[serde(rename = "RSA-4096")]
    Rsa4096,
}

impl EncryptionAlgorithm {
    /// kubeadm's name of it.
    pub fn as_str(self) -> &'static str {
        match self {
            EncryptionAlgorithm::EcdsaP256 => "ECDSA-P256",
            EncryptionAlgorithm::EcdsaP384 => "ECDSA-P384",
            EncryptionAlgorithm::Rsa2048 => "RSA-2048",
            EncryptionAlgorithm::Rsa3072 => "RSA-3072",
            EncryptionAlgorithm::Rsa4096 => "RSA-4096",
        }
    }
}

/// kube-apiserver settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ApiServer {
    /// Extra flags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), transform = validation::unique_extra_arg_names)]
    pub extra_args: Vec<Arg>,
    /// Extra host paths mounted into the static pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100))]
    pub extra_volumes: Vec<HostPathMount>,
    /// Extra environment variables of the static pod (kubeadm v1beta4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100))]
    pub extra_envs: Vec<EnvVar>,
    /// Extra subject alternative names of the serving certificate.
    #[serde(default, rename = "certSANs", skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), inner(length(min = 1, max = 253)))]
    pub cert_sans: Vec<String>,
}

/// Settings of a control-plane component's static pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ControlPlaneComponent {
    /// Extra flags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), transform = validation::unique_extra_arg_names)]
    pub extra_args: Vec<Arg>,
    /// Extra host paths mounted into the static pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100))]
    pub extra_volumes: Vec<HostPathMount>,
    /// Extra environment variables of the static pod (kubeadm v1beta4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100))]
    pub extra_envs: Vec<EnvVar>,
}

/// A host path mounted into a control-plane static pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostPathMount {
    /// The volume's name in the pod.
    #[schemars(length(min = 1, max = 512))]
    pub name: String,
    /// The path on the host.
    #[schemars(length(min = 1, max = 512))]
    pub host_path: String,
    /// Where it is mounted in the pod.
    #[schemars(length(min = 1, max = 512))]
    pub mount_path: String,
    /// Mount it read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The host path's type (`DirectoryOrCreate`, `File`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_type: Option<String>,
}

/// An environment variable of a control-plane static pod (`corev1.EnvVar`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    /// The variable's name.
    pub name: String,
    /// Its value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Where its value comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
}

/// Where an environment variable's value comes from (`corev1.EnvVarSource`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarSource {
    /// A key of a ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeySelector>,
    /// A field of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<ObjectFieldSelector>,
    /// A key of an env file in a volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_key_ref: Option<FileKeySelector>,
    /// A resource of a container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_field_ref: Option<ResourceFieldSelector>,
    /// A key of a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeySelector>,
}

/// A key of a ConfigMap or Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct KeySelector {
    /// The key.
    pub key: String,
    /// The object's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = ""))]
    pub name: Option<String>,
    /// Whether the object or key may be missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// A field of the pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct ObjectFieldSelector {
    /// The schema version `fieldPath` is written in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The field's path.
    pub field_path: String,
}

/// A key of an env file in one of the pod's volumes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct FileKeySelector {
    /// The key.
    pub key: String,
    /// Whether the file or key may be missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub optional: Option<bool>,
    /// The file's path in the volume.
    pub path: String,
    /// The volume's name.
    pub volume_name: String,
}

/// A resource of a container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct ResourceFieldSelector {
    /// The container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    /// The unit the value is expressed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity")]
    pub divisor: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    /// The resource (`limits.cpu`, …).
    pub resource: String,
}

/// A resource quantity (`resource.Quantity`): an integer, or a string such as `500m` or `1Gi`.
fn quantity(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
    })
}

/// etcd settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct Etcd {
    /// A local (stacked) etcd on each control-plane node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalEtcd>,
    /// An etcd cluster outside the control-plane nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalEtcd>,
}

/// A stacked etcd.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct LocalEtcd {
    /// Where etcd's image comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image_repository: Option<String>,
    /// etcd's image tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub image_tag: Option<String>,
    /// Where etcd keeps its data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub data_dir: Option<String>,
    /// Extra flags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), transform = validation::unique_extra_arg_names)]
    pub extra_args: Vec<Arg>,
    /// Extra environment variables of the static pod (kubeadm v1beta4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100))]
    pub extra_envs: Vec<EnvVar>,
    /// Extra subject alternative names of etcd's serving certificate.
    #[serde(
        default,
        rename = "serverCertSANs",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(min = 1, max = 100), inner(length(min = 1, max = 253)))]
    pub server_cert_sans: Vec<String>,
    /// Extra subject alternative names of etcd's peer certificate.
    #[serde(
        default,
        rename = "peerCertSANs",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(min = 1, max = 100), inner(length(min = 1, max = 253)))]
    pub peer_cert_sans: Vec<String>,
}

/// An external etcd cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalEtcd {
    /// The members' client URLs.
    #[schemars(length(min = 1, max = 50), inner(length(min = 1, max = 512)))]
    pub endpoints: Vec<String>,
    /// The CA certificate file on the node.
    #[schemars(length(min = 1, max = 512))]
    pub ca_file: String,
    /// The client certificate file on the node.
    #[schemars(length(min = 1, max = 512))]
    pub cert_file: String,
    /// The client key file on the node.
    #[schemars(length(min = 1, max = 512))]
    pub key_file: String,
}

/// CoreDNS image overrides.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct Dns {
    /// The image repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image_repository: Option<String>,
    /// The image tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub image_tag: Option<String>,
}

/// `initConfiguration`: settings of `kubeadm init` on the first control-plane machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct InitConfiguration {
    /// Bootstrap tokens `kubeadm init` creates besides the one this provider generates for joining
    /// machines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100))]
    pub bootstrap_tokens: Vec<BootstrapToken>,
    /// How the node registers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_registration: Option<NodeRegistration>,
    /// Where this control-plane node's API server listens.
    #[serde(
        default,
        rename = "localAPIEndpoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub local_api_endpoint: Option<LocalApiEndpoint>,
    /// kubeadm phases to skip.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 50), inner(length(min = 1, max = 256)))]
    pub skip_phases: Vec<String>,
    /// Patches kubeadm applies to the components' manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches: Option<Patches>,
    /// kubeadm's timeouts (kubeadm v1beta4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<Timeouts>,
}

/// A bootstrap token `kubeadm init` creates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapToken {
    /// The token, `[a-z0-9]{6}.[a-z0-9]{16}`.
    #[schemars(length(min = 1, max = 23))]
    pub token: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub description: Option<String>,
    /// How long it lives, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds: Option<i32>,
    /// When it expires (instead of `ttlSeconds`; RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation::rfc3339_time")]
    pub expires: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// What it may be used for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), inner(length(min = 1, max = 256)))]
    pub usages: Vec<String>,
    /// The groups it authenticates as.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), inner(length(min = 1, max = 256)))]
    pub groups: Vec<String>,
}

/// Where kubeadm finds patches for the components' manifests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct Patches {
    /// A directory of patch files on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub directory: Option<String>,
}

/// kubeadm's timeouts, in seconds (kubeadm v1beta4).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct Timeouts {
    /// Waiting for the control-plane components to report healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub control_plane_component_health_check_seconds: Option<i32>,
    /// Waiting for the kubelet to report healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub kubelet_health_check_seconds: Option<i32>,
    /// A call to the Kubernetes API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "kubernetesAPICallSeconds")]
    #[schemars(range(min = 0))]
    pub kubernetes_api_call_seconds: Option<i32>,
    /// A call to etcd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "etcdAPICallSeconds")]
    #[schemars(range(min = 0))]
    pub etcd_api_call_seconds: Option<i32>,
    /// The kubelet's TLS bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "tlsBootstrapSeconds")]
    #[schemars(range(min = 0))]
    pub tls_bootstrap_seconds: Option<i32>,
    /// Discovery of the cluster during a join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub discovery_seconds: Option<i32>,
}

impl Timeouts {
    /// kubeadm v1beta4's `timeouts` document part: each set field as a duration.
    pub fn to_kubeadm(&self) -> serde_json::Map<String, serde_json::Value> {
        [
            (
                "controlPlaneComponentHealthCheck",
                self.control_plane_component_health_check_seconds,
            ),
            ("kubeletHealthCheck", self.kubelet_health_check_seconds),
            ("kubernetesAPICall", self.kubernetes_api_call_seconds),
            ("etcdAPICall", self.etcd_api_call_seconds),
            ("tlsBootstrap", self.tls_bootstrap_seconds),
            ("discovery", self.discovery_seconds),
        ]
        .into_iter()
        .filter_map(|(key, seconds)| Some((key.to_string(), format!("{}s", seconds?).into())))
        .collect()
    }
}

/// `joinConfiguration`: settings of `kubeadm join`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct JoinConfiguration {
    /// How the node registers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_registration: Option<NodeRegistration>,
    /// The cluster CA's certificate file on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub ca_cert_path: Option<String>,
    /// How the node finds the cluster; filled in by this provider (a bootstrap token and the CA's
    /// hash) where unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<Discovery>,
    /// Present for control-plane machines that join an existing control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<JoinControlPlane>,
    /// kubeadm phases to skip.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 50), inner(length(min = 1, max = 256)))]
    pub skip_phases: Vec<String>,
    /// Patches kubeadm applies to the components' manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patches: Option<Patches>,
    /// kubeadm's timeouts (kubeadm v1beta4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<Timeouts>,
}

/// How a joining node finds the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct Discovery {
    /// With a bootstrap token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_token: Option<BootstrapTokenDiscovery>,
    /// With a kubeconfig file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileDiscovery>,
    /// The token of the kubelet's TLS bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub tls_bootstrap_token: Option<String>,
}

/// Discovery with a bootstrap token.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct BootstrapTokenDiscovery {
    /// The token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub token: Option<String>,
    /// The API server to ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "apiServerEndpoint")]
    #[schemars(length(min = 1, max = 512))]
    pub api_server_endpoint: Option<String>,
    /// Hashes of the CA's public key (`sha256:<hex>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), inner(length(min = 1, max = 512)))]
    pub ca_cert_hashes: Vec<String>,
    /// Trust the API server without checking the CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "unsafeSkipCAVerification")]
    pub unsafe_skip_ca_verification: Option<bool>,
}

/// Discovery with a kubeconfig file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileDiscovery {
    /// The kubeconfig file's path on the node.
    #[schemars(length(min = 1, max = 512))]
    pub kube_config_path: String,
    /// The kubeconfig written there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_config: Option<FileDiscoveryKubeConfig>,
}

/// A kubeconfig for discovery.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileDiscoveryKubeConfig {
    /// The cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<KubeConfigCluster>,
    /// The user.
    pub user: KubeConfigUser,
}

/// The cluster of a discovery kubeconfig.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeConfigCluster {
    /// The API server's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub server: Option<String>,
    /// The server name checked against the API server's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "tlsServerName")]
    #[schemars(length(min = 1, max = 512))]
    pub tls_server_name: Option<String>,
    /// Skip checking the API server's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "insecureSkipTLSVerify")]
    pub insecure_skip_tls_verify: Option<bool>,
    /// The CA certificates, PEM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "pem_bytes")]
    pub certificate_authority_data: Option<k8s_openapi::ByteString>,
    /// A proxy for requests to the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "proxyURL")]
    #[schemars(length(min = 1, max = 512))]
    pub proxy_url: Option<String>,
}

/// Base64 bytes on the wire, at most 51200 characters, checked by a pattern rather than format
/// `byte`: with that format the API server lets a list through, which no client could decode.
fn pem_bytes(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": 51200,
        "pattern": "^[A-Za-z0-9+/]*={0,2}$",
    })
}

/// The user of a discovery kubeconfig.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeConfigUser {
    /// An auth provider plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_provider: Option<KubeConfigAuthProvider>,
    /// An exec credential plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<KubeConfigAuthExec>,
}

/// An auth provider plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthProvider {
    /// The plugin's name.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Its configuration.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
}

/// An exec credential plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthExec {
    /// The command.
    #[schemars(length(min = 1, max = 1024))]
    pub command: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), inner(length(min = 1, max = 512)))]
    pub args: Vec<String>,
    /// Its environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100))]
    pub env: Vec<KubeConfigAuthExecEnv>,
    /// The `client.authentication.k8s.io` version it speaks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub api_version: Option<String>,
    /// Pass the cluster's information to the plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provide_cluster_info: Option<bool>,
}

/// An environment variable of an exec credential plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthExecEnv {
    /// Its name.
    #[schemars(length(min = 1, max = 512))]
    pub name: String,
    /// Its value.
    #[schemars(length(min = 1, max = 512))]
    pub value: String,
}

/// `joinConfiguration.controlPlane`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinControlPlane {
    /// Where this node's API server listens.
    #[serde(
        default,
        rename = "localAPIEndpoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub local_api_endpoint: Option<LocalApiEndpoint>,
}

/// Where an API server listens on its node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct LocalApiEndpoint {
    /// The address to advertise; the node's default address when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 39))]
    pub advertise_address: Option<String>,
    /// The port (6443 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub bind_port: Option<i32>,
}

/// How a node registers with the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct NodeRegistration {
    /// The node name (the host name when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
    /// The CRI socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub cri_socket: Option<String>,
    /// Taints the node registers with; `None` keeps kubeadm's default (a control-plane node's
    /// `NoSchedule` taint), an empty list registers none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub taints: Option<Vec<NodeTaint>>,
    /// Extra kubelet flags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100), transform = validation::unique_kubelet_extra_arg_names)]
    pub kubelet_extra_args: Vec<Arg>,
    /// Preflight errors to ignore.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 50), inner(length(min = 1, max = 512)))]
    pub ignore_preflight_errors: Vec<String>,
    /// When kubeadm pulls images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// Pull images one at a time (kubeadm v1beta4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_serial: Option<bool>,
}

/// A taint a node registers with (`corev1.Taint`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTaint {
    /// The taint's key.
    pub key: String,
    /// Its value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
    /// When it was added (`NoExecute` taints; RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation::rfc3339_time")]
    pub time_added: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// When images are pulled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PullPolicy {
    /// Always.
    Always,
    /// Only when missing.
    IfNotPresent,
    /// Never.
    Never,
}

/// A file to write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct File {
    /// The absolute path.
    #[schemars(length(min = 1, max = 512))]
    pub path: String,
    /// `user:group`; `root:root` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub owner: Option<String>,
    /// The octal mode, e.g. `0640`; `0644` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub permissions: Option<String>,
    /// How `content` is encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
    /// Append instead of replacing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append: Option<bool>,
    /// The content, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub content: Option<String>,
    /// The content, from a Secret key in the config's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_from: Option<FileSource>,
    /// Whether `content` is written as is (`Raw`, the default) or as a Go template of the
    /// machine's facts (`Template`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_format: Option<ContentFormat>,
}

/// How a file's content is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ContentFormat {
    /// As is.
    Raw,
    /// As a template of the machine's facts.
    Template,
}

/// How file content is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Encoding {
    /// Base64.
    #[serde(rename = "base64")]
    Base64,
    /// Gzip.
    #[serde(rename = "gzip")]
    Gzip,
    /// Gzip, then base64.
    #[serde(rename = "gzip+base64")]
    GzipBase64,
}

/// Where file content comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileSource {
    /// A key of a Secret.
    pub secret: SecretFileSource,
}

/// A key of a Secret in the config's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretFileSource {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key.
    #[schemars(length(min = 1, max = 256))]
    pub key: String,
}

/// A user to create.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct User {
    /// The login name.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// The full name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub gecos: Option<String>,
    /// Additional groups, comma separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub groups: Option<String>,
    /// The home directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub home_dir: Option<String>,
    /// Create the user inactive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inactive: Option<bool>,
    /// The login shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub shell: Option<String>,
    /// A hashed password, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub passwd: Option<String>,
    /// A hashed password, from a Secret key in the config's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passwd_from: Option<PasswdSource>,
    /// The primary group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub primary_group: Option<String>,
    /// Lock the password (default true: keys only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_password: Option<bool>,
    /// A sudoers rule, e.g. `ALL=(ALL) NOPASSWD:ALL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub sudo: Option<String>,
    /// SSH public keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 2048)))]
    pub ssh_authorized_keys: Vec<String>,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A password hash is a secret: never in logs or errors.
        f.debug_struct("User")
            .field("name", &self.name)
            .field("groups", &self.groups)
            .field("passwd", &self.passwd.as_ref().map(|_| "<redacted>"))
            .field("passwd_from", &self.passwd_from)
            .field("sudo", &self.sudo)
            .finish_non_exhaustive()
    }
}

/// Where a user's password hash comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswdSource {
    /// A key of a Secret.
    pub secret: SecretFileSource,
}

/// Partitions and file systems cloud-init creates before kubeadm runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct DiskSetup {
    /// Partition tables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub partitions: Vec<Partition>,
    /// File systems.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub filesystems: Vec<Filesystem>,
}

/// A partition table of one device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = layout_or_disk_layout)]
pub struct Partition {
    /// The device, e.g. `/dev/sdb`.
    #[schemars(length(min = 1, max = 256))]
    pub device: String,
    /// One partition over the whole device (`true`), or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<bool>,
    /// The partitions, by share of the device (instead of `layout`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 100))]
    pub disk_layout: Vec<PartitionSpec>,
    /// Replace an existing partition table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    /// `mbr` or `gpt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_type: Option<PartitionTableType>,
}

/// Exactly one of `layout` and `diskLayout`, as upstream's schema says.
fn layout_or_disk_layout(schema: &mut schemars::Schema) {
    validation::add_rule(
        schema,
        "[has(self.layout),has(self.diskLayout)].filter(x,x==true).size() == 1",
        "exactly one of layout or diskLayout must be set",
    );
}

/// One partition of a device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionSpec {
    /// Its share of the device, in percent.
    #[schemars(range(min = 1, max = 100))]
    pub percentage: i32,
    /// Its type: a name (`Linux`, `LinuxSwap`, …) or a GUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 36), transform = partition_type)]
    pub partition_type: Option<String>,
}

fn partition_type(schema: &mut schemars::Schema) {
    validation::add_rule(
        schema,
        "self.matches('^(Linux|LinuxSwap|LinuxRAID|LVM|Fat32|NTFS|LinuxExtended|[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12})$')",
        "partitionType must be a known name or a GUID",
    );
}

/// A partition table type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PartitionTableType {
    /// Master boot record.
    #[serde(rename = "mbr")]
    Mbr,
    /// GUID partition table.
    #[serde(rename = "gpt")]
    Gpt,
}

/// A file system to create.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Filesystem {
    /// The device.
    #[schemars(length(min = 1, max = 256))]
    pub device: String,
    /// The file system type (`ext4`, `xfs`, …).
    #[schemars(length(min = 1, max = 128))]
    pub filesystem: String,
    /// Its label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub label: Option<String>,
    /// The partition (`auto`, `any`, `none`, or a number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub partition: Option<String>,
    /// Create it even if one exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    /// Replace a file system of this type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "replaceFS")]
    #[schemars(length(min = 1, max = 128))]
    pub replace_fs: Option<String>,
    /// Extra options of `mkfs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 256)))]
    pub extra_opts: Vec<String>,
}

/// Time synchronisation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct Ntp {
    /// NTP servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 512)))]
    pub servers: Vec<String>,
    /// Whether to enable it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Ignition-specific settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct IgnitionSpec {
    /// Extra configuration merged into the rendered Ignition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_linux_config: Option<ContainerLinuxConfig>,
}

/// Extra Ignition configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ContainerLinuxConfig {
    /// An Ignition v3 JSON fragment whose `systemd.units` and `storage.files` are appended to the
    /// rendered config. (Upstream takes a Container Linux Config YAML here; this SDK takes the
    /// Ignition JSON it would compile to.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32768))]
    pub additional_config: Option<String>,
    /// Fail on unknown fields in `additionalConfig`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// The observed state of a `KubeadmConfig`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmConfigStatus {
    /// Bootstrap milestones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<KubeadmConfigInitialization>,
    /// The Secret holding the bootstrap data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub data_secret_name: Option<String>,
    /// The latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_generation: Option<i64>,
    /// `Ready`, `DataSecretAvailable`, …
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "validation::conditions")]
    pub conditions: Vec<Condition>,
    // Boxed: mostly unset, and a KubeadmConfig is held once per machine in the bootstrap
    // controller's cache; boxed, a KubeadmConfig fits the allocator's 768-byte class, not 896.
    /// Fields of the `v1beta1` status, kept for clients of the old version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Box<KubeadmConfigDeprecatedStatus>>,
}

/// `KubeadmConfig.status.deprecated`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigDeprecatedStatus {
    /// The `v1beta1` fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<KubeadmConfigV1Beta1Status>,
}

/// The status fields of `v1beta1`, for its clients.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigV1Beta1Status {
    /// Conditions in the `v1beta1` shape.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<capi_core::api::V1Beta1Condition>,
    /// A terminal failure's reason (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_reason: Option<String>,
    /// A terminal failure's message (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub failure_message: Option<String>,
}

/// `KubeadmConfig.status.initialization`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmConfigInitialization {
    /// The bootstrap data Secret exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_created: Option<bool>,
}

/// Bootstrap configs stamped out for the machines of a `MachineDeployment`/`MachineSet`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "KubeadmConfigTemplate",
    plural = "kubeadmconfigtemplates",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "KubeadmConfigTemplate is the Schema for the kubeadmconfigtemplates API."
)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct KubeadmConfigTemplateSpec {
    /// The configs to create.
    pub template: KubeadmConfigTemplateResource,
}
capi_core::absent_spec_is_default!(KubeadmConfigTemplateSpec);

/// `KubeadmConfigTemplate.spec.template`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct KubeadmConfigTemplateResource {
    /// Labels and annotations of each config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minProperties" = 1))]
    pub metadata: Option<TemplateMetadata>,
    /// The spec of each config (none: an empty spec).
    #[serde(default)]
    #[schemars(transform = validation::without_default)]
    pub spec: KubeadmConfigSpec,
}

/// A `KubeadmConfig` with upstream's defaults has no `spec`, as here (the root spec is optional,
/// an absent one read as the default). But kube's root type always writes its spec, a default
/// one as `spec: {}`, so the root spec is exempt from the `minProperties` its type carries
/// elsewhere (a template's or a control plane's) and upstream's refuses.
fn spec_may_be_empty(
    mut crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        if let Some(spec) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
        {
            spec.min_properties = None;
        }
    }
    capi_core::crd::with_optional_spec(crd)
}

/// The CRDs of this crate, with the contract label `cluster.x-k8s.io/v1beta2: v1beta2`.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    [
        spec_may_be_empty(KubeadmConfig::crd()),
        capi_core::crd::with_optional_spec(KubeadmConfigTemplate::crd()),
    ]
    .into_iter()
    .map(|crd| capi_core::crd::as_upstream(capi_core::crd::with_contract_version(crd, "v1beta2")))
    .collect()
}
