//! The CustomResourceDefinitions of the core kinds, as installed into a management cluster.
//!
//! The YAML checked into `crds/core/` is rendered by [`render_core`]; a test fails when the two
//! differ, and `cargo xtask crds` rewrites the folder.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::api::{
    Cluster, Machine, MachineDeployment, MachineHealthCheck, MachinePool, MachineSet,
};
use crate::labels;

/// The CRDs of the core kinds, labelled as upstream labels them
/// (`cluster.x-k8s.io/provider: cluster-api`).
pub fn core() -> Vec<CustomResourceDefinition> {
    [
        Cluster::crd(),
        Machine::crd(),
        MachineSet::crd(),
        MachineDeployment::crd(),
        MachineHealthCheck::crd(),
        MachinePool::crd(),
    ]
    .into_iter()
    .map(|crd| as_upstream(with_label(crd, labels::PROVIDER, "cluster-api")))
    .collect()
}

/// Gives a CRD generated from Rust types the shape upstream's generator (controller-gen) gives
/// its CRDs, for the kinds this workspace serves in upstream's groups: every version's schema
/// declares `apiVersion`, `kind` and `metadata` at its root, and no field is `nullable` — an
/// explicit `null` is pruned by the API server, as on upstream's CRDs, instead of being stored.
/// The CRD carries [`labels::INSTALLATION`], by which `capictl init` tells this workspace's CRDs
/// of upstream's groups from another installation's.
pub fn as_upstream(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut crd = with_label(crd, labels::INSTALLATION, labels::THIS_INSTALLATION);
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        strip_nullable(schema);
        let properties = schema.properties.get_or_insert_with(Default::default);
        for (name, type_) in [
            ("apiVersion", "string"),
            ("kind", "string"),
            ("metadata", "object"),
        ] {
            properties
                .entry(name.to_string())
                .or_insert_with(|| JSONSchemaProps {
                    type_: Some(type_.to_string()),
                    ..JSONSchemaProps::default()
                });
        }
    }
    crd
}

/// Makes `spec` optional at the root of every version's schema, for the kinds upstream stores
/// without one (`KubeadmConfig`, `KubeadmConfigTemplate`, `KubeadmControlPlaneTemplate`). The
/// Rust type must read an absent spec as its default (`#[kube(attr = "serde(default)")]`).
pub fn with_optional_spec(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            && let Some(required) = schema.required.as_mut()
        {
            required.retain(|name| name != "spec");
            if required.is_empty() {
                schema.required = None;
            }
        }
    }
    crd
}

/// Reads an absent (or `null`) root `spec` as the spec type's default, for kinds whose schema
/// makes `spec` optional ([`with_optional_spec`]); kube's derived root type otherwise refuses an
/// object without one. The spec type derives `Serialize`/`Deserialize` with
/// `#[serde(remote = "Self")]` (which turns the derived code into inherent functions) and
/// `Default`; this macro supplies the trait impls around them. Present specs read exactly as
/// derived.
///
/// ```
/// #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
/// #[serde(remote = "Self", rename_all = "camelCase")]
/// pub struct WidgetSpec {
///     #[serde(default)]
///     pub size: Option<u32>,
/// }
/// capi_core::absent_spec_is_default!(WidgetSpec);
///
/// #[derive(serde::Deserialize)]
/// struct Widget {
///     spec: WidgetSpec,
/// }
/// let widget: Widget = serde_json::from_str("{}").unwrap();
/// assert_eq!(widget.spec, WidgetSpec::default());
/// let widget: Widget = serde_json::from_str(r#"{"spec": {"size": 3}}"#).unwrap();
/// assert_eq!(widget.spec.size, Some(3));
/// ```
#[macro_export]
macro_rules! absent_spec_is_default {
    ($spec:ty) => {
        impl<'de> ::serde::Deserialize<'de> for $spec {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::std::result::Result<Self, D::Error> {
                struct Present($spec);
                impl<'de> ::serde::Deserialize<'de> for Present {
                    fn deserialize<D: ::serde::Deserializer<'de>>(
                        deserializer: D,
                    ) -> ::std::result::Result<Self, D::Error> {
                        <$spec>::deserialize(deserializer).map(Present)
                    }
                }
                let present: ::std::option::Option<Present> =
                    ::serde::Deserialize::deserialize(deserializer)?;
                Ok(present.map(|p| p.0).unwrap_or_default())
            }
        }
        impl ::serde::Serialize for $spec {
            fn serialize<S: ::serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                <$spec>::serialize(self, serializer)
            }
        }
    };
}

fn strip_nullable(
    schema: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
    };
    schema.nullable = None;
    for property in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        strip_nullable(property);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(items)) => strip_nullable(items),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter_mut().for_each(strip_nullable),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = schema.additional_properties.as_mut() {
        strip_nullable(values);
    }
    for nested in [
        schema.all_of.as_mut(),
        schema.any_of.as_mut(),
        schema.one_of.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        nested.iter_mut().for_each(strip_nullable);
    }
}

/// Adds the contract label `cluster.x-k8s.io/v1beta2: <versions>` to a provider's CRD, so that
/// Cluster API (this SDK's or upstream's) finds which served version implements the contract.
/// `versions` is one version or several joined with `_`, as upstream expects.
pub fn with_contract_version(
    crd: CustomResourceDefinition,
    versions: &str,
) -> CustomResourceDefinition {
    with_label(crd, &labels::contract_label_key(), versions)
}

/// Labels a provider's CRD [`labels::CLUSTERCTL_MOVE_HIERARCHY`] (empty value, as upstream's
/// providers do), so that `clusterctl move` carries every object of the kind, and what each owns,
/// to the target management cluster: for identities, which no ownership from a Cluster reaches.
pub fn moved_with_what_it_owns(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    with_label(crd, labels::CLUSTERCTL_MOVE_HIERARCHY, "")
}

/// Whether `clusterctl move` carries every object of `crd`'s kind with what each owns: the CRD
/// carries [`labels::CLUSTERCTL_MOVE_HIERARCHY`] (clusterctl looks at the key, not the value).
pub fn is_moved_with_what_it_owns(crd: &CustomResourceDefinition) -> bool {
    crd.metadata
        .labels
        .as_ref()
        .is_some_and(|labels| labels.contains_key(labels::CLUSTERCTL_MOVE_HIERARCHY))
}

fn with_label(
    mut crd: CustomResourceDefinition,
    key: &str,
    value: &str,
) -> CustomResourceDefinition {
    crd.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(key.to_string(), value.to_string());
    crd
}

/// A CRD rendered for the checked-in folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedCrd {
    /// The file name: `<plural>.<group>.yaml`.
    pub file_name: String,
    /// The YAML document.
    pub yaml: String,
}

/// Rendering a CRD to YAML failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot render CRD {name} as YAML")]
pub struct RenderError {
    name: String,
    #[source]
    source: serde_saphyr::SerializeError,
}

/// Renders CRDs as YAML documents, one per file, in a stable form.
pub fn render(crds: &[CustomResourceDefinition]) -> Result<Vec<RenderedCrd>, RenderError> {
    crds.iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let body = serde_saphyr::to_string(crd).map_err(|source| RenderError { name: name.clone(), source })?;
            Ok(RenderedCrd {
                file_name: format!("{name}.yaml"),
                yaml: format!("# Generated by `cargo xtask crds` from the Rust types; do not edit.\n---\n{body}"),
            })
        })
        .collect()
}

/// The names of the files in `dir` that are missing or differ from `rendered`: what a freshness
/// test reports and what `cargo xtask crds` rewrites. A provider's test asserts it is empty.
pub fn stale_files(dir: &std::path::Path, rendered: &[RenderedCrd]) -> Vec<String> {
    rendered
        .iter()
        .filter(|crd| {
            std::fs::read_to_string(dir.join(&crd.file_name))
                .ok()
                .as_deref()
                != Some(crd.yaml.as_str())
        })
        .map(|crd| crd.file_name.clone())
        .collect()
}

/// [`render`] of [`core()`].
pub fn render_core() -> Result<Vec<RenderedCrd>, RenderError> {
    render(&core())
}
