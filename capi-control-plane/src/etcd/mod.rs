//! A workload cluster's etcd as the control plane provider sees it: its members, their health,
//! its leader, and the two changes the provider makes — handing leadership over and removing a
//! member.
//!
//! How etcd is reached depends on where the cluster runs, so it is a trait: [`EtcdAccess`] opens an
//! [`EtcdCluster`] for a `Cluster`. A provider registers its own with the controller — the
//! in-memory provider's simulated cloud keeps a membership per cluster (and can run a real etcd
//! member per control-plane instance); on a real cloud the members are the etcd static pods of the
//! control-plane nodes.
//!
//! A member's name is its node's name, as kubeadm names it; the controller matches members to
//! machines through `Machine.status.nodeRef.name`.

#[cfg(feature = "etcd-client")]
pub mod client;
#[cfg(feature = "etcd-client")]
pub mod workload;

use std::sync::Arc;

use async_trait::async_trait;
use capi_core::api::Cluster;

use crate::quorum;

/// One etcd member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdMember {
    /// etcd's identifier of the member.
    pub id: u64,
    /// Its name (the node's name); empty while the member was added but has not started.
    pub name: String,
    /// Whether it answers and reports no alarm.
    pub healthy: bool,
    /// A learner: joined, not yet voting.
    pub learner: bool,
}

/// What etcd reports about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdClusterStatus {
    /// The members, as the member list says.
    pub members: Vec<EtcdMember>,
    /// The leader's identifier, when a healthy member knows one.
    pub leader: Option<u64>,
}

impl EtcdClusterStatus {
    /// The member named `name`.
    pub fn member(&self, name: &str) -> Option<&EtcdMember> {
        self.members.iter().find(|m| m.name == name)
    }

    /// Whether the member named `name` leads.
    pub fn leads(&self, name: &str) -> bool {
        self.member(name).is_some_and(|m| Some(m.id) == self.leader)
    }

    /// The members as the quorum arithmetic sees them, each named by `rename` (a member's machine,
    /// where it has one).
    pub fn quorum_members(&self, rename: impl Fn(&str) -> String) -> Vec<quorum::Member> {
        self.members
            .iter()
            .map(|m| quorum::Member {
                name: if m.name.is_empty() {
                    String::new()
                } else {
                    rename(&m.name)
                },
                healthy: m.healthy,
                learner: m.learner,
            })
            .collect()
    }
}

/// Why etcd could not be read or changed. Messages never carry key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// No member could be reached.
    #[error("etcd is unreachable: {0}")]
    Unreachable(String),
    /// etcd refused the change.
    #[error("etcd refused: {0}")]
    Refused(String),
    /// The member is not (or no longer) part of the cluster.
    #[error("etcd has no member {0}")]
    NoSuchMember(u64),
}

/// One workload cluster's etcd.
#[async_trait]
pub trait EtcdCluster: Send + Sync {
    /// The members, their health and the leader.
    async fn status(&self) -> Result<EtcdClusterStatus, EtcdError>;
    /// Makes `to` the leader. Called on the current leader's behalf before its machine goes.
    async fn move_leader(&self, to: u64) -> Result<(), EtcdError>;
    /// Removes the member. Removing a member that is gone already is not an error.
    async fn remove_member(&self, id: u64) -> Result<(), EtcdError>;
}

/// How the controller reaches the etcd of a cluster.
#[async_trait]
pub trait EtcdAccess: Send + Sync {
    /// The etcd of `cluster`, reached with what `client` (the management cluster) holds — the
    /// cluster's etcd CA Secret, its kubeconfig — or with the provider's own means.
    async fn connect(
        &self,
        client: &kube::Client,
        cluster: &Cluster,
    ) -> Result<Arc<dyn EtcdCluster>, EtcdError>;

    /// Drops whatever is kept for cluster `cluster` of `namespace` (client certificates, clients
    /// of its workload cluster): called once its control plane is deleted, so that nothing made
    /// from its Secrets outlives them. Keeping nothing, the default does nothing.
    fn forget(&self, namespace: &str, cluster: &str) {
        let _ = (namespace, cluster);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_renamed_after_their_machines_and_unstarted_ones_stay_nameless() {
        let status = EtcdClusterStatus {
            members: vec![
                EtcdMember {
                    id: 1,
                    name: "node-a".into(),
                    healthy: true,
                    learner: false,
                },
                EtcdMember {
                    id: 2,
                    name: String::new(),
                    healthy: false,
                    learner: true,
                },
            ],
            leader: Some(1),
        };
        assert!(status.leads("node-a"));
        let members = status.quorum_members(|node| format!("machine-of-{node}"));
        assert_eq!(members[0].name, "machine-of-node-a");
        assert_eq!(members[1].name, "");
    }
}
