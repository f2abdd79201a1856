//! A MachineHealthCheck's status, computed once per pass from its targets and their verdicts.

use kube::ResourceExt;

use super::Scope;
use super::phases::Allowance;
use capi_runtime::write;

/// The counts, the remediations allowed, the targets and the observed generation, written (if
/// changed) over the conditions the phases set.
pub(super) async fn write(scope: &mut Scope<'_>, allowance: &Allowance) -> Result<(), kube::Error> {
    let check = scope.check;
    let status = &mut scope.status;
    status.expected_machines = Some(allowance.total);
    status.current_healthy = Some(allowance.healthy);
    status.remediations_allowed = Some(allowance.remaining);
    status.targets = scope.targets.iter().map(|m| m.name_any()).collect();
    status.observed_generation = check.metadata.generation;
    write::patch_status_if_changed(
        &scope.api,
        &check.name_any(),
        check.status.as_ref(),
        &scope.status,
    )
    .await
}
