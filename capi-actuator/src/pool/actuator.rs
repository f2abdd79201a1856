//! Every provider's pool actuator in one object-safe form, so that the loop is generic over the
//! pool and cluster kinds only, whatever a provider hands from `exists` to `update`.

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;
use capi_core::{ActuatorError, BootstrapData, Found, PoolActuator, PoolScope, ScaleSetReport};

/// A provider's own record of a scale set ([`PoolActuator::ScaleSet`]), boxed.
pub type AnyScaleSet = Box<dyn Any + Send + Sync>;

/// A pool actuator as the loop stores it: any [`PoolActuator`] behind [`erase`].
pub type DynPoolActuator<P, C> = dyn PoolActuator<P, C, ScaleSet = AnyScaleSet>;

/// `actuator` in the loop's object-safe form.
///
/// Guarantees: every call reaches `actuator` unchanged; what its `exists` found reaches its
/// `update` as the value it returned (boxed and unboxed on the way, never cloned or inspected).
pub fn erase<P, C, A>(actuator: Arc<A>) -> Arc<DynPoolActuator<P, C>>
where
    P: Send + Sync + 'static,
    C: Send + Sync + 'static,
    A: PoolActuator<P, C> + ?Sized + 'static,
{
    Arc::new(Erased(actuator))
}

struct Erased<A: ?Sized>(Arc<A>);

#[async_trait]
impl<P, C, A> PoolActuator<P, C> for Erased<A>
where
    P: Send + Sync + 'static,
    C: Send + Sync + 'static,
    A: PoolActuator<P, C> + ?Sized + 'static,
{
    type ScaleSet = AnyScaleSet;

    async fn exists(
        &self,
        scope: &PoolScope<P, C>,
    ) -> Result<Option<Found<AnyScaleSet, ScaleSetReport>>, ActuatorError> {
        let found = self.0.exists(scope).await?;
        Ok(found.map(|found| found.map(|scale_set| Box::new(scale_set) as AnyScaleSet)))
    }

    async fn create(
        &self,
        scope: &PoolScope<P, C>,
        bootstrap: &BootstrapData,
    ) -> Result<ScaleSetReport, ActuatorError> {
        self.0.create(scope, bootstrap).await
    }

    async fn update(
        &self,
        scope: &PoolScope<P, C>,
        found: Found<AnyScaleSet, ScaleSetReport>,
        bootstrap: Option<BootstrapData>,
    ) -> Result<ScaleSetReport, ActuatorError> {
        let Found { reported, instance } = found;
        match instance.downcast::<A::ScaleSet>() {
            Ok(scale_set) => {
                self.0
                    .update(scope, Found::with(reported, *scale_set), bootstrap)
                    .await
            }
            // Unreachable: only this adapter's `exists` makes what its `update` is handed.
            Err(_) => Err(ActuatorError::transient_message(
                "ScaleSetRecordMismatch",
                "the loop handed update a record its exists did not make",
            )),
        }
    }

    async fn delete(&self, scope: &PoolScope<P, C>) -> Result<(), ActuatorError> {
        self.0.delete(scope).await
    }
}
