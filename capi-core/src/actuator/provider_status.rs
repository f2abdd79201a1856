//! A provider's own status fields, reported by its actuator beside the contract's.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The status fields the loop owns in every infrastructure object: a provider's own status may
/// not name them.
pub const CONTRACT_STATUS_FIELDS: &[&str] = &[
    "initialization",
    "addresses",
    "conditions",
    "failureDomain",
    "failureDomains",
    "deprecated",
    "ready",
    "replicas",
    "infrastructureMachineKind",
];

/// A provider's own status fields (for example an OpenStack server's `instanceID` and
/// `instanceState`), which the loop merges into the provider object's `status` beside the
/// contract's fields.
///
/// Built from a typed value ([`ProviderStatus::from_typed`]): each top-level field of its JSON
/// form is one status field. The loop writes them with the same change-only merge patch as the
/// contract's fields — nothing is written while they equal what is stored — so a field the value
/// leaves out keeps its stored value, and a field serialized as `null` is removed.
///
/// ```
/// use capi_core::ProviderStatus;
///
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// #[serde(rename_all = "camelCase")]
/// struct ServerStatus {
///     #[serde(rename = "instanceID")]
///     instance_id: String,
///     instance_state: String,
/// }
///
/// let typed = ServerStatus { instance_id: "4b0f".into(), instance_state: "ACTIVE".into() };
/// let status = ProviderStatus::from_typed(&typed).unwrap();
/// assert_eq!(status.fields()["instanceID"], "4b0f");
/// assert_eq!(status.to_typed::<ServerStatus>().unwrap(), typed);
///
/// // The contract's fields are the loop's.
/// let err = ProviderStatus::from_typed(&serde_json::json!({"addresses": []})).unwrap_err();
/// assert!(err.to_string().contains("addresses"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderStatus(Map<String, Value>);

/// Why a value cannot be a [`ProviderStatus`]: a mistake in the provider's code, never in user
/// input.
#[derive(Debug, thiserror::Error)]
pub enum ProviderStatusError {
    /// The value does not serialize to JSON.
    #[error("the provider status does not serialize: {0}")]
    Serialize(#[from] serde_json::Error),
    /// The value is not a JSON object (a struct or a map).
    #[error("the provider status must serialize to an object, not {0}")]
    NotAnObject(&'static str),
    /// The value names a field the contract owns.
    #[error(
        "the provider status names {0:?}, a field of the infrastructure contract the loop owns"
    )]
    ContractField(String),
}

impl ProviderStatus {
    /// The status fields of `fields`' JSON form (a struct or a map); an error when it is not an
    /// object or names one of [`CONTRACT_STATUS_FIELDS`].
    pub fn from_typed<T: Serialize + ?Sized>(fields: &T) -> Result<Self, ProviderStatusError> {
        let map = match serde_json::to_value(fields)? {
            Value::Object(map) => map,
            Value::Null => return Err(ProviderStatusError::NotAnObject("null")),
            Value::Bool(_) => return Err(ProviderStatusError::NotAnObject("a boolean")),
            Value::Number(_) => return Err(ProviderStatusError::NotAnObject("a number")),
            Value::String(_) => return Err(ProviderStatusError::NotAnObject("a string")),
            Value::Array(_) => return Err(ProviderStatusError::NotAnObject("an array")),
        };
        if let Some(field) = map
            .keys()
            .find(|k| CONTRACT_STATUS_FIELDS.contains(&k.as_str()))
        {
            return Err(ProviderStatusError::ContractField(field.clone()));
        }
        Ok(Self(map))
    }

    /// The fields, by name.
    pub fn fields(&self) -> &Map<String, Value> {
        &self.0
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The fields read back as `T` (for tests of an actuator).
    pub fn to_typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_value(Value::Object(self.0.clone()))
    }

    /// The fields whose value differs from `current` (an object's stored `status`, as JSON): what
    /// a change-only write must send. A `null` field differs only from a stored value.
    pub fn changes_from(&self, current: &Value) -> Map<String, Value> {
        self.0
            .iter()
            .filter(|(name, wanted)| current.get(name.as_str()).unwrap_or(&Value::Null) != *wanted)
            .map(|(name, wanted)| (name.clone(), wanted.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_objects_without_contract_fields_are_provider_status() {
        assert!(matches!(
            ProviderStatus::from_typed(&"x"),
            Err(ProviderStatusError::NotAnObject("a string"))
        ));
        assert!(matches!(
            ProviderStatus::from_typed(&json!({"conditions": []})),
            Err(ProviderStatusError::ContractField(f)) if f == "conditions"
        ));
        assert!(ProviderStatus::from_typed(&json!({})).unwrap().is_empty());
    }

    #[test]
    fn changes_are_the_fields_that_differ_from_what_is_stored() {
        let status =
            ProviderStatus::from_typed(&json!({"a": 1, "b": {"id": "x"}, "gone": null})).unwrap();
        let stored = json!({"a": 1, "b": {"id": "y"}, "initialization": {"provisioned": true}});
        assert_eq!(
            Value::Object(status.changes_from(&stored)),
            json!({"b": {"id": "x"}})
        );
        let stored = json!({"a": 1, "b": {"id": "x"}, "gone": "old"});
        assert_eq!(
            Value::Object(status.changes_from(&stored)),
            json!({"gone": null})
        );
        assert!(
            status
                .changes_from(&json!({"a": 1, "b": {"id": "x"}}))
                .is_empty()
        );
    }
}
