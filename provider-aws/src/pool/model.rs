//! The launch templates of a pool: what its instances are launched from, one template per model
//! revision (and per bootstrap data, where the data cannot be replaced in place), each of one
//! version — a new version of a template in use would change what the group launches before
//! the loop decided it.
//!
//! Cloud-init data goes through Secrets Manager as for a machine
//! ([`crate::machine::bootstrap_secrets`]), in secrets named after the pool's idempotency key
//! and 128 random bits chosen when the template is made; the template's user data fetches them
//! and leaves them for the next instance. When the data changes (a kubeadm bootstrap provider
//! rotates a pool's join token every few minutes) and fits one secret, that secret's value is
//! replaced — one atomic write, so an instance fetching it meanwhile gets the old data or the
//! new, never a mix — and no new template is made: the running instances are not outdated.
//! Data of several secrets, or in plain user data, makes a new template.
//!
//! A template, and its secrets, go once the group launches from another one and no instance of
//! the group was launched from it.

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
/// names.
pub const SECRETS_TAG: &str = "capi-rs.dev/bootstrap-data-secrets";

/// The tag EC2 puts on an instance launched from a template, naming it.
pub const LAUNCHED_FROM_TAG: &str = "aws:ec2launchtemplate:id";

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

    /// What, beside the revision, sets a template apart: data that can be replaced in place
    /// (one secret) does not.
    fn identity(&self, data_digest: &str) -> String {
        match self {
            Self::Secrets(pieces) if pieces.len() == 1 => "secrets-1".to_string(),
            Self::Secrets(pieces) => format!("secrets-{}-{data_digest}", pieces.len()),
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

/// The template of `revision` delivering `bootstrap`: found among `templates` (its secrets
/// given the data when it changed), or made.
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
        if let Delivery::Secrets(pieces) = &delivery
            && template.tags.get(DATA_DIGEST_TAG) != Some(&data_digest)
        {
            replace_data(ctx, template, pieces, &data_digest).await?;
        }
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

/// Puts new data into the one secret of `template` (atomically), then records its digest.
async fn replace_data(
    ctx: &PoolCtx,
    template: &LaunchTemplate,
    pieces: &[Vec<u8>],
    data_digest: &str,
) -> Result<(), ActuatorError> {
    let names = secret_names(ctx, template).ok_or_else(|| {
        ActuatorError::transient_message(
            "LaunchTemplateUnreadable",
            format!(
                "launch template {} does not name its bootstrap data secrets ({SECRETS_TAG})",
                template.id
            ),
        )
    })?;
    if names.len() != pieces.len() {
        return Err(ActuatorError::transient_message(
            "LaunchTemplateUnreadable",
            format!(
                "launch template {} holds {} secrets, the data needs {}",
                template.id,
                names.len(),
                pieces.len()
            ),
        ));
    }
    for (name, piece) in names.iter().zip(pieces) {
        ctx.clients()
            .secrets
            .put_secret(name, piece, &secret_tags(ctx))
            .await
            .map_err(|e| ctx.clients().error(e))?;
    }
    let recorded: Tags = [(DATA_DIGEST_TAG.to_string(), data_digest.to_string())].into();
    ctx.clients()
        .scaling
        .tag_launch_template(&template.id, &recorded)
        .await
        .map_err(|e| ctx.clients().error(e))?;
    tracing::info!(template = %template.id, "replaced the pool's bootstrap data");
    Ok(())
}

/// The names of the secrets of `template`, from its [`SECRETS_TAG`].
fn secret_names(ctx: &PoolCtx, template: &LaunchTemplate) -> Option<Vec<String>> {
    let (nonce, count) = template.tags.get(SECRETS_TAG)?.rsplit_once('-')?;
    let count: usize = count.parse().ok()?;
    Some(bootstrap_secrets::names(&ctx.machine.key, nonce, count))
}

/// The nonce of the secrets of `template`, if its data is in Secrets Manager.
fn nonce_of(template: &LaunchTemplate) -> Option<&str> {
    template
        .tags
        .get(SECRETS_TAG)
        .and_then(|tag| tag.rsplit_once('-'))
        .map(|(nonce, _)| nonce)
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

/// Deletes the templates of `templates` (listed before `current` may have been made) the group
/// no longer needs — neither `current` nor one an instance in `in_use` was launched from — and
/// every secret of the pool no remaining template names.
pub(super) async fn sweep(
    ctx: &PoolCtx,
    templates: &[LaunchTemplate],
    current: &LaunchTemplate,
    in_use: &BTreeSet<String>,
) -> Result<(), ActuatorError> {
    let (mut kept, gone): (Vec<&LaunchTemplate>, Vec<&LaunchTemplate>) = templates
        .iter()
        .partition(|t| t.id == current.id || in_use.contains(&t.id));
    kept.push(current);
    for template in gone {
        ctx.clients()
            .scaling
            .delete_launch_template(&template.id)
            .await
            .map_err(|e| ctx.clients().error(e))?;
        tracing::info!(template = %template.id, "deleted a launch template no instance uses");
    }
    let nonces: BTreeSet<&str> = kept.into_iter().filter_map(nonce_of).collect();
    release_secrets(ctx, &nonces).await
}

/// Deletes every template of the pool and every secret.
pub(super) async fn release(ctx: &PoolCtx) -> Result<(), ActuatorError> {
    for template in templates(ctx).await? {
        ctx.clients()
            .scaling
            .delete_launch_template(&template.id)
            .await
            .map_err(|e| ctx.clients().error(e))?;
    }
    release_secrets(ctx, &BTreeSet::new()).await
}

/// Deletes the pool's secrets but those of `keep` (nonces).
async fn release_secrets(ctx: &PoolCtx, keep: &BTreeSet<&str>) -> Result<(), ActuatorError> {
    let start = bootstrap_secrets::names_start(&ctx.machine.key);
    let names = ctx
        .clients()
        .secrets
        .secret_names(&start)
        .await
        .map_err(|e| ctx.clients().error(e))?;
    for name in names {
        let nonce = name
            .strip_prefix(&start)
            .and_then(|rest| rest.split('-').next())
            .unwrap_or_default();
        if keep.contains(nonce) {
            continue;
        }
        ctx.clients()
            .secrets
            .delete_secret(&name)
            .await
            .map_err(|e| ctx.clients().error(e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_secret_of_data_keeps_its_template_other_data_makes_another() {
        let revision = ModelRevision::new("r-1");
        let one = Delivery::Secrets(vec![vec![1]]);
        assert_eq!(
            template_name("capi-k", &revision, &one.identity("aaaa")),
            template_name("capi-k", &revision, &one.identity("bbbb")),
            "a rotated token reaches the template's one secret, not a new template"
        );
        let two = Delivery::Secrets(vec![vec![1], vec![2]]);
        assert_ne!(
            template_name("capi-k", &revision, &two.identity("aaaa")),
            template_name("capi-k", &revision, &two.identity("bbbb"))
        );
        let plain = Delivery::UserData("x".into());
        assert_ne!(
            template_name("capi-k", &revision, &plain.identity("aaaa")),
            template_name("capi-k", &revision, &plain.identity("bbbb"))
        );
        assert_ne!(
            template_name("capi-k", &revision, &one.identity("aaaa")),
            template_name("capi-k", &ModelRevision::new("r-2"), &one.identity("aaaa")),
            "a new revision is a new template"
        );
        assert!(template_name("capi-k", &revision, "x").starts_with("capi-k-"));
    }

    #[test]
    fn a_templates_secrets_are_read_off_its_tag() {
        let template = LaunchTemplate {
            id: "lt-1".into(),
            name: "n".into(),
            tags: [(SECRETS_TAG.to_string(), "00ff-2".to_string())].into(),
        };
        assert_eq!(nonce_of(&template), Some("00ff"));
        let untagged = LaunchTemplate::default();
        assert_eq!(nonce_of(&untagged), None);
    }
}
