//! `capictl generate cluster`: a provider's template, with clusterctl's variables filled from the
//! environment and the command's flags.
//!
//! The templates live in the repository (`templates/<provider>/cluster-template[-<flavor>].yaml`)
//! and are compiled into the binary; `--from FILE` renders any other template, including one
//! written for upstream `clusterctl`.

use std::collections::BTreeMap;

use crate::template::{Template, TemplateError, Variables};

/// A template shipped with the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltIn {
    /// The infrastructure provider (`--infrastructure`).
    pub provider: &'static str,
    /// The flavor (`--flavor`); `None` is the default one.
    pub flavor: Option<&'static str>,
    /// The template text.
    pub text: &'static str,
}

/// Every template shipped with the binary.
pub const BUILT_IN: &[BuiltIn] = &[
    BuiltIn {
        provider: "inmemory",
        flavor: None,
        text: include_str!("../../templates/inmemory/cluster-template.yaml"),
    },
    BuiltIn {
        provider: "inmemory",
        flavor: Some("ignition"),
        text: include_str!("../../templates/inmemory/cluster-template-ignition.yaml"),
    },
];

/// Why a cluster could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// No template for this provider and flavor.
    #[error("no template for infrastructure {provider:?}{}; available: {available}", flavor.as_ref().map(|f| format!(" flavor {f:?}")).unwrap_or_default())]
    NoTemplate {
        /// The provider asked for.
        provider: String,
        /// The flavor asked for.
        flavor: Option<String>,
        /// What exists, for the message.
        available: String,
    },
    /// The template is malformed or variables are missing.
    #[error(transparent)]
    Template(#[from] TemplateError),
}

/// The built-in template for `provider` and `flavor`.
pub fn built_in(provider: &str, flavor: Option<&str>) -> Result<&'static str, GenerateError> {
    BUILT_IN
        .iter()
        .find(|t| t.provider == provider && t.flavor == flavor)
        .map(|t| t.text)
        .ok_or_else(|| GenerateError::NoTemplate {
            provider: provider.to_string(),
            flavor: flavor.map(str::to_string),
            available: BUILT_IN
                .iter()
                .map(|t| match t.flavor {
                    Some(f) => format!("{} (flavor {f})", t.provider),
                    None => t.provider.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// What the command line sets; each flag wins over the environment variable it stands for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inputs {
    /// `CLUSTER_NAME`.
    pub cluster_name: String,
    /// `NAMESPACE` (`--target-namespace`).
    pub namespace: Option<String>,
    /// `KUBERNETES_VERSION`.
    pub kubernetes_version: Option<String>,
    /// `CONTROL_PLANE_MACHINE_COUNT`.
    pub control_plane_machine_count: Option<u32>,
    /// `WORKER_MACHINE_COUNT`.
    pub worker_machine_count: Option<u32>,
}

impl Inputs {
    fn values(&self) -> BTreeMap<&'static str, String> {
        let mut values = BTreeMap::from([("CLUSTER_NAME", self.cluster_name.clone())]);
        if let Some(v) = &self.namespace {
            values.insert("NAMESPACE", v.clone());
        }
        if let Some(v) = &self.kubernetes_version {
            values.insert("KUBERNETES_VERSION", v.clone());
        }
        if let Some(v) = self.control_plane_machine_count {
            values.insert("CONTROL_PLANE_MACHINE_COUNT", v.to_string());
        }
        if let Some(v) = self.worker_machine_count {
            values.insert("WORKER_MACHINE_COUNT", v.to_string());
        }
        values
    }
}

/// Renders `template` with the flags in `inputs`, then `env` (the process environment in the
/// binary).
pub fn render(
    template: &str,
    inputs: &Inputs,
    env: impl Fn(&str) -> Option<String>,
) -> Result<String, GenerateError> {
    let parsed = Template::parse(template)?;
    let values = inputs.values();
    Ok(parsed.render(|name| values.get(name).cloned().or_else(|| env(name)))?)
}

/// What `--list-variables` prints, as clusterctl prints it.
pub fn list_variables(template: &str) -> Result<String, GenerateError> {
    let Variables { required, optional } = Template::parse(template)?.variables();
    let mut out = String::from("Required Variables:\n");
    for name in &required {
        out.push_str(&format!("  - {name}\n"));
    }
    out.push_str("\nOptional Variables:\n");
    let width = optional.keys().map(String::len).max().unwrap_or(0);
    for (name, default) in &optional {
        out.push_str(&format!("  - {name:<width$} (defaults to {default:?})\n"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_template_renders_into_valid_yaml_documents() {
        for template in BUILT_IN {
            let inputs = Inputs {
                cluster_name: "demo".into(),
                kubernetes_version: Some("v1.33.0".into()),
                ..Inputs::default()
            };
            let text = render(template.text, &inputs, |_| None).unwrap();
            assert!(!text.contains("${"), "{text}");
            let documents = text.split("\n---\n").count();
            assert!(
                documents >= 8,
                "{}: {documents} documents",
                template.provider
            );
            assert!(text.contains("name: demo-md-0"));
            assert!(text.contains("replicas: 3"), "worker default");
        }
    }

    #[test]
    fn flags_win_over_the_environment_and_missing_variables_are_named() {
        let template = built_in("inmemory", None).unwrap();
        let inputs = Inputs {
            cluster_name: "demo".into(),
            worker_machine_count: Some(5),
            ..Inputs::default()
        };
        let error = render(template, &inputs, |_| None).unwrap_err().to_string();
        assert!(error.contains("KUBERNETES_VERSION"), "{error}");
        let env = |name: &str| {
            (name == "KUBERNETES_VERSION" || name == "WORKER_MACHINE_COUNT").then(|| {
                if name == "KUBERNETES_VERSION" {
                    "v1.32.1"
                } else {
                    "9"
                }
                .to_string()
            })
        };
        let text = render(template, &inputs, env).unwrap();
        assert!(text.contains("replicas: 5"), "the flag wins");
        assert!(text.contains("version: v1.32.1"));
    }

    #[test]
    fn unknown_templates_list_what_exists() {
        let error = built_in("nimbus", None).unwrap_err().to_string();
        assert!(error.contains("inmemory (flavor ignition)"), "{error}");
    }

    #[test]
    fn list_variables_reads_like_clusterctl() {
        let listing = list_variables(built_in("inmemory", None).unwrap()).unwrap();
        assert!(
            listing.starts_with("Required Variables:\n  - CLUSTER_NAME\n  - KUBERNETES_VERSION\n")
        );
        assert!(listing.contains("WORKER_MACHINE_COUNT"));
        assert!(listing.contains("(defaults to \"3\")"));
    }
}
