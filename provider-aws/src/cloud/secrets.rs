//! Secrets Manager as the provider sees it: the secrets that carry a machine's bootstrap data to
//! its instance ([`crate::machine::bootstrap_secrets`]).

use async_trait::async_trait;

use super::error::CloudError;
use crate::api::Tags;

/// A secret as Secrets Manager lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredSecret {
    /// Its name.
    pub name: String,
    /// When it was made, in seconds since the Unix epoch, when Secrets Manager says.
    pub created: Option<i64>,
}

/// The secrets of one region.
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait Secrets: Send + Sync {
    /// Stores `value` as the secret `name`, tagged `tags`: creates it, or replaces its value when
    /// it exists (a retried store writes the same value again).
    async fn put_secret(&self, name: &str, value: &[u8], tags: &Tags) -> Result<(), CloudError>;

    /// Deletes the secret `name` at once, without a recovery window; `Ok` when there is none.
    async fn delete_secret(&self, name: &str) -> Result<(), CloudError>;

    /// The secrets whose name starts with `prefix`, with when each was made.
    async fn secrets(&self, prefix: &str) -> Result<Vec<StoredSecret>, CloudError>;

    /// The names of the secrets whose name starts with `prefix`.
    async fn secret_names(&self, prefix: &str) -> Result<Vec<String>, CloudError>;
}
