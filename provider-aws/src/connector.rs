//! From an `AWSCluster` to the clients that serve it: its region and its `identityRef` — a
//! Secret of static credentials in its namespace, or the manager's own credentials (the SDK's
//! default chain: environment, web identity, instance profile).

#[cfg(feature = "sdk")]
use std::sync::Arc;

use async_trait::async_trait;
use capi_core::ActuatorError;
use kube::ResourceExt;

use crate::api::{AWSCluster, AwsIdentityKind};
use crate::cloud::Clients;

/// Gives the actuators their clients; mocked in unit tests.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Connector: Send + Sync {
    /// The clients of `cluster`'s region with its identity's credentials.
    async fn connect(&self, cluster: &AWSCluster) -> Result<Clients, ActuatorError>;
}

/// Where an `AWSCluster`'s credentials come from, as a cache key.
#[cfg_attr(not(feature = "sdk"), allow(dead_code))]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Identity {
    /// The Secret `<namespace>/<name>`.
    Secret(String),
    /// The manager's own credentials.
    Controller,
}

#[cfg_attr(not(feature = "sdk"), allow(dead_code))]
fn identity_of(cluster: &AWSCluster) -> Identity {
    match &cluster.spec.identity_ref {
        Some(reference) if reference.kind == AwsIdentityKind::Secret => Identity::Secret(format!(
            "{}/{}",
            cluster.namespace().unwrap_or_default(),
            reference.name
        )),
        _ => Identity::Controller,
    }
}

/// Clients per identity and region, made from the identity Secret's `resourceVersion` (`""` for
/// the manager's own credentials).
#[cfg(feature = "sdk")]
type ClientCache = capi_provider::support::client_cache::ClientCache<(Identity, String), Clients>;

/// The production [`Connector`]: reads identity Secrets with the management cluster's client and
/// shares one set of SDK clients per identity, region and Secret version between all reconciles,
/// all of a region under one budget ([`crate::throttle`]). The clients of a Secret that is gone
/// are dropped at once, and any client unused for half an hour
/// ([`capi_provider::support::client_cache`]).
#[cfg(feature = "sdk")]
#[derive(Clone)]
pub struct SecretConnector {
    client: kube::Client,
    budgets: crate::throttle::Budgets,
    endpoint_url: Option<String>,
    cache: Arc<ClientCache>,
}

#[cfg(feature = "sdk")]
impl SecretConnector {
    /// A connector reading Secrets with `client`, the default budget per region.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            budgets: crate::throttle::Budgets::default(),
            endpoint_url: None,
            cache: Arc::default(),
        }
    }

    /// How many sets of clients are held (one per identity and region in use).
    pub fn cached_clients(&self) -> usize {
        self.cache.len()
    }

    /// Every call under these budgets.
    #[must_use]
    pub fn with_budgets(mut self, budgets: crate::throttle::Budgets) -> Self {
        self.budgets = budgets;
        self
    }

    /// Every call to `url` instead of AWS's regional endpoints (a local stand-in such as moto,
    /// or a VPC endpoint).
    #[must_use]
    pub fn with_endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    async fn secret_credentials(
        &self,
        cluster: &AWSCluster,
        name: &str,
    ) -> Result<(String, crate::credentials::StaticCredentials), ActuatorError> {
        let namespace = cluster.namespace().unwrap_or_default();
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(self.client.clone(), &namespace);
        // A missing or unusable Secret is retried with backoff, never latched: creating or
        // fixing it does not change the AWSCluster's generation.
        let secret = secrets
            .get_opt(name)
            .await
            .map_err(|e| ActuatorError::transient("CredentialsSecretUnreadable", e))?
            .ok_or_else(|| {
                let gone = identity_of(cluster);
                self.cache.forget(|(identity, _)| *identity == gone);
                ActuatorError::transient_message(
                    "CredentialsSecretNotFound",
                    format!(
                        "the identityRef Secret {namespace}/{name} does not exist; create it with \
                         keys AccessKeyID and SecretAccessKey (and SessionToken for temporary \
                         credentials)"
                    ),
                )
            })?;
        let credentials =
            crate::credentials::StaticCredentials::from_secret(&secret).map_err(|e| {
                ActuatorError::transient_message(
                    "InvalidCredentials",
                    format!("Secret {namespace}/{name}: {e}"),
                )
            })?;
        Ok((
            secret.metadata.resource_version.unwrap_or_default(),
            credentials,
        ))
    }

    fn configs(
        &self,
        region: &str,
        credentials: aws_sdk_ec2::config::Credentials,
    ) -> (aws_sdk_ec2::Config, aws_sdk_elasticloadbalancingv2::Config) {
        use aws_sdk_ec2::config::{BehaviorVersion, Region};
        let mut ec2 = aws_sdk_ec2::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region.to_string()))
            .credentials_provider(credentials.clone())
            .retry_config(crate::cloud::sdk::sdk_retry_config())
            .timeout_config(crate::cloud::sdk::sdk_timeout_config());
        ec2.set_endpoint_url(self.endpoint_url.clone());
        let ec2 = ec2.build();
        let mut elb = aws_sdk_elasticloadbalancingv2::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region.to_string()))
            .credentials_provider(credentials)
            .retry_config(crate::cloud::sdk::sdk_retry_config())
            .timeout_config(crate::cloud::sdk::sdk_timeout_config());
        elb.set_endpoint_url(self.endpoint_url.clone());
        let elb = elb.build();
        (ec2, elb)
    }

    async fn controller_configs(
        &self,
        region: &str,
    ) -> (aws_sdk_ec2::Config, aws_sdk_elasticloadbalancingv2::Config) {
        use aws_sdk_ec2::config::{BehaviorVersion, Region};
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(region.to_string()))
            .retry_config(crate::cloud::sdk::sdk_retry_config())
            .timeout_config(crate::cloud::sdk::sdk_timeout_config());
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        let shared = loader.load().await;
        (
            aws_sdk_ec2::config::Builder::from(&shared).build(),
            aws_sdk_elasticloadbalancingv2::config::Builder::from(&shared).build(),
        )
    }
}

#[cfg(feature = "sdk")]
#[async_trait]
impl Connector for SecretConnector {
    async fn connect(&self, cluster: &AWSCluster) -> Result<Clients, ActuatorError> {
        let region = cluster.spec.region.as_str();
        let identity = identity_of(cluster);
        let budget = self.budgets.region(region);
        match (&identity, &cluster.spec.identity_ref) {
            (Identity::Secret(_), Some(reference)) => {
                let (version, credentials) =
                    self.secret_credentials(cluster, &reference.name).await?;
                if let Some(clients) = self
                    .cache
                    .get(&(identity.clone(), region.to_string()), &version)
                {
                    return Ok(clients);
                }
                let (ec2, elb) = self.configs(region, credentials.to_sdk());
                let clients = Clients::from_sdk(ec2, elb, budget, credentials.redaction());
                self.cache
                    .insert((identity, region.to_string()), version, clients.clone());
                Ok(clients)
            }
            _ => {
                if let Some(clients) = self.cache.get(&(identity.clone(), region.to_string()), "") {
                    return Ok(clients);
                }
                let (ec2, elb) = self.controller_configs(region).await;
                let clients = Clients::from_sdk(ec2, elb, budget, Default::default());
                self.cache.insert(
                    (identity, region.to_string()),
                    String::new(),
                    clients.clone(),
                );
                Ok(clients)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AWSClusterSpec, AwsIdentityReference};

    #[test]
    fn an_identity_is_the_secret_of_the_clusters_namespace_or_the_managers_own() {
        let mut cluster = AWSCluster::new(
            "demo",
            AWSClusterSpec {
                region: "eu-west-1".into(),
                ..AWSClusterSpec::default()
            },
        );
        cluster.metadata.namespace = Some("team-a".into());
        assert_eq!(identity_of(&cluster), Identity::Controller);
        cluster.spec.identity_ref = Some(AwsIdentityReference {
            name: "aws-creds".into(),
            kind: AwsIdentityKind::Secret,
        });
        assert_eq!(
            identity_of(&cluster),
            Identity::Secret("team-a/aws-creds".into())
        );
        cluster.spec.identity_ref = Some(AwsIdentityReference {
            name: "default".into(),
            kind: AwsIdentityKind::ControllerIdentity,
        });
        assert_eq!(identity_of(&cluster), Identity::Controller);
    }
}
