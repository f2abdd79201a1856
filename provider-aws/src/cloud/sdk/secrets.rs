//! [`Secrets`] on Secrets Manager.

use async_trait::async_trait;
use aws_sdk_secretsmanager::primitives::Blob;
use aws_sdk_secretsmanager::types as sm;

use super::call;
use crate::api::Tags;
use crate::cloud::error::CloudError;
use crate::cloud::secrets::{Secrets, StoredSecret};
use crate::throttle::RegionBudget;

/// Secrets Manager in one region, under that region's budget.
#[derive(Clone, Debug)]
pub struct SecretsManager {
    client: aws_sdk_secretsmanager::Client,
    budget: RegionBudget,
}

impl SecretsManager {
    /// Secrets Manager through `client` (configured for one region), under `budget`.
    pub fn new(client: aws_sdk_secretsmanager::Client, budget: RegionBudget) -> Self {
        Self { client, budget }
    }
}

#[async_trait]
impl Secrets for SecretsManager {
    async fn put_secret(&self, name: &str, value: &[u8], tags: &Tags) -> Result<(), CloudError> {
        let tags: Vec<sm::Tag> = tags
            .iter()
            .map(|(key, value)| sm::Tag::builder().key(key).value(value).build())
            .collect();
        let created = call(
            &self.budget,
            "CreateSecret",
            self.client
                .create_secret()
                .name(name)
                .secret_binary(Blob::new(value))
                .set_tags(Some(tags))
                .send(),
        )
        .await;
        match created {
            Ok(_) => Ok(()),
            Err(error) if error.code.as_deref() == Some("ResourceExistsException") => {
                call(
                    &self.budget,
                    "PutSecretValue",
                    self.client
                        .put_secret_value()
                        .secret_id(name)
                        .secret_binary(Blob::new(value))
                        .send(),
                )
                .await?;
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    async fn delete_secret(&self, name: &str) -> Result<(), CloudError> {
        let answer = call(
            &self.budget,
            "DeleteSecret",
            self.client
                .delete_secret()
                .secret_id(name)
                .force_delete_without_recovery(true)
                .send(),
        )
        .await;
        match answer {
            Ok(_) => Ok(()),
            Err(error) if error.code.as_deref() == Some("ResourceNotFoundException") => Ok(()),
            Err(error) => Err(error),
        }
    }

    async fn secret_names(&self, prefix: &str) -> Result<Vec<String>, CloudError> {
        let listed = self.secrets(prefix).await?;
        Ok(listed.into_iter().map(|s| s.name).collect())
    }

    async fn secrets(&self, prefix: &str) -> Result<Vec<StoredSecret>, CloudError> {
        let mut names = Vec::new();
        let mut token = None;
        loop {
            let page = call(
                &self.budget,
                "ListSecrets",
                self.client
                    .list_secrets()
                    .filters(
                        sm::Filter::builder()
                            .key(sm::FilterNameStringType::Name)
                            .values(prefix)
                            .build(),
                    )
                    .set_next_token(token)
                    .send(),
            )
            .await?;
            names.extend(
                page.secret_list()
                    .iter()
                    .filter_map(|s| {
                        Some(StoredSecret {
                            name: s.name()?.to_string(),
                            created: s.created_date().map(|d| d.secs()),
                        })
                    })
                    .filter(|s| s.name.starts_with(prefix)),
            );
            token = page.next_token().map(str::to_string);
            if token.is_none() {
                return Ok(names);
            }
        }
    }
}
