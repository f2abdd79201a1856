//! The manager's plain HTTP endpoints: `/healthz`, `/readyz`, and `/metrics` when it is served
//! insecurely ([`super::MetricsEndpoint::Insecure`]).

use std::convert::Infallible;
use std::future::Future;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::Metrics;
use crate::readiness::Readiness;

/// Serves until `shutdown` completes.
pub(crate) async fn serve(
    listener: TcpListener,
    metrics: Option<Metrics>,
    readiness: Readiness,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let metrics = metrics.clone();
                let readiness = readiness.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let response = respond(&request, &metrics, &readiness);
                        async move { Ok::<_, Infallible>(response) }
                    });
                    if let Err(error) = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await {
                        tracing::debug!(%error, "health/metrics connection ended with an error");
                    }
                });
            }
        }
    }
}

fn respond(
    request: &Request<Incoming>,
    metrics: &Option<Metrics>,
    readiness: &Readiness,
) -> Response<Full<Bytes>> {
    match request.uri().path() {
        "/healthz" | "/livez" => text(StatusCode::OK, "ok".to_string()),
        "/readyz" => {
            if readiness.is_ready() {
                text(StatusCode::OK, "ok".to_string())
            } else {
                let waiting = readiness.waiting_for().join(", ");
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("waiting for caches to sync: {waiting}"),
                )
            }
        }
        "/metrics" => match metrics {
            Some(metrics) => metrics_response(metrics),
            None => text(
                StatusCode::NOT_FOUND,
                "metrics are served over HTTPS on the diagnostics address".to_string(),
            ),
        },
        _ => text(StatusCode::NOT_FOUND, "not found".to_string()),
    }
}

/// The metrics in OpenMetrics text.
pub(super) fn metrics_response(metrics: &Metrics) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(metrics.encode())));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
    );
    response
}

pub(super) fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
