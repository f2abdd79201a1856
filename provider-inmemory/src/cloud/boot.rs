//! What a simulated instance reads from its user data when it boots, as the real node does:
//! cloud-init writes the files the bootstrap provider put in `write_files`, and kubeadm finds the
//! cluster's certificates under `/etc/kubernetes/pki`. The simulated cloud keeps user data only
//! to boot the instance; it never reports, logs or returns it.

use base64::Engine;

/// Where kubeadm keeps the etcd CA on a control-plane node.
const ETCD_CA_CERT: &str = "/etc/kubernetes/pki/etcd/ca.crt";
const ETCD_CA_KEY: &str = "/etc/kubernetes/pki/etcd/ca.key";

/// Bootstrap data handed to a simulated instance: kept out of `Debug` and of everything the
/// cloud reports.
#[derive(Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct UserData(String);

impl UserData {
    /// Wraps the bootstrap data the instance boots with.
    pub fn new(data: impl Into<String>) -> Self {
        Self(data.into())
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for UserData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserData({} bytes, redacted)", self.0.len())
    }
}

/// The etcd CA a control-plane node's kubeadm signs its etcd member's certificates with.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdCa {
    /// The CA certificate (PEM).
    pub cert_pem: String,
    /// The CA key (PEM; PKCS#1, SEC1 or PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for EtcdCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCa")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"(redacted)")
            .finish()
    }
}

/// The etcd CA that cloud-init user data (`#cloud-config`, `write_files`) installs, if it
/// installs both its certificate and key. Ignition data and data without them give `None`: the
/// instance's etcd member then serves without TLS.
pub fn etcd_ca(user_data: &UserData) -> Option<EtcdCa> {
    let files = written_files(user_data)?;
    Some(EtcdCa {
        cert_pem: file_content(&files, ETCD_CA_CERT)?,
        key_pem: file_content(&files, ETCD_CA_KEY)?,
    })
}

/// Where the bootstrap provider puts `kubeadm init`'s configuration.
const KUBEADM_INIT_CONFIG: &str = "/run/kubeadm/kubeadm.yaml";

/// The `ClusterConfiguration` document `kubeadm init` reads from cloud-init user data, which
/// kubeadm uploads to the workload cluster as the `kubeadm-config` ConfigMap; `None` for a join
/// or data without one.
pub fn init_cluster_configuration(user_data: &UserData) -> Option<String> {
    let files = written_files(user_data)?;
    let config = file_content(&files, KUBEADM_INIT_CONFIG)?;
    config
        .split("\n---")
        .map(|doc| doc.trim_start_matches('-').trim())
        .find(|doc| {
            doc.lines()
                .any(|line| line.trim() == "kind: ClusterConfiguration")
        })
        .map(|doc| format!("{doc}\n"))
}

fn written_files(user_data: &UserData) -> Option<Vec<serde_json::Value>> {
    let document: serde_json::Value = serde_saphyr::from_str(&user_data.0).ok()?;
    document.get("write_files")?.as_array().cloned()
}

fn file_content(files: &[serde_json::Value], path: &str) -> Option<String> {
    {
        let file = files
            .iter()
            .find(|f| f.get("path").and_then(|p| p.as_str()) == Some(path))?;
        let content = file.get("content")?.as_str()?;
        match file.get("encoding").and_then(|e| e.as_str()) {
            None | Some("text/plain") => Some(content.to_string()),
            Some("b64" | "base64") => base64::engine::general_purpose::STANDARD
                .decode(content.trim())
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok()),
            Some(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_etcd_ca_is_read_from_cloud_init_write_files() {
        let data = UserData::new(
            "## template: jinja\n#cloud-config\nwrite_files:\n\
             - path: /etc/kubernetes/pki/etcd/ca.crt\n  owner: root:root\n  permissions: '0640'\n  content: |\n    CERT\n\
             - path: /etc/kubernetes/pki/etcd/ca.key\n  encoding: b64\n  content: S0VZ\n\
             runcmd:\n  - kubeadm init\n",
        );
        let ca = etcd_ca(&data).unwrap();
        assert_eq!(init_cluster_configuration(&data), None);
        assert_eq!(ca.cert_pem, "CERT\n");
        assert_eq!(ca.key_pem, "KEY");
        assert!(!format!("{ca:?}").contains("KEY\""));
        assert!(!format!("{data:?}").contains("CERT"));
    }

    #[test]
    fn kubeadm_inits_cluster_configuration_is_read() {
        let data = UserData::new(
            "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: |\n    ---\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: ClusterConfiguration\n    clusterName: demo\n    ---\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: InitConfiguration\n",
        );
        assert_eq!(
            init_cluster_configuration(&data).unwrap(),
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nclusterName: demo\n"
        );
    }

    #[test]
    fn a_worker_or_unreadable_data_has_none() {
        let worker = UserData::new(
            "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm-join-config.yaml\n  content: x\n",
        );
        assert_eq!(etcd_ca(&worker), None);
        assert_eq!(etcd_ca(&UserData::new("{\"ignition\": {}}:::")), None);
        assert_eq!(etcd_ca(&UserData::default()), None);
    }
}
