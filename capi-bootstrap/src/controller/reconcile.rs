//! One pass over a `KubeadmConfig`: a [`Scope`] holding what the pass read and the status it
//! plans, and [`reconcile_once`], which runs the phases (in [`super::phases`]) in order.

use std::ops::ControlFlow::{Break, Continue};
use std::sync::Arc;

use crate::api::KubeadmConfig;
use crate::pki::ClusterPki;
use capi_core::api::{Cluster, Machine, MachinePool};
use capi_runtime::cache::lookup::Cached;
use capi_runtime::cache::memo::Memo;
use capi_runtime::plan::{Next, Plan};
use capi_runtime::write;
use capi_runtime::{Context, ReconcileError};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};

use super::{BootstrapSettings, phases, status};

pub(super) type BootstrapPlan = Plan<()>;

/// Where a reconcile reads the owner `Machine` or `MachinePool` and its `Cluster` from: the
/// controller's own watches, the API server for what they have not seen yet.
pub(crate) struct Owners {
    pub(crate) machines: Cached<Machine>,
    pub(crate) pools: Cached<MachinePool>,
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
    /// The pools' configs (by UID) whose token was found fresh or rotated lately (within a
    /// quarter of the token TTL): a pass does not read their data Secret again.
    pub(crate) pool_tokens: Memo<()>,
}

impl Owners {
    /// What a reconcile reads from `machines`, `pools` and `clusters`, with nothing remembered
    /// yet; join tokens are extended at most every half `token_refresh`, pools' looked at every
    /// quarter `token_ttl`.
    pub(crate) fn new(
        machines: Cached<Machine>,
        pools: Cached<MachinePool>,
        clusters: Cached<Cluster>,
        token_refresh: std::time::Duration,
        token_ttl: std::time::Duration,
    ) -> Self {
        Self {
            machines,
            pools,
            clusters,
            own_writes: write::OwnWrites::default(),
            pki: Memo::new(CLUSTER_FACTS_KEPT),
            workloads: Memo::new(CLUSTER_FACTS_KEPT),
            extended_tokens: Memo::new(token_refresh / 2),
            pool_tokens: Memo::new(token_ttl / 4),
        }
    }
}

/// How long a cluster's PKI and workload client are used before they are read again.
const CLUSTER_FACTS_KEPT: std::time::Duration = std::time::Duration::from_secs(60);

/// What one pass over a config works with: what it read, and the status it plans, written once.
pub(super) struct Scope<'a> {
    pub(super) config: &'a KubeadmConfig,
    pub(super) context: &'a Context<BootstrapSettings>,
    pub(super) owners: &'a Owners,
    pub(super) namespace: String,
    /// The Secrets of the config's namespace: its data, the cluster PKI, the kubeconfig.
    pub(super) secrets: Api<Secret>,
    /// The conditions, events and next step this pass plans.
    pub(super) plan: BootstrapPlan,
    /// The config's data Secret, once this pass has data for it (rendered now or before).
    pub(super) data_secret_name: Option<String>,
    /// Whether this pass has looked for data an earlier render left (one read at most).
    pub(super) looked: bool,
}

impl<'a> Scope<'a> {
    fn new(
        config: &'a KubeadmConfig,
        context: &'a Context<BootstrapSettings>,
        owners: &'a Owners,
    ) -> Self {
        let namespace = config.namespace().unwrap_or_default();
        Self {
            config,
            context,
            owners,
            secrets: Api::namespaced(context.client.clone(), &namespace),
            namespace,
            plan: BootstrapPlan::new(config.metadata.generation),
            data_secret_name: None,
            looked: false,
        }
    }
}

/// The config's owner, found by [`phases::find_owner`]: the Machine or MachinePool, and its
/// Cluster.
pub(super) struct Owner {
    /// The owner's UID.
    pub(super) uid: String,
    pub(super) owned_by: OwnedBy,
    pub(super) cluster: Arc<Cluster>,
}

/// What owns a config: one machine, or a pool whose every instance boots from its data.
pub(super) enum OwnedBy {
    Machine(Arc<Machine>),
    Pool(Arc<MachinePool>),
}

impl Owner {
    /// The Kubernetes version the owner's nodes run (`spec.version`, or the pool template's).
    pub(super) fn version(&self) -> Option<&str> {
        match &self.owned_by {
            OwnedBy::Machine(machine) => machine.spec.version.as_deref(),
            OwnedBy::Pool(pool) => pool.spec.template.spec.version.as_deref(),
        }
    }

    /// Whether the owner is a control-plane machine (a pool's nodes are workers).
    pub(super) fn is_control_plane(&self) -> bool {
        match &self.owned_by {
            OwnedBy::Machine(machine) => machine.is_control_plane(),
            OwnedBy::Pool(_) => false,
        }
    }

    /// Whether the owner is being deleted.
    pub(super) fn deleting(&self) -> bool {
        match &self.owned_by {
            OwnedBy::Machine(machine) => machine.metadata.deletion_timestamp.is_some(),
            OwnedBy::Pool(pool) => pool.metadata.deletion_timestamp.is_some(),
        }
    }

    /// The owner's name.
    pub(super) fn name(&self) -> String {
        match &self.owned_by {
            OwnedBy::Machine(machine) => machine.name_any(),
            OwnedBy::Pool(pool) => pool.name_any(),
        }
    }

    /// The owner as a Machine, for the hooks that add files ([`super::BootstrapFiles`]): the
    /// Machine itself, or one made of a pool's template (its name and labels, its template's
    /// spec), as every instance of the pool is.
    pub(super) fn as_machine(&self) -> std::borrow::Cow<'_, Machine> {
        match &self.owned_by {
            OwnedBy::Machine(machine) => std::borrow::Cow::Borrowed(machine.as_ref()),
            OwnedBy::Pool(pool) => {
                let mut machine = Machine::default();
                machine.metadata.name = pool.metadata.name.clone();
                machine.metadata.namespace = pool.metadata.namespace.clone();
                machine.metadata.labels = pool
                    .spec
                    .template
                    .metadata
                    .as_ref()
                    .map(|m| m.labels.clone());
                machine.spec = pool.spec.template.spec.clone();
                std::borrow::Cow::Owned(machine)
            }
        }
    }
}

/// Why a pass ends without data; [`status::conclude`] records it on `Ready`.
pub(super) enum Failure {
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

/// One pass over a config: the phases decide the config's data and status until one ends them;
/// then the status is written once (unless the API server failed) and the events published.
pub(crate) async fn reconcile_once(
    config: &Arc<KubeadmConfig>,
    context: &Context<BootstrapSettings>,
    owners: &Owners,
) -> Result<Next, ReconcileError> {
    if let Break(next) = phases::await_own_write(config, owners) {
        return Ok(next);
    }
    let mut scope = Scope::new(config, context, owners);
    let decided = async {
        let owner = match phases::find_owner(&mut scope).await? {
            Continue(owner) => owner,
            Break(()) => return Ok(()),
        };
        if let Break(()) = phases::honour_pause(&mut scope, &owner) {
            return Ok(());
        }
        if let Break(()) = phases::release_init_lock(&scope, &owner).await? {
            return Ok(());
        }
        if let Break(()) = phases::keep_recorded_data(&mut scope, &owner).await? {
            return Ok(());
        }
        if let Break(()) = phases::recover_earlier_data(&mut scope, &owner).await? {
            return Ok(());
        }
        if let Break(()) = phases::withhold_from_deleting_machine(&mut scope, &owner) {
            return Ok(());
        }
        phases::render_or_keep_earlier(&mut scope, &owner).await
    }
    .await;
    let next = status::conclude(&mut scope, decided)?;
    status::write(&scope).await?;
    Ok(next)
}
