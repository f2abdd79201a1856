//! The machine part of the suite: an [`Actuator`] over the provider's cloud.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use capi_core::api::{Cluster, Machine};
use capi_core::{
    Actuator, BootstrapData, BootstrapFormat, IdempotencyKey, MachineInstance, MachineScope, labels,
};
use kube::ResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::drive::{interrupted, settle};
use super::{
    CONVERGES, CREATE_IS_FOUND, CREATE_IS_IDEMPOTENT, CREATE_SURVIVES_CRASHES, CloudInventory,
    DELETE_IS_IDEMPOTENT, DELETE_RETURNS_ONLY_WHEN_GONE, EXISTS_NEVER_CREATES, NOTHING_LEAKED,
    Report, Settings, UPDATE_KEEPS_THE_INSTANCE,
};

/// Checks an [`Actuator`] for machines of kind `M` in clusters of kind `C` against the contract
/// (see the [module docs](super)).
///
/// Every machine the suite makes is a copy of the given infrastructure machine with its own
/// `metadata.name` (`conformance-<check>-<n>`), the cluster-name label and, once known,
/// `spec.providerID`, owned by a `Machine` with a fresh UID in the given cluster, whose
/// provider's cluster object is the given one.
pub struct MachineSuite<M, C, A: ?Sized> {
    actuator: Arc<A>,
    cloud: Arc<dyn CloudInventory>,
    infra_machine: M,
    infra_cluster: Arc<C>,
    cluster: Cluster,
    bootstrap: BootstrapData,
    settings: Settings,
}

static MACHINES: AtomicU32 = AtomicU32::new(0);

impl<M, C, A> MachineSuite<M, C, A>
where
    M: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
    C: Send + Sync + 'static,
    A: Actuator<M, C> + ?Sized,
{
    /// A suite for `actuator` over `cloud`, creating machines like `infra_machine` in the cluster
    /// whose provider's object is `infra_cluster`, a `Cluster` named `conformance` in namespace
    /// `default` until [`Self::cluster`] says otherwise.
    pub fn new(
        actuator: Arc<A>,
        cloud: Arc<dyn CloudInventory>,
        infra_machine: M,
        infra_cluster: C,
    ) -> Self {
        let cluster = super::default_cluster();
        Self {
            actuator,
            cloud,
            infra_machine,
            infra_cluster: Arc::new(infra_cluster),
            cluster,
            bootstrap: BootstrapData::new(BootstrapFormat::CloudConfig, "#cloud-config\n"),
            settings: Settings::default(),
        }
    }

    /// The `Cluster` the machines belong to (its name and namespace are the machines').
    pub fn cluster(mut self, cluster: Cluster) -> Self {
        self.cluster = cluster;
        self
    }

    /// The bootstrap data every machine gets (default: an empty `#cloud-config`).
    pub fn bootstrap_data(mut self, data: BootstrapData) -> Self {
        self.bootstrap = data;
        self
    }

    /// How patient the suite is.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Runs every machine check; the report lists each broken rule.
    pub async fn run(&self) -> Report {
        let mut report = Report::default();
        let Some(baseline) = self.resources(&mut report).await else {
            return report;
        };
        self.lifecycle(&mut report).await;
        self.lost_response(&mut report).await;
        self.crashes(&mut report).await;
        if let Some(after) = self.resources(&mut report).await {
            let left: Vec<&String> = after.difference(&baseline).collect();
            report.check(NOTHING_LEAKED, left.is_empty(), || {
                format!("after every machine was deleted the cloud still holds {left:?}")
            });
        }
        report
    }

    /// create → exists (by key, by provider ID) → update → delete → delete again.
    async fn lifecycle(&self, report: &mut Report) {
        let Some(before) = self.instances(report).await else {
            return;
        };
        let Some(fresh) = self.scope(report, "lifecycle", None) else {
            return;
        };
        match settle(&self.settings, || self.actuator.exists(&fresh)).await {
            Ok(None) => {}
            Ok(Some(found)) => report.fail(
                EXISTS_NEVER_CREATES,
                format!(
                    "exists found {} for a machine nothing was created for",
                    found.reported.provider_id
                ),
            ),
            Err(error) => return report.fail(CONVERGES, format!("exists: {error}")),
        }
        let Some(now) = self.instances(report).await else {
            return;
        };
        report.check(EXISTS_NEVER_CREATES, now == before, || {
            format!(
                "exists on a new machine changed the cloud's instances: {:?} appeared",
                now.difference(&before).collect::<Vec<_>>()
            )
        });

        let create = || self.actuator.create(&fresh, &self.bootstrap);
        let created = match settle(&self.settings, create).await {
            Ok(created) => created,
            Err(error) => return report.fail(CONVERGES, format!("create: {error}")),
        };
        let provider_id = created.provider_id.clone();
        if let Some(now) = self.instances(report).await {
            let made = now.difference(&before).count();
            report.check(CREATE_IS_IDEMPOTENT, made == 1, || {
                format!("one create call made {made} instances")
            });
        }
        let found = self.find(report, &fresh, "by idempotency key", true).await;
        report.check(
            CREATE_IS_FOUND,
            found.as_deref() == Some(&provider_id),
            || {
                format!(
                    "exists by idempotency key found {found:?}, create returned {provider_id:?}"
                )
            },
        );
        let Some(recorded) = self.scope_like(report, &fresh, Some(&provider_id)) else {
            return;
        };
        let found = self.find(report, &recorded, "by provider ID", true).await;
        report.check(
            CREATE_IS_FOUND,
            found.as_deref() == Some(&provider_id),
            || format!("exists by provider ID found {found:?}, create returned {provider_id:?}"),
        );
        if let Some(now) = self.instances(report).await {
            let made = now.difference(&before).count();
            report.check(EXISTS_NEVER_CREATES, made == 1, || {
                format!("after exists was called again, {made} instances exist for one machine")
            });
        }

        // As the loop does: update what exists found in the same pass.
        let exists_then_update = || async {
            match self.actuator.exists(&recorded).await? {
                Some(found) => self.actuator.update(&recorded, found).await.map(Some),
                None => Ok(None),
            }
        };
        match settle(&self.settings, exists_then_update).await {
            Ok(None) => report.fail(
                UPDATE_KEEPS_THE_INSTANCE,
                format!("exists found nothing to update; create returned {provider_id:?}"),
            ),
            Ok(Some(outcome)) => report.check(
                UPDATE_KEEPS_THE_INSTANCE,
                outcome.instance.provider_id == provider_id && outcome.immutable_changes.is_empty(),
                || {
                    format!(
                        "update of an unchanged machine returned {} with immutable changes {:?}",
                        outcome.instance.provider_id, outcome.immutable_changes
                    )
                },
            ),
            Err(error) => report.fail(CONVERGES, format!("update: {error}")),
        }

        self.delete_and_check(report, &recorded, &before).await;
        match settle(&self.settings, || self.actuator.delete(&recorded)).await {
            Ok(()) => report.check(DELETE_IS_IDEMPOTENT, true, String::new),
            Err(error) => report.fail(
                DELETE_IS_IDEMPOTENT,
                format!("delete of a machine already deleted: {error}"),
            ),
        }
    }

    /// create whose answer is lost (the loop never records it) → create again.
    async fn lost_response(&self, report: &mut Report) {
        let Some(before) = self.instances(report).await else {
            return;
        };
        let Some(scope) = self.scope(report, "lost-response", None) else {
            return;
        };
        let create = || self.actuator.create(&scope, &self.bootstrap);
        let first = match settle(&self.settings, create).await {
            Ok(first) => first,
            Err(error) => return report.fail(CONVERGES, format!("create: {error}")),
        };
        // The answer never reached the loop: it calls create again for the same machine.
        let second = match settle(&self.settings, create).await {
            Ok(second) => second,
            Err(error) => return report.fail(CONVERGES, format!("create, retried: {error}")),
        };
        if let Some(now) = self.instances(report).await {
            let made = now.difference(&before).count();
            report.check(
                CREATE_IS_IDEMPOTENT,
                made == 1 && first.provider_id == second.provider_id,
                || {
                    format!(
                        "create retried after a lost response returned {} (first: {}); {made} \
                         instances exist for one machine",
                        second.provider_id, first.provider_id
                    )
                },
            );
        }
        for instance in dedup([first, second]) {
            if let Some(recorded) = self.scope_like(report, &scope, Some(&instance.provider_id)) {
                self.delete_and_check(report, &recorded, &before).await;
            }
        }
    }

    /// create stopped after 1, 2, … polls, then recovered the way the loop recovers.
    async fn crashes(&self, report: &mut Report) {
        for polls in 1..=self.settings.crash_points.max(1) {
            let Some(before) = self.instances(report).await else {
                return;
            };
            let Some(scope) = self.scope(report, "crash", None) else {
                return;
            };
            // Only a create that succeeded within the polls has had every await point tried.
            let finished = matches!(
                interrupted(
                    self.actuator.create(&scope, &self.bootstrap),
                    polls,
                    self.settings.poll_gap
                )
                .await,
                Some(Ok(_))
            );
            tokio::time::sleep(self.settings.restart_delay).await;
            // The loop after a restart: exists first, create only if nothing is found.
            let recovered = match settle(&self.settings, || self.actuator.exists(&scope)).await {
                Ok(Some(found)) => found.reported,
                Ok(None) => match settle(&self.settings, || {
                    self.actuator.create(&scope, &self.bootstrap)
                })
                .await
                {
                    Ok(created) => created,
                    Err(error) => {
                        return report.fail(CONVERGES, format!("create after a crash: {error}"));
                    }
                },
                Err(error) => {
                    return report.fail(CONVERGES, format!("exists after a crash: {error}"));
                }
            };
            if let Some(now) = self.instances(report).await {
                let made = now.difference(&before).count();
                report.check(CREATE_SURVIVES_CRASHES, made == 1, || {
                    format!(
                        "create stopped after {polls} poll(s) and retried left {made} instances \
                         for one machine"
                    )
                });
            }
            if let Some(recorded) = self.scope_like(report, &scope, Some(&recovered.provider_id)) {
                self.delete_and_check(report, &recorded, &before).await;
            }
            if finished {
                // Every await point of create has been a crash point.
                return;
            }
        }
        report.notes.push(format!(
            "create had not finished after {} polls {:?} apart: its later await points were not \
             tried as crash points (raise Settings::crash_points or Settings::poll_gap)",
            self.settings.crash_points, self.settings.poll_gap
        ));
    }

    /// Deletes until `Ok`, then checks that the instance is gone.
    async fn delete_and_check(
        &self,
        report: &mut Report,
        scope: &MachineScope<M, C>,
        before: &BTreeSet<String>,
    ) {
        if let Err(error) = settle(&self.settings, || self.actuator.delete(scope)).await {
            return report.fail(CONVERGES, format!("delete: {error}"));
        }
        let found = self.find(report, scope, "after delete", false).await;
        let Some(now) = self.instances(report).await else {
            return;
        };
        let left: Vec<&String> = now.difference(before).collect();
        report.check(
            DELETE_RETURNS_ONLY_WHEN_GONE,
            found.is_none() && left.is_empty(),
            || {
                format!(
                    "delete returned Ok, but exists still finds {found:?} and the cloud still \
                     has {left:?}"
                )
            },
        );
    }

    /// What `exists` finds, asked again (within the deadline) while it disagrees with
    /// `expected` — a cloud's listings may lag behind its writes.
    async fn find(
        &self,
        report: &mut Report,
        scope: &MachineScope<M, C>,
        how: &str,
        expected: bool,
    ) -> Option<String> {
        let deadline = tokio::time::Instant::now() + self.settings.deadline;
        loop {
            let found = match settle(&self.settings, || self.actuator.exists(scope)).await {
                Ok(found) => found.map(|found| found.reported.provider_id),
                Err(error) => {
                    report.fail(CONVERGES, format!("exists {how}: {error}"));
                    return None;
                }
            };
            if found.is_some() == expected || tokio::time::Instant::now() >= deadline {
                return found;
            }
            tokio::time::sleep(self.settings.max_wait).await;
        }
    }

    async fn instances(&self, report: &mut Report) -> Option<BTreeSet<String>> {
        super::listed(report, "instances", self.cloud.instances().await)
    }

    async fn resources(&self, report: &mut Report) -> Option<std::collections::BTreeSet<String>> {
        super::listed(report, "resources", self.cloud.resources().await)
    }

    /// A new machine: a fresh `Machine` UID and a fresh name.
    fn scope(
        &self,
        report: &mut Report,
        check: &str,
        provider_id: Option<&str>,
    ) -> Option<MachineScope<M, C>> {
        let n = MACHINES.fetch_add(1, Ordering::Relaxed);
        let name = format!("conformance-{check}-{n}");
        let namespace = self.cluster.namespace().unwrap_or_else(|| "default".into());
        let cluster_name = self.cluster.name_any();
        let machine: Machine = match serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": unique_uid(),
                "labels": {labels::CLUSTER_NAME: cluster_name},
            },
            "spec": {
                "clusterName": cluster_name,
                "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                "infrastructureRef": {"apiGroup": "", "kind": "", "name": name},
            },
        })) {
            Ok(machine) => machine,
            Err(error) => {
                report.fail(CONVERGES, format!("building a Machine: {error}"));
                return None;
            }
        };
        let machine = Arc::new(machine);
        let key = match IdempotencyKey::for_machine(&machine) {
            Ok(key) => key,
            Err(error) => {
                report.fail(CONVERGES, format!("idempotency key: {error}"));
                return None;
            }
        };
        let infra = self.infra(report, &name, &namespace, &cluster_name, provider_id)?;
        Some(MachineScope {
            cluster: Arc::new(self.cluster.clone()),
            infra_cluster: Some(Arc::clone(&self.infra_cluster)),
            machine,
            infra_machine: Arc::new(infra),
            idempotency_key: key,
        })
    }

    /// The same machine, with `spec.providerID` recorded (or not).
    fn scope_like(
        &self,
        report: &mut Report,
        scope: &MachineScope<M, C>,
        provider_id: Option<&str>,
    ) -> Option<MachineScope<M, C>> {
        let name = scope.machine.name_any();
        let namespace = scope.machine.namespace().unwrap_or_default();
        let infra = self.infra(
            report,
            &name,
            &namespace,
            &scope.machine.spec.cluster_name,
            provider_id,
        )?;
        let mut like = scope.clone();
        like.infra_machine = Arc::new(infra);
        Some(like)
    }

    /// The infrastructure machine of machine `name`.
    fn infra(
        &self,
        report: &mut Report,
        name: &str,
        namespace: &str,
        cluster_name: &str,
        provider_id: Option<&str>,
    ) -> Option<M> {
        let built = made_from(
            &self.infra_machine,
            name,
            namespace,
            cluster_name,
            provider_id,
        );
        match built {
            Ok(infra) => Some(infra),
            Err(error) => {
                report.fail(
                    CONVERGES,
                    format!("the infrastructure machine does not round-trip through JSON: {error}"),
                );
                None
            }
        }
    }
}

/// A copy of the provider's object `template` (a machine or a pool) named `name` in `namespace`,
/// labelled with `cluster_name`, with `spec.providerID` set to `provider_id` (or removed).
pub(super) fn made_from<T: Serialize + DeserializeOwned>(
    template: &T,
    name: &str,
    namespace: &str,
    cluster_name: &str,
    provider_id: Option<&str>,
) -> Result<T, serde_json::Error> {
    let mut value = serde_json::to_value(template)?;
    let metadata = field(&mut value, "metadata");
    metadata.insert("name".into(), json!(name));
    metadata.insert("namespace".into(), json!(namespace));
    object(metadata.entry("labels").or_insert_with(|| json!({})))
        .insert(labels::CLUSTER_NAME.into(), json!(cluster_name));
    let spec = field(&mut value, "spec");
    match provider_id {
        Some(id) => spec.insert("providerID".into(), json!(id)),
        None => spec.remove("providerID"),
    };
    serde_json::from_value(value)
}

/// `value` as an object, replaced by an empty one if it is not an object.
fn object(value: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(serde_json::Map::new());
    }
    match value {
        Value::Object(map) => map,
        _ => unreachable!("replaced by an object above"),
    }
}

/// The object under `key` of `value`, created empty when missing or not an object.
fn field<'a>(value: &'a mut Value, key: &str) -> &'a mut serde_json::Map<String, Value> {
    object(object(value).entry(key).or_insert_with(|| json!({})))
}

fn dedup(instances: [MachineInstance; 2]) -> Vec<MachineInstance> {
    let [first, second] = instances;
    if first.provider_id == second.provider_id {
        vec![first]
    } else {
        vec![first, second]
    }
}

/// A UID no earlier run used: the time, the process and a counter.
pub(crate) fn unique_uid() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (nanos >> 32) as u32,
        (nanos >> 16) as u16,
        std::process::id() & 0xfff,
        N.fetch_add(1, Ordering::Relaxed) & 0xfff,
        nanos & 0xffff_ffff_ffff
    )
}
