//! Machine-level decisions of the reconcile loop.

use capi_core::{Actuator, ActuatorError, MachineInstance, MachineScope, UpdateOutcome};

/// What [`ensure_instance`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ensured {
    /// No instance existed; one was created.
    Created(MachineInstance),
    /// An instance existed and was updated.
    Updated(UpdateOutcome),
}

impl Ensured {
    /// The instance after the call.
    pub fn instance(&self) -> &MachineInstance {
        match self {
            Self::Created(instance) => instance,
            Self::Updated(outcome) => &outcome.instance,
        }
    }
}

/// Makes sure the machine's instance exists: `exists` first, then `update` if it found one, else
/// `create`.
///
/// Guarantees: `create` is called at most once per call and only after `exists` returned `None`;
/// any error from `exists` stops the call before anything is created (an unknown state is never
/// answered with a create).
pub async fn ensure_instance<M>(
    actuator: &dyn Actuator<M>,
    scope: &MachineScope<M>,
) -> Result<Ensured, ActuatorError>
where
    M: Send + Sync + 'static,
{
    match actuator.exists(scope).await? {
        Some(instance) => {
            let outcome = actuator.update(scope, &instance).await?;
            tracing::debug!(provider_id = %outcome.instance.provider_id, "instance exists; updated");
            Ok(Ensured::Updated(outcome))
        }
        None => {
            let instance = actuator.create(scope).await?;
            tracing::debug!(provider_id = %instance.provider_id, "instance created");
            Ok(Ensured::Created(instance))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use capi_core::api::{Cluster, Machine};
    use capi_core::{IdempotencyKey, InstanceState, MockActuator};

    use super::*;

    fn scope() -> MachineScope<()> {
        let mut machine = Machine::default();
        machine.metadata.uid = Some("3f1d".into());
        MachineScope {
            cluster: Arc::new(Cluster::default()),
            idempotency_key: IdempotencyKey::for_machine(&machine).unwrap(),
            machine: Arc::new(machine),
            infra_machine: Arc::new(()),
            bootstrap_data: None,
        }
    }

    fn instance(id: &str) -> MachineInstance {
        MachineInstance {
            provider_id: id.into(),
            addresses: vec![],
            state: InstanceState::Running,
        }
    }

    #[tokio::test]
    async fn creates_when_nothing_exists() {
        let mut actuator = MockActuator::<()>::new();
        actuator.expect_exists().times(1).returning(|_| Ok(None));
        actuator.expect_update().never();
        actuator
            .expect_create()
            .times(1)
            .returning(|_| Ok(instance("fake:///1")));
        let ensured = ensure_instance(&actuator, &scope()).await.unwrap();
        assert_eq!(ensured, Ensured::Created(instance("fake:///1")));
    }

    #[tokio::test]
    async fn updates_and_never_creates_when_found() {
        let mut actuator = MockActuator::<()>::new();
        actuator
            .expect_exists()
            .times(1)
            .returning(|_| Ok(Some(instance("fake:///1"))));
        actuator.expect_create().never();
        actuator.expect_update().times(1).returning(|_, found| {
            Ok(UpdateOutcome {
                instance: found.clone(),
                immutable_changes: vec![],
            })
        });
        let ensured = ensure_instance(&actuator, &scope()).await.unwrap();
        assert_eq!(ensured.instance().provider_id, "fake:///1");
    }

    #[tokio::test]
    async fn an_error_from_exists_never_leads_to_create() {
        let mut actuator = MockActuator::<()>::new();
        actuator
            .expect_exists()
            .times(1)
            .returning(|_| Err(ActuatorError::transient_message("CloudAPIError", "503")));
        actuator.expect_create().never();
        let err = ensure_instance(&actuator, &scope()).await.unwrap_err();
        assert_eq!(err.reason(), "CloudAPIError");
    }

    #[tokio::test]
    async fn requeue_from_create_is_passed_through() {
        let mut actuator = MockActuator::<()>::new();
        actuator.expect_exists().returning(|_| Ok(None));
        actuator.expect_create().times(1).returning(|_| {
            Err(ActuatorError::requeue_after(
                Duration::from_secs(3),
                "WaitingForPort",
                "port busy",
            ))
        });
        let err = ensure_instance(&actuator, &scope()).await.unwrap_err();
        assert_eq!(err.requeue_delay(), Some(Duration::from_secs(3)));
    }
}
