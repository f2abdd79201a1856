//! The workspace's providers as clusterctl installs them, generated from code so that they
//! cannot drift: each provider's [`Components`] (its CRDs, its manager's least-privilege rules
//! from [`capi_actuator::rbac`] and what its cloud code reads, its Deployment), for the in-memory,
//! OpenStack, AWS and Azure providers ([`PROVIDERS`]). One source for three uses:
//!
//! - `cargo xtask release` writes them as clusterctl repositories ([`release`]);
//! - `capictl init --infrastructure <provider>` applies them, rendered as clusterctl renders
//!   them ([`resolve`]);
//! - `cargo xtask crds` checks them in under `config/<provider>/`, with the standalone
//!   manager's RBAC the integration tests run the managers with (`rbac.yaml`).

use std::collections::BTreeMap;

use capi_actuator::rbac;
use capi_provider::Controllers;
use capi_provider::clusterctl::{
    Components, ComponentsError, Metadata, Release, Version, VersionError,
};
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::template::{Template, TemplateError};

/// Why the manifests could not be rendered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// No such provider.
    #[error("no infrastructure provider {0:?}; available: {list}", list = PROVIDERS.join(", "))]
    UnknownProvider(String),
    /// The components could not be made.
    #[error(transparent)]
    Components(#[from] ComponentsError),
    /// A variable reference is malformed or has no value.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// YAML serialisation or parsing failed.
    #[error("YAML: {0}")]
    Yaml(String),
}

/// The group of this workspace's provider kinds.
const INFRA_GROUP: &str = "infrastructure.capi-rs.dev";

/// The workspace's providers, by the name `capictl` knows them.
pub const PROVIDERS: [&str; 4] = ["inmemory", "openstack", "aws", "azure"];

/// The name clusterctl knows `provider` by: `capirs-<provider>`, distinct from upstream's
/// providers of the same clouds (`aws`, `azure`, `openstack`, `in-memory`) so that both can be
/// configured in one clusterctl.
pub fn clusterctl_name(provider: &str) -> String {
    format!("capirs-{provider}")
}

/// The rules of a provider's own controllers for its kinds named `<plural>machines`,
/// `<plural>clusters` and `<plural>machinetemplates`.
fn provider_rules(plural: &str) -> Vec<PolicyRule> {
    rbac::provider(
        INFRA_GROUP,
        &format!("{plural}machines"),
        &format!("{plural}clusters"),
        &format!("{plural}machinetemplates"),
    )
}

/// What a provider's components are made of: its CRDs, the rules of its own controllers, and
/// the rules it needs in its manager's namespace only.
type Parts = (
    Vec<CustomResourceDefinition>,
    Vec<PolicyRule>,
    Vec<PolicyRule>,
);

/// `provider`'s [`Parts`]. The OpenStack manager reads the `identityRef` Secrets (which the
/// machine reconciler's rules grant); the AWS and Azure managers also read their identity kinds
/// and the namespaces their selectors need; the AWS manager makes each static identity the owner
/// of its Secret in the manager's namespace.
fn parts(provider: &str) -> Option<Parts> {
    let rules = provider_rules(provider);
    Some(match provider {
        "inmemory" => {
            let mut rules = rules;
            rules.extend(provider_inmemory::api::pool_rbac());
            (provider_inmemory::api::crds(), rules, Vec::new())
        }
        "openstack" => (provider_openstack::api::crds(), rules, Vec::new()),
        "aws" => {
            let mut rules = rules;
            rules.extend(provider_aws::api::pool_rbac());
            rules.extend(provider_aws::connector::rbac());
            (
                provider_aws::api::crds(),
                rules,
                provider_aws::connector::identity_namespace_rbac(),
            )
        }
        "azure" => {
            let mut rules = rules;
            rules.extend(provider_azure::connector::rbac());
            rules.extend(provider_azure::api::pool_rbac());
            (provider_azure::api::crds(), rules, Vec::new())
        }
        _ => return None,
    })
}

/// `provider`'s components at this `capictl`'s version: clusterctl name `capirs-<provider>`,
/// namespace `capi-<provider>-system`, manager `capi-<provider>-manager`, image
/// `ghcr.io/capi-rs/<provider>-manager:v<version>` (what `cargo xtask image` builds).
pub fn components(provider: &str) -> Result<Components, ManifestError> {
    let (crds, rules, namespace_rules) =
        parts(provider).ok_or_else(|| ManifestError::UnknownProvider(provider.to_string()))?;
    let mut components = Components::new(&clusterctl_name(provider), crds, rules)?;
    components.namespace_rules = namespace_rules;
    components.namespace = format!("capi-{provider}-system");
    components.manager = format!("capi-{provider}-manager");
    components.image = format!(
        "ghcr.io/capi-rs/{provider}-manager:v{}",
        env!("CARGO_PKG_VERSION")
    );
    Ok(components)
}

/// `provider`'s release at `version` with its cluster templates (those `capictl generate`
/// renders), the image tagged with the version.
pub fn release(provider: &str, version: &Version) -> Result<Release, ManifestError> {
    let mut components = components(provider)?;
    components.image = format!("ghcr.io/capi-rs/{provider}-manager:{version}");
    let mut release = Release::new(components, version.clone());
    for template in crate::generate::BUILT_IN
        .iter()
        .filter(|t| t.provider == provider)
    {
        let name = match template.flavor {
            None => "cluster-template.yaml".to_string(),
            Some(flavor) => format!("cluster-template-{flavor}.yaml"),
        };
        release.templates.push((name, template.text.to_string()));
    }
    Ok(release)
}

/// The objects of `components` as clusterctl renders them: every `${VAR}` replaced by
/// `values[VAR]` or its default (clusterctl's variable syntax, [`crate::template`]).
pub fn resolve(
    components: &Components,
    values: &BTreeMap<String, String>,
) -> Result<Vec<serde_json::Value>, ManifestError> {
    let text = components.to_yaml()?;
    let text = Template::parse(&text)?.render(|name| values.get(name).cloned())?;
    serde_saphyr::from_multiple(&text).map_err(|e| ManifestError::Yaml(e.to_string()))
}

/// The kinds of a manager's RBAC.
const RBAC_KINDS: [&str; 5] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// The files `cargo xtask crds` checks in under `config/<provider>/`:
/// `infrastructure-components.yaml` and `metadata.yaml` of this version's release, and
/// `rbac.yaml`, the standalone manager's ServiceAccount, roles and bindings resolved from them
/// (what the integration tests run the managers with).
pub fn config_files(provider: &str) -> Result<Vec<(&'static str, String)>, ManifestError> {
    let version: Version = env!("CARGO_PKG_VERSION")
        .parse()
        .map_err(|e: VersionError| ManifestError::Yaml(e.to_string()))?;
    let components = components(provider)?;
    let standalone = BTreeMap::from([(
        components.variable("CONTROLLERS"),
        Controllers::Standalone.as_str().to_string(),
    )]);
    let rbac: Vec<serde_json::Value> = resolve(&components, &standalone)?
        .into_iter()
        .filter(|o| o["kind"].as_str().is_some_and(|k| RBAC_KINDS.contains(&k)))
        .collect();
    let metadata = Metadata::new().with_release(&version);
    let header = "# Generated by `cargo xtask crds`; do not edit.\n";
    let mut rbac_text = header.to_string();
    for object in &rbac {
        rbac_text.push_str("---\n");
        rbac_text.push_str(&to_yaml(object)?);
    }
    Ok(vec![
        (
            "infrastructure-components.yaml",
            format!("{header}{}", components.to_yaml()?),
        ),
        ("metadata.yaml", format!("{header}{}", to_yaml(&metadata)?)),
        ("rbac.yaml", rbac_text),
    ])
}

fn to_yaml(value: &impl serde::Serialize) -> Result<String, ManifestError> {
    serde_saphyr::to_string(value).map_err(|e| ManifestError::Yaml(e.to_string()))
}
