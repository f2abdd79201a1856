//! [`EtcdCluster`] over etcd's own gRPC API, with the `etcd-client` crate (feature `etcd-client`).
//!
//! [`GrpcEtcd`] starts from a few seed endpoints, reads the member list from the first that
//! answers, and then asks **each member directly** for its status — a member is healthy when it
//! answers within the timeout and reports no error (an alarm, a lost leader). The leader is the
//! one most of the answering members name. Leadership is handed over by asking the current leader
//! (etcd refuses `MoveLeader` anywhere else), and a member is removed through a member that
//! answered. Every call is bounded by [`GrpcEtcdOptions::timeout`], so an unreachable member
//! costs one timeout, never a hung reconcile.
//!
//! Endpoints are plain `http://` URLs here (a loopback etcd, or one reached through a tunnel that
//! terminates TLS).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, ConnectOptions};

use super::{EtcdCluster, EtcdClusterStatus, EtcdError, EtcdMember};

/// How [`GrpcEtcd`] talks to etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcEtcdOptions {
    /// The longest one connection attempt or one call may take.
    pub timeout: Duration,
}

impl Default for GrpcEtcdOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
        }
    }
}

/// A workload cluster's etcd, reached over gRPC from `seeds` (client URLs of some members).
#[derive(Clone, Debug)]
pub struct GrpcEtcd {
    seeds: Vec<String>,
    options: GrpcEtcdOptions,
}

impl GrpcEtcd {
    /// The etcd cluster that the members at `seeds` belong to.
    pub fn new(seeds: Vec<String>, options: GrpcEtcdOptions) -> Self {
        Self { seeds, options }
    }

    /// Runs `call` against the member at `endpoint`, bounded by the timeout.
    async fn at<T, F, Fut>(&self, endpoint: &str, call: F) -> Result<T, EtcdError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let timeout = self.options.timeout;
        let options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout);
        let attempt = async {
            let client = Client::connect([endpoint], Some(options))
                .await
                .map_err(|e| classify(endpoint, e))?;
            call(client).await.map_err(|e| classify(endpoint, e))
        };
        tokio::time::timeout(timeout, attempt).await.map_err(|_| {
            EtcdError::Unreachable(format!("{endpoint}: no answer within {timeout:?}"))
        })?
    }

    /// The member list, from the first of `endpoints` that answers.
    async fn member_list(
        &self,
        endpoints: &[String],
    ) -> Result<Vec<etcd_client::Member>, EtcdError> {
        let mut last = EtcdError::Unreachable("no endpoint to ask".into());
        for endpoint in endpoints {
            match self
                .at(endpoint, |mut c| async move { c.member_list().await })
                .await
            {
                Ok(list) => return Ok(list.members().to_vec()),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The status and the client URL of every member that answers.
    async fn read(&self) -> Result<(EtcdClusterStatus, Vec<(u64, String)>), EtcdError> {
        let members = self.member_list(&self.seeds).await?;
        let answers = futures::future::join_all(members.iter().map(|member| async move {
            let endpoint = member.client_urls().first()?.clone();
            let status = self
                .at(&endpoint, |mut c| async move { c.status().await })
                .await
                .ok()?;
            Some((member.id(), endpoint, status))
        }))
        .await;
        let mut healthy = BTreeMap::new();
        let mut votes: BTreeMap<u64, usize> = BTreeMap::new();
        let mut reachable = Vec::new();
        for (id, endpoint, status) in answers.into_iter().flatten() {
            healthy.insert(id, status.errors().is_empty());
            if status.leader() != 0 {
                *votes.entry(status.leader()).or_default() += 1;
            }
            reachable.push((id, endpoint));
        }
        // The leader most members name (the lowest ID on a tie, so that reads are stable).
        let leader = votes
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(id, _)| *id);
        let status = EtcdClusterStatus {
            members: members
                .iter()
                .map(|m| EtcdMember {
                    id: m.id(),
                    name: m.name().to_string(),
                    healthy: healthy.get(&m.id()).copied().unwrap_or(false),
                    learner: m.is_learner(),
                })
                .collect(),
            leader,
        };
        Ok((status, reachable))
    }
}

/// Tells a member that cannot be reached from a refusal.
fn classify(endpoint: &str, error: etcd_client::Error) -> EtcdError {
    use etcd_client::Error;
    match error {
        // etcd's own answers start with "etcdserver:" (e.g. "etcdserver: unhealthy cluster" when
        // a change would risk the quorum): etcd was reached and refused.
        Error::GRpcStatus(status) if status.message().starts_with("etcdserver:") => {
            EtcdError::Refused(status.message().to_string())
        }
        Error::GRpcStatus(status) => match status.code() as i32 {
            grpc_code::UNAVAILABLE | grpc_code::DEADLINE_EXCEEDED => {
                EtcdError::Unreachable(format!("{endpoint}: {}", status.message()))
            }
            _ => EtcdError::Refused(status.message().to_string()),
        },
        Error::InvalidArgs(_) | Error::InvalidUri(_) => {
            EtcdError::Refused(format!("{endpoint}: {error}"))
        }
        other => EtcdError::Unreachable(format!("{endpoint}: {other}")),
    }
}

/// The gRPC status codes (fixed by the gRPC specification) that mean "not reachable" rather than
/// "refused".
mod grpc_code {
    pub(super) const DEADLINE_EXCEEDED: i32 = 4;
    pub(super) const UNAVAILABLE: i32 = 14;
}

#[async_trait]
impl EtcdCluster for GrpcEtcd {
    async fn status(&self) -> Result<EtcdClusterStatus, EtcdError> {
        let (status, reachable) = self.read().await?;
        if reachable.is_empty() {
            return Err(EtcdError::Unreachable(
                "the member list answered but no member answers its status".into(),
            ));
        }
        Ok(status)
    }

    async fn move_leader(&self, to: u64) -> Result<(), EtcdError> {
        let (status, reachable) = self.read().await?;
        if status.leader == Some(to) {
            return Ok(());
        }
        if !status.members.iter().any(|m| m.id == to) {
            return Err(EtcdError::NoSuchMember(to));
        }
        let leader = status
            .leader
            .and_then(|l| reachable.iter().find(|(id, _)| *id == l))
            .ok_or_else(|| EtcdError::Unreachable("no reachable member leads".into()))?;
        self.at(&leader.1, |mut c| async move { c.move_leader(to).await })
            .await
            .map(|_| ())
    }

    async fn remove_member(&self, id: u64) -> Result<(), EtcdError> {
        let (status, reachable) = self.read().await?;
        if !status.members.iter().any(|m| m.id == id) {
            return Ok(());
        }
        // Ask a member other than the one going, when there is one.
        let via = reachable
            .iter()
            .find(|(member, _)| *member != id)
            .or_else(|| reachable.first())
            .ok_or_else(|| EtcdError::Unreachable("no member answers".into()))?;
        match self
            .at(&via.1, |mut c| async move { c.member_remove(id).await })
            .await
        {
            Ok(_) => Ok(()),
            // Removed meanwhile: what was asked for holds.
            Err(EtcdError::Refused(message)) if message.contains("member not found") => Ok(()),
            Err(e) => Err(e),
        }
    }
}
