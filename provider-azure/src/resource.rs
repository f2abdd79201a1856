//! Making one ARM resource as wanted, and deleting one, without ever waiting on ARM: each call
//! reads the resource, PUTs or DELETEs it when needed, records what ARM accepted, and says
//! whether the resource is ready — the caller moves on, or comes back later.

use capi_core::ActuatorError;
use serde_json::Value;

use crate::api::OperationType;
use crate::arm::models::ProvisioningState;
use crate::arm::{Arm, ArmError, Deletion, ResourceId};
use crate::naming::ClusterNaming;
use crate::operations::Operations;

/// Where a resource stands after one call.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// It exists as wanted (or, not being the cluster's, as found); ARM's body.
    Ready(Value),
    /// ARM is still making or changing it; what is being waited for.
    Waiting(String),
}

impl Step {
    /// Its body, when ready.
    pub fn ready(&self) -> Option<&Value> {
        match self {
            Self::Ready(body) => Some(body),
            Self::Waiting(_) => None,
        }
    }
}

/// What to do with a resource that exists but is not tagged as the cluster's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Foreign {
    /// Use it as found, never change it (a resource group or network the user brought).
    UseAsFound,
    /// Make it as wanted (a resource without tags, such as a subnet of the cluster's own
    /// network, or one whose name only the cluster uses).
    Converge,
}

/// A resource's provisioning state, as ARM answered it.
pub fn provisioning_state(body: &Value) -> ProvisioningState {
    ProvisioningState(
        body["properties"]["provisioningState"]
            .as_str()
            .unwrap_or("Succeeded")
            .to_string(),
    )
}

/// Whether `current` says everything `desired` says (strings compared without case, as ARM
/// does; arrays element by element, in order; properties ARM adds ignored).
pub fn contains(current: &Value, desired: &Value) -> bool {
    match (current, desired) {
        (Value::Object(current), Value::Object(desired)) => desired.iter().all(|(key, want)| {
            current
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .is_some_and(|(_, have)| contains(have, want))
        }),
        (Value::Array(current), Value::Array(desired)) => {
            current.len() == desired.len()
                && current
                    .iter()
                    .zip(desired)
                    .all(|(have, want)| contains(have, want))
        }
        (Value::String(have), Value::String(want)) => have.eq_ignore_ascii_case(want),
        (have, want) => have == want,
    }
}

/// Makes `id` as `desired` says: created when missing, PUT again when it differs or its last
/// operation failed, left alone while an operation on it is under way. `what` names the
/// resource in messages (`virtual network`).
pub async fn ensure(
    arm: &dyn Arm,
    operations: &mut Operations,
    naming: &ClusterNaming,
    foreign: Foreign,
    id: &ResourceId,
    desired: &Value,
    what: &str,
) -> Result<Step, ActuatorError> {
    let waiting = || Step::Waiting(format!("{what} {} is being created or updated", id.name));
    if operations.in_flight(id, OperationType::Put) {
        return Ok(waiting());
    }
    let current = arm
        .get(id)
        .await
        .map_err(|e| e.into_actuator(&format!("reading {what} {}", id.name)))?;
    if let Some(current) = current {
        let state = provisioning_state(&current);
        if state.0.eq_ignore_ascii_case("Deleting") {
            return Ok(Step::Waiting(format!(
                "{what} {} is being deleted",
                id.name
            )));
        }
        if foreign == Foreign::UseAsFound && !naming.owns(&current["tags"]) {
            return Ok(if state.in_progress() {
                waiting()
            } else {
                Step::Ready(current)
            });
        }
        if state.in_progress() {
            return Ok(waiting());
        }
        if state.succeeded() && contains(&current, desired) {
            return Ok(Step::Ready(current));
        }
        if state.failed() {
            tracing::info!(resource = %id, "the last operation on it failed; putting it again");
        }
    }
    let accepted = arm
        .put(id, desired)
        .await
        .map_err(|e| e.into_actuator(&format!("creating or updating {what} {}", id.name)))?;
    let state = provisioning_state(&accepted.body);
    match accepted.operation {
        Some(operation) if !state.succeeded() => {
            operations.record(id, OperationType::Put, &operation);
            Ok(waiting())
        }
        _ if state.in_progress() => Ok(waiting()),
        _ => Ok(Step::Ready(accepted.body)),
    }
}

/// Where a deletion stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Gone (or never there, or not the cluster's to delete).
    Gone,
    /// ARM is deleting it.
    Deleting,
    /// ARM refused to delete it now; why.
    Refused(ArmError),
}

/// Deletes `id` when it exists and, for `owned_only`, carries the cluster's tags.
pub async fn remove(
    arm: &dyn Arm,
    naming: Option<&ClusterNaming>,
    id: &ResourceId,
) -> Result<Removal, ArmError> {
    let Some(current) = arm.get(id).await? else {
        return Ok(Removal::Gone);
    };
    if let Some(naming) = naming
        && !naming.owns(&current["tags"])
    {
        return Ok(Removal::Gone);
    }
    if provisioning_state(&current)
        .0
        .eq_ignore_ascii_case("Deleting")
    {
        return Ok(Removal::Deleting);
    }
    match arm.delete(id).await {
        Ok(Deletion::Gone) => Ok(Removal::Gone),
        Ok(Deletion::Started(_)) => Ok(Removal::Deleting),
        Err(error)
            if error.status.is_some_and(|s| (400..500).contains(&s))
                && error.status != Some(429) =>
        {
            Ok(Removal::Refused(error))
        }
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arm::{Accepted, MockArm, PendingOperation, ResourceType};
    use serde_json::json;

    fn naming() -> ClusterNaming {
        ClusterNaming::new("ns", "demo")
    }

    fn id() -> ResourceId {
        ResourceId::new(
            "sub",
            "demo",
            ResourceType::NetworkSecurityGroup,
            "demo-node-nsg",
        )
    }

    fn ours(extra: Value) -> Value {
        let mut body = json!({"location": "westeurope", "tags": naming().tags(crate::naming::Role::Common, "x", &Default::default())});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        body
    }

    #[test]
    fn containment_ignores_what_arm_adds_and_case() {
        let desired = json!({"location": "westeurope", "properties": {"securityRules": [{"name": "allow_ssh", "properties": {"protocol": "Tcp"}}]}});
        let current = json!({"id": "x", "location": "WestEurope", "properties": {"provisioningState": "Succeeded", "securityRules": [{"id": "r", "name": "allow_ssh", "properties": {"protocol": "TCP", "sourcePortRanges": []}}]}});
        assert!(contains(&current, &desired));
        let fewer = json!({"location": "westeurope", "properties": {"securityRules": []}});
        assert!(!contains(&fewer, &desired));
    }

    #[tokio::test]
    async fn a_missing_resource_is_put_and_its_operation_recorded() {
        let mut arm = MockArm::new();
        arm.expect_get().returning(|_| Ok(None));
        arm.expect_put().times(1).returning(|_, body| {
            let mut body = body.clone();
            body["properties"]["provisioningState"] = json!("Creating");
            Ok(Accepted {
                body,
                operation: Some(PendingOperation {
                    polling_url: "https://arm/op/1".into(),
                    retry_after: None,
                }),
            })
        });
        let mut ops = Operations::default();
        let step = ensure(
            &arm,
            &mut ops,
            &naming(),
            Foreign::Converge,
            &id(),
            &ours(json!({"properties": {}})),
            "security group",
        )
        .await;
        assert!(matches!(step, Ok(Step::Waiting(_))), "{step:?}");
        assert!(ops.in_flight(&id(), OperationType::Put));
    }

    #[tokio::test]
    async fn a_resource_as_wanted_is_not_put_again_and_one_in_progress_is_waited_for() {
        let desired = ours(json!({"properties": {"securityRules": []}}));
        let mut done = desired.clone();
        done["properties"]["provisioningState"] = json!("Succeeded");
        let mut arm = MockArm::new();
        arm.expect_get().returning(move |_| Ok(Some(done.clone())));
        arm.expect_put().never();
        let mut ops = Operations::default();
        let step = ensure(
            &arm,
            &mut ops,
            &naming(),
            Foreign::Converge,
            &id(),
            &desired,
            "security group",
        )
        .await;
        assert!(matches!(step, Ok(Step::Ready(_))));

        let mut creating = desired.clone();
        creating["properties"]["provisioningState"] = json!("Updating");
        let mut arm = MockArm::new();
        arm.expect_get()
            .returning(move |_| Ok(Some(creating.clone())));
        arm.expect_put().never();
        let step = ensure(
            &arm,
            &mut ops,
            &naming(),
            Foreign::Converge,
            &id(),
            &desired,
            "security group",
        )
        .await;
        assert!(matches!(step, Ok(Step::Waiting(_))));
    }

    #[tokio::test]
    async fn a_failed_or_drifted_resource_is_put_again() {
        let desired = ours(json!({"properties": {"securityRules": []}}));
        for found in [
            {
                let mut b = desired.clone();
                b["properties"]["provisioningState"] = json!("Failed");
                b
            },
            {
                let mut b = desired.clone();
                b["tags"]["team"] = json!("x");
                b["location"] = json!("northeurope");
                b
            },
        ] {
            let mut arm = MockArm::new();
            arm.expect_get().returning(move |_| Ok(Some(found.clone())));
            arm.expect_put().times(1).returning(|_, body| {
                Ok(Accepted {
                    body: body.clone(),
                    operation: None,
                })
            });
            let mut ops = Operations::default();
            let step = ensure(
                &arm,
                &mut ops,
                &naming(),
                Foreign::Converge,
                &id(),
                &desired,
                "security group",
            )
            .await;
            assert!(matches!(step, Ok(Step::Ready(_))), "{step:?}");
        }
    }

    #[tokio::test]
    async fn a_foreign_resource_is_used_as_found() {
        let mut arm = MockArm::new();
        arm.expect_get()
            .returning(|_| Ok(Some(json!({"location": "westeurope", "tags": {}}))));
        arm.expect_put().never();
        let mut ops = Operations::default();
        let step = ensure(
            &arm,
            &mut ops,
            &naming(),
            Foreign::UseAsFound,
            &id(),
            &ours(json!({})),
            "resource group",
        )
        .await;
        assert!(matches!(step, Ok(Step::Ready(_))));
    }

    #[tokio::test]
    async fn only_the_clusters_own_resources_are_deleted() {
        let mut arm = MockArm::new();
        arm.expect_get()
            .returning(|_| Ok(Some(json!({"location": "westeurope", "tags": {}}))));
        arm.expect_delete().never();
        assert_eq!(
            remove(&arm, Some(&naming()), &id()).await,
            Ok(Removal::Gone)
        );

        let mut arm = MockArm::new();
        arm.expect_get().returning(|_| Ok(Some(ours(json!({})))));
        arm.expect_delete().returning(|_| {
            Err(ArmError::new(
                Some(400),
                "InUseNetworkSecurityGroupCannotBeDeleted",
                "in use",
            ))
        });
        assert!(matches!(
            remove(&arm, Some(&naming()), &id()).await,
            Ok(Removal::Refused(_))
        ));
    }
}
