//! The harness itself: it really starts etcd + kube-apiserver, and stops them on drop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpStream;

use capi_testing::envtest::{Assets, ControlPlane, EnvtestError};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

#[tokio::test]
async fn control_plane_serves_and_is_gone_after_drop() {
    let control_plane = ControlPlane::start().await.unwrap();
    let client = control_plane.client().await.unwrap();
    let version = client.apiserver_version().await.unwrap();
    assert!(
        version.minor.trim_end_matches('+').parse::<u32>().unwrap() >= 33,
        "a version upstream Cluster API v1.14 supports: {version:?}"
    );
    // The binaries `cargo xtask envtest` builds are the pinned release (a vendor's
    // KUBEBUILDER_ASSETS may hold another supported one).
    let assets = std::env::var_os(capi_testing::envtest::KUBEBUILDER_ASSETS)
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from);
    if assets.is_none_or(|dir| dir == capi_testing::envtest::default_assets_dir()) {
        assert_eq!(
            version.git_version,
            capi_testing::envtest::KUBERNETES_VERSION
        );
    }

    // The token in the kubeconfig is an admin: it may list cluster-scoped objects.
    let namespaces: Api<Namespace> = Api::all(client);
    namespaces.list(&Default::default()).await.unwrap();

    let port: u16 = control_plane
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let dir = control_plane.dir().to_path_buf();
    assert!(dir.join("kube-apiserver.log").exists());
    drop(control_plane);
    assert!(!dir.exists(), "scratch directory removed");
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "API server stopped"
    );
}

#[tokio::test]
async fn missing_binaries_are_an_actionable_error() {
    let empty = tempfile::tempdir().unwrap();
    let err = Assets::in_dir(empty.path()).unwrap_err();
    assert!(matches!(
        err,
        EnvtestError::MissingBinary { binary: "etcd", .. }
    ));
    assert!(err.to_string().contains("cargo xtask envtest"), "{err}");
}
