//! Access tokens for Azure Resource Manager from Microsoft Entra ID.
//!
//! A service principal's client credentials go through `azure_identity`'s
//! `ClientSecretCredential`, which keeps the token it got until shortly before it expires. The
//! authority host is the cluster's Azure cloud's, or an override (a test server's). The HTTP
//! client is the provider's own: https only, on the workspace's one TLS backend (rustls on
//! aws-lc), with the roots it was given. The SDK's retries are off: a failed token request is the
//! reconcile's to retry, with the rest of its backoff. One [`EntraTokens`] serves one version of
//! a credentials Secret; when the Secret changes, a new one is built and the old token goes with
//! the old value.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use azure_core::cloud::{CloudConfiguration, CustomConfiguration};
use azure_core::credentials::{Secret, TokenCredential};
use azure_core::error::ErrorKind;
use azure_core::http::{ClientOptions, RetryOptions, Transport};
use azure_core::time::OffsetDateTime;
use azure_identity::{ClientSecretCredential, ClientSecretCredentialOptions};
use capi_provider::support::redact::Redaction;

use crate::credentials::ClientCredentials;

/// A bearer token for Resource Manager. Its `Debug` never shows it.
#[derive(Clone)]
pub struct BearerToken {
    value: String,
    expires_in: Duration,
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerToken")
            .field("value", &"<redacted>")
            .field("expires_in", &self.expires_in)
            .finish()
    }
}

impl BearerToken {
    /// A token `value` valid for `expires_in`.
    pub fn new(value: impl Into<String>, expires_in: Duration) -> Self {
        Self {
            value: value.into(),
            expires_in,
        }
    }

    /// The `Authorization` header's value.
    pub fn header_value(&self) -> String {
        format!("Bearer {}", self.value)
    }

    /// How long it is still valid.
    pub fn expires_in(&self) -> Duration {
        self.expires_in
    }

    /// What must never be shown: the token.
    pub fn redaction(&self) -> Redaction {
        Redaction::default().secret(&self.value)
    }
}

/// Why no token could be had. Messages are redacted of the credentials.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// The authority host is not an https URL.
    #[error(
        "the authority host {0:?} is not an https URL (Microsoft Entra ID is only spoken to over TLS)"
    )]
    Authority(String),
    /// Microsoft Entra ID refused the credentials (or the request): the user's to fix.
    #[error("Microsoft Entra ID refused the credentials: {0}")]
    Refused(String),
    /// Microsoft Entra ID could not be reached, or failed: worth retrying.
    #[error("Microsoft Entra ID could not be reached: {0}")]
    Unreachable(String),
}

/// Where Resource Manager tokens come from (a trait, so that actuators are unit-tested without
/// Entra ID).
#[async_trait::async_trait]
pub trait TokenSource: Send + Sync {
    /// A token valid for a while yet.
    async fn bearer(&self) -> Result<BearerToken, TokenError>;
}

/// Tokens for one service principal from Microsoft Entra ID (module docs).
pub struct EntraTokens {
    credential: Arc<ClientSecretCredential>,
    scope: String,
    redaction: Redaction,
}

impl fmt::Debug for EntraTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntraTokens")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl EntraTokens {
    /// Tokens of `credentials` from `authority_host` (`https://login.microsoftonline.com`) for
    /// the Resource Manager at `resource_manager` (`https://management.azure.com`), requested
    /// through `http`.
    pub fn new(
        credentials: &ClientCredentials,
        authority_host: &str,
        resource_manager: &str,
        http: reqwest::Client,
    ) -> Result<Self, TokenError> {
        if !authority_host.starts_with("https://") {
            return Err(TokenError::Authority(authority_host.to_string()));
        }
        let mut cloud = CustomConfiguration::default();
        cloud.authority_host = authority_host.trim_end_matches('/').to_string();
        let options = ClientSecretCredentialOptions {
            client_options: ClientOptions {
                transport: Some(Transport::new(Arc::new(http))),
                retry: RetryOptions::none(),
                cloud: Some(Arc::new(CloudConfiguration::from(cloud))),
                ..ClientOptions::default()
            },
        };
        let redaction = credentials.redaction();
        let credential = ClientSecretCredential::new(
            credentials.tenant_id(),
            credentials.client_id().to_string(),
            Secret::new(credentials.client_secret().to_string()),
            Some(options),
        )
        .map_err(|e| TokenError::Refused(redaction.apply(&e.to_string())))?;
        Ok(Self {
            credential,
            scope: format!("{}/.default", resource_manager.trim_end_matches('/')),
            redaction,
        })
    }
}

/// What went wrong getting a token: the error and its causes (Entra ID's own description of a
/// refusal is a cause), redacted; an unreachable endpoint or a 429/5xx anywhere in the chain is
/// an outage, anything else a refusal.
fn classify(error: &azure_core::Error, redaction: &Redaction) -> TokenError {
    let mut parts: Vec<String> = Vec::new();
    let mut outage = false;
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = current {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        if let Some(inner) = cause.downcast_ref::<azure_core::Error>() {
            outage |= match inner.kind() {
                ErrorKind::Connection | ErrorKind::Io => true,
                ErrorKind::HttpResponse { status, .. } => {
                    let status = u16::from(*status);
                    status == 429 || status >= 500
                }
                _ => false,
            };
        }
        current = cause.source();
    }
    let message = redaction.apply(&parts.join(": "));
    if outage {
        TokenError::Unreachable(message)
    } else {
        TokenError::Refused(message)
    }
}

#[async_trait::async_trait]
impl TokenSource for EntraTokens {
    async fn bearer(&self) -> Result<BearerToken, TokenError> {
        let token = self
            .credential
            .get_token(&[&self.scope], None)
            .await
            .map_err(|error| classify(&error, &self.redaction))?;
        let left = token.expires_on - OffsetDateTime::now_utc();
        Ok(BearerToken::new(
            token.token.secret(),
            Duration::from_secs(u64::try_from(left.whole_seconds()).unwrap_or(0)),
        ))
    }
}
