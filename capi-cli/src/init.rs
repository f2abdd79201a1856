//! `capictl init`: installs a management plane into the cluster of the current kubeconfig — the
//! Cluster API core and kubeadm bootstrap CRDs, the infrastructure provider's CRDs, and its
//! manager's RBAC, Namespace and Deployment. Server-side apply makes it idempotent: a second run
//! changes nothing, a newer `capictl` updates what it owns.
//!
//! `init` never breaks another installation: when the management cluster already serves Cluster
//! API's own groups (`cluster.x-k8s.io`, `bootstrap.cluster.x-k8s.io`,
//! `controlplane.cluster.x-k8s.io`) from CRDs that `capictl` did not install — upstream Cluster
//! API installed by clusterctl, say — it installs only the infrastructure provider, whose manager
//! then runs no core, bootstrap or control plane controllers ([`Plan::leave_foreign`]), and names
//! the owner it found. `--force` replaces those CRDs instead.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::DynamicObject;
use kube::{Api, Client, ResourceExt};

use std::collections::BTreeMap;

use capi_provider::Controllers;

use crate::manifests::{self, ManifestError};

pub use crate::apply::FIELD_MANAGER;

/// Why `init` failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The manifests could not be rendered, or there is no such provider.
    #[error(transparent)]
    Manifests(#[from] ManifestError),
    /// An object could not be converted.
    #[error("rendering {what}")]
    Json {
        /// Which object.
        what: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The API server refused an object or failed.
    #[error(transparent)]
    Apply(#[from] crate::apply::ApplyError),
}

/// Everything `init` installs for `provider`, CRDs first: the provider's clusterctl components
/// ([`manifests::components`]), rendered as clusterctl renders them with the manager running
/// `controllers`; standalone, the Cluster API core, kubeadm bootstrap and control plane CRDs
/// before them.
pub fn objects(provider: &str, controllers: Controllers) -> Result<Vec<DynamicObject>, InitError> {
    let components = manifests::components(provider)?;
    let variables = BTreeMap::from([(
        components.variable("CONTROLLERS"),
        controllers.as_str().to_string(),
    )]);
    let mut values = Vec::new();
    if controllers == Controllers::Standalone {
        for crd in capi_core::crd::core()
            .into_iter()
            .chain(capi_bootstrap::api::crds())
            .chain(capi_control_plane::api::crds())
        {
            let name = crd.name_any();
            values.push(
                serde_json::to_value(&crd).map_err(|source| InitError::Json {
                    what: format!("CRD {name}"),
                    source,
                })?,
            );
        }
    }
    let mut installed = manifests::resolve(&components, &variables)?;
    // CRDs before the objects that name their kinds; the Namespace before what lives in it.
    installed.sort_by_key(|o| match o["kind"].as_str() {
        Some("CustomResourceDefinition") => 0,
        Some("Namespace") => 1,
        _ => 2,
    });
    values.extend(installed);
    values
        .into_iter()
        .map(|value| {
            let what = format!("{} {}", value["kind"], value["metadata"]["name"]);
            serde_json::from_value(value).map_err(|source| InitError::Json { what, source })
        })
        .collect()
}

/// The objects as one YAML stream (`--dry-run`).
pub fn to_yaml(objects: &[DynamicObject]) -> Result<String, InitError> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(
            &serde_saphyr::to_string(object).map_err(|e| ManifestError::Yaml(e.to_string()))?,
        );
    }
    Ok(out)
}

/// Applies `objects` in order with strict field validation (see [`crate::apply`]), waiting for
/// each CRD to be established before what follows; a binding whose role changed (the manager's
/// mode did) is replaced. `progress` hears about each object.
pub async fn apply(
    client: &Client,
    objects: &[DynamicObject],
    progress: impl FnMut(&str),
) -> Result<(), InitError> {
    let bindings = crate::apply::Bindings::Replace;
    Ok(crate::apply::apply_objects(client, objects, None, bindings, progress).await?)
}

/// The groups whose CRDs Cluster API itself serves; another installation may own them.
pub const UPSTREAM_GROUPS: [&str; 3] = [
    "cluster.x-k8s.io",
    "bootstrap.cluster.x-k8s.io",
    "controlplane.cluster.x-k8s.io",
];

/// A CRD of [`UPSTREAM_GROUPS`] that another installation owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignCrd {
    /// The CRD's name.
    pub name: String,
    /// Who owns it, as far as the cluster tells: clusterctl's label, the provider label, the
    /// field managers.
    pub owner: String,
}

/// What `init` found in the management cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// CRDs of Cluster API's own groups that another installation owns.
    pub foreign: Vec<ForeignCrd>,
}

impl Plan {
    /// Reads, for each CRD among `objects` in [`UPSTREAM_GROUPS`], the CRD of that name in the
    /// cluster: one that exists, was not generated by this workspace and that `capictl`
    /// ([`FIELD_MANAGER`]) never applied belongs to another installation ([`foreign_owner`]).
    pub async fn read(client: &Client, objects: &[DynamicObject]) -> Result<Self, kube::Error> {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let mut foreign = Vec::new();
        for object in objects.iter().filter(|o| is_upstream_group_crd(o)) {
            let name = object.name_any();
            let Some(existing) = crds.get_opt(&name).await? else {
                continue;
            };
            if let Some(owner) = foreign_owner(&existing) {
                foreign.push(ForeignCrd { name, owner });
            }
        }
        Ok(Self { foreign })
    }

    /// What `init` installs for `provider` beside the other installation: the provider's
    /// components without the CRDs of [`UPSTREAM_GROUPS`], its manager running only the
    /// provider's controllers (the other installation runs the rest) with only their rules.
    pub fn leave_foreign(&self, provider: &str) -> Result<Vec<DynamicObject>, InitError> {
        objects(provider, Controllers::Provider)
    }

    /// What was found, for the user: each foreign CRD and its owner, on one line each.
    pub fn describe(&self) -> String {
        self.foreign
            .iter()
            .map(|f| format!("  {} (owned by {})", f.name, f.owner))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn is_upstream_group_crd(object: &DynamicObject) -> bool {
    object
        .types
        .as_ref()
        .is_some_and(|t| t.kind == "CustomResourceDefinition")
        && object.data["spec"]["group"]
            .as_str()
            .is_some_and(|g| UPSTREAM_GROUPS.contains(&g))
}

/// Who owns `crd` when it is not this workspace: `None` when it carries
/// [`capi_core::labels::INSTALLATION`] (generated here, whoever applied it) or `capictl` applied it.
pub fn foreign_owner(crd: &CustomResourceDefinition) -> Option<String> {
    use capi_core::labels::{INSTALLATION, THIS_INSTALLATION};
    let labels = crd.labels();
    if labels.get(INSTALLATION).map(String::as_str) == Some(THIS_INSTALLATION) {
        return None;
    }
    let managers: Vec<String> = crd
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        // The API server writes every CRD's status; it owns nothing.
        .filter(|m| m != "kube-apiserver")
        .collect();
    if managers.iter().any(|m| m == FIELD_MANAGER) {
        return None;
    }
    let mut owner = Vec::new();
    if labels.contains_key("clusterctl.cluster.x-k8s.io") {
        owner.push("clusterctl".to_string());
    }
    if let Some(provider) = labels.get("cluster.x-k8s.io/provider") {
        owner.push(format!("provider {provider}"));
    }
    if !managers.is_empty() {
        owner.push(format!("field managers {}", managers.join(", ")));
    }
    if owner.is_empty() {
        owner.push("an unknown installation".to_string());
    }
    Some(owner.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    fn crd(managers: &[&str], labels: &[(&str, &str)]) -> CustomResourceDefinition {
        CustomResourceDefinition {
            metadata: ObjectMeta {
                name: Some("clusters.cluster.x-k8s.io".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                managed_fields: Some(
                    managers
                        .iter()
                        .map(|m| ManagedFieldsEntry {
                            manager: Some(m.to_string()),
                            ..ManagedFieldsEntry::default()
                        })
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..CustomResourceDefinition::default()
        }
    }

    #[test]
    fn a_crd_capictl_applied_is_ours_and_any_other_is_named_by_its_owner() {
        assert_eq!(foreign_owner(&crd(&[FIELD_MANAGER], &[])), None);
        assert_eq!(
            foreign_owner(&crd(
                &["kubectl"],
                &[("capi-rs.dev/installation", "capi-rs")]
            )),
            None,
            "generated here, applied by something else"
        );
        let upstream = foreign_owner(&crd(
            &["clusterctl"],
            &[
                ("clusterctl.cluster.x-k8s.io", ""),
                ("cluster.x-k8s.io/provider", "cluster-api"),
            ],
        ))
        .unwrap();
        assert_eq!(
            upstream,
            "clusterctl; provider cluster-api; field managers clusterctl"
        );
    }

    #[test]
    fn leaving_foreign_crds_keeps_the_provider_and_runs_only_its_controllers() {
        let standalone = objects("inmemory", Controllers::Standalone).unwrap();
        assert!(standalone.iter().any(is_upstream_group_crd));
        let plan = Plan {
            foreign: vec![ForeignCrd {
                name: "clusters.cluster.x-k8s.io".into(),
                owner: "clusterctl".into(),
            }],
        };
        let kept = plan.leave_foreign("inmemory").unwrap();
        assert!(kept.iter().all(|o| !is_upstream_group_crd(o)));
        assert!(
            kept.iter()
                .any(|o| o.name_any() == "inmemorymachines.infrastructure.capi-rs.dev")
        );
        let kind = |o: &DynamicObject, kind: &str| o.types.as_ref().is_some_and(|t| t.kind == kind);
        let deployment = kept.iter().find(|o| kind(o, "Deployment")).unwrap();
        let args = deployment.data["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
        assert!(args.contains("--controllers=provider"), "{args}");
        let binding = kept.iter().find(|o| kind(o, "ClusterRoleBinding")).unwrap();
        assert_eq!(
            binding.data["roleRef"]["name"],
            "capi-inmemory-system-provider"
        );
        assert!(
            kept.iter().all(|o| !o.data.to_string().contains("${")),
            "every variable is resolved"
        );
    }
}
