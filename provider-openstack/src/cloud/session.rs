//! One authenticated connection to a cloud, and the cache that shares connections between
//! reconciles.
//!
//! Authentication, the service catalog, endpoint version discovery, TLS (with the Secret's CA
//! bundle) and token renewal on expiry or `401` are `openstack_sdk`'s; the requests themselves are
//! this crate's own small `Call`s with serde types, so that the provider depends on the few fields
//! it reads rather than on the generated request builders.
//!
//! Token handling: one Keystone token per [`Session`], shared by every reconcile of every object
//! that uses the same credentials Secret (Keystone is asked once, not once per reconcile — CAPO's
//! users hit Keystone overload from exactly that). The SDK's on-disk token cache is disabled: a
//! controller must not write tokens to its filesystem. [`Sessions`] drops a session when the
//! Secret's `resourceVersion` changes, so rotated credentials take effect at the next reconcile.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http::{HeaderMap, HeaderValue, Method};
use openstack_sdk::api::rest_endpoint_prelude::{BodyError, QueryParams};
use openstack_sdk::api::{ApiError, QueryAsync, RestEndpoint, ignore};
use openstack_sdk::config::CloudConfig;
use openstack_sdk::types::{ApiVersion, ServiceType};
use openstack_sdk::{AsyncOpenStack, OpenStackError, RestError};
use serde::de::DeserializeOwned;

use super::{CloudError, CloudResult};
use crate::credentials::{Auth, Credentials, ProjectRef, UserRef};

/// An authenticated connection to one cloud with one set of credentials. Cheap to clone (shares the
/// token and the HTTP connection pool).
#[derive(Clone)]
pub struct Session {
    client: AsyncOpenStack,
    /// Keeps the CA bundle file alive as long as the session uses it.
    _ca_file: Option<Arc<CaFile>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Session { .. }")
    }
}

impl Session {
    /// Authenticates with Keystone and reads the service catalog.
    ///
    /// Errors name what failed (unreachable Keystone, rejected credentials, a missing service)
    /// and never contain a password, secret or token.
    pub async fn connect(credentials: &Credentials) -> CloudResult<Self> {
        let ca_file = match &credentials.ca_bundle {
            Some(pem) => Some(Arc::new(CaFile::write(pem).map_err(|e| {
                CloudError::Auth {
                    message: format!("cannot store the CA bundle for the TLS client: {e}"),
                }
            })?)),
            None => None,
        };
        let config = cloud_config(credentials, ca_file.as_deref())?;
        let client = AsyncOpenStack::builder(&config)
            .disable_auth_cache(true)
            .connect()
            .await
            .map_err(|e| CloudError::Auth {
                message: describe_session_error(&e),
            })?;
        // Version discovery (e.g. Neutron's catalog URL is unversioned; requests go to `/v2.0/`).
        // A service the cloud lacks (no Octavia, say) fails only the calls that need it.
        for service in [
            ServiceType::Compute,
            ServiceType::Network,
            ServiceType::Image,
            ServiceType::LoadBalancer,
        ] {
            if let Err(error) = client.discover_service_endpoint(&service).await {
                tracing::debug!(%service, %error, "service endpoint discovery failed");
            }
        }
        Ok(Self {
            client,
            _ca_file: ca_file,
        })
    }

    /// Sends `call` and decodes the value under its response key.
    pub(crate) async fn json<T: DeserializeOwned + 'static>(&self, call: Call) -> CloudResult<T> {
        let what = call.describe();
        call.query_async(&self.client)
            .await
            .map_err(|e| classify(what, e))
    }

    /// Sends `call` and ignores the response body.
    pub(crate) async fn send(&self, call: Call) -> CloudResult<()> {
        let what = call.describe();
        ignore(call)
            .query_async(&self.client)
            .await
            .map_err(|e| classify(what, e))
    }

    /// Sends `call`, treating a 404 as success (deletes).
    pub(crate) async fn send_ignoring_404(&self, call: Call) -> CloudResult<()> {
        match self.send(call).await {
            Err(CloudError::NotFound { .. }) => Ok(()),
            other => other,
        }
    }
}

/// The sessions of a controller, one per credentials Secret, shared by all reconciles.
#[derive(Clone, Default)]
pub struct Sessions {
    inner: Arc<tokio::sync::Mutex<HashMap<String, (String, Session)>>>,
}

impl Sessions {
    /// The session for the Secret `key` (namespace/name) at `resource_version`; a new one (a new
    /// token) when the Secret changed since the cached one was made.
    pub async fn get(
        &self,
        key: &str,
        resource_version: &str,
        credentials: impl FnOnce() -> Result<Credentials, crate::credentials::CredentialsError>,
    ) -> Result<Session, SessionError> {
        let mut sessions = self.inner.lock().await;
        if let Some((version, session)) = sessions.get(key)
            && version == resource_version
        {
            return Ok(session.clone());
        }
        let credentials = credentials().map_err(SessionError::Credentials)?;
        let session = Session::connect(&credentials)
            .await
            .map_err(SessionError::Cloud)?;
        sessions.insert(
            key.to_string(),
            (resource_version.to_string(), session.clone()),
        );
        Ok(session)
    }

    /// Forgets the session of `key` (after an authentication failure, so the next reconcile
    /// authenticates afresh).
    pub async fn forget(&self, key: &str) {
        self.inner.lock().await.remove(key);
    }
}

/// Why no session could be had.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The Secret does not hold usable credentials.
    #[error(transparent)]
    Credentials(crate::credentials::CredentialsError),
    /// The cloud refused or could not be reached.
    #[error(transparent)]
    Cloud(CloudError),
}

/// A request: method, service, path relative to the service's versioned endpoint, query, JSON body.
#[derive(Debug)]
pub(crate) struct Call {
    method: Method,
    service: ServiceType,
    path: String,
    query: Vec<(String, String)>,
    body: Option<serde_json::Value>,
    response_key: Option<&'static str>,
    headers: HeaderMap,
}

impl Call {
    fn new(method: Method, service: ServiceType, path: impl Into<String>) -> Self {
        let mut headers = HeaderMap::new();
        if service == ServiceType::Compute {
            // Server tags and the fields the provider reads need at least 2.52.
            headers.insert(
                "OpenStack-API-Version",
                HeaderValue::from_static("compute 2.52"),
            );
            headers.insert(
                "X-OpenStack-Nova-API-Version",
                HeaderValue::from_static("2.52"),
            );
        }
        Self {
            method,
            service,
            path: path.into(),
            query: Vec::new(),
            body: None,
            response_key: None,
            headers,
        }
    }

    pub(crate) fn get(service: ServiceType, path: impl Into<String>) -> Self {
        Self::new(Method::GET, service, path)
    }
    pub(crate) fn post(service: ServiceType, path: impl Into<String>) -> Self {
        Self::new(Method::POST, service, path)
    }
    pub(crate) fn put(service: ServiceType, path: impl Into<String>) -> Self {
        Self::new(Method::PUT, service, path)
    }
    pub(crate) fn delete(service: ServiceType, path: impl Into<String>) -> Self {
        Self::new(Method::DELETE, service, path)
    }

    pub(crate) fn query(mut self, pairs: &[(String, String)]) -> Self {
        self.query.extend(pairs.iter().cloned());
        self
    }
    pub(crate) fn param(mut self, key: &str, value: impl Into<String>) -> Self {
        self.query.push((key.to_string(), value.into()));
        self
    }
    pub(crate) fn body(mut self, body: serde_json::Value) -> Self {
        self.body = Some(body);
        self
    }
    pub(crate) fn key(mut self, key: &'static str) -> Self {
        self.response_key = Some(key);
        self
    }

    /// `GET compute servers` — for error messages; never includes the body.
    fn describe(&self) -> String {
        format!("{} {} {}", self.method, self.service, self.path)
    }
}

impl RestEndpoint for Call {
    fn method(&self) -> Method {
        self.method.clone()
    }
    fn endpoint(&self) -> Cow<'static, str> {
        self.path.clone().into()
    }
    fn service_type(&self) -> ServiceType {
        self.service.clone()
    }
    fn parameters(&self) -> QueryParams<'_> {
        let mut params = QueryParams::default();
        for (k, v) in &self.query {
            params.push(k.as_str(), v.as_str());
        }
        params
    }
    fn body(&self) -> Result<Option<(&'static str, Vec<u8>)>, BodyError> {
        match &self.body {
            Some(body) => Ok(Some(("application/json", serde_json::to_vec(body)?))),
            None => Ok(None),
        }
    }
    fn response_key(&self) -> Option<Cow<'static, str>> {
        self.response_key.map(Cow::Borrowed)
    }
    fn request_headers(&self) -> Option<&HeaderMap> {
        Some(&self.headers)
    }
    fn api_version(&self) -> Option<ApiVersion> {
        None
    }
    fn min_version(&self) -> Option<ApiVersion> {
        match self.service {
            ServiceType::Compute => Some(ApiVersion::new(2, 1)),
            _ => Some(ApiVersion::new(2, 0)),
        }
    }
}

fn classify(what: String, error: ApiError<RestError>) -> CloudError {
    let by_status = |status: http::StatusCode, message: String| match status.as_u16() {
        404 => CloudError::NotFound { what: what.clone() },
        409 => CloudError::Conflict {
            what: what.clone(),
            message,
        },
        400 | 403 | 413 => CloudError::Rejected {
            what: what.clone(),
            message,
        },
        401 => CloudError::Auth { message },
        _ => CloudError::Transient {
            what: what.clone(),
            message: format!("{status}: {message}"),
        },
    };
    match error {
        ApiError::OpenStack { status, msg, .. } => by_status(status, bounded(&msg)),
        ApiError::OpenStackService { status, data, .. } => {
            let message = match serde_json::from_str::<serde_json::Value>(&data) {
                Ok(body) => cloud_message(&body),
                Err(_) => bounded(&data),
            };
            by_status(status, message)
        }
        ApiError::OpenStackUnrecognized { status, obj, .. } => {
            // The raw body may echo the request (user data, a password): debug level only.
            tracing::debug!(%status, body = %obj, "unrecognised OpenStack error body");
            by_status(status, cloud_message(&obj))
        }
        other => CloudError::Transient {
            what,
            message: bounded(&other.to_string()),
        },
    }
}

/// The longest cloud message that reaches conditions, events and logs.
const MAX_MESSAGE: usize = 512;

/// The message field of an OpenStack error body — Nova's `{"badRequest": {"message"}}`,
/// Neutron's `{"NeutronError": {"message"}}`, Octavia's `{"faultstring"}`, Keystone's
/// `{"error": {"message"}}` — bounded; never the rest of the body, which may echo the request.
fn cloud_message(body: &serde_json::Value) -> String {
    const FIELDS: [&str; 4] = ["message", "faultstring", "description", "title"];
    let direct = |value: &serde_json::Value| {
        FIELDS
            .iter()
            .find_map(|field| value.get(field).and_then(|m| m.as_str()))
            .map(str::to_string)
    };
    let nested = || {
        body.as_object()
            .and_then(|fields| fields.values().find_map(&direct))
    };
    match direct(body).or_else(nested) {
        Some(message) => bounded(&message),
        None => format!(
            "unrecognised error body ({} bytes; logged at debug level)",
            body.to_string().len()
        ),
    }
}

/// `text` without control characters, at most [`MAX_MESSAGE`] characters.
fn bounded(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_MESSAGE)
        .collect();
    if text.chars().count() > MAX_MESSAGE {
        out.push('…');
    }
    out
}

fn describe_session_error(error: &OpenStackError) -> String {
    // The SDK's messages name the failing step (discovery, auth, catalog) and carry Keystone's
    // answer; they never include the request body that holds the password.
    error.to_string()
}

/// The SDK's cloud configuration for `credentials`, built in memory (no clouds.yaml file is read
/// and the user's own `~/.config/openstack` is never consulted).
fn cloud_config(credentials: &Credentials, ca_file: Option<&CaFile>) -> CloudResult<CloudConfig> {
    let mut auth = serde_json::Map::new();
    auth.insert("auth_url".into(), credentials.auth_url.clone().into());
    let auth_type = match &credentials.auth {
        Auth::Password {
            user,
            password,
            project,
        } => {
            match user {
                UserRef::Id(id) => {
                    auth.insert("user_id".into(), id.clone().into());
                }
                UserRef::Name { name, domain } => {
                    auth.insert("username".into(), name.clone().into());
                    auth.insert("user_domain_name".into(), domain.clone().into());
                }
            }
            match project {
                ProjectRef::Id(id) => {
                    auth.insert("project_id".into(), id.clone().into());
                }
                ProjectRef::Name { name, domain } => {
                    auth.insert("project_name".into(), name.clone().into());
                    auth.insert("project_domain_name".into(), domain.clone().into());
                }
            }
            auth.insert("password".into(), password.clone().into());
            "password"
        }
        Auth::ApplicationCredential { id, secret } => {
            auth.insert("application_credential_id".into(), id.clone().into());
            auth.insert(
                "application_credential_secret".into(),
                secret.clone().into(),
            );
            "v3applicationcredential"
        }
    };
    let mut config = serde_json::json!({
        "auth": auth,
        "auth_type": auth_type,
        "interface": credentials.interface,
        "verify": credentials.verify,
        "auth_cache": false,
        "name": "capi-rs",
    });
    if let Some(region) = &credentials.region {
        config["region_name"] = region.clone().into();
    }
    if let Some(ca) = ca_file {
        config["cacert"] = ca.path.to_string_lossy().into_owned().into();
    }
    serde_json::from_value(config).map_err(|e| CloudError::Auth {
        // serde's message names the field, never its value.
        message: format!("invalid cloud configuration: {e}"),
    })
}

/// The CA bundle on disk, because the SDK reads `cacert` from a path: a file readable only by
/// this process's user, removed when the last session using it goes.
struct CaFile {
    path: PathBuf,
}

static CA_FILES: AtomicU64 = AtomicU64::new(0);

impl CaFile {
    fn write(pem: &[u8]) -> std::io::Result<Self> {
        let n = CA_FILES.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "capi-rs-openstack-ca-{}-{n}.pem",
            std::process::id()
        ));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&path)?;
        file.write_all(pem)?;
        Ok(Self { path })
    }
}

impl Drop for CaFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_clouds_message_reaches_the_user_and_it_is_bounded() {
        use serde_json::json;
        let echoed = json!({"badRequest": {"code": 400, "message": "Invalid flavorRef",
                            "request": {"adminPass": "s3cret", "user_data": "I2Nsb3Vk"}}});
        assert_eq!(cloud_message(&echoed), "Invalid flavorRef");
        let unknown = json!({"request": {"password": "s3cret"}});
        let message = cloud_message(&unknown);
        assert!(!message.contains("s3cret"), "{message}");
        assert!(message.starts_with("unrecognised error body"), "{message}");
        assert_eq!(
            cloud_message(&json!({"faultstring": "Quota has been met"})),
            "Quota has been met"
        );
        let long = bounded(&"x\n".repeat(1000));
        assert_eq!(long.chars().count(), MAX_MESSAGE + 1);
        assert!(!long.contains('\n'));
    }

    fn password_credentials() -> Credentials {
        Credentials {
            auth_url: "https://keystone.example:5000/v3".into(),
            auth: Auth::Password {
                user: UserRef::Name {
                    name: "demo".into(),
                    domain: "Default".into(),
                },
                password: "hunter2-secret".into(),
                project: ProjectRef::Name {
                    name: "demo".into(),
                    domain: "Default".into(),
                },
            },
            region: Some("RegionOne".into()),
            interface: "internal".into(),
            ca_bundle: None,
            verify: true,
        }
    }

    #[test]
    fn the_sdk_config_carries_every_credential_field_and_disables_the_disk_cache() {
        let config = cloud_config(&password_credentials(), None).unwrap();
        let auth = config.auth.as_ref().unwrap();
        assert_eq!(auth.username.as_deref(), Some("demo"));
        assert_eq!(auth.project_name.as_deref(), Some("demo"));
        assert_eq!(auth.user_domain_name.as_deref(), Some("Default"));
        assert_eq!(config.region_name.as_deref(), Some("RegionOne"));
        assert_eq!(config.interface.as_deref(), Some("internal"));
        assert_eq!(config.auth_type.as_deref(), Some("password"));
        assert_eq!(config.auth_cache, Some(false));
        assert!(config.cacert.is_none());
    }

    #[test]
    fn application_credentials_use_their_auth_type() {
        let mut credentials = password_credentials();
        credentials.auth = Auth::ApplicationCredential {
            id: "ac-id".into(),
            secret: "ac-secret".into(),
        };
        let config = cloud_config(&credentials, None).unwrap();
        assert_eq!(config.auth_type.as_deref(), Some("v3applicationcredential"));
        assert_eq!(
            config
                .auth
                .as_ref()
                .unwrap()
                .application_credential_id
                .as_deref(),
            Some("ac-id")
        );
    }

    #[test]
    fn the_ca_bundle_file_is_private_and_removed_with_the_session() {
        let ca = CaFile::write(b"-----BEGIN CERTIFICATE-----\n").unwrap();
        let path = ca.path.clone();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "only the owner may read the CA file");
        }
        let config = cloud_config(&password_credentials(), Some(&ca)).unwrap();
        assert_eq!(config.cacert.as_deref(), path.to_str());
        drop(ca);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn an_unreachable_keystone_is_an_auth_error_without_the_password() {
        let mut credentials = password_credentials();
        credentials.auth_url = "http://127.0.0.1:9/v3".into();
        let error = Session::connect(&credentials).await.unwrap_err();
        let shown = format!("{error} {error:?}");
        assert!(matches!(error, CloudError::Auth { .. }), "{shown}");
        assert!(!shown.contains("hunter2-secret"), "{shown}");
    }
}
