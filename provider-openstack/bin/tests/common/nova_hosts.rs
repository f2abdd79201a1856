//! The boot of the local OpenStack's servers, simulated: Nova's fake driver boots no VM, so a
//! [`FakeHypervisor`] plays the part of what would run in each ACTIVE server of a cluster, from
//! the server's user data as Nova's admin API shows it (what cloud-init would read from the
//! metadata service) and its Neutron address.

use std::net::Ipv4Addr;

use base64::Engine;
use provider_inmemory::cloud::{EtcdProcesses, UserData};
use provider_inmemory::fake_hypervisor::{BootData, CloudServers, FakeHypervisor, Server};
use provider_openstack::cloud::{Compute, Networking, Session};

/// The servers tagged `tag` (one cluster's), as Nova and Neutron show them.
pub(crate) struct NovaServers {
    session: Session,
    nova: NovaAdmin,
    tag: String,
}

/// The booted servers tagged `tag` (one cluster's), and the etcd members of its control
/// plane, run with the `etcd` binary.
pub(crate) fn nova_hosts(
    session: Session,
    nova: NovaAdmin,
    tag: String,
    etcd: &std::path::Path,
) -> (FakeHypervisor<NovaServers>, EtcdProcesses) {
    let cluster = tag.clone();
    FakeHypervisor::new(NovaServers { session, nova, tag }, cluster, etcd)
}

#[async_trait::async_trait]
impl CloudServers for NovaServers {
    async fn running(&self) -> Result<Vec<Server>, String> {
        let servers = self
            .session
            .servers_tagged(&self.tag)
            .await
            .map_err(|e| e.to_string())?;
        Ok(servers
            .into_iter()
            .filter(|s| s.status == "ACTIVE")
            .map(|s| Server {
                provider_id: format!("openstack:///{}", s.id),
                id: s.id,
                name: s.name,
                zone: s.availability_zone,
            })
            .collect())
    }

    async fn boot_data(&self, server: &Server) -> Result<BootData, String> {
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
        Ok(BootData {
            address,
            user_data: self.nova.user_data(&server.id).await?,
        })
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
