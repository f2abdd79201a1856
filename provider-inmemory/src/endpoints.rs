//! One API endpoint per simulated workload cluster, over one shared workload API server.
//!
//! A real cluster's API server holds that cluster's nodes and pods only; simulated clusters share
//! one kube-apiserver (one per cluster would not fit a laptop at a thousand clusters). Pointing
//! every cluster's kubeconfig at the shared server would make each cluster's node cache hold
//! every cluster's nodes — memory and work that grow with the square of the clusters, which no
//! real installation pays. [`WorkloadEndpoints`] serves each cluster at a URL of its own,
//! `http://ADDR/clusters/<namespace>/<name>`, forwarding to the shared server with its own
//! credentials, and scopes the collections a cluster would hold alone — nodes, pods — to that
//! cluster's objects: the simulated kubelets ([`crate::nodes`]) label what they register with
//! [`CLUSTER_NAMESPACE_LABEL`] and [`CLUSTER_NAME_LABEL`], and a list or watch of nodes or pods
//! through a cluster's endpoint gets those labels added to its selector. The controllers talking
//! to it run the same code as against a real cluster.
//!
//! Collection deletes of nodes and pods are scoped the same way (a cluster's `delete_collection`
//! never reaches another's pods). What it does not separate: objects reached by name (a node, a
//! ConfigMap in `kube-system`) are the shared server's — node names are instance IDs, unique
//! across clusters; per-cluster singletons such as `kube-system/kubeadm-config` are one object for
//! all clusters; a node or pod created through an endpoint is not labelled with its cluster (the
//! simulated kubelets create them directly, nothing else does here). Upgrades (port-forward,
//! exec) are refused with 501. It authenticates nobody, so it listens on loopback only, and
//! forwards with its own credentials: the caller's `Authorization` and impersonation headers are
//! dropped.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The label naming the namespace of the cluster a simulated node or static pod belongs to.
pub const CLUSTER_NAMESPACE_LABEL: &str = "node.capi-rs.dev/cluster-namespace";
/// The label naming the cluster a simulated node or static pod belongs to.
pub const CLUSTER_NAME_LABEL: &str = "node.capi-rs.dev/cluster-name";

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// A running endpoint server; stopped when dropped. See the module documentation.
#[derive(Debug)]
pub struct WorkloadEndpoints {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for WorkloadEndpoints {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WorkloadEndpoints {
    /// Serves every cluster's endpoint on `addr` (port 0 picks a free port), forwarding to the
    /// shared workload API server through `client`.
    /// `client` should not retry by itself (`kube::Config::default_retry` false): a 429 (an
    /// eviction a PodDisruptionBudget refuses) is an answer for the caller, not for the proxy.
    /// Refuses a non-loopback `addr`: the endpoints authenticate nobody.
    pub async fn start(client: kube::Client, addr: SocketAddr) -> std::io::Result<Self> {
        if !addr.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "the workload endpoints authenticate nobody: {addr} is not a loopback address"
                ),
            ));
        }
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(serve(client, listener));
        Ok(Self { addr, task })
    }

    /// The server's base URL, `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The API endpoint of cluster `name` in `namespace`.
    pub fn cluster_url(&self, namespace: &str, name: &str) -> String {
        cluster_url(&self.url(), namespace, name)
    }
}

/// The endpoint of cluster `name` in `namespace` on the endpoint server at `base` (`http://ADDR`).
pub fn cluster_url(base: &str, namespace: &str, name: &str) -> String {
    format!("{}/clusters/{namespace}/{name}", base.trim_end_matches('/'))
}

/// A kubeconfig for cluster `name` in `namespace` through the endpoint server at `base`: what its
/// `<name>-kubeconfig` Secret holds in a simulated world. No credentials: the endpoint server
/// asks for none.
pub fn kubeconfig_yaml(base: &str, namespace: &str, name: &str) -> String {
    let server = cluster_url(base, namespace, name);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n\
         users:\n- name: {name}-admin\n  user: {{}}\ncontexts:\n- name: {name}\n  context:\n    \
         cluster: {name}\n    user: {name}-admin\ncurrent-context: {name}\n"
    )
}

async fn serve(client: kube::Client, listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        // Small requests and answers, one after another on a kept-alive connection: without
        // this, each may wait for the peer's delayed acknowledgement (Nagle's algorithm).
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let client = client.clone();
                async move { Ok::<_, Infallible>(forward(&client, request).await) }
            });
            if let Err(error) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "workload endpoint connection ended with an error");
            }
        });
    }
}

/// Where a request through a cluster's endpoint goes on the shared server.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    namespace: String,
    cluster: String,
    /// The path and query on the shared server, the cluster's selector added where it applies.
    path_and_query: String,
}

/// Parses `/clusters/<namespace>/<name><rest>` and scopes `rest`'s node and pod collections
/// (reads: list, watch) to the cluster. `None` for any other path.
fn target(method: &http::Method, path: &str, query: Option<&str>) -> Option<Target> {
    let rest = path.strip_prefix("/clusters/")?;
    let mut parts = rest.splitn(3, '/');
    let namespace = parts.next().filter(|s| !s.is_empty())?.to_string();
    let cluster = parts.next().filter(|s| !s.is_empty())?.to_string();
    let rest = format!("/{}", parts.next().unwrap_or_default());
    let selector = format!("{CLUSTER_NAMESPACE_LABEL}={namespace},{CLUSTER_NAME_LABEL}={cluster}");
    let scoped =
        matches!(*method, http::Method::GET | http::Method::DELETE) && is_scoped_collection(&rest);
    let mut pairs: Vec<String> = query
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(str::to_string)
        .collect();
    if scoped {
        let is_selector =
            |pair: &String| pair == "labelSelector" || pair.starts_with("labelSelector=");
        // Every selector the caller gave, and ours, as one (the API server reads the first).
        let mut all: Vec<String> = pairs
            .iter()
            .filter(|pair| is_selector(pair))
            .filter_map(|pair| pair.split_once('=').map(|(_, value)| value.to_string()))
            .filter(|value| !value.is_empty())
            .collect();
        pairs.retain(|pair| !is_selector(pair));
        all.push(encode(&selector));
        pairs.push(format!("labelSelector={}", all.join("%2C")));
    }
    let path_and_query = if pairs.is_empty() {
        rest
    } else {
        format!("{rest}?{}", pairs.join("&"))
    };
    Some(Target {
        namespace,
        cluster,
        path_and_query,
    })
}

/// The collections a cluster holds only its own objects of: nodes, and pods (all, or one
/// namespace's), also under the legacy `/api/v1/watch/…` paths.
fn is_scoped_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let collection = match segments.as_slice() {
        ["api", "v1", "watch", rest @ ..] | ["api", "v1", rest @ ..] => rest,
        _ => return false,
    };
    matches!(collection, ["nodes"] | ["pods"] | ["namespaces", _, "pods"])
}

/// Percent-encodes a query value (everything but unreserved characters).
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

async fn forward(client: &kube::Client, request: Request<Incoming>) -> Response<ProxyBody> {
    let Some(target) = target(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    ) else {
        return plain(
            StatusCode::NOT_FOUND,
            "not a cluster endpoint: expected /clusters/<namespace>/<name>/…",
        );
    };
    if request.headers().contains_key(header::UPGRADE) {
        return plain(
            StatusCode::NOT_IMPLEMENTED,
            "the simulated workload endpoints do not forward upgrades (port-forward, exec)",
        );
    }
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return plain(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the request body: {error}"),
            );
        }
    };
    let mut upstream = Request::builder()
        .method(parts.method)
        .uri(target.path_and_query.as_str());
    for (name, value) in &parts.headers {
        // The shared server's own credentials and connection are the client's: no caller's
        // credentials or impersonation, no hop-by-hop headers.
        let hop_by_hop = matches!(
            *name,
            header::HOST
                | header::AUTHORIZATION
                | header::CONNECTION
                | header::CONTENT_LENGTH
                | header::TE
                | header::TRAILER
                | header::TRANSFER_ENCODING
                | header::PROXY_AUTHORIZATION
                | header::PROXY_AUTHENTICATE
        ) || name.as_str() == "keep-alive";
        let impersonating = name.as_str().starts_with("impersonate-");
        if !hop_by_hop && !impersonating {
            upstream = upstream.header(name, value);
        }
    }
    let upstream = match upstream.body(kube::client::Body::from(body.to_vec())) {
        Ok(upstream) => upstream,
        Err(error) => {
            return plain(StatusCode::BAD_REQUEST, &format!("bad request: {error}"));
        }
    };
    match client.send(upstream).await {
        Ok(response) => {
            response.map(|body| body.map_err(|e| Box::new(e) as BoxError).boxed_unsync())
        }
        Err(error) => {
            tracing::debug!(namespace = %target.namespace, cluster = %target.cluster, %error,
                "the shared workload API server did not answer");
            plain(
                StatusCode::BAD_GATEWAY,
                &format!("the shared workload API server did not answer: {error}"),
            )
        }
    }
}

fn plain(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let body = Full::new(Bytes::from(message.to_string()))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    const SELECTOR: &str =
        "node.capi-rs.dev%2Fcluster-namespace%3Dns%2Cnode.capi-rs.dev%2Fcluster-name%3Dc1";

    #[test]
    fn node_and_pod_collections_are_scoped_to_the_cluster() {
        let get = http::Method::GET;
        let nodes = target(&get, "/clusters/ns/c1/api/v1/nodes", Some("watch=true")).unwrap();
        assert_eq!(
            (nodes.namespace.as_str(), nodes.cluster.as_str()),
            ("ns", "c1")
        );
        assert_eq!(
            nodes.path_and_query,
            format!("/api/v1/nodes?watch=true&labelSelector={SELECTOR}")
        );
        let pods = target(
            &get,
            "/clusters/ns/c1/api/v1/namespaces/kube-system/pods",
            Some("labelSelector=tier%3Dcontrol-plane"),
        )
        .unwrap();
        assert_eq!(
            pods.path_and_query,
            format!(
                "/api/v1/namespaces/kube-system/pods?labelSelector=tier%3Dcontrol-plane%2C{SELECTOR}"
            )
        );
        let all_pods = target(&get, "/clusters/ns/c1/api/v1/pods", Some("labelSelector=")).unwrap();
        assert_eq!(
            all_pods.path_and_query,
            format!("/api/v1/pods?labelSelector={SELECTOR}")
        );
        // A bare or repeated selector cannot slip past ours (the API server reads the first).
        let bare = target(
            &get,
            "/clusters/ns/c1/api/v1/nodes",
            Some("labelSelector&labelSelector=a%3Db&limit=5"),
        )
        .unwrap();
        assert_eq!(
            bare.path_and_query,
            format!("/api/v1/nodes?limit=5&labelSelector=a%3Db%2C{SELECTOR}")
        );
        let legacy = target(
            &get,
            "/clusters/ns/c1/api/v1/watch/namespaces/kube-system/pods",
            None,
        )
        .unwrap();
        assert_eq!(
            legacy.path_and_query,
            format!("/api/v1/watch/namespaces/kube-system/pods?labelSelector={SELECTOR}")
        );
        // A collection delete reaches this cluster's pods only.
        let delete = target(
            &http::Method::DELETE,
            "/clusters/ns/c1/api/v1/namespaces/kube-system/pods",
            Some("fieldSelector=spec.nodeName%3Di-1"),
        )
        .unwrap();
        assert_eq!(
            delete.path_and_query,
            format!(
                "/api/v1/namespaces/kube-system/pods?fieldSelector=spec.nodeName%3Di-1&labelSelector={SELECTOR}"
            )
        );
    }

    #[test]
    fn objects_by_name_writes_and_other_kinds_pass_unchanged() {
        for (method, path, expected) in [
            (
                http::Method::GET,
                "/clusters/ns/c1/api/v1/nodes/i-1",
                "/api/v1/nodes/i-1",
            ),
            (
                http::Method::PATCH,
                "/clusters/ns/c1/api/v1/nodes/i-1",
                "/api/v1/nodes/i-1",
            ),
            (
                http::Method::DELETE,
                "/clusters/ns/c1/api/v1/namespaces/kube-system/pods/p",
                "/api/v1/namespaces/kube-system/pods/p",
            ),
            (
                http::Method::GET,
                "/clusters/ns/c1/api/v1/namespaces/kube-system/configmaps",
                "/api/v1/namespaces/kube-system/configmaps",
            ),
            (http::Method::GET, "/clusters/ns/c1/version", "/version"),
            (http::Method::GET, "/clusters/ns/c1", "/"),
        ] {
            assert_eq!(
                target(&method, path, None).unwrap().path_and_query,
                expected,
                "{method} {path}"
            );
        }
        assert_eq!(target(&http::Method::GET, "/api/v1/nodes", None), None);
        assert_eq!(target(&http::Method::GET, "/clusters/ns", None), None);
        assert_eq!(target(&http::Method::GET, "/clusters//c1/api", None), None);
    }

    #[test]
    fn a_kubeconfig_points_at_the_clusters_endpoint() {
        let yaml = kubeconfig_yaml("http://127.0.0.1:5000/", "ns", "c1");
        let config = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(
            config.clusters[0]
                .cluster
                .as_ref()
                .and_then(|c| c.server.as_deref()),
            Some("http://127.0.0.1:5000/clusters/ns/c1")
        );
        assert_eq!(config.current_context.as_deref(), Some("c1"));
    }
}
