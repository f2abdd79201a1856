//! The generated PKI is real: `openssl` verifies the chain, and a real kube-apiserver that trusts
//! the cluster CA accepts the admin kubeconfig as `system:masters`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use base64::Engine;
use capi_bootstrap::pki::ClusterPki;
use capi_testing::envtest::{Assets, ControlPlane};
use k8s_openapi::api::core::v1::Namespace;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

fn openssl(args: &[&str]) -> String {
    let output = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl is installed");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn client_cert(kubeconfig: &str) -> String {
    let config: serde_json::Value = serde_json::from_str(kubeconfig).unwrap();
    let data = config["users"][0]["user"]["client-certificate-data"]
        .as_str()
        .unwrap();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn openssl_verifies_the_admin_certificate_against_the_cluster_ca() {
    let pki = ClusterPki::generate().unwrap();
    let kubeconfig = pki
        .admin_kubeconfig("demo", "https://10.0.0.10:6443")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    let admin = dir.path().join("admin.crt");
    std::fs::write(&ca, pki.ca.cert_pem()).unwrap();
    std::fs::write(&admin, client_cert(&kubeconfig)).unwrap();
    let verified = openssl(&[
        "verify",
        "-CAfile",
        ca.to_str().unwrap(),
        admin.to_str().unwrap(),
    ]);
    assert!(verified.trim().ends_with(": OK"), "{verified}");
    let subject = openssl(&["x509", "-noout", "-subject", "-in", admin.to_str().unwrap()]);
    assert!(
        subject.contains("system:masters") && subject.contains("kubernetes-admin"),
        "{subject}"
    );
    let ca_text = openssl(&["x509", "-noout", "-text", "-in", ca.to_str().unwrap()]);
    assert!(ca_text.contains("CA:TRUE"), "{ca_text}");
    // The pin kubeadm checks is the SHA-256 of the CA's public key.
    let pubkey = openssl(&["x509", "-noout", "-pubkey", "-in", ca.to_str().unwrap()]);
    let pubkey_file = dir.path().join("ca.pub");
    std::fs::write(&pubkey_file, pubkey).unwrap();
    let der = Command::new("openssl")
        .args(["pkey", "-pubin", "-outform", "DER", "-in"])
        .arg(&pubkey_file)
        .output()
        .unwrap()
        .stdout;
    let digest: String = ring::digest::digest(&ring::digest::SHA256, &der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(pki.ca.cert_hash(), format!("sha256:{digest}"));
}

#[tokio::test]
async fn a_real_api_server_trusting_the_cluster_ca_accepts_the_admin_kubeconfig() {
    let pki = ClusterPki::generate().unwrap();
    let assets = Assets::locate().unwrap();
    let control_plane = ControlPlane::start_with_client_ca(&assets, Some(pki.ca.cert_pem()))
        .await
        .unwrap();

    // The admin kubeconfig, pointed at the local server but keeping its own client certificate.
    let generated: serde_json::Value =
        serde_json::from_str(&pki.admin_kubeconfig("demo", control_plane.url()).unwrap()).unwrap();
    let server_ca = std::fs::read_to_string(control_plane.dir().join("ca.crt")).unwrap();
    let mut kubeconfig = generated.clone();
    kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"] =
        serde_json::json!(base64::engine::general_purpose::STANDARD.encode(server_ca));
    let kubeconfig = Kubeconfig::from_yaml(&serde_json::to_string(&kubeconfig).unwrap()).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    // Listing namespaces needs cluster-admin: system:masters it is.
    Api::<Namespace>::all(client)
        .list(&Default::default())
        .await
        .unwrap();
}
