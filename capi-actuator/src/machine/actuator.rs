//! Every provider's machine actuator in one object-safe form, so that the loop is generic over
//! the machine and cluster kinds only, whatever a provider hands from `exists` to `update`.

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;
use capi_core::{
    Actuator, ActuatorError, BootstrapData, Found, MachineInstance, MachineScope, UpdateOutcome,
};

/// A provider's own record of an instance ([`Actuator::Instance`]), boxed.
pub type AnyInstance = Box<dyn Any + Send + Sync>;

/// A machine actuator as the loop stores it: any [`Actuator`] behind [`erase`].
pub type DynActuator<M, C> = dyn Actuator<M, C, Instance = AnyInstance>;

/// `actuator` in the loop's object-safe form.
///
/// Guarantees: every call reaches `actuator` unchanged; what its `exists` found reaches its
/// `update` as the value it returned (boxed and unboxed on the way, never cloned or inspected).
pub fn erase<M, C, A>(actuator: Arc<A>) -> Arc<DynActuator<M, C>>
where
    M: Send + Sync + 'static,
    C: Send + Sync + 'static,
    A: Actuator<M, C> + ?Sized + 'static,
{
    Arc::new(Erased(actuator))
}

struct Erased<A: ?Sized>(Arc<A>);

#[async_trait]
impl<M, C, A> Actuator<M, C> for Erased<A>
where
    M: Send + Sync + 'static,
    C: Send + Sync + 'static,
    A: Actuator<M, C> + ?Sized + 'static,
{
    type Instance = AnyInstance;

    async fn exists(
        &self,
        scope: &MachineScope<M, C>,
    ) -> Result<Option<Found<AnyInstance>>, ActuatorError> {
        let found = self.0.exists(scope).await?;
        Ok(found.map(|found| found.map(|instance| Box::new(instance) as AnyInstance)))
    }

    async fn create(
        &self,
        scope: &MachineScope<M, C>,
        bootstrap: &BootstrapData,
    ) -> Result<MachineInstance, ActuatorError> {
        self.0.create(scope, bootstrap).await
    }

    async fn update(
        &self,
        scope: &MachineScope<M, C>,
        found: Found<AnyInstance>,
    ) -> Result<UpdateOutcome, ActuatorError> {
        let Found { reported, instance } = found;
        match instance.downcast::<A::Instance>() {
            Ok(instance) => self.0.update(scope, Found::with(reported, *instance)).await,
            // Unreachable: only this adapter's `exists` makes what its `update` is handed.
            Err(_) => Err(ActuatorError::transient_message(
                "InstanceRecordMismatch",
                "the loop handed update a record its exists did not make",
            )),
        }
    }

    async fn delete(&self, scope: &MachineScope<M, C>) -> Result<(), ActuatorError> {
        self.0.delete(scope).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_core::api::{Cluster, Machine};
    use capi_core::{IdempotencyKey, InstanceState};

    /// An actuator whose `exists` finds a numbered record and whose `update` reports it back.
    struct Numbered;

    #[async_trait]
    impl Actuator<(), ()> for Numbered {
        type Instance = u32;
        async fn exists(
            &self,
            _: &MachineScope<(), ()>,
        ) -> Result<Option<Found<u32>>, ActuatorError> {
            let reported = MachineInstance::new("fake:///1", vec![], InstanceState::Running);
            Ok(Some(Found::with(reported, 41)))
        }
        async fn create(
            &self,
            _: &MachineScope<(), ()>,
            _: &BootstrapData,
        ) -> Result<MachineInstance, ActuatorError> {
            Err(ActuatorError::transient_message("NotHere", "not called"))
        }
        async fn update(
            &self,
            _: &MachineScope<(), ()>,
            found: Found<u32>,
        ) -> Result<UpdateOutcome, ActuatorError> {
            let mut instance = found.reported;
            instance.provider_id = format!("fake:///{}", found.instance + 1);
            Ok(UpdateOutcome {
                instance,
                immutable_changes: Vec::new(),
            })
        }
        async fn delete(&self, _: &MachineScope<(), ()>) -> Result<(), ActuatorError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn what_exists_found_reaches_update_as_it_was() {
        let mut machine = Machine::default();
        machine.metadata.uid = Some("u".into());
        let scope = MachineScope {
            cluster: Arc::new(Cluster::default()),
            infra_cluster: Some(Arc::new(())),
            idempotency_key: IdempotencyKey::for_machine(&machine)
                .unwrap_or_else(|e| panic!("{e}")),
            machine: Arc::new(machine),
            infra_machine: Arc::new(()),
        };
        let erased = erase(Arc::new(Numbered));
        let found = erased
            .exists(&scope)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("found"));
        let outcome = erased
            .update(&scope, found)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(outcome.instance.provider_id, "fake:///42");
    }
}
