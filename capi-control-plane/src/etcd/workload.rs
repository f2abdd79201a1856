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

/// [`EtcdAccess`] for any cloud: the etcd static pods through the workload API server, TLS with
/// a client certificate from the cluster's etcd CA. Client certificates are issued once per etcd
/// CA (keyed by its Secret's UID and resource version).
#[derive(Default)]
pub struct WorkloadEtcdAccess {
    options: GrpcEtcdOptions,
    issued: Mutex<HashMap<(String, String), EtcdTls>>,
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

    fn tls_for(&self, secret: &Secret) -> Result<EtcdTls, EtcdError> {
        let key = (
            secret.uid().unwrap_or_default(),
            secret.resource_version().unwrap_or_default(),
        );
        if let Some(tls) = self
            .issued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
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
        let mut issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner);
        issued.retain(|(uid, _), _| *uid != key.0);
        issued.insert(key, tls.clone());
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
            async move {
                secrets
                    .get_opt(&secret)
                    .await
                    .map_err(|e| EtcdError::Unreachable(format!("reading Secret {secret}: {e}")))?
                    .ok_or_else(|| {
                        EtcdError::Unreachable(format!("Secret {secret} does not exist yet"))
                    })
            }
        };
        let tls = self.tls_for(&read(format!("{name}-etcd")).await?)?;
        let kubeconfig = read(format!("{name}-kubeconfig")).await?;
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
}
