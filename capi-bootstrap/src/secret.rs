//! The bootstrap-data Secret of the Cluster API bootstrap contract.
//!
//! The contract: a Secret in the machine's namespace, named by the bootstrap config's
//! `status.dataSecretName`, of type `cluster.x-k8s.io/secret`, labelled with the cluster name,
//! owned by the bootstrap config, holding key `value` (the user data) and key `format`
//! (`cloud-config` or `ignition`).

use std::collections::BTreeMap;

use capi_core::BootstrapFormat;
use capi_core::labels;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// The Secret type Cluster API uses for the Secrets it manages.
pub const SECRET_TYPE: &str = "cluster.x-k8s.io/secret";
/// The key holding the bootstrap data.
pub const VALUE_KEY: &str = "value";
/// The key holding the format.
pub const FORMAT_KEY: &str = "format";

/// A bootstrap-data Secret being built.
///
/// The value is secret: `Debug` shows only its length.
#[derive(Clone)]
pub struct BootstrapSecret {
    namespace: String,
    name: String,
    cluster_name: String,
    format: BootstrapFormat,
    value: Vec<u8>,
    owner: Option<OwnerReference>,
}

impl std::fmt::Debug for BootstrapSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapSecret")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("cluster_name", &self.cluster_name)
            .field("format", &self.format)
            .field("len", &self.value.len())
            .finish_non_exhaustive()
    }
}

impl BootstrapSecret {
    /// A Secret `namespace/name` of cluster `cluster_name` holding `value` in `format`.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        cluster_name: impl Into<String>,
        format: BootstrapFormat,
        value: Vec<u8>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            cluster_name: cluster_name.into(),
            format,
            value,
            owner: None,
        }
    }

    /// Makes the Secret owned (as controller) by the bootstrap config, so that it is garbage
    /// collected with it.
    pub fn owned_by(mut self, mut owner: OwnerReference) -> Self {
        owner.controller = Some(true);
        self.owner = Some(owner);
        self
    }

    /// The Secret object.
    pub fn into_secret(self) -> Secret {
        let data = BTreeMap::from([
            (VALUE_KEY.to_string(), ByteString(self.value)),
            (
                FORMAT_KEY.to_string(),
                ByteString(self.format.as_str().as_bytes().to_vec()),
            ),
        ]);
        Secret {
            metadata: ObjectMeta {
                name: Some(self.name),
                namespace: Some(self.namespace),
                labels: Some(BTreeMap::from([(
                    labels::CLUSTER_NAME.to_string(),
                    self.cluster_name,
                )])),
                owner_references: self.owner.map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            type_: Some(SECRET_TYPE.to_string()),
            data: Some(data),
            ..Secret::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_core::BootstrapData;

    #[test]
    fn secret_follows_the_contract_and_round_trips() {
        let owner = OwnerReference {
            api_version: "bootstrap.cluster.x-k8s.io/v1beta2".into(),
            kind: "KubeadmConfig".into(),
            name: "cp-0".into(),
            uid: "1234".into(),
            ..OwnerReference::default()
        };
        let secret = BootstrapSecret::new(
            "ns",
            "cp-0",
            "demo",
            BootstrapFormat::Ignition,
            b"{\"ignition\":{}}".to_vec(),
        )
        .owned_by(owner)
        .into_secret();
        assert_eq!(secret.type_.as_deref(), Some(SECRET_TYPE));
        assert_eq!(labels::cluster_name(&secret.metadata), Some("demo"));
        let owners = secret.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].controller, Some(true));
        let data = BootstrapData::from_secret(&secret).unwrap();
        assert_eq!(data.format(), BootstrapFormat::Ignition);
        assert_eq!(data.expose(), b"{\"ignition\":{}}");
    }

    #[test]
    fn debug_hides_the_value() {
        let secret = BootstrapSecret::new(
            "ns",
            "n",
            "c",
            BootstrapFormat::CloudConfig,
            b"token: abc.def".to_vec(),
        );
        assert!(!format!("{secret:?}").contains("abc.def"));
    }
}
