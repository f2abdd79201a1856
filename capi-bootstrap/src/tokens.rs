//! Bootstrap token Secrets, in the format kubeadm and the API server's bootstrap-token
//! authenticator read: `bootstrap-token-<id>` in `kube-system`, type
//! `bootstrap.kubernetes.io/token`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The namespace bootstrap tokens live in.
pub const NAMESPACE: &str = "kube-system";
/// The Secret type of bootstrap tokens.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// The group kubeadm's join flow expects.
pub const NODE_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// The Secret for `token` (`<id>.<secret>`), expiring `ttl` after `now`. `None` if the token is
/// not in kubeadm's format.
pub fn token_secret(token: &str, ttl: Duration, now: jiff::Timestamp) -> Option<Secret> {
    let (id, secret) = token.split_once('.')?;
    let valid = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    if !valid(id, 6) || !valid(secret, 16) {
        return None;
    }
    let expiration = expiration(ttl, now)?;
    let entry = |k: &str, v: &str| (k.to_string(), ByteString(v.as_bytes().to_vec()));
    Some(Secret {
        metadata: ObjectMeta {
            name: Some(format!("bootstrap-token-{id}")),
            namespace: Some(NAMESPACE.to_string()),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.to_string()),
        data: Some(BTreeMap::from([
            entry("token-id", id),
            entry("token-secret", secret),
            entry("expiration", &expiration),
            entry("usage-bootstrap-authentication", "true"),
            entry("usage-bootstrap-signing", "true"),
            entry("auth-extra-groups", NODE_GROUP),
            entry(
                "description",
                "created by capi-bootstrap for a joining machine",
            ),
        ])),
        ..Secret::default()
    })
}

/// The `expiration` value for a token valid `ttl` from `now` (RFC 3339, UTC).
pub fn expiration(ttl: Duration, now: jiff::Timestamp) -> Option<String> {
    let at = now
        .checked_add(jiff::SignedDuration::try_from(ttl).ok()?)
        .ok()?;
    Some(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_has_kubeadms_shape() {
        let now = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let secret =
            token_secret("abcdef.0123456789abcdef", Duration::from_secs(900), now).unwrap();
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("bootstrap-token-abcdef")
        );
        assert_eq!(secret.type_.as_deref(), Some(SECRET_TYPE));
        let data = secret.data.unwrap();
        assert_eq!(data["token-secret"].0, b"0123456789abcdef");
        assert_eq!(data["expiration"].0, b"2023-11-14T22:28:20Z");
        assert!(token_secret("ABCDEF.0123456789abcdef", Duration::from_secs(1), now).is_none());
        assert!(token_secret("abcdef", Duration::from_secs(1), now).is_none());
    }
}
