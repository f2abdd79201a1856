//! Cloud credentials from the Secret an `OpenStackCluster`'s `identityRef` names: `clouds.yaml`
//! (one cloud of it, by `cloudName`) and an optional `cacert` PEM bundle.
//!
//! Password and application-credential authentication are supported (Keystone v3). Secrets never
//! appear in `Debug` output or in errors: an error names the Secret, the cloud and the field.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use serde::Deserialize;

/// The Secret keys read.
pub const CLOUDS_YAML_KEY: &str = "clouds.yaml";
/// The optional CA bundle key.
pub const CACERT_KEY: &str = "cacert";

/// Why the credentials cannot be used: what to fix, never the secret values.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CredentialsError {
    /// A key is missing from the Secret.
    #[error("Secret {secret:?} has no key {key:?}")]
    MissingKey {
        /// The Secret.
        secret: String,
        /// The key.
        key: &'static str,
    },
    /// `clouds.yaml` does not parse.
    #[error("Secret {secret:?}: {CLOUDS_YAML_KEY} is not a valid clouds.yaml document")]
    Unparsable {
        /// The Secret.
        secret: String,
    },
    /// The cloud is not in `clouds.yaml`.
    #[error("Secret {secret:?}: clouds.yaml has no cloud {cloud:?} (it has: {available})")]
    NoSuchCloud {
        /// The Secret.
        secret: String,
        /// The cloud asked for.
        cloud: String,
        /// The clouds it has.
        available: String,
    },
    /// The manager does not allow the cloud's `auth_url` ([`crate::auth_url`]).
    #[error("Secret {secret:?}, cloud {cloud:?}: {refused}")]
    AuthUrlRefused {
        /// The Secret.
        secret: String,
        /// The cloud.
        cloud: String,
        /// Why.
        refused: crate::auth_url::AuthUrlRefused,
    },
    /// A required field is missing or the auth type is unsupported.
    #[error("Secret {secret:?}, cloud {cloud:?}: {problem}")]
    Invalid {
        /// The Secret.
        secret: String,
        /// The cloud.
        cloud: String,
        /// What is wrong.
        problem: String,
    },
}

/// How to authenticate.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// A user's password, scoped to a project.
    Password {
        /// User name (or `user_id`).
        user: UserRef,
        /// The password.
        password: String,
        /// The project to scope the token to.
        project: ProjectRef,
    },
    /// An application credential (its own scope).
    ApplicationCredential {
        /// Its ID.
        id: String,
        /// Its secret.
        secret: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Password { user, project, .. } => f
                .debug_struct("Password")
                .field("user", user)
                .field("password", &"<redacted>")
                .field("project", project)
                .finish(),
            Self::ApplicationCredential { id, .. } => f
                .debug_struct("ApplicationCredential")
                .field("id", id)
                .field("secret", &"<redacted>")
                .finish(),
        }
    }
}

/// A user by ID, or by name within a domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserRef {
    /// By ID.
    Id(String),
    /// By name in a domain (`Default` when unset).
    Name {
        /// The name.
        name: String,
        /// The domain's name.
        domain: String,
    },
}

/// A project by ID, or by name within a domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProjectRef {
    /// By ID.
    Id(String),
    /// By name in a domain (`Default` when unset).
    Name {
        /// The name.
        name: String,
        /// The domain's name.
        domain: String,
    },
}

/// What a controller needs to talk to one cloud.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Keystone's URL (`…/v3`).
    pub auth_url: String,
    /// How to authenticate.
    pub auth: Auth,
    /// The region whose endpoints to use (the catalog's only one when unset).
    pub region: Option<String>,
    /// Which endpoint interface (`public` unless the cloud says otherwise).
    pub interface: String,
    /// A PEM CA bundle for the cloud's TLS certificates.
    pub ca_bundle: Option<Vec<u8>>,
    /// Whether TLS certificates are verified (`verify: false` in clouds.yaml turns it off).
    pub verify: bool,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("auth_url", &self.auth_url)
            .field("auth", &self.auth)
            .field("region", &self.region)
            .field("interface", &self.interface)
            .field("ca_bundle", &self.ca_bundle.as_ref().map(Vec::len))
            .field("verify", &self.verify)
            .finish()
    }
}

#[derive(Deserialize)]
struct CloudsFile {
    clouds: BTreeMap<String, CloudEntry>,
}

#[derive(Deserialize)]
struct CloudEntry {
    #[serde(default)]
    auth: AuthEntry,
    #[serde(default)]
    auth_type: Option<String>,
    #[serde(default)]
    region_name: Option<String>,
    #[serde(default)]
    interface: Option<String>,
    #[serde(default)]
    verify: Option<bool>,
}

#[derive(Default, Deserialize)]
struct AuthEntry {
    auth_url: Option<String>,
    username: Option<String>,
    user_id: Option<String>,
    password: Option<String>,
    project_name: Option<String>,
    project_id: Option<String>,
    user_domain_name: Option<String>,
    project_domain_name: Option<String>,
    domain_name: Option<String>,
    application_credential_id: Option<String>,
    application_credential_secret: Option<String>,
}

/// Reads the credentials of `cloud` from `secret`; `region` (from `identityRef`) wins over the
/// cloud's own.
pub fn from_secret(
    secret: &Secret,
    cloud: &str,
    region: Option<&str>,
) -> Result<Credentials, CredentialsError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let data = secret.data.clone().unwrap_or_default();
    let yaml = data
        .get(CLOUDS_YAML_KEY)
        .ok_or_else(|| CredentialsError::MissingKey {
            secret: name.clone(),
            key: CLOUDS_YAML_KEY,
        })?;
    let text = std::str::from_utf8(&yaml.0).map_err(|_| CredentialsError::Unparsable {
        secret: name.clone(),
    })?;
    // Parse errors may quote the document; they are not passed on.
    let file: CloudsFile =
        serde_saphyr::from_str(text).map_err(|_| CredentialsError::Unparsable {
            secret: name.clone(),
        })?;
    let available = file.clouds.keys().cloned().collect::<Vec<_>>().join(", ");
    let Some(entry) = file
        .clouds
        .into_iter()
        .find(|(n, _)| n == cloud)
        .map(|(_, e)| e)
    else {
        return Err(CredentialsError::NoSuchCloud {
            secret: name,
            cloud: cloud.to_string(),
            available,
        });
    };
    let invalid = |problem: &str| CredentialsError::Invalid {
        secret: name.clone(),
        cloud: cloud.to_string(),
        problem: problem.to_string(),
    };
    let a = entry.auth;
    let auth_url = a
        .auth_url
        .filter(|u| !u.is_empty())
        .ok_or_else(|| invalid("auth.auth_url is missing"))?;
    let default_domain = a.domain_name.clone().unwrap_or_else(|| "Default".into());
    let auth = match entry.auth_type.as_deref().unwrap_or("password") {
        "password" | "v3password" => {
            let user = match (a.user_id, a.username) {
                (Some(id), _) => UserRef::Id(id),
                (None, Some(name)) => UserRef::Name {
                    name,
                    domain: a.user_domain_name.unwrap_or_else(|| default_domain.clone()),
                },
                (None, None) => return Err(invalid("auth.username (or user_id) is missing")),
            };
            let project = match (a.project_id, a.project_name) {
                (Some(id), _) => ProjectRef::Id(id),
                (None, Some(name)) => ProjectRef::Name {
                    name,
                    domain: a.project_domain_name.unwrap_or(default_domain),
                },
                (None, None) => {
                    return Err(invalid("auth.project_name (or project_id) is missing"));
                }
            };
            let password = a
                .password
                .ok_or_else(|| invalid("auth.password is missing"))?;
            Auth::Password {
                user,
                password,
                project,
            }
        }
        "v3applicationcredential" => Auth::ApplicationCredential {
            id: a
                .application_credential_id
                .ok_or_else(|| invalid("auth.application_credential_id is missing"))?,
            secret: a
                .application_credential_secret
                .ok_or_else(|| invalid("auth.application_credential_secret is missing"))?,
        },
        other => {
            return Err(invalid(&format!(
                "auth_type {other:?} is not supported (use password or v3applicationcredential)"
            )));
        }
    };
    Ok(Credentials {
        auth_url,
        auth,
        region: region.map(str::to_string).or(entry.region_name),
        interface: entry.interface.unwrap_or_else(|| "public".into()),
        ca_bundle: data
            .get(CACERT_KEY)
            .map(|b| b.0.clone())
            .filter(|b| !b.is_empty()),
        verify: entry.verify.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(clouds: &str, cacert: Option<&str>) -> Secret {
        let mut data = BTreeMap::from([(
            CLOUDS_YAML_KEY.to_string(),
            ByteString(clouds.as_bytes().to_vec()),
        )]);
        if let Some(ca) = cacert {
            data.insert(CACERT_KEY.to_string(), ByteString(ca.as_bytes().to_vec()));
        }
        let mut secret = Secret {
            data: Some(data),
            ..Secret::default()
        };
        secret.metadata.name = Some("demo-cloud-config".into());
        secret
    }

    const CLOUDS: &str = "clouds:
  prod:
    auth: {auth_url: 'https://keystone:5000/v3', username: admin, password: s3cret, project_name: demo, user_domain_name: Users}
    region_name: RegionOne
    interface: internal
  appcred:
    auth_type: v3applicationcredential
    auth: {auth_url: 'https://keystone:5000/v3', application_credential_id: abc, application_credential_secret: t0psecret}
    verify: false
";

    #[test]
    fn password_auth_with_domains_region_interface_and_ca() {
        let credentials = from_secret(
            &secret(CLOUDS, Some("-----BEGIN CERTIFICATE-----")),
            "prod",
            None,
        )
        .unwrap();
        assert_eq!(credentials.auth_url, "https://keystone:5000/v3");
        assert_eq!(
            credentials.auth,
            Auth::Password {
                user: UserRef::Name {
                    name: "admin".into(),
                    domain: "Users".into()
                },
                password: "s3cret".into(),
                project: ProjectRef::Name {
                    name: "demo".into(),
                    domain: "Default".into()
                },
            }
        );
        assert_eq!(credentials.region.as_deref(), Some("RegionOne"));
        assert_eq!(credentials.interface, "internal");
        assert!(credentials.ca_bundle.is_some() && credentials.verify);
        let shown = format!("{credentials:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("BEGIN"),
            "{shown}"
        );
        let overridden = from_secret(&secret(CLOUDS, None), "prod", Some("RegionTwo")).unwrap();
        assert_eq!(overridden.region.as_deref(), Some("RegionTwo"));
    }

    #[test]
    fn application_credentials_and_verify_off() {
        let credentials = from_secret(&secret(CLOUDS, None), "appcred", None).unwrap();
        assert!(
            matches!(credentials.auth, Auth::ApplicationCredential { ref id, .. } if id == "abc")
        );
        assert!(!credentials.verify);
        assert!(!format!("{credentials:?}").contains("t0psecret"));
    }

    #[test]
    fn errors_name_what_to_fix_and_never_a_secret() {
        let missing_cloud = from_secret(&secret(CLOUDS, None), "staging", None).unwrap_err();
        assert_eq!(
            missing_cloud.to_string(),
            "Secret \"demo-cloud-config\": clouds.yaml has no cloud \"staging\" (it has: appcred, prod)"
        );
        let no_password = CLOUDS.replace(", password: s3cret", "");
        let error = from_secret(&secret(&no_password, None), "prod", None).unwrap_err();
        assert!(error.to_string().contains("auth.password is missing"));
        let unparsable = from_secret(&secret("clouds: [password: s3cret", None), "prod", None)
            .unwrap_err()
            .to_string();
        assert!(!unparsable.contains("s3cret"), "{unparsable}");
        let mut empty = Secret::default();
        empty.metadata.name = Some("x".into());
        assert_eq!(
            from_secret(&empty, "prod", None),
            Err(CredentialsError::MissingKey {
                secret: "x".into(),
                key: CLOUDS_YAML_KEY
            })
        );
        let totp = CLOUDS.replace("auth_type: v3applicationcredential", "auth_type: v3totp");
        let error = from_secret(&secret(&totp, None), "appcred", None).unwrap_err();
        assert!(error.to_string().contains("not supported"), "{error}");
    }
}
