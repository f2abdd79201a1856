//! The simulated cloud served over HTTP/JSON on loopback, so that its state outlives the managers
//! that use it — as a real cloud's does when a controller is killed and restarted.
//!
//! | method and path | body | answer |
//! |---|---|---|
//! | `POST /v1/instances` | `InstanceRequest` | `201` `Instance` |
//! | `GET /v1/instances?tag=T` | | `200` `[Instance]` |
//! | `GET /v1/instances?cluster=C` | | `200` `[Instance]` |
//! | `GET /v1/instances/ID` | | `200` `Instance`, `404` |
//! | `DELETE /v1/instances/ID` | | `204` |
//! | `GET /v1/flavors/NAME` | | `200` `Flavor`, `404` |
//! | `POST /v1/scalesets` | `ScaleSetRequest` | `201` `ScaleSet` |
//! | `GET /v1/scalesets?tag=T` | | `200` `[ScaleSet]` |
//! | `GET /v1/scalesets/ID` | | `200` `ScaleSet`, `404` |
//! | `PUT /v1/scalesets/ID/model` | `ScaleSetModel` | `204` |
//! | `PUT /v1/scalesets/ID/capacity` | `u32` | `204` |
//! | `POST /v1/scalesets/ID/removals` | `[instance ID]` | `204` |
//! | `DELETE /v1/scalesets/ID` | | `204` |
//! | `POST /v1/loadbalancers?tag=T` | | `201` `LoadBalancer` |
//! | `GET /v1/loadbalancers?tag=T` | | `200` `[LoadBalancer]` |
//! | `DELETE /v1/loadbalancers/ID` | | `204` |
//! | `GET /v1/etcd/CLUSTER` | | `200` `EtcdCluster` |
//! | `PUT /v1/etcd/CLUSTER/leader/ID` | | `204`, `409` |
//! | `DELETE /v1/etcd/CLUSTER/members/ID` | | `204` |
//! | `GET /v1/inspect` | | `200` [`Inspection`] |
//! | `PUT /v1/faults` | `Faults` | `204` |
//!
//! Errors are JSON [`CloudError`]s: `500` injected, `403` quota, `400` unknown flavor or bad
//! request, `409` an etcd member that cannot lead.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::{
    CloudError, Compute, EtcdClusters, Faults, Instance, InstanceRequest, LoadBalancer,
    LoadBalancers, ScaleSet, ScaleSetModel, ScaleSetRequest, ScaleSets, SimulatedCloud,
};

/// What `GET /v1/inspect` reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inspection {
    /// Instances that exist now.
    pub instances: Vec<Instance>,
    /// Load balancers that exist now.
    pub load_balancers: Vec<LoadBalancer>,
    /// Scale sets that exist now, with their instances.
    #[serde(default)]
    pub scale_sets: Vec<ScaleSet>,
    /// The most scale sets ever created under one tag.
    #[serde(default)]
    pub max_scale_sets_per_tag: u32,
    /// `create_instance` calls so far.
    pub create_calls: u64,
    /// The most instances ever created under one tag.
    pub max_created_per_tag: u32,
    /// Calls failed on purpose so far.
    #[serde(default)]
    pub faults_injected: u64,
    /// Creates so far that happened but answered with a failure.
    #[serde(default)]
    pub create_responses_lost: u64,
    /// Calls of the cloud's API so far over HTTP (inspections and fault settings aside).
    #[serde(default)]
    pub api_calls: u64,
}

impl SimulatedCloud {
    /// A snapshot for tests and benchmarks.
    pub fn inspect(&self) -> Inspection {
        let (faults_injected, create_responses_lost) = self.faults_landed();
        Inspection {
            instances: self.instances(),
            load_balancers: self.load_balancers(),
            scale_sets: self.scale_sets(),
            max_scale_sets_per_tag: self.max_scale_sets_per_tag(),
            create_calls: self.create_calls(),
            max_created_per_tag: self.max_created_per_tag(),
            faults_injected,
            create_responses_lost,
            api_calls: self.api_calls(),
        }
    }
}

/// A running HTTP server for a [`SimulatedCloud`]; stopped when dropped.
#[derive(Debug)]
pub struct CloudServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl CloudServer {
    /// Serves `cloud` on `addr` (port 0 picks a free port).
    pub async fn start(cloud: Arc<SimulatedCloud>, addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(serve(cloud, listener));
        Ok(Self { addr, task })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for CloudServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `cloud` on `listener` forever.
pub(crate) async fn serve(cloud: Arc<SimulatedCloud>, listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let cloud = Arc::clone(&cloud);
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let cloud = Arc::clone(&cloud);
                async move { Ok::<_, Infallible>(route(&cloud, request).await) }
            });
            if let Err(error) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "simulated cloud connection ended with an error");
            }
        });
    }
}

async fn route(cloud: &SimulatedCloud, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let tag = query_param(request.uri().query().unwrap_or_default(), "tag");
    let cluster = query_param(request.uri().query().unwrap_or_default(), "cluster");
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => return bad_request(&format!("cannot read the body: {error}")),
    };
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if !matches!(segments.as_slice(), ["v1", "inspect"] | ["v1", "faults"]) {
        cloud.count_call();
    }
    match (&method, segments.as_slice()) {
        (&Method::POST, ["v1", "instances"]) => {
            match serde_json::from_slice::<InstanceRequest>(&body) {
                Ok(create) => reply(StatusCode::CREATED, cloud.create_instance(create).await),
                Err(error) => bad_request(&error.to_string()),
            }
        }
        (&Method::GET, ["v1", "instances"]) => match (tag, cluster) {
            (Some(tag), None) => reply(StatusCode::OK, cloud.find_instances(&tag).await),
            (None, Some(cluster)) => reply(StatusCode::OK, cloud.cluster_instances(&cluster).await),
            _ => bad_request("exactly one of the tag and cluster query parameters is required"),
        },
        (&Method::GET, ["v1", "instances", id]) => match cloud.get_instance(id).await {
            Ok(None) => empty(StatusCode::NOT_FOUND),
            other => reply(StatusCode::OK, other),
        },
        (&Method::DELETE, ["v1", "instances", id]) => no_content(cloud.delete_instance(id).await),
        (&Method::GET, ["v1", "flavors", name]) => match cloud.get_flavor(name).await {
            Ok(None) => empty(StatusCode::NOT_FOUND),
            other => reply(StatusCode::OK, other),
        },
        (&Method::POST, ["v1", "scalesets"]) => {
            match serde_json::from_slice::<ScaleSetRequest>(&body) {
                Ok(create) => reply(StatusCode::CREATED, cloud.create_scale_set(create).await),
                Err(error) => bad_request(&error.to_string()),
            }
        }
        (&Method::GET, ["v1", "scalesets"]) => match tag {
            Some(tag) => reply(StatusCode::OK, cloud.find_scale_sets(&tag).await),
            None => bad_request("the tag query parameter is required"),
        },
        (&Method::GET, ["v1", "scalesets", id]) => match cloud.get_scale_set(id).await {
            Ok(None) => empty(StatusCode::NOT_FOUND),
            other => reply(StatusCode::OK, other),
        },
        (&Method::PUT, ["v1", "scalesets", id, "model"]) => {
            match serde_json::from_slice::<ScaleSetModel>(&body) {
                Ok(model) => no_content(cloud.set_scale_set_model(id, model).await),
                Err(error) => bad_request(&error.to_string()),
            }
        }
        (&Method::PUT, ["v1", "scalesets", id, "capacity"]) => {
            match serde_json::from_slice::<u32>(&body) {
                Ok(capacity) => no_content(cloud.set_scale_set_capacity(id, capacity).await),
                Err(error) => bad_request(&error.to_string()),
            }
        }
        (&Method::POST, ["v1", "scalesets", id, "removals"]) => {
            match serde_json::from_slice::<Vec<String>>(&body) {
                Ok(instances) => no_content(cloud.remove_scale_set_instances(id, &instances).await),
                Err(error) => bad_request(&error.to_string()),
            }
        }
        (&Method::DELETE, ["v1", "scalesets", id]) => no_content(cloud.delete_scale_set(id).await),
        (&Method::POST, ["v1", "loadbalancers"]) => match tag {
            Some(tag) => reply(StatusCode::CREATED, cloud.create_load_balancer(&tag).await),
            None => bad_request("the tag query parameter is required"),
        },
        (&Method::GET, ["v1", "loadbalancers"]) => reply(
            StatusCode::OK,
            cloud.find_load_balancers(&tag.unwrap_or_default()).await,
        ),
        (&Method::DELETE, ["v1", "loadbalancers", id]) => {
            no_content(cloud.delete_load_balancer(id).await)
        }
        (&Method::GET, ["v1", "etcd", cluster]) => {
            reply(StatusCode::OK, cloud.etcd_cluster(cluster).await)
        }
        (&Method::PUT, ["v1", "etcd", cluster, "leader", id]) => match id.parse::<u64>() {
            Ok(id) => no_content(cloud.move_etcd_leader(cluster, id).await),
            Err(_) => bad_request("the member ID must be a number"),
        },
        (&Method::DELETE, ["v1", "etcd", cluster, "members", id]) => match id.parse::<u64>() {
            Ok(id) => no_content(cloud.remove_etcd_member(cluster, id).await),
            Err(_) => bad_request("the member ID must be a number"),
        },
        (&Method::GET, ["v1", "inspect"]) => json(StatusCode::OK, &cloud.inspect()),
        (&Method::PUT, ["v1", "faults"]) => match serde_json::from_slice::<Faults>(&body) {
            Ok(faults) => {
                cloud.set_faults(faults);
                empty(StatusCode::NO_CONTENT)
            }
            Err(error) => bad_request(&error.to_string()),
        },
        _ => empty(StatusCode::NOT_FOUND),
    }
}

fn reply<T: Serialize>(
    success: StatusCode,
    result: Result<T, CloudError>,
) -> Response<Full<Bytes>> {
    match result {
        Ok(value) => json(success, &value),
        Err(error) => json(error_status(&error), &error),
    }
}

fn no_content(result: Result<(), CloudError>) -> Response<Full<Bytes>> {
    match result {
        Ok(()) => empty(StatusCode::NO_CONTENT),
        Err(error) => json(error_status(&error), &error),
    }
}

fn error_status(error: &CloudError) -> StatusCode {
    match error {
        CloudError::Injected { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        CloudError::QuotaExceeded { .. } => StatusCode::FORBIDDEN,
        CloudError::UnknownFlavor { .. } => StatusCode::BAD_REQUEST,
        CloudError::Unreachable { .. } => StatusCode::BAD_GATEWAY,
        CloudError::EtcdMember { .. } => StatusCode::CONFLICT,
    }
}

fn bad_request(reason: &str) -> Response<Full<Bytes>> {
    let mut response = json(
        StatusCode::BAD_REQUEST,
        &serde_json::json!({"error": "badRequest", "reason": reason}),
    );
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}

/// The percent-decoded value of `name` in a query string.
pub(crate) fn query_param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| decode(value))
}

fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub(crate) fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_round_trip_through_percent_encoding() {
        for value in ["capi-7c0f4a8e-2b1d", "a b&c=d/é", "", "100%"] {
            let query = format!("x=1&tag={}", encode(value));
            assert_eq!(query_param(&query, "tag").as_deref(), Some(value));
        }
        assert_eq!(query_param("x=1", "tag"), None);
        assert_eq!(
            decode("%zz%4"),
            "%zz%4",
            "malformed escapes are kept, not a panic"
        );
    }
}
