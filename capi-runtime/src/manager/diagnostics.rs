//! `/metrics` for those the cluster allows, as upstream's managers serve it (`--diagnostics-address`):
//! HTTPS with a certificate generated at start-up, every request's bearer token checked with a
//! `TokenReview`, then a `SubjectAccessReview` of `get` on the non-resource URL `/metrics` for the
//! user it names. No token is 401, a token the API server does not accept is 401, a user without
//! the right is 403; the token is never logged. Grant the right with a ClusterRole like upstream's
//! `metrics-reader` (`nonResourceURLs: ["/metrics"], verbs: ["get"]`).
//!
//! Whoever can reach the port cannot turn it against the API server or the manager: a verdict is
//! kept for a minute per token (a hash of it, as controller-runtime caches its reviews), at most
//! four reviews run at once on the reconcilers' rate-limited client (never the leader election's),
//! at most 64 connections are served at once, and a request's headers must arrive within 10 s.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use crate::metrics::Metrics;

/// Where and how `/metrics` is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetricsEndpoint {
    /// On the health address, plain HTTP, to anyone who can reach it (upstream's
    /// `--insecure-diagnostics`): for tests and local runs.
    Insecure,
    /// On `addr`, over HTTPS, to callers the cluster authorizes (see the module documentation).
    /// Port 0 picks a free port.
    Secure {
        /// The address.
        addr: SocketAddr,
    },
}

/// Why the secure endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("setting up the metrics endpoint's TLS: {0}")]
pub struct TlsSetupError(String);

/// A TLS acceptor with a self-signed certificate generated now, for `localhost` (a scraper
/// skips verifying it, as with upstream's self-signed default; what is checked is the scraper's
/// token).
pub(crate) fn acceptor() -> Result<TlsAcceptor, TlsSetupError> {
    let fail = |e: &dyn std::fmt::Display| TlsSetupError(e.to_string());
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).map_err(|e| fail(&e))?;
    let chain = vec![certified.cert.der().clone()];
    let key = rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .map_err(|e| fail(&e))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(&e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| fail(&e))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// How long a review's verdict is kept per token.
const VERDICT_TTL: Duration = Duration::from_secs(60);
/// Reviews at once.
const REVIEWS_AT_ONCE: usize = 4;
/// Connections served at once.
const CONNECTIONS_AT_ONCE: usize = 64;
/// Tokens whose verdict is kept.
const VERDICTS_KEPT: usize = 1024;

/// The reviewer: the client, the bound on reviews at once, the verdicts kept.
#[derive(Clone)]
struct Reviewer {
    client: Client,
    reviews: Arc<Semaphore>,
    verdicts: Arc<Mutex<HashMap<u64, (Instant, Verdict)>>>,
}

/// Serves `/metrics` on `listener` until `shutdown` completes; reviews go through `client`.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: TlsAcceptor,
    metrics: Metrics,
    client: Client,
    shutdown: impl Future<Output = ()>,
) {
    let reviewer = Reviewer {
        client,
        reviews: Arc::new(Semaphore::new(REVIEWS_AT_ONCE)),
        verdicts: Arc::default(),
    };
    let connections = Arc::new(Semaphore::new(CONNECTIONS_AT_ONCE));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of file descriptors, say: do not spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
                    continue;
                };
                let (tls, metrics, reviewer) = (tls.clone(), metrics.clone(), reviewer.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    let Ok(Ok(stream)) = tokio::time::timeout(
                        std::time::Duration::from_secs(10),
                        tls.accept(stream),
                    )
                    .await
                    else {
                        return;
                    };
                    let service = service_fn(move |request| {
                        let (metrics, reviewer) = (metrics.clone(), reviewer.clone());
                        async move {
                            Ok::<_, Infallible>(respond(&request, &metrics, &reviewer).await)
                        }
                    });
                    if let Err(error) = http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(Duration::from_secs(10))
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        tracing::debug!(%error, "metrics connection ended with an error");
                    }
                });
            }
        }
    }
}

async fn respond(
    request: &Request<Incoming>,
    metrics: &Metrics,
    reviewer: &Reviewer,
) -> Response<Full<Bytes>> {
    if request.uri().path() != "/metrics" {
        return text(StatusCode::NOT_FOUND, "not found");
    }
    let Some(token) = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
    else {
        return text(StatusCode::UNAUTHORIZED, "a bearer token is required");
    };
    match reviewer.verdict(token).await {
        Verdict::Allowed => super::http::metrics_response(metrics),
        Verdict::Unauthenticated => text(StatusCode::UNAUTHORIZED, "the token was not accepted"),
        Verdict::Forbidden(user) => text(
            StatusCode::FORBIDDEN,
            &format!("{user} may not get /metrics"),
        ),
        Verdict::Failed(error) => {
            tracing::warn!(%error, "checking a metrics scraper's token failed");
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the token could not be checked",
            )
        }
    }
}

#[derive(Clone)]
enum Verdict {
    Allowed,
    Unauthenticated,
    Forbidden(String),
    Failed(Arc<kube::Error>),
}

impl Reviewer {
    /// The verdict on `token`: kept from a review less than a minute old, else reviewed now
    /// (a failed review is not kept).
    async fn verdict(&self, token: &str) -> Verdict {
        let key = {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hash::hash(token, &mut hasher);
            std::hash::Hasher::finish(&hasher)
        };
        if let Some((at, verdict)) = self.lock().get(&key)
            && at.elapsed() < VERDICT_TTL
        {
            return verdict.clone();
        }
        let Ok(_permit) = self.reviews.acquire().await else {
            return Verdict::Unauthenticated;
        };
        let verdict = authorized(&self.client, token).await;
        if !matches!(verdict, Verdict::Failed(_)) {
            let mut verdicts = self.lock();
            verdicts.retain(|_, (at, _)| at.elapsed() < VERDICT_TTL);
            if verdicts.len() < VERDICTS_KEPT {
                verdicts.insert(key, (Instant::now(), verdict.clone()));
            }
        }
        verdict
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Instant, Verdict)>> {
        self.verdicts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// TokenReview, then SubjectAccessReview of `get /metrics` for the user the token names.
async fn authorized(client: &Client, token: &str) -> Verdict {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let reviewed = match Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
    {
        Ok(reviewed) => reviewed,
        Err(error) => return Verdict::Failed(Arc::new(error)),
    };
    let Some(status) = reviewed.status.filter(|s| s.authenticated == Some(true)) else {
        return Verdict::Unauthenticated;
    };
    let user = status.user.unwrap_or_default();
    let access = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups,
            uid: user.uid,
            extra: user.extra,
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some("/metrics".into()),
                verb: Some("get".into()),
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    match Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &access)
        .await
    {
        Ok(decided) if decided.status.as_ref().is_some_and(|s| s.allowed) => Verdict::Allowed,
        Ok(_) => Verdict::Forbidden(user.username.unwrap_or_default()),
        Err(error) => Verdict::Failed(Arc::new(error)),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    super::http::text(status, body.to_string())
}

/// The rules the manager needs to check scrapers: create TokenReviews and SubjectAccessReviews.
pub fn rbac() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    vec![
        crate::rbac::rule("authentication.k8s.io", &["tokenreviews"], &["create"]),
        crate::rbac::rule(
            "authorization.k8s.io",
            &["subjectaccessreviews"],
            &["create"],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use capi_testing::TestEnv;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use serde_json::json;

    use super::*;
    use crate::manager::{Manager, ManagerConfig};

    async fn token(client: &Client, namespace: &str, name: &str) -> String {
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
        let account: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap_or_default();
        let _ = accounts.create(&PostParams::default(), &account).await;
        let request: k8s_openapi::api::authentication::v1::TokenRequest =
            serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 600}}))
                .unwrap_or_default();
        accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .ok()
            .and_then(|r| r.status)
            .map(|s| s.token)
            .unwrap_or_default()
    }

    /// A reviewer whose API server authenticates every token as `someone` and allows it, counting
    /// the reviews it is sent.
    fn counting_reviewer() -> (Reviewer, Arc<std::sync::atomic::AtomicU32>) {
        use std::sync::atomic::{AtomicU32, Ordering};
        let sent = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&sent);
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            counter.fetch_add(1, Ordering::Relaxed);
            let body = if request.uri().path().contains("tokenreviews") {
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                       "spec": {}, "status": {"authenticated": true, "user": {"username": "someone"}}})
            } else {
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                       "spec": {}, "status": {"allowed": true}})
            };
            async move {
                http::Response::builder()
                    .status(201)
                    .body(kube::client::Body::from(body.to_string().into_bytes()))
            }
        });
        let reviewer = Reviewer {
            client: Client::new(service, "default"),
            reviews: Arc::new(Semaphore::new(REVIEWS_AT_ONCE)),
            verdicts: Arc::default(),
        };
        (reviewer, sent)
    }

    #[tokio::test]
    async fn a_token_is_reviewed_once_a_minute_however_often_it_scrapes() {
        use std::sync::atomic::Ordering;
        let (reviewer, sent) = counting_reviewer();
        for _ in 0..50 {
            assert!(matches!(
                reviewer.verdict("token-a").await,
                Verdict::Allowed
            ));
        }
        assert_eq!(
            sent.load(Ordering::Relaxed),
            2,
            "one TokenReview, one SubjectAccessReview"
        );
        assert!(matches!(
            reviewer.verdict("token-b").await,
            Verdict::Allowed
        ));
        assert_eq!(sent.load(Ordering::Relaxed), 4, "another token is reviewed");
    }

    #[tokio::test]
    async fn only_a_caller_the_cluster_allows_reads_metrics_and_only_over_https()
    -> Result<(), Box<dyn std::error::Error>> {
        let env = TestEnv::start().await?;
        let ns = env.namespace().await?;
        let client = env.client();
        let reader = crate::rbac::cluster_role(
            &format!("{ns}-metrics-reader"),
            vec![crate::rbac::metrics_reader()],
        );
        Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(client.clone())
            .create(&PostParams::default(), &reader)
            .await?;
        let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding =
            serde_json::from_value(json!({
                "metadata": {"name": format!("{ns}-scraper")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": format!("{ns}-metrics-reader")},
                "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": ns}],
            }))?;
        Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await?;
        let scraper = token(&client, &ns, "scraper").await;
        let nobody = token(&client, &ns, "nobody").await;

        let config = ManagerConfig {
            http_addr: ([127, 0, 0, 1], 0).into(),
            metrics: MetricsEndpoint::Secure {
                addr: ([127, 0, 0, 1], 0).into(),
            },
            ..ManagerConfig::default()
        };
        let manager = Manager::new(env.control_plane().config().await?, config).await?;
        let secure = manager.metrics_addr().ok_or("no secure address")??;
        let plain = manager.http_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(manager.run_until(async {
            let _ = stopped.await;
        }));

        // The certificate is generated at start-up: a scraper pins nothing but the token.
        let https = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()?;
        let get = |token: Option<String>| {
            let mut request = https.get(format!("https://{secure}/metrics"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            async move { request.send().await.map(|r| r.status().as_u16()) }
        };
        assert_eq!(get(None).await?, 401, "no token");
        assert_eq!(
            get(Some("not-a-token".into())).await?,
            401,
            "a token nobody issued"
        );
        assert_eq!(get(Some(nobody)).await?, 403, "a user without the right");
        let allowed = https
            .get(format!("https://{secure}/metrics"))
            .bearer_auth(&scraper)
            .send()
            .await?;
        assert_eq!(allowed.status().as_u16(), 200);
        assert!(allowed.text().await?.contains("# EOF"), "OpenMetrics text");
        // Nothing on the plain address, and no plain HTTP on the secure one.
        let plain_metrics = reqwest::get(format!("http://{plain}/metrics")).await?;
        assert_eq!(plain_metrics.status().as_u16(), 404);
        assert!(
            reqwest::get(format!("http://{secure}/metrics"))
                .await
                .is_err()
        );
        assert_eq!(
            reqwest::get(format!("http://{plain}/healthz"))
                .await?
                .status()
                .as_u16(),
            200,
            "health stays plain"
        );
        let _ = stop.send(());
        running.await??;
        Ok(())
    }
}
