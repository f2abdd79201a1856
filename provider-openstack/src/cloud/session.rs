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
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method};
use openstack_sdk::api::rest_endpoint_prelude::{BodyError, QueryParams};
use openstack_sdk::api::{ApiError, QueryAsync, RestEndpoint, ignore};
use openstack_sdk::config::CloudConfig;
use openstack_sdk::types::{ApiVersion, ServiceType};
use openstack_sdk::{AsyncOpenStack, RestError};
use serde::de::DeserializeOwned;

use capi_provider::support::call_retry::CallRetry;

use super::message::OpenStackRedaction;
use super::{CloudError, CloudResult};
use crate::credentials::{Auth, Credentials, ProjectRef, UserRef};
use capi_provider::support::redact::Redaction;

/// An authenticated connection to one cloud with one set of credentials. Cheap to clone (shares the
/// token and the HTTP connection pool).
#[derive(Clone)]
pub struct Session {
    client: AsyncOpenStack,
    /// The credentials' secrets, blanked in every error message.
    redaction: Redaction,
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
        let redaction = credentials_redaction(credentials);
        // Every response is read within REQUEST_TIMEOUT, and as sent: a compressed body is not
        // inflated (the cloud's answer to one request cannot expand without bound in memory).
        let client = AsyncOpenStack::builder(&config)
            .disable_auth_cache(true)
            .http_timeout(REQUEST_TIMEOUT)
            .http_connect_timeout(CONNECT_TIMEOUT)
            .http_gzip(false)
            .http_deflate(false)
            .connect()
            .await
            .map_err(|e| CloudError::Auth {
                // The SDK's messages name the failing step (discovery, auth, catalog) and carry
                // Keystone's answer, which may echo the request.
                message: redaction.apply(&e.to_string()),
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
                let error = redaction.apply(&error.to_string());
                tracing::debug!(%service, %error, "service endpoint discovery failed");
            }
        }
        Ok(Self {
            client,
            redaction,
            _ca_file: ca_file,
        })
    }

    /// Sends `call` and decodes the value under its response key.
    pub(crate) async fn json<T: DeserializeOwned + 'static>(&self, call: Call) -> CloudResult<T> {
        let what = call.describe();
        let redaction = self.redaction_for(&call);
        self.retry_for(&call)
            .run(CloudError::is_transient, || async {
                call.query_async(&self.client)
                    .await
                    .map_err(|e| classify(what.clone(), e, &redaction))
            })
            .await
    }

    /// Sends `call` and ignores the response body.
    pub(crate) async fn send(&self, call: Call) -> CloudResult<()> {
        let what = call.describe();
        let redaction = self.redaction_for(&call);
        let retry = self.retry_for(&call);
        let call = ignore(call);
        retry
            .run(CloudError::is_transient, || async {
                call.query_async(&self.client)
                    .await
                    .map_err(|e| classify(what.clone(), e, &redaction))
            })
            .await
    }

    /// How `call` is retried through transient faults (5xx, timeouts, resets): like an SDK, the
    /// requests that are safe to repeat (GET, PUT, DELETE); a POST creates, and OpenStack does
    /// not deduplicate creates, so it is made once and the loop looks before it tries again.
    fn retry_for(&self, call: &Call) -> CallRetry {
        if call.method == Method::POST {
            CallRetry::none()
        } else {
            CallRetry::default()
        }
    }

    /// What an error answer to `call` must not show: the credentials' secrets and the call's.
    fn redaction_for(&self, call: &Call) -> Redaction {
        match &call.body {
            Some(body) => self.redaction.clone().request_body(body),
            None => self.redaction.clone(),
        }
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
///
/// Each Secret has its own slot: authenticating with one cloud (a Keystone round trip plus
/// endpoint discovery, slow when that Keystone is) holds only that Secret's slot, so reconciles
/// of clusters with other credentials go on meanwhile. Reconciles that need the same Secret
/// while its one authentication is in flight neither ask Keystone too nor wait (which would hold
/// the controller's workers): they get [`SessionError::Authenticating`] and come back shortly.
/// An authentication is bounded by [`AUTHENTICATION_TIMEOUT`]. A session not used for
/// [`Sessions::IDLE`] is dropped (its Secret or its clusters are gone, most likely), so the
/// cache holds at most the Secrets in use.
#[derive(Clone, Default)]
pub struct Sessions {
    slots: Arc<std::sync::Mutex<HashMap<String, Arc<Slot>>>>,
}

/// The longest one authentication (Keystone and endpoint discovery) may take.
pub const AUTHENTICATION_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest one request may take, its whole response body read.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest a connection may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One Secret's session: the authentication in flight holds `session`'s lock and says so in
/// `authenticating`.
#[derive(Default)]
struct Slot {
    session: tokio::sync::Mutex<Option<(String, Session)>>,
    authenticating: std::sync::atomic::AtomicBool,
    last_used: std::sync::Mutex<Option<std::time::Instant>>,
}

/// Raises a slot's `authenticating` flag while alive (the authentication may end early with an
/// error, or be dropped with its reconcile).
struct Authenticating<'a>(&'a std::sync::atomic::AtomicBool);

impl<'a> Authenticating<'a> {
    fn start(flag: &'a std::sync::atomic::AtomicBool) -> Self {
        flag.store(true, std::sync::atomic::Ordering::Release);
        Self(flag)
    }
}

impl Drop for Authenticating<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

impl Slot {
    fn touch(&self) {
        *lock(&self.last_used) = Some(std::time::Instant::now());
    }

    fn idle_for(&self, idle: Duration) -> bool {
        lock(&self.last_used).is_some_and(|used| used.elapsed() >= idle)
    }
}

impl Sessions {
    /// How long an unused session is kept.
    pub const IDLE: Duration = Duration::from_secs(30 * 60);

    /// The session for the Secret `key` (namespace/name) at `resource_version`; a new one (a new
    /// token) when the Secret changed since the cached one was made.
    pub async fn get(
        &self,
        key: &str,
        resource_version: &str,
        credentials: impl FnOnce() -> Result<Credentials, crate::credentials::CredentialsError>,
    ) -> Result<Session, SessionError> {
        let slot = self.slot(key);
        // While one reconcile authenticates for this Secret the others do not queue behind it
        // (a slow Keystone would hold every worker of the controller): they come back shortly.
        if slot
            .authenticating
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(SessionError::Authenticating);
        }
        let mut held = slot.session.lock().await;
        if let Some((version, session)) = held.as_ref()
            && version == resource_version
        {
            return Ok(session.clone());
        }
        let credentials = credentials().map_err(SessionError::Credentials)?;
        let _authenticating = Authenticating::start(&slot.authenticating);
        let session = tokio::time::timeout(AUTHENTICATION_TIMEOUT, Session::connect(&credentials))
            .await
            .map_err(|_| {
                SessionError::Cloud(CloudError::Auth {
                    message: format!(
                        "Keystone and endpoint discovery took longer than {}s",
                        AUTHENTICATION_TIMEOUT.as_secs()
                    ),
                })
            })?
            .map_err(SessionError::Cloud)?;
        *held = Some((resource_version.to_string(), session.clone()));
        Ok(session)
    }

    /// Forgets the session of `key` (after an authentication failure, so the next reconcile
    /// authenticates afresh).
    pub async fn forget(&self, key: &str) {
        lock(&self.slots).remove(key);
    }

    /// How many Secrets have a slot.
    pub fn len(&self) -> usize {
        lock(&self.slots).len()
    }

    /// Whether no Secret has a slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `key`'s slot, made if new; drops the slots idle for [`Sessions::IDLE`] on the way (never
    /// one in use: its authentication holds the lock).
    fn slot(&self, key: &str) -> Arc<Slot> {
        self.slot_pruning(key, Self::IDLE)
    }

    fn slot_pruning(&self, key: &str, idle: Duration) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        slots
            .retain(|k, slot| k == key || !slot.idle_for(idle) || slot.session.try_lock().is_err());
        let slot = slots.entry(key.to_string()).or_default().clone();
        // Touched under the map's lock: no other caller can prune it before it is used.
        slot.touch();
        slot
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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
    /// Another reconcile is authenticating with these credentials right now.
    #[error("authenticating with Keystone for these credentials; the session is being made")]
    Authenticating,
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

fn classify(what: String, error: ApiError<RestError>, redaction: &Redaction) -> CloudError {
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
        ApiError::OpenStack { status, msg, .. } => by_status(status, redaction.apply(&msg)),
        ApiError::OpenStackService { status, data, .. } => {
            let message = match serde_json::from_str::<serde_json::Value>(&data) {
                Ok(body) => redaction.cloud_message(&body),
                Err(_) => redaction.apply(&data),
            };
            by_status(status, message)
        }
        ApiError::OpenStackUnrecognized { status, obj, .. } => {
            // The body may echo the request: at debug level only, and blanked there too.
            tracing::debug!(%status, body = %redaction.apply(&obj.to_string()), "unrecognised OpenStack error body");
            by_status(status, redaction.cloud_message(&obj))
        }
        other => CloudError::Transient {
            what,
            message: redaction.apply(&other.to_string()),
        },
    }
}

/// The secrets of `credentials`, for blanking in messages.
fn credentials_redaction(credentials: &Credentials) -> Redaction {
    match &credentials.auth {
        Auth::Password { password, .. } => Redaction::default().secret(password),
        Auth::ApplicationCredential { secret, .. } => Redaction::default().secret(secret),
    }
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

    #[tokio::test]
    async fn idle_sessions_are_dropped_and_one_authenticating_is_kept() {
        let sessions = Sessions::default();
        sessions.slot("ns/idle").touch();
        let busy = sessions.slot("ns/busy");
        busy.touch();
        let authenticating = busy.session.lock().await;
        let _ = sessions.slot_pruning("ns/new", Duration::ZERO);
        let mut keys: Vec<String> = lock(&sessions.slots).keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, ["ns/busy", "ns/new"]);
        drop(authenticating);
        let _ = sessions.slot_pruning("ns/new", Duration::ZERO);
        assert_eq!(sessions.len(), 1, "only the slot asked for stays");
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
