//! The provider's ARM client: PUT, GET (optionally expanded) and DELETE of resources by ID at
//! their pinned api-version, actions (`POST <id>/<action>`), listings of a kind in a resource
//! group (every page, a next page followed only on the Resource Manager's own host), and the
//! status of long-running operations — never waiting on one.
//!
//! - **https only**, over the provider's `reqwest` client (rustls on aws-lc, the roots it is
//!   given), a bearer token from a [`TokenSource`] on every request; the token is never shown.
//! - **No retries inside**: a request ARM refused is the reconcile's to retry, with the rest of
//!   its backoff, after the delay ARM asked for ([`ArmError::class`]).
//! - **Long-running operations are handed back, not awaited**: a PUT or DELETE ARM accepted
//!   comes back with its `Azure-AsyncOperation` (else `Location`) URL, which the actuators record
//!   in status and [`Arm::poll`] reads once per reconcile.
//! - **ARM's remaining request budget is honoured**: when `x-ms-ratelimit-remaining-subscription-
//!   reads`/`-writes`/`-deletes` (or `-resource`) falls to [`LOW_WATER`], further requests of
//!   that kind wait [`HOLD`] instead of spending the rest and being answered `429`.
//! - A polling URL is only ever followed on the Resource Manager's own host: one recorded in
//!   status that points anywhere else is treated as vanished, and the token never goes there.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use capi_provider::support::redact::Redaction;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::error::ArmError;
use super::{ResourceId, ResourceType};
use crate::token::TokenSource;

/// When ARM says this few requests of a kind are left, the client holds that kind back.
pub const LOW_WATER: u64 = 5;

/// How long a kind of request is held back once its budget is low.
pub const HOLD: Duration = Duration::from_secs(10);

/// The most pages of one listing followed (ARM's pages hold up to 1000 resources).
const MAX_PAGES: usize = 100;

/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest `Retry-After` taken at its word.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// An operation ARM accepted and is still carrying out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingOperation {
    /// Where its status is read (`Azure-AsyncOperation`, else `Location`).
    pub polling_url: String,
    /// How long ARM asked to wait before reading it.
    pub retry_after: Option<Duration>,
}

/// ARM's answer to a PUT.
#[derive(Clone, Debug, PartialEq)]
pub struct Accepted {
    /// The resource as ARM answered (its `provisioningState` says whether it is done;
    /// `Value::Null` when ARM answered without a body).
    pub body: Value,
    /// The operation still under way, if ARM said so.
    pub operation: Option<PendingOperation>,
}

/// ARM's answer to a DELETE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// The resource is gone (deleted at once, or it did not exist).
    Gone,
    /// Deletion is under way.
    Started(PendingOperation),
}

/// What an operation's status says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Still under way; read it again after the delay ARM asked for.
    InProgress {
        /// ARM's `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// Done.
    Succeeded,
    /// Failed or canceled, with ARM's reason.
    Failed(ArmError),
    /// ARM no longer knows it (`404`), or its URL is not the Resource Manager's.
    Vanished,
}

/// ARM as the actuators use it; mocked in unit tests (feature `mock`).
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Arm: Send + Sync {
    /// The resource, or `None` when it does not exist.
    async fn get(&self, id: &ResourceId) -> Result<Option<Value>, ArmError>;

    /// Creates or updates the resource with `body` (a create-or-update by ID: a replay of the
    /// same PUT is the same resource, never a second one).
    async fn put(&self, id: &ResourceId, body: &Value) -> Result<Accepted, ArmError>;

    /// [`Arm::put`], carried out only if the resource is still as it was read: `etag` is the one
    /// ARM answered with it (sent as `If-Match`). A resource changed since (or gone) is refused
    /// with `412 PreconditionFailed` and nothing is written: read it again.
    async fn put_if_match(
        &self,
        id: &ResourceId,
        body: &Value,
        etag: &str,
    ) -> Result<Accepted, ArmError>;

    /// Deletes the resource (a resource that does not exist is [`Deletion::Gone`]).
    async fn delete(&self, id: &ResourceId) -> Result<Deletion, ArmError>;

    /// Reads an operation's status once.
    async fn poll(&self, polling_url: &str) -> Result<Poll, ArmError>;

    /// The resource with what `$expand` adds to it (`userData` of a virtual machine), or
    /// `None` when it does not exist.
    async fn get_expanded(&self, id: &ResourceId, expand: &str) -> Result<Option<Value>, ArmError>;

    /// Every resource of `kind` in resource group `group` that the OData `filter` selects (all
    /// of them with `None`), every page followed.
    async fn list(
        &self,
        group: &ResourceId,
        kind: ResourceType,
        filter: Option<String>,
    ) -> Result<Vec<Value>, ArmError>;

    /// Carries out `action` on the resource (`POST <id>/<action>`, the removal of named
    /// instances from a scale set), returning the operation when ARM goes on with it.
    async fn post(
        &self,
        id: &ResourceId,
        action: &str,
        body: &Value,
    ) -> Result<Option<PendingOperation>, ArmError>;
}

/// The kinds of request ARM counts separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Budget {
    Reads,
    Writes,
    Deletes,
}

impl Budget {
    const ALL: [Self; 3] = [Self::Reads, Self::Writes, Self::Deletes];

    fn header(self) -> &'static str {
        match self {
            Self::Reads => "x-ms-ratelimit-remaining-subscription-reads",
            Self::Writes => "x-ms-ratelimit-remaining-subscription-writes",
            Self::Deletes => "x-ms-ratelimit-remaining-subscription-deletes",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Until when each kind of request is held back.
#[derive(Debug, Default)]
struct Pace {
    held_until: [Option<Instant>; 3],
}

impl Pace {
    fn wait(&self, budget: Budget) -> Option<Duration> {
        self.held_until[budget.index()]
            .and_then(|until| until.checked_duration_since(Instant::now()))
            .filter(|left| !left.is_zero())
    }

    /// Reads ARM's remaining budgets from an answer to a request of kind `budget`.
    fn observe(&mut self, budget: Budget, headers: &HeaderMap) {
        let remaining = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        for kind in Budget::ALL {
            if remaining(kind.header()).is_some_and(|left| left <= LOW_WATER) {
                self.held_until[kind.index()] = Some(Instant::now() + HOLD);
            }
        }
        // A resource provider's own budget (Microsoft.Compute's, for one) holds back the kind
        // of request that spent it.
        let resource = headers
            .get("x-ms-ratelimit-remaining-resource")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let low = resource.split(',').any(|part| {
            part.rsplit(';')
                .next()
                .and_then(|n| n.trim().parse::<u64>().ok())
                .is_some_and(|left| left <= LOW_WATER)
        });
        if low {
            self.held_until[budget.index()] = Some(Instant::now() + HOLD);
        }
    }
}

/// The production [`Arm`]: one Resource Manager, one identity's tokens.
pub struct ArmClient {
    http: reqwest::Client,
    base: String,
    tokens: Arc<dyn TokenSource>,
    redaction: Redaction,
    pace: Mutex<Pace>,
}

impl std::fmt::Debug for ArmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArmClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// ARM's `Retry-After` (seconds), bounded.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER))
}

impl ArmClient {
    /// A client of the Resource Manager at `resource_manager` (`https://management.azure.com`),
    /// authenticating with `tokens`, over `http`; `redaction` names what must never be shown
    /// (the credentials). Refuses anything but an https URL.
    pub fn new(
        resource_manager: &str,
        tokens: Arc<dyn TokenSource>,
        http: reqwest::Client,
        redaction: Redaction,
    ) -> Result<Self, ArmError> {
        if !resource_manager.starts_with("https://") {
            return Err(ArmError::new(
                None,
                "InsecureEndpoint",
                format!(
                    "the Resource Manager endpoint {resource_manager:?} is not an https URL \
                     (bearer tokens are only sent over TLS)"
                ),
            ));
        }
        Ok(Self {
            http,
            base: resource_manager.trim_end_matches('/').to_string(),
            tokens,
            redaction,
            pace: Mutex::default(),
        })
    }

    fn url(&self, id: &ResourceId) -> String {
        format!("{}{}", self.base, id.url_path())
    }

    /// Whether `url` is on this Resource Manager (scheme, host and port).
    fn is_ours(&self, url: &str) -> bool {
        url.strip_prefix(&self.base)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    async fn send(
        &self,
        budget: Budget,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
        if_match: Option<&str>,
    ) -> Result<(u16, HeaderMap, Value), ArmError> {
        if let Some(wait) = self
            .pace
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .wait(budget)
        {
            return Err(ArmError::new(
                Some(429),
                "SubscriptionBudgetLow",
                format!(
                    "ARM said the subscription's {budget:?} budget is nearly spent; holding \
                     requests back"
                ),
            )
            .retry_after(Some(wait)));
        }
        let token = self.tokens.bearer().await.map_err(ArmError::token)?;
        let redaction = self.redaction.clone().secret(&token.header_value());
        let mut request = self
            .http
            .request(method, url)
            .timeout(REQUEST_TIMEOUT)
            .header(reqwest::header::AUTHORIZATION, token.header_value())
            .header(
                reqwest::header::USER_AGENT,
                concat!("capi-rs-provider-azure/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(etag) = if_match {
            request = request.header(reqwest::header::IF_MATCH, etag);
        }
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let response = request
            .send()
            .await
            .map_err(|e| ArmError::unanswered(redaction.apply(&error_chain(&e))))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        self.pace
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .observe(budget, &headers);
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ArmError::unanswered(redaction.apply(&error_chain(&e))))?;
        let parsed = if bytes.is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_slice(&bytes)
        };
        if status >= 400 {
            let value = parsed.unwrap_or(Value::Null);
            return Err(refusal(status, &headers, &value, &redaction));
        }
        let value = parsed.map_err(|e| {
            ArmError::new(
                Some(status),
                "InvalidResponse",
                format!("ARM answered HTTP {status} with a body that is not JSON: {e}"),
            )
        })?;
        Ok((status, headers, value))
    }

    fn pending(headers: &HeaderMap) -> Option<PendingOperation> {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        header("azure-asyncoperation")
            .or_else(|| header("location"))
            .map(|polling_url| PendingOperation {
                polling_url,
                retry_after: retry_after(headers),
            })
    }
}

/// ARM's refusal as an [`ArmError`]: its `{"error": {"code", "message"}}`, redacted.
fn refusal(status: u16, headers: &HeaderMap, body: &Value, redaction: &Redaction) -> ArmError {
    let error = &body["error"];
    let code = error["code"]
        .as_str()
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| format!("HTTP{status}"));
    let mut message = error["message"].as_str().unwrap_or_default().to_string();
    // The first detail often says what the message does not.
    if let Some(detail) = error["details"][0]["message"].as_str()
        && !message.contains(detail)
    {
        message = format!("{message} ({detail})");
    }
    ArmError::new(Some(status), code, redaction.apply(message.trim()))
        .retry_after(retry_after(headers))
}

/// `text` percent-encoded for a query value (unreserved characters kept).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte));
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// An error and its causes, on one line.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

#[async_trait]
impl Arm for ArmClient {
    async fn get(&self, id: &ResourceId) -> Result<Option<Value>, ArmError> {
        match self
            .send(
                Budget::Reads,
                reqwest::Method::GET,
                &self.url(id),
                None,
                None,
            )
            .await
        {
            Ok((_, _, body)) => Ok(Some(body)),
            Err(error) if error.status == Some(404) => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn put(&self, id: &ResourceId, body: &Value) -> Result<Accepted, ArmError> {
        let (_, headers, body) = self
            .send(
                Budget::Writes,
                reqwest::Method::PUT,
                &self.url(id),
                Some(body),
                None,
            )
            .await?;
        Ok(Accepted {
            body,
            operation: Self::pending(&headers),
        })
    }

    async fn put_if_match(
        &self,
        id: &ResourceId,
        body: &Value,
        etag: &str,
    ) -> Result<Accepted, ArmError> {
        let (_, headers, body) = self
            .send(
                Budget::Writes,
                reqwest::Method::PUT,
                &self.url(id),
                Some(body),
                Some(etag),
            )
            .await?;
        Ok(Accepted {
            body,
            operation: Self::pending(&headers),
        })
    }

    async fn delete(&self, id: &ResourceId) -> Result<Deletion, ArmError> {
        match self
            .send(
                Budget::Deletes,
                reqwest::Method::DELETE,
                &self.url(id),
                None,
                None,
            )
            .await
        {
            Ok((202, headers, _)) => Ok(match Self::pending(&headers) {
                Some(operation) => Deletion::Started(operation),
                // Accepted without a way to follow it: the resource's own state tells.
                None => Deletion::Started(PendingOperation {
                    polling_url: self.url(id),
                    retry_after: retry_after(&headers),
                }),
            }),
            Ok(_) => Ok(Deletion::Gone),
            Err(error) if error.status == Some(404) => Ok(Deletion::Gone),
            Err(error) => Err(error),
        }
    }

    async fn get_expanded(&self, id: &ResourceId, expand: &str) -> Result<Option<Value>, ArmError> {
        let url = format!("{}&$expand={}", self.url(id), encode(expand));
        match self
            .send(Budget::Reads, reqwest::Method::GET, &url, None, None)
            .await
        {
            Ok((_, _, body)) => Ok(Some(body)),
            Err(error) if error.status == Some(404) => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn list(
        &self,
        group: &ResourceId,
        kind: ResourceType,
        filter: Option<String>,
    ) -> Result<Vec<Value>, ArmError> {
        let namespace = kind.namespace().unwrap_or("Microsoft.Resources");
        let mut url = format!(
            "{}/subscriptions/{}/resourceGroups/{}/providers/{namespace}/{}?api-version={}",
            self.base,
            group.subscription,
            group.resource_group,
            kind.collection(),
            kind.api_version()
        );
        if let Some(filter) = filter {
            url = format!("{url}&$filter={}", encode(&filter));
        }
        let mut all = Vec::new();
        for _ in 0..MAX_PAGES {
            let (_, _, page) = self
                .send(Budget::Reads, reqwest::Method::GET, &url, None, None)
                .await?;
            if let Some(values) = page["value"].as_array() {
                all.extend(values.iter().cloned());
            }
            match page["nextLink"].as_str().filter(|l| !l.is_empty()) {
                // A next page is only ever read from the Resource Manager itself.
                Some(next) if self.is_ours(next) => url = next.to_string(),
                Some(_) => {
                    return Err(ArmError::new(
                        None,
                        "InvalidResponse",
                        "ARM named a next page that is not on the Resource Manager",
                    ));
                }
                None => return Ok(all),
            }
        }
        Err(ArmError::new(
            None,
            "TooManyPages",
            format!(
                "listing {} took more than {MAX_PAGES} pages",
                kind.collection()
            ),
        ))
    }

    async fn post(
        &self,
        id: &ResourceId,
        action: &str,
        body: &Value,
    ) -> Result<Option<PendingOperation>, ArmError> {
        let url = format!(
            "{}{id}/{action}?api-version={}",
            self.base,
            id.kind.api_version()
        );
        let (_, headers, _) = self
            .send(
                Budget::Writes,
                reqwest::Method::POST,
                &url,
                Some(body),
                None,
            )
            .await?;
        Ok(Self::pending(&headers))
    }

    async fn poll(&self, polling_url: &str) -> Result<Poll, ArmError> {
        if !self.is_ours(polling_url) {
            tracing::warn!(
                url = %polling_url.split('?').next().unwrap_or_default(),
                "an operation's polling URL is not the Resource Manager's; not following it"
            );
            return Ok(Poll::Vanished);
        }
        let (status, headers, body) = match self
            .send(Budget::Reads, reqwest::Method::GET, polling_url, None, None)
            .await
        {
            Ok(answer) => answer,
            Err(error) if error.status == Some(404) => return Ok(Poll::Vanished),
            // A `Location` URL answers a failed operation with its error status. Taking any
            // other refusal for a failure is safe: the operation is dropped and the resource's
            // own state read again.
            Err(error) if error.status.is_some_and(|s| s >= 400 && s != 429) => {
                return Ok(Poll::Failed(error));
            }
            Err(error) => return Err(error),
        };
        let wait = retry_after(&headers);
        if status == 202 {
            return Ok(Poll::InProgress { retry_after: wait });
        }
        let Some(state) = body.get("status").and_then(Value::as_str) else {
            // A `Location` URL answers the finished resource (or nothing) once done.
            return Ok(Poll::Succeeded);
        };
        Ok(match state.to_ascii_lowercase().as_str() {
            "succeeded" => Poll::Succeeded,
            "failed" | "canceled" | "cancelled" => {
                let error = &body["error"];
                Poll::Failed(ArmError::new(
                    Some(status),
                    error["code"].as_str().unwrap_or(state),
                    self.redaction
                        .apply(error["message"].as_str().unwrap_or("the operation failed")),
                ))
            }
            _ => Poll::InProgress { retry_after: wait },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn a_low_budget_holds_that_kind_of_request_back() {
        let mut pace = Pace::default();
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-ms-ratelimit-remaining-subscription-writes",
            HeaderValue::from_static("1199"),
        );
        pace.observe(Budget::Writes, &headers);
        assert_eq!(pace.wait(Budget::Writes), None);
        headers.insert(
            "x-ms-ratelimit-remaining-subscription-writes",
            HeaderValue::from_static("3"),
        );
        pace.observe(Budget::Writes, &headers);
        assert!(pace.wait(Budget::Writes).is_some_and(|w| w <= HOLD));
        assert_eq!(pace.wait(Budget::Reads), None);
    }

    #[test]
    fn a_resource_providers_budget_holds_the_kind_that_spent_it() {
        let mut pace = Pace::default();
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-ms-ratelimit-remaining-resource",
            HeaderValue::from_static(
                "Microsoft.Compute/PutVM3Min;238,Microsoft.Compute/PutVM30Min;2",
            ),
        );
        pace.observe(Budget::Writes, &headers);
        assert!(pace.wait(Budget::Writes).is_some());
        assert_eq!(pace.wait(Budget::Deletes), None);
    }

    #[test]
    fn retry_after_is_bounded() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("17"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(17)));
        headers.insert("retry-after", HeaderValue::from_static("99999"));
        assert_eq!(retry_after(&headers), Some(MAX_RETRY_AFTER));
        headers.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn a_refusal_carries_arms_code_and_message_redacted() {
        let body = serde_json::json!({"error": {
            "code": "InvalidParameter",
            "message": "bad value s3cr3t",
            "details": [{"code": "X", "message": "osDisk.diskSizeGB too small"}]
        }});
        let error = refusal(
            400,
            &HeaderMap::new(),
            &body,
            &Redaction::default().secret("s3cr3t"),
        );
        assert_eq!(error.code, "InvalidParameter");
        assert!(!error.message.contains("s3cr3t"));
        assert!(error.message.contains("diskSizeGB too small"));
        let bare = refusal(502, &HeaderMap::new(), &Value::Null, &Redaction::default());
        assert_eq!(bare.code, "HTTP502");
    }
}
