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
    /// network).
    Converge,
    /// Refuse it: a resource of that name must be the cluster's (a machine's NIC or public
    /// IP), and another's is never taken over.
    Refuse,
}

/// A resource's provisioning state, as ARM answered it: `Succeeded` when a body has none (a
/// resource ARM makes at once), `Unknown` — in progress — when there is no body at all.
pub fn provisioning_state(body: &Value) -> ProvisioningState {
    if body.is_null() {
        return ProvisioningState("Unknown".into());
    }
    ProvisioningState(
        body["properties"]["provisioningState"]
            .as_str()
            .unwrap_or("Succeeded")
            .to_string(),
    )
}

/// Whether `current` says everything `desired` says: strings compared without case, as ARM
/// does; properties ARM (or anyone else) adds ignored; an array of scalars the same set; an
/// array of objects with each wanted element in it, in any order, beside elements others added
/// (rules the cloud provider adds to a security group, pools it adds a NIC to).
pub fn contains(current: &Value, desired: &Value) -> bool {
    match (current, desired) {
        (Value::Object(current), Value::Object(desired)) => desired.iter().all(|(key, want)| {
            current
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .is_some_and(|(_, have)| contains(have, want))
        }),
        (Value::Array(current), Value::Array(desired)) => {
            let objects = desired.iter().any(Value::is_object);
            desired
                .iter()
                .all(|want| current.iter().any(|have| contains(have, want)))
                && (objects
                    || current
                        .iter()
                        .all(|have| desired.iter().any(|want| contains(have, want))))
        }
        (Value::String(have), Value::String(want)) => have.eq_ignore_ascii_case(want),
        (have, want) => have == want,
    }
}

/// The arrays whose elements others add to, which a PUT keeps: a security group's rules (by
/// name) and a NIC configuration's backend pools (by ID).
const SHARED_ARRAYS: [(&str, &str); 2] = [
    ("securityRules", "name"),
    ("loadBalancerBackendAddressPools", "id"),
];

/// `desired`, with the elements of the shared arrays (a security group's rules, a NIC's backend
/// pools) that `current` has and `desired` does not name kept (without their read-only
/// properties): a PUT must not delete what others added.
pub fn keep_shared(desired: &Value, current: &Value) -> Value {
    fn strip(value: &mut Value) {
        if let Value::Object(map) = value {
            map.remove("provisioningState");
            map.remove("etag");
            map.values_mut().for_each(strip);
        }
    }
    match (desired, current) {
        (Value::Object(want), Value::Object(have)) => Value::Object(
            want.iter()
                .map(|(key, value)| {
                    let found = have.iter().find(|(k, _)| k.eq_ignore_ascii_case(key));
                    let merged = match (SHARED_ARRAYS.iter().find(|(a, _)| a == key), value, found)
                    {
                        (
                            Some((_, by)),
                            Value::Array(wanted),
                            Some((_, Value::Array(existing))),
                        ) => {
                            let mut out = wanted.clone();
                            for element in existing {
                                let id = element[*by].as_str().unwrap_or_default();
                                let named = wanted.iter().any(|w| {
                                    w[*by].as_str().is_some_and(|n| n.eq_ignore_ascii_case(id))
                                });
                                if !named && !id.is_empty() {
                                    let mut kept = if *by == "id" {
                                        serde_json::json!({"id": id})
                                    } else {
                                        element.clone()
                                    };
                                    strip(&mut kept);
                                    out.push(kept);
                                }
                            }
                            Value::Array(out)
                        }
                        (_, value, Some((_, existing))) => keep_shared(value, existing),
                        (_, value, None) => value.clone(),
                    };
                    (key.clone(), merged)
                })
                .collect(),
        ),
        (Value::Array(want), Value::Array(have)) if want.len() == have.len() => Value::Array(
            want.iter()
                .zip(have)
                .map(|(w, h)| keep_shared(w, h))
                .collect(),
        ),
        (want, _) => want.clone(),
    }
}

/// Refuses a resource another cluster of the same name (in another namespace) made.
fn not_anothers(
    naming: &ClusterNaming,
    id: &ResourceId,
    what: &str,
    body: &Value,
) -> Result<(), ActuatorError> {
    match naming.claimed_by_other(&body["tags"]) {
        Some(other) => Err(ActuatorError::transient_message(
            "ResourceOfAnotherCluster",
            format!(
                "{what} {} belongs to cluster {other}, not {}/{}; give this cluster its own \
                 spec.resourceGroup (or names)",
                id.name, naming.namespace, naming.name
            ),
        )),
        None => Ok(()),
    }
}

/// One resource as the provider wants it, for [`converge`].
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    /// Its ID.
    pub id: &'a ResourceId,
    /// The body the provider PUTs.
    pub body: &'a Value,
    /// What to do when it exists and is not the cluster's.
    pub foreign: Foreign,
    /// What it is, in messages (`virtual network`).
    pub what: &'a str,
}

impl Wanted<'_> {
    fn waiting(&self) -> Step {
        Step::Waiting(format!(
            "{} {} is being created or updated",
            self.what, self.id.name
        ))
    }
}

/// Makes `id` as `desired` says: created when missing, PUT again when it differs or its last
/// operation failed, left alone while an operation on it is under way. `what` names the
/// resource in messages (`virtual network`). One GET, then [`converge`].
pub async fn ensure(
    arm: &dyn Arm,
    operations: &mut Operations,
    naming: &ClusterNaming,
    foreign: Foreign,
    id: &ResourceId,
    desired: &Value,
    what: &str,
) -> Result<Step, ActuatorError> {
    let wanted = Wanted {
        id,
        body: desired,
        foreign,
        what,
    };
    if operations.in_flight(id, OperationType::Put) {
        return Ok(wanted.waiting());
    }
    let current = arm
        .get(id)
        .await
        .map_err(|e| e.into_actuator(&format!("reading {what} {}", id.name)))?;
    converge(arm, operations, naming, wanted, current.as_ref()).await
}

/// [`ensure`] from `current`, the resource as this reconcile already read it (`None`: it does
/// not exist): never reads it again, and asks ARM nothing when it is as wanted or an operation
/// on it is under way.
pub async fn converge(
    arm: &dyn Arm,
    operations: &mut Operations,
    naming: &ClusterNaming,
    wanted: Wanted<'_>,
    current: Option<&Value>,
) -> Result<Step, ActuatorError> {
    let Wanted {
        id,
        body: desired,
        foreign,
        what,
    } = wanted;
    if operations.in_flight(id, OperationType::Put) {
        return Ok(wanted.waiting());
    }
    let mut body = desired.clone();
    if let Some(current) = current {
        not_anothers(naming, id, what, current)?;
        let state = provisioning_state(current);
        if state.0.eq_ignore_ascii_case("Deleting") {
            return Ok(Step::Waiting(format!(
                "{what} {} is being deleted",
                id.name
            )));
        }
        let ours = naming.owns(&current["tags"]);
        if foreign == Foreign::UseAsFound && !ours {
            return Ok(if state.in_progress() {
                wanted.waiting()
            } else {
                Step::Ready(current.clone())
            });
        }
        if foreign == Foreign::Refuse && !ours {
            return Err(ActuatorError::transient_message(
                "ResourceNotOwned",
                format!(
                    "{what} {} exists and is not cluster {}/{}'s; it is never taken over — \
                     delete or rename it",
                    id.name, naming.namespace, naming.name
                ),
            ));
        }
        if state.in_progress() {
            return Ok(wanted.waiting());
        }
        if state.succeeded() && contains(current, desired) {
            return Ok(Step::Ready(current.clone()));
        }
        if state.failed() {
            tracing::info!(resource = %id, "the last operation on it failed; putting it again");
        }
        body = keep_shared(desired, current);
    }
    let accepted = arm
        .put(id, &body)
        .await
        .map_err(|e| e.into_actuator(&format!("creating or updating {what} {}", id.name)))?;
    let state = provisioning_state(&accepted.body);
    match accepted.operation {
        Some(operation) if !state.succeeded() => {
            operations.record(id, OperationType::Put, &operation);
            Ok(wanted.waiting())
        }
        _ if state.in_progress() => Ok(wanted.waiting()),
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
        // Not the cluster's (perhaps a same-named cluster's in another namespace): left alone.
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
