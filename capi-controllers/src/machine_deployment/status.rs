//! A MachineDeployment's status, computed once per pass from the sets it read.

use std::sync::Arc;

use capi_core::api::{
    MachineDeployment, MachineDeploymentPhase, MachineDeploymentStatus, MachineSet,
};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};

use super::Scope;
use super::phases::desired;
use crate::selector;
use capi_runtime::ReconcileError;
use capi_runtime::pace;
use capi_runtime::plan::Next;
use capi_runtime::reasons;
use capi_runtime::write;

/// The status summarised with `Available` against `spec.replicas − unavailable`, written (paced,
/// see [`pace`]) before the pass's events are published. Returns `next` as the pacer adjusts it.
pub(super) async fn write(
    scope: &mut Scope<'_>,
    unavailable: i32,
    next: Next,
) -> Result<Next, ReconcileError> {
    let deployment = scope.deployment;
    let desired = desired(deployment);
    let available_floor = desired - unavailable;
    summarise(
        &mut scope.status,
        deployment,
        &scope.sets,
        scope.new_set.as_deref(),
        desired,
        available_floor,
    );
    let next = pace::patch_status(
        &scope.deps().pacer,
        &scope.api,
        deployment,
        deployment.status.as_ref(),
        &scope.status,
        next,
    )
    .await?;
    write::publish(&scope.context.recorder, deployment, &scope.events).await;
    Ok(next)
}

/// The replica counts summed over the sets (up to date: the new set's), the phase, the selector,
/// the observed generation and `Available` (at least `available_floor` machines available).
pub(super) fn summarise(
    status: &mut MachineDeploymentStatus,
    deployment: &MachineDeployment,
    sets: &[Arc<MachineSet>],
    new_set: Option<&MachineSet>,
    desired: i32,
    available_floor: i32,
) {
    let sum =
        |f: &dyn Fn(&MachineSet) -> Option<i32>| sets.iter().filter_map(|s| f(s)).sum::<i32>();
    let replicas = sum(&|s| s.status.as_ref().and_then(|st| st.replicas));
    let available = sum(&|s| s.status.as_ref().and_then(|st| st.available_replicas));
    status.replicas = Some(replicas);
    status.ready_replicas = Some(sum(&|s| s.status.as_ref().and_then(|st| st.ready_replicas)));
    status.available_replicas = Some(available);
    status.up_to_date_replicas = Some(
        new_set
            .and_then(|s| s.status.as_ref())
            .and_then(|s| s.replicas)
            .unwrap_or(0),
    );
    status.phase = Some(if replicas < desired {
        MachineDeploymentPhase::ScalingUp
    } else if replicas > desired {
        MachineDeploymentPhase::ScalingDown
    } else {
        MachineDeploymentPhase::Running
    });
    status.selector = Some(selector::to_string(&deployment.spec.selector));
    status.observed_generation = deployment.metadata.generation;
    let value = if available >= available_floor {
        (
            ConditionStatus::True,
            reasons::MACHINE_AVAILABLE,
            String::new(),
        )
    } else {
        (
            ConditionStatus::False,
            reasons::MACHINE_NOT_READY,
            format!("{available} available machines, at least {available_floor} needed"),
        )
    };
    set_condition(status, deployment, condition::AVAILABLE, value);
}

pub(super) fn set_condition(
    status: &mut MachineDeploymentStatus,
    deployment: &MachineDeployment,
    type_: &str,
    (state, reason, message): (ConditionStatus, &str, String),
) {
    condition::set(
        &mut status.conditions,
        DesiredCondition::new(type_, state, reason)
            .message(message)
            .observed_generation(deployment.metadata.generation),
    );
}
