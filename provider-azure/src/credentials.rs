//! A service principal's client credentials from an `identityRef` Secret (keys `tenantID`,
//! `clientID`, `clientSecret`: CAPZ's `ServicePrincipal` identity in one Secret), never shown:
//! their `Debug` prints the IDs (identifiers Azure itself prints in errors) and never the secret;
//! errors name keys and never values.

use std::fmt;

use capi_provider::support::redact::Redaction;
use capi_provider::support::secret_data;
use k8s_openapi::api::core::v1::Secret;

/// The Secret key of the tenant (directory) ID.
pub const TENANT_ID: &str = "tenantID";
/// The Secret key of the client (application) ID.
pub const CLIENT_ID: &str = "clientID";
/// The Secret key of the client secret.
pub const CLIENT_SECRET: &str = "clientSecret";

/// A tenant as Microsoft Entra ID takes it: a GUID or a domain (`contoso.onmicrosoft.com`).
fn valid_tenant(tenant: &str) -> bool {
    tenant.len() <= 256
        && tenant
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

/// A tenant, a client and its secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    tenant_id: String,
    client_id: String,
    client_secret: String,
}

impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("tenant_id", &self.tenant_id)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .finish()
    }
}

/// Why a Secret's credentials cannot be used; names the key, never a value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CredentialsError {
    /// A required key is missing or empty.
    #[error("the credentials Secret has no {0:?} (set tenantID, clientID and clientSecret)")]
    Missing(&'static str),
    /// A key's value is not UTF-8 text.
    #[error("the credentials Secret's {0:?} is not UTF-8 text")]
    NotText(&'static str),
    /// The tenant is neither a GUID nor a domain.
    #[error(
        "the credentials Secret's tenantID is not a tenant: a directory ID (GUID) or a domain \
         (letters, digits, '.' and '-')"
    )]
    BadTenant,
}

impl ClientCredentials {
    /// Credentials from their parts.
    pub fn new(
        tenant_id: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Self {
        Self {
            tenant_id: tenant_id.into(),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
        }
    }

    /// The credentials in `secret` (`data` or `stringData`, trimmed).
    pub fn from_secret(secret: &Secret) -> Result<Self, CredentialsError> {
        let tenant_id = value(secret, TENANT_ID)?.ok_or(CredentialsError::Missing(TENANT_ID))?;
        if !valid_tenant(&tenant_id) {
            return Err(CredentialsError::BadTenant);
        }
        let client_id = value(secret, CLIENT_ID)?.ok_or(CredentialsError::Missing(CLIENT_ID))?;
        let client_secret =
            value(secret, CLIENT_SECRET)?.ok_or(CredentialsError::Missing(CLIENT_SECRET))?;
        Ok(Self::new(tenant_id, client_id, client_secret))
    }

    /// The tenant.
    pub fn tenant_id(&self) -> &str {
        &self.tenant_id
    }

    /// The client.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The secret, for the token request only.
    pub fn client_secret(&self) -> &str {
        &self.client_secret
    }

    /// What must never be shown: the client secret.
    pub fn redaction(&self) -> Redaction {
        Redaction::default().secret(&self.client_secret)
    }
}

fn value(secret: &Secret, key: &'static str) -> Result<Option<String>, CredentialsError> {
    secret_data::text(secret, key).map_err(|_| CredentialsError::NotText(key))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    const SECRET: &str = "Qx8Q~abcDEF1234567890ghijKLMNOPqrstuvWXYZ";

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn a_service_principals_keys_are_read_and_the_secret_never_printed() {
        let credentials = ClientCredentials::from_secret(&secret(&[
            (TENANT_ID, "72f988bf-86f1-41af-91ab-2d7cd011db47\n"),
            (CLIENT_ID, "0b3c6e4a-1f2d-4c5b-8a9e-7d6c5b4a3f2e"),
            (CLIENT_SECRET, SECRET),
        ]))
        .unwrap();
        let shown = format!("{credentials:?}");
        assert!(!shown.contains(SECRET), "{shown}");
        assert!(
            shown.contains("0b3c6e4a-1f2d-4c5b-8a9e-7d6c5b4a3f2e"),
            "{shown}"
        );
        assert_eq!(
            credentials.tenant_id(),
            "72f988bf-86f1-41af-91ab-2d7cd011db47"
        );
        let blanked = credentials.redaction().apply(&format!(
            "AADSTS7000215: Invalid client secret provided: {SECRET}"
        ));
        assert!(!blanked.contains(SECRET), "{blanked}");
        let domain = ClientCredentials::from_secret(&secret(&[
            (TENANT_ID, "contoso.onmicrosoft.com"),
            (CLIENT_ID, "c"),
            (CLIENT_SECRET, SECRET),
        ]));
        assert!(domain.is_ok());
    }

    #[test]
    fn a_missing_key_or_a_tenant_that_is_not_one_is_named_without_any_value() {
        let error = ClientCredentials::from_secret(&secret(&[
            (TENANT_ID, "72f988bf-86f1-41af-91ab-2d7cd011db47"),
            (CLIENT_ID, "c"),
        ]))
        .unwrap_err();
        assert_eq!(error, CredentialsError::Missing(CLIENT_SECRET));
        let error = ClientCredentials::from_secret(&secret(&[
            (TENANT_ID, "https://login.microsoftonline.com/x"),
            (CLIENT_ID, "c"),
            (CLIENT_SECRET, SECRET),
        ]))
        .unwrap_err();
        assert_eq!(error, CredentialsError::BadTenant);
        assert!(!error.to_string().contains("login.microsoftonline"));
        let error = ClientCredentials::from_secret(&secret(&[
            (TENANT_ID, "t"),
            (CLIENT_ID, "c"),
            (CLIENT_SECRET, "  "),
        ]))
        .unwrap_err();
        assert_eq!(error, CredentialsError::Missing(CLIENT_SECRET));
    }
}
