//! The OpenStack cloud provider's `cloud.conf` and the cloud's CA bundle, contributed to the
//! bootstrap data of the machines whose `OpenStackMachine` asks for it (`spec.writeCloudConf:
//! true`, usually in the control plane's machine template) through the kubeadm bootstrap
//! reconciler's provider hook ([`BootstrapFiles`]), as CAPO's templates used to do by hand.
//!
//! Anyone who can read a node's disk or its metadata service can then act as the project:
//! give the cluster's `clouds.yaml` a scoped application credential rather than a user's
//! password — `openstack application credential create --role member --expiration … \
//! --access-rules …` limited to the compute, network and load-balancer calls the cloud
//! controller manager makes, in a project that holds only this cluster — and leave
//! `writeCloudConf` off on workers, which do not need it.
//!
//! A machine that asks for it gets:
//! - [`CLOUD_CONF_PATH`] (`root:root`, mode `0600`): `[Global]` with the cluster's credentials
//!   (the same cloud of the same `clouds.yaml` Secret the provider uses), region, CA file or
//!   `tls-insecure`; `[LoadBalancer]` with the cluster's subnet and, when the external network
//!   is given by ID, `floating-network-id`;
//! - [`CA_BUNDLE_PATH`] (`0644`), when the Secret has a `cacert`.
//!
//! Both end up only in the bootstrap-data Secret. Errors name the object and the field to fix,
//! never a value of the Secret.

use async_trait::async_trait;
use capi_bootstrap::controller::BootstrapFiles;
use capi_bootstrap::render::PlanFile;
use capi_core::api::{Cluster, Machine};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};

use crate::api::{GROUP, OpenStackCluster, OpenStackMachine};
use crate::credentials::{self, Auth, Credentials, ProjectRef, UserRef};

/// Where the cloud provider's configuration is written on the node (what the external
/// openstack-cloud-controller-manager and the kubelet's `--cloud-config` read).
pub const CLOUD_CONF_PATH: &str = "/etc/kubernetes/cloud.conf";
/// Where the CA bundle is written; `cloud.conf` points `ca-file` at it.
pub const CA_BUNDLE_PATH: &str = "/etc/certs/cacert";

/// The bootstrap hook: adds `cloud.conf` (and the CA bundle) for the machines of clusters whose
/// infrastructure is an `OpenStackCluster` and whose `OpenStackMachine` sets `writeCloudConf`;
/// nothing for other machines or clusters (so it can be combined with other providers' hooks).
#[derive(Clone, Copy, Debug, Default)]
pub struct CloudConfFiles;

#[async_trait]
impl BootstrapFiles for CloudConfFiles {
    async fn files(
        &self,
        client: &kube::Client,
        cluster: &Cluster,
        machine: &Machine,
    ) -> Result<Vec<PlanFile>, String> {
        let namespace = cluster.namespace().unwrap_or_default();
        let infra = &machine.spec.infrastructure_ref;
        if infra.api_group != GROUP || infra.kind != "OpenStackMachine" {
            return Ok(Vec::new());
        }
        let wanted = Api::<OpenStackMachine>::namespaced(client.clone(), &namespace)
            .get_opt(&infra.name)
            .await
            .map_err(|e| format!("reading OpenStackMachine {namespace}/{}: {e}", infra.name))?
            .ok_or_else(|| format!("OpenStackMachine {namespace}/{} does not exist", infra.name))?
            .spec
            .write_cloud_conf
            == Some(true);
        if !wanted {
            return Ok(Vec::new());
        }
        let Some(reference) = cluster
            .spec
            .infrastructure_ref
            .as_ref()
            .filter(|r| r.api_group == GROUP && r.kind == "OpenStackCluster")
        else {
            return Ok(Vec::new());
        };
        let clusters: Api<OpenStackCluster> = Api::namespaced(client.clone(), &namespace);
        let openstack = clusters
            .get_opt(&reference.name)
            .await
            .map_err(|e| {
                format!(
                    "reading OpenStackCluster {namespace}/{}: {e}",
                    reference.name
                )
            })?
            .ok_or_else(|| {
                format!(
                    "OpenStackCluster {namespace}/{} does not exist",
                    reference.name
                )
            })?;
        let identity = &openstack.spec.identity_ref;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
        let secret = secrets
            .get_opt(&identity.name)
            .await
            .map_err(|e| format!("reading Secret {namespace}/{}: {e}", identity.name))?
            .ok_or_else(|| {
                format!(
                    "the identityRef Secret {namespace}/{} of OpenStackCluster {} does not exist",
                    identity.name, reference.name
                )
            })?;
        let credentials =
            credentials::from_secret(&secret, &identity.cloud_name, identity.region.as_deref())
                .map_err(|e| e.to_string())?;
        Ok(files(&credentials, &openstack))
    }
}

/// The files for a node of `cluster` authenticating with `credentials`.
pub fn files(credentials: &Credentials, cluster: &OpenStackCluster) -> Vec<PlanFile> {
    let file = |path: &str, mode, content: Vec<u8>| PlanFile {
        path: path.to_string(),
        user: "root".into(),
        group: "root".into(),
        mode,
        content,
        append: false,
        gzip: false,
    };
    let mut files = vec![file(
        CLOUD_CONF_PATH,
        0o600,
        render(credentials, cluster).into_bytes(),
    )];
    if let Some(bundle) = &credentials.ca_bundle {
        files.push(file(CA_BUNDLE_PATH, 0o644, bundle.clone()));
    }
    files
}

/// `cloud.conf` for the cloud provider: INI (gcfg) with every value quoted and escaped, so no
/// value can end a line or start a section.
pub fn render(credentials: &Credentials, cluster: &OpenStackCluster) -> String {
    let mut global = vec![("auth-url", credentials.auth_url.clone())];
    match &credentials.auth {
        Auth::Password {
            user,
            password,
            project,
        } => {
            match user {
                UserRef::Id(id) => global.push(("user-id", id.clone())),
                UserRef::Name { name, domain } => {
                    global.push(("username", name.clone()));
                    global.push(("user-domain-name", domain.clone()));
                }
            }
            global.push(("password", password.clone()));
            match project {
                ProjectRef::Id(id) => global.push(("tenant-id", id.clone())),
                ProjectRef::Name { name, domain } => {
                    global.push(("tenant-name", name.clone()));
                    global.push(("tenant-domain-name", domain.clone()));
                }
            }
        }
        Auth::ApplicationCredential { id, secret } => {
            global.push(("application-credential-id", id.clone()));
            global.push(("application-credential-secret", secret.clone()));
        }
    }
    if let Some(region) = &credentials.region {
        global.push(("region", region.clone()));
    }
    if credentials.interface != "public" {
        global.push(("os-endpoint-type", credentials.interface.clone()));
    }
    if credentials.ca_bundle.is_some() {
        global.push(("ca-file", CA_BUNDLE_PATH.to_string()));
    }
    if !credentials.verify {
        global.push(("tls-insecure", "true".to_string()));
    }
    let mut load_balancer = Vec::new();
    let status = cluster.status.as_ref();
    if let Some(subnet) = status.and_then(|s| s.subnets.first()) {
        load_balancer.push(("subnet-id", subnet.id.clone()));
    }
    if let Some(network) = status.and_then(|s| s.network.as_ref()) {
        load_balancer.push(("network-id", network.id.clone()));
    }
    if let Some(id) = cluster
        .spec
        .external_network
        .as_ref()
        .and_then(|n| n.id.clone())
    {
        load_balancer.push(("floating-network-id", id));
    }
    let mut out = String::new();
    section(&mut out, "Global", &global);
    if !load_balancer.is_empty() {
        out.push('\n');
        section(&mut out, "LoadBalancer", &load_balancer);
    }
    out
}

fn section(out: &mut String, name: &str, entries: &[(&str, String)]) {
    out.push_str(&format!("[{name}]\n"));
    for (key, value) in entries {
        out.push_str(&format!("{key} = {}\n", quote(value)));
    }
}

/// A gcfg quoted string: backslash, quote and control characters escaped.
fn quote(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\u{8}' => quoted.push_str("\\b"),
            // gcfg has no escape for other control characters; they cannot be meant.
            c if c.is_control() => {}
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use serde_json::json;

    use super::*;

    fn secret(clouds_yaml: &str, cacert: Option<&str>) -> Secret {
        let mut data = BTreeMap::new();
        data.insert(
            credentials::CLOUDS_YAML_KEY.to_string(),
            ByteString(clouds_yaml.as_bytes().to_vec()),
        );
        if let Some(ca) = cacert {
            data.insert(
                credentials::CACERT_KEY.to_string(),
                ByteString(ca.as_bytes().to_vec()),
            );
        }
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("creds".into()),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        }
    }

    fn cluster() -> OpenStackCluster {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackCluster",
            "metadata": {"name": "demo", "namespace": "ns"},
            "spec": {"identityRef": {"name": "creds", "cloudName": "prod"},
                     "externalNetwork": {"id": "ext-1"}},
            "status": {"network": {"id": "net-1", "name": "n"},
                       "subnets": [{"id": "sub-1", "name": "s"}]}
        }))
        .unwrap()
    }

    /// Parses the rendered INI back (sections, keys, unescaped values) the way gcfg reads it.
    fn parse(text: &str) -> BTreeMap<(String, String), String> {
        let mut section = String::new();
        let mut out = BTreeMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_string();
                continue;
            }
            let (key, value) = line.split_once(" = ").unwrap();
            let inner = value.strip_prefix('"').unwrap().strip_suffix('"').unwrap();
            let mut unescaped = String::new();
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    match chars.next().unwrap() {
                        'n' => unescaped.push('\n'),
                        't' => unescaped.push('\t'),
                        'b' => unescaped.push('\u{8}'),
                        other => unescaped.push(other),
                    }
                } else {
                    assert_ne!(c, '"', "an unescaped quote ends the value early: {line}");
                    unescaped.push(c);
                }
            }
            out.insert((section.clone(), key.to_string()), unescaped);
        }
        out
    }

    #[test]
    fn password_credentials_become_the_global_section_and_the_cluster_network_the_load_balancer_one()
     {
        let yaml = r#"
clouds:
  prod:
    auth: {auth_url: "https://keystone.example:5000/v3", username: admin, password: "p\"a\\ss\nword",
           project_name: demo, user_domain_name: Users, project_domain_name: Projects}
    region_name: RegionTwo
"#;
        let creds = credentials::from_secret(&secret(yaml, Some("PEM")), "prod", None).unwrap();
        let files = files(&creds, &cluster());
        assert_eq!(files.len(), 2);
        assert_eq!(
            (files[0].path.as_str(), files[0].mode),
            (CLOUD_CONF_PATH, 0o600)
        );
        assert_eq!(
            (files[1].path.as_str(), files[1].content.as_slice()),
            (CA_BUNDLE_PATH, b"PEM".as_slice())
        );
        let text = String::from_utf8(files[0].content.clone()).unwrap();
        let conf = parse(&text);
        let get = |s: &str, k: &str| conf.get(&(s.to_string(), k.to_string())).cloned();
        assert_eq!(
            get("Global", "auth-url").as_deref(),
            Some("https://keystone.example:5000/v3")
        );
        assert_eq!(get("Global", "username").as_deref(), Some("admin"));
        assert_eq!(
            get("Global", "password").as_deref(),
            Some("p\"a\\ss\nword"),
            "quotes, backslashes and newlines survive, escaped"
        );
        assert_eq!(get("Global", "tenant-name").as_deref(), Some("demo"));
        assert_eq!(get("Global", "user-domain-name").as_deref(), Some("Users"));
        assert_eq!(
            get("Global", "tenant-domain-name").as_deref(),
            Some("Projects")
        );
        assert_eq!(get("Global", "region").as_deref(), Some("RegionTwo"));
        assert_eq!(get("Global", "ca-file").as_deref(), Some(CA_BUNDLE_PATH));
        assert_eq!(get("Global", "tls-insecure"), None);
        assert_eq!(get("LoadBalancer", "subnet-id").as_deref(), Some("sub-1"));
        assert_eq!(get("LoadBalancer", "network-id").as_deref(), Some("net-1"));
        assert_eq!(
            get("LoadBalancer", "floating-network-id").as_deref(),
            Some("ext-1")
        );
        assert_eq!(
            text.lines().filter(|l| l.starts_with('[')).count(),
            2,
            "no value opens a section: {text}"
        );
    }

    #[test]
    fn application_credentials_without_ca_or_verification() {
        let yaml = r#"
clouds:
  prod:
    auth_type: v3applicationcredential
    auth: {auth_url: "https://k/v3", application_credential_id: app-1, application_credential_secret: s3cr3t}
    verify: false
    interface: internal
"#;
        let creds = credentials::from_secret(&secret(yaml, None), "prod", Some("East")).unwrap();
        let mut bare = cluster();
        bare.status = None;
        let files = files(&creds, &bare);
        assert_eq!(files.len(), 1, "no CA bundle file without a cacert key");
        let conf = parse(&String::from_utf8(files[0].content.clone()).unwrap());
        let get = |k: &str| conf.get(&("Global".to_string(), k.to_string())).cloned();
        assert_eq!(get("application-credential-id").as_deref(), Some("app-1"));
        assert_eq!(
            get("application-credential-secret").as_deref(),
            Some("s3cr3t")
        );
        assert_eq!(get("password"), None);
        assert_eq!(get("region").as_deref(), Some("East"));
        assert_eq!(get("tls-insecure").as_deref(), Some("true"));
        assert_eq!(get("os-endpoint-type").as_deref(), Some("internal"));
        assert_eq!(get("ca-file"), None);
        assert_eq!(
            conf.get(&("LoadBalancer".into(), "subnet-id".into())),
            None,
            "no subnet known yet"
        );
    }
}
