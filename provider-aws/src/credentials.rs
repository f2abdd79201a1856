//! The static credentials of an `identityRef` Secret (the keys of CAPA's static identity:
//! `AccessKeyID`, `SecretAccessKey`, optionally `SessionToken`), never shown: their `Debug`
//! prints the access key ID's first characters only, errors name keys and never values.

use std::fmt;

use capi_provider::support::redact::Redaction;
use capi_provider::support::secret_data;
use k8s_openapi::api::core::v1::Secret;

/// The Secret key of the access key ID.
pub const ACCESS_KEY_ID: &str = "AccessKeyID";
/// The Secret key of the secret access key.
pub const SECRET_ACCESS_KEY: &str = "SecretAccessKey";
/// The Secret key of the (optional) session token.
pub const SESSION_TOKEN: &str = "SessionToken";

/// An access key, its secret and perhaps a session token.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: String = self.access_key_id.chars().take(4).collect();
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &format_args!("{shown}…"))
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Why a Secret's credentials cannot be used; names the key, never a value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CredentialsError {
    /// A required key is missing or empty.
    #[error(
        "the credentials Secret has no {0:?} (set AccessKeyID and SecretAccessKey, optionally SessionToken)"
    )]
    Missing(&'static str),
    /// A key's value is not UTF-8 text.
    #[error("the credentials Secret's {0:?} is not UTF-8 text")]
    NotText(&'static str),
}

impl StaticCredentials {
    /// Credentials from their parts.
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: session_token.filter(|t| !t.is_empty()),
        }
    }

    /// The credentials in `secret` (`data` or `stringData`), trimmed of surrounding whitespace
    /// (a trailing newline from `kubectl create secret --from-file` is not part of a key).
    pub fn from_secret(secret: &Secret) -> Result<Self, CredentialsError> {
        let access_key_id =
            value(secret, ACCESS_KEY_ID)?.ok_or(CredentialsError::Missing(ACCESS_KEY_ID))?;
        let secret_access_key = value(secret, SECRET_ACCESS_KEY)?
            .ok_or(CredentialsError::Missing(SECRET_ACCESS_KEY))?;
        let session_token = value(secret, SESSION_TOKEN)?;
        Ok(Self::new(access_key_id, secret_access_key, session_token))
    }

    /// What must never be shown: the secret access key and the session token (the access key ID
    /// is an identifier, which AWS itself prints in errors, but blanked too).
    pub fn redaction(&self) -> Redaction {
        let mut redaction = Redaction::default()
            .secret(&self.access_key_id)
            .secret(&self.secret_access_key);
        if let Some(token) = &self.session_token {
            redaction = redaction.secret(token);
        }
        redaction
    }

    /// The SDK's credentials.
    #[cfg(feature = "sdk")]
    pub fn to_sdk(&self) -> aws_sdk_ec2::config::Credentials {
        aws_sdk_ec2::config::Credentials::new(
            &self.access_key_id,
            &self.secret_access_key,
            self.session_token.clone(),
            None,
            "capi-rs-identity-secret",
        )
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

    const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

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
    fn the_keys_of_capas_static_identity_are_read_and_never_printed() {
        let credentials = StaticCredentials::from_secret(&secret(&[
            (ACCESS_KEY_ID, "AKIAIOSFODNN7EXAMPLE\n"),
            (SECRET_ACCESS_KEY, SECRET_KEY),
            (SESSION_TOKEN, "IQoJb3JpZ2luX2VjEJr"),
        ]))
        .unwrap();
        let shown = format!("{credentials:?}");
        assert!(!shown.contains(SECRET_KEY), "{shown}");
        assert!(!shown.contains("IQoJ"), "{shown}");
        assert!(!shown.contains("AKIAIOSFODNN7EXAMPLE"), "{shown}");
        let blanked = credentials
            .redaction()
            .apply(&format!("echo {SECRET_KEY} and IQoJb3JpZ2luX2VjEJr"));
        assert!(!blanked.contains(SECRET_KEY), "{blanked}");
        assert!(!blanked.contains("IQoJb3JpZ2luX2VjEJr"), "{blanked}");
        assert_eq!(
            credentials,
            StaticCredentials::new(
                "AKIAIOSFODNN7EXAMPLE",
                SECRET_KEY,
                Some("IQoJb3JpZ2luX2VjEJr".into())
            ),
            "trimmed"
        );
    }

    #[test]
    fn a_missing_or_empty_key_is_named_without_any_value() {
        let error = StaticCredentials::from_secret(&secret(&[(SECRET_ACCESS_KEY, SECRET_KEY)]))
            .unwrap_err();
        assert_eq!(error, CredentialsError::Missing(ACCESS_KEY_ID));
        let error = StaticCredentials::from_secret(&secret(&[
            (ACCESS_KEY_ID, "AKIA"),
            (SECRET_ACCESS_KEY, "  "),
        ]))
        .unwrap_err();
        assert_eq!(error, CredentialsError::Missing(SECRET_ACCESS_KEY));
        assert!(!error.to_string().contains("AKIA"));
        let no_token = StaticCredentials::from_secret(&secret(&[
            (ACCESS_KEY_ID, "AKIA"),
            (SECRET_ACCESS_KEY, SECRET_KEY),
            (SESSION_TOKEN, ""),
        ]))
        .unwrap();
        assert_eq!(no_token.session_token, None);
    }
}
