//! The default way to a workload cluster's stacked etcd on a real cloud, as upstream's
//! KubeadmControlPlane reaches it (feature `etcd-client`): each member is the etcd static pod
//! `kube-system/etcd-<node>` of a control-plane node, reached by a **port-forward through the
//! workload cluster's API server** (its `<cluster>-kubeconfig` Secret) to port 2379, and spoken to
//! over **TLS with a client certificate issued by the cluster's etcd CA** (the `<cluster>-etcd`
//! Secret, which the control plane provider created). Nothing needs a route from the management
//! cluster to the nodes.
//!
//! [`EtcdTls`] holds the TLS side and [`TlsDial`] the two routes: [`Route::PortForward`] (the
//! default) and [`Route::Direct`] (the member's advertised client URL, for management clusters
//! that can reach the nodes). The client certificate is an ECDSA P-256 one, issued once per etcd
//! CA and kept in memory only; it never appears in logs or errors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use capi_bootstrap::pki::CertificateAuthority;
use capi_core::api::Cluster;
use capi_core::cluster_objects;
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::client::{Dial, GrpcEtcd, GrpcEtcdOptions, MemberAddress};
use super::{EtcdAccess, EtcdCluster, EtcdError};
use crate::workload::WorkloadClients;

/// The port etcd serves clients on in a kubeadm static pod.
pub const ETCD_CLIENT_PORT: u16 = 2379;
/// The name the etcd server certificate of a kubeadm node always carries.
const SERVER_NAME: &str = "localhost";
/// The labels of kubeadm's etcd static pods.
const ETCD_POD_SELECTOR: &str = "component=etcd,tier=control-plane";

/// TLS to a cluster's etcd: its CA to check the members, a client certificate it issued.
#[derive(Clone)]
pub struct EtcdTls {
    tls: TlsOptions,
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTls").finish_non_exhaustive()
    }
}

impl EtcdTls {
    /// Issues a client certificate with the etcd CA (`ca_cert_pem`, `ca_key_pem`: the
    /// `<cluster>-etcd` Secret's `tls.crt` and `tls.key`).
    pub fn from_ca(ca_cert_pem: &str, ca_key_pem: &str) -> Result<Self, EtcdError> {
        let ca = CertificateAuthority::from_pem("etcd-ca", ca_cert_pem, ca_key_pem)
            .map_err(|e| EtcdError::Refused(format!("the etcd CA cannot be used: {e}")))?;
        let (cert, key) = ca
            .issue_client("capi-rs-kubeadm-control-plane", &[])
            .map_err(|e| EtcdError::Refused(format!("issuing an etcd client certificate: {e}")))?;
        Ok(Self {
            tls: TlsOptions::new()
                .ca_certificate(Certificate::from_pem(ca_cert_pem))
                .identity(Identity::from_pem(cert, key))
                .domain_name(SERVER_NAME),
        })
    }
}

/// How a member's connection travels.
#[derive(Clone)]
pub enum Route {
    /// A port-forward to the pod `etcd-<member name>` through the workload API server.
    PortForward(Box<Api<Pod>>),
    /// A TCP connection to the member's advertised client URL.
    Direct,
}

/// Dials a member over TLS, by `route`.
#[derive(Clone)]
pub struct TlsDial {
    tls: EtcdTls,
    route: Route,
}

impl TlsDial {
    /// Dials over `tls`, by `route`.
    pub fn new(tls: EtcdTls, route: Route) -> Self {
        Self { tls, route }
    }
}

fn unreachable(member: &MemberAddress, why: impl std::fmt::Display) -> EtcdError {
    let who = if member.name.is_empty() {
        member.client_url.as_deref().unwrap_or("?")
    } else {
        member.name.as_str()
    };
    EtcdError::Unreachable(format!("etcd member {who}: {why}"))
}

#[async_trait]
impl Dial for TlsDial {
    async fn dial(&self, member: &MemberAddress, timeout: Duration) -> Result<Client, EtcdError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout);
        let url = match &self.route {
            Route::Direct => member
                .client_url
                .clone()
                .ok_or_else(|| unreachable(member, "advertises no client URL"))?,
            Route::PortForward(_) => format!("https://{SERVER_NAME}:{ETCD_CLIENT_PORT}"),
        };
        let endpoint = tonic_endpoint(&url)
            .map_err(|e| unreachable(member, e))?
            .tls_config(self.tls.tls.clone())
            .map_err(|e| unreachable(member, e))?
            .connect_timeout(timeout)
            .timeout(timeout);
        let channel = match &self.route {
            Route::Direct => endpoint.connect().await,
            Route::PortForward(pods) => {
                if member.name.is_empty() {
                    return Err(unreachable(member, "has no name to find its pod by"));
                }
                let pods: Api<Pod> = (**pods).clone();
                let pod = format!("etcd-{}", member.name);
                endpoint
                    .connect_with_connector(tower::service_fn(move |_| {
                        let (pods, pod) = (pods.clone(), pod.clone());
                        async move { forward(&pods, &pod).await }
                    }))
                    .await
            }
        }
        .map_err(|e| unreachable(member, e))?;
        Client::from_channel(etcd_client::Channel::Tonic(channel), Some(options))
            .await
            .map_err(|e| unreachable(member, e))
    }
}

fn tonic_endpoint(url: &str) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    tonic::transport::Endpoint::from_shared(url.to_string())
}

/// One stream to port 2379 of `pod`, through the API server.
async fn forward(
    pods: &Api<Pod>,
    pod: &str,
) -> Result<hyper_util::rt::TokioIo<tokio::io::DuplexStream>, std::io::Error> {
    let mut forwarder = pods
        .portforward(pod, &[ETCD_CLIENT_PORT])
        .await
        .map_err(std::io::Error::other)?;
    let stream = forwarder
        .take_stream(ETCD_CLIENT_PORT)
        .ok_or_else(|| std::io::Error::other("the port-forward opened no stream"))?;
    // The forwarder's task carries the stream; let it run until the stream closes.
    tokio::spawn(async move {
        let _ = forwarder.join().await;
    });
    Ok(hyper_util::rt::TokioIo::new(stream))
}

/// A cluster's namespace and name, or a Secret's UID and resource version.
type ClusterKey = (String, String);

/// [`EtcdAccess`] for any cloud: the etcd static pods through the workload API server, TLS with
/// a client certificate from the cluster's etcd CA. A client certificate is issued once per
/// cluster and etcd CA Secret version (its UID and resource version), replaced when the Secret
/// changes, dropped with the workload client when the Secret is gone or the control plane is
/// deleted ([`EtcdAccess::forget`]).
#[derive(Default)]
pub struct WorkloadEtcdAccess {
    options: GrpcEtcdOptions,
    /// Per cluster (namespace, name): the etcd CA Secret's (UID, resource version) and the
    /// certificate issued from it.
    issued: Mutex<HashMap<ClusterKey, (ClusterKey, EtcdTls)>>,
    workloads: WorkloadClients,
}

impl std::fmt::Debug for WorkloadEtcdAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadEtcdAccess")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl WorkloadEtcdAccess {
    /// Access with these call options.
    pub fn new(options: GrpcEtcdOptions) -> Self {
        Self {
            options,
            issued: Mutex::new(HashMap::new()),
            workloads: WorkloadClients::default(),
        }
    }

    /// How many clusters' client certificates are held.
    pub fn issued(&self) -> usize {
        self.issued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn tls_for(&self, cluster: (String, String), secret: &Secret) -> Result<EtcdTls, EtcdError> {
        let version = (
            secret.uid().unwrap_or_default(),
            secret.resource_version().unwrap_or_default(),
        );
        if let Some((issued_for, tls)) = self
            .issued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&cluster)
            && *issued_for == version
        {
            return Ok(tls.clone());
        }
        let field = |name: &str| {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(name))
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
                .ok_or_else(|| {
                    EtcdError::Refused(format!("Secret {} has no {name}", secret.name_any()))
                })
        };
        let tls = EtcdTls::from_ca(&field("tls.crt")?, &field("tls.key")?)?;
        self.issued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(cluster, (version, tls.clone()));
        Ok(tls)
    }
}

#[async_trait]
impl EtcdAccess for WorkloadEtcdAccess {
    async fn connect(
        &self,
        client: &kube::Client,
        cluster: &Cluster,
    ) -> Result<Arc<dyn EtcdCluster>, EtcdError> {
        let namespace = cluster.namespace().unwrap_or_default();
        let name = cluster.name_any();
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
        let read = |secret: String| {
            let secrets = secrets.clone();
            let (namespace, name) = (namespace.clone(), name.clone());
            async move {
                match secrets.get_opt(&secret).await {
                    Ok(Some(found)) => Ok(found),
                    Ok(None) => {
                        // Nothing made from a Secret that is gone is kept.
                        self.forget(&namespace, &name);
                        Err(EtcdError::Unreachable(format!(
                            "Secret {secret} does not exist yet"
                        )))
                    }
                    Err(e) => Err(EtcdError::Unreachable(format!(
                        "reading Secret {secret}: {e}"
                    ))),
                }
            }
        };
        let etcd_ca = read(cluster_objects::name(&name, "etcd")).await?;
        let tls = self.tls_for((namespace.clone(), name.clone()), &etcd_ca)?;
        let kubeconfig = read(cluster_objects::name(&name, cluster_objects::KUBECONFIG)).await?;
        let workload = self
            .workloads
            .for_secret(&kubeconfig)
            .await
            .map_err(|e| EtcdError::Unreachable(e.to_string()))?;
        let pods: Api<Pod> = Api::namespaced(workload, "kube-system");
        let seeds: Vec<MemberAddress> = pods
            .list(&ListParams::default().labels(ETCD_POD_SELECTOR))
            .await
            .map_err(|e| EtcdError::Unreachable(format!("listing the etcd pods: {e}")))?
            .items
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .map(MemberAddress::named)
            .collect();
        Ok(Arc::new(GrpcEtcd::with_dial(
            seeds,
            Arc::new(TlsDial::new(tls, Route::PortForward(Box::new(pods)))),
            self.options.clone(),
        )))
    }

    fn forget(&self, namespace: &str, cluster: &str) {
        self.issued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(namespace.to_string(), cluster.to_string()));
        self.workloads.forget(namespace, cluster);
    }
}

#[cfg(test)]
mod tests {
    use capi_testing::TestEnv;
    use kube::api::{DeleteParams, PostParams};
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn nothing_made_from_a_clusters_secrets_outlives_them()
    -> Result<(), Box<dyn std::error::Error>> {
        let env = TestEnv::start_with_crds(&capi_core::crd::core()).await?;
        let ns = env.namespace().await?;
        let secrets: Api<Secret> = Api::namespaced(env.client(), &ns);
        let ca = CertificateAuthority::generate("etcd-ca")?;
        for (name, data) in [
            (
                "demo-etcd",
                json!({"tls.crt": ca.cert_pem(), "tls.key": ca.key_pem()}),
            ),
            // The workload cluster is the test's own API server.
            (
                "demo-kubeconfig",
                json!({"value": env.control_plane().kubeconfig_yaml()}),
            ),
        ] {
            let secret: Secret = serde_json::from_value(json!({
                "metadata": {"name": name}, "stringData": data,
            }))?;
            secrets.create(&PostParams::default(), &secret).await?;
        }
        let cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "demo", "namespace": ns}, "spec": {},
        }))?;
        let access = WorkloadEtcdAccess::default();
        access.connect(&env.client(), &cluster).await?;
        access.connect(&env.client(), &cluster).await?;
        assert_eq!(access.issued(), 1, "one certificate per cluster and CA");

        access.forget(&ns, "demo");
        assert_eq!(access.issued(), 0, "forgotten with the control plane");

        access.connect(&env.client(), &cluster).await?;
        secrets
            .delete("demo-etcd", &DeleteParams::default())
            .await?;
        let gone = access.connect(&env.client(), &cluster).await.err();
        assert!(matches!(gone, Some(EtcdError::Unreachable(_))), "{gone:?}");
        assert_eq!(access.issued(), 0, "dropped once its CA Secret is gone");
        Ok(())
    }
}
