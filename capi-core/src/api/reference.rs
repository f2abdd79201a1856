//! References between Cluster API objects.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::validation;

/// A reference to an object of a provider, resolved in the referring object's namespace.
///
/// As in upstream `v1beta2`, a reference carries no `apiVersion`: the version served for the
/// referenced kind is looked up from the `cluster.x-k8s.io/<contract>` label of that kind's CRD.
/// All three fields are required and validated by the API server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContractVersionedObjectReference {
    /// The group of the referenced kind, e.g. `infrastructure.cluster.x-k8s.io`.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub api_group: String,
    /// The kind, e.g. `OpenStackMachine`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$")
    )]
    pub kind: String,
    /// The object's name in the referring object's namespace.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

impl ContractVersionedObjectReference {
    /// A reference to `kind`/`name` in `api_group`.
    pub fn new(
        api_group: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            api_group: api_group.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// Whether this reference points at an object of the given kind and group, whatever its name.
    pub fn is_kind(&self, api_group: &str, kind: &str) -> bool {
        self.api_group == api_group && self.kind == kind
    }
}

/// A node of a workload cluster, referenced by name (nodes are cluster-scoped).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineNodeReference {
    /// The node's name.
    #[schemars(length(min = 1, max = 253), pattern(validation::DNS_SUBDOMAIN))]
    pub name: String,
}
