//! The launch templates of a pool: what its instances are launched from, one template per model
//! revision and bootstrap data, each of one version — a new version of a template in use would
//! change what the group launches before the loop decided it.
//!
//! Cloud-init data goes through Secrets Manager as for a machine
//! ([`crate::machine::bootstrap_secrets`]), in secrets named after the pool's idempotency key
//! and 128 random bits chosen when the template is made; the template's user data fetches them
//! and leaves them for the next instance. When the data changes (a kubeadm bootstrap provider
//! rotates a pool's join token every few minutes) a new template is made, with secrets of its
//! own, and the group launches from it: the running instances are not outdated (the revision is
//! the same), and no secret is ever given a new value (Secrets Manager keeps each version of a
//! secret for a day, and a value replaced every few minutes would reach its quota of versions).
//!
//! A template that is not the group's goes, with its secrets, once no instance of the group was
//! launched from it in the last [`GRACE`]: every instance launched from it has fetched its data
//! by then, or never will (the join token in it has expired). Secrets are deleted with their
//! template (named by its [`SECRETS_TAG`]), those no template names once older than [`GRACE`]
//! (stored by a creation that failed after them), and all of the pool's once the pool is gone.

use std::collections::BTreeSet;

use capi_core::{ActuatorError, BootstrapData, ModelRevision};
use sha2::{Digest, Sha256};

use super::PoolCtx;
use crate::api::Tags;
use crate::cloud::{CreateLaunchTemplate, LaunchTemplate};
use crate::machine::{bootstrap_secrets, launch, user_data};
use crate::naming::IDEMPOTENCY_KEY_TAG;

/// The tag of a template (and of every instance launched from it) naming the model revision.
pub const REVISION_TAG: &str = "capi-rs.dev/model-revision";

/// The tag of a template naming, by digest, the bootstrap data it delivers.
pub const DATA_DIGEST_TAG: &str = "capi-rs.dev/bootstrap-data-digest";

/// The tag of a template whose data is in Secrets Manager: `<nonce>-<count>` of its secrets'
/// names (which its user data holds too).
pub const SECRETS_TAG: &str = "capi-rs.dev/bootstrap-data-secrets";

/// The tag EC2 puts on an instance launched from a template, naming it.
pub const LAUNCHED_FROM_TAG: &str = "aws:ec2launchtemplate:id";

/// How long a template that is not the group's is kept after an instance was last launched from
/// it.
pub const GRACE: std::time::Duration = std::time::Duration::from_secs(20 * 60);

/// A short digest of `parts`, for names and tags: 16 hex digits of their SHA-256.
fn digest(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How `bootstrap` reaches the instances of a template.
enum Delivery {
    /// In Secrets Manager, in these pieces.
    Secrets(Vec<Vec<u8>>),
    /// As the template's user data (base64).
    UserData(String),
}

impl Delivery {
    fn of(ctx: &PoolCtx, bootstrap: &BootstrapData) -> Result<Self, ActuatorError> {
        if bootstrap_secrets::applies(&ctx.machine.infra, bootstrap.format()) {
            return Ok(Self::Secrets(bootstrap_secrets::chunks(bootstrap.expose())));
        }
        user_data::encode(bootstrap)
            .map(Self::UserData)
            .map_err(|e| ActuatorError::invalid_configuration("UserDataTooLarge", e.to_string()))
    }

    /// What, beside the revision, sets a template apart: how its data is delivered, and the
    /// data's digest.
    fn identity(&self, data_digest: &str) -> String {
        match self {
            Self::Secrets(_) => format!("secrets-{data_digest}"),
            Self::UserData(_) => format!("data-{data_digest}"),
        }
    }
}

/// The name of the template of `revision` and `identity` for the pool of `key`.
pub(super) fn template_name(key: &str, revision: &ModelRevision, identity: &str) -> String {
    format!(
        "{key}-{}",
        digest(&[revision.as_str().as_bytes(), identity.as_bytes()])
    )
}

/// The pool's templates: those tagged with its idempotency key and its cluster's ownership.
pub(super) async fn templates(ctx: &PoolCtx) -> Result<Vec<LaunchTemplate>, ActuatorError> {
    let mut found = ctx
        .clients()
        .scaling
        .launch_templates(IDEMPOTENCY_KEY_TAG, &ctx.machine.key)
        .await
        .map_err(|e| ctx.clients().error(e))?;
    found.retain(|t| {
        ctx.machine
            .naming
            .owns(t.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    });
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// The template of `revision` delivering `bootstrap`: found among `templates`, or made (its
/// secrets stored first).
pub(super) async fn ensure(
    ctx: &PoolCtx,
    templates: &[LaunchTemplate],
    revision: &ModelRevision,
    bootstrap: &BootstrapData,
) -> Result<LaunchTemplate, ActuatorError> {
    let delivery = Delivery::of(ctx, bootstrap)?;
    let data_digest = digest(&[bootstrap.expose()]);
    let name = template_name(&ctx.machine.key, revision, &delivery.identity(&data_digest));
    if let Some(template) = templates.iter().find(|t| t.name == name) {
        return Ok(template.clone());
    }
    let request = plan(ctx, &name, revision, &delivery, &data_digest).await?;
    match ctx.clients().scaling.create_launch_template(&request).await {
        Ok(template) => {
            tracing::info!(template = %template.id, %revision, "made a launch template");
            Ok(template)
        }
        // Made by an earlier attempt whose answer was lost: that one, once listed.
        Err(error)
            if error
                .code
                .as_deref()
                .is_some_and(|c| c.ends_with("AlreadyExistsException")) =>
        {
            let listed = self::templates(ctx).await?;
            listed.into_iter().find(|t| t.name == name).ok_or_else(|| {
                ActuatorError::requeue_after(
                    std::time::Duration::from_secs(2),
                    "LaunchTemplateNotVisibleYet",
                    format!("launch template {name} exists but is not listed yet"),
                )
            })
        }
        Err(error) if error.code.as_deref() == Some("InvalidInstanceType") => {
            Err(launch::unknown_instance_type(&request.instance_type))
        }
        Err(error) => Err(ctx.clients().error(error)),
    }
}

/// The names of the secrets of `template`, from its [`SECRETS_TAG`].
fn secret_names(ctx: &PoolCtx, template: &LaunchTemplate) -> Option<Vec<String>> {
    let (nonce, count) = template.tags.get(SECRETS_TAG)?.rsplit_once('-')?;
    let count: usize = count.parse().ok()?;
    Some(bootstrap_secrets::names(&ctx.machine.key, nonce, count))
}

/// The tags of the pool's secrets: the cluster's ownership and the pool's key (not the user's
/// tags, whose characters Secrets Manager may refuse).
fn secret_tags(ctx: &PoolCtx) -> Tags {
    let mut tags = ctx.machine.naming.tags(
        crate::naming::instance_role(false),
        &ctx.machine.name,
        &Tags::new(),
    );
    tags.insert(IDEMPOTENCY_KEY_TAG.to_string(), ctx.machine.key.clone());
    tags
}

/// The `CreateLaunchTemplate` of a new template (its secrets stored first, under a new nonce).
async fn plan(
    ctx: &PoolCtx,
    name: &str,
    revision: &ModelRevision,
    delivery: &Delivery,
    data_digest: &str,
) -> Result<CreateLaunchTemplate, ActuatorError> {
    let machine = &ctx.machine;
    let image = launch::image(machine).await?;
    let root_volume = launch::root_volume(machine, &image)?;
    let security_group_ids = launch::security_groups(machine).await?;
    let mut tags = secret_tags(ctx);
    tags.insert(REVISION_TAG.to_string(), revision.to_string());
    tags.insert(DATA_DIGEST_TAG.to_string(), data_digest.to_string());
    let mut instance_tags = ctx.instance_tags();
    instance_tags.insert(REVISION_TAG.to_string(), revision.to_string());
    // Stored last, once everything else of the template is known to be there.
    let user_data = match delivery {
        Delivery::UserData(user_data) => user_data.clone(),
        Delivery::Secrets(pieces) => {
            let nonce = bootstrap_secrets::nonce()?;
            let names = bootstrap_secrets::names(&machine.key, &nonce, pieces.len());
            for (name, piece) in names.iter().zip(pieces) {
                machine
                    .clients
                    .secrets
                    .put_secret(name, piece, &secret_tags(ctx))
                    .await
                    .map_err(|e| machine.clients.error(e))?;
            }
            tags.insert(SECRETS_TAG.to_string(), format!("{nonce}-{}", names.len()));
            bootstrap_secrets::pool_user_data(&names, &machine.cluster.spec.region)
        }
    };
    let spec = &machine.infra.spec;
    Ok(CreateLaunchTemplate {
        name: name.to_string(),
        image_id: image.id,
        instance_type: spec.instance_type.clone(),
        security_group_ids,
        user_data,
        key_name: launch::key_name(machine),
        iam_instance_profile: spec.iam_instance_profile.clone(),
        root_volume,
        spot: spec.spot_market_options.clone(),
        metadata_options: spec
            .instance_metadata_options
            .clone()
            .unwrap_or_default()
            .resolve(),
        instance_tags,
        tags,
    })
}

/// Deletes the templates of `templates` the group no longer needs — neither `current` nor one
/// an instance was launched from in the last [`GRACE`] (`recent`) — each with its secrets.
pub(super) async fn sweep(
    ctx: &PoolCtx,
    templates: &[LaunchTemplate],
    current: &LaunchTemplate,
    recent: &BTreeSet<String>,
) -> Result<(), ActuatorError> {
    for template in templates
        .iter()
        .filter(|t| t.id != current.id && !recent.contains(&t.id))
    {
        delete(ctx, template).await?;
        tracing::info!(template = %template.id, "deleted a launch template no instance needs");
    }
    // Secrets a creation stored and no template came to name (it failed after them): once older
    // than the grace, no template listed late can still be theirs.
    let named: BTreeSet<&str> = templates
        .iter()
        .chain(std::iter::once(current))
        .filter_map(nonce_of)
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let before = i64::try_from(now.saturating_sub(GRACE.as_secs())).unwrap_or_default();
    let key = &ctx.machine.key;
    let stored = ctx
        .clients()
        .secrets
        .secrets(&bootstrap_secrets::names_start(key))
        .await
        .map_err(|e| ctx.clients().error(e))?;
    for secret in stored {
        let orphan = bootstrap_secrets::stored_nonce(key, &secret.name)
            .is_some_and(|nonce| !named.contains(nonce))
            && secret.created.is_some_and(|created| created < before);
        if orphan {
            ctx.clients()
                .secrets
                .delete_secret(&secret.name)
                .await
                .map_err(|e| ctx.clients().error(e))?;
        }
    }
    Ok(())
}

/// The nonce of the secrets of `template`, if its data is in Secrets Manager.
fn nonce_of(template: &LaunchTemplate) -> Option<&str> {
    template
        .tags
        .get(SECRETS_TAG)?
        .rsplit_once('-')
        .map(|(nonce, _)| nonce)
}

/// Deletes the secrets of `template`, then the template (which names them: a failure in
/// between leaves nothing unnamed).
async fn delete(ctx: &PoolCtx, template: &LaunchTemplate) -> Result<(), ActuatorError> {
    for name in secret_names(ctx, template).unwrap_or_default() {
        ctx.clients()
            .secrets
            .delete_secret(&name)
            .await
            .map_err(|e| ctx.clients().error(e))?;
    }
    ctx.clients()
        .scaling
        .delete_launch_template(&template.id)
        .await
        .map_err(|e| ctx.clients().error(e))
}

/// Deletes every template of the pool with its secrets, then every secret of the pool a
/// template never named (stored by a creation that failed after it).
pub(super) async fn release(ctx: &PoolCtx) -> Result<(), ActuatorError> {
    for template in templates(ctx).await? {
        delete(ctx, &template).await?;
    }
    let names = ctx
        .clients()
        .secrets
        .secret_names(&bootstrap_secrets::names_start(&ctx.machine.key))
        .await
        .map_err(|e| ctx.clients().error(e))?;
    for name in names
        .iter()
        .filter(|name| bootstrap_secrets::is_stored_for(&ctx.machine.key, name))
    {
        ctx.clients()
            .secrets
            .delete_secret(name)
            .await
            .map_err(|e| ctx.clients().error(e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_data_or_another_revision_makes_another_template() {
        let revision = ModelRevision::new("r-1");
        let secrets = Delivery::Secrets(vec![vec![1]]);
        assert_ne!(
            template_name("capi-k", &revision, &secrets.identity("aaaa")),
            template_name("capi-k", &revision, &secrets.identity("bbbb")),
            "a rotated token is a new template"
        );
        let plain = Delivery::UserData("x".into());
        assert_ne!(
            template_name("capi-k", &revision, &plain.identity("aaaa")),
            template_name("capi-k", &revision, &secrets.identity("aaaa"))
        );
        assert_ne!(
            template_name("capi-k", &revision, &secrets.identity("aaaa")),
            template_name(
                "capi-k",
                &ModelRevision::new("r-2"),
                &secrets.identity("aaaa")
            ),
            "a new revision is a new template"
        );
        assert_eq!(
            template_name("capi-k", &revision, &secrets.identity("aaaa")),
            template_name("capi-k", &revision, &secrets.identity("aaaa"))
        );
        assert!(template_name("capi-k", &revision, "x").starts_with("capi-k-"));
    }
}
