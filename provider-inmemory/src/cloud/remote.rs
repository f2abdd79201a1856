//! A client of the simulated cloud's HTTP API ([`super::server`]), implementing the same narrow
//! traits as the in-process cloud.

use async_trait::async_trait;
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;

use super::server::{Inspection, encode};
use super::{
    CloudError, Compute, EtcdCluster, EtcdClusters, Faults, Flavor, Instance, InstanceRequest,
    LoadBalancer, LoadBalancers, ScaleSet, ScaleSetModel, ScaleSetRequest, ScaleSets,
};

/// The simulated cloud in another process, reached over HTTP.
#[derive(Clone, Debug)]
pub struct RemoteCloud {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

fn unreachable(reason: impl std::fmt::Display) -> CloudError {
    CloudError::Unreachable {
        reason: reason.to_string(),
    }
}

impl RemoteCloud {
    /// A client of the cloud at `base_url` (e.g. `http://127.0.0.1:7070`).
    pub fn new(base_url: impl Into<String>) -> Self {
        let base = base_url.into().trim_end_matches('/').to_string();
        Self {
            base,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// A snapshot of the cloud's state.
    pub async fn inspect(&self) -> Result<Inspection, CloudError> {
        self.call(Method::GET, "/v1/inspect", None).await
    }

    /// Changes the injected failures.
    pub async fn set_faults(&self, faults: &Faults) -> Result<(), CloudError> {
        let body = serde_json::to_vec(faults).map_err(unreachable)?;
        self.send(Method::PUT, "/v1/faults", Some(body))
            .await
            .map(drop)
    }

    /// Sends a request; returns status and body.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), CloudError> {
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(unreachable)?;
        let response = self.client.request(request).await.map_err(unreachable)?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(unreachable)?
            .to_bytes();
        if status.is_client_error() || status.is_server_error() {
            if status == StatusCode::NOT_FOUND {
                return Ok((status, body));
            }
            return Err(
                serde_json::from_slice::<CloudError>(&body).unwrap_or_else(|_| {
                    unreachable(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)))
                }),
            );
        }
        Ok((status, body))
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, CloudError> {
        let (status, body) = self.send(method, path, body).await?;
        if status == StatusCode::NOT_FOUND {
            return Err(unreachable(format!("{path} not found")));
        }
        serde_json::from_slice(&body).map_err(unreachable)
    }
}

#[async_trait]
impl Compute for RemoteCloud {
    async fn create_instance(&self, request: InstanceRequest) -> Result<Instance, CloudError> {
        let body = serde_json::to_vec(&request).map_err(unreachable)?;
        self.call(Method::POST, "/v1/instances", Some(body)).await
    }

    async fn get_instance(&self, id: &str) -> Result<Option<Instance>, CloudError> {
        let (status, body) = self
            .send(Method::GET, &format!("/v1/instances/{}", encode(id)), None)
            .await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        serde_json::from_slice(&body).map(Some).map_err(unreachable)
    }

    async fn find_instances(&self, tag: &str) -> Result<Vec<Instance>, CloudError> {
        self.call(
            Method::GET,
            &format!("/v1/instances?tag={}", encode(tag)),
            None,
        )
        .await
    }

    async fn cluster_instances(&self, cluster: &str) -> Result<Vec<Instance>, CloudError> {
        self.call(
            Method::GET,
            &format!("/v1/instances?cluster={}", encode(cluster)),
            None,
        )
        .await
    }

    async fn delete_instance(&self, id: &str) -> Result<(), CloudError> {
        self.send(
            Method::DELETE,
            &format!("/v1/instances/{}", encode(id)),
            None,
        )
        .await
        .map(drop)
    }

    async fn get_flavor(&self, name: &str) -> Result<Option<Flavor>, CloudError> {
        let (status, body) = self
            .send(Method::GET, &format!("/v1/flavors/{}", encode(name)), None)
            .await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        serde_json::from_slice(&body).map(Some).map_err(unreachable)
    }
}

#[async_trait]
impl ScaleSets for RemoteCloud {
    async fn create_scale_set(&self, request: ScaleSetRequest) -> Result<ScaleSet, CloudError> {
        let body = serde_json::to_vec(&request).map_err(unreachable)?;
        self.call(Method::POST, "/v1/scalesets", Some(body)).await
    }

    async fn get_scale_set(&self, id: &str) -> Result<Option<ScaleSet>, CloudError> {
        let (status, body) = self
            .send(Method::GET, &format!("/v1/scalesets/{}", encode(id)), None)
            .await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        serde_json::from_slice(&body).map(Some).map_err(unreachable)
    }

    async fn find_scale_sets(&self, tag: &str) -> Result<Vec<ScaleSet>, CloudError> {
        self.call(
            Method::GET,
            &format!("/v1/scalesets?tag={}", encode(tag)),
            None,
        )
        .await
    }

    async fn set_scale_set_model(&self, id: &str, model: ScaleSetModel) -> Result<(), CloudError> {
        let body = serde_json::to_vec(&model).map_err(unreachable)?;
        self.send(
            Method::PUT,
            &format!("/v1/scalesets/{}/model", encode(id)),
            Some(body),
        )
        .await
        .map(drop)
    }

    async fn set_scale_set_capacity(&self, id: &str, capacity: u32) -> Result<(), CloudError> {
        let body = serde_json::to_vec(&capacity).map_err(unreachable)?;
        self.send(
            Method::PUT,
            &format!("/v1/scalesets/{}/capacity", encode(id)),
            Some(body),
        )
        .await
        .map(drop)
    }

    async fn remove_scale_set_instances(
        &self,
        id: &str,
        instances: &[String],
    ) -> Result<(), CloudError> {
        let body = serde_json::to_vec(instances).map_err(unreachable)?;
        self.send(
            Method::POST,
            &format!("/v1/scalesets/{}/removals", encode(id)),
            Some(body),
        )
        .await
        .map(drop)
    }

    async fn delete_scale_set(&self, id: &str) -> Result<(), CloudError> {
        self.send(
            Method::DELETE,
            &format!("/v1/scalesets/{}", encode(id)),
            None,
        )
        .await
        .map(drop)
    }
}

#[async_trait]
impl LoadBalancers for RemoteCloud {
    async fn create_load_balancer(&self, tag: &str) -> Result<LoadBalancer, CloudError> {
        self.call(
            Method::POST,
            &format!("/v1/loadbalancers?tag={}", encode(tag)),
            None,
        )
        .await
    }

    async fn find_load_balancers(&self, tag: &str) -> Result<Vec<LoadBalancer>, CloudError> {
        self.call(
            Method::GET,
            &format!("/v1/loadbalancers?tag={}", encode(tag)),
            None,
        )
        .await
    }

    async fn delete_load_balancer(&self, id: &str) -> Result<(), CloudError> {
        self.send(
            Method::DELETE,
            &format!("/v1/loadbalancers/{}", encode(id)),
            None,
        )
        .await
        .map(drop)
    }
}

#[async_trait]
impl EtcdClusters for RemoteCloud {
    async fn etcd_cluster(&self, cluster: &str) -> Result<EtcdCluster, CloudError> {
        self.call(Method::GET, &format!("/v1/etcd/{}", encode(cluster)), None)
            .await
    }

    async fn move_etcd_leader(&self, cluster: &str, id: u64) -> Result<(), CloudError> {
        self.send(
            Method::PUT,
            &format!("/v1/etcd/{}/leader/{id}", encode(cluster)),
            None,
        )
        .await
        .map(drop)
    }

    async fn remove_etcd_member(&self, cluster: &str, id: u64) -> Result<(), CloudError> {
        self.send(
            Method::DELETE,
            &format!("/v1/etcd/{}/members/{id}", encode(cluster)),
            None,
        )
        .await
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cloud::{CloudServer, InstanceStatus, SimulatedCloud};

    #[tokio::test]
    async fn scale_sets_answer_over_http_as_in_process() {
        let cloud = Arc::new(SimulatedCloud::new(crate::cloud::CloudConfig {
            delete_time: std::time::Duration::from_secs(60),
            ..crate::cloud::CloudConfig::default()
        }));
        let server = CloudServer::start(Arc::clone(&cloud), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let remote = RemoteCloud::new(server.url());
        let model = ScaleSetModel {
            flavor: "small".into(),
            revision: "r-1".into(),
            user_data_len: 4,
        };
        let made = remote
            .create_scale_set(ScaleSetRequest {
                tag: "capi-pool".into(),
                cluster: "ns.c".into(),
                zones: Vec::new(),
                capacity: 2,
                model: model.clone(),
                client_token: Some("capi-pool".into()),
            })
            .await
            .unwrap();
        assert_eq!(made.instances.len(), 2);
        assert_eq!(
            remote.find_scale_sets("capi-pool").await.unwrap(),
            std::slice::from_ref(&made)
        );
        let removed = made.instances[0].id.clone();
        remote
            .remove_scale_set_instances(&made.id, std::slice::from_ref(&removed))
            .await
            .unwrap();
        remote.set_scale_set_capacity(&made.id, 3).await.unwrap();
        remote
            .set_scale_set_model(
                &made.id,
                ScaleSetModel {
                    revision: "r-2".into(),
                    ..model
                },
            )
            .await
            .unwrap();
        let set = remote.get_scale_set(&made.id).await.unwrap().unwrap();
        assert_eq!(set.capacity, 3);
        assert_eq!(set.model.revision, "r-2");
        assert!(set.instances.iter().any(|i| i.id == removed));
        assert_eq!(
            set.instances
                .iter()
                .filter(|i| i.status != InstanceStatus::Deleting)
                .count(),
            3
        );
        remote.delete_scale_set(&made.id).await.unwrap();
        assert_eq!(remote.get_scale_set("ss-missing").await.unwrap(), None);
        assert_eq!(remote.inspect().await.unwrap().max_scale_sets_per_tag, 1);
    }
}
