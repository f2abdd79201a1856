//! The pool part of the suite: a [`PoolActuator`] over the provider's cloud.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use capi_core::api::{Cluster, MachinePool};
use capi_core::{
    BootstrapData, BootstrapFormat, IdempotencyKey, ModelRevision, PoolActuator, PoolScope,
    PoolSize, ScaleSetReport, labels,
};
use kube::ResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::drive::{interrupted, settle};
use super::machine::{made_from, unique_uid};
use super::{
    CONVERGES, CloudInventory, DELETE_IS_IDEMPOTENT, NOTHING_LEAKED, POOL_CREATE_IS_FOUND,
    POOL_CREATE_IS_IDEMPOTENT, POOL_CREATE_SURVIVES_CRASHES, POOL_DELETE_RETURNS_ONLY_WHEN_GONE,
    POOL_EXISTS_NEVER_CREATES, POOL_HOLDS_ITS_CAPACITY, POOL_LAUNCHES_THE_CURRENT_REVISION,
    POOL_REMOVES_ONLY_THE_NAMED, Report, Settings,
};

/// Checks a [`PoolActuator`] for pools of kind `P` in clusters of kind `C` against the contract
/// (see the [module docs](super)).
///
/// Every pool the suite makes is a copy of the given infrastructure pool with its own
/// `metadata.name` (`conformance-pool-<check>-<n>`), the cluster-name label and, once known,
/// `spec.providerID`, for a `MachinePool` with a fresh UID in the given cluster. Pools hold two
/// instances at most.
pub struct PoolSuite<P, C, A: ?Sized> {
    actuator: Arc<A>,
    cloud: Arc<dyn CloudInventory>,
    infra_pool: P,
    infra_cluster: Arc<C>,
    cluster: Cluster,
    bootstrap: BootstrapData,
    settings: Settings,
}

static POOLS: AtomicU32 = AtomicU32::new(0);

impl<P, C, A> PoolSuite<P, C, A>
where
    P: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
    C: Send + Sync + 'static,
    A: PoolActuator<P, C> + ?Sized,
{
    /// A suite for `actuator` over `cloud`, creating pools like `infra_pool` in the cluster whose
    /// provider's object is `infra_cluster`, a `Cluster` named `conformance` in namespace
    /// `default` until [`Self::cluster`] says otherwise.
    pub fn new(
        actuator: Arc<A>,
        cloud: Arc<dyn CloudInventory>,
        infra_pool: P,
        infra_cluster: C,
    ) -> Self {
        Self {
            actuator,
            cloud,
            infra_pool,
            infra_cluster: Arc::new(infra_cluster),
            cluster: super::default_cluster(),
            bootstrap: BootstrapData::new(BootstrapFormat::CloudConfig, "#cloud-config\n"),
            settings: Settings::default(),
        }
    }

    /// The `Cluster` the pools belong to (its name and namespace are the pools').
    pub fn cluster(mut self, cluster: Cluster) -> Self {
        self.cluster = cluster;
        self
    }

    /// The bootstrap data every pool's instances get (default: an empty `#cloud-config`).
    pub fn bootstrap_data(mut self, data: BootstrapData) -> Self {
        self.bootstrap = data;
        self
    }

    /// How patient the suite is.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Runs every pool check; the report lists each broken rule.
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
                format!("after every pool was deleted the cloud still holds {left:?}")
            });
        }
        report
    }

    /// exists → create → found by key and by provider ID → two instances → one named instance
    /// removed → a new revision launched → delete → delete again.
    async fn lifecycle(&self, report: &mut Report) {
        let Some(before) = self.instances(report).await else {
            return;
        };
        let Some(resources_before) = self.resources(report).await else {
            return;
        };
        let first = ModelRevision::new("r-conformance-1");
        let Some(fresh) = self.scope(report, "lifecycle", None, 2, BTreeSet::new(), &first) else {
            return;
        };
        match settle(&self.settings, || self.actuator.exists(&fresh)).await {
            Ok(None) => {}
            Ok(Some(found)) => report.fail(
                POOL_EXISTS_NEVER_CREATES,
                format!(
                    "exists found {} for a pool nothing was created for",
                    found.reported.provider_id
                ),
            ),
            Err(error) => return report.fail(CONVERGES, format!("exists: {error}")),
        }
        // A scale set `exists` made would launch its instances later: the resources say.
        tokio::time::sleep(self.settings.max_wait).await;
        let Some(now) = self.resources(report).await else {
            return;
        };
        report.check(POOL_EXISTS_NEVER_CREATES, now == resources_before, || {
            format!(
                "exists on a new pool changed the cloud: {:?} appeared",
                now.difference(&resources_before).collect::<Vec<_>>()
            )
        });
        let created = match settle(&self.settings, || {
            self.actuator.create(&fresh, &self.bootstrap)
        })
        .await
        {
            Ok(created) => created,
            Err(error) => return report.fail(CONVERGES, format!("create: {error}")),
        };
        let provider_id = created.provider_id.clone();
        let found = self.find(report, &fresh, "by idempotency key", true).await;
        report.check(
            POOL_CREATE_IS_FOUND,
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
            POOL_CREATE_IS_FOUND,
            found.as_deref() == Some(&provider_id),
            || format!("exists by provider ID found {found:?}, create returned {provider_id:?}"),
        );

        // The scale set holds its capacity.
        let full = self
            .converge(report, &recorded, |r| live(r).len() == 2)
            .await;
        report.check(POOL_HOLDS_ITS_CAPACITY, full.is_some(), || {
            "the scale set never held the 2 instances of its capacity".into()
        });
        let Some(full) = full else {
            return self.delete_and_check(report, &recorded, &before).await;
        };

        // One instance named for removal (by provider ID), the capacity lowered by one: that
        // instance goes, the other stays.
        let ids = live(&full);
        let (gone, kept) = (ids[0].clone(), ids[1].clone());
        let Some(shrunk) = self.resized(report, &recorded, 1, [gone.clone()].into(), &first) else {
            return;
        };
        let after = self
            .converge(report, &shrunk, |r| {
                let left = live(r);
                left == [kept.clone()]
            })
            .await;
        report.check(POOL_REMOVES_ONLY_THE_NAMED, after.is_some(), || {
            format!("removing {gone} (and lowering the capacity to 1) did not leave exactly {kept}")
        });

        // A new revision: instances launched from now on carry it.
        let second = ModelRevision::new("r-conformance-2");
        let Some(rolled) = self.resized(report, &recorded, 2, BTreeSet::new(), &second) else {
            return;
        };
        let launched = self
            .converge(report, &rolled, |r| {
                r.instances
                    .iter()
                    .any(|i| !i.leaving && i.provider_id != kept && i.is_up_to_date(&second))
            })
            .await;
        report.check(POOL_LAUNCHES_THE_CURRENT_REVISION, launched.is_some(), || {
            "after the model moved to a new revision, no instance launched from it was reported \
             with it"
                .into()
        });

        self.delete_and_check(report, &rolled, &before).await;
        match settle(&self.settings, || self.actuator.delete(&rolled)).await {
            Ok(()) => report.check(DELETE_IS_IDEMPOTENT, true, String::new),
            Err(error) => report.fail(
                DELETE_IS_IDEMPOTENT,
                format!("delete of a pool already deleted: {error}"),
            ),
        }
    }

    /// create whose answer is lost (the loop never records it) → create again → the same scale
    /// set; deleting it leaves nothing (a second scale set would be left).
    async fn lost_response(&self, report: &mut Report) {
        let Some(before) = self.instances(report).await else {
            return;
        };
        let revision = ModelRevision::new("r-conformance-1");
        let Some(scope) = self.scope(report, "lost-response", None, 1, BTreeSet::new(), &revision)
        else {
            return;
        };
        let create = || self.actuator.create(&scope, &self.bootstrap);
        let first = match settle(&self.settings, create).await {
            Ok(first) => first,
            Err(error) => return report.fail(CONVERGES, format!("create: {error}")),
        };
        let second = match settle(&self.settings, create).await {
            Ok(second) => second,
            Err(error) => return report.fail(CONVERGES, format!("create, retried: {error}")),
        };
        report.check(
            POOL_CREATE_IS_IDEMPOTENT,
            first.provider_id == second.provider_id,
            || {
                format!(
                    "create retried after a lost response returned {} (first: {})",
                    second.provider_id, first.provider_id
                )
            },
        );
        let Some(recorded) = self.scope_like(report, &scope, Some(&first.provider_id)) else {
            return;
        };
        self.delete_and_check(report, &recorded, &before).await;
        if first.provider_id != second.provider_id
            && let Some(other) = self.scope_like(report, &scope, Some(&second.provider_id))
        {
            self.delete_and_check(report, &other, &before).await;
        }
    }

    /// create stopped after 1, 2, … polls, recovered the way the loop recovers (exists, else
    /// create), then deleted: nothing may be left, or a crash made a second scale set that
    /// nothing finds.
    async fn crashes(&self, report: &mut Report) {
        for polls in 1..=self.settings.crash_points.max(1) {
            let Some(before) = self.resources(report).await else {
                return;
            };
            let Some(instances_before) = self.instances(report).await else {
                return;
            };
            let revision = ModelRevision::new("r-conformance-1");
            let Some(scope) = self.scope(report, "crash", None, 1, BTreeSet::new(), &revision)
            else {
                return;
            };
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
            if let Some(recorded) = self.scope_like(report, &scope, Some(&recovered.provider_id)) {
                self.delete_and_check(report, &recorded, &instances_before)
                    .await;
            }
            if let Some(after) = self.resources(report).await {
                let left: Vec<&String> = after.difference(&before).collect();
                report.check(POOL_CREATE_SURVIVES_CRASHES, left.is_empty(), || {
                    format!(
                        "create stopped after {polls} poll(s), recovered and deleted, left {left:?}"
                    )
                });
            }
            if finished {
                return;
            }
        }
        report.notes.push(format!(
            "pool create had not finished after {} polls {:?} apart: its later await points were \
             not tried as crash points (raise Settings::crash_points or Settings::poll_gap)",
            self.settings.crash_points, self.settings.poll_gap
        ));
    }

    /// `exists` then `update` with what it found, as one reconcile does, until `done` holds for
    /// the report (within the deadline); the last report that did.
    async fn converge(
        &self,
        report: &mut Report,
        scope: &PoolScope<P, C>,
        done: impl Fn(&ScaleSetReport) -> bool,
    ) -> Option<ScaleSetReport> {
        let deadline = tokio::time::Instant::now() + self.settings.deadline;
        loop {
            let pass = settle(&self.settings, || async {
                match self.actuator.exists(scope).await? {
                    Some(found) => self
                        .actuator
                        .update(scope, found, Some(self.bootstrap.clone()))
                        .await
                        .map(Some),
                    None => Ok(None),
                }
            })
            .await;
            match pass {
                Ok(Some(updated)) if done(&updated) => return Some(updated),
                Ok(_) => {}
                Err(error) => {
                    report.fail(CONVERGES, format!("exists and update: {error}"));
                    return None;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(
                self.settings
                    .max_wait
                    .min(std::time::Duration::from_millis(200)),
            )
            .await;
        }
    }

    /// Deletes until `Ok`, then checks that the scale set and its instances are gone.
    async fn delete_and_check(
        &self,
        report: &mut Report,
        scope: &PoolScope<P, C>,
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
            POOL_DELETE_RETURNS_ONLY_WHEN_GONE,
            found.is_none() && left.is_empty(),
            || {
                format!(
                    "delete returned Ok, but exists still finds {found:?} and the cloud still \
                     has instances {left:?}"
                )
            },
        );
    }

    /// What `exists` finds, asked again (within the deadline) while it disagrees with
    /// `expected`.
    async fn find(
        &self,
        report: &mut Report,
        scope: &PoolScope<P, C>,
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

    async fn resources(&self, report: &mut Report) -> Option<BTreeSet<String>> {
        super::listed(report, "resources", self.cloud.resources().await)
    }

    /// A new pool: a `MachinePool` with a fresh UID and name, at `capacity`, removing `remove`,
    /// at `revision`.
    fn scope(
        &self,
        report: &mut Report,
        check: &str,
        provider_id: Option<&str>,
        capacity: u32,
        remove: BTreeSet<String>,
        revision: &ModelRevision,
    ) -> Option<PoolScope<P, C>> {
        let n = POOLS.fetch_add(1, Ordering::Relaxed);
        let name = format!("conformance-pool-{check}-{n}");
        let namespace = self.cluster.namespace().unwrap_or_else(|| "default".into());
        let cluster_name = self.cluster.name_any();
        let pool: MachinePool = match serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": unique_uid(),
                "labels": {labels::CLUSTER_NAME: cluster_name},
            },
            "spec": {
                "clusterName": cluster_name,
                "replicas": capacity,
                "template": {"spec": {
                    "clusterName": cluster_name,
                    "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                    "infrastructureRef": {"apiGroup": "", "kind": "", "name": name},
                }},
            },
        })) {
            Ok(pool) => pool,
            Err(error) => {
                report.fail(CONVERGES, format!("building a MachinePool: {error}"));
                return None;
            }
        };
        let key = match IdempotencyKey::for_machine_pool(&pool) {
            Ok(key) => key,
            Err(error) => {
                report.fail(CONVERGES, format!("idempotency key: {error}"));
                return None;
            }
        };
        let infra = self.infra(report, &name, &namespace, &cluster_name, provider_id)?;
        Some(PoolScope {
            cluster: Arc::new(self.cluster.clone()),
            infra_cluster: Some(Arc::clone(&self.infra_cluster)),
            machine_pool: Arc::new(pool),
            infra_pool: Arc::new(infra),
            idempotency_key: key,
            size: PoolSize {
                capacity: Some(capacity),
                remove,
            },
            revision: revision.clone(),
        })
    }

    /// The same pool, with `spec.providerID` recorded (or not).
    fn scope_like(
        &self,
        report: &mut Report,
        scope: &PoolScope<P, C>,
        provider_id: Option<&str>,
    ) -> Option<PoolScope<P, C>> {
        let pool = &scope.machine_pool;
        let infra = self.infra(
            report,
            &pool.name_any(),
            &pool.namespace().unwrap_or_default(),
            &pool.spec.cluster_name,
            provider_id,
        )?;
        Some(PoolScope {
            cluster: Arc::clone(&scope.cluster),
            infra_cluster: scope.infra_cluster.clone(),
            machine_pool: Arc::clone(pool),
            infra_pool: Arc::new(infra),
            idempotency_key: scope.idempotency_key.clone(),
            size: scope.size.clone(),
            revision: scope.revision.clone(),
        })
    }

    /// The same pool at another size and revision.
    fn resized(
        &self,
        report: &mut Report,
        scope: &PoolScope<P, C>,
        capacity: u32,
        remove: BTreeSet<String>,
        revision: &ModelRevision,
    ) -> Option<PoolScope<P, C>> {
        let mut resized = self.scope_like(report, scope, None)?;
        resized.infra_pool = Arc::clone(&scope.infra_pool);
        resized.size = PoolSize {
            capacity: Some(capacity),
            remove,
        };
        resized.revision = revision.clone();
        Some(resized)
    }

    /// The infrastructure pool of pool `name`.
    fn infra(
        &self,
        report: &mut Report,
        name: &str,
        namespace: &str,
        cluster_name: &str,
        provider_id: Option<&str>,
    ) -> Option<P> {
        let built = made_from(&self.infra_pool, name, namespace, cluster_name, provider_id);
        match built {
            Ok(infra) => Some(infra),
            Err(error) => {
                report.fail(
                    CONVERGES,
                    format!("the infrastructure pool does not round-trip through JSON: {error}"),
                );
                None
            }
        }
    }
}

/// The provider IDs of the instances a report lists that are not leaving, sorted.
fn live(report: &ScaleSetReport) -> Vec<String> {
    let mut ids: Vec<String> = report
        .instances
        .iter()
        .filter(|i| !i.leaving)
        .map(|i| i.provider_id.clone())
        .collect();
    ids.sort();
    ids
}
