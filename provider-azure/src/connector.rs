//! From an `AzureCluster` to the ARM client that serves it: its Azure cloud (or the manager's
//! overrides of the Resource Manager and Microsoft Entra ID endpoints) and the service principal
//! in its `identityRef` Secret. One client per Secret version is shared by every reconcile, so
//! a token is reused until shortly before it expires; when the Secret changes (its
//! `resourceVersion`), a new client with a new token source replaces the old one, and the old
//! token goes with the old credentials; when the Secret is deleted, its clients go at once, and a
//! client unused for half an hour goes too ([`capi_provider::support::client_cache`]).

use std::sync::Arc;

use async_trait::async_trait;
use capi_core::ActuatorError;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::api::AzureCluster;
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

/// Clients per identity Secret (`<namespace>/<name>`) and Resource Manager endpoint.
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
        let secrets: kube::Api<Secret> = kube::Api::namespaced(self.client.clone(), namespace);
        // A missing or unusable Secret is retried with backoff, never latched: creating or
        // fixing it does not change the AzureCluster's generation.
        let secret = secrets
            .get_opt(name)
            .await
            .map_err(|e| ActuatorError::transient("CredentialsSecretUnreadable", e))?
            .ok_or_else(|| {
                let gone = format!("{namespace}/{name}");
                self.cache.forget(|(identity, _)| *identity == gone);
                ActuatorError::transient_message(
                    "CredentialsSecretNotFound",
                    format!(
                        "the identityRef Secret {namespace}/{name} does not exist; create it with \
                         keys tenantID, clientID and clientSecret"
                    ),
                )
            })?;
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
}

#[async_trait]
impl Connector for SecretConnector {
    async fn connect(&self, cluster: &AzureCluster) -> Result<Arc<dyn Arm>, ActuatorError> {
        let namespace = cluster.namespace().unwrap_or_default();
        let Some(reference) = &cluster.spec.identity_ref else {
            return Err(ActuatorError::invalid_configuration(
                "NoIdentity",
                "spec.identityRef must name a Secret with the service principal's tenantID, \
                 clientID and clientSecret",
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
        let (version, credentials) = self.credentials(&namespace, &reference.name).await?;
        let key = (
            format!("{namespace}/{}", reference.name),
            resource_manager.clone(),
        );
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
