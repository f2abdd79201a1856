//! What the Azure provider's integration tests share.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

pub mod arm_server;
pub mod model_checker;

use std::sync::Arc;

use capi_provider::support::redact::Redaction;
use provider_azure::api::AzureCluster;
use provider_azure::arm::{Arm, ArmClient};
use provider_azure::credentials::ClientCredentials;
use provider_azure::token::EntraTokens;

/// An ARM client of `server` with the service principal it accepts, as the connector builds
/// one.
pub fn arm_client(server: &arm_server::ArmServer) -> Arc<ArmClient> {
    let credentials =
        ClientCredentials::new(arm_server::TENANT, arm_server::CLIENT, arm_server::SECRET);
    let tokens = EntraTokens::new(&credentials, &server.url, &server.url, server.client()).unwrap();
    let redaction: Redaction = credentials.redaction();
    Arc::new(ArmClient::new(&server.url, Arc::new(tokens), server.client(), redaction).unwrap())
}

/// A [`provider_azure::connector::Connector`] answering with one client.
pub struct FixedConnector(pub Arc<dyn Arm>);

#[async_trait::async_trait]
impl provider_azure::connector::Connector for FixedConnector {
    async fn connect(&self, _: &AzureCluster) -> Result<Arc<dyn Arm>, capi_core::ActuatorError> {
        Ok(self.0.clone())
    }
}
