//! One cluster's EC2 instances as a [`CloudServers`]: moto runs no VM, so a
//! [`provider_inmemory::fake_hypervisor::FakeHypervisor`] boots each `running` instance from the
//! user data EC2 keeps for it (`DescribeInstanceAttribute userData`, what cloud-init reads from
//! the instance metadata service; gunzipped when the provider compressed it). User data that is
//! the provider's Secrets Manager script is run as the instance would: the secrets it names are
//! fetched, joined and gunzipped, and deleted when the script deletes them (a machine's does, a
//! pool's leaves them for the next instance). An instance's node
//! is named by its private DNS name, as kubeadm names it with the templates'
//! `{{ ds.meta_data.local_hostname }}`.

use std::io::Read;
use std::net::Ipv4Addr;

use aws_sdk_ec2::types::{Filter, InstanceAttributeName};
use base64::Engine;
use provider_inmemory::cloud::UserData;
use provider_inmemory::fake_hypervisor::{BootData, CloudServers, Server};

/// The `running` instances carrying the provider's tag of cluster `<namespace>/<name>`.
pub struct Ec2Servers {
    pub ec2: aws_sdk_ec2::Client,
    pub secrets: aws_sdk_secretsmanager::Client,
    pub cluster: String,
}

#[async_trait::async_trait]
impl CloudServers for Ec2Servers {
    async fn running(&self) -> Result<Vec<Server>, String> {
        let answer = self
            .ec2
            .describe_instances()
            .filters(super::census::owned(&self.cluster))
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .values("running")
                    .build(),
            )
            .send()
            .await
            .map_err(|e| format!("DescribeInstances: {e}"))?;
        Ok(answer
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(|i| {
                let id = i.instance_id()?.to_string();
                let zone = i.placement().and_then(|p| p.availability_zone());
                Some(Server {
                    name: i
                        .private_dns_name()
                        .filter(|n| !n.is_empty())
                        .unwrap_or(&id)
                        .to_string(),
                    provider_id: format!("aws:///{}/{id}", zone.unwrap_or_default()),
                    zone: zone.map(str::to_string),
                    id,
                })
            })
            .collect())
    }

    async fn boot_data(&self, server: &Server) -> Result<BootData, String> {
        let described = self
            .ec2
            .describe_instances()
            .instance_ids(&server.id)
            .send()
            .await
            .map_err(|e| format!("DescribeInstances: {e}"))?;
        let address: Ipv4Addr = described
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find_map(|i| i.private_ip_address()?.parse().ok())
            .ok_or_else(|| format!("instance {} has no private address yet", server.id))?;
        let attribute = self
            .ec2
            .describe_instance_attribute()
            .instance_id(&server.id)
            .attribute(InstanceAttributeName::UserData)
            .send()
            .await
            .map_err(|e| format!("DescribeInstanceAttribute: {e}"))?;
        let user_data = match attribute.user_data().and_then(|v| v.value()) {
            None | Some("") => None,
            Some(encoded) => {
                let text = decode(encoded).map_err(|e| format!("{}: {e}", server.id))?;
                Some(UserData::new(self.fetched(&text).await?.unwrap_or(text)))
            }
        };
        Ok(BootData { address, user_data })
    }
}

impl Ec2Servers {
    /// What the provider's boot script (`SECRETS='…'` in a `text/cloud-boothook` part) hands
    /// cloud-init: the secrets' values joined and gunzipped, each secret deleted once read if the
    /// script deletes it; `None` for other user data.
    async fn fetched(&self, script: &str) -> Result<Option<String>, String> {
        if !script.contains("text/cloud-boothook") {
            return Ok(None);
        }
        let names = script
            .lines()
            .find_map(|l| l.strip_prefix("SECRETS='"))
            .and_then(|l| l.strip_suffix('\''))
            .ok_or("a boot script without SECRETS")?;
        let mut compressed = Vec::new();
        for name in names.split(' ') {
            let value = self
                .secrets
                .get_secret_value()
                .secret_id(name)
                .send()
                .await
                .map_err(|e| format!("GetSecretValue {name}: {e}"))?;
            let bytes = value
                .secret_binary()
                .ok_or("a secret without SecretBinary")?;
            compressed.extend_from_slice(bytes.as_ref());
        }
        let forgets = script.contains("try forget");
        for name in names.split(' ').filter(|_| forgets) {
            self.secrets
                .delete_secret()
                .secret_id(name)
                .force_delete_without_recovery(true)
                .send()
                .await
                .map_err(|e| format!("DeleteSecret {name}: {e}"))?;
        }
        let mut text = String::new();
        flate2::read::GzDecoder::new(compressed.as_slice())
            .read_to_string(&mut text)
            .map_err(|e| format!("the secrets do not gunzip to text: {e}"))?;
        Ok(Some(text))
    }
}

/// EC2's base64 of the user data, decoded and, when it is gzip, decompressed.
fn decode(encoded: &str) -> Result<String, String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("user data is not base64: {e}"))?;
    let text = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut text = String::new();
        flate2::read::GzDecoder::new(raw.as_slice())
            .read_to_string(&mut text)
            .map_err(|e| format!("gzip user data does not decompress to text: {e}"))?;
        text
    } else {
        String::from_utf8(raw).map_err(|_| "user data is not text".to_string())?
    };
    Ok(text)
}
