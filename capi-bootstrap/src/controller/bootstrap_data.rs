//! A config's bootstrap data: rendered once into its Secret, or data rendered before kept as the
//! config's. The Secret is owned by the config and labelled with the cluster; a joining
//! machine's carries the ID of its join token, which is kept valid until the machine joins.
//!
//! A `MachinePool`'s config is the one exception to "rendered once": every instance the pool
//! launches, now or in a month, boots from the same Secret, so its join token cannot be kept
//! valid by extending it until one machine joins. As upstream's bootstrap provider does for
//! pools, the token is rotated instead: once less than half its TTL is left, a new token is made
//! and the Secret's data rendered again with it (same name, same configuration), so that a new
//! instance always gets a token valid for at least half the TTL; the old token expires on its own.

use std::ops::ControlFlow::{self, Break, Continue};

use crate::api::Format;
use crate::cluster_pki::EnsureError;
use crate::init_lock::{InitLock, LockState};
use crate::pki::{ClusterPki, bootstrap_token};
use crate::render::{self, ClusterFacts, KubernetesVersion, PlanFile, RenderInput, Role};
use crate::secret::BootstrapSecret;
use capi_core::BootstrapFormat;
use capi_core::api::Cluster;
use capi_core::condition::{self, ConditionStatus};
use capi_runtime::plan::Next;
use capi_runtime::reasons;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};

use super::join_token::{create_join_token, delete_join_token, refresh_join_token};
use super::reconcile::{Failure, OwnedBy, Owner, Scope};

/// The annotation on a bootstrap data Secret naming its join token's ID (not its secret).
pub(crate) const TOKEN_ID_ANNOTATION: &str = "bootstrap.cluster.x-k8s.io/token-id";

/// The annotation on a `MachinePool`'s bootstrap data Secret saying when its join token expires
/// (RFC 3339): the token is rotated once less than half its TTL is left.
pub(crate) const TOKEN_EXPIRES_ANNOTATION: &str = "bootstrap.cluster.x-k8s.io/token-expires";

/// A config's rendered data: recorded in its status, or found as its Secret (a render that
/// did not get as far as the status).
pub(super) enum DataSecret {
    Recorded(String),
    Found(Box<Secret>),
}

/// Renders a config's bootstrap data into its Secret: `scope.data_secret_name` is set when the
/// config has data (this render's, or an earlier one's found by the create).
pub(super) async fn render(scope: &mut Scope<'_>, owner: &Owner) -> Result<(), Failure> {
    let Some((role, secret)) = prepare(scope, owner).await? else {
        return Ok(());
    };
    create_data_secret(scope, owner, &role, secret).await
}

/// The role and the data Secret (not created) of a render, or `None` when the plan says what
/// it waits for.
async fn prepare(scope: &mut Scope<'_>, owner: &Owner) -> Result<Option<(Role, Secret)>, Failure> {
    let cluster = owner.cluster.as_ref();
    let endpoint = cluster
        .spec
        .control_plane_endpoint
        .clone()
        .filter(|e| e.is_valid());
    let Some(endpoint) = endpoint.filter(|_| cluster.infrastructure_provisioned()) else {
        scope.plan.condition(
            condition::READY,
            ConditionStatus::False,
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            "waiting for the cluster infrastructure and its control plane endpoint",
        );
        return Ok(None);
    };
    let Some(version) = owner.version() else {
        let field = match owner.owned_by {
            OwnedBy::Machine(_) => "the Machine has no spec.version",
            OwnedBy::Pool(_) => "the MachinePool has no spec.template.spec.version",
        };
        return Err(Failure::Invalid(
            reasons::VERSION_MISSING,
            format!("{field}; kubeadm needs one"),
        ));
    };
    let version = KubernetesVersion::parse(version)
        .map_err(|e| Failure::Invalid(reasons::VERSION_MISSING, e.to_string()))?;

    let server = format!("https://{}:{}", endpoint.host, endpoint.port);
    let pki_key = format!("{}/{server}", cluster.uid().unwrap_or_default());
    let pki = match scope.owners.pki.get(&pki_key) {
        Some(pki) => pki,
        None => scope
            .owners
            .pki
            .put(pki_key, ensure_pki(&scope.secrets, cluster, &server).await?),
    };
    let role = match choose_role(scope, owner, &pki).await? {
        Continue(role) => role,
        Break(()) => return Ok(None),
    };
    let resolved_files = resolve_files(scope).await?;
    let extra_files = extra_files(scope, owner, &role, &pki).await?;
    let input = RenderInput {
        spec: &scope.config.spec,
        role: role.clone(),
        version,
        cluster: cluster_facts(cluster, &endpoint.host, endpoint.port),
        resolved_files,
        extra_files,
    };
    let secret = data_secret(scope, cluster, &input)?;
    Ok(Some((role, secret)))
}

/// The machine's role: the first control-plane machine to take the init lock initialises the
/// cluster; other machines wait until it is initialised (`Break` when the plan says so), then
/// join with a new bootstrap token.
async fn choose_role(
    scope: &mut Scope<'_>,
    owner: &Owner,
    pki: &ClusterPki,
) -> Result<ControlFlow<(), Role>, Failure> {
    let cluster = owner.cluster.as_ref();
    let initialized = cluster
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.control_plane_initialized)
        .unwrap_or(false);
    let control_plane = owner.is_control_plane();
    if control_plane && !initialized {
        let lock = InitLock::new(
            scope.context.client.clone(),
            &scope.namespace,
            &cluster.name_any(),
        );
        return match lock.try_acquire(&owner.name(), &owner.uid).await? {
            LockState::Acquired => Ok(Continue(Role::Init { token: token()? })),
            LockState::HeldBy(holder) => Err(Failure::Waiting(
                reasons::WAITING_FOR_CONTROL_PLANE_INITIALIZATION,
                format!(
                    "machine {holder:?} is initialising the control plane; this one joins afterwards"
                ),
            )),
        };
    }
    if !initialized {
        scope.plan.condition(
            condition::READY,
            ConditionStatus::False,
            reasons::WAITING_FOR_CONTROL_PLANE_INITIALIZATION,
            "waiting for the control plane to be initialised before joining",
        );
        return Ok(Break(()));
    }
    let token = token()?;
    let ca_cert_hashes = vec![pki.ca.cert_hash()];
    Ok(Continue(if control_plane {
        Role::JoinControlPlane {
            token,
            ca_cert_hashes,
        }
    } else {
        Role::JoinWorker {
            token,
            ca_cert_hashes,
        }
    }))
}

/// File contents and password hashes the config keeps in Secrets, read by `(secret, key)`; a
/// missing key is waited for.
async fn resolve_files(scope: &Scope<'_>) -> Result<Vec<((String, String), Vec<u8>)>, Failure> {
    let spec = &scope.config.spec;
    let mut resolved_files = Vec::new();
    let sources = spec
        .files
        .iter()
        .filter_map(|f| Some((format!("file {}", f.path), &f.content_from.as_ref()?.secret)))
        .chain(spec.users.iter().filter_map(|u| {
            Some((
                format!("password of user {}", u.name),
                &u.passwd_from.as_ref()?.secret,
            ))
        }));
    for (what, source) in sources {
        let value = scope
            .secrets
            .get_opt(&source.name)
            .await?
            .and_then(|s| s.data)
            .and_then(|d| d.get(&source.key).cloned());
        let Some(ByteString(bytes)) = value else {
            return Err(Failure::Waiting(
                reasons::WAITING_FOR_FILE_SECRET,
                format!(
                    "{what}: waiting for key {:?} of Secret {:?}",
                    source.key, source.name
                ),
            ));
        };
        resolved_files.push(((source.name.clone(), source.key.clone()), bytes));
    }
    Ok(resolved_files)
}

/// The files besides the user's: the cluster certificates for a control-plane machine, then
/// each provider hook's, in order.
async fn extra_files(
    scope: &Scope<'_>,
    owner: &Owner,
    role: &Role,
    pki: &ClusterPki,
) -> Result<Vec<PlanFile>, Failure> {
    let mut extra_files = match role {
        Role::Init { .. } | Role::JoinControlPlane { .. } => pki.control_plane_files(),
        Role::JoinWorker { .. } => Vec::new(),
    };
    for hook in &scope.context.state.extra_files {
        let files = hook
            .files(&scope.context.client, &owner.cluster, &owner.as_machine())
            .await
            .map_err(|message| {
                Failure::Waiting(
                    reasons::WAITING_FOR_PROVIDER_FILES,
                    format!("provider files: {message}"),
                )
            })?;
        extra_files.extend(files);
    }
    Ok(extra_files)
}

/// The data Secret of `input`, rendered in the config's format and owned by the config (not
/// created yet).
fn data_secret(
    scope: &Scope<'_>,
    cluster: &Cluster,
    input: &RenderInput<'_>,
) -> Result<Secret, Failure> {
    let config = scope.config;
    let rendered = render::plan(input)
        .map_err(|e| Failure::Invalid(reasons::BOOTSTRAP_DATA_INVALID, e.to_string()))?;
    let (format, value) = match config.spec.format.unwrap_or_default() {
        Format::CloudConfig => (
            BootstrapFormat::CloudConfig,
            render::cloud_init::render(&rendered).into_bytes(),
        ),
        Format::Ignition => {
            let json = render::ignition::render(&rendered)
                .map_err(|e| Failure::Invalid(reasons::BOOTSTRAP_DATA_INVALID, e.to_string()))?;
            (BootstrapFormat::Ignition, json.into_bytes())
        }
    };
    let owner_reference = config.controller_owner_ref(&()).ok_or_else(|| {
        Failure::Waiting(
            reasons::WAITING_FOR_OWNER,
            "the KubeadmConfig has no UID yet".into(),
        )
    })?;
    Ok(BootstrapSecret::new(
        &scope.namespace,
        config.name_any(),
        cluster.name_any(),
        format,
        value,
    )
    .owned_by(owner_reference)
    .into_secret())
}

/// The join token created in the workload cluster (last, once the data is rendered), then the
/// data Secret. A Secret an earlier render left is kept instead, and this render's token deleted.
async fn create_data_secret(
    scope: &mut Scope<'_>,
    owner: &Owner,
    role: &Role,
    mut secret: Secret,
) -> Result<(), Failure> {
    let (config, owners) = (scope.config, scope.owners);
    let settings = &scope.context.state;
    let cluster = owner.cluster.as_ref();
    let name = config.name_any();
    let join_token = match role {
        Role::JoinControlPlane { token, .. } | Role::JoinWorker { token, .. } => Some(token),
        Role::Init { .. } => None,
    };
    let join_token_id = join_token
        .and_then(|t| t.split_once('.'))
        .map(|(id, _)| id.to_string());
    if let Some(token) = join_token {
        // Made last, once the data is rendered: nothing before the Secret's create can leave a
        // token no data carries.
        create_join_token(owners, &scope.secrets, cluster, token, settings.token_ttl).await?;
    }
    if let Some(id) = &join_token_id {
        // The token's ID (not its secret) is kept for refreshing it until the machine joins, and
        // a pool's its expiry, for rotating it.
        secret.metadata.annotations = Some(token_annotations(
            id,
            matches!(owner.owned_by, OwnedBy::Pool(_)).then_some(settings.token_ttl),
        ));
    }
    match scope.secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            if join_token_id.is_some() {
                // A join token was created with the data: valid for its whole TTL from now.
                owners
                    .extended_tokens
                    .put(config.uid().unwrap_or_default(), ());
                scope.plan.next = Next::Requeue(match owner.owned_by {
                    OwnedBy::Machine(_) => settings.token_refresh,
                    OwnedBy::Pool(_) => settings.token_ttl / 2,
                });
            }
        }
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            // An earlier render got as far as the Secret: a machine may have booted from that
            // data, so it stays and this render is dropped, its join token with it.
            if let Some(id) = &join_token_id {
                delete_join_token(owners, &scope.secrets, cluster, id).await;
            }
            let earlier = match earlier_data(scope).await {
                Ok(Some(earlier)) => earlier,
                Ok(None) => {
                    return Err(Failure::Waiting(
                        reasons::DATA_SECRET_CONFLICT,
                        format!(
                            "bootstrap data Secret {name:?} was there a moment ago and is gone; rendering again"
                        ),
                    ));
                }
                Err(failure) => {
                    if matches!(role, Role::Init { .. }) {
                        // Not this config's data, and none to be made while the name is taken:
                        // another control-plane machine may initialise the cluster meanwhile.
                        InitLock::new(
                            scope.context.client.clone(),
                            &scope.namespace,
                            &cluster.name_any(),
                        )
                        .release(&owner.uid)
                        .await?;
                    }
                    return Err(failure);
                }
            };
            return keep_existing(scope, owner, earlier).await;
        }
        Err(kube::Error::Api(status))
            if (400..500).contains(&status.code) && status.code != 429 =>
        {
            // Refused for what it is (too large, over a quota, denied by a policy): no Secret
            // carries the token, and the next attempt makes its own.
            if let Some(id) = &join_token_id {
                delete_join_token(owners, &scope.secrets, cluster, id).await;
            }
            return Err(kube::Error::Api(status).into());
        }
        // Not known to have failed (a timeout, the server's error): the Secret may exist, so the
        // token stays (the next pass's create finds out, and deletes its own if so).
        Err(error) => return Err(error.into()),
    }
    if matches!(role, Role::Init { .. }) {
        // Once per cluster, the machine that creates it. A joining machine's data is said by its
        // status (`dataSecretName`) alone: an event per machine is a write per machine that
        // tells nothing the status does not (upstream's bootstrap provider publishes none).
        scope.plan.event(
            false,
            reasons::DATA_SECRET_CREATED,
            format!("rendered kubeadm init bootstrap data into Secret {name}"),
        );
    }
    scope.plan.condition(
        condition::READY,
        ConditionStatus::True,
        reasons::DATA_SECRET_AVAILABLE,
        "",
    );
    scope.data_secret_name = Some(name);
    Ok(())
}

/// Takes data rendered before — recorded in the config's status, or its Secret found — as the
/// config's: `Ready`, and the join token it carries kept valid until the machine has joined.
pub(super) async fn keep_existing(
    scope: &mut Scope<'_>,
    owner: &Owner,
    existing: DataSecret,
) -> Result<(), Failure> {
    // Whatever a render of this pass planned: the data is this one, recorded even if extending
    // its token fails below (the next pass then finds it recorded and tries again).
    scope.plan.next = Next::AwaitChange;
    let (name, secret) = match existing {
        DataSecret::Recorded(recorded) => (recorded, None),
        DataSecret::Found(secret) => (scope.config.name_any(), Some(*secret)),
    };
    scope.data_secret_name = Some(name.clone());
    scope.plan.condition(
        condition::READY,
        ConditionStatus::True,
        reasons::DATA_SECRET_AVAILABLE,
        "",
    );
    let settings = &scope.context.state;
    let machine = match &owner.owned_by {
        OwnedBy::Machine(machine) => machine,
        OwnedBy::Pool(_) => return rotate_pool_token(scope, owner, &name, secret).await,
    };
    let joined = machine
        .status
        .as_ref()
        .is_some_and(|s| s.node_ref.is_some());
    if !joined {
        // Keep the token valid until the machine has joined (its ID is on the data Secret).
        let config_uid = scope.config.uid().unwrap_or_default();
        if scope.owners.extended_tokens.get(&config_uid).is_none() {
            let secret = match secret {
                Some(found) => Some(found),
                None => scope.secrets.get_opt(&name).await?,
            };
            let token_id = secret
                .as_ref()
                .and_then(|s| s.annotations().get(TOKEN_ID_ANNOTATION).cloned());
            if let Some(token_id) = token_id {
                refresh_join_token(
                    scope.owners,
                    &scope.secrets,
                    &owner.cluster,
                    &token_id,
                    settings.token_ttl,
                )
                .await?;
                scope.owners.extended_tokens.put(config_uid, ());
            }
            scope.plan.next = Next::Requeue(settings.token_refresh);
        } else {
            // Extended less than half a period ago: the pass after the memo expires extends
            // it, so extensions stay about one `token_refresh` apart at most.
            scope.plan.next = Next::Requeue(settings.token_refresh / 2);
        }
    }
    Ok(())
}

/// The annotations of a data Secret whose join token is `id`: the ID, and for a pool's (`ttl`
/// given) when the token made now expires.
fn token_annotations(
    id: &str,
    ttl: Option<std::time::Duration>,
) -> std::collections::BTreeMap<String, String> {
    let mut annotations =
        std::collections::BTreeMap::from([(TOKEN_ID_ANNOTATION.to_string(), id.to_string())]);
    if let Some(expires) =
        ttl.and_then(|ttl| crate::tokens::expiration(ttl, jiff::Timestamp::now()))
    {
        annotations.insert(TOKEN_EXPIRES_ANNOTATION.to_string(), expires);
    }
    annotations
}

/// How long before its token should be rotated a pool's data Secret has: `None` when it is due
/// now (less than half of `ttl` left, or no expiry recorded), at `now`.
fn rotation_in(
    secret: &Secret,
    ttl: std::time::Duration,
    now: jiff::Timestamp,
) -> Option<std::time::Duration> {
    let expires: jiff::Timestamp = secret
        .annotations()
        .get(TOKEN_EXPIRES_ANNOTATION)?
        .parse()
        .ok()?;
    let due = expires
        .checked_sub(jiff::SignedDuration::try_from(ttl / 2).ok()?)
        .ok()?;
    std::time::Duration::try_from(now.duration_until(due))
        .ok()
        .filter(|left| !left.is_zero())
}

/// A pool's data kept, its join token rotated when due: a new token made in the workload
/// cluster, then the Secret's data rendered again with it and merge-patched in, guarded by the
/// version read (a concurrent change fails the write and the next pass starts over; the token
/// made for it expires unused). The Secret is read at most once per [`Owners::pool_tokens`]
/// period; a pool being deleted gets no new token. A rotation that cannot be rendered now (the
/// pool's template changed to something invalid, the workload cluster unreachable) keeps the data
/// as it is, says why in the logs, and is tried again: the data stays usable until its token
/// expires.
///
/// [`Owners::pool_tokens`]: super::reconcile::Owners
async fn rotate_pool_token(
    scope: &mut Scope<'_>,
    owner: &Owner,
    name: &str,
    found: Option<Secret>,
) -> Result<(), Failure> {
    let settings = &scope.context.state;
    let ttl = settings.token_ttl;
    let recheck = ttl / 4;
    scope.plan.next = Next::Requeue(recheck);
    if owner.deleting() {
        return Ok(());
    }
    let config_uid = scope.config.uid().unwrap_or_default();
    if scope.owners.pool_tokens.get(&config_uid).is_some() {
        return Ok(());
    }
    let existing = match found {
        Some(found) => Some(found),
        None => scope.secrets.get_opt(name).await?,
    };
    let Some(existing) = existing else {
        return Ok(());
    };
    if let Some(left) = rotation_in(&existing, ttl, jiff::Timestamp::now()) {
        scope.owners.pool_tokens.put(config_uid, ());
        scope.plan.next = Next::Requeue(left.min(recheck).max(std::time::Duration::from_secs(1)));
        return Ok(());
    }
    match render_rotation(scope, owner, name, &existing).await {
        Ok(true) => {
            scope.owners.pool_tokens.put(config_uid, ());
            scope.plan.event(
                false,
                reasons::DATA_SECRET_CREATED,
                format!("rotated the join token in bootstrap data Secret {name}"),
            );
        }
        Ok(false) => {}
        Err(failure) => {
            let why = match &failure {
                Failure::Waiting(reason, message) | Failure::Invalid(reason, message) => {
                    format!("{reason}: {message}")
                }
                Failure::Api(error) => error.to_string(),
            };
            tracing::warn!(secret = name, %why, "the pool's join token could not be rotated; the data is kept and the rotation tried again");
            scope.plan.next = Next::Requeue(settings.token_refresh.min(recheck));
        }
    }
    // Whatever the rotation met, the data is there and usable.
    scope.plan.condition(
        condition::READY,
        ConditionStatus::True,
        reasons::DATA_SECRET_AVAILABLE,
        "",
    );
    Ok(())
}

/// Renders a pool's data with a new join token into `existing`; `false` when the render waits
/// for something.
async fn render_rotation(
    scope: &mut Scope<'_>,
    owner: &Owner,
    name: &str,
    existing: &Secret,
) -> Result<bool, Failure> {
    let Some((role, secret)) = prepare(scope, owner).await? else {
        return Ok(false);
    };
    let (Role::JoinWorker { token, .. } | Role::JoinControlPlane { token, .. }) = &role else {
        return Ok(false);
    };
    let Some((id, _)) = token.split_once('.') else {
        return Ok(false);
    };
    let ttl = scope.context.state.token_ttl;
    create_join_token(scope.owners, &scope.secrets, &owner.cluster, token, ttl).await?;
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": existing.metadata.resource_version,
            "annotations": token_annotations(id, Some(ttl)),
        },
        "data": secret.data,
    });
    scope
        .secrets
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    Ok(true)
}

/// The config's data Secret, if an earlier render made it: one read. A Secret of that name that
/// another config owns (one deleted and made again under the same name, its Secret not yet
/// collected) is not this config's data: it is waited out, never taken.
pub(super) async fn earlier_data(scope: &Scope<'_>) -> Result<Option<DataSecret>, Failure> {
    let name = scope.config.name_any();
    let Some(secret) = scope.secrets.get_opt(&name).await? else {
        return Ok(None);
    };
    let uid = scope.config.uid().unwrap_or_default();
    let owners = secret.owner_references();
    if !owners.is_empty() && !owners.iter().any(|o| o.uid == uid) {
        return Err(Failure::Waiting(
            reasons::DATA_SECRET_CONFLICT,
            format!(
                "Secret {name:?} belongs to another KubeadmConfig of that name; waiting for it to be deleted"
            ),
        ));
    }
    Ok(Some(DataSecret::Found(Box::new(secret))))
}

fn token() -> Result<String, Failure> {
    bootstrap_token().map_err(|e| Failure::Waiting(reasons::BOOTSTRAP_DATA_INVALID, e.to_string()))
}

fn cluster_facts(cluster: &Cluster, host: &str, port: i32) -> ClusterFacts {
    let mut facts = ClusterFacts::new(cluster.name_any(), format!("{host}:{port}"));
    if let Some(network) = &cluster.spec.cluster_network {
        if let Some(pods) = network.pods.as_ref().filter(|p| !p.cidr_blocks.is_empty()) {
            facts.pod_cidrs = pods.cidr_blocks.clone();
        }
        if let Some(services) = network
            .services
            .as_ref()
            .filter(|s| !s.cidr_blocks.is_empty())
        {
            facts.service_cidrs = services.cidr_blocks.clone();
        }
        if let Some(domain) = &network.service_domain {
            facts.service_domain = domain.clone();
        }
    }
    facts
}

/// Loads the cluster PKI, generating and storing it (and the admin kubeconfig) the first time.
async fn ensure_pki(
    secrets: &Api<Secret>,
    cluster: &Cluster,
    server: &str,
) -> Result<ClusterPki, Failure> {
    crate::cluster_pki::ensure(secrets, cluster, server)
        .await
        .map_err(|error| match error {
            EnsureError::Pending(message) => Failure::Waiting(reasons::WAITING_FOR_PKI, message),
            EnsureError::Invalid(error) => {
                Failure::Invalid(reasons::PKI_INVALID, error.to_string())
            }
            EnsureError::Api(error) => Failure::Api(error),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn secret_expiring(at: Option<&str>) -> Secret {
        let mut secret = Secret::default();
        if let Some(at) = at {
            secret.metadata.annotations = Some(std::collections::BTreeMap::from([(
                TOKEN_EXPIRES_ANNOTATION.to_string(),
                at.to_string(),
            )]));
        }
        secret
    }

    #[test]
    fn a_pools_token_is_rotated_once_less_than_half_its_ttl_is_left() {
        let ttl = Duration::from_secs(15 * 60);
        let now: jiff::Timestamp = "2026-11-30T10:00:00Z"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let fresh = secret_expiring(Some("2026-11-30T10:15:00Z"));
        assert_eq!(
            rotation_in(&fresh, ttl, now),
            Some(Duration::from_secs(450)),
            "due when 7.5 of its 15 minutes are left"
        );
        let aging = secret_expiring(Some("2026-11-30T10:07:00Z"));
        assert_eq!(rotation_in(&aging, ttl, now), None, "less than half left");
        assert_eq!(rotation_in(&secret_expiring(None), ttl, now), None);
        assert_eq!(
            rotation_in(&secret_expiring(Some("not a time")), ttl, now),
            None,
            "an expiry that does not parse is rotated, not trusted"
        );
    }

    #[test]
    fn a_pools_secret_records_its_tokens_expiry_and_a_machines_does_not() {
        let pool = token_annotations("abcdef", Some(Duration::from_secs(60)));
        assert_eq!(pool[TOKEN_ID_ANNOTATION], "abcdef");
        assert!(pool.contains_key(TOKEN_EXPIRES_ANNOTATION));
        let machine = token_annotations("abcdef", None);
        assert!(!machine.contains_key(TOKEN_EXPIRES_ANNOTATION));
    }
}
