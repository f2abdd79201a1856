//! What would run in the servers of a real cloud whose hypervisor boots nothing (Nova's fake
//! driver, moto's EC2), simulated from each server's own user data, for a provider's end-to-end
//! tests. A [`FakeHypervisor`] is a [`Hosts`] for the [`NodeRegistrar`](crate::nodes::NodeRegistrar):
//! it reads a running server's user data back from the cloud (what cloud-init would read from
//! the metadata service) and, as kubeadm would on a real VM:
//! - a control-plane server (its user data installs the etcd CA) runs a real etcd member
//!   ([`EtcdProcesses`], fed with [`MemberEvent`]s) serving TLS from that CA, and its kubelet
//!   mirrors kubeadm's static pods;
//! - the server whose user data runs `kubeadm init` uploads its `ClusterConfiguration`;
//! - every server's kubelet registers its node and serves port-forward (with
//!   [`NodeRegistrar::with_kubelets`](crate::nodes::NodeRegistrar::with_kubelets)).
//!
//! A server's address in the cloud is not an address of this machine, so its kubelet listens on
//! a loopback stand-in with the same last three octets ([`loopback_stand_in`]), which its node
//! reports as `InternalIP`: the workload API server reaches the kubelet there.
//!
//! A server is booted once, the first time it is seen running; its member stops when it is no
//! longer running.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::cloud::{EtcdProcesses, MemberEvent, UserData, boot};
use crate::nodes::{Hosts, RunningHost};

/// A running server of the cluster, as the cloud lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    /// The cloud's ID of the server.
    pub id: String,
    /// Its host name: its node's name and, on a control plane, its etcd member's.
    pub name: String,
    /// Its provider ID, as the cloud-controller-manager would set it on the node.
    pub provider_id: String,
    /// Its availability zone.
    pub zone: Option<String>,
}

/// What a server booted with.
#[derive(Clone, Debug)]
pub struct BootData {
    /// Its private IPv4 address in the cloud.
    pub address: Ipv4Addr,
    /// The user data it was created with, decoded (decompressed when the cloud keeps it
    /// compressed); `None` when it has none.
    pub user_data: Option<UserData>,
}

/// One cluster's servers in a cloud, as an administrator reads them.
#[async_trait::async_trait]
pub trait CloudServers: Send + Sync + 'static {
    /// The cluster's servers running now. An error skips the registrar's pass.
    async fn running(&self) -> Result<Vec<Server>, String>;

    /// What `server` booted with. Called once per server, when it is first seen running; an
    /// error (no address yet, say) makes the next pass try again.
    async fn boot_data(&self, server: &Server) -> Result<BootData, String>;
}

/// A server seen running, and what its boot did.
struct Booted {
    host: RunningHost,
    init_cluster_configuration: Option<String>,
}

/// The servers of one cluster of a cloud, booted as kubeadm would boot them (module docs).
pub struct FakeHypervisor<S> {
    servers: S,
    cluster: String,
    members: mpsc::UnboundedSender<MemberEvent>,
    booted: Mutex<BTreeMap<String, Booted>>,
}

impl<S: CloudServers> FakeHypervisor<S> {
    /// Boots the running servers of `servers`, whose control plane forms etcd cluster `cluster`
    /// of the returned [`EtcdProcesses`], run with the `etcd` binary.
    pub fn new(servers: S, cluster: impl Into<String>, etcd: &Path) -> (Self, EtcdProcesses) {
        let (members, events) = mpsc::unbounded_channel();
        let hypervisor = Self {
            servers,
            cluster: cluster.into(),
            members,
            booted: Mutex::default(),
        };
        (hypervisor, EtcdProcesses::follow(events, etcd))
    }

    fn booted(&self) -> MutexGuard<'_, BTreeMap<String, Booted>> {
        self.booted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Boots `server`: reads what it booted with, starts its etcd member if it is a control
    /// plane.
    async fn boot(&self, server: &Server) -> Result<Booted, String> {
        let BootData { address, user_data } = self.servers.boot_data(server).await?;
        let etcd_ca = user_data.as_ref().and_then(boot::etcd_ca);
        let control_plane = etcd_ca.is_some();
        tracing::info!(
            server = %server.name,
            %address,
            control_plane,
            user_data = user_data.as_ref().map_or(0, UserData::len),
            "booted"
        );
        if control_plane {
            let _ = self.members.send(MemberEvent::Booted {
                cluster: self.cluster.clone(),
                instance: server.name.clone(),
                etcd_ca,
            });
        }
        Ok(Booted {
            host: RunningHost {
                name: server.name.clone(),
                provider_id: server.provider_id.clone(),
                address: loopback_stand_in(address).to_string(),
                zone: server.zone.clone(),
                control_plane,
                cluster: None,
            },
            init_cluster_configuration: user_data
                .as_ref()
                .and_then(boot::init_cluster_configuration),
        })
    }
}

/// `a.b.c.d` → `127.b.c.d`: where the kubelet of a server at `address` listens on this machine.
pub fn loopback_stand_in(address: Ipv4Addr) -> Ipv4Addr {
    let [_, b, c, d] = address.octets();
    Ipv4Addr::new(127, b, c, d)
}

#[async_trait::async_trait]
impl<S: CloudServers> Hosts for FakeHypervisor<S> {
    async fn running(&self) -> Result<Vec<RunningHost>, String> {
        let running = self.servers.running().await?;
        for server in &running {
            if self.booted().contains_key(&server.id) {
                continue;
            }
            let booted = self.boot(server).await?;
            self.booted().insert(server.id.clone(), booted);
        }
        let mut booted = self.booted();
        let gone: Vec<String> = booted
            .keys()
            .filter(|id| !running.iter().any(|s| &&s.id == id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(left) = booted.remove(&id)
                && left.host.control_plane
            {
                let _ = self.members.send(MemberEvent::Gone {
                    cluster: self.cluster.clone(),
                    instance: left.host.name,
                });
            }
        }
        Ok(booted.values().map(|b| b.host.clone()).collect())
    }

    async fn init_cluster_configuration(&self, host: &RunningHost) -> Option<String> {
        self.booted()
            .values()
            .find(|b| b.host.name == host.name)
            .and_then(|b| b.init_cluster_configuration.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_kubelet_listens_on_the_loopback_address_with_its_last_three_octets() {
        assert_eq!(
            loopback_stand_in(Ipv4Addr::new(10, 64, 0, 7)),
            Ipv4Addr::new(127, 64, 0, 7)
        );
    }

    struct Fixed(Mutex<Vec<Server>>);

    #[async_trait::async_trait]
    impl CloudServers for Fixed {
        async fn running(&self) -> Result<Vec<Server>, String> {
            Ok(self.0.lock().unwrap_or_else(|p| p.into_inner()).clone())
        }

        async fn boot_data(&self, server: &Server) -> Result<BootData, String> {
            let last: u8 = server
                .id
                .parse()
                .map_err(|_| "no address yet".to_string())?;
            Ok(BootData {
                address: Ipv4Addr::new(10, 0, 1, last),
                user_data: None,
            })
        }
    }

    fn server(id: &str) -> Server {
        Server {
            id: id.into(),
            name: format!("host-{id}"),
            provider_id: format!("cloud:///{id}"),
            zone: Some("a".into()),
        }
    }

    #[tokio::test]
    async fn servers_are_booted_once_retried_when_their_boot_data_is_not_there_and_dropped_when_gone()
     {
        let servers = Fixed(Mutex::new(vec![server("4"), server("pending")]));
        let (hypervisor, _etcd) = FakeHypervisor::new(servers, "ns.c", Path::new("/nonexistent"));
        assert!(
            hypervisor.running().await.is_err(),
            "a server without boot data fails the pass"
        );
        *hypervisor.servers.0.lock().unwrap() = vec![server("4"), server("5")];
        let hosts = hypervisor.running().await.unwrap();
        assert_eq!(
            hosts
                .iter()
                .map(|h| (h.name.as_str(), h.address.as_str(), h.control_plane))
                .collect::<Vec<_>>(),
            [
                ("host-4", "127.0.1.4", false),
                ("host-5", "127.0.1.5", false)
            ]
        );
        *hypervisor.servers.0.lock().unwrap() = vec![server("5")];
        let hosts = hypervisor.running().await.unwrap();
        assert_eq!(hosts.len(), 1);
        assert_eq!(hosts[0].provider_id, "cloud:///5");
        assert_eq!(hypervisor.init_cluster_configuration(&hosts[0]).await, None);
    }
}
