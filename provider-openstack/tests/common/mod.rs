//! What the tests against the local OpenStack share: its credentials, a session, and the
//! connector that hands them to the actuators.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use capi_core::ActuatorError;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use provider_openstack::api::IdentityReference;
use provider_openstack::cloud::Session;
use provider_openstack::connector::{Clients, Connector};
use provider_openstack::credentials;

pub const CLOUDS_YAML_ENV: &str = "CAPI_RS_OPENSTACK_CLOUDS_YAML";

/// The credentials Secret a user would create from the test cloud's clouds.yaml.
pub fn credentials_secret() -> Secret {
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

pub async fn session() -> Session {
    let credentials = credentials::from_secret(&credentials_secret(), "local", None).unwrap();
    Session::connect(&credentials).await.unwrap()
}

/// Every identity connects with the local cloud's session.
pub struct LocalConnector(pub Session);

#[async_trait::async_trait]
impl Connector for LocalConnector {
    async fn connect(
        &self,
        _namespace: &str,
        _identity: &IdentityReference,
    ) -> Result<Clients, ActuatorError> {
        Ok(Clients::from_session(self.0.clone()))
    }
}
