//! [`EtcdCluster`] over etcd's own gRPC API, with the `etcd-client` crate (feature `etcd-client`).
//!
//! [`GrpcEtcd`] starts from a few seed endpoints, asks all of them at once for their member list
//! and keeps the newest view (the seed furthest along the log: a member removed a moment ago
//! still answers with the list it had), and then asks **each member directly** for its status — a member is healthy when it
//! answers within the timeout and reports no error (an alarm, a lost leader). The leader is the
//! one most of the answering members name. Leadership is handed over by asking the current leader
//! (etcd refuses `MoveLeader` anywhere else), and a member is removed through a member that
//! answered. Every call is bounded by [`GrpcEtcdOptions::timeout`], so an unreachable member
//! costs one timeout, never a hung reconcile.
//!
//! How a member is reached is a [`Dial`]: [`UrlDial`] connects to the client URL a member
//! advertises (a loopback etcd, plain `http://`); `etcd::workload` dials through the workload
//! cluster's API server with TLS.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
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

/// Where a member is: its name (the node's) and the client URL it advertises, as far as known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberAddress {
    /// The member's name; empty for a seed known only by URL.
    pub name: String,
    /// Its first advertised client URL, when known.
    pub client_url: Option<String>,
}

impl MemberAddress {
    /// A seed known by its client URL.
    pub fn url(url: impl Into<String>) -> Self {
        Self {
            name: String::new(),
            client_url: Some(url.into()),
        }
    }

    /// A seed known by its member (node) name.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            client_url: None,
        }
    }

    fn describe(&self) -> &str {
        self.client_url.as_deref().unwrap_or(&self.name)
    }
}

/// How [`GrpcEtcd`] opens a client to one member.
#[async_trait]
pub trait Dial: Send + Sync {
    /// A client talking to `member` only, connected within `timeout`.
    async fn dial(&self, member: &MemberAddress, timeout: Duration) -> Result<Client, EtcdError>;
}

/// Dials the client URL a member advertises, as given (plain `http://`).
#[derive(Clone, Copy, Debug, Default)]
pub struct UrlDial;

#[async_trait]
impl Dial for UrlDial {
    async fn dial(&self, member: &MemberAddress, timeout: Duration) -> Result<Client, EtcdError> {
        let url = member.client_url.as_deref().ok_or_else(|| {
            EtcdError::Unreachable(format!("member {} advertises no client URL", member.name))
        })?;
        let options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout);
        Client::connect([url], Some(options))
            .await
            .map_err(|e| classify(url, e))
    }
}

/// A workload cluster's etcd, reached over gRPC from `seeds` (some of its members).
#[derive(Clone)]
pub struct GrpcEtcd {
    seeds: Vec<MemberAddress>,
    dial: Arc<dyn Dial>,
    options: GrpcEtcdOptions,
}

impl std::fmt::Debug for GrpcEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcEtcd")
            .field("seeds", &self.seeds)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl GrpcEtcd {
    /// The etcd cluster that the members at `seeds` (client URLs) belong to, dialed directly.
    pub fn new(seeds: Vec<String>, options: GrpcEtcdOptions) -> Self {
        Self::with_dial(
            seeds.into_iter().map(MemberAddress::url).collect(),
            Arc::new(UrlDial),
            options,
        )
    }

    /// The etcd cluster that `seeds` belong to, each member reached through `dial`.
    pub fn with_dial(
        seeds: Vec<MemberAddress>,
        dial: Arc<dyn Dial>,
        options: GrpcEtcdOptions,
    ) -> Self {
        Self {
            seeds,
            dial,
            options,
        }
    }

    /// Runs `call` against `member`, bounded by the timeout.
    async fn at<T, F, Fut>(&self, member: &MemberAddress, call: F) -> Result<T, EtcdError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let timeout = self.options.timeout;
        let endpoint = member.describe();
        let attempt = async {
            let client = self.dial.dial(member, timeout).await?;
            call(client).await.map_err(|e| classify(endpoint, e))
        };
        tokio::time::timeout(timeout, attempt).await.map_err(|_| {
            EtcdError::Unreachable(format!("{endpoint}: no answer within {timeout:?}"))
        })?
    }

    /// Asks every seed, at once, for its status and its member list.
    async fn ask_seeds(&self) -> Result<Vec<SeedAnswer>, EtcdError> {
        let answers = futures::future::join_all(self.seeds.iter().map(|seed| async move {
            self.at(seed, |mut c| async move {
                let status = c.status().await?;
                let list = c.member_list().await?;
                Ok(SeedAnswer {
                    member_id: status.header().map(|h| h.member_id()),
                    list: list.members().to_vec(),
                    status,
                })
            })
            .await
        }))
        .await;
        let mut last = EtcdError::Unreachable("no member to ask".into());
        let mut answered = Vec::new();
        for answer in answers {
            match answer {
                Ok(answer) => answered.push(answer),
                Err(e) => last = e,
            }
        }
        if answered.is_empty() {
            return Err(last);
        }
        Ok(answered)
    }

    /// The status and the address of every member that answers.
    async fn read(&self) -> Result<(EtcdClusterStatus, Vec<(u64, MemberAddress)>), EtcdError> {
        let answered = self.ask_seeds().await?;
        let members = newest_view(&answered).to_vec();
        let answers = futures::future::join_all(members.iter().map(|member| {
            let known = answered
                .iter()
                .find(|a| a.member_id == Some(member.id()))
                .map(|a| a.status.clone());
            async move {
                if member.name().is_empty() {
                    return None; // not started
                }
                let endpoint = MemberAddress {
                    name: member.name().to_string(),
                    client_url: member.client_urls().first().cloned(),
                };
                let status = match known {
                    Some(status) => status,
                    None => self
                        .at(&endpoint, |mut c| async move { c.status().await })
                        .await
                        .ok()?,
                };
                Some((member.id(), endpoint, status))
            }
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

/// What one seed answered: who it is, its status and the member list as it sees it.
struct SeedAnswer {
    member_id: Option<u64>,
    status: etcd_client::StatusResponse,
    list: Vec<etcd_client::Member>,
}

/// The member list of the seed that has applied the most of the log.
///
/// Seeds disagree for a while after a membership change: a member removed a moment ago still
/// runs and answers with the list it had, itself included, until it notices (it may never apply
/// its own removal), and a follower may not have applied the change yet. Applied entries are
/// committed ones, the same on every member, so the seed furthest along has the newest view;
/// the first seed to answer may have the oldest.
fn newest_view(answered: &[SeedAnswer]) -> &[etcd_client::Member] {
    answered
        .iter()
        .max_by_key(|a| (a.status.raft_applied_index(), a.status.raft_term()))
        .map(|a| a.list.as_slice())
        .unwrap_or_default()
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
