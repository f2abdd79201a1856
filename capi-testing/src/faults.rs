//! Injecting API-server failures into a client: `409 Conflict` on a status write, `500` on a list,
//! a request that hangs (a stalled proxy), a watch whose events arrive late (a lagging cache),
//! without touching the server.
//!
//! ```no_run
//! # async fn demo(env: &capi_testing::TestEnv) -> Result<(), capi_testing::envtest::EnvtestError> {
//! use capi_testing::faults::ApiFaults;
//!
//! let faults = ApiFaults::default();
//! // The next 3 PATCHes of any object whose path contains "/inmemorymachines/m-0" answer 409.
//! faults.fail_next(http::Method::PATCH, "/inmemorymachines/m-0", 409, 3);
//! let client = faults.client(env.control_plane().kubeconfig_yaml()).await?;
//! # let _ = client; Ok(()) }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::{Body, ClientBuilder, DynBody};
use tower::{Layer, Service};

use crate::envtest::EnvtestError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug)]
struct Rule {
    method: Method,
    path_contains: String,
    status: u16,
    remaining: u32,
}

/// A set of failure rules shared by every client built from it. Cloning shares the rules.
#[derive(Clone, Debug, Default)]
pub struct ApiFaults {
    rules: Arc<Mutex<Vec<Rule>>>,
    stalls: Arc<Mutex<Vec<String>>>,
    lags: Arc<Mutex<Vec<(String, std::time::Duration)>>>,
    injected: Arc<AtomicU64>,
}

impl ApiFaults {
    /// The next `times` requests with this method whose path contains `path_contains` get
    /// `status` (with a Kubernetes `Status` body) instead of reaching the server.
    pub fn fail_next(&self, method: Method, path_contains: &str, status: u16, times: u32) {
        lock(&self.rules).push(Rule {
            method,
            path_contains: path_contains.to_string(),
            status,
            remaining: times,
        });
    }

    /// Requests whose path contains `path_contains` get no answer until [`ApiFaults::unstall`],
    /// as through a proxy that stopped forwarding them; then they reach the server. A caller
    /// that gives up on one (a timeout) drops it unsent.
    pub fn stall(&self, path_contains: &str) {
        lock(&self.stalls).push(path_contains.to_string());
    }

    /// Lets every stalled request through, and stalls no more.
    pub fn unstall(&self) {
        lock(&self.stalls).clear();
    }

    /// Watches whose path contains `path_contains`, started from now on, deliver every event
    /// `lag` after the server sent it, in order: a cache fed by them lags its own writes by
    /// `lag`, as behind a slow API server or a congested link.
    pub fn lag_watches(&self, path_contains: &str, lag: std::time::Duration) {
        lock(&self.lags).push((path_contains.to_string(), lag));
    }

    fn lag_of(&self, request: &Request<Body>) -> Option<std::time::Duration> {
        let watch = request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let path = request.uri().path();
        watch
            .then(|| {
                lock(&self.lags)
                    .iter()
                    .find(|(s, _)| path.contains(s.as_str()))
                    .map(|(_, lag)| *lag)
            })
            .flatten()
    }

    fn stalled(&self, path: &str) -> bool {
        lock(&self.stalls).iter().any(|s| path.contains(s.as_str()))
    }

    /// How many responses were injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// A client for the kubeconfig whose requests pass through these rules.
    pub async fn client(&self, kubeconfig_yaml: &str) -> Result<Client, EnvtestError> {
        let config = crate::envtest::config_from_kubeconfig(kubeconfig_yaml).await?;
        Ok(ClientBuilder::try_from(config)?.with_layer(self).build())
    }

    fn take(&self, request: &Request<Body>) -> Option<u16> {
        let mut rules = lock(&self.rules);
        let path = request.uri().path();
        let rule = rules.iter_mut().find(|r| {
            r.remaining > 0 && r.method == request.method() && path.contains(&r.path_contains)
        })?;
        rule.remaining -= 1;
        self.injected.fetch_add(1, Ordering::Relaxed);
        Some(rule.status)
    }
}

impl<S> Layer<S> for ApiFaults {
    type Service = FaultService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FaultService {
            inner,
            faults: self.clone(),
        }
    }
}

/// The service [`ApiFaults`] wraps a client's stack in.
#[derive(Clone, Debug)]
pub struct FaultService<S> {
    inner: S,
    faults: ApiFaults,
}

impl<S> Service<Request<Body>> for FaultService<S>
where
    S: Service<Request<Body>, Response = Response<Box<DynBody>>, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if let Some(code) = self.faults.take(&request) {
            return Box::pin(async move { Ok(status_response(code)) });
        }
        if let Some(lag) = self.faults.lag_of(&request) {
            let answer = self.inner.call(request);
            return Box::pin(async move { Ok(answer.await?.map(|body| lagging(body, lag))) });
        }
        let path = request.uri().path().to_string();
        if !self.faults.stalled(&path) {
            return Box::pin(self.inner.call(request));
        }
        // The inner future sends nothing until polled: hold it back while the stall lasts.
        let sent = self.inner.call(request);
        let faults = self.faults.clone();
        Box::pin(async move {
            while faults.stalled(&path) {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            sent.await
        })
    }
}

/// `body` with each frame delivered `lag` after it arrived, in order.
fn lagging(mut body: Box<DynBody>, lag: std::time::Duration) -> Box<DynBody> {
    let (frames, arriving) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(frame) = body.frame().await {
            let at = tokio::time::Instant::now() + lag;
            if frames.send((at, frame)).is_err() {
                return;
            }
        }
    });
    let delivered = futures::stream::unfold(arriving, |mut arriving| async move {
        let (at, frame) = arriving.recv().await?;
        tokio::time::sleep_until(at).await;
        Some((frame, arriving))
    });
    Box::new(http_body_util::StreamBody::new(Box::pin(delivered)))
}

fn status_response(code: u16) -> Response<Box<DynBody>> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let reason = match code {
        409 => "Conflict",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    };
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("injected by capi-testing: {reason}"), "reason": reason, "code": code,
    });
    let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
    let body: Box<DynBody> =
        Box::new(http_body_util::Full::new(bytes).map_err(|never| match never {}));
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
