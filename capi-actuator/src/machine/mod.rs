//! The infrastructure machine reconciler: drives an [`Actuator`] for a provider's machine kind.
//!
//! Per object: find the owner `Machine` and its `Cluster`; honour pause; on deletion call
//! `delete` until the instance is gone, then drop the finalizer; otherwise add the finalizer, wait
//! for the cluster infrastructure and the bootstrap data, then `exists` → `update`, or `create`,
//! and record provider ID, addresses, `initialization.provisioned` and conditions.
//!
//! Phases are separate functions: [`observe`](observe::observe) reads, [`decide`](decide::decide)
//! calls the cloud and plans, [`record`](record::record) writes.

mod decide;
mod observe;
mod record;

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use capi_core::api::{Cluster, Machine};
use capi_core::infra::InfraMachine;
use capi_core::{Actuator, ActuatorError, labels};
use futures::{Future, StreamExt};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

pub use decide::INFRA_MACHINE_FINALIZER;
use crate::plan::Next;

use crate::retry::{FailureCounts, RetryPolicy};

/// Why one reconcile failed. Transient actuator failures and API errors back off per object.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading or writing the API server failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// The actuator reported a failure.
    #[error("actuator failed: {0}")]
    Actuator(#[source] ActuatorError),
}

/// Builds and runs the reconciler of one infrastructure machine kind `M`.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use capi_actuator::machine::InfraMachineReconciler;
/// # async fn demo<M: capi_core::infra::InfraMachine>(client: kube::Client, actuator: Arc<dyn capi_core::Actuator<M>>) {
/// InfraMachineReconciler::new(client, actuator)
///     .concurrency(32)
///     .run(std::future::pending())
///     .await;
/// # }
/// ```
pub struct InfraMachineReconciler<M: InfraMachine> {
    client: Client,
    actuator: Arc<dyn Actuator<M>>,
    policy: RetryPolicy,
    concurrency: u16,
    namespace: Option<String>,
    label_selector: Option<String>,
    reporter: String,
}

impl<M: InfraMachine> InfraMachineReconciler<M> {
    /// A reconciler of every `M` in the cluster, with the default retry policy and concurrency 16.
    pub fn new(client: Client, actuator: Arc<dyn Actuator<M>>) -> Self {
        Self {
            client,
            actuator,
            policy: RetryPolicy::default(),
            concurrency: 16,
            namespace: None,
            label_selector: None,
            reporter: format!("{}-controller", M::kind(&()).to_lowercase()),
        }
    }

    /// Sets the retry policy.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// At most this many objects are reconciled at once (at least 1).
    pub fn concurrency(mut self, concurrency: u16) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// Only objects in this namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only objects matching this label selector.
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// Runs until `shutdown` completes; in-flight reconciles finish first.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
        let api: Api<M> = scoped_api(&self.client, self.namespace.as_deref());
        let mut watch_config = watcher::Config::default();
        if let Some(selector) = &self.label_selector {
            watch_config = watch_config.labels(selector);
        }
        let (reader, writer) = reflector::store();
        let trigger = watcher(api, watch_config)
            .default_backoff()
            .reflect(writer)
            .applied_objects()
            .predicate_filter(reconcile_relevant::<M>, Default::default());

        let by_cluster = reader.clone();
        let context = Arc::new(Context {
            recorder: Recorder::new(
                self.client.clone(),
                Reporter {
                    controller: self.reporter.clone(),
                    instance: None,
                },
            ),
            client: self.client.clone(),
            actuator: self.actuator,
            policy: self.policy,
            failures: FailureCounts::default(),
            invalid_at_generation: Mutex::new(HashMap::new()),
        });
        Controller::for_stream(trigger, reader)
            .with_config(ControllerConfig::default().concurrency(self.concurrency))
            // A Machine changes (bootstrap data ready, owner set): reconcile its infrastructure.
            .watches(
                scoped_api::<Machine>(&self.client, self.namespace.as_deref()),
                watcher::Config::default(),
                |machine| {
                    let reference = &machine.spec.infrastructure_ref;
                    let ours =
                        reference.kind == M::kind(&()) && reference.api_group == M::group(&());
                    let namespace = machine.namespace().unwrap_or_default();
                    ours.then(|| ObjectRef::<M>::new(&reference.name).within(&namespace))
                },
            )
            // A Cluster changes (infrastructure ready, paused): reconcile its machines.
            .watches(
                scoped_api::<Cluster>(&self.client, self.namespace.as_deref()),
                watcher::Config::default(),
                move |cluster| {
                    let name = cluster.name_any();
                    let namespace = cluster.namespace();
                    by_cluster
                        .state()
                        .into_iter()
                        .filter(|m| {
                            m.namespace() == namespace
                                && labels::cluster_name(m.meta()) == Some(name.as_str())
                        })
                        .map(|m| ObjectRef::from_obj(m.as_ref()))
                        .collect::<Vec<_>>()
                },
            )
            .graceful_shutdown_on(shutdown)
            .run(reconcile::<M>, error_policy::<M>, context)
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(%error, "reconcile finished with an error");
                }
            })
            .await;
    }
}

fn scoped_api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// What makes an object worth reconciling again: not its status (which the loop writes itself) but
/// its spec, deletion, finalizers, owners, labels and annotations.
fn reconcile_relevant<M: InfraMachine>(infra: &M) -> Option<u64> {
    let meta = infra.meta();
    let mut hasher = DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.owner_references
        .as_ref()
        .map(|refs| refs.iter().map(|r| r.uid.clone()).collect::<Vec<_>>())
        .hash(&mut hasher);
    Some(hasher.finish())
}

struct Context<M: InfraMachine> {
    client: Client,
    recorder: Recorder,
    actuator: Arc<dyn Actuator<M>>,
    policy: RetryPolicy,
    failures: FailureCounts,
    invalid_at_generation: Mutex<HashMap<String, i64>>,
}

fn key<M: InfraMachine>(infra: &M) -> String {
    format!(
        "{}/{}",
        infra.namespace().unwrap_or_default(),
        infra.name_any()
    )
}

#[tracing::instrument(skip_all, fields(kind = %M::kind(&()), namespace = %infra.namespace().unwrap_or_default(), name = %infra.name_any()))]
async fn reconcile<M: InfraMachine>(
    infra: Arc<M>,
    context: Arc<Context<M>>,
) -> Result<Action, ReconcileError> {
    let key = key(infra.as_ref());
    let invalid = context
        .invalid_at_generation
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .copied();
    let snapshot = observe::observe(&context.client, Arc::clone(&infra), invalid).await?;
    let plan = decide::decide(context.actuator.as_ref(), snapshot, context.policy.poll).await;
    record::record(&context.client, &context.recorder, infra.as_ref(), &plan).await?;
    let action = match plan.next {
        Next::Failed(error) => return Err(ReconcileError::Actuator(error)),
        Next::AwaitChange => Action::await_change(),
        Next::Requeue(delay) => Action::requeue(context.policy.jittered(delay)),
        Next::Resync => Action::requeue(context.policy.jittered(context.policy.resync)),
        Next::InvalidConfiguration => {
            if let Some(generation) = infra.meta().generation {
                context
                    .invalid_at_generation
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.clone(), generation);
            }
            Action::await_change()
        }
    };
    context.failures.reset(&key);
    Ok(action)
}

fn error_policy<M: InfraMachine>(
    infra: Arc<M>,
    error: &ReconcileError,
    context: Arc<Context<M>>,
) -> Action {
    let failures = context.failures.record_failure(&key(infra.as_ref()));
    let delay = context.policy.backoff(failures);
    tracing::warn!(
        kind = %M::kind(&()),
        namespace = %infra.namespace().unwrap_or_default(),
        name = %infra.name_any(),
        failures,
        retry_in = ?delay,
        %error,
        "reconcile failed"
    );
    Action::requeue(delay)
}

#[cfg(test)]
mod tests;
