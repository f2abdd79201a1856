//! The boot of the local OpenStack's servers, simulated: Nova's fake driver boots no VM, so this
//! plays the part of what would run in each ACTIVE server of a cluster. It reads the server's
//! user data back from Nova (what cloud-init would read from the metadata service) and, as
//! kubeadm would on a real VM:
//! - a control-plane server (its user data installs the etcd CA) runs a real etcd member
//!   ([`EtcdProcesses`], fed with [`MemberEvent`]s) serving TLS from that CA, and its kubelet
//!   mirrors kubeadm's static pods;
//! - the server whose user data runs `kubeadm init` uploads its `ClusterConfiguration`;
//! - every server's kubelet registers its node and serves port-forward
//!   ([`provider_inmemory::nodes::NodeRegistrar`] with kubelets).
//!
//! A server's Neutron address is not an address of this machine, so its kubelet listens on a
//! loopback stand-in with the same last three octets (`10.64.0.7` → `127.64.0.7`), which the node
//! reports as its `InternalIP`: the workload API server reaches the kubelet there.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use base64::Engine;
use provider_inmemory::cloud::{EtcdProcesses, MemberEvent, UserData, boot};
use provider_inmemory::nodes::{Hosts, RunningHost};
use provider_openstack::cloud::{Compute, Networking, Session};
use tokio::sync::mpsc;

/// The servers tagged `tag`, as booted hosts.
pub(crate) struct NovaHosts {
    session: Session,
    nova: NovaAdmin,
    tag: String,
    members: mpsc::UnboundedSender<MemberEvent>,
    booted: Mutex<BTreeMap<String, Booted>>,
}

/// A server seen ACTIVE, and what its boot did.
struct Booted {
    host: RunningHost,
    init_cluster_configuration: Option<String>,
}

impl NovaHosts {
    /// The booted servers tagged `tag` (one cluster's), and the etcd members of its control
    /// plane, run with the `etcd` binary.
    pub(crate) fn new(
        session: Session,
        nova: NovaAdmin,
        tag: String,
        etcd: &std::path::Path,
    ) -> (Self, EtcdProcesses) {
        let (members, events) = mpsc::unbounded_channel();
        let hosts = Self {
            session,
            nova,
            tag,
            members,
            booted: Mutex::default(),
        };
        (hosts, EtcdProcesses::follow(events, etcd))
    }

    fn booted(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Booted>> {
        self.booted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Boots `server`: reads its user data, starts its etcd member if it is a control plane.
    async fn boot(&self, server: &provider_openstack::cloud::Server) -> Result<Booted, String> {
        let ports = self
            .session
            .ports(&[("device_id".into(), server.id.clone())])
            .await
            .map_err(|e| e.to_string())?;
        let address: Ipv4Addr = ports
            .iter()
            .flat_map(|p| &p.fixed_ips)
            .find_map(|f| f.ip_address.parse().ok())
            .ok_or_else(|| format!("server {} has no IPv4 address yet", server.name))?;
        let user_data = self.nova.user_data(&server.id).await?;
        let etcd_ca = user_data.as_ref().and_then(boot::etcd_ca);
        let control_plane = etcd_ca.is_some();
        if control_plane {
            let _ = self.members.send(MemberEvent::Booted {
                cluster: self.tag.clone(),
                instance: server.name.clone(),
                etcd_ca,
            });
        }
        Ok(Booted {
            host: RunningHost {
                name: server.name.clone(),
                provider_id: format!("openstack:///{}", server.id),
                address: loopback_stand_in(address).to_string(),
                zone: server.availability_zone.clone(),
                control_plane,
                cluster: None,
            },
            init_cluster_configuration: user_data
                .as_ref()
                .and_then(boot::init_cluster_configuration),
        })
    }
}

/// `a.b.c.d` → `127.b.c.d`.
fn loopback_stand_in(address: Ipv4Addr) -> Ipv4Addr {
    let [_, b, c, d] = address.octets();
    Ipv4Addr::new(127, b, c, d)
}

#[async_trait::async_trait]
impl Hosts for NovaHosts {
    async fn running(&self) -> Result<Vec<RunningHost>, String> {
        let servers = self
            .session
            .servers_tagged(&self.tag)
            .await
            .map_err(|e| e.to_string())?;
        let active: Vec<_> = servers.iter().filter(|s| s.status == "ACTIVE").collect();
        for server in &active {
            if self.booted().contains_key(&server.id) {
                continue;
            }
            let booted = self.boot(server).await?;
            self.booted().insert(server.id.clone(), booted);
        }
        let mut booted = self.booted();
        let gone: Vec<String> = booted
            .keys()
            .filter(|id| !active.iter().any(|s| &&s.id == id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(left) = booted.remove(&id)
                && left.host.control_plane
            {
                let _ = self.members.send(MemberEvent::Gone {
                    cluster: self.tag.clone(),
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

/// Nova as the cloud's admin sees it: a server's user data
/// (`OS-EXT-SRV-ATTR:user_data`, microversion 2.3 and later, admin only), which the provider's
/// own session never reads, and the flavor it runs.
#[derive(Clone)]
pub(crate) struct NovaAdmin {
    http: reqwest::Client,
    token: String,
    compute: String,
}

impl NovaAdmin {
    /// Authenticates as cloud `local` of `clouds_yaml` (Keystone v3, password) and finds Nova's
    /// public endpoint in the catalog.
    pub(crate) async fn connect(clouds_yaml: &str) -> Result<Self, String> {
        let cloud = super::local_cloud(clouds_yaml);
        let auth = &cloud["auth"];
        let body = serde_json::json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": auth["username"],
                "domain": {"name": auth["user_domain_name"]},
                "password": auth["password"],
            }}},
            "scope": {"project": {
                "name": auth["project_name"],
                "domain": {"name": auth["project_domain_name"]},
            }},
        }});
        let http = reqwest::Client::new();
        let url = format!(
            "{}/auth/tokens",
            auth["auth_url"].as_str().unwrap_or_default()
        );
        let response = http
            .post(&url)
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| format!("Keystone: {e}"))?;
        let token = response
            .headers()
            .get("X-Subject-Token")
            .and_then(|t| t.to_str().ok())
            .map(str::to_string)
            .ok_or_else(|| format!("Keystone answered {} without a token", response.status()))?;
        let answer: serde_json::Value = serde_json::from_slice(
            &response
                .bytes()
                .await
                .map_err(|e| format!("Keystone: {e}"))?,
        )
        .map_err(|e| format!("Keystone: {e}"))?;
        let compute = answer["token"]["catalog"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|service| service["type"] == "compute")
            .flat_map(|service| service["endpoints"].as_array().into_iter().flatten())
            .find(|endpoint| endpoint["interface"] == "public")
            .and_then(|endpoint| endpoint["url"].as_str())
            .map(|url| url.trim_end_matches('/').to_string())
            .ok_or("no public compute endpoint in the catalog")?;
        Ok(Self {
            http,
            token,
            compute,
        })
    }

    /// Server `id` as Nova shows it to an admin.
    async fn server(&self, id: &str) -> Result<serde_json::Value, String> {
        let response = self
            .http
            .get(format!("{}/servers/{id}", self.compute))
            .header("X-Auth-Token", &self.token)
            .header("OpenStack-API-Version", "compute 2.52")
            .send()
            .await
            .map_err(|e| format!("Nova: {e}"))?;
        if !response.status().is_success() {
            return Err(format!(
                "Nova answered {} for server {id}",
                response.status()
            ));
        }
        let answer: serde_json::Value =
            serde_json::from_slice(&response.bytes().await.map_err(|e| format!("Nova: {e}"))?)
                .map_err(|e| format!("Nova: {e}"))?;
        Ok(answer["server"].clone())
    }

    /// The name of the flavor server `id` runs (microversion 2.47 and later embed it).
    pub(crate) async fn flavor_name(&self, id: &str) -> Result<String, String> {
        let server = self.server(id).await?;
        server["flavor"]["original_name"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("server {id} names no flavor"))
    }

    /// The user data server `id` was created with, if any.
    async fn user_data(&self, id: &str) -> Result<Option<UserData>, String> {
        let server = self.server(id).await?;
        let Some(encoded) = server["OS-EXT-SRV-ATTR:user_data"].as_str() else {
            return Ok(None);
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|e| format!("server {id}'s user data is not base64: {e}"))?;
        let text = String::from_utf8(decoded)
            .map_err(|_| format!("server {id}'s user data is not text (compressed?)"))?;
        Ok(Some(UserData::new(text)))
    }
}
