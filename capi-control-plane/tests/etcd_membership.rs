//! The membership `GrpcEtcd` reports against three real etcd members, while one of them has just
//! been removed but still runs: that member answers with the member list it had (itself
//! included) until it notices its removal, and must not be taken at its word. (Whether node-c
//! notices before the read depends on timing: read first, as here, it was still stale in 4 of 5
//! runs without the fix.)
#![cfg(feature = "etcd-client")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

use capi_control_plane::etcd::client::{GrpcEtcd, GrpcEtcdOptions};
use capi_control_plane::etcd::{EtcdCluster, EtcdError};

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Member {
    name: String,
    client_url: String,
    process: tokio::process::Child,
}

impl Member {
    fn signal(&self, signal: &str) {
        let pid = self.process.id().unwrap().to_string();
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }
}

/// Three members of one cluster, started together from a static initial cluster.
fn start_three(dir: &std::path::Path) -> Vec<Member> {
    let etcd = capi_testing::envtest::Assets::locate().unwrap().etcd;
    let names = ["node-a", "node-b", "node-c"];
    let ports: Vec<(u16, u16)> = names.iter().map(|_| (free_port(), free_port())).collect();
    let initial = names
        .iter()
        .zip(&ports)
        .map(|(name, (_, peer))| format!("{name}=http://127.0.0.1:{peer}"))
        .collect::<Vec<_>>()
        .join(",");
    names
        .iter()
        .zip(&ports)
        .map(|(name, (client, peer))| {
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let process = tokio::process::Command::new(&etcd)
                .args([
                    format!("--name={name}"),
                    format!("--data-dir={}", dir.join(name).display()),
                    format!("--listen-client-urls={client_url}"),
                    format!("--advertise-client-urls={client_url}"),
                    format!("--listen-peer-urls={peer_url}"),
                    format!("--initial-advertise-peer-urls={peer_url}"),
                    format!("--initial-cluster={initial}"),
                    "--initial-cluster-state=new".to_string(),
                    "--log-level=error".to_string(),
                ])
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            Member {
                name: (*name).to_string(),
                client_url,
                process,
            }
        })
        .collect()
}

#[tokio::test]
async fn a_member_removed_a_moment_ago_does_not_speak_for_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let members = start_three(dir.path());
    let options = GrpcEtcdOptions {
        timeout: Duration::from_secs(2),
    };
    // The removed member first among the seeds: the first to answer.
    let seeds = vec![
        members[2].client_url.clone(),
        members[0].client_url.clone(),
        members[1].client_url.clone(),
    ];
    let etcd = GrpcEtcd::new(seeds, options);
    let all = |s: &capi_control_plane::etcd::EtcdClusterStatus| {
        s.members.len() == 3 && s.members.iter().all(|m| m.healthy) && s.leader.is_some()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if etcd.status().await.is_ok_and(|s| all(&s)) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "etcd never formed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // node-c is stopped while the others remove it, so it cannot hear of its removal; once it
    // runs again it answers with the list it had until its peers turn it away.
    let leaving = &members[2];
    let status = etcd.status().await.unwrap();
    let id = status
        .members
        .iter()
        .find(|m| m.name == leaving.name)
        .unwrap()
        .id;
    if status.leader == Some(id) {
        let successor = status.members.iter().find(|m| m.id != id).unwrap().id;
        etcd.move_leader(successor).await.unwrap();
    }
    leaving.signal("-STOP");
    let staying = GrpcEtcd::new(
        vec![members[0].client_url.clone(), members[1].client_url.clone()],
        GrpcEtcdOptions::default(),
    );
    // etcd refuses a removal until the members that stay have been connected for its health
    // interval (5 s): a cluster this young waits.
    loop {
        match staying.remove_member(id).await {
            Ok(()) => break,
            Err(EtcdError::Refused(why)) if tokio::time::Instant::now() < deadline => {
                eprintln!("removal refused for now: {why}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("removing node-c: {e}"),
        }
    }
    leaving.signal("-CONT");

    let status = etcd.status().await.unwrap();
    let mut names: Vec<&str> = status.members.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["node-a", "node-b"],
        "the removed member spoke for the cluster: {status:?}"
    );
    assert!(
        status.members.iter().all(|m| m.healthy),
        "the members that stay are healthy: {status:?}"
    );
}
