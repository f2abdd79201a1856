//! What a pass found, for the control plane's status (computed once by [`super::status::compute`])
//! and the events it publishes.

use capi_core::api::Machine;
use capi_core::condition;
use capi_runtime::plan::EventNote;
use capi_runtime::{Context, write};
use kube::{Api, ResourceExt};

use super::ControlPlaneController;
use super::machines::{self, node_name};
use super::membership::EtcdView;
use super::status::{self, Observation};
use crate::api::KubeadmControlPlane;
use crate::components::Judgement;
use crate::remediation::RemediationData;
use crate::scale::MachineFacts;

/// Event reasons of this controller.
pub(super) mod events {
    pub(in super::super) const MACHINE_CREATED: &str = "SuccessfulCreate";
    pub(in super::super) const MACHINE_DELETED: &str = "SuccessfulDelete";
    pub(in super::super) const LEADERSHIP_MOVED: &str = "EtcdLeadershipMoved";
    pub(in super::super) const MEMBER_REMOVED: &str = "EtcdMemberRemoved";
    pub(in super::super) const INVALID: &str = "InvalidConfiguration";
    pub(in super::super) const REMEDIATING: &str = "Remediating";
}

/// What a pass found, for status and events.
pub(super) struct Report {
    pub(super) selector: String,
    pub(super) outdated: Vec<Option<String>>,
    pub(super) initialized: bool,
    pub(super) certificates: Result<(), String>,
    pub(super) waiting: Option<String>,
    pub(super) deleting: Option<String>,
    pub(super) paused: bool,
    pub(super) remediating: Option<String>,
    pub(super) last_remediation: Option<RemediationData>,
    /// Per machine, in the machines' order: its components' and etcd member's judgements (empty
    /// when not judged this pass).
    pub(super) components: Vec<Vec<Judgement>>,
    pub(super) events: Vec<EventNote>,
}

impl Report {
    /// Nothing found yet, for the machines of `selector`.
    pub(super) fn new(selector: &str) -> Self {
        Self {
            selector: selector.to_string(),
            outdated: Vec::new(),
            initialized: false,
            certificates: Ok(()),
            waiting: None,
            deleting: None,
            paused: false,
            remediating: None,
            last_remediation: None,
            components: Vec::new(),
            events: Vec::new(),
        }
    }

    /// The judgements of machine `i` (none when it was not judged).
    pub(super) fn judged(&self, i: usize) -> &[Judgement] {
        self.components
            .get(i)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// An event to publish after the status, logged now.
    pub(super) fn event(&mut self, warning: bool, reason: &'static str, note: String) {
        tracing::info!(reason, %note);
        self.events.push(EventNote {
            warning,
            reason,
            note,
        });
    }

    /// Computes the status once from what the pass found and writes it if it changed, then
    /// publishes the pass's events.
    pub(super) async fn write(
        &self,
        kcps: &Api<KubeadmControlPlane>,
        kcp: &KubeadmControlPlane,
        owned: &[Machine],
        etcd: Option<&EtcdView>,
        context: &Context<ControlPlaneController>,
    ) -> Result<(), kube::Error> {
        let facts: Vec<MachineFacts> = owned
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let up_to_date = self.outdated.get(i).is_none_or(Option::is_none);
                machines::facts(m, up_to_date, None, self.judged(i))
            })
            .collect();
        let outdated: Vec<Option<String>> = (0..owned.len())
            .map(|i| self.outdated.get(i).cloned().flatten())
            .collect();
        let conditions = |m: &Machine| {
            m.status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default()
        };
        let ready: Vec<(bool, bool)> = owned
            .iter()
            .map(|m| {
                let c = conditions(m);
                (
                    condition::is_true(&c, condition::READY),
                    condition::is_true(&c, condition::AVAILABLE),
                )
            })
            .collect();
        let nodes: Vec<(Option<&str>, bool)> = owned
            .iter()
            .map(|m| {
                (
                    node_name(m),
                    condition::is_true(&conditions(m), condition::NODE_READY),
                )
            })
            .collect();
        let versions: Vec<Option<String>> = owned.iter().map(|m| m.spec.version.clone()).collect();
        let etcd = etcd.map(|view| match view {
            Ok((_, status)) => Ok(status),
            Err(why) => Err(why.as_str()),
        });
        let observation = Observation {
            generation: kcp.metadata.generation,
            replicas: usize::try_from(kcp.spec.replicas.unwrap_or(1)).unwrap_or(0),
            selector: &self.selector,
            versions: &versions,
            machines: &facts,
            ready: &ready,
            outdated: &outdated,
            nodes: &nodes,
            etcd,
            initialized: self.initialized,
            certificates: self
                .certificates
                .as_ref()
                .map(|_| ())
                .map_err(String::as_str),
            waiting: self.waiting.as_deref(),
            deleting: self.deleting.as_deref(),
            paused: self.paused,
            remediating: self.remediating.as_deref(),
            last_remediation: self.last_remediation.as_ref(),
            components: &self.components,
        };
        let desired = status::compute(kcp.status.as_ref(), &observation);
        write::patch_status_if_changed(kcps, &kcp.name_any(), kcp.status.as_ref(), &desired)
            .await?;
        write::publish(&context.recorder, kcp, &self.events).await;
        Ok(())
    }
}
