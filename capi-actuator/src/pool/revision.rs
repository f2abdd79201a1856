//! The revision of a pool's model ([`ModelRevision`]), as the loop computes it.

use capi_core::ModelRevision;
use capi_core::api::MachinePool;
use capi_core::infra::InfraMachinePool;
use sha2::{Digest, Sha256};

/// The revision of the model `infra_pool` and `pool` describe: a digest of the provider's model
/// ([`InfraMachinePool::model`]: its pool spec without the contract's `providerID` and
/// `providerIDList`, by default), the `MachinePool`'s Kubernetes version and the name of its
/// bootstrap data Secret. `r-` and 16 hexadecimal digits; the same inputs give the same revision
/// in every process and release.
pub(crate) fn of<P: InfraMachinePool>(infra_pool: &P, pool: &MachinePool) -> ModelRevision {
    of_model(&infra_pool.model(), pool)
}

fn of_model(model: &serde_json::Value, pool: &MachinePool) -> ModelRevision {
    let template = &pool.spec.template.spec;
    let mut digest = Sha256::new();
    // Keys sorted: the digest does not depend on the order of fields.
    digest.update(canonical(model).as_bytes());
    for part in [
        template.version.as_deref().unwrap_or_default(),
        template
            .bootstrap
            .data_secret_name
            .as_deref()
            .unwrap_or_default(),
    ] {
        digest.update([0]);
        digest.update(part.as_bytes());
    }
    let hex: String = digest
        .finalize()
        .iter()
        .take(8)
        .map(|byte| format!("{byte:02x}"))
        .collect();
    ModelRevision::new(format!("r-{hex}"))
}

/// `value` as JSON with the keys of every object sorted.
fn canonical(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Object(fields) => {
            let mut entries: Vec<(&String, &Value)> = fields.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let inner: Vec<String> = entries
                .into_iter()
                .map(|(key, value)| format!("{}:{}", Value::String(key.clone()), canonical(value)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", inner.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(version: &str, secret: &str) -> MachinePool {
        let mut pool = MachinePool::default();
        pool.spec.template.spec.version = Some(version.into());
        pool.spec.template.spec.bootstrap.data_secret_name = Some(secret.into());
        pool
    }

    #[test]
    fn key_order_does_not_change_the_revision() {
        let base = json!({"size": "large", "image": "a"});
        let reordered = json!({"image": "a", "size": "large"});
        let pool = pool("v1.33.1", "workers-bootstrap");
        assert_eq!(of_model(&base, &pool), of_model(&reordered, &pool));
        assert!(of_model(&base, &pool).as_str().starts_with("r-"));
        assert_eq!(of_model(&base, &pool).as_str().len(), 18);
    }

    #[test]
    fn the_model_the_version_and_the_bootstrap_secret_name_each_change_it() {
        let model = json!({"size": "large"});
        let first = of_model(&model, &pool("v1.33.1", "workers-bootstrap"));
        for (other_model, other_pool) in [
            (
                json!({"size": "small"}),
                pool("v1.33.1", "workers-bootstrap"),
            ),
            (model.clone(), pool("v1.33.2", "workers-bootstrap")),
            (model.clone(), pool("v1.33.1", "workers-bootstrap-2")),
        ] {
            assert_ne!(first, of_model(&other_model, &other_pool));
        }
    }
}
