//! The throw-away keys and certificates of a local control plane.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// PEM material for one control plane. ECDSA P-256 throughout: generating it costs microseconds.
pub(crate) struct ControlPlanePki {
    /// The CA that signed the serving certificate; clients trust it.
    pub(crate) ca_pem: String,
    /// The API server's serving certificate (SANs `127.0.0.1`, `localhost`).
    pub(crate) serving_cert_pem: String,
    /// Its key.
    pub(crate) serving_key_pem: String,
    /// The service-account token signing key.
    pub(crate) service_account_key_pem: String,
    /// Its public half, which the API server verifies tokens with.
    pub(crate) service_account_public_pem: String,
}

/// A CA and a serving certificate it signed for `127.0.0.1` and `localhost`.
pub(crate) struct ServingPki {
    /// The CA; clients trust it.
    pub(crate) ca_pem: String,
    /// The serving certificate.
    pub(crate) cert_pem: String,
    /// Its key.
    pub(crate) key_pem: String,
}

impl ServingPki {
    /// A fresh CA and a serving certificate with common name `server`. ECDSA P-256.
    pub(crate) fn generate(server: &str) -> Result<Self, rcgen::Error> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "capi-envtest-ca");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let serving_key = KeyPair::generate()?;
        let mut serving_params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
        serving_params
            .distinguished_name
            .push(DnType::CommonName, server);
        serving_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        serving_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving_params.signed_by(&serving_key, &ca)?;
        Ok(Self {
            ca_pem: ca.pem(),
            cert_pem: serving_cert.pem(),
            key_pem: serving_key.serialize_pem(),
        })
    }
}

impl ControlPlanePki {
    pub(crate) fn generate() -> Result<Self, rcgen::Error> {
        let serving = ServingPki::generate("kube-apiserver")?;
        let service_account = KeyPair::generate()?;
        Ok(Self {
            ca_pem: serving.ca_pem,
            serving_cert_pem: serving.cert_pem,
            serving_key_pem: serving.key_pem,
            service_account_key_pem: service_account.serialize_pem(),
            service_account_public_pem: service_account.public_key_pem(),
        })
    }
}
