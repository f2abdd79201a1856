//! Long-running ARM operations in flight, recorded in status (CAPZ's `longRunningOperationStates`)
//! so that a reconcile never blocks on one and a restarted manager resumes it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What an operation does to its resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum OperationType {
    /// Create or update.
    Put,
    /// Delete.
    Delete,
}

/// One operation in flight (CAPZ's `Future`: at most one per resource and type). It is cleared
/// when it ends — succeeded, failed, vanished or past its deadline — and the resource is then
/// read again; it never blocks an operation on another resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LongRunningOperation {
    /// What it does.
    #[serde(rename = "type")]
    pub type_: OperationType,
    /// The kind of resource, as CAPZ names its services (`virtualmachine`, `interfaces`,
    /// `loadbalancers`, ...).
    #[schemars(length(min = 1, max = 64))]
    pub service_name: String,
    /// The resource's name.
    #[schemars(length(min = 1, max = 80))]
    pub name: String,
    /// The resource's group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 90))]
    pub resource_group: Option<String>,
    /// Where its status is polled (ARM's `Azure-AsyncOperation` or `Location` URL; no
    /// credential in it).
    #[serde(rename = "pollingURL")]
    #[schemars(length(min = 1, max = 2048))]
    pub polling_url: String,
    /// When it was started.
    pub started_at: Time,
}

/// Operations are keyed by resource and type (a list-map).
pub(crate) fn operations_by_resource(schema: &mut schemars::Schema) {
    capi_core::api::validation::list_map(schema, &["serviceName", "name", "type"]);
}
