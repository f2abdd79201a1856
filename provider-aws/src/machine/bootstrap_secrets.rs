//! Bootstrap data out of EC2 user data, as CAPA's default: the cloud-init data (which holds the
//! cluster's CA keys on a control-plane machine) is gzip-compressed, cut into secrets of at most
//! [`CHUNK`] bytes named `aws.cluster.x-k8s.io/<idempotency key>-<nonce>-<n>`, and the
//! instance's user data is only a script that fetches them, hands the data to cloud-init and
//! deletes them.
//!
//! The nonce is 128 random bits, new for each store and recorded nowhere but in the instance's
//! user data: no tag or object a node or a tenant can read gives the names away (the
//! idempotency key is on the instance's tags). The instance carries the tag [`COUNT_TAG`] with
//! how many secrets it was given; the actuator deletes every secret of the idempotency key (as
//! Secrets Manager lists them, so also those of a store retried after a crash) once the Machine
//! has a node or the instance is gone, then sets the tag to `0`, and once more when the machine
//! is deleted, after its instance is gone.
//!
//! A pool's secrets ([`crate::pool::model`]) are read by every instance launched from one launch
//! template: that template's user data names them (and its tag, which the manager reads them
//! back from), they are not deleted at boot ([`pool_user_data`]), and they go with the template,
//! at most [`GRACE`](crate::pool::model::GRACE) after the last instance was launched from it.
//!
//! The manager's credentials need `secretsmanager:CreateSecret`, `PutSecretValue`,
//! `TagResource`, `ListSecrets` and `DeleteSecret`; the instance profile `GetSecretValue` and
//! `DeleteSecret` on `arn:*:secretsmanager:*:*:secret:aws.cluster.x-k8s.io/*` (CAPA's node
//! policy), and the AMI the AWS CLI.

use base64::Engine;
use capi_core::{ActuatorError, BootstrapData, BootstrapFormat};
use ring::rand::SecureRandom;

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

/// The instance tag saying how many bootstrap data secrets it was given (`0`: deleted).
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

/// The names of every secret of the machine with idempotency key `key` start with this.
pub fn names_start(key: &str) -> String {
    format!("{NAME_PREFIX}{key}-")
}

/// Whether `name` is the name of a secret stored for idempotency key `key` (by [`names`]: the
/// key, a nonce of 32 hex digits, a number), not merely one starting like it: a key written by
/// hand that is the start of another's (`capi-0f1e2d3c` of `capi-0f1e2d3c-…`) names none of the
/// other's secrets.
pub fn is_stored_for(key: &str, name: &str) -> bool {
    stored_nonce(key, name).is_some()
}

/// The nonce of the store that named `name` for idempotency key `key` (see [`is_stored_for`]).
pub fn stored_nonce<'a>(key: &str, name: &'a str) -> Option<&'a str> {
    let rest = name.strip_prefix(&names_start(key))?;
    let (nonce, number) = rest.split_once('-')?;
    let shaped = nonce.len() == 32
        && nonce.bytes().all(|b| b.is_ascii_hexdigit())
        && !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit());
    shaped.then_some(nonce)
}

/// The names of `count` secrets of one store, for the machine with idempotency key `key`.
pub fn names(key: &str, nonce: &str, count: usize) -> Vec<String> {
    (0..count)
        .map(|n| format!("{}{nonce}-{n}", names_start(key)))
        .collect()
}

/// 128 random bits in hex, from the system's secure generator.
pub(crate) fn nonce() -> Result<String, ActuatorError> {
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| {
            ActuatorError::transient_message(
                "RandomUnavailable",
                "the system's random generator failed",
            )
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The secrets' contents: `data` gzip-compressed, in pieces of at most [`CHUNK`] bytes.
pub fn chunks(data: &[u8]) -> Vec<Vec<u8>> {
    gzip(data).chunks(CHUNK).map(<[u8]>::to_vec).collect()
}

/// The user data (base64, as `RunInstances` takes it) that fetches `names` in `region`, joins
/// and unpacks them for cloud-init, and then deletes them. It holds no bootstrap data. Each
/// fetch goes to a file of its own (a retried fetch replaces it); the data is in place before
/// anything is deleted, and a failed delete does not stop the boot (the manager deletes the
/// secrets once the node registers). At a later boot the script does nothing.
pub fn user_data(names: &[String], region: &str) -> String {
    script(names, region, true)
}

/// The user data of a pool's launch template: as [`user_data`], but the secrets are left in
/// place, for every instance launched from the template (the pool actuator deletes them with
/// the template, once no instance of the pool was launched from it).
pub fn pool_user_data(names: &[String], region: &str) -> String {
    script(names, region, false)
}

fn script(names: &[String], region: &str, forget_after: bool) -> String {
    let forget = if forget_after {
        "for secret in $SECRETS; do try forget \"$secret\" || true; done\n"
    } else {
        ""
    };
    let boundary = "==capi-rs-bootstrap-boundary==";
    let script = format!(
        r#"#cloud-boothook
#!/bin/bash
# Fetches this machine's bootstrap data from Secrets Manager, has cloud-init run it (the include
# below) and deletes it there. Once the data is here, it does nothing.
set -o errexit -o nounset -o pipefail
umask 077
if [ -f {TARGET} ]; then exit 0; fi
REGION='{region}'
SECRETS='{names}'
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
    --query SecretBinary --output text | base64 --decode > "$2"
}}
forget() {{
  aws secretsmanager delete-secret --region "$REGION" --secret-id "$1" \
    --force-delete-without-recovery > /dev/null
}}
rm -f {TARGET}.part.* {TARGET}.gz
count=0
for secret in $SECRETS; do
  try fetch "$secret" "{TARGET}.part.$count"
  count=$((count + 1))
done
for n in $(seq 0 $((count - 1))); do cat "{TARGET}.part.$n"; done > {TARGET}.gz
rm -f {TARGET}.part.*
gunzip {TARGET}.gz
{forget}systemctl restart cloud-init
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

/// Stores `bootstrap` for the machine of `ctx` under fresh names and returns the user data that
/// fetches it and how many secrets hold it. The secrets carry `tags`.
pub(super) async fn store(
    ctx: &Ctx,
    bootstrap: &BootstrapData,
    tags: &Tags,
) -> Result<(String, usize), ActuatorError> {
    let pieces = chunks(bootstrap.expose());
    let names = names(&ctx.key, &nonce()?, pieces.len());
    for (name, piece) in names.iter().zip(&pieces) {
        ctx.clients
            .secrets
            .put_secret(name, piece, tags)
            .await
            .map_err(|e| ctx.clients.error(e))?;
    }
    Ok((user_data(&names, &ctx.cluster.spec.region), names.len()))
}

/// Whether `instance` was given secrets that were not deleted yet.
pub fn pending(instance: &Instance) -> bool {
    instance
        .tags
        .get(COUNT_TAG)
        .is_some_and(|count| count.as_str() != "0")
}

/// Deletes the secrets `instance` was given once they are no longer needed: the Machine has a
/// node (`node_registered`: the instance booted and ran its data) or the instance is gone. Then
/// the tag says `0`, so that later reconciles make no call.
pub(super) async fn release_when_done(
    ctx: &Ctx,
    instance: &Instance,
    node_registered: bool,
) -> Result<(), ActuatorError> {
    if !pending(instance) || !(node_registered || instance.is_gone()) {
        return Ok(());
    }
    let deleted = release(ctx).await?;
    let done: Tags = [(COUNT_TAG.to_string(), "0".to_string())].into();
    ctx.clients
        .compute
        .create_tags(&instance.id, &done)
        .await
        .map_err(|e| ctx.clients.error(e))?;
    tracing::info!(instance = %instance.id, deleted, "deleted the bootstrap data secrets");
    Ok(())
}

/// Deletes every secret of the machine of `ctx` that Secrets Manager lists, and says how many.
pub(super) async fn release(ctx: &Ctx) -> Result<usize, ActuatorError> {
    let names: Vec<String> = ctx
        .clients
        .secrets
        .secret_names(&names_start(&ctx.key))
        .await
        .map_err(|e| ctx.clients.error(e))?
        .into_iter()
        .filter(|name| is_stored_for(&ctx.key, name))
        .collect();
    for name in &names {
        ctx.clients
            .secrets
            .delete_secret(name)
            .await
            .map_err(|e| ctx.clients.error(e))?;
    }
    Ok(names.len())
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
        let names = names("capi-1234", "00ff", 2);
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
            "SECRETS='aws.cluster.x-k8s.io/capi-1234-00ff-0 aws.cluster.x-k8s.io/capi-1234-00ff-1'"
        ));
        assert!(document.contains("REGION='eu-west-1'"));
        assert!(document.contains("file:///etc/capi-rs-bootstrap-data"));
        assert!(document.len() < 4096, "{}", document.len());
    }

    #[test]
    fn only_names_of_a_keys_own_stores_are_its_secrets() {
        let own = names("capi-0f1e2d3c", &nonce().unwrap(), 1);
        assert!(is_stored_for("capi-0f1e2d3c", &own[0]));
        let longer = names("capi-0f1e2d3c-aaaa-bbbb", &nonce().unwrap(), 1);
        assert!(
            !is_stored_for("capi-0f1e2d3c", &longer[0]),
            "a key that is the start of another names none of its secrets"
        );
        assert!(!is_stored_for(
            "capi-0f1e2d3c",
            "aws.cluster.x-k8s.io/capi-0f1e2d3c-ab-0"
        ));
        assert!(!is_stored_for(
            "capi-0f1e2d3c",
            "aws.cluster.x-k8s.io/capi-0f1e2d3c-"
        ));
    }

    #[test]
    fn a_pools_user_data_leaves_the_secrets_for_the_next_instance() {
        let names = names("capi-1234", "00ff", 1);
        let decode = |encoded: String| {
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .unwrap(),
            )
            .unwrap()
        };
        let machine = decode(user_data(&names, "eu-west-1"));
        let pool = decode(pool_user_data(&names, "eu-west-1"));
        assert!(machine.contains("try forget \"$secret\""));
        assert!(!pool.contains("try forget"), "{pool}");
        assert!(pool.contains("SECRETS='aws.cluster.x-k8s.io/capi-1234-00ff-0'"));
        assert!(pool.contains("systemctl restart cloud-init"));
    }

    #[test]
    fn names_of_one_machine_never_start_like_anothers_and_no_two_stores_share_them() {
        let first = names("capi-1", &nonce().unwrap(), 11);
        assert!(!first[0].starts_with(&names_start("capi-12")));
        assert!(first[10].starts_with(&names_start("capi-1")));
        let second = names("capi-1", &nonce().unwrap(), 11);
        assert!(first.iter().all(|name| !second.contains(name)));
        assert_eq!(
            first[0].len(),
            "aws.cluster.x-k8s.io/capi-1-".len() + 32 + 2
        );
    }
}
