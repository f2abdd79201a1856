//! Long-running ARM operations across reconciles: recorded in the object's status
//! (`longRunningOperationStates`) when ARM accepts a PUT or DELETE, read once at the start of
//! the next reconcile — which may be another manager's, after a restart — and cleared when they
//! end. An operation that failed, that ARM no longer knows (`404`), or that outlived
//! [`DEADLINE`] is cleared, and the resource's own state is read again: an operation never
//! blocks the reconcile, never latches, and never holds up an operation on another resource.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{LongRunningOperation, OperationType};
use crate::arm::models::ProvisioningState;
use crate::arm::{Arm, ArmError, PendingOperation, Poll, ResourceId};

/// How long an operation is followed before it is given up on (and the resource read again).
pub const DEADLINE: Duration = Duration::from_secs(30 * 60);

/// How soon a reconcile with operations in flight looks again when ARM does not say.
pub const DEFAULT_RECHECK: Duration = Duration::from_secs(5);

/// The operations of one object, as this reconcile found and leaves them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Operations {
    in_flight: Vec<LongRunningOperation>,
    /// Operations that ended in failure this reconcile, with ARM's reason.
    pub failed: Vec<(LongRunningOperation, ArmError)>,
    /// The shortest wait ARM asked for.
    wait: Option<Duration>,
}

fn key(operation: &LongRunningOperation) -> (OperationType, &str, &str) {
    (
        operation.type_,
        operation.service_name.as_str(),
        operation.name.as_str(),
    )
}

/// Whether `operation` is on resource `id`.
fn on(operation: &LongRunningOperation, id: &ResourceId) -> bool {
    operation.service_name == id.kind.service_name()
        && operation.name.eq_ignore_ascii_case(&id.name)
}

fn age(operation: &LongRunningOperation) -> Duration {
    let started = operation.started_at.0;
    let now = jiff::Timestamp::now();
    Duration::try_from(now.duration_since(started)).unwrap_or_default()
}

impl Operations {
    /// Reads each of `recorded` once: those still under way are kept, the others cleared
    /// (failures kept in [`Self::failed`]). An operation whose status cannot be read now
    /// (ARM unreachable, throttled) is kept for the next reconcile.
    pub async fn resume(arm: &dyn Arm, recorded: &[LongRunningOperation]) -> Self {
        let mut operations = Self::default();
        for operation in recorded {
            if age(operation) > DEADLINE {
                tracing::warn!(
                    service = %operation.service_name,
                    name = %operation.name,
                    "an operation outlived its deadline; reading the resource again"
                );
                continue;
            }
            match arm.poll(&operation.polling_url).await {
                Ok(Poll::InProgress { retry_after }) => {
                    operations.note_wait(retry_after);
                    operations.in_flight.push(operation.clone());
                }
                Ok(Poll::Succeeded | Poll::Vanished) => {}
                Ok(Poll::Failed(error)) => {
                    tracing::warn!(
                        service = %operation.service_name,
                        name = %operation.name,
                        error = %error,
                        "an operation failed; reading the resource again"
                    );
                    operations.failed.push((operation.clone(), error));
                }
                Err(error) => {
                    tracing::debug!(error = %error, "an operation's status could not be read");
                    operations.note_wait(error.retry_after);
                    operations.in_flight.push(operation.clone());
                }
            }
        }
        operations
    }

    fn note_wait(&mut self, wait: Option<Duration>) {
        let wait = wait.unwrap_or(DEFAULT_RECHECK);
        self.wait = Some(self.wait.map_or(wait, |w| w.min(wait)));
    }

    /// Whether an operation of `type_` on `id` is still under way.
    pub fn in_flight(&self, id: &ResourceId, type_: OperationType) -> bool {
        self.in_flight.iter().any(|o| o.type_ == type_ && on(o, id))
    }

    /// Clears the PUT operation on `id` when `state`, the resource's own provisioning state read
    /// after [`Self::resume`] polled it, has ended (succeeded or failed). The resource read later
    /// is the later word: the operation may have ended between the poll and the read, and a
    /// resource reported as made is never reported with its operation still under way.
    pub fn settle(&mut self, id: &ResourceId, state: &ProvisioningState) {
        if !state.in_progress() {
            self.in_flight
                .retain(|o| !(o.type_ == OperationType::Put && on(o, id)));
        }
    }

    /// Records an operation ARM accepted on `id` (replacing one of the same type on it).
    pub fn record(&mut self, id: &ResourceId, type_: OperationType, pending: &PendingOperation) {
        let operation = LongRunningOperation {
            type_,
            service_name: id.kind.service_name().to_string(),
            name: id.name.clone(),
            resource_group: Some(id.resource_group.clone()),
            polling_url: pending.polling_url.clone(),
            started_at: Time(jiff::Timestamp::now()),
        };
        self.in_flight.retain(|o| key(o) != key(&operation));
        self.in_flight.push(operation);
        self.note_wait(pending.retry_after);
    }

    /// Forgets the operations on `id` (it was found done, or gone).
    pub fn clear(&mut self, id: &ResourceId) {
        self.in_flight.retain(|o| !on(o, id));
    }

    /// The operations to record in status.
    pub fn to_record(&self) -> Vec<LongRunningOperation> {
        self.in_flight.clone()
    }

    /// Whether any is under way.
    pub fn any(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// When to look again: as soon as ARM asked, [`DEFAULT_RECHECK`] when it did not.
    pub fn recheck(&self) -> Duration {
        self.wait.unwrap_or(DEFAULT_RECHECK)
    }

    /// A message naming the failed operations, for a condition.
    pub fn failure_message(&self) -> Option<String> {
        (!self.failed.is_empty()).then(|| {
            self.failed
                .iter()
                .map(|(o, e)| format!("{} {} {}: {e}", o.type_.verb(), o.service_name, o.name))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

impl OperationType {
    fn verb(self) -> &'static str {
        match self {
            Self::Put => "creating or updating",
            Self::Delete => "deleting",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arm::{MockArm, ResourceType};

    fn recorded(url: &str, started: jiff::Timestamp) -> LongRunningOperation {
        LongRunningOperation {
            type_: OperationType::Put,
            service_name: "virtualmachine".into(),
            name: "m-0".into(),
            resource_group: Some("rg".into()),
            polling_url: url.into(),
            started_at: Time(started),
        }
    }

    fn vm() -> ResourceId {
        ResourceId::new("sub", "rg", ResourceType::VirtualMachine, "m-0")
    }

    #[tokio::test]
    async fn an_operation_under_way_is_kept_and_the_waits_arm_asks_for_are_honoured() {
        let mut arm = MockArm::new();
        arm.expect_poll().returning(|_| {
            Ok(Poll::InProgress {
                retry_after: Some(Duration::from_secs(2)),
            })
        });
        let ops = Operations::resume(
            &arm,
            &[recorded("https://arm/op/1", jiff::Timestamp::now())],
        )
        .await;
        assert!(ops.in_flight(&vm(), OperationType::Put));
        assert!(!ops.in_flight(&vm(), OperationType::Delete));
        assert_eq!(ops.recheck(), Duration::from_secs(2));
        assert_eq!(ops.to_record().len(), 1);
    }

    #[tokio::test]
    async fn failed_vanished_and_finished_operations_are_cleared() {
        for (answer, failed) in [
            (Poll::Succeeded, false),
            (Poll::Vanished, false),
            (
                Poll::Failed(ArmError::new(Some(200), "InternalError", "boom")),
                true,
            ),
        ] {
            let mut arm = MockArm::new();
            let answer = answer.clone();
            arm.expect_poll().returning(move |_| Ok(answer.clone()));
            let ops = Operations::resume(
                &arm,
                &[recorded("https://arm/op/1", jiff::Timestamp::now())],
            )
            .await;
            assert!(!ops.any());
            assert_eq!(ops.failed.len(), usize::from(failed));
            assert_eq!(ops.failure_message().is_some(), failed);
        }
    }

    #[tokio::test]
    async fn an_operation_past_its_deadline_is_given_up_without_asking() {
        let mut arm = MockArm::new();
        arm.expect_poll().never();
        let old = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(31 * 60);
        let ops = Operations::resume(&arm, &[recorded("https://arm/op/1", old)]).await;
        assert!(!ops.any());
    }

    #[tokio::test]
    async fn an_unreadable_status_keeps_the_operation_for_next_time() {
        let mut arm = MockArm::new();
        arm.expect_poll()
            .returning(|_| Err(ArmError::unanswered("connection reset")));
        let ops = Operations::resume(
            &arm,
            &[recorded("https://arm/op/1", jiff::Timestamp::now())],
        )
        .await;
        assert!(ops.in_flight(&vm(), OperationType::Put));
    }

    #[test]
    fn a_resource_read_as_made_or_failed_ends_its_operation_one_still_in_progress_keeps_it() {
        let pending = PendingOperation {
            polling_url: "https://arm/op/1".into(),
            retry_after: None,
        };
        for (state, kept) in [
            ("Creating", true),
            ("Updating", true),
            ("Deleting", true),
            ("Succeeded", false),
            ("Failed", false),
            ("Canceled", false),
        ] {
            let mut ops = Operations::default();
            ops.record(&vm(), OperationType::Put, &pending);
            ops.settle(&vm(), &ProvisioningState(state.into()));
            assert_eq!(ops.in_flight(&vm(), OperationType::Put), kept, "{state}");
        }
        let mut ops = Operations::default();
        ops.record(&vm(), OperationType::Delete, &pending);
        ops.settle(&vm(), &ProvisioningState("Succeeded".into()));
        assert!(
            ops.in_flight(&vm(), OperationType::Delete),
            "only a PUT is settled"
        );
    }

    #[test]
    fn recording_replaces_the_same_operation_and_clearing_forgets_it() {
        let mut ops = Operations::default();
        let pending = |url: &str| PendingOperation {
            polling_url: url.into(),
            retry_after: None,
        };
        ops.record(&vm(), OperationType::Put, &pending("https://arm/op/1"));
        ops.record(&vm(), OperationType::Put, &pending("https://arm/op/2"));
        assert_eq!(ops.to_record().len(), 1);
        assert_eq!(ops.to_record()[0].polling_url, "https://arm/op/2");
        assert_eq!(ops.to_record()[0].service_name, "virtualmachine");
        ops.clear(&vm());
        assert!(!ops.any());
    }
}
