//! A loopback HTTP proxy in front of the management API server that answers a share of status
//! writes with `409 Conflict` (without forwarding them), as a busy API server does when another
//! writer got there first, and on demand holds Lease requests, as a stalled connection would.
//! Everything else is forwarded as is, watches included.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kube::Client;
use kube::client::Body;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A running proxy; stops when dropped.
pub(crate) struct ConflictProxy {
    addr: SocketAddr,
    injected: Arc<AtomicU64>,
    /// While set, Lease requests are held (released when it is cleared, or after a minute).
    lease_stall: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl ConflictProxy {
    /// Forwards to the API server of `upstream` (its credentials are added by the client), turning
    /// `rate` of the status writes into 409s, drawn from a generator seeded with `seed`.
    pub(crate) async fn start(upstream: Client, rate: f64, seed: u64) -> Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let injected = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&injected);
        let draws = Arc::new(std::sync::Mutex::new(fastrand::Rng::with_seed(seed)));
        let lease_stall = Arc::new(AtomicBool::new(false));
        let stalled = Arc::clone(&lease_stall);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let upstream = upstream.clone();
                let counter = Arc::clone(&counter);
                let draws = Arc::clone(&draws);
                let stalled = Arc::clone(&stalled);
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let upstream = upstream.clone();
                        let counter = Arc::clone(&counter);
                        let stalled = Arc::clone(&stalled);
                        let draw = draws.lock().unwrap_or_else(|p| p.into_inner()).f64();
                        async move {
                            hold_if_stalled(&request, &stalled).await;
                            Ok::<_, Infallible>(
                                forward(&upstream, request, draw < rate, &counter).await,
                            )
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            addr,
            injected,
            lease_stall,
            task,
        })
    }

    /// Holds every Lease request for `stall` from now (a stalled connection to the API server).
    pub(crate) fn stall_leases_for(&self, stall: Duration) {
        self.lease_stall.store(true, Ordering::Relaxed);
        let stalled = Arc::clone(&self.lease_stall);
        tokio::spawn(async move {
            tokio::time::sleep(stall).await;
            stalled.store(false, Ordering::Relaxed);
        });
    }

    /// A kubeconfig (no credentials: the proxy adds them) for clients of the proxy.
    pub(crate) fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://{}\n\
             users:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    \
             user: proxy\ncurrent-context: proxy\n",
            self.addr
        )
    }

    /// How many 409s the proxy has answered so far.
    pub(crate) fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }
}

impl Drop for ConflictProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Holds a Lease request while `stalled` is set (a minute at most).
async fn hold_if_stalled(request: &Request<Incoming>, stalled: &AtomicBool) {
    if !request.uri().path().contains("/leases") {
        return;
    }
    let started = tokio::time::Instant::now();
    while stalled.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Forwards `request`, or answers 409 if it is a status write and `conflict` (drawn for it) says
/// so.
async fn forward(
    upstream: &Client,
    request: Request<Incoming>,
    conflict_drawn: bool,
    injected: &AtomicU64,
) -> Response<Body> {
    let is_status_write = matches!(*request.method(), Method::PATCH | Method::PUT)
        && request.uri().path().ends_with("/status");
    if is_status_write && conflict_drawn {
        injected.fetch_add(1, Ordering::Relaxed);
        return conflict(request.uri().path());
    }
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => return bad_gateway(&format!("reading the request body: {error}")),
    };
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut builder = Request::builder().method(parts.method).uri(path);
    for (name, value) in &parts.headers {
        if name != http::header::AUTHORIZATION && name != http::header::HOST {
            builder = builder.header(name, value);
        }
    }
    let Ok(outgoing) = builder.body(Body::from(body.to_vec())) else {
        return bad_gateway("rebuilding the request");
    };
    match upstream.send(outgoing).await {
        Ok(response) => response,
        Err(error) => bad_gateway(&error.to_string()),
    }
}

fn conflict(path: &str) -> Response<Body> {
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 409,
        "reason": "Conflict",
        "message": format!("Operation cannot be fulfilled on {path}: the object has been modified; please apply your changes to the latest version and try again (injected by xtask chaos)"),
    });
    json_response(StatusCode::CONFLICT, &status)
}

fn bad_gateway(message: &str) -> Response<Body> {
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 502,
        "reason": "ServiceUnavailable", "message": format!("chaos proxy: {message}"),
    });
    json_response(StatusCode::BAD_GATEWAY, &status)
}

fn json_response(code: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::from(body.to_string().into_bytes()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}
