//! Upstream's own CRDs and webhook configurations, rewritten for managers running as local
//! processes — what controller-runtime's envtest does for upstream's test environment: every CRD
//! converts through its manager's `/convert` endpoint, every webhook is called at a URL on
//! `127.0.0.1` instead of through a Service, and the API server trusts the webhooks' CA.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use serde_json::{Value, json};

use super::UpstreamError;

/// Reads a YAML file into JSON.
fn read_yaml(path: &Path) -> Result<Value, UpstreamError> {
    let text = std::fs::read_to_string(path)
        .map_err(UpstreamError::io(format!("reading {}", path.display())))?;
    serde_saphyr::from_str(&text).map_err(|source| UpstreamError::Yaml {
        file: path.display().to_string(),
        source: Box::new(source),
    })
}

/// The labels a kustomization adds to what it renders: its `labels[].pairs` and `commonLabels`.
pub(crate) fn kustomization_labels(kustomization: &Value) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let pairs = kustomization
        .get("labels")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("pairs"))
        .chain(kustomization.get("commonLabels"));
    for map in pairs.filter_map(Value::as_object) {
        for (key, value) in map {
            if let Some(value) = value.as_str() {
                labels.insert(key.clone(), value.to_string());
            }
        }
    }
    labels
}

/// The component's CRDs — those its `crd/kustomization.yaml` lists — with the labels its
/// kustomizations add (the provider label, the contract version labels) and conversion through
/// `https://127.0.0.1:<port>/convert`, trusting `ca_pem`.
pub(crate) fn crds(config: &Path, ca_pem: &str, port: u16) -> Result<Vec<Value>, UpstreamError> {
    let crd_dir = config.join("crd");
    let kustomization = read_yaml(&crd_dir.join("kustomization.yaml"))?;
    let mut labels = kustomization_labels(&kustomization);
    let default = config.join("default").join("kustomization.yaml");
    if default.is_file() {
        labels.extend(kustomization_labels(&read_yaml(&default)?));
    }
    let resources = kustomization
        .get("resources")
        .and_then(Value::as_array)
        .ok_or_else(|| UpstreamError::Layout {
            what: format!("{} lists no resources", crd_dir.display()),
        })?;
    let mut crds = Vec::with_capacity(resources.len());
    for resource in resources.iter().filter_map(Value::as_str) {
        let mut crd = read_yaml(&crd_dir.join(resource))?;
        with_labels(&mut crd, &labels);
        crd["spec"]["conversion"] = json!({
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/convert"), "caBundle": ca_bundle(ca_pem)},
            },
        });
        crds.push(crd);
    }
    Ok(crds)
}

/// The component's mutating and validating webhook configurations, named `<prefix>-<name>`
/// (upstream names every provider's the same), each webhook called at
/// `https://127.0.0.1:<port><path>` trusting `ca_pem`.
pub(crate) fn webhook_configurations(
    config: &Path,
    ca_pem: &str,
    port: u16,
    prefix: &str,
) -> Result<Vec<Value>, UpstreamError> {
    let path = config.join("webhook").join("manifests.yaml");
    let text = std::fs::read_to_string(&path)
        .map_err(UpstreamError::io(format!("reading {}", path.display())))?;
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&text).map_err(|source| UpstreamError::Yaml {
            file: path.display().to_string(),
            source: Box::new(source),
        })?;
    let mut out = Vec::new();
    for mut document in documents.into_iter().filter(|d| !d.is_null()) {
        let name = document["metadata"]["name"].as_str().unwrap_or("webhooks");
        document["metadata"]["name"] = json!(format!("{prefix}-{name}"));
        if let Some(webhooks) = document.get_mut("webhooks").and_then(Value::as_array_mut) {
            for webhook in webhooks {
                let service_path = webhook["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or("/")
                    .to_string();
                webhook["clientConfig"] = json!({
                    "url": format!("https://127.0.0.1:{port}{service_path}"),
                    "caBundle": ca_bundle(ca_pem),
                });
            }
        }
        out.push(document);
    }
    Ok(out)
}

fn with_labels(object: &mut Value, labels: &BTreeMap<String, String>) {
    if !object["metadata"]["labels"].is_object() {
        object["metadata"]["labels"] = json!({});
    }
    for (key, value) in labels {
        object["metadata"]["labels"][key] = json!(value);
    }
}

fn ca_bundle(ca_pem: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(ca_pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let write = |path: &str, text: &str| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap_or(dir.path()))
                .unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
        };
        write(
            "crd/kustomization.yaml",
            "labels:\n- pairs:\n    cluster.x-k8s.io/v1beta2: v1beta2\nresources:\n- bases/a.yaml\n",
        );
        write(
            "crd/bases/a.yaml",
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: as.example.io\nspec:\n  group: example.io\n",
        );
        write(
            "default/kustomization.yaml",
            "labels:\n- includeSelectors: true\n  pairs:\n    cluster.x-k8s.io/provider: example\n",
        );
        write(
            "webhook/manifests.yaml",
            "---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: validating-webhook-configuration\nwebhooks:\n- name: v.example.io\n  clientConfig:\n    service:\n      name: webhook-service\n      namespace: system\n      path: /validate-a\n",
        );
        dir
    }

    #[test]
    fn crds_get_the_kustomization_labels_and_convert_through_the_local_port() {
        let dir = config_dir();
        let crds = crds(dir.path(), "PEM", 9443).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(crds.len(), 1);
        let labels = &crds[0]["metadata"]["labels"];
        assert_eq!(labels["cluster.x-k8s.io/v1beta2"], "v1beta2");
        assert_eq!(labels["cluster.x-k8s.io/provider"], "example");
        let webhook = &crds[0]["spec"]["conversion"]["webhook"];
        assert_eq!(
            webhook["clientConfig"]["url"],
            "https://127.0.0.1:9443/convert"
        );
        assert_eq!(webhook["clientConfig"]["caBundle"], "UEVN");
    }

    #[test]
    fn webhooks_are_called_at_local_urls_under_distinct_names() {
        let dir = config_dir();
        let configs = webhook_configurations(dir.path(), "PEM", 9444, "capd")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(configs.len(), 1);
        assert_eq!(
            configs[0]["metadata"]["name"],
            "capd-validating-webhook-configuration"
        );
        assert_eq!(
            configs[0]["webhooks"][0]["clientConfig"],
            json!({"url": "https://127.0.0.1:9444/validate-a", "caBundle": "UEVN"})
        );
    }
}
