//! From an object to the cloud clients that serve it: the `identityRef` Secret, read from the
//! management cluster, turned into a shared [`Session`].

use std::sync::Arc;

use async_trait::async_trait;
use capi_core::ActuatorError;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::api::IdentityReference;
use crate::auth_url::AuthUrlPolicy;
use crate::cloud::session::SessionError;
use crate::cloud::{CloudError, Compute, Images, LoadBalancing, Networking, Session, Sessions};
use crate::credentials::{self, CredentialsError};

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

/// How soon a reconcile that found its credentials' session being made looks again.
const AUTHENTICATING_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The production [`Connector`]: reads the Secret with the management cluster client and shares
/// one session per Secret (and `resourceVersion`) between all reconciles.
/// A Secret whose `auth_url` the [`AuthUrlPolicy`] refuses is never used: no request is sent.
#[derive(Clone)]
pub struct SecretConnector {
    client: kube::Client,
    sessions: Sessions,
    auth_urls: AuthUrlPolicy,
}

impl SecretConnector {
    /// A connector reading Secrets with `client`, any `auth_url` allowed.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            sessions: Sessions::default(),
            auth_urls: AuthUrlPolicy::any(),
        }
    }

    /// Credentials may name only the Keystone endpoints `policy` allows.
    #[must_use]
    pub fn with_auth_url_policy(mut self, policy: AuthUrlPolicy) -> Self {
        self.auth_urls = policy;
        self
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
        let key = format!("{namespace}/{}", identity.name);
        let Some(secret) = secrets
            .get_opt(&identity.name)
            .await
            .map_err(|e| ActuatorError::transient("CredentialsSecretUnreadable", e))?
        else {
            // Nothing made from a Secret that is gone is kept: its session (and token) go.
            self.sessions.forget(&key).await;
            return Err(ActuatorError::transient_message(
                "CredentialsSecretNotFound",
                format!(
                    "the identityRef Secret {namespace}/{} does not exist; create it with a clouds.yaml \
                     holding cloud {:?}",
                    identity.name, identity.cloud_name
                ),
            ));
        };
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        let session = self
            .sessions
            .get(&key, &version, || {
                let credentials = credentials::from_secret(
                    &secret,
                    &identity.cloud_name,
                    identity.region.as_deref(),
                )?;
                self.auth_urls
                    .check(&credentials.auth_url)
                    .map_err(|refused| CredentialsError::AuthUrlRefused {
                        secret: key.clone(),
                        cloud: identity.cloud_name.clone(),
                        refused,
                    })?;
                Ok(credentials)
            })
            .await;
        match session {
            Ok(session) => Ok(Clients::from_session(session)),
            Err(SessionError::Credentials(e @ CredentialsError::AuthUrlRefused { .. })) => Err(
                ActuatorError::transient_message("AuthURLNotAllowed", e.to_string()),
            ),
            Err(SessionError::Credentials(e)) => Err(ActuatorError::transient_message(
                "InvalidCredentials",
                e.to_string(),
            )),
            Err(SessionError::Cloud(e)) => Err(ActuatorError::transient_message(
                "AuthenticationFailed",
                e.to_string(),
            )),
            Err(e @ SessionError::Authenticating) => Err(ActuatorError::requeue_after(
                AUTHENTICATING_WAIT,
                "Authenticating",
                e.to_string(),
            )),
        }
    }
}

/// The loop's view of a cloud error: conflicts are waits, a used-up quota is waited out (never
/// latched: capacity frees without the spec changing), rejections are the user's to fix,
/// everything else is retried with backoff. `doing` says what the provider was doing.
///
/// Nova answers a quota overrun with 403, Neutron with 409 `OverQuota`, Octavia with 403 or 409:
/// the status does not tell quota from policy, the cloud's message does.
pub fn actuator_error(doing: &str, error: CloudError) -> ActuatorError {
    match error {
        CloudError::Conflict { message, .. } | CloudError::Rejected { message, .. }
            if is_quota(&message) =>
        {
            ActuatorError::requeue_after(
                QUOTA_WAIT,
                "QuotaExceeded",
                format!("{doing}: the project's quota is used up, waiting for capacity: {message}"),
            )
        }
        CloudError::Conflict { message, .. } => ActuatorError::requeue_after(
            std::time::Duration::from_secs(5),
            "CloudResourceBusy",
            format!("{doing}: the cloud asks to retry later: {message}"),
        ),
        CloudError::Rejected { message, .. } if is_policy(&message) => {
            ActuatorError::invalid_configuration(
                "NotAuthorized",
                format!("{doing}: the credentials may not do this: {message}"),
            )
        }
        CloudError::Rejected { message, .. } => {
            ActuatorError::invalid_configuration("CloudRejected", format!("{doing}: {message}"))
        }
        CloudError::Auth { message } => {
            ActuatorError::transient_message("AuthenticationFailed", format!("{doing}: {message}"))
        }
        other => ActuatorError::transient_message("CloudAPIError", format!("{doing}: {other}")),
    }
}

/// How long a machine waits for quota before trying again.
const QUOTA_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Nova's "Quota exceeded for cores…", Neutron's `OverQuota`, Octavia's "Quota has been met".
fn is_quota(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    ["quota", "overlimit", "over limit", "limit exceeded"]
        .iter()
        .any(|marker| message.contains(marker))
}

/// oslo.policy's "Policy doesn't allow … to be performed." and its kin.
fn is_policy(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("policy") || message.contains("not authorized")
}

#[cfg(test)]
mod tests {
    use capi_core::ActuatorErrorKind;

    use super::*;

    fn rejected(message: &str) -> CloudError {
        CloudError::Rejected {
            what: "POST servers".into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_used_up_quota_is_waited_out_never_latched() {
        for error in [
            rejected("Quota exceeded for cores: Requested 4, but already used 20 of 20 cores"),
            CloudError::Conflict {
                what: "POST ports".into(),
                message: "Quota exceeded for resources: ['port'].".into(),
            },
            rejected("Quota has been met for resources: LoadBalancer"),
        ] {
            let error = actuator_error("creating", error);
            assert_eq!(error.kind(), ActuatorErrorKind::RequeueAfter, "{error}");
            assert_eq!(error.reason(), "QuotaExceeded");
            assert!(
                error.message().contains("Quota"),
                "the quota is named: {error}"
            );
        }
    }

    #[test]
    fn a_policy_refusal_is_the_users_to_fix() {
        let error = actuator_error(
            "creating",
            rejected("Policy doesn't allow os_compute_api:servers:create to be performed."),
        );
        assert_eq!(error.kind(), ActuatorErrorKind::InvalidConfiguration);
        assert_eq!(error.reason(), "NotAuthorized");
        let busy = actuator_error(
            "deleting",
            CloudError::Conflict {
                what: "DELETE loadbalancer".into(),
                message: "Invalid state PENDING_UPDATE".into(),
            },
        );
        assert_eq!(busy.reason(), "CloudResourceBusy");
    }
}
