//! From an object to the cloud clients that serve it: the `identityRef` Secret, read from the
//! management cluster, turned into a shared [`Session`].

use std::sync::Arc;

use async_trait::async_trait;
use capi_core::ActuatorError;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::api::IdentityReference;
use crate::cloud::session::SessionError;
use crate::cloud::{CloudError, Compute, Images, LoadBalancing, Networking, Session, Sessions};
use crate::credentials;

/// The four service clients of one cloud and one set of credentials.
#[derive(Clone)]
pub struct Clients {
    /// Nova.
    pub compute: Arc<dyn Compute>,
    /// Glance.
    pub images: Arc<dyn Images>,
    /// Neutron.
    pub network: Arc<dyn Networking>,
    /// Octavia.
    pub load_balancer: Arc<dyn LoadBalancing>,
}

impl Clients {
    /// All four services over one session.
    pub fn from_session(session: Session) -> Self {
        Self {
            compute: Arc::new(session.clone()),
            images: Arc::new(session.clone()),
            network: Arc::new(session.clone()),
            load_balancer: Arc::new(session),
        }
    }
}

/// Gives the actuators their clients; mocked in unit tests.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Connector: Send + Sync {
    /// The clients for `identity` (a Secret in `namespace`).
    async fn connect(
        &self,
        namespace: &str,
        identity: &IdentityReference,
    ) -> Result<Clients, ActuatorError>;
}

/// The production [`Connector`]: reads the Secret with the management cluster client and shares
/// one session per Secret (and `resourceVersion`) between all reconciles.
#[derive(Clone)]
pub struct SecretConnector {
    client: kube::Client,
    sessions: Sessions,
}

impl SecretConnector {
    /// A connector reading Secrets with `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            sessions: Sessions::default(),
        }
    }
}

#[async_trait]
impl Connector for SecretConnector {
    async fn connect(
        &self,
        namespace: &str,
        identity: &IdentityReference,
    ) -> Result<Clients, ActuatorError> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        // A missing or unusable Secret is retried with backoff (not latched as invalid
        // configuration): creating or fixing the Secret does not change the object's generation.
        let secret = secrets
            .get_opt(&identity.name)
            .await
            .map_err(|e| ActuatorError::transient("CredentialsSecretUnreadable", e))?
            .ok_or_else(|| {
                ActuatorError::transient_message(
                    "CredentialsSecretNotFound",
                    format!(
                        "the identityRef Secret {namespace}/{} does not exist; create it with a clouds.yaml \
                         holding cloud {:?}",
                        identity.name, identity.cloud_name
                    ),
                )
            })?;
        let key = format!("{namespace}/{}", identity.name);
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        let session = self
            .sessions
            .get(&key, &version, || {
                credentials::from_secret(&secret, &identity.cloud_name, identity.region.as_deref())
            })
            .await;
        match session {
            Ok(session) => Ok(Clients::from_session(session)),
            Err(SessionError::Credentials(e)) => Err(ActuatorError::transient_message(
                "InvalidCredentials",
                e.to_string(),
            )),
            Err(SessionError::Cloud(e)) => Err(ActuatorError::transient_message(
                "AuthenticationFailed",
                e.to_string(),
            )),
        }
    }
}

/// The loop's view of a cloud error: conflicts are waits, rejections are the user's to fix,
/// everything else is retried with backoff. `doing` says what the provider was doing.
pub fn actuator_error(doing: &str, error: CloudError) -> ActuatorError {
    match error {
        CloudError::Conflict { message, .. } => ActuatorError::requeue_after(
            std::time::Duration::from_secs(5),
            "CloudResourceBusy",
            format!("{doing}: the cloud asks to retry later: {message}"),
        ),
        CloudError::Rejected { message, .. } => {
            ActuatorError::invalid_configuration("CloudRejected", format!("{doing}: {message}"))
        }
        CloudError::Auth { message } => {
            ActuatorError::transient_message("AuthenticationFailed", format!("{doing}: {message}"))
        }
        other => ActuatorError::transient_message("CloudAPIError", format!("{doing}: {other}")),
    }
}
