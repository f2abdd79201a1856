//! The identities an `AWSCluster` may name in `identityRef`, as CAPA's multi-tenancy kinds:
//! cluster-scoped objects an operator creates, each saying which namespaces may use it
//! (`allowedNamespaces`, [`AllowedNamespaces`]). A tenant who may write `AWSCluster`s in its
//! own namespace can therefore use only the AWS accounts an operator handed to that namespace.
//!
//! - [`AWSClusterControllerIdentity`] `default`: the manager's own credentials (the SDK's default
//!   chain: environment, web identity, instance profile). An `AWSCluster` without `identityRef`
//!   uses it, and it must exist and allow the cluster's namespace; nothing creates it for you.
//! - [`AWSClusterStaticIdentity`]: an access key in a Secret in the **manager's** namespace
//!   (keys `AccessKeyID`, `SecretAccessKey`, optionally `SessionToken`), never readable by
//!   tenants.
//! - [`AWSClusterRoleIdentity`]: a role assumed through STS `AssumeRole`, with the credentials of
//!   another identity (`sourceIdentityRef`), which must allow the namespace too.

use capi_core::api::AllowedNamespaces;
use capi_core::api::validation;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ValidationRule,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cluster::AwsIdentityReference;

/// The only name an [`AWSClusterControllerIdentity`] may have.
pub const CONTROLLER_IDENTITY_NAME: &str = "default";

/// The manager's own credentials, and the namespaces that may use them (CAPA's
/// `AWSClusterControllerIdentity`). A singleton named `default`; its spec cannot change
/// (delete and recreate it to change who may use it, as in CAPA).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AWSClusterControllerIdentity",
    plural = "awsclustercontrolleridentities",
    shortname = "awsci",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AWSClusterControllerIdentity lets the namespaces it allows use the AWS provider manager's own credentials."
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = validation::immutable)]
pub struct AWSClusterControllerIdentitySpec {
    /// The namespaces whose `AWSCluster`s may use it: none when unset, every one with `{}`.
    #[serde(default)]
    pub allowed_namespaces: Option<AllowedNamespaces>,
}

/// An access key kept in a Secret of the manager's namespace, and the namespaces that may use it
/// (CAPA's `AWSClusterStaticIdentity`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AWSClusterStaticIdentity",
    plural = "awsclusterstaticidentities",
    shortname = "awssi",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AWSClusterStaticIdentity lets the namespaces it allows use an access key kept in a Secret of the AWS provider manager's namespace."
)]
#[serde(rename_all = "camelCase")]
pub struct AWSClusterStaticIdentitySpec {
    /// The namespaces whose `AWSCluster`s may use it: none when unset, every one with `{}`.
    #[serde(default)]
    pub allowed_namespaces: Option<AllowedNamespaces>,
    /// The Secret in the manager's namespace with keys `AccessKeyID`, `SecretAccessKey` and
    /// optionally `SessionToken`. Immutable. Once a cluster uses the identity, the identity owns
    /// the Secret (as CAPA's does): `clusterctl move` carries the Secret with the identity, and
    /// deleting the identity deletes the Secret.
    #[schemars(
        length(min = 1, max = 253),
        pattern(validation::DNS_SUBDOMAIN),
        transform = validation::immutable
    )]
    pub secret_ref: String,
}

/// A role assumed with STS `AssumeRole`, and the namespaces that may use it (CAPA's
/// `AWSClusterRoleIdentity`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.capi-rs.dev",
    version = "v1alpha1",
    kind = "AWSClusterRoleIdentity",
    plural = "awsclusterroleidentities",
    shortname = "awsri",
    derive = "PartialEq",
    derive = "Default",
    category = "cluster-api",
    doc = "AWSClusterRoleIdentity lets the namespaces it allows use an IAM role, assumed with the credentials of another identity.",
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.roleARN")
)]
#[serde(rename_all = "camelCase")]
pub struct AWSClusterRoleIdentitySpec {
    /// The namespaces whose `AWSCluster`s may use it: none when unset, every one with `{}`.
    #[serde(default)]
    pub allowed_namespaces: Option<AllowedNamespaces>,
    /// The role's ARN.
    #[serde(rename = "roleARN")]
    #[schemars(
        length(min = 20, max = 2048),
        pattern(r"^arn:[a-z0-9-]+:iam::[0-9]{12}:role/.+$")
    )]
    pub role_arn: String,
    /// The session name AWS records in CloudTrail (`capi-rs-<identity name>` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 64), pattern(r"^[\w+=,.@-]+$"))]
    pub session_name: Option<String>,
    /// How long the assumed credentials last (900 to 43200; STS's default of 3600 when unset).
    /// They are renewed before they expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 900, max = 43200))]
    pub duration_seconds: Option<i32>,
    /// A session policy narrowing the role's permissions (JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub inline_policy: Option<String>,
    /// The external ID the role's trust policy asks for.
    #[serde(
        rename = "externalID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 2, max = 1224))]
    pub external_id: Option<String>,
    /// The identity whose credentials assume the role (any identity kind but a Secret; it must
    /// allow the cluster's namespace too).
    pub source_identity_ref: AwsIdentityReference,
}

/// The controller identity's CRD, refusing any name but [`CONTROLLER_IDENTITY_NAME`].
pub(super) fn controller_identity_crd() -> CustomResourceDefinition {
    use kube::CustomResourceExt;
    let mut crd = AWSClusterControllerIdentity::crd();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            schema
                .x_kubernetes_validations
                .get_or_insert_with(Vec::new)
                .push(ValidationRule {
                    rule: format!("self.metadata.name == '{CONTROLLER_IDENTITY_NAME}'"),
                    message: Some(format!(
                        "AWSClusterControllerIdentity is a singleton: its name must be {CONTROLLER_IDENTITY_NAME}"
                    )),
                    ..ValidationRule::default()
                });
        }
    }
    crd
}
