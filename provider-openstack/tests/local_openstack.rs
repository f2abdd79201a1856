//! The OpenStack provider against a real OpenStack on loopback (`cargo xtask openstack start`, which
//! `cargo xtask test` runs): Keystone, Nova (fake driver), Glance, Neutron (ML2 `test` driver) and
//! Octavia (noop drivers) from Debian's packages.
//!
//! These tests need `CAPI_RS_OPENSTACK_CLOUDS_YAML` (set by the xtask); without it they fail and say
//! how to start the cloud, rather than pass without testing anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use provider_openstack::cloud::{Compute, Images, Networking, Session};
use provider_openstack::credentials;

const CLOUDS_YAML_ENV: &str = "CAPI_RS_OPENSTACK_CLOUDS_YAML";

/// The credentials Secret a user would create from the test cloud's clouds.yaml.
fn credentials_secret() -> Secret {
    let path = std::env::var(CLOUDS_YAML_ENV).unwrap_or_else(|_| {
        panic!(
            "{CLOUDS_YAML_ENV} is not set: start the local OpenStack with `cargo xtask openstack start` \
             and export the variable it prints (`cargo xtask test` does both)"
        )
    });
    let yaml = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("local-cloud".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            credentials::CLOUDS_YAML_KEY.to_string(),
            ByteString(yaml),
        )])),
        ..Default::default()
    }
}

async fn session() -> Session {
    let credentials = credentials::from_secret(&credentials_secret(), "local", None).unwrap();
    Session::connect(&credentials).await.unwrap()
}

#[tokio::test]
async fn a_session_authenticates_and_reaches_every_service() {
    let session = session().await;
    let public = session
        .networks(&[("name".into(), "public".into())])
        .await
        .unwrap();
    assert_eq!(public.len(), 1, "{public:?}");
    assert!(public[0].external);
    let image = session.find_images("capi-rs-test-image", &[]).await.unwrap();
    assert_eq!(image.len(), 1);
    let flavor = session.find_flavor("m1.small").await.unwrap().unwrap();
    assert_eq!(flavor.name, "m1.small");
    // By ID as well as by name.
    let again = session.find_flavor(&flavor.id).await.unwrap().unwrap();
    assert_eq!(again.id, flavor.id);
    assert!(session.servers_named("no-such-server").await.unwrap().is_empty());
}
