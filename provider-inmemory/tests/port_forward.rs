//! The simulated kubelets' port-forward through a real API server, opened the way kube-rs's
//! `Api::portforward` opens it — a WebSocket (`v4.channel.k8s.io`), which the API server passes
//! on to the kubelet unchanged — as this workspace's KubeadmControlPlane does to reach each
//! control-plane node's etcd (`capi_control_plane::etcd::workload`). The SPDY route (upstream's
//! KubeadmControlPlane) is exercised by `tests/upstream_drives.rs`.
#![cfg(feature = "real-etcd")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;

use capi_testing::envtest::ControlPlane;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use provider_inmemory::kubelet::PortForwardTargets;
use provider_inmemory::nodes::{Hosts, NodeRegistrar, RunningHost};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One control-plane host, whose kubelet runs kubeadm's static pods.
struct OneHost;

#[async_trait::async_trait]
impl Hosts for OneHost {
    async fn running(&self) -> Result<Vec<RunningHost>, String> {
        Ok(vec![RunningHost {
            name: "node-a".into(),
            provider_id: "test:///node-a".into(),
            address: "127.0.0.1".into(),
            zone: None,
            control_plane: true,
            cluster: None,
        }])
    }

    async fn init_cluster_configuration(&self, _: &RunningHost) -> Option<String> {
        None
    }
}

/// Port 2379 of `kube-system/etcd-node-a` is an echo server; nothing else listens.
struct Echo(SocketAddr);

impl PortForwardTargets for Echo {
    fn resolve(&self, node: &str, namespace: &str, pod: &str, port: u16) -> Option<SocketAddr> {
        (node == "node-a" && namespace == "kube-system" && pod == "etcd-node-a" && port == 2379)
            .then_some(self.0)
    }
}

async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut reader, mut writer) = socket.split();
                let _ = tokio::io::copy(&mut reader, &mut writer).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn kube_rs_port_forwards_reach_a_pods_port_and_a_missing_port_says_so() {
    let workload = ControlPlane::start().await.unwrap();
    let client = workload.client().await.unwrap();
    let mut registrar = NodeRegistrar::new(client.clone(), Arc::new(OneHost))
        .with_kubelets(Arc::new(Echo(echo_server().await)));
    registrar.sync().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "kube-system");

    let mut forwarder = pods.portforward("etcd-node-a", &[2379]).await.unwrap();
    let mut stream = forwarder.take_stream(2379).unwrap();
    for message in [&b"hello"[..], &[7u8; 100_000][..]] {
        stream.write_all(message).await.unwrap();
        let mut answer = vec![0u8; message.len()];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(answer, message, "the echo comes back through the kubelet");
    }
    drop(stream);

    let mut forwarder = pods.portforward("etcd-node-a", &[2380]).await.unwrap();
    let error = forwarder.take_error(2380).unwrap().await;
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("no pod port kube-system/etcd-node-a port 2380")),
        "{error:?}"
    );
}
