//! A MachinePool's status, computed once per pass from what the pass found: initialization,
//! replica counts, node references, upstream's phase and the v1beta2 conditions.

use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{
    Deprecated, Machine, MachinePool, MachinePoolInitializationStatus, MachinePoolPhase,
    MachinePoolStatus, MachinePoolV1Beta1Status,
};
use capi_core::condition::{self, ConditionStatus, DesiredCondition};
use capi_core::labels;

use super::Scope;
use super::machines::Members;
use super::nodes::Nodes;
use crate::machine::status::Step;
use capi_runtime::ReconcileError;
use capi_runtime::pace;
use capi_runtime::plan::Next;
use capi_runtime::reasons;
use capi_runtime::write;

/// How often a pool whose instances have not all become ready nodes looks again, beside the
/// node watch (upstream's interval).
const UNSETTLED_RECHECK: Duration = Duration::from_secs(30);

/// What one pass over a (not deleting) pool found.
pub(super) struct Facts {
    pub(super) bootstrap: Step,
    pub(super) infrastructure: Step,
    pub(super) infrastructure_provisioned: bool,
    /// The infrastructure pool's `status.replicas`.
    pub(super) replicas: Option<i32>,
    /// The pool's Machines, when its infrastructure makes them.
    pub(super) members: Members,
    /// Its nodes, when the workload cluster could be read.
    pub(super) nodes: Option<Nodes>,
}

/// Computes the status into `scope.status` and writes it (paced) with the pass's events; returns
/// when to look again.
pub(super) async fn write(scope: &mut Scope<'_>, facts: Facts) -> Result<Next, ReconcileError> {
    let pool = scope.pool;
    let settled = compute(pool, &facts, &mut scope.status);
    let mut next = Next::AwaitChange;
    match &facts.nodes {
        None => next = Next::Requeue(scope.deps().settings.poll),
        Some(nodes) => {
            if let Some(recheck) = nodes.recheck {
                next = Next::Requeue(recheck);
            }
            if !settled {
                next = shorter(next, UNSETTLED_RECHECK);
            }
        }
    }
    let deps = scope.deps();
    let next = pace::patch_status(
        &deps.pacer,
        &scope.pools,
        pool,
        pool.status.as_ref(),
        &scope.status,
        next,
    )
    .await?;
    write::publish(&scope.context.recorder, pool, &scope.events).await;
    Ok(next)
}

fn shorter(next: Next, after: Duration) -> Next {
    match next {
        Next::Requeue(current) if current <= after => Next::Requeue(current),
        _ => Next::Requeue(after),
    }
}

fn count(machines: &[Arc<Machine>], type_: &str) -> i32 {
    let n = machines
        .iter()
        .filter(|m| {
            m.status
                .as_ref()
                .is_some_and(|s| condition::is_true(&s.conditions, type_))
        })
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The status the facts call for, into `status`; returns whether the pool is settled (every
/// instance a ready node).
fn compute(pool: &MachinePool, facts: &Facts, status: &mut MachinePoolStatus) -> bool {
    let generation = pool.metadata.generation;
    let desired = pool.desired_replicas();
    status.initialization = Some(MachinePoolInitializationStatus {
        infrastructure_provisioned: Some(facts.infrastructure_provisioned),
        bootstrap_data_secret_created: Some(facts.bootstrap.status == ConditionStatus::True),
    });
    if facts.replicas.is_some() {
        status.replicas = facts.replicas;
    }
    let replicas = status.replicas.unwrap_or(0);
    if let Some(nodes) = &facts.nodes {
        status.node_refs = nodes.refs.clone();
        let v1beta1 = status
            .deprecated
            .get_or_insert_with(Deprecated::default)
            .v1beta1
            .get_or_insert_with(MachinePoolV1Beta1Status::default);
        v1beta1.ready_replicas = Some(nodes.ready);
        v1beta1.available_replicas = Some(nodes.available);
        v1beta1.unavailable_replicas = Some((replicas - nodes.available).max(0));
    }
    let node_ready = facts.nodes.as_ref().map(|n| (n.ready, n.available));
    match &facts.members {
        Members::Machines(machines) => {
            status.ready_replicas = Some(count(machines, condition::READY));
            status.available_replicas = Some(count(machines, condition::AVAILABLE));
            // A Machine being deleted is not up to date (upstream marks it `UpToDate=False`).
            let staying: Vec<Arc<Machine>> = machines
                .iter()
                .filter(|m| m.metadata.deletion_timestamp.is_none())
                .cloned()
                .collect();
            status.up_to_date_replicas = Some(count(&staying, condition::UP_TO_DATE));
        }
        Members::Unknown => {}
        Members::None => {
            if let Some((ready, available)) = node_ready {
                status.ready_replicas = Some(ready);
                status.available_replicas = Some(available);
            }
            // Without machines per instance nothing tells an instance's model: as upstream,
            // the pool's instances count as up to date.
            status.up_to_date_replicas = Some(desired);
        }
    }
    let available = status.available_replicas.unwrap_or(0);
    // Ready nodes as this pass counted them, or as the last pass did while the workload cluster
    // cannot be read (a phase must not flap with a cache that fills after a restart).
    let ready = node_ready.map(|(ready, _)| ready).unwrap_or_else(|| {
        status
            .deprecated
            .as_ref()
            .and_then(|d| d.v1beta1.as_ref())
            .and_then(|v| v.ready_replicas)
            .unwrap_or(0)
    });
    let set = |status: &mut MachinePoolStatus, type_, value, reason, message: String| {
        condition::set(
            &mut status.conditions,
            DesiredCondition::new(type_, value, reason)
                .message(message)
                .observed_generation(generation),
        );
    };
    use ConditionStatus::{False, True};
    set(
        status,
        condition::PAUSED,
        False,
        reasons::NOT_PAUSED,
        String::new(),
    );
    set(
        status,
        condition::DELETING,
        False,
        reasons::NOT_DELETING,
        String::new(),
    );
    for (type_, step) in [
        (condition::BOOTSTRAP_CONFIG_READY, &facts.bootstrap),
        (condition::INFRASTRUCTURE_READY, &facts.infrastructure),
    ] {
        set(
            status,
            type_,
            step.status,
            step.reason,
            step.message.clone(),
        );
    }
    let externally = labels::replicas_managed_externally(&pool.metadata);
    let (up, up_reason, up_message) = if replicas < desired {
        (
            True,
            reasons::SCALING_UP,
            format!("scaling up from {replicas} to {desired} replicas"),
        )
    } else {
        (False, "NotScalingUp", String::new())
    };
    set(status, condition::SCALING_UP, up, up_reason, up_message);
    let (down, down_reason, down_message) = if replicas > desired {
        (
            True,
            reasons::SCALING_DOWN,
            format!("scaling down from {replicas} to {desired} replicas"),
        )
    } else {
        (False, "NotScalingDown", String::new())
    };
    set(
        status,
        condition::SCALING_DOWN,
        down,
        down_reason,
        down_message,
    );
    let (avail, avail_reason, avail_message) =
        if facts.infrastructure_provisioned && available >= desired {
            (True, reasons::MACHINE_AVAILABLE, String::new())
        } else if !facts.infrastructure_provisioned {
            (
                False,
                reasons::WAITING_FOR_INFRASTRUCTURE,
                "the infrastructure pool is not provisioned".to_string(),
            )
        } else {
            (
                False,
                "NotAvailable",
                format!("{available} of {desired} replicas available"),
            )
        };
    set(
        status,
        condition::AVAILABLE,
        avail,
        avail_reason,
        avail_message,
    );
    status.phase = Some(phase(pool, facts, ready, externally));
    status.observed_generation = generation;
    let refs = status.node_refs.len();
    replicas == ready && usize::try_from(ready).is_ok_and(|r| r == refs)
}

/// Upstream's phase: the last of its rules that holds wins.
fn phase(pool: &MachinePool, facts: &Facts, ready: i32, externally: bool) -> MachinePoolPhase {
    let desired = pool.spec.replicas;
    let provisioned = facts.infrastructure_provisioned;
    let mut phase = pool.phase().unwrap_or(MachinePoolPhase::Pending);
    if facts.bootstrap.status == ConditionStatus::True && !provisioned {
        phase = MachinePoolPhase::Provisioning;
    }
    if facts.nodes.as_ref().is_some_and(|n| !n.refs.is_empty()) {
        phase = MachinePoolPhase::Provisioned;
    }
    if let (true, Some(desired)) = (provisioned, desired) {
        if desired == ready {
            phase = MachinePoolPhase::Running;
        } else if externally {
            phase = MachinePoolPhase::Scaling;
        } else if desired > ready {
            phase = MachinePoolPhase::ScalingUp;
        } else {
            phase = MachinePoolPhase::ScalingDown;
        }
    }
    phase
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use serde_json::json;

    fn pool(replicas: i32) -> MachinePool {
        serde_json::from_value(json!({
            "metadata": {"name": "workers", "namespace": "ns", "generation": 4},
            "spec": {"clusterName": "c", "replicas": replicas, "template": {"spec": {
                "clusterName": "c", "bootstrap": {"dataSecretName": "s"},
                "infrastructureRef": {"apiGroup": "infrastructure.capi-rs.dev",
                    "kind": "InMemoryMachinePool", "name": "workers"}}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn nodes(ready: i32, available: i32) -> Nodes {
        Nodes {
            refs: (0..ready)
                .map(|i| ObjectReference {
                    name: Some(format!("n-{i}")),
                    ..ObjectReference::default()
                })
                .collect(),
            ready,
            available,
            recheck: None,
        }
    }

    fn facts(replicas: i32, nodes: Option<Nodes>) -> Facts {
        Facts {
            bootstrap: Step::done(reasons::BOOTSTRAP_DATA_READY),
            infrastructure: Step::done(reasons::INFRASTRUCTURE_READY),
            infrastructure_provisioned: true,
            replicas: Some(replicas),
            members: Members::None,
            nodes,
        }
    }

    /// A Machine whose `Ready`, `Available` and `UpToDate` are all `ready`, being deleted or not.
    fn machine_with(ready: bool, deleting: bool) -> Arc<Machine> {
        let value = if ready {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        let mut status = capi_core::api::MachineStatus::default();
        for type_ in [
            condition::READY,
            condition::AVAILABLE,
            condition::UP_TO_DATE,
        ] {
            condition::set(
                &mut status.conditions,
                DesiredCondition::new(type_, value, "R"),
            );
        }
        let mut machine = Machine {
            status: Some(status),
            ..Machine::default()
        };
        if deleting {
            machine.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
            );
        }
        Arc::new(machine)
    }

    fn condition_of(status: &MachinePoolStatus, type_: &str) -> Option<ConditionStatus> {
        condition::status(&status.conditions, type_)
    }

    #[test]
    fn a_pool_with_every_instance_a_ready_node_is_running_and_available() {
        let pool = pool(3);
        let mut status = MachinePoolStatus::default();
        let settled = compute(&pool, &facts(3, Some(nodes(3, 3))), &mut status);
        assert!(settled);
        assert_eq!(status.phase, Some(MachinePoolPhase::Running));
        assert_eq!(status.replicas, Some(3));
        assert_eq!(status.ready_replicas, Some(3));
        assert_eq!(status.available_replicas, Some(3));
        assert_eq!(status.node_refs.len(), 3);
        assert_eq!(status.observed_generation, Some(4));
        assert_eq!(
            condition_of(&status, condition::AVAILABLE),
            Some(ConditionStatus::True)
        );
        assert_eq!(
            condition_of(&status, condition::SCALING_UP),
            Some(ConditionStatus::False)
        );
        assert_eq!(
            condition_of(&status, condition::PAUSED),
            Some(ConditionStatus::False)
        );
        let v1beta1 = status
            .deprecated
            .and_then(|d| d.v1beta1)
            .unwrap_or_default();
        assert_eq!(v1beta1.unavailable_replicas, Some(0));
    }

    #[test]
    fn scaling_is_reported_by_instances_and_phases_by_ready_nodes() {
        let mut status = MachinePoolStatus::default();
        let settled = compute(&pool(5), &facts(2, Some(nodes(2, 2))), &mut status);
        assert!(settled, "every instance there is a ready node");
        assert_eq!(status.phase, Some(MachinePoolPhase::ScalingUp));
        assert_eq!(
            condition_of(&status, condition::SCALING_UP),
            Some(ConditionStatus::True)
        );
        assert_eq!(
            condition_of(&status, condition::AVAILABLE),
            Some(ConditionStatus::False)
        );

        let mut status = MachinePoolStatus::default();
        let settled = compute(&pool(2), &facts(5, Some(nodes(4, 4))), &mut status);
        assert!(!settled, "an instance without a ready node: look again");
        assert_eq!(status.phase, Some(MachinePoolPhase::ScalingDown));
        assert_eq!(
            condition_of(&status, condition::SCALING_DOWN),
            Some(ConditionStatus::True)
        );

        let mut autoscaled = pool(2);
        autoscaled.metadata.annotations = Some(
            [(
                labels::REPLICAS_MANAGED_BY.to_string(),
                "cluster-autoscaler".to_string(),
            )]
            .into(),
        );
        let mut status = MachinePoolStatus::default();
        compute(&autoscaled, &facts(5, Some(nodes(4, 4))), &mut status);
        assert_eq!(status.phase, Some(MachinePoolPhase::Scaling));
    }

    #[test]
    fn machines_of_the_pool_count_its_replicas_when_the_infrastructure_makes_them() {
        let machine = |ready: bool| machine_with(ready, false);
        let mut with_members = facts(3, Some(nodes(3, 3)));
        with_members.members =
            Members::Machines(vec![machine(true), machine(true), machine(false)]);
        let mut status = MachinePoolStatus::default();
        compute(&pool(3), &with_members, &mut status);
        assert_eq!(status.ready_replicas, Some(2));
        assert_eq!(status.available_replicas, Some(2));
        assert_eq!(status.up_to_date_replicas, Some(2));
        assert_eq!(
            condition_of(&status, condition::AVAILABLE),
            Some(ConditionStatus::False)
        );
    }

    #[test]
    fn an_unreadable_workload_cluster_keeps_the_node_references_it_had() {
        let mut status = MachinePoolStatus {
            node_refs: nodes(2, 2).refs,
            ..MachinePoolStatus::default()
        };
        compute(&pool(2), &facts(2, None), &mut status);
        assert_eq!(status.node_refs.len(), 2);
        assert_eq!(status.replicas, Some(2));
    }

    #[test]
    fn a_running_pool_whose_nodes_cannot_be_read_stays_running() {
        let pool = pool(2);
        let mut status = MachinePoolStatus::default();
        compute(&pool, &facts(2, Some(nodes(2, 2))), &mut status);
        assert_eq!(status.phase, Some(MachinePoolPhase::Running));
        let mut written = pool.clone();
        written.status = Some(status.clone());
        compute(&written, &facts(2, None), &mut status);
        assert_eq!(
            status.phase,
            Some(MachinePoolPhase::Running),
            "the ready nodes the last pass counted stand while the cache fills"
        );
    }

    #[test]
    fn a_machine_being_deleted_is_not_up_to_date_and_unknown_machines_keep_the_counts() {
        let machine = |deleting: bool| machine_with(true, deleting);
        let mut with_members = facts(2, Some(nodes(2, 2)));
        with_members.members = Members::Machines(vec![machine(false), machine(true)]);
        let mut status = MachinePoolStatus::default();
        compute(&pool(2), &with_members, &mut status);
        assert_eq!(status.up_to_date_replicas, Some(1));
        let mut unknown = facts(2, Some(nodes(2, 2)));
        unknown.members = Members::Unknown;
        compute(&pool(2), &unknown, &mut status);
        assert_eq!(
            status.up_to_date_replicas,
            Some(1),
            "kept while the cache fills"
        );
    }

    #[test]
    fn without_infrastructure_the_pool_is_provisioning_and_not_available() {
        let mut waiting = facts(0, None);
        waiting.infrastructure_provisioned = false;
        waiting.infrastructure = Step::waiting(reasons::WAITING_FOR_INFRASTRUCTURE, "not yet");
        let mut status = MachinePoolStatus::default();
        compute(&pool(1), &waiting, &mut status);
        assert_eq!(status.phase, Some(MachinePoolPhase::Provisioning));
        assert_eq!(
            condition_of(&status, condition::INFRASTRUCTURE_READY),
            Some(ConditionStatus::False)
        );
        assert_eq!(
            status
                .initialization
                .and_then(|i| i.infrastructure_provisioned),
            Some(false)
        );
    }
}
