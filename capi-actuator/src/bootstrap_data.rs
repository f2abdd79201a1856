//! Reading the bootstrap contract's Secret (keys `value` and `format`) that a `Machine` or a
//! `MachinePool` names in `spec.bootstrap.dataSecretName`.

use capi_core::BootstrapData;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

/// What the loop found about the bootstrap data.
#[derive(Debug)]
pub(crate) enum BootstrapLookup {
    /// The owner names no data Secret yet.
    NotSet,
    /// The named Secret does not exist (yet).
    SecretMissing(String),
    /// The Secret exists but cannot be used; the message says why.
    Invalid(String),
    /// Decoded data.
    Ready(BootstrapData),
}

/// Reads and decodes the Secret `name` of `namespace`; [`BootstrapLookup::NotSet`] without a
/// name.
pub(crate) async fn lookup(
    client: &Client,
    namespace: &str,
    name: Option<String>,
) -> Result<BootstrapLookup, kube::Error> {
    let Some(name) = name else {
        return Ok(BootstrapLookup::NotSet);
    };
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&name)
        .await?;
    Ok(match secret {
        None => BootstrapLookup::SecretMissing(name),
        Some(secret) => match BootstrapData::from_secret(&secret) {
            Ok(data) => BootstrapLookup::Ready(data),
            Err(error) => BootstrapLookup::Invalid(error.to_string()),
        },
    })
}
