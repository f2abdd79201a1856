//! One pass over a KubeadmControlPlane: a [`Scope`] holding what the pass read and the status it
//! computes, and [`reconcile_once`], which runs the phases in order.

use std::ops::ControlFlow::{Break, Continue};

use capi_core::api::Machine;
use capi_runtime::plan::Next;
use capi_runtime::{Context, ReconcileError};
use kube::{Api, ResourceExt};

use super::membership::{self, EtcdView};
use super::report::Report;
use super::{ControlPlaneController, deletion, machines, phases, step};
use crate::api::KubeadmControlPlane;
use crate::remediation::RemediationData;
use crate::scale::MachineFacts;

/// What one pass over a control plane works with: what it read, and what it found for the status,
/// computed and written once.
pub(super) struct Scope<'a> {
    pub(super) kcp: &'a KubeadmControlPlane,
    pub(super) context: &'a Context<ControlPlaneController>,
    pub(super) namespace: String,
    /// The owning Cluster's name.
    pub(super) cluster_name: String,
    /// The label selector of the control plane's machines and their KubeadmConfigs.
    pub(super) selector: String,
    pub(super) kcps: Api<KubeadmControlPlane>,
    pub(super) machines: Api<Machine>,
    /// The machines the control plane controls, by name (none until read).
    pub(super) owned: Vec<Machine>,
    /// What the pass found, for the status and events written at its end.
    pub(super) report: Report,
    /// Whether the control plane was initialised (a node registered now, or recorded before).
    pub(super) initialized: bool,
    /// etcd as this pass saw it; `None` before the control plane is initialised.
    pub(super) etcd: Option<EtcdView>,
    /// Per machine, in the machines' order: what the rollout and remediation decide from.
    pub(super) facts: Vec<MachineFacts>,
    /// What the pass waits for, recorded on the status by the step it takes.
    pub(super) waiting: Vec<String>,
    /// The remediation in progress: the next machine created replaces its machine.
    pub(super) remediation_in_progress: Option<RemediationData>,
    /// The pass created a machine: the status it could compute does not count it.
    pub(super) created: bool,
}

impl<'a> Scope<'a> {
    fn new(
        kcp: &'a KubeadmControlPlane,
        context: &'a Context<ControlPlaneController>,
        cluster_name: String,
    ) -> Self {
        let namespace = kcp.namespace().unwrap_or_default();
        let selector = machines::selector(kcp, &cluster_name);
        Self {
            kcp,
            context,
            kcps: Api::namespaced(context.client.clone(), &namespace),
            machines: Api::namespaced(context.client.clone(), &namespace),
            namespace,
            cluster_name,
            report: Report::new(&selector),
            selector,
            owned: Vec::new(),
            initialized: false,
            etcd: None,
            facts: Vec::new(),
            waiting: Vec::new(),
            remediation_in_progress: None,
            created: false,
        }
    }

    pub(super) fn state(&self) -> &'a ControlPlaneController {
        &self.context.state
    }

    /// How soon the control plane looks again while it waits for what no watch reports.
    pub(super) fn poll(&self) -> std::time::Duration {
        self.state().settings.poll
    }

    /// Publishes the pass's events and writes no status: for a pass that created a machine, whose
    /// status would not count it — the machine's appearance in the watch brings the next pass,
    /// which writes the status with it.
    pub(super) async fn leave_status(&self) {
        capi_runtime::write::publish(&self.context.recorder, self.kcp, &self.report.events).await;
    }

    /// Computes the status from what the pass found and writes it if it changed, then publishes
    /// the pass's events.
    pub(super) async fn write_status(&self) -> Result<(), kube::Error> {
        self.report
            .write(
                &self.kcps,
                self.kcp,
                &self.owned,
                self.etcd.as_ref(),
                self.context,
            )
            .await
    }
}

/// One pass over a control plane: each phase either goes on or ends the pass (its status
/// written) with what comes next.
pub(super) async fn reconcile_once(
    kcp: &KubeadmControlPlane,
    context: &Context<ControlPlaneController>,
) -> Result<Next, ReconcileError> {
    let cluster_name = match phases::owning_cluster(kcp) {
        Continue(name) => name,
        Break(next) => return Ok(next),
    };
    let mut scope = Scope::new(kcp, context, cluster_name);
    let cluster = phases::read_cluster(&scope).await?;
    if let Break(next) = phases::read_machines(&mut scope).await? {
        return Ok(next);
    }
    if kcp.metadata.deletion_timestamp.is_some() {
        return deletion::reconcile_delete(&mut scope).await;
    }
    let cluster = match phases::require_cluster(&mut scope, cluster).await? {
        Continue(cluster) => cluster,
        Break(next) => return Ok(next),
    };
    if let Break(next) = phases::honour_pause(&mut scope, &cluster).await? {
        return Ok(next);
    }
    phases::ensure_finalizer(&scope).await?;
    let server = match phases::await_infrastructure(&mut scope, &cluster).await? {
        Continue(server) => server,
        Break(next) => return Ok(next),
    };
    if let Break(next) = phases::ensure_certificates(&mut scope, &cluster, &server).await? {
        return Ok(next);
    }
    phases::observe_machines(&mut scope).await?;
    phases::observe_etcd(&mut scope, &cluster).await;
    phases::record_components(&mut scope, &cluster).await?;
    membership::release_departing_members(&mut scope).await?;
    membership::remove_stray_member(&mut scope).await?;
    phases::complete_machines(&scope).await?;
    if let Break(next) = phases::remediate(&mut scope).await? {
        return Ok(next);
    }
    let next = step::take_next_step(&mut scope, &cluster).await?;
    if scope.created {
        scope.leave_status().await;
    } else {
        scope.write_status().await?;
    }
    Ok(next)
}
