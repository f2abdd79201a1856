//! The TLS side of the default etcd access against a real etcd that demands client certificates
//! signed by its CA, as a kubeadm node's etcd does: a client certificate issued from the
//! cluster's etcd CA is accepted, one from another CA is not. (The port-forward route needs a
//! kubelet, which the local control plane has not; this test dials the member directly.)
#![cfg(feature = "etcd-client")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use capi_bootstrap::pki::CertificateAuthority;
use capi_control_plane::etcd::client::{GrpcEtcd, GrpcEtcdOptions, MemberAddress};
use capi_control_plane::etcd::workload::{EtcdTls, Route, TlsDial};
use capi_control_plane::etcd::{EtcdCluster, EtcdError};

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn a_client_certificate_from_the_etcd_ca_is_accepted_and_one_from_another_ca_is_not() {
    let ca = CertificateAuthority::generate("etcd-ca").unwrap();
    let (server_cert, server_key) = ca
        .issue_serving("node-a", &["localhost", "node-a", "127.0.0.1"])
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let (client_port, peer_port) = (free_port(), free_port());
    let client_url = format!("https://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let etcd = capi_testing::envtest::Assets::locate().unwrap().etcd;
    let mut process = tokio::process::Command::new(etcd)
        .args([
            "--name=node-a".to_string(),
            format!("--data-dir={}", dir.path().join("data").display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=node-a={peer_url}"),
            format!("--cert-file={}", write("server.crt", &server_cert)),
            format!("--key-file={}", write("server.key", &server_key)),
            format!("--trusted-ca-file={}", write("ca.crt", ca.cert_pem())),
            "--client-cert-auth".to_string(),
            "--log-level=error".to_string(),
        ])
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let etcd_with = |tls: EtcdTls| {
        GrpcEtcd::with_dial(
            vec![MemberAddress::url(client_url.clone())],
            Arc::new(TlsDial::new(tls, Route::Direct)),
            GrpcEtcdOptions::default(),
        )
    };
    let trusted = etcd_with(EtcdTls::from_ca(ca.cert_pem(), &ca.key_pem()).unwrap());
    let mut status = None;
    for _ in 0..100 {
        if let Ok(s) = trusted.status().await {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = status.expect("etcd answers a client certificate from its CA");
    assert_eq!(status.members.len(), 1);
    assert_eq!(status.members[0].name, "node-a");
    assert!(status.members[0].healthy);
    assert_eq!(status.leader, Some(status.members[0].id));

    let other = CertificateAuthority::generate("etcd-ca").unwrap();
    let untrusted = etcd_with(EtcdTls::from_ca(other.cert_pem(), &other.key_pem()).unwrap());
    match untrusted.status().await {
        Err(EtcdError::Unreachable(why)) => {
            assert!(
                !why.contains("PRIVATE KEY"),
                "no key material in errors: {why}"
            );
        }
        other => panic!("another CA's certificate must not pass: {other:?}"),
    }
    process.start_kill().unwrap();
}
