//! Against a small OpenStack stand-in (Keystone's token API and version document, and Nova's
//! server creation), the failure modes a real cloud can produce on purpose:
//! - a Keystone that takes seconds to answer one set of credentials must not hold up sessions
//!   for other credentials (one authentication in flight per credentials Secret);
//! - a cloud that echoes the request in its error message (the password to Keystone, the user
//!   data to Nova) must not get those into errors, conditions, events or logs, at any log
//!   level.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use provider_openstack::cloud::session::SessionError;
use provider_openstack::cloud::{Compute, ServerCreate, Session, Sessions};
use provider_openstack::credentials::{Auth, Credentials, ProjectRef, UserRef};
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt;

const PASSWORD: &str = "correct-horse-battery-staple-91";
const USER_DATA: &str = "#cloud-config\nruncmd: [kubeadm join --token abcdef.0123456789abcdef]\n";

/// The stand-in: `slow*` users wait `SLOW` for their token, `echo` is refused with the whole
/// request in Keystone's message, everyone else gets a token and a catalog; Nova refuses every
/// server with the request (the user data) in its message.
struct StandIn {
    base: String,
    authentications: AtomicUsize,
    /// Requests for the server `flaky` so far: the first two get 503.
    flaky_reads: AtomicUsize,
    /// Server creations asked for so far.
    creates: AtomicUsize,
}

const SLOW: Duration = Duration::from_secs(3);

impl StandIn {
    async fn start() -> Arc<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let stand_in = Arc::new(Self {
            base: format!("http://{addr}"),
            authentications: AtomicUsize::new(0),
            flaky_reads: AtomicUsize::new(0),
            creates: AtomicUsize::new(0),
        });
        let serving = stand_in.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let stand_in = serving.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let stand_in = stand_in.clone();
                        async move { Ok::<_, Infallible>(stand_in.answer(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        stand_in
    }

    async fn answer(&self, request: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let method = request.method().clone();
        let path = request.uri().path().trim_end_matches('/').to_string();
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        match (method.as_str(), path.as_str()) {
            ("GET", "/identity/v3") => reply(
                StatusCode::OK,
                &json!({"version": {"id": "v3.14", "status": "stable",
                    "links": [{"rel": "self", "href": format!("{}/identity/v3/", self.base)}]}}),
            ),
            ("POST", "/identity/v3/auth/tokens") => self.token(&body).await,
            ("GET", "/compute/v2.1/servers/flaky") => {
                if self.flaky_reads.fetch_add(1, Ordering::SeqCst) < 2 {
                    reply(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &json!({"computeFault": {"code": 503, "message": "try again"}}),
                    )
                } else {
                    reply(
                        StatusCode::OK,
                        &json!({"server": {"id": "flaky", "name": "flaky", "status": "ACTIVE"}}),
                    )
                }
            }
            ("POST", "/compute/v2.1/servers") if body["server"]["name"] == "busy" => {
                self.creates.fetch_add(1, Ordering::SeqCst);
                reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({"computeFault": {"code": 503, "message": "try again"}}),
                )
            }
            ("POST", "/compute/v2.1/servers") => reply(
                StatusCode::BAD_REQUEST,
                &json!({"badRequest": {"code": 400, "message": format!(
                    "Invalid server request (user_data {}): {body}",
                    body["server"]["user_data"].as_str().unwrap_or_default())}}),
            ),
            _ => reply(
                StatusCode::NOT_FOUND,
                &json!({"itemNotFound": {"code": 404, "message": "not here"}}),
            ),
        }
    }

    async fn token(&self, body: &Value) -> Response<Full<Bytes>> {
        self.authentications.fetch_add(1, Ordering::SeqCst);
        let user = body["auth"]["identity"]["password"]["user"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if user == "echo" {
            return reply(
                StatusCode::UNAUTHORIZED,
                &json!({"error": {"code": 401, "title": "Unauthorized", "message": format!(
                    "The request you have made requires authentication: {body}")}}),
            );
        }
        if user.starts_with("slow") {
            tokio::time::sleep(SLOW).await;
        }
        let endpoint = |kind: &str, path: &str| {
            json!({"type": kind, "name": kind, "id": kind, "endpoints": [{
                "id": format!("{kind}-public"), "interface": "public", "region": "RegionOne",
                "region_id": "RegionOne", "url": format!("{}/{path}", self.base)}]})
        };
        let token = json!({"token": {
            "methods": ["password"],
            "expires_at": "2099-01-01T00:00:00.000000Z",
            "issued_at": "2026-01-01T00:00:00.000000Z",
            "user": {"id": user, "name": user, "domain": {"id": "default", "name": "Default"}},
            "project": {"id": "demo", "name": "demo", "domain": {"id": "default", "name": "Default"}},
            "roles": [{"id": "member", "name": "member"}],
            "catalog": [
                endpoint("identity", "identity/v3"),
                endpoint("compute", "compute/v2.1"),
                endpoint("network", "network"),
                endpoint("image", "image"),
                endpoint("load-balancer", "load-balancer"),
            ],
        }});
        let mut response = reply(StatusCode::CREATED, &token);
        response.headers_mut().insert(
            "X-Subject-Token",
            http::HeaderValue::from_str(&format!("token-for-{user}")).unwrap(),
        );
        response
    }

    fn credentials(&self, user: &str) -> Credentials {
        Credentials {
            auth_url: format!("{}/identity/v3", self.base),
            auth: Auth::Password {
                user: UserRef::Name {
                    name: user.into(),
                    domain: "Default".into(),
                },
                password: PASSWORD.into(),
                project: ProjectRef::Name {
                    name: "demo".into(),
                    domain: "Default".into(),
                },
            },
            region: Some("RegionOne".into()),
            interface: "public".into(),
            ca_bundle: None,
            verify: true,
        }
    }
}

fn reply(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Every log line of the test process, at every level, as the OpenStack manager logs them (with
/// the SDK's TRACE body dumps dropped).
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish()
            .with(capi_runtime::telemetry::without_body_traces(
                provider_openstack::cloud::SDK_BODY_LOG_TARGETS.to_vec(),
            ));
        tracing::subscriber::set_global_default(subscriber).unwrap();
        logs
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_keystone_behind_one_secret_does_not_hold_up_the_others() {
    let cloud = StandIn::start().await;
    let sessions = Sessions::default();
    let slow = {
        let (sessions, credentials) = (sessions.clone(), cloud.credentials("slow-tenant"));
        tokio::spawn(async move {
            sessions
                .get("ns/slow-secret", "1", move || Ok(credentials))
                .await
                .map(|_| ())
        })
    };
    // Wait until the slow authentication is in flight.
    while cloud.authentications.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Another Secret's session comes while the slow one is still being made.
    let fast = cloud.credentials("fast-tenant");
    sessions
        .get("ns/fast-secret", "1", move || Ok(fast))
        .await
        .unwrap();
    assert!(
        !slow.is_finished(),
        "another Secret's session waited for the slow authentication"
    );

    // Reconciles of the slow Secret meanwhile neither ask Keystone again nor wait for it (they
    // would hold the controller's workers): they are told to come back.
    for _ in 0..3 {
        let credentials = cloud.credentials("slow-tenant");
        let outcome = sessions
            .get("ns/slow-secret", "1", move || Ok(credentials))
            .await;
        assert!(
            matches!(outcome, Err(SessionError::Authenticating)),
            "{outcome:?}"
        );
    }
    slow.await.unwrap().unwrap();
    let credentials = cloud.credentials("slow-tenant");
    sessions
        .get("ns/slow-secret", "1", move || Ok(credentials))
        .await
        .unwrap();
    assert_eq!(
        cloud.authentications.load(Ordering::SeqCst),
        2,
        "one authentication per Secret"
    );
    assert_eq!(sessions.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_is_retried_through_transient_faults_and_a_create_is_not() {
    let cloud = StandIn::start().await;
    let session = Session::connect(&cloud.credentials("demo")).await.unwrap();
    let server = session.get_server("flaky").await.unwrap().unwrap();
    assert_eq!(server.status, "ACTIVE");
    assert_eq!(cloud.flaky_reads.load(Ordering::SeqCst), 3);
    // Nova does not deduplicate creates: a create that met a 503 is not made again blindly.
    let error = session
        .create_server(&ServerCreate {
            name: "busy".into(),
            ..ServerCreate::default()
        })
        .await
        .unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert_eq!(cloud.creates.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_a_cloud_echoes_do_not_reach_errors_or_logs() {
    let logs = captured_logs();
    let cloud = StandIn::start().await;

    // Keystone echoes the password in its refusal.
    let refused = Session::connect(&cloud.credentials("echo"))
        .await
        .unwrap_err();
    let refusal = refused.to_string();
    assert!(refusal.contains("requires authentication"), "{refusal}");
    assert!(!refusal.contains(PASSWORD), "{refusal}");

    // Nova echoes the user data and the admin password in its refusal.
    let session = Session::connect(&cloud.credentials("demo")).await.unwrap();
    let error = session
        .create_server(&ServerCreate {
            name: "m-0".into(),
            flavor_id: "small".into(),
            image_id: "ubuntu".into(),
            user_data: USER_DATA.as_bytes().to_vec(),
            ..ServerCreate::default()
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("Invalid server request"), "{error}");
    let encoded = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(USER_DATA)
    };
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    for (what, text) in [
        ("the Keystone error", &refusal),
        ("the Nova error", &error),
        ("the logs", &logs),
    ] {
        for secret in [PASSWORD, &encoded[..24], "abcdef.0123456789abcdef"] {
            assert!(!text.contains(secret), "{secret:?} in {what}: {text}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_keystone_echoes_reaches_no_condition_event_or_log() {
    use capi_actuator::cluster::{self, InfraClusterReconciler};
    use capi_core::api::Cluster;
    use capi_runtime::ReconcilerOptions;
    use k8s_openapi::api::core::v1::{Event, Secret};
    use kube::api::{ListParams, PostParams};
    use kube::{Api, ResourceExt};
    use provider_openstack::api::OpenStackCluster;

    let logs = captured_logs();
    let cloud = StandIn::start().await;
    let mut crds = capi_core::crd::core();
    crds.extend(provider_openstack::api::crds());
    let env = capi_testing::TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "cloud-config"},
        "stringData": {"clouds.yaml": format!(
            "clouds:\n  openstack:\n    auth:\n      auth_url: {}/identity/v3\n      \
             username: echo\n      password: {PASSWORD}\n      project_name: demo\n      \
             user_domain_name: Default\n      project_domain_name: Default\n    \
             region_name: RegionOne\n", cloud.base)},
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "demo"},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev",
                                       "kind": "OpenStackCluster", "name": "demo"}}
    }))
    .unwrap();
    let cluster = Api::<Cluster>::namespaced(env.client(), &ns)
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let infra: OpenStackCluster = serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackCluster",
        "metadata": {"name": "demo", "labels": {"cluster.x-k8s.io/cluster-name": "demo"},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                 "name": "demo", "uid": cluster.uid().unwrap(), "controller": true}]},
        "spec": {"identityRef": {"name": "cloud-config", "cloudName": "openstack"},
                 "managedSubnets": [{"cidr": "10.6.0.0/24"}]}
    }))
    .unwrap();
    let clusters: Api<OpenStackCluster> = Api::namespaced(env.client(), &ns);
    clusters
        .create(&PostParams::default(), &infra)
        .await
        .unwrap();
    let actuator = Arc::new(provider_openstack::cluster::OpenStackClusterActuator::new(
        Arc::new(provider_openstack::connector::SecretConnector::new(
            env.client(),
        )),
    ));
    let reconciler = InfraClusterReconciler::<OpenStackCluster>::new(env.client(), actuator)
        .options(ReconcilerOptions::default().namespace(&ns));
    let running = tokio::spawn(cluster::run(reconciler, std::future::pending()));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        let status = serde_json::to_string(&clusters.get("demo").await.unwrap().status).unwrap();
        if status.contains("requires authentication") {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no refusal in {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let events = Api::<Event>::namespaced(env.client(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let events = serde_json::to_string(&events.items).unwrap();
    // (A refused authentication is retried, not announced: there may be no event at all.)
    running.abort();
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    for (what, text) in [
        ("the status", &status),
        ("the events", &events),
        ("the logs", &logs),
    ] {
        assert!(!text.contains(PASSWORD), "the password in {what}: {text}");
    }
}
