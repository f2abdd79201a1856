//! A provider's release in clusterctl's format, so that `clusterctl init --infrastructure <name>`
//! installs it, `clusterctl generate cluster` renders its templates and `clusterctl upgrade`
//! moves it to a newer release — following upstream's clusterctl provider contract.
//!
//! - [`Components`]: `infrastructure-components.yaml`, the provider's objects: exactly one
//!   Namespace, every namespaced object in it, the CRDs with the contract label, the manager's
//!   ServiceAccount, roles and Deployment (its container named `manager`, hardened), a ClusterRole
//!   aggregated into upstream's core and KubeadmControlPlane managers' roles for the provider's
//!   kinds, and `${<NAME>_…}` variables for what an operator chooses ([`Components::variables`];
//!   the image is a literal canonical reference, which clusterctl's `images:` setting overrides);
//! - [`Metadata`] and [`Version`]: `metadata.yaml`, the release series and the contract each
//!   follows;
//! - [`Release`]: writes `infrastructure-<name>/v<version>/` (components, metadata, cluster
//!   templates) into a clusterctl repository folder, which a clusterctl configuration names with a
//!   `file://` URL;
//! - [`ReleaseArgs`]: the flags of a provider's `release` binary.
//!
//! ```no_run
//! use capi_provider::clusterctl::{Components, Release, Version};
//! # fn demo(
//! #     crds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
//! #     rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>,
//! # ) -> Result<(), capi_provider::clusterctl::ReleaseError> {
//! let version: Version = "0.1.0".parse()?;
//! let mut components = Components::new("my-cloud", crds, rules)?;
//! components.image = format!("registry.example.com/my-cloud-manager:{version}");
//! let release = Release::new(components, version).templates_from("templates".as_ref())?;
//! let folder = release.write("out".as_ref())?;
//! println!("wrote {}", folder.display());
//! # Ok(())
//! # }
//! ```

mod components;
mod metadata;
mod release;

pub use components::{Components, ComponentsError, Variable, image_repository, is_canonical_image};
pub use metadata::{Metadata, ReleaseSeries, Version, VersionError};
pub use release::{Release, ReleaseArgs, ReleaseError};

/// The label clusterctl puts on every object of a provider, and this SDK puts there first:
/// `cluster.x-k8s.io/provider: infrastructure-<name>`.
pub const PROVIDER_LABEL: &str = capi_core::labels::PROVIDER;

/// The label upstream's core manager's aggregated ClusterRole selects.
pub const AGGREGATE_TO_CORE: &str = "cluster.x-k8s.io/aggregate-to-manager";

/// The label upstream's KubeadmControlPlane manager's aggregated ClusterRole selects.
pub const AGGREGATE_TO_CONTROL_PLANE: &str =
    "kubeadm.controlplane.cluster.x-k8s.io/aggregate-to-manager";
