//! Secrets Manager as the provider sees it: the secrets that carry a machine's bootstrap data to
//! its instance ([`crate::machine::bootstrap_secrets`]).

use async_trait::async_trait;

use super::error::CloudError;
use crate::api::Tags;

/// The secrets of one region.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Secrets: Send + Sync {
    /// Stores `value` as the secret `name`, tagged `tags`: creates it, or replaces its value when
    /// it exists (a retried store writes the same value again).
    async fn put_secret(&self, name: &str, value: &[u8], tags: &Tags) -> Result<(), CloudError>;

    /// Deletes the secret `name` at once, without a recovery window; `Ok` when there is none.
    async fn delete_secret(&self, name: &str) -> Result<(), CloudError>;

    /// The names of the secrets whose name starts with `prefix`.
    async fn secret_names(&self, prefix: &str) -> Result<Vec<String>, CloudError>;
}
