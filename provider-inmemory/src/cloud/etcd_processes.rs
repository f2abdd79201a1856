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
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, MemberAddOptions};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::{EtcdCa, MemberEvent, SimulatedCloud};
use crate::kubelet::PortForwardTargets;

/// How long a join keeps trying to add its member (etcd refuses while it would lose quorum) and
/// then waits for the new member to answer.
const JOIN_PATIENCE: Duration = Duration::from_secs(30);

/// One running member.
struct Member {
    child: Child,
    client_url: String,
    /// Where the member serves TLS with a certificate from its cluster's etcd CA (what kubeadm
    /// configures on port 2379), when the instance's user data carried the CA.
    tls_client_addr: Option<SocketAddr>,
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
        let (events, received) = mpsc::unbounded_channel();
        cloud.observe_etcd_members(events);
        Self::follow(received, etcd)
    }

    /// Runs a member with the `etcd` binary at `etcd` for every [`MemberEvent::Booted`] that
    /// `events` brings, and stops it on [`MemberEvent::Gone`]: for machines of a cloud other than
    /// the [`SimulatedCloud`] (a real one with a fake hypervisor) whose boot a test simulates.
    /// Must be called within a Tokio runtime.
    pub fn follow(mut received: mpsc::UnboundedReceiver<MemberEvent>, etcd: &Path) -> Self {
        let running = Arc::new(Mutex::new(Running::default()));
        let binary = etcd.to_path_buf();
        let task = tokio::spawn({
            let running = Arc::clone(&running);
            async move {
                while let Some(event) = received.recv().await {
                    match event {
                        MemberEvent::Booted {
                            cluster,
                            instance,
                            etcd_ca,
                        } => {
                            let joined =
                                join(&running, &binary, &cluster, &instance, etcd_ca.as_ref());
                            if let Err(error) = joined.await {
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

    /// Where the simulated kubelets forward a port of an `etcd-<node>` pod: port 2379 of
    /// `kube-system/etcd-<node>` reaches the member of instance `<node>` (its TLS listener when
    /// it has one, as on a kubeadm node).
    pub fn port_forward_targets(&self) -> std::sync::Arc<dyn PortForwardTargets> {
        Arc::new(EtcdPods {
            running: Arc::clone(&self.running),
        })
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
    etcd_ca: Option<&EtcdCa>,
) -> Result<(), String> {
    let [client_port, peer_port, tls_port] = free_ports()?;
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
    let mut listen_client_urls = client_url.clone();
    let mut tls_args = Vec::new();
    let mut tls_client_addr = None;
    if let Some(ca) = etcd_ca {
        // kubeadm's `etcd/server` certificate: signed by the etcd CA, client certificates
        // required (and checked against the same CA) on the TLS listener.
        let (cert, key) = serving_certificate(ca, instance)?;
        for (name, content) in [
            ("ca.crt", &ca.cert_pem),
            ("server.crt", &cert),
            ("server.key", &key),
        ] {
            std::fs::write(data.path().join(name), content)
                .map_err(|e| format!("writing {name}: {e}"))?;
        }
        listen_client_urls.push_str(&format!(",https://127.0.0.1:{tls_port}"));
        tls_args = vec![
            format!("--cert-file={}", data.path().join("server.crt").display()),
            format!("--key-file={}", data.path().join("server.key").display()),
            format!("--trusted-ca-file={}", data.path().join("ca.crt").display()),
            "--client-cert-auth".to_string(),
        ];
        tls_client_addr = Some(SocketAddr::from((Ipv4Addr::LOCALHOST, tls_port)));
    }
    let child = Command::new(binary)
        .arg(format!("--name={instance}"))
        .arg(format!("--data-dir={}", data.path().join("data").display()))
        .arg(format!("--listen-client-urls={listen_client_urls}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster={initial_cluster}"))
        .arg(format!("--initial-cluster-state={state}"))
        .arg("--initial-cluster-token=capi-rs")
        .arg("--heartbeat-interval=50")
        .arg("--election-timeout=500")
        .arg("--log-level=warn")
        .args(&tls_args)
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
                tls_client_addr,
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

/// The `etcd-<node>` static pods of [`EtcdProcesses`], for the simulated kubelets.
struct EtcdPods {
    running: Arc<Mutex<Running>>,
}

impl PortForwardTargets for EtcdPods {
    fn resolve(&self, node: &str, namespace: &str, pod: &str, port: u16) -> Option<SocketAddr> {
        if namespace != "kube-system" || port != 2379 || pod != format!("etcd-{node}") {
            return None;
        }
        let running = lock(&self.running);
        let member = running
            .clusters
            .values()
            .find_map(|members| members.get(node))?;
        member.tls_client_addr.or_else(|| {
            member
                .client_url
                .strip_prefix("http://")
                .and_then(|a| a.parse().ok())
        })
    }
}

/// The etcd CA's key: PKCS#8 or SEC1 as rcgen reads them, or an RSA key in PKCS#1 (`RSA PRIVATE
/// KEY`, what upstream's Cluster API generates), rewrapped as PKCS#8 for it.
fn ca_key_pair(pem: &str) -> Result<rcgen::KeyPair, String> {
    const BEGIN: &str = "-----BEGIN RSA PRIVATE KEY-----";
    const END: &str = "-----END RSA PRIVATE KEY-----";
    let Some(body) = pem
        .split_once(BEGIN)
        .and_then(|(_, rest)| rest.split_once(END))
        .map(|(body, _)| body)
    else {
        return rcgen::KeyPair::from_pem(pem)
            .map_err(|e| format!("the etcd CA key does not load: {e}"));
    };
    use base64::Engine;
    let pkcs1: String = body.split_whitespace().collect();
    let pkcs1 = base64::engine::general_purpose::STANDARD
        .decode(pkcs1)
        .map_err(|e| format!("the etcd CA key is not base64: {e}"))?;
    // PrivateKeyInfo ::= SEQUENCE { version 0, AlgorithmIdentifier rsaEncryption, OCTET STRING }
    let algorithm: &[u8] = &[
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
    ];
    let mut content = vec![0x02, 0x01, 0x00];
    content.extend_from_slice(algorithm);
    content.extend(der(0x04, &pkcs1));
    let pkcs8 = der(0x30, &content);
    rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8.into(), &rcgen::PKCS_RSA_SHA256)
        .map_err(|e| format!("the etcd CA's RSA key does not load: {e}"))
}

/// A DER element: `tag`, the definite length, `content`.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// A serving certificate for `instance`'s member signed by `ca`: (certificate, key) in PEM.
fn serving_certificate(ca: &EtcdCa, instance: &str) -> Result<(String, String), String> {
    let ca_key = ca_key_pair(&ca.key_pem)?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key)
        .map_err(|e| format!("the etcd CA certificate does not load: {e}"))?;
    let mut params = rcgen::CertificateParams::new(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        instance.to_string(),
    ])
    .map_err(|e| format!("serving certificate: {e}"))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, instance);
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = rcgen::KeyPair::generate().map_err(|e| format!("serving key: {e}"))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| format!("signing the serving certificate: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}
