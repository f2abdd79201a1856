//! The cluster PKI: CAs, the service-account key, client certificates, bootstrap tokens.
//!
//! Generated with `rcgen` (ECDSA P-256: a key costs microseconds, where RSA-2048 costs
//! milliseconds — DESIGN.md §10's known trap), stored in the Secrets upstream names
//! (`<cluster>-ca`, `<cluster>-etcd`, `<cluster>-proxy`, `<cluster>-sa`, keys `tls.crt`/`tls.key`),
//! and written to `/etc/kubernetes/pki` on control-plane machines so that kubeadm uses them instead
//! of generating its own. Each key is generated exactly once per cluster.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData,
};

use crate::render::PlanFile;
use crate::secret::SECRET_TYPE;

/// How long generated CAs are valid.
pub const CA_VALIDITY_DAYS: i64 = 3650;
/// How long generated client certificates are valid.
pub const CLIENT_VALIDITY_DAYS: i64 = 365;

/// A PKI operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PkiError {
    /// Key or certificate generation failed.
    #[error("generating keys or certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// Stored key material is missing or unreadable.
    #[error("Secret {secret}: {reason}")]
    Stored {
        /// The Secret.
        secret: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The system's random number generator failed.
    #[error("the system random number generator failed")]
    Random,
}

/// A certificate authority: its certificate and its (secret) key.
pub struct CertificateAuthority {
    common_name: String,
    cert_pem: String,
    key: KeyPair,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("common_name", &self.common_name)
            .finish_non_exhaustive()
    }
}

fn validity(params: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(days);
}

/// A leaf certificate's parameters: subject `common_name`, subject alternative `names`, a key
/// for signatures and key exchange.
fn leaf_params(common_name: &str, names: Vec<String>) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(names)?;
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    Ok(params)
}

fn ca_params(common_name: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

impl CertificateAuthority {
    /// A new self-signed CA.
    pub fn generate(common_name: &str) -> Result<Self, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = ca_params(common_name)?;
        validity(&mut params, CA_VALIDITY_DAYS);
        let cert_pem = params.self_signed(&key)?.pem();
        Ok(Self {
            common_name: common_name.to_string(),
            cert_pem,
            key,
        })
    }

    /// A CA loaded from its certificate and key PEM (as stored in its Secret). `common_name` must
    /// be the CA's subject common name, so that certificates it issues chain to it.
    pub fn from_pem(common_name: &str, cert_pem: &str, key_pem: &str) -> Result<Self, PkiError> {
        let key = KeyPair::from_pem(key_pem)?;
        Ok(Self {
            common_name: common_name.to_string(),
            cert_pem: cert_pem.to_string(),
            key,
        })
    }

    /// The certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The private key, PEM. Secret: never log it.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// The pin `kubeadm join --discovery-token-ca-cert-hash` expects: `sha256:` and the hex SHA-256
    /// of the CA's SubjectPublicKeyInfo.
    pub fn cert_hash(&self) -> String {
        let digest =
            ring::digest::digest(&ring::digest::SHA256, &self.key.subject_public_key_info());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }

    /// Issues a client certificate for `common_name` in `organizations`; returns certificate and
    /// key PEM.
    pub fn issue_client(
        &self,
        common_name: &str,
        organizations: &[&str],
    ) -> Result<(String, String), PkiError> {
        let key = KeyPair::generate()?;
        let mut params = leaf_params(common_name, Vec::new())?;
        for organization in organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *organization);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        validity(&mut params, CLIENT_VALIDITY_DAYS);
        let issuer = Issuer::new(ca_params(&self.common_name)?, &self.key);
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

impl CertificateAuthority {
    /// Issues a serving certificate for `names` (DNS names or IP addresses, as kubeadm puts in an
    /// etcd or API server certificate); returns certificate and key PEM. Used where this crate
    /// stands in for a node (tests, simulated clouds); kubeadm issues the real ones on the node.
    pub fn issue_serving(
        &self,
        common_name: &str,
        names: &[&str],
    ) -> Result<(String, String), PkiError> {
        let key = KeyPair::generate()?;
        let mut params = leaf_params(common_name, names.iter().map(|n| n.to_string()).collect())?;
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        validity(&mut params, CLIENT_VALIDITY_DAYS);
        let issuer = Issuer::new(ca_params(&self.common_name)?, &self.key);
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// Everything a cluster's control plane needs, generated once per cluster.
#[derive(Debug)]
pub struct ClusterPki {
    /// The cluster CA (`kubernetes`).
    pub ca: CertificateAuthority,
    /// The etcd CA.
    pub etcd: CertificateAuthority,
    /// The front-proxy CA.
    pub front_proxy: CertificateAuthority,
    service_account: KeyPair,
}

/// The suffixes of the PKI Secrets: `<cluster>-<suffix>`.
pub const SECRET_SUFFIXES: [&str; 4] = capi_core::cluster_objects::PKI;

impl ClusterPki {
    /// Generates the three CAs and the service-account key: four keys, once.
    pub fn generate() -> Result<Self, PkiError> {
        Ok(Self {
            ca: CertificateAuthority::generate("kubernetes")?,
            etcd: CertificateAuthority::generate("etcd-ca")?,
            front_proxy: CertificateAuthority::generate("front-proxy-ca")?,
            service_account: KeyPair::generate()?,
        })
    }

    /// Loads the PKI from its four Secrets (as written by [`ClusterPki::secrets`]).
    pub fn from_secrets(cluster: &str, secrets: &[Secret]) -> Result<Self, PkiError> {
        let get = |suffix: &str| -> Result<(String, String), PkiError> {
            let name = format!("{cluster}-{suffix}");
            let missing = |reason: &str| PkiError::Stored {
                secret: name.clone(),
                reason: reason.to_string(),
            };
            let secret = secrets
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(name.as_str()))
                .ok_or_else(|| missing("not found"))?;
            let data = secret.data.as_ref().ok_or_else(|| missing("has no data"))?;
            let text = |key: &str| {
                data.get(key)
                    .and_then(|v| String::from_utf8(v.0.clone()).ok())
                    .ok_or_else(|| missing(&format!("has no UTF-8 key {key}")))
            };
            Ok((text("tls.crt")?, text("tls.key")?))
        };
        let (ca_crt, ca_key) = get("ca")?;
        let (etcd_crt, etcd_key) = get("etcd")?;
        let (proxy_crt, proxy_key) = get("proxy")?;
        let (_, sa_key) = get("sa")?;
        Ok(Self {
            ca: CertificateAuthority::from_pem("kubernetes", &ca_crt, &ca_key)?,
            etcd: CertificateAuthority::from_pem("etcd-ca", &etcd_crt, &etcd_key)?,
            front_proxy: CertificateAuthority::from_pem("front-proxy-ca", &proxy_crt, &proxy_key)?,
            service_account: KeyPair::from_pem(&sa_key)?,
        })
    }

    /// The four Secrets, named and shaped as upstream's: type `cluster.x-k8s.io/secret`, the
    /// cluster-name label, keys `tls.crt` and `tls.key` (for `-sa`: public and private key).
    pub fn secrets(
        &self,
        cluster: &str,
        namespace: &str,
        owner: Option<OwnerReference>,
    ) -> Vec<Secret> {
        let pairs = [
            ("ca", self.ca.cert_pem().to_string(), self.ca.key_pem()),
            (
                "etcd",
                self.etcd.cert_pem().to_string(),
                self.etcd.key_pem(),
            ),
            (
                "proxy",
                self.front_proxy.cert_pem().to_string(),
                self.front_proxy.key_pem(),
            ),
            (
                "sa",
                self.service_account.public_key_pem(),
                self.service_account.serialize_pem(),
            ),
        ];
        pairs
            .into_iter()
            .map(|(suffix, crt, key)| Secret {
                metadata: ObjectMeta {
                    name: Some(format!("{cluster}-{suffix}")),
                    namespace: Some(namespace.to_string()),
                    labels: Some(BTreeMap::from([(
                        capi_core::labels::CLUSTER_NAME.to_string(),
                        cluster.to_string(),
                    )])),
                    owner_references: owner.clone().map(|o| vec![o]),
                    ..ObjectMeta::default()
                },
                type_: Some(SECRET_TYPE.to_string()),
                data: Some(BTreeMap::from([
                    ("tls.crt".to_string(), ByteString(crt.into_bytes())),
                    ("tls.key".to_string(), ByteString(key.into_bytes())),
                ])),
                ..Secret::default()
            })
            .collect()
    }

    /// The files kubeadm expects in `/etc/kubernetes/pki` on control-plane machines.
    pub fn control_plane_files(&self) -> Vec<PlanFile> {
        let dir = "/etc/kubernetes/pki";
        vec![
            PlanFile::new(format!("{dir}/ca.crt"), 0o640, self.ca.cert_pem()),
            PlanFile::new(format!("{dir}/ca.key"), 0o600, self.ca.key_pem()),
            PlanFile::new(format!("{dir}/etcd/ca.crt"), 0o640, self.etcd.cert_pem()),
            PlanFile::new(format!("{dir}/etcd/ca.key"), 0o600, self.etcd.key_pem()),
            PlanFile::new(
                format!("{dir}/front-proxy-ca.crt"),
                0o640,
                self.front_proxy.cert_pem(),
            ),
            PlanFile::new(
                format!("{dir}/front-proxy-ca.key"),
                0o600,
                self.front_proxy.key_pem(),
            ),
            PlanFile::new(
                format!("{dir}/sa.pub"),
                0o640,
                self.service_account.public_key_pem(),
            ),
            PlanFile::new(
                format!("{dir}/sa.key"),
                0o600,
                self.service_account.serialize_pem(),
            ),
        ]
    }

    /// A kubeconfig for `kubernetes-admin` (group `system:masters`) at `server`, as the
    /// `<cluster>-kubeconfig` Secret's `value`. Secret: it holds a client key.
    pub fn admin_kubeconfig(&self, cluster: &str, server: &str) -> Result<String, PkiError> {
        use base64::Engine;
        let (cert, key) = self
            .ca
            .issue_client("kubernetes-admin", &["system:masters"])?;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let user = format!("{cluster}-admin");
        let context = format!("{user}@{cluster}");
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": b64(self.ca.cert_pem())}}],
            "users": [{"name": user, "user": {"client-certificate-data": b64(&cert), "client-key-data": b64(&key)}}],
            "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
            "current-context": context,
        });
        // JSON is YAML: kubectl and every client read it.
        Ok(serde_json::to_string_pretty(&config).unwrap_or_default())
    }
}

/// A new bootstrap token in kubeadm's format, `[a-z0-9]{6}.[a-z0-9]{16}`, from the system's
/// cryptographic random number generator.
pub fn bootstrap_token() -> Result<String, PkiError> {
    use ring::rand::SecureRandom;
    const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 22];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| PkiError::Random)?;
    // 252 = 7 × 36: rejecting bytes ≥ 252 would be unbiased; the bias of a plain modulo here is
    // below 2 % per character and irrelevant for a short-lived token, but keep it exact anyway.
    let mut chars = Vec::with_capacity(22);
    let mut pool = bytes.to_vec();
    while chars.len() < 22 {
        match pool.pop() {
            Some(byte) if byte < 252 => chars.push(ALPHABET[usize::from(byte % 36)]),
            Some(_) => {}
            None => {
                let mut more = [0u8; 22];
                ring::rand::SystemRandom::new()
                    .fill(&mut more)
                    .map_err(|_| PkiError::Random)?;
                pool.extend_from_slice(&more);
            }
        }
    }
    let text = String::from_utf8(chars).map_err(|_| PkiError::Random)?;
    Ok(format!("{}.{}", &text[..6], &text[6..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_have_kubeadms_format_and_differ() {
        let a = bootstrap_token().unwrap();
        let b = bootstrap_token().unwrap();
        assert_ne!(a, b);
        let (id, secret) = a.split_once('.').unwrap();
        assert_eq!((id.len(), secret.len()), (6, 16));
        assert!(
            a.chars()
                .all(|c| c == '.' || c.is_ascii_lowercase() || c.is_ascii_digit())
        );
    }

    #[test]
    fn ca_hash_is_a_sha256_pin_that_survives_a_reload() {
        let ca = CertificateAuthority::generate("kubernetes").unwrap();
        let hash = ca.cert_hash();
        assert!(
            hash.starts_with("sha256:") && hash.len() == 7 + 64,
            "{hash}"
        );
        let reloaded =
            CertificateAuthority::from_pem("kubernetes", ca.cert_pem(), &ca.key_pem()).unwrap();
        assert_eq!(reloaded.cert_hash(), hash);
    }

    #[test]
    fn secrets_round_trip_and_follow_upstream_names() {
        let pki = ClusterPki::generate().unwrap();
        let secrets = pki.secrets("demo", "ns", None);
        let names: Vec<_> = secrets
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        assert_eq!(names, ["demo-ca", "demo-etcd", "demo-proxy", "demo-sa"]);
        assert!(
            secrets
                .iter()
                .all(|s| s.type_.as_deref() == Some(SECRET_TYPE))
        );
        let loaded = ClusterPki::from_secrets("demo", &secrets).unwrap();
        assert_eq!(loaded.ca.cert_hash(), pki.ca.cert_hash());
        assert_eq!(loaded.control_plane_files().len(), 8);
        let error = ClusterPki::from_secrets("other", &secrets).unwrap_err();
        assert!(error.to_string().contains("other-ca"), "{error}");
    }

    #[test]
    fn debug_never_shows_keys() {
        let pki = ClusterPki::generate().unwrap();
        let shown = format!("{pki:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    }
}
