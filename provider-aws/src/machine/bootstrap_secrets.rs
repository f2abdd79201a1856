//! Bootstrap data out of EC2 user data, as CAPA's default: the cloud-init data (which holds the
//! cluster's CA keys on a control-plane machine) is gzip-compressed, cut into secrets of at most
//! [`CHUNK`] bytes named `aws.cluster.x-k8s.io/<idempotency key>-<n>`, and the instance's user
//! data is only a script that fetches them, deletes them, and hands the data to cloud-init.
//!
//! The names follow from the machine's idempotency key, so a store retried after a crash
//! overwrites the same secrets and nothing needs recording before the launch. The instance
//! carries the tag [`COUNT_TAG`] with how many there are; the actuator deletes them (and sets the
//! tag to `0`) once the Machine has a node or the instance is gone, and deletes every secret of
//! the key when the machine is deleted, found by name, whatever happened before.

use base64::Engine;
use capi_core::{ActuatorError, BootstrapData, BootstrapFormat};

use super::Ctx;
use super::user_data::gzip;
use crate::api::{AWSMachine, Tags};
use crate::cloud::Instance;

/// The start of every bootstrap data secret's name: CAPA's, so that CAPA's IAM policies
/// (`arn:*:secretsmanager:*:*:secret:aws.cluster.x-k8s.io/*`) grant what instances need.
pub const NAME_PREFIX: &str = "aws.cluster.x-k8s.io/";

/// The most data one secret holds, before base64 (CAPA's size: under Secrets Manager's 10 KiB
/// once encoded).
pub const CHUNK: usize = 7000;

/// The instance tag saying how many bootstrap data secrets are still to delete (`0`: none).
pub const COUNT_TAG: &str = "capi-rs.dev/bootstrap-data-secrets";

/// Where the script leaves the data for cloud-init.
const TARGET: &str = "/etc/capi-rs-bootstrap-data";

/// Whether `infra`'s data of `format` goes through Secrets Manager.
pub fn applies(infra: &AWSMachine, format: BootstrapFormat) -> bool {
    format == BootstrapFormat::CloudConfig
        && !infra
            .spec
            .cloud_init
            .as_ref()
            .is_some_and(|c| c.insecure_skip_secrets_manager)
}

/// The names of the secrets of the machine with idempotency key `key` start with this.
pub fn names_start(key: &str) -> String {
    format!("{NAME_PREFIX}{key}-")
}

/// The name of secret `n` of the machine with idempotency key `key`.
pub fn name(key: &str, n: usize) -> String {
    format!("{}{n}", names_start(key))
}

/// The secrets' contents: `data` gzip-compressed, in pieces of at most [`CHUNK`] bytes.
pub fn chunks(data: &[u8]) -> Vec<Vec<u8>> {
    gzip(data).chunks(CHUNK).map(<[u8]>::to_vec).collect()
}

/// The user data (base64, as `RunInstances` takes it) that fetches `names` in `region`,
/// deletes them, and has cloud-init run what they held. It holds no bootstrap data.
pub fn user_data(names: &[String], region: &str) -> String {
    let boundary = "capi-rs-bootstrap-data";
    let script = format!(
        r#"#cloud-boothook
#!/bin/bash
# Fetches this machine's bootstrap data from Secrets Manager, deletes it there, and has
# cloud-init run it (the include below). Runs again at every boot: once the data is here, it
# does nothing.
set -o errexit -o nounset -o pipefail
umask 077
if [ -f {TARGET} ]; then exit 0; fi
REGION={region}
SECRETS="{names}"
try() {{
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    if "$@"; then return 0; fi
    echo "capi-rs: attempt $attempt of $* failed" >&2
    sleep 10
  done
  return 1
}}
fetch() {{
  aws secretsmanager get-secret-value --region "$REGION" --secret-id "$1" \
    --query SecretBinary --output text | base64 --decode >> {TARGET}.gz.part
}}
forget() {{
  aws secretsmanager delete-secret --region "$REGION" --secret-id "$1" \
    --force-delete-without-recovery > /dev/null
}}
rm -f {TARGET}.gz.part
for secret in $SECRETS; do try fetch "$secret"; done
for secret in $SECRETS; do try forget "$secret"; done
mv {TARGET}.gz.part {TARGET}.gz
gunzip {TARGET}.gz
systemctl restart cloud-init
"#,
        names = names.join(" "),
    );
    let document = format!(
        "Content-Type: multipart/mixed; boundary=\"{boundary}\"\r\nMIME-Version: 1.0\r\n\r\n\
         --{boundary}\r\nContent-Type: text/cloud-boothook; charset=\"us-ascii\"\r\n\
         MIME-Version: 1.0\r\n\r\n{script}\r\n\
         --{boundary}\r\nContent-Type: text/x-include-url; charset=\"us-ascii\"\r\n\
         MIME-Version: 1.0\r\n\r\nfile://{TARGET}\r\n\
         --{boundary}--\r\n"
    );
    base64::engine::general_purpose::STANDARD.encode(document)
}

/// Stores `bootstrap` for the machine of `ctx` and returns the user data that fetches it and how
/// many secrets hold it. The secrets carry the machine's tags (cluster ownership, name, role).
pub(super) async fn store(
    ctx: &Ctx,
    bootstrap: &BootstrapData,
    tags: &Tags,
) -> Result<(String, usize), ActuatorError> {
    let pieces = chunks(bootstrap.expose());
    let mut names = Vec::with_capacity(pieces.len());
    for (n, piece) in pieces.iter().enumerate() {
        let name = name(&ctx.key, n);
        ctx.clients
            .secrets
            .put_secret(&name, piece, tags)
            .await
            .map_err(|e| ctx.clients.error(e))?;
        names.push(name);
    }
    Ok((user_data(&names, &ctx.cluster.spec.region), names.len()))
}

/// How many secrets `instance`'s tag says are still to delete.
pub fn pending(instance: &Instance) -> usize {
    instance
        .tags
        .get(COUNT_TAG)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Deletes the secrets `instance` still has once they are no longer needed: the Machine has a
/// node (`node_registered`: the instance booted and ran its data) or the instance is gone. Then
/// the tag says `0`, so that later reconciles make no call.
pub(super) async fn release_when_done(
    ctx: &Ctx,
    instance: &Instance,
    node_registered: bool,
) -> Result<(), ActuatorError> {
    let count = pending(instance);
    if count == 0 || !(node_registered || instance.is_gone()) {
        return Ok(());
    }
    for n in 0..count {
        ctx.clients
            .secrets
            .delete_secret(&name(&ctx.key, n))
            .await
            .map_err(|e| ctx.clients.error(e))?;
    }
    let done: Tags = [(COUNT_TAG.to_string(), "0".to_string())].into();
    ctx.clients
        .compute
        .create_tags(&instance.id, &done)
        .await
        .map_err(|e| ctx.clients.error(e))?;
    tracing::info!(instance = %instance.id, count, "deleted the bootstrap data secrets");
    Ok(())
}

/// Deletes every secret of the machine of `ctx`, found by name (whatever was recorded): for a
/// machine being deleted.
pub(super) async fn release_all(ctx: &Ctx) -> Result<(), ActuatorError> {
    let names = ctx
        .clients
        .secrets
        .secret_names(&names_start(&ctx.key))
        .await
        .map_err(|e| ctx.clients.error(e))?;
    for name in names {
        ctx.clients
            .secrets
            .delete_secret(&name)
            .await
            .map_err(|e| ctx.clients.error(e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use flate2::read::GzDecoder;

    use super::*;

    #[test]
    fn the_pieces_are_the_compressed_data_in_order_and_none_too_large() {
        // Incompressible enough to need several secrets.
        let data: Vec<u8> = (0..40_000u32)
            .flat_map(|i| (i.wrapping_mul(2_654_435_761)).to_le_bytes())
            .collect();
        let pieces = chunks(&data);
        assert!(pieces.len() > 1, "{}", pieces.len());
        assert!(pieces.iter().all(|p| p.len() <= CHUNK && !p.is_empty()));
        let mut joined = Vec::new();
        GzDecoder::new(pieces.concat().as_slice())
            .read_to_end(&mut joined)
            .unwrap();
        assert_eq!(joined, data);
    }

    #[test]
    fn the_user_data_names_the_secrets_and_holds_no_data() {
        let names = vec![name("capi-1234", 0), name("capi-1234", 1)];
        let encoded = user_data(&names, "eu-west-1");
        let document = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .unwrap(),
        )
        .unwrap();
        assert!(document.starts_with("Content-Type: multipart/mixed"));
        assert!(document.contains("text/cloud-boothook"));
        assert!(document.contains(
            "SECRETS=\"aws.cluster.x-k8s.io/capi-1234-0 aws.cluster.x-k8s.io/capi-1234-1\""
        ));
        assert!(document.contains("REGION=eu-west-1"));
        assert!(document.contains("file:///etc/capi-rs-bootstrap-data"));
        assert!(document.len() < 4096, "{}", document.len());
    }

    #[test]
    fn names_of_one_machine_never_start_like_anothers() {
        assert!(!name("capi-1", 0).starts_with(&names_start("capi-12")));
        assert!(name("capi-1", 10).starts_with(&names_start("capi-1")));
    }
}
