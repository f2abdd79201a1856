//! From an `AzureCluster` to the ARM client that serves it: its Azure cloud (or the manager's
//! overrides of the Resource Manager and Microsoft Entra ID endpoints) and the service principal
//! its `identityRef` names — a Secret of the cluster's namespace, or an `AzureClusterIdentity`
//! that admits the cluster's namespace (checked on every call, before any client is handed out:
//! a denied cluster gets `NamespaceNotAllowedByIdentity` naming the identity and the namespace,
//! and no request reaches Azure). One client per Secret version is shared by every reconcile, so
//! a token is reused until shortly before it expires; when the Secret changes (its
//! `resourceVersion`), a new client with a new token source replaces the old one, and the old
//! token goes with the old credentials; when the Secret is deleted, its clients go at once, and a
//! client unused for half an hour goes too ([`capi_provider::support::client_cache`]).

use std::sync::Arc;

use async_trait::async_trait;
use capi_core::ActuatorError;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::api::{AzureCluster, AzureIdentityKind};
use crate::arm::{Arm, ArmClient};
use crate::credentials::ClientCredentials;
use crate::token::EntraTokens;

/// Gives the actuators their ARM client; mocked in unit tests.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Connector: Send + Sync {
    /// The ARM client of `cluster`'s cloud with its identity's credentials.
    async fn connect(&self, cluster: &AzureCluster) -> Result<Arc<dyn Arm>, ActuatorError>;
}

/// Where Resource Manager and Microsoft Entra ID are, when not the cluster's Azure cloud's (a
/// sovereign cloud's private endpoints, or a test server).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Endpoints {
    /// The Resource Manager (`https://management.azure.com`).
    pub resource_manager: Option<String>,
    /// The Microsoft Entra ID authority host (`https://login.microsoftonline.com`).
    pub authority_host: Option<String>,
}

/// The reason of the error a cluster gets when its `AzureClusterIdentity` does not admit its
/// namespace (CAPZ's condition reason).
pub const NAMESPACE_NOT_ALLOWED_BY_IDENTITY: &str = "NamespaceNotAllowedByIdentity";

/// What resolving identities reads beside Secrets (which the infrastructure reconcilers' rules
/// already grant): `AzureClusterIdentity`s, and namespaces for `allowedNamespaces` selectors.
pub fn rbac() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    use capi_provider::support::rbac::rule;
    vec![
        rule(crate::api::GROUP, &["azureclusteridentities"], &["get"]),
        rule("", &["namespaces"], &["get"]),
    ]
}

/// Clients per identity (`<namespace>/<name>` of a Secret, `identity:<namespace>/<name>` of an
/// `AzureClusterIdentity`) and Resource Manager endpoint.
type ClientCache =
    capi_provider::support::client_cache::ClientCache<(String, String), Arc<ArmClient>>;

/// The production [`Connector`] (module docs).
pub struct SecretConnector {
    client: kube::Client,
    http: reqwest::Client,
    endpoints: Endpoints,
    cache: ClientCache,
}

impl SecretConnector {
    /// A connector reading Secrets with `client` and speaking to Azure through `http`.
    pub fn new(client: kube::Client, http: reqwest::Client) -> Self {
        Self {
            client,
            http,
            endpoints: Endpoints::default(),
            cache: ClientCache::default(),
        }
    }

    /// How many clients are held (one per identity Secret and endpoint in use).
    pub fn cached_clients(&self) -> usize {
        self.cache.len()
    }

    /// Every cluster's requests to these endpoints instead of its cloud's.
    #[must_use]
    pub fn with_endpoints(mut self, endpoints: Endpoints) -> Self {
        self.endpoints = endpoints;
        self
    }

    async fn credentials(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(String, ClientCredentials), ActuatorError> {
        let secret = self
            .secret(namespace, name, || {
                format!(
                    "the identityRef Secret {namespace}/{name} does not exist; create it with keys \
                     tenantID, clientID and clientSecret"
                )
            })
            .await?;
        let credentials = ClientCredentials::from_secret(&secret).map_err(|e| {
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
    /// The Secret `namespace/name`; `missing` says what to do when there is none. A missing or
    /// unreadable Secret is retried with backoff, never latched: creating or fixing it does not
    /// change the AzureCluster's generation.
    async fn secret(
        &self,
        namespace: &str,
        name: &str,
        missing: impl FnOnce() -> String,
    ) -> Result<Secret, ActuatorError> {
        kube::Api::<Secret>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|e| ActuatorError::transient("CredentialsSecretUnreadable", e))?
            .ok_or_else(|| ActuatorError::transient_message("CredentialsSecretNotFound", missing()))
    }

    /// The service principal of the `AzureClusterIdentity` `reference` names, for a cluster in
    /// `namespace`, if it admits that namespace; and the versions it came from.
    async fn identity_credentials(
        &self,
        namespace: &str,
        reference: &crate::api::AzureIdentityReference,
    ) -> Result<(String, ClientCredentials), ActuatorError> {
        let identity_namespace = reference.namespace.as_deref().unwrap_or(namespace);
        let name = reference.name.as_str();
        let identity = kube::Api::<crate::api::AzureClusterIdentity>::namespaced(
            self.client.clone(),
            identity_namespace,
        )
        .get_opt(name)
        .await
        .map_err(|e| ActuatorError::transient("IdentityUnreadable", e))?
        .ok_or_else(|| {
            ActuatorError::transient_message(
                "IdentityNotFound",
                format!(
                    "AzureClusterIdentity {identity_namespace}/{name} does not exist; its owner \
                     creates it, with spec.allowedNamespaces admitting namespace {namespace}"
                ),
            )
        })?;
        let admitted = capi_provider::support::allowed_namespaces::admitted(
            &self.client,
            identity.spec.allowed_namespaces.as_ref(),
            namespace,
        )
        .await
        .map_err(|e| ActuatorError::transient("NamespaceUnreadable", e))?;
        if !admitted {
            return Err(ActuatorError::invalid_configuration(
                NAMESPACE_NOT_ALLOWED_BY_IDENTITY,
                format!(
                    "namespace {namespace} is not permitted to use AzureClusterIdentity \
                     {identity_namespace}/{name}: its spec.allowedNamespaces does not admit this \
                     namespace; ask its owner to admit it, or name another identity in \
                     spec.identityRef"
                ),
            ));
        }
        let secret_ref = &identity.spec.client_secret;
        if secret_ref
            .namespace
            .as_deref()
            .is_some_and(|ns| ns != identity_namespace)
        {
            return Err(ActuatorError::invalid_configuration(
                "InvalidIdentity",
                format!(
                    "AzureClusterIdentity {identity_namespace}/{name}: spec.clientSecret must name \
                     a Secret of the identity's own namespace {identity_namespace}"
                ),
            ));
        }
        let secret = self
            .secret(identity_namespace, &secret_ref.name, || {
                format!(
                    "the Secret {identity_namespace}/{} of AzureClusterIdentity {name} does not \
                     exist; create it with the key clientSecret",
                    secret_ref.name
                )
            })
            .await?;
        let client_secret =
            capi_provider::support::secret_data::text(&secret, crate::credentials::CLIENT_SECRET)
                .ok()
                .flatten()
                .ok_or_else(|| {
                    ActuatorError::transient_message(
                        "InvalidCredentials",
                        format!(
                            "Secret {identity_namespace}/{} has no text clientSecret",
                            secret_ref.name
                        ),
                    )
                })?;
        let credentials = ClientCredentials::new(
            &identity.spec.tenant_id,
            &identity.spec.client_id,
            client_secret,
        );
        Ok((
            format!(
                "{}/{}",
                identity.resource_version().unwrap_or_default(),
                secret.metadata.resource_version.unwrap_or_default()
            ),
            credentials,
        ))
    }
}

#[async_trait]
impl Connector for SecretConnector {
    async fn connect(&self, cluster: &AzureCluster) -> Result<Arc<dyn Arm>, ActuatorError> {
        let namespace = cluster.namespace().unwrap_or_default();
        let Some(reference) = &cluster.spec.identity_ref else {
            return Err(ActuatorError::invalid_configuration(
                "NoIdentity",
                "spec.identityRef must name an AzureClusterIdentity that admits this namespace, \
                 or a Secret with the service principal's tenantID, clientID and clientSecret",
            ));
        };
        let environment = cluster.spec.azure_environment.unwrap_or_default();
        let resource_manager = self
            .endpoints
            .resource_manager
            .clone()
            .unwrap_or_else(|| environment.resource_manager().to_string());
        let authority = self
            .endpoints
            .authority_host
            .clone()
            .unwrap_or_else(|| environment.authority_host().to_string());
        let identity = match reference.kind {
            AzureIdentityKind::Secret => format!("{namespace}/{}", reference.name),
            AzureIdentityKind::AzureClusterIdentity => format!(
                "identity:{}/{}",
                reference.namespace.as_deref().unwrap_or(&namespace),
                reference.name
            ),
        };
        let resolved = match reference.kind {
            AzureIdentityKind::Secret => self.credentials(&namespace, &reference.name).await,
            AzureIdentityKind::AzureClusterIdentity => {
                self.identity_credentials(&namespace, reference).await
            }
        };
        let (version, credentials) = match resolved {
            Ok(resolved) => resolved,
            Err(error) => {
                if capi_provider::support::client_cache::credentials_gone(&error) {
                    self.cache.forget(|(held, _)| *held == identity);
                }
                return Err(error);
            }
        };
        let key = (identity, resource_manager.clone());
        if let Some(client) = self.cache.get(&key, &version) {
            return Ok(client);
        }
        let configuration = |e: &dyn std::fmt::Display| {
            ActuatorError::invalid_configuration("InvalidAzureEndpoint", e.to_string())
        };
        let tokens = EntraTokens::new(
            &credentials,
            &authority,
            &resource_manager,
            self.http.clone(),
        )
        .map_err(|e| configuration(&e))?;
        let client = Arc::new(
            ArmClient::new(
                &resource_manager,
                Arc::new(tokens),
                self.http.clone(),
                credentials.redaction(),
            )
            .map_err(|e| configuration(&e))?,
        );
        self.cache.insert(key, version, client.clone());
        Ok(client)
    }
}
