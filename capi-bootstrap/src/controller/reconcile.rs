//! One reconcile of a `KubeadmConfig`: observe, decide, write — kept in one place because every
//! step depends on the API server (locks, PKI, tokens) rather than on a cloud.

use std::sync::Arc;

use crate::api::{Format, KubeadmConfig, KubeadmConfigStatus};
use crate::cluster_pki::EnsureError;
use crate::init_lock::{InitLock, LockState};
use crate::pki::{ClusterPki, bootstrap_token};
use crate::render::{self, ClusterFacts, KubernetesVersion, RenderInput, Role};
use crate::secret::BootstrapSecret;
use crate::tokens;
use capi_core::api::{Cluster, Machine};
use capi_core::condition::{self, ConditionStatus};
use capi_core::{BootstrapFormat, labels};
use capi_runtime::cache::memo::Memo;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::BootstrapSettings;
use capi_runtime::cache::lookup::Cached;
use capi_runtime::plan::{Next, Plan};
use capi_runtime::reasons;
use capi_runtime::write;
use capi_runtime::{Context, ReconcileError};

type BootstrapPlan = Plan<()>;

/// The annotation on a bootstrap data Secret naming its join token's ID (not its secret).
pub(crate) const TOKEN_ID_ANNOTATION: &str = "bootstrap.cluster.x-k8s.io/token-id";

/// Where a reconcile reads the owner `Machine` and its `Cluster` from: the controller's own
/// watches, the API server for what they have not seen yet.
pub(crate) struct Owners {
    pub(crate) machines: Cached<Machine>,
    pub(crate) clusters: Cached<Cluster>,
    /// The config versions this controller's own status writes replaced: a pass over such a
    /// copy waits for the newer one instead of writing the same status again.
    pub(crate) own_writes: write::OwnWrites,
    /// Each cluster's PKI (by cluster UID), read once a minute rather than on every render: four
    /// Secret reads per machine otherwise.
    pub(crate) pki: Memo<ClusterPki>,
    /// A client of each workload cluster (by cluster UID), built from its kubeconfig Secret.
    pub(crate) workloads: Memo<Client>,
    /// The configs (by UID) whose join token was extended or created lately: a config's every
    /// reconcile does not extend its token again, nor read its data Secret for the token's ID.
    pub(crate) extended_tokens: Memo<()>,
}

impl Owners {
    /// What a reconcile reads from `machines` and `clusters`, with nothing remembered yet; join
    /// tokens are extended at most every half `token_refresh`.
    pub(crate) fn new(
        machines: Cached<Machine>,
        clusters: Cached<Cluster>,
        token_refresh: std::time::Duration,
    ) -> Self {
        Self {
            machines,
            clusters,
            own_writes: write::OwnWrites::default(),
            pki: Memo::new(CLUSTER_FACTS_KEPT),
            workloads: Memo::new(CLUSTER_FACTS_KEPT),
            extended_tokens: Memo::new(token_refresh / 2),
        }
    }
}

/// How long a cluster's PKI and workload client are used before they are read again.
const CLUSTER_FACTS_KEPT: std::time::Duration = std::time::Duration::from_secs(60);

/// How soon a config whose cached copy predates this controller's own last write is looked at
/// again.
const OWN_WRITE_CATCH_UP: std::time::Duration = std::time::Duration::from_millis(250);

/// Reconciles one config; returns what comes next.
pub(crate) async fn reconcile_once(
    config: &Arc<KubeadmConfig>,
    context: &Context<BootstrapSettings>,
    owners: &Owners,
) -> Result<Next, ReconcileError> {
    let client = &context.client;
    if config.meta().deletion_timestamp.is_some() {
        owners.own_writes.forget(config.as_ref());
    } else if owners.own_writes.is_stale(config.as_ref()) {
        // Computed from this copy, the status would repeat (or undo) the one just written.
        return Ok(Next::Requeue(OWN_WRITE_CATCH_UP));
    }
    let namespace = config.namespace().unwrap_or_default();
    let poll = context.retry.policy.poll;
    let mut plan = BootstrapPlan::new(config.metadata.generation);
    let mut data_secret_name = None;

    let outcome = decide(
        config,
        context,
        owners,
        &namespace,
        &mut plan,
        &mut data_secret_name,
    )
    .await;
    let next = match outcome {
        Ok(()) => std::mem::replace(&mut plan.next, Next::AwaitChange),
        Err(Failure::Waiting(reason, message)) => {
            plan.condition(condition::READY, ConditionStatus::False, reason, message);
            Next::Requeue(poll)
        }
        Err(Failure::Invalid(reason, message)) => {
            plan.condition(
                condition::READY,
                ConditionStatus::False,
                reason,
                message.clone(),
            );
            plan.event(true, reasons::INVALID_CONFIGURATION, message);
            Next::InvalidConfiguration
        }
        Err(Failure::Api(error)) => return Err(ReconcileError::Kube(error)),
    };
    if write_status(client, config, &plan, data_secret_name).await? {
        owners.own_writes.wrote(config.as_ref());
    }
    write::publish(&context.recorder, config.as_ref(), &plan.events).await;
    Ok(next)
}

/// A config's rendered data: recorded in its status, or found as its Secret (a render that
/// did not get as far as the status).
enum DataSecret {
    Recorded(String),
    Found(Box<Secret>),
}

enum Failure {
    /// Not ready yet; poll.
    Waiting(&'static str, String),
    /// The configuration cannot work until it changes.
    Invalid(&'static str, String),
    /// The API server failed.
    Api(kube::Error),
}

impl From<kube::Error> for Failure {
    fn from(error: kube::Error) -> Self {
        Self::Api(error)
    }
}

async fn decide(
    config: &Arc<KubeadmConfig>,
    context: &Context<BootstrapSettings>,
    owners: &Owners,
    namespace: &str,
    plan: &mut BootstrapPlan,
    data_secret_name: &mut Option<String>,
) -> Result<(), Failure> {
    let client = &context.client;
    let Some(owner) = config
        .owner_references()
        .iter()
        .find(|r| r.kind == "Machine" && r.api_version.starts_with("cluster.x-k8s.io/"))
        .cloned()
    else {
        plan.condition(
            condition::READY,
            ConditionStatus::False,
            reasons::WAITING_FOR_OWNER,
            "waiting for a Machine to own this config",
        );
        return Ok(());
    };
    let Some(machine) = owners
        .machines
        .get(namespace, &owner.name)
        .await?
        .filter(|m| m.metadata.uid.as_deref() == Some(owner.uid.as_str()))
    else {
        return Err(Failure::Waiting(
            reasons::WAITING_FOR_OWNER,
            format!("waiting for Machine {:?}", owner.name),
        ));
    };
    let Some(cluster) = owners
        .clusters
        .get(namespace, &machine.spec.cluster_name)
        .await?
    else {
        return Err(Failure::Waiting(
            reasons::WAITING_FOR_CLUSTER,
            format!("waiting for Cluster {:?}", machine.spec.cluster_name),
        ));
    };
    if plan.paused(cluster.is_paused() || labels::has_paused_annotation(&config.metadata)) {
        return Ok(());
    }
    if config.meta().deletion_timestamp.is_some() {
        // The init lock must not outlive a machine that never initialised.
        InitLock::new(client.clone(), namespace, &cluster.name_any())
            .release(&owner.uid)
            .await?;
        return Ok(());
    }

    // Data is rendered once: a machine may already have booted from it. A config whose status
    // records its data is done (as upstream, the status is trusted: no Secret read per pass).
    // One without is rendered; data an earlier render left (it got as far as the Secret, not the
    // status) is found by the Secret's create answering that it exists, or by one look when no
    // data can be rendered now: a fresh config that renders costs no read.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let pass = Pass {
        config,
        machine: &machine,
        cluster: &cluster,
        secrets: &secrets,
        context,
        owners,
        namespace,
        owner_uid: &owner.uid,
    };
    let recorded = config
        .status
        .as_ref()
        .filter(|s| {
            s.initialization
                .as_ref()
                .and_then(|i| i.data_secret_created)
                .unwrap_or(false)
        })
        .and_then(|s| s.data_secret_name.clone());
    if let Some(recorded) = recorded {
        return keep_existing(
            &pass,
            DataSecret::Recorded(recorded),
            plan,
            data_secret_name,
        )
        .await;
    }
    // A machine being deleted gets no new data; a config whose name another config's Secret
    // took (as its last status says) is not rendered again until that Secret is gone. Both look.
    let conflicted = config.status.as_ref().is_some_and(|s| {
        condition::get(&s.conditions, condition::READY)
            .is_some_and(|c| c.reason == reasons::DATA_SECRET_CONFLICT)
    });
    let deleting = machine.metadata.deletion_timestamp.is_some();
    let looked = deleting || conflicted;
    if looked && let Some(earlier) = earlier_data(&pass).await? {
        return keep_existing(&pass, earlier, plan, data_secret_name).await;
    }
    if deleting {
        // Data rendered now could outlive the machine's deletion, which removes it.
        plan.condition(
            condition::READY,
            ConditionStatus::False,
            reasons::DELETING,
            "the machine is being deleted; no bootstrap data is rendered for it",
        );
        return Ok(());
    }
    let rendered = render(&pass, plan, data_secret_name).await;
    if data_secret_name.is_some() {
        return rendered;
    }
    // No data now (this render waits, or cannot be made): data an earlier render left is the
    // config's all the same (a machine may have booted from it), whatever this one met.
    match rendered {
        Err(Failure::Api(error)) => Err(Failure::Api(error)),
        // Looked already this pass (before rendering, or when the create met the name taken).
        Err(conflict @ Failure::Waiting(reasons::DATA_SECRET_CONFLICT, _)) => Err(conflict),
        other if looked => other,
        other => match earlier_data(&pass).await? {
            Some(earlier) => keep_existing(&pass, earlier, plan, data_secret_name).await,
            None => other,
        },
    }
}

/// Renders a config's bootstrap data into its Secret (see [`decide`]): `data_secret_name` is set
/// when the config has data (this render's, or an earlier one's found by the create).
async fn render(
    pass: &Pass<'_>,
    plan: &mut BootstrapPlan,
    data_secret_name: &mut Option<String>,
) -> Result<(), Failure> {
    let Pass {
        config,
        machine,
        cluster,
        secrets,
        context,
        owners,
        namespace,
        owner_uid,
    } = *pass;
    let client = &context.client;
    let name = config.name_any();
    let endpoint = cluster
        .spec
        .control_plane_endpoint
        .clone()
        .filter(|e| e.is_valid());
    let Some(endpoint) = endpoint.filter(|_| cluster.infrastructure_provisioned()) else {
        plan.condition(
            condition::READY,
            ConditionStatus::False,
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            "waiting for the cluster infrastructure and its control plane endpoint",
        );
        return Ok(());
    };
    let Some(version) = machine.spec.version.as_deref() else {
        return Err(Failure::Invalid(
            reasons::VERSION_MISSING,
            "the Machine has no spec.version; kubeadm needs one".into(),
        ));
    };
    let version = KubernetesVersion::parse(version)
        .map_err(|e| Failure::Invalid(reasons::VERSION_MISSING, e.to_string()))?;

    let cluster_name = cluster.name_any();
    let server = format!("https://{}:{}", endpoint.host, endpoint.port);
    let pki_key = format!("{}/{server}", cluster.uid().unwrap_or_default());
    let pki = match owners.pki.get(&pki_key) {
        Some(pki) => pki,
        None => owners
            .pki
            .put(pki_key, ensure_pki(secrets, cluster, &server).await?),
    };

    let initialized = cluster
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.control_plane_initialized)
        .unwrap_or(false);
    let control_plane = machine.is_control_plane();
    let role = if control_plane && !initialized {
        match InitLock::new(client.clone(), namespace, &cluster_name)
            .try_acquire(&machine.name_any(), owner_uid)
            .await?
        {
            LockState::Acquired => Role::Init { token: token()? },
            LockState::HeldBy(holder) => {
                return Err(Failure::Waiting(
                    reasons::WAITING_FOR_CONTROL_PLANE_INITIALIZATION,
                    format!(
                        "machine {holder:?} is initialising the control plane; this one joins afterwards"
                    ),
                ));
            }
        }
    } else if !initialized {
        plan.condition(
            condition::READY,
            ConditionStatus::False,
            reasons::WAITING_FOR_CONTROL_PLANE_INITIALIZATION,
            "waiting for the control plane to be initialised before joining",
        );
        return Ok(());
    } else {
        let token = token()?;
        let ca_cert_hashes = vec![pki.ca.cert_hash()];
        if control_plane {
            Role::JoinControlPlane {
                token,
                ca_cert_hashes,
            }
        } else {
            Role::JoinWorker {
                token,
                ca_cert_hashes,
            }
        }
    };

    let spec = &config.spec;
    let mut resolved_files = Vec::new();
    // File contents and password hashes kept in Secrets.
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
        let value = secrets
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
    let mut extra_files = match role {
        Role::Init { .. } | Role::JoinControlPlane { .. } => pki.control_plane_files(),
        Role::JoinWorker { .. } => Vec::new(),
    };
    for hook in &context.state.extra_files {
        let files = hook
            .files(client, cluster, machine)
            .await
            .map_err(|message| {
                Failure::Waiting(
                    reasons::WAITING_FOR_PROVIDER_FILES,
                    format!("provider files: {message}"),
                )
            })?;
        extra_files.extend(files);
    }
    let cluster_facts = cluster_facts(cluster, &endpoint.host, endpoint.port);
    let input = RenderInput {
        spec,
        role: role.clone(),
        version,
        cluster: cluster_facts,
        resolved_files,
        extra_files,
    };
    let rendered = render::plan(&input)
        .map_err(|e| Failure::Invalid(reasons::BOOTSTRAP_DATA_INVALID, e.to_string()))?;
    let (format, value) = match spec.format.unwrap_or_default() {
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
    let mut secret = BootstrapSecret::new(namespace, &name, &cluster_name, format, value)
        .owned_by(owner_reference)
        .into_secret();
    let join_token = match &role {
        Role::JoinControlPlane { token, .. } | Role::JoinWorker { token, .. } => Some(token),
        Role::Init { .. } => None,
    };
    let join_token_id = join_token
        .and_then(|t| t.split_once('.'))
        .map(|(id, _)| id.to_string());
    if let Some(token) = join_token {
        // Made last, once the data is rendered: nothing before the Secret's create can leave a
        // token no data carries.
        create_join_token(owners, secrets, cluster, token, context.state.token_ttl).await?;
    }
    if let Some(id) = &join_token_id {
        // The token's ID (not its secret) is kept for refreshing it until the machine joins.
        let annotation = (TOKEN_ID_ANNOTATION.to_string(), id.clone());
        secret.metadata.annotations = Some(std::collections::BTreeMap::from([annotation]));
    }
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            if join_token_id.is_some() {
                // A join token was created with the data: valid for its whole TTL from now.
                owners
                    .extended_tokens
                    .put(config.uid().unwrap_or_default(), ());
                plan.next = Next::Requeue(context.state.token_refresh);
            }
        }
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            // An earlier render got as far as the Secret: a machine may have booted from that
            // data, so it stays and this render is dropped, its join token with it.
            if let Some(id) = &join_token_id {
                delete_join_token(owners, secrets, cluster, id).await;
            }
            let earlier = match earlier_data(pass).await {
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
                        InitLock::new(client.clone(), namespace, &cluster_name)
                            .release(owner_uid)
                            .await?;
                    }
                    return Err(failure);
                }
            };
            return keep_existing(pass, earlier, plan, data_secret_name).await;
        }
        Err(kube::Error::Api(status))
            if (400..500).contains(&status.code) && status.code != 429 =>
        {
            // Refused for what it is (too large, over a quota, denied by a policy): no Secret
            // carries the token, and the next attempt makes its own.
            if let Some(id) = &join_token_id {
                delete_join_token(owners, secrets, cluster, id).await;
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
        plan.event(
            false,
            reasons::DATA_SECRET_CREATED,
            format!("rendered kubeadm init bootstrap data into Secret {name}"),
        );
    }
    plan.condition(
        condition::READY,
        ConditionStatus::True,
        reasons::DATA_SECRET_AVAILABLE,
        "",
    );
    *data_secret_name = Some(name);
    Ok(())
}

/// Takes data rendered before — recorded in the config's status, or its Secret found — as the
/// config's: `Ready`, and the join token it carries kept valid until the machine has joined.
async fn keep_existing(
    pass: &Pass<'_>,
    existing: DataSecret,
    plan: &mut BootstrapPlan,
    data_secret_name: &mut Option<String>,
) -> Result<(), Failure> {
    // Whatever a render of this pass planned: the data is this one, recorded even if extending
    // its token fails below (the next pass then finds it recorded and tries again).
    plan.next = Next::AwaitChange;
    let (name, secret) = match existing {
        DataSecret::Recorded(recorded) => (recorded, None),
        DataSecret::Found(secret) => (pass.config.name_any(), Some(*secret)),
    };
    *data_secret_name = Some(name.clone());
    plan.condition(
        condition::READY,
        ConditionStatus::True,
        reasons::DATA_SECRET_AVAILABLE,
        "",
    );
    let settings = &pass.context.state;
    let joined = pass
        .machine
        .status
        .as_ref()
        .is_some_and(|s| s.node_ref.is_some());
    if !joined {
        // Keep the token valid until the machine has joined (its ID is on the data Secret).
        let config_uid = pass.config.uid().unwrap_or_default();
        if pass.owners.extended_tokens.get(&config_uid).is_none() {
            let secret = match secret {
                Some(found) => Some(found),
                None => pass.secrets.get_opt(&name).await?,
            };
            let token_id = secret
                .as_ref()
                .and_then(|s| s.annotations().get(TOKEN_ID_ANNOTATION).cloned());
            if let Some(token_id) = token_id {
                refresh_join_token(
                    pass.owners,
                    pass.secrets,
                    pass.cluster,
                    &token_id,
                    settings.token_ttl,
                )
                .await?;
                pass.owners.extended_tokens.put(config_uid, ());
            }
            plan.next = Next::Requeue(settings.token_refresh);
        } else {
            // Extended less than half a period ago: the pass after the memo expires extends
            // it, so extensions stay about one `token_refresh` apart at most.
            plan.next = Next::Requeue(settings.token_refresh / 2);
        }
    }
    Ok(())
}

/// What one pass over a config knows: the config, its owners, where its data goes.
#[derive(Clone, Copy)]
struct Pass<'a> {
    config: &'a KubeadmConfig,
    machine: &'a Machine,
    cluster: &'a Cluster,
    secrets: &'a Api<Secret>,
    context: &'a Context<BootstrapSettings>,
    owners: &'a Owners,
    namespace: &'a str,
    /// The owning Machine's UID.
    owner_uid: &'a str,
}

/// The config's data Secret, if an earlier render made it: one read. A Secret of that name that
/// another config owns (one deleted and made again under the same name, its Secret not yet
/// collected) is not this config's data: it is waited out, never taken.
async fn earlier_data(pass: &Pass<'_>) -> Result<Option<DataSecret>, Failure> {
    let name = pass.config.name_any();
    let Some(secret) = pass.secrets.get_opt(&name).await? else {
        return Ok(None);
    };
    let uid = pass.config.uid().unwrap_or_default();
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

/// A client of the workload cluster, from the `<cluster>-kubeconfig` Secret (built once a
/// minute, see [`Owners::workloads`]).
async fn workload_client(
    owners: &Owners,
    secrets: &Api<Secret>,
    cluster: &Cluster,
) -> Result<Client, Failure> {
    let key = cluster.uid().unwrap_or_default();
    if let Some(client) = owners.workloads.get(&key) {
        return Ok(Client::clone(&client));
    }
    let client = build_workload_client(secrets, &cluster.name_any()).await?;
    Ok(Client::clone(&owners.workloads.put(key, client)))
}

async fn build_workload_client(secrets: &Api<Secret>, cluster: &str) -> Result<Client, Failure> {
    let waiting =
        |message: String| Failure::Waiting(reasons::WAITING_FOR_WORKLOAD_CLUSTER, message);
    let kubeconfig = secrets
        .get_opt(&format!("{cluster}-kubeconfig"))
        .await?
        .and_then(|s| s.data)
        .and_then(|d| d.get("value").cloned())
        .and_then(|v| String::from_utf8(v.0).ok())
        .ok_or_else(|| waiting(format!("Secret {cluster}-kubeconfig has no value")))?;
    let kubeconfig = Kubeconfig::from_yaml(&kubeconfig)
        .map_err(|e| waiting(format!("{cluster}-kubeconfig: {e}")))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| waiting(format!("{cluster}-kubeconfig: {e}")))?;
    Client::try_from(config).map_err(|e| waiting(format!("workload cluster client: {e}")))
}

/// Creates the bootstrap-token Secret in the workload cluster.
async fn create_join_token(
    owners: &Owners,
    secrets: &Api<Secret>,
    cluster: &Cluster,
    token: &str,
    ttl: std::time::Duration,
) -> Result<(), Failure> {
    let waiting =
        |message: String| Failure::Waiting(reasons::WAITING_FOR_WORKLOAD_CLUSTER, message);
    let workload = workload_client(owners, secrets, cluster).await?;
    let secret = tokens::token_secret(token, ttl, jiff::Timestamp::now())
        .ok_or_else(|| waiting("invalid token".into()))?;
    let created = Api::<Secret>::namespaced(workload, tokens::NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await;
    if let Err(e) = created {
        // The next attempt builds its client afresh (the kubeconfig may have changed).
        owners.workloads.remove(&cluster.uid().unwrap_or_default());
        return Err(waiting(format!(
            "creating the bootstrap token in the workload cluster: {e}"
        )));
    }
    Ok(())
}

/// Deletes join token `id` from the workload cluster, best effort: one this pass made for data it
/// then did not keep. A token left behind expires at the end of its TTL all the same.
async fn delete_join_token(owners: &Owners, secrets: &Api<Secret>, cluster: &Cluster, id: &str) {
    let Ok(workload) = workload_client(owners, secrets, cluster).await else {
        return;
    };
    let deleted = Api::<Secret>::namespaced(workload, tokens::NAMESPACE)
        .delete(
            &format!("bootstrap-token-{id}"),
            &kube::api::DeleteParams::default(),
        )
        .await;
    if let Err(error) = deleted {
        tracing::debug!(%error, "could not delete an unused join token");
    }
}

/// Moves the expiration of token `id` in the workload cluster to `ttl` from now.
async fn refresh_join_token(
    owners: &Owners,
    secrets: &Api<Secret>,
    cluster: &Cluster,
    id: &str,
    ttl: std::time::Duration,
) -> Result<(), Failure> {
    let waiting =
        |message: String| Failure::Waiting(reasons::WAITING_FOR_WORKLOAD_CLUSTER, message);
    let workload = workload_client(owners, secrets, cluster).await?;
    let expiration = tokens::expiration(ttl, jiff::Timestamp::now())
        .ok_or_else(|| waiting("token TTL out of range".into()))?;
    let patch = json!({"data": {"expiration": ByteString(expiration.into_bytes())}});
    let extended = Api::<Secret>::namespaced(workload, tokens::NAMESPACE)
        .patch(
            &format!("bootstrap-token-{id}"),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await;
    match extended {
        Ok(_) => Ok(()),
        // Gone (expired and cleaned up, or deleted): there is nothing to extend. A machine that
        // has not joined by now needs replacing, which its health check or a user decides.
        Err(kube::Error::Api(status)) if status.is_not_found() => {
            tracing::debug!(token = id, "the join token to extend is gone");
            Ok(())
        }
        Err(e) => {
            owners.workloads.remove(&cluster.uid().unwrap_or_default());
            Err(waiting(format!("refreshing the bootstrap token: {e}")))
        }
    }
}

async fn write_status(
    client: &Client,
    config: &KubeadmConfig,
    plan: &BootstrapPlan,
    data_secret_name: Option<String>,
) -> Result<bool, kube::Error> {
    let current = config.status.clone().unwrap_or_default();
    let mut desired: KubeadmConfigStatus = current.clone();
    for wanted in &plan.conditions {
        condition::set(&mut desired.conditions, wanted.clone());
    }
    if let Some(name) = data_secret_name {
        desired.data_secret_name = Some(name);
        desired.initialization = Some(crate::api::KubeadmConfigInitialization {
            data_secret_created: Some(true),
        });
    }
    desired.observed_generation = config.metadata.generation;
    if desired == current {
        return Ok(false);
    }
    let api: Api<KubeadmConfig> =
        Api::namespaced(client.clone(), &config.namespace().unwrap_or_default());
    let status = json!({
        "initialization": desired.initialization,
        "dataSecretName": desired.data_secret_name,
        "observedGeneration": desired.observed_generation,
        "conditions": desired.conditions,
    });
    write::patch_status(&api, &config.name_any(), status).await?;
    Ok(true)
}
