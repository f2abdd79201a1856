//! The cloud traits on the official AWS SDK (`aws-sdk-ec2`, `aws-sdk-autoscaling`,
//! `aws-sdk-elasticloadbalancingv2`, `aws-sdk-secretsmanager`).
//!
//! Every call first takes a permit of its region's [`RegionBudget`]; a throttled answer tells the
//! budget (which slows the region down) and comes back as a [`CloudError`] carrying the wait the
//! budget asks for. The SDK's own retries are off ([`sdk_retry_config`]): a retry is the
//! reconcile's decision (RequeueAfter or backoff), so that one budget sees every call and a
//! throttled region is not hammered three times per call.
//!
//! One module per service, as the traits are: `compute` ([`Compute`](super::Compute) on
//! [`Ec2`]), `network` ([`Network`](super::Network) on [`Ec2`]) and `load_balancing`
//! ([`LoadBalancing`](super::LoadBalancing) on [`Elb`]) `secrets` ([`Secrets`](super::Secrets)
//! on [`SecretsManager`]) and `scaling` ([`Scaling`](super::Scaling) on [`AutoScaling`]); what they share — the budgeted call,
//! the SDK's settings, EC2's filters and tags — is here.

mod compute;
mod load_balancing;
mod network;
mod scaling;
mod secrets;

use std::future::Future;
use std::time::Duration;

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types as ec2;

use super::error::{CloudError, ErrorClass};
use crate::api::{Filter, Tags};
use crate::throttle::RegionBudget;

pub use load_balancing::Elb;
pub use scaling::AutoScaling;
pub use secrets::SecretsManager;

/// The longest an API call may take, retries excluded (there are none), before it fails as a
/// transient error.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The SDK's retry settings for the provider's clients: none (see the module's documentation).
pub fn sdk_retry_config() -> aws_sdk_ec2::config::retry::RetryConfig {
    aws_sdk_ec2::config::retry::RetryConfig::disabled()
}

/// The SDK's timeouts for the provider's clients: [`OPERATION_TIMEOUT`] per call.
pub fn sdk_timeout_config() -> aws_sdk_ec2::config::timeout::TimeoutConfig {
    aws_sdk_ec2::config::timeout::TimeoutConfig::builder()
        .operation_timeout(OPERATION_TIMEOUT)
        .connect_timeout(Duration::from_secs(10))
        .build()
}

/// A [`CloudError`] of an SDK error: AWS's code and message, or for a call that got no answer
/// (a timeout, a refused connection) the transport's description.
fn cloud_error<E, R>(operation: &str, error: SdkError<E, R>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = error.code().map(str::to_string);
    let message = match error.message() {
        Some(message) => message.to_string(),
        None => DisplayErrorContext(&error).to_string(),
    };
    CloudError::new(operation, code, message)
}

/// One API call under `budget`: a permit first, the budget told of a throttled answer after.
async fn call<T, E, R>(
    budget: &RegionBudget,
    operation: &str,
    send: impl Future<Output = Result<T, SdkError<E, R>>>,
) -> Result<T, CloudError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    budget.acquire().await;
    match send.await {
        Ok(answer) => {
            budget.succeeded();
            Ok(answer)
        }
        Err(error) => {
            let error = cloud_error(operation, error);
            if error.class() == ErrorClass::Throttled {
                let wait = budget.throttled();
                Err(error.with_retry_after(wait))
            } else {
                budget.succeeded();
                Err(error)
            }
        }
    }
}

fn ec2_filters(filters: &[Filter]) -> Vec<ec2::Filter> {
    filters
        .iter()
        .map(|f| {
            ec2::Filter::builder()
                .name(&f.name)
                .set_values(Some(f.values.clone()))
                .build()
        })
        .collect()
}

fn ec2_tags(tags: &Tags) -> Vec<ec2::Tag> {
    tags.iter()
        .map(|(key, value)| ec2::Tag::builder().key(key).value(value).build())
        .collect()
}

fn tags_of(tags: &[ec2::Tag]) -> Tags {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_string(),
                t.value().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

fn owned(value: Option<&str>) -> Option<String> {
    value.filter(|v| !v.is_empty()).map(str::to_string)
}

/// `Ok` for an answer saying the resource is gone already.
fn gone_is_done(answer: Result<(), CloudError>) -> Result<(), CloudError> {
    match answer {
        Err(error) if error.is_not_found() => Ok(()),
        answer => answer,
    }
}

/// EC2 in one region, under that region's budget.
#[derive(Clone, Debug)]
pub struct Ec2 {
    client: aws_sdk_ec2::Client,
    budget: RegionBudget,
}

impl Ec2 {
    /// EC2 through `client` (configured for one region), under `budget`.
    pub fn new(client: aws_sdk_ec2::Client, budget: RegionBudget) -> Self {
        Self { client, budget }
    }
}
