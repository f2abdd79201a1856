//! A real etcd member process per control-plane instance of the [`SimulatedCloud`] (feature
//! `real-etcd`), on loopback, joined to its cluster's etcd cluster the way kubeadm (learner mode,
//! its default since v1.32) joins a stacked member: the first instance of a cluster starts a new
//! cluster; each later one is added through the running members as a learner (`MemberAdd`, not
//! counted in the quorum), starts with `--initial-cluster-state existing`, and is promoted to a
//! voting member once it has caught up (`MemberPromote`). When an
//! instance shuts down its process is killed and its data removed, and — as on a real cloud — its
//! membership stays until someone removes it: that is the control plane provider's job, and what
//! tests check against real etcd.
//!
//! Members are named after their instance (the node's name). Events are handled one at a time,
//! each join waiting until the new member votes, so that etcd never sees two joins at once.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, MemberAddOptions};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::{MemberEvent, SimulatedCloud};

/// How long a join keeps trying to add its member (etcd refuses while it would lose quorum) and
/// then waits for the new member to answer.
const JOIN_PATIENCE: Duration = Duration::from_secs(30);

/// One running member.
struct Member {
    child: Child,
    client_url: String,
    peer_url: String,
    _data: tempfile::TempDir,
}

/// The running members, by etcd cluster and instance.
#[derive(Default)]
struct Running {
    clusters: BTreeMap<String, BTreeMap<String, Member>>,
}

/// Runs the members; dropping it kills every process it started.
pub struct EtcdProcesses {
    running: Arc<Mutex<Running>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for EtcdProcesses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdProcesses").finish_non_exhaustive()
    }
}

impl Drop for EtcdProcesses {
    fn drop(&mut self) {
        self.task.abort();
        // The processes are started with `kill_on_drop`.
        lock(&self.running).clusters.clear();
    }
}

fn lock(running: &Mutex<Running>) -> std::sync::MutexGuard<'_, Running> {
    running
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl EtcdProcesses {
    /// Runs a member with the `etcd` binary at `etcd` for every control-plane instance `cloud`
    /// boots from now on. Must be called within a Tokio runtime.
    pub fn start(cloud: &SimulatedCloud, etcd: &Path) -> Self {
        let (events, mut received) = mpsc::unbounded_channel();
        cloud.observe_etcd_members(events);
        let running = Arc::new(Mutex::new(Running::default()));
        let binary = etcd.to_path_buf();
        let task = tokio::spawn({
            let running = Arc::clone(&running);
            async move {
                while let Some(event) = received.recv().await {
                    match event {
                        MemberEvent::Booted { cluster, instance } => {
                            if let Err(error) = join(&running, &binary, &cluster, &instance).await {
                                tracing::warn!(%cluster, %instance, %error, "etcd member did not join");
                            }
                        }
                        MemberEvent::Gone { cluster, instance } => {
                            stop(&running, &cluster, &instance).await;
                        }
                    }
                }
            }
        });
        Self { running, task }
    }

    /// The client URLs of the members of `cluster` whose processes run.
    pub fn client_urls(&self, cluster: &str) -> Vec<String> {
        lock(&self.running)
            .clusters
            .get(cluster)
            .map(|members| members.values().map(|m| m.client_url.clone()).collect())
            .unwrap_or_default()
    }

    /// How many member processes run, over all clusters.
    pub fn process_count(&self) -> usize {
        lock(&self.running)
            .clusters
            .values()
            .map(BTreeMap::len)
            .sum()
    }
}

/// Starts `instance`'s member: a new cluster when none of `cluster` runs, else added through the
/// running ones.
async fn join(
    running: &Mutex<Running>,
    binary: &Path,
    cluster: &str,
    instance: &str,
) -> Result<(), String> {
    let [client_port, peer_port] = free_ports()?;
    let client_url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let peers: Vec<(String, String)> = lock(running)
        .clusters
        .get(cluster)
        .map(|members| {
            members
                .iter()
                .map(|(name, m)| (name.clone(), m.client_url.clone()))
                .collect()
        })
        .unwrap_or_default();
    let seeds: Vec<String> = peers.iter().map(|(_, url)| url.clone()).collect();
    let (state, initial_cluster, learner) = if peers.is_empty() {
        ("new", format!("{instance}={peer_url}"), None)
    } else {
        let (id, members) = add_learner(&seeds, &peer_url).await?;
        (
            "existing",
            initial_cluster(&members, instance, &peer_url),
            Some(id),
        )
    };
    let data = tempfile::Builder::new()
        .prefix("capi-rs-etcd-")
        .tempdir()
        .map_err(|e| format!("data directory: {e}"))?;
    let log = std::fs::File::create(data.path().join("etcd.log"))
        .map_err(|e| format!("log file: {e}"))?;
    let child = Command::new(binary)
        .arg(format!("--name={instance}"))
        .arg(format!("--data-dir={}", data.path().join("data").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster={initial_cluster}"))
        .arg(format!("--initial-cluster-state={state}"))
        .arg("--initial-cluster-token=capi-rs")
        .arg("--heartbeat-interval=50")
        .arg("--election-timeout=500")
        .arg("--log-level=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", binary.display()))?;
    lock(running)
        .clusters
        .entry(cluster.to_string())
        .or_default()
        .insert(
            instance.to_string(),
            Member {
                child,
                client_url: client_url.clone(),
                peer_url,
                _data: data,
            },
        );
    wait_until_answers(&client_url).await?;
    match learner {
        Some(id) => promote(&seeds, id).await,
        None => Ok(()),
    }
}

/// Adds a learner with `peer_url` through the members at `seeds`, retrying while etcd refuses
/// (no leader, or a member is down); returns its ID and the member list etcd answered with.
async fn add_learner(
    seeds: &[String],
    peer_url: &str,
) -> Result<(u64, Vec<etcd_client::Member>), String> {
    let added = patiently(|| async {
        let mut client = Client::connect(seeds, Some(options()))
            .await
            .map_err(|e| e.to_string())?;
        client
            .member_add([peer_url], Some(MemberAddOptions::new().with_is_learner()))
            .await
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|error| format!("adding the member: {error}"))?;
    let id = added
        .member()
        .map(|m| m.id())
        .ok_or("etcd added the member but did not say its ID")?;
    Ok((id, added.member_list().to_vec()))
}

/// Runs `attempt` until it succeeds or [`JOIN_PATIENCE`] has passed; the last error then.
async fn patiently<T, F, Fut>(mut attempt: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + JOIN_PATIENCE;
    loop {
        match attempt().await {
            Ok(done) => return Ok(done),
            Err(error) if tokio::time::Instant::now() >= deadline => return Err(error),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Promotes the learner `id` to a voting member, retrying while etcd refuses (it has not caught up
/// with the leader yet).
async fn promote(seeds: &[String], id: u64) -> Result<(), String> {
    patiently(|| async {
        let mut client = Client::connect(seeds, Some(options()))
            .await
            .map_err(|e| e.to_string())?;
        client.member_promote(id).await.map_err(|e| e.to_string())
    })
    .await
    .map(drop)
    .map_err(|error| format!("promoting learner {id:x}: {error}"))
}

/// `--initial-cluster` for a joining member: every member by name (or, for one that never
/// started, by a placeholder: etcd matches members by peer URL), the new one named `instance`.
fn initial_cluster(members: &[etcd_client::Member], instance: &str, peer_url: &str) -> String {
    members
        .iter()
        .filter_map(|m| {
            let url = m.peer_urls().first()?;
            let name = if url == peer_url {
                instance.to_string()
            } else if m.name().is_empty() {
                format!("unstarted-{:x}", m.id())
            } else {
                m.name().to_string()
            };
            Some(format!("{name}={url}"))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Waits until the member at `client_url` answers a status request.
async fn wait_until_answers(client_url: &str) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + JOIN_PATIENCE;
    loop {
        let answered = async {
            let mut client = Client::connect([client_url], Some(options())).await.ok()?;
            client.status().await.ok()
        };
        if answered.await.is_some() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "{client_url} did not answer within {JOIN_PATIENCE:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Kills `instance`'s member process; its membership stays.
async fn stop(running: &Mutex<Running>, cluster: &str, instance: &str) {
    let member = {
        let mut running = lock(running);
        let member = running
            .clusters
            .get_mut(cluster)
            .and_then(|members| members.remove(instance));
        if running
            .clusters
            .get(cluster)
            .is_some_and(BTreeMap::is_empty)
        {
            running.clusters.remove(cluster);
        }
        member
    };
    if let Some(mut member) = member {
        let _ = member.child.start_kill();
        let _ = member.child.wait().await;
        tracing::debug!(%cluster, %instance, peer = %member.peer_url, "etcd member stopped");
    }
}

fn options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(2))
}

/// `N` loopback ports free now.
fn free_ports<const N: usize>() -> Result<[u16; N], String> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("no free loopback port: {e}"))?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener
            .local_addr()
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
    }
    Ok(ports)
}
