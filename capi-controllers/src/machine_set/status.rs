//! A MachineSet's status, computed once per pass from the machines it counted.

use capi_core::api::Machine;
use capi_core::condition;

use super::Scope;
use crate::selector;
use capi_runtime::ReconcileError;
use capi_runtime::pace;
use capi_runtime::plan::Next;
use capi_runtime::write;

/// Replica counts of the active machines, the selector and the observed generation, written
/// (paced, see [`pace`]) before the pass's events are published. Returns `next` as the pacer
/// adjusts it.
pub(super) async fn write(scope: &mut Scope<'_>, next: Next) -> Result<Next, ReconcileError> {
    let set = scope.set;
    let count = |f: &dyn Fn(&Machine) -> bool| {
        i32::try_from(scope.active.iter().filter(|m| f(m)).count()).unwrap_or(i32::MAX)
    };
    let status = &mut scope.status;
    status.replicas = Some(count(&|_| true));
    status.ready_replicas = Some(count(&|m| machine_condition(m, condition::READY)));
    status.available_replicas = Some(count(&|m| machine_condition(m, condition::AVAILABLE)));
    status.up_to_date_replicas = Some(count(&|m| machine_condition(m, condition::UP_TO_DATE)));
    status.selector = Some(selector::to_string(&set.spec.selector));
    status.observed_generation = set.metadata.generation;
    let deps = scope.deps();
    let next = pace::patch_status(
        &deps.pacer,
        &scope.sets,
        set,
        set.status.as_ref(),
        &scope.status,
        next,
    )
    .await?;
    write::publish(&scope.context.recorder, set, &scope.events).await;
    Ok(next)
}

fn machine_condition(machine: &Machine, type_: &str) -> bool {
    machine
        .status
        .as_ref()
        .is_some_and(|s| condition::is_true(&s.conditions, type_))
}
