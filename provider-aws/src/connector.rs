//! From an `AWSCluster` to the clients that serve it: its region and its `identityRef` — one of
//! the cluster-scoped identities of [`crate::api::identity`] (the controller identity `default`
//! when unset), or a Secret of static credentials in the cluster's own namespace.
//!
//! Before any client is handed out, on every call, the identity (and each identity a role
//! identity's credentials come from) must admit the cluster's namespace: a denied cluster gets
//! an invalid-configuration error with reason `PrincipalUsageUnauthorized` (or
//! `SourcePrincipalUsageUnauthorized` for a source identity) naming the identity and the
//! namespace, and no call reaches AWS. Revoking a namespace takes effect at its next reconcile.

#[cfg(feature = "sdk")]
use std::sync::Arc;

use async_trait::async_trait;
use capi_core::ActuatorError;
use kube::ResourceExt;

use crate::api::{AWSCluster, AwsIdentityKind, AwsIdentityReference};
use crate::cloud::Clients;

/// Gives the actuators their clients; mocked in unit tests.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Connector: Send + Sync {
    /// The clients of `cluster`'s region with its identity's credentials.
    async fn connect(&self, cluster: &AWSCluster) -> Result<Clients, ActuatorError>;
}

/// The reason of the error a cluster gets when its identity does not admit its namespace
/// (CAPA's condition reason).
pub const PRINCIPAL_USAGE_UNAUTHORIZED: &str = "PrincipalUsageUnauthorized";
/// The reason when an identity a role identity's credentials come from does not admit it.
pub const SOURCE_PRINCIPAL_USAGE_UNAUTHORIZED: &str = "SourcePrincipalUsageUnauthorized";
/// The reason when the named identity does not exist.
pub const IDENTITY_NOT_FOUND: &str = "IdentityNotFound";

/// The longest chain of identities: a cluster's identity and the sources its credentials come
/// from (so at most three role identities, each assumed with the next one's credentials).
#[cfg(feature = "sdk")]
const MAX_CHAIN: usize = 4;

/// What the manager needs in its own namespace, where `AWSClusterStaticIdentity` Secrets are:
/// to make each static identity the owner of its Secret (`patch`), as CAPA does. Grant it with a
/// Role there, never cluster-wide.
pub fn identity_namespace_rbac() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    vec![capi_runtime::rbac::rule("", &["secrets"], &["patch"])]
}

/// What resolving identities reads beside Secrets (which the infrastructure reconcilers'
/// rules already grant): the identity kinds, and namespaces for `allowedNamespaces` selectors.
pub fn rbac() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    use capi_runtime::rbac::rule;
    vec![
        rule(
            crate::api::GROUP,
            &[
                "awsclustercontrolleridentities",
                "awsclusterstaticidentities",
                "awsclusterroleidentities",
            ],
            &["get"],
        ),
        rule("", &["namespaces"], &["get"]),
    ]
}

/// Where an `AWSCluster`'s credentials come from, as a cache key.
#[cfg_attr(not(feature = "sdk"), allow(dead_code))]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Identity {
    /// The Secret `<namespace>/<name>` of the cluster's own namespace.
    Secret(String),
    /// The manager's own credentials.
    Controller,
    /// The `AWSClusterStaticIdentity` of this name.
    Static(String),
    /// The `AWSClusterRoleIdentity` of this name.
    Role(String),
}

/// The identity an `AWSCluster` names: the controller identity when it names none.
fn reference_of(cluster: &AWSCluster) -> AwsIdentityReference {
    cluster
        .spec
        .identity_ref
        .clone()
        .unwrap_or_else(|| AwsIdentityReference {
            name: crate::api::identity::CONTROLLER_IDENTITY_NAME.into(),
            kind: AwsIdentityKind::ControllerIdentity,
        })
}

#[cfg_attr(not(feature = "sdk"), allow(dead_code))]
fn identity_of(cluster: &AWSCluster) -> Identity {
    let reference = reference_of(cluster);
    match reference.kind {
        AwsIdentityKind::Secret => Identity::Secret(format!(
            "{}/{}",
            cluster.namespace().unwrap_or_default(),
            reference.name
        )),
        AwsIdentityKind::ControllerIdentity => Identity::Controller,
        AwsIdentityKind::StaticIdentity => Identity::Static(reference.name),
        AwsIdentityKind::RoleIdentity => Identity::Role(reference.name),
    }
}

/// The refusal of a cluster in `namespace` by the identity `kind` `name`; `source` when the
/// identity is one a role identity's credentials come from.
#[cfg_attr(not(feature = "sdk"), allow(dead_code))]
fn not_permitted(kind: &str, name: &str, namespace: &str, source: bool) -> ActuatorError {
    let reason = if source {
        SOURCE_PRINCIPAL_USAGE_UNAUTHORIZED
    } else {
        PRINCIPAL_USAGE_UNAUTHORIZED
    };
    ActuatorError::invalid_configuration(
        reason,
        format!(
            "namespace {namespace} is not permitted to use {kind} {name}: its \
             spec.allowedNamespaces does not admit this namespace; ask an operator to admit it, \
             or name an identity that does in spec.identityRef"
        ),
    )
}

/// Where the credentials of one identity come from, resolved.
#[cfg(feature = "sdk")]
enum Principal {
    /// The manager's own (the SDK's default chain).
    Controller,
    /// An access key.
    Static(crate::credentials::StaticCredentials),
    /// A role assumed with another principal's credentials.
    Role {
        name: String,
        spec: Box<crate::api::AWSClusterRoleIdentitySpec>,
        source: Box<Principal>,
    },
}

#[cfg(feature = "sdk")]
impl Principal {
    /// What of these credentials must never be shown.
    fn redaction(&self) -> capi_provider::support::redact::Redaction {
        match self {
            Principal::Controller => Default::default(),
            Principal::Static(credentials) => credentials.redaction(),
            Principal::Role { source, .. } => source.redaction(),
        }
    }
}

/// Clients per identity and region, made from the versions (`resourceVersion`s) of the objects
/// the credentials came from.
#[cfg(feature = "sdk")]
type ClientCache = capi_provider::support::client_cache::ClientCache<(Identity, String), Clients>;

/// The production [`Connector`]: resolves identities with the management cluster's client and
/// shares one set of SDK clients per identity, region and version of what the credentials came
/// from between all reconciles, all of a region under one budget ([`crate::throttle`]). The
/// clients of an identity that fails to resolve (gone, denied, its Secret gone) are dropped at
/// once, and any client unused for half an hour ([`capi_provider::support::client_cache`]).
#[cfg(feature = "sdk")]
#[derive(Clone)]
pub struct SecretConnector {
    client: kube::Client,
    identity_namespace: String,
    budgets: crate::throttle::Budgets,
    endpoint_url: Option<String>,
    cache: Arc<ClientCache>,
    /// The UIDs of the static identities whose Secret could not be made theirs, warned about
    /// once each.
    unowned: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

/// The namespace of `AWSClusterStaticIdentity` Secrets when none is given: the manager's, as
/// the shipped manifests install it.
pub const DEFAULT_IDENTITY_NAMESPACE: &str = "capi-aws-system";

#[cfg(feature = "sdk")]
impl SecretConnector {
    /// A connector reading identities and Secrets with `client`, the default budget per region,
    /// static identities' Secrets in [`DEFAULT_IDENTITY_NAMESPACE`].
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            identity_namespace: DEFAULT_IDENTITY_NAMESPACE.into(),
            budgets: crate::throttle::Budgets::default(),
            endpoint_url: None,
            cache: Arc::default(),
            unowned: Arc::default(),
        }
    }

    /// How many sets of clients are held (one per identity and region in use).
    pub fn cached_clients(&self) -> usize {
        self.cache.len()
    }

    /// Every call under these budgets.
    #[must_use]
    pub fn with_budgets(mut self, budgets: crate::throttle::Budgets) -> Self {
        self.budgets = budgets;
        self
    }

    /// Every call to `url` instead of AWS's regional endpoints (a local stand-in such as moto,
    /// or a VPC endpoint); STS's too.
    #[must_use]
    pub fn with_endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// Static identities' Secrets are read in `namespace` (the manager's own, which tenants
    /// cannot read or write).
    #[must_use]
    pub fn with_identity_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.identity_namespace = namespace.into();
        self
    }

    /// The static credentials of Secret `namespace/name`, and its `resourceVersion`.
    async fn secret_credentials(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(String, crate::credentials::StaticCredentials), ActuatorError> {
        let secret = self.secret(namespace, name).await?;
        Self::credentials_of(namespace, name, secret)
    }

    /// The credentials of static identity `identity`, from its Secret in the manager's
    /// namespace, and that Secret's `resourceVersion`. The Secret is made owned by the identity
    /// first (as CAPA does): `clusterctl move` carries a Secret of a provider's namespace only
    /// when something it moves owns it, and the identity moves. A refused patch (an installation
    /// whose Role lacks [`identity_namespace_rbac`]) is logged and the credentials still used.
    async fn static_identity_credentials(
        &self,
        identity: &crate::api::AWSClusterStaticIdentity,
    ) -> Result<(String, crate::credentials::StaticCredentials), ActuatorError> {
        let namespace = self.identity_namespace.as_str();
        let name = identity.spec.secret_ref.as_str();
        let secret = self.secret(namespace, name).await?;
        let secret = self.owned_by_identity(secret, identity).await;
        Self::credentials_of(namespace, name, secret)
    }

    /// `secret` with `identity` among its owners: as read when it already is, as patched
    /// otherwise (a strategic merge, which adds the reference by its UID and keeps the others).
    async fn owned_by_identity(
        &self,
        secret: k8s_openapi::api::core::v1::Secret,
        identity: &crate::api::AWSClusterStaticIdentity,
    ) -> k8s_openapi::api::core::v1::Secret {
        use kube::Resource;
        let Some(uid) = identity.meta().uid.clone() else {
            return secret;
        };
        if secret.owner_references().iter().any(|o| o.uid == uid) {
            return secret;
        }
        let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: crate::api::AWSClusterStaticIdentity::api_version(&()).into_owned(),
            kind: crate::api::AWSClusterStaticIdentity::kind(&()).into_owned(),
            name: identity.name_any(),
            uid: uid.clone(),
            ..Default::default()
        };
        let patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(self.client.clone(), &self.identity_namespace);
        match secrets
            .patch(
                &secret.name_any(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Strategic(patch),
            )
            .await
        {
            Ok(patched) => patched,
            Err(error) => {
                let first = self
                    .unowned
                    .lock()
                    .map(|mut warned| warned.insert(uid))
                    .unwrap_or(true);
                if first {
                    tracing::warn!(
                        identity = %identity.name_any(),
                        secret = %secret.name_any(),
                        %error,
                        "could not make the static identity the owner of its Secret (tried again \
                         on every use, warned once): clusterctl move will not carry the Secret \
                         with it"
                    );
                }
                secret
            }
        }
    }

    /// The Secret `namespace/name`.
    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<k8s_openapi::api::core::v1::Secret, ActuatorError> {
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(self.client.clone(), namespace);
        // A missing or unusable Secret is retried with backoff, never latched: creating or
        // fixing it does not change the AWSCluster's generation.
        secrets
            .get_opt(name)
            .await
            .map_err(|e| ActuatorError::transient("CredentialsSecretUnreadable", e))?
            .ok_or_else(|| {
                ActuatorError::transient_message(
                    "CredentialsSecretNotFound",
                    format!(
                        "the identity Secret {namespace}/{name} does not exist; create it with \
                         keys AccessKeyID and SecretAccessKey (and SessionToken for temporary \
                         credentials)"
                    ),
                )
            })
    }

    /// The static credentials in `secret` (`namespace/name`), and its `resourceVersion`.
    fn credentials_of(
        namespace: &str,
        name: &str,
        secret: k8s_openapi::api::core::v1::Secret,
    ) -> Result<(String, crate::credentials::StaticCredentials), ActuatorError> {
        let credentials =
            crate::credentials::StaticCredentials::from_secret(&secret).map_err(|e| {
                ActuatorError::transient_message(
                    "InvalidCredentials",
                    format!("Secret {namespace}/{name}: {e}"),
                )
            })?;
        Ok((
            secret.metadata.resource_version.unwrap_or_default(),
            credentials,
        ))
    }

    /// The cluster-scoped identity `name` of kind `K`, and its `resourceVersion`.
    async fn identity<K>(&self, name: &str) -> Result<(K, String), ActuatorError>
    where
        K: kube::Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
            + serde::de::DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let kind = K::kind(&());
        let found = kube::Api::<K>::all(self.client.clone())
            .get_opt(name)
            .await
            .map_err(|e| ActuatorError::transient("IdentityUnreadable", e))?
            .ok_or_else(|| {
                ActuatorError::transient_message(
                    IDENTITY_NOT_FOUND,
                    format!(
                        "{kind} {name} does not exist; an operator creates it, with \
                         spec.allowedNamespaces admitting this cluster's namespace"
                    ),
                )
            })?;
        let version = found.resource_version().unwrap_or_default();
        Ok((found, version))
    }

    /// Whether `allowed` admits `namespace`.
    async fn admitted(
        &self,
        allowed: Option<&capi_core::api::AllowedNamespaces>,
        namespace: &str,
    ) -> Result<bool, ActuatorError> {
        capi_provider::support::allowed_namespaces::admitted(&self.client, allowed, namespace)
            .await
            .map_err(|e| ActuatorError::transient("NamespaceUnreadable", e))
    }

    /// The principal `reference` names for a cluster in `namespace`, and the version of what it
    /// came from; `depth` is its place in a chain of role identities (0: the cluster's own).
    async fn resolve(
        &self,
        reference: &AwsIdentityReference,
        namespace: &str,
        depth: usize,
    ) -> Result<(Principal, String), ActuatorError> {
        let source = depth > 0;
        let name = reference.name.as_str();
        match reference.kind {
            AwsIdentityKind::Secret if source => Err(ActuatorError::invalid_configuration(
                "InvalidIdentity",
                "the sourceIdentityRef of an AWSClusterRoleIdentity names a Secret; name an \
                 AWSClusterStaticIdentity or AWSClusterControllerIdentity instead",
            )),
            AwsIdentityKind::Secret => {
                let (version, credentials) = self.secret_credentials(namespace, name).await?;
                Ok((Principal::Static(credentials), version))
            }
            AwsIdentityKind::ControllerIdentity => {
                if name != crate::api::identity::CONTROLLER_IDENTITY_NAME {
                    return Err(ActuatorError::invalid_configuration(
                        "InvalidIdentity",
                        format!(
                            "the AWSClusterControllerIdentity is named {}, not {name}",
                            crate::api::identity::CONTROLLER_IDENTITY_NAME
                        ),
                    ));
                }
                let (identity, _) = self
                    .identity::<crate::api::AWSClusterControllerIdentity>(name)
                    .await?;
                if !self
                    .admitted(identity.spec.allowed_namespaces.as_ref(), namespace)
                    .await?
                {
                    return Err(not_permitted(
                        "AWSClusterControllerIdentity",
                        name,
                        namespace,
                        source,
                    ));
                }
                // The manager's credentials are ambient: nothing of them is versioned.
                Ok((Principal::Controller, String::new()))
            }
            AwsIdentityKind::StaticIdentity => {
                let (identity, version) = self
                    .identity::<crate::api::AWSClusterStaticIdentity>(name)
                    .await?;
                if !self
                    .admitted(identity.spec.allowed_namespaces.as_ref(), namespace)
                    .await?
                {
                    return Err(not_permitted(
                        "AWSClusterStaticIdentity",
                        name,
                        namespace,
                        source,
                    ));
                }
                let (secret_version, credentials) =
                    self.static_identity_credentials(&identity).await?;
                Ok((
                    Principal::Static(credentials),
                    format!("{version}/{secret_version}"),
                ))
            }
            AwsIdentityKind::RoleIdentity => {
                let (identity, version) = self
                    .identity::<crate::api::AWSClusterRoleIdentity>(name)
                    .await?;
                if !self
                    .admitted(identity.spec.allowed_namespaces.as_ref(), namespace)
                    .await?
                {
                    return Err(not_permitted(
                        "AWSClusterRoleIdentity",
                        name,
                        namespace,
                        source,
                    ));
                }
                if depth + 1 >= MAX_CHAIN {
                    return Err(ActuatorError::invalid_configuration(
                        "InvalidIdentity",
                        format!(
                            "AWSClusterRoleIdentity {name}: its sourceIdentityRef chain is longer \
                             than {MAX_CHAIN} identities (or loops)"
                        ),
                    ));
                }
                let (source, source_version) = Box::pin(self.resolve(
                    &identity.spec.source_identity_ref,
                    namespace,
                    depth + 1,
                ))
                .await?;
                Ok((
                    Principal::Role {
                        name: name.to_string(),
                        spec: Box::new(identity.spec),
                        source: Box::new(source),
                    },
                    format!("{version}/{source_version}"),
                ))
            }
        }
    }

    /// The SDK settings of `region` with `principal`'s credentials (the default chain for the
    /// manager's own).
    async fn sdk_config(&self, region: &str, principal: &Principal) -> aws_config::SdkConfig {
        use aws_config::{BehaviorVersion, Region};
        let credentials = match principal {
            Principal::Controller => None,
            Principal::Static(credentials) => Some(
                aws_sdk_ec2::config::SharedCredentialsProvider::new(credentials.to_sdk()),
            ),
            Principal::Role { name, spec, source } => {
                let source_config = Box::pin(self.sdk_config(region, source)).await;
                let mut role = aws_config::sts::AssumeRoleProvider::builder(&spec.role_arn)
                    .session_name(
                        spec.session_name
                            .clone()
                            .unwrap_or_else(|| session_name(name)),
                    )
                    .configure(&source_config);
                if let Some(id) = &spec.external_id {
                    role = role.external_id(id);
                }
                if let Some(policy) = &spec.inline_policy {
                    role = role.policy(policy);
                }
                if let Some(seconds) = spec.duration_seconds {
                    role = role.session_length(std::time::Duration::from_secs(
                        u64::try_from(seconds).unwrap_or(900),
                    ));
                }
                Some(aws_sdk_ec2::config::SharedCredentialsProvider::new(
                    role.build().await,
                ))
            }
        };
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(region.to_string()))
            .retry_config(crate::cloud::sdk::sdk_retry_config())
            .timeout_config(crate::cloud::sdk::sdk_timeout_config());
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        if let Some(credentials) = credentials {
            loader = loader.credentials_provider(credentials);
        }
        loader.load().await
    }
}

/// The STS session name of a role identity's sessions: `capi-rs-<identity>`, at most 64
/// characters (AWS's limit).
#[cfg_attr(not(feature = "sdk"), allow(dead_code))]
fn session_name(identity: &str) -> String {
    format!("capi-rs-{identity}").chars().take(64).collect()
}

#[cfg(feature = "sdk")]
#[async_trait]
impl Connector for SecretConnector {
    async fn connect(&self, cluster: &AWSCluster) -> Result<Clients, ActuatorError> {
        let region = cluster.spec.region.as_str();
        let namespace = cluster.namespace().unwrap_or_default();
        let identity = identity_of(cluster);
        let key = (identity.clone(), region.to_string());
        let (principal, version) = match self.resolve(&reference_of(cluster), &namespace, 0).await {
            Ok(resolved) => resolved,
            Err(error) => {
                if capi_provider::support::client_cache::credentials_gone(&error) {
                    self.cache.forget(|(held, _)| *held == identity);
                }
                return Err(error);
            }
        };
        if let Some(clients) = self.cache.get(&key, &version) {
            return Ok(clients);
        }
        let shared = self.sdk_config(region, &principal).await;
        let clients = Clients::from_sdk(
            aws_sdk_ec2::config::Builder::from(&shared).build(),
            aws_sdk_elasticloadbalancingv2::config::Builder::from(&shared).build(),
            aws_sdk_secretsmanager::config::Builder::from(&shared).build(),
            aws_sdk_autoscaling::config::Builder::from(&shared).build(),
            self.budgets.region(region),
            principal.redaction(),
        );
        self.cache.insert(key, version, clients.clone());
        Ok(clients)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AWSClusterSpec;

    #[test]
    fn an_identity_is_the_one_named_the_controller_identity_when_none_is() {
        let mut cluster = AWSCluster::new(
            "demo",
            AWSClusterSpec {
                region: "eu-west-1".into(),
                ..AWSClusterSpec::default()
            },
        );
        cluster.metadata.namespace = Some("team-a".into());
        assert_eq!(identity_of(&cluster), Identity::Controller);
        assert_eq!(reference_of(&cluster).name, "default");
        for (kind, expected) in [
            (
                AwsIdentityKind::Secret,
                Identity::Secret("team-a/creds".into()),
            ),
            (AwsIdentityKind::ControllerIdentity, Identity::Controller),
            (
                AwsIdentityKind::StaticIdentity,
                Identity::Static("creds".into()),
            ),
            (
                AwsIdentityKind::RoleIdentity,
                Identity::Role("creds".into()),
            ),
        ] {
            cluster.spec.identity_ref = Some(AwsIdentityReference {
                name: "creds".into(),
                kind,
            });
            assert_eq!(identity_of(&cluster), expected);
        }
    }

    #[test]
    fn a_refusal_names_the_identity_and_the_namespace_and_says_what_to_do() {
        let error = not_permitted("AWSClusterStaticIdentity", "shared", "team-b", false);
        assert_eq!(error.reason(), PRINCIPAL_USAGE_UNAUTHORIZED);
        assert_eq!(
            error.kind(),
            capi_core::actuator::ActuatorErrorKind::InvalidConfiguration
        );
        let message = error.to_string();
        for needle in [
            "team-b",
            "AWSClusterStaticIdentity shared",
            "allowedNamespaces",
        ] {
            assert!(message.contains(needle), "{message}");
        }
        let source = not_permitted("AWSClusterControllerIdentity", "default", "team-b", true);
        assert_eq!(source.reason(), SOURCE_PRINCIPAL_USAGE_UNAUTHORIZED);
    }

    #[test]
    fn a_session_name_fits_awss_limit() {
        assert_eq!(session_name("ops"), "capi-rs-ops");
        assert_eq!(session_name(&"x".repeat(100)).len(), 64);
    }
}
