//! The pool suite against a correct pool actuator and against deliberately broken ones: each
//! breaks the rule it should, by name.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use capi_core::{
    ActuatorError, BootstrapData, Found, InstanceState, ModelRevision, PoolActuator, PoolInstance,
    PoolScope, ScaleSetReport,
};
use serde_json::{Value, json};

use super::*;

/// What a broken pool actuator gets wrong.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Flaw {
    None,
    /// `create` does not look for a scale set made by an earlier attempt.
    NoLookupOnCreate,
    /// Scale-in lets the cloud pick: the newest instance goes, whatever was named.
    IgnoresNamedRemovals,
    /// The model never moves to a new revision.
    KeepsTheFirstModel,
    /// `delete` returns `Ok` as soon as the deletion started.
    DeleteReturnsEarly,
    /// `exists` creates an empty scale set when it finds none.
    ExistsCreates,
    /// `exists` finds a scale set by provider ID only, never by idempotency key.
    FindsOnlyById,
    /// The scale set never launches instances.
    NeverLaunches,
    /// `create` makes an untagged scale set, then tags it in a second call.
    TagsAfterCreate,
}

#[derive(Default)]
struct Set {
    tag: String,
    capacity: u32,
    revision: String,
    /// Instance name → the revision it was launched from.
    instances: BTreeMap<String, String>,
    deleting: bool,
}

#[derive(Default)]
struct Cloud {
    sets: BTreeMap<String, Set>,
    next: u32,
}

impl Cloud {
    /// The cloud's own work between calls: sets fill up to their capacity, deletions finish.
    fn advance(&mut self, launches: bool) {
        // A deleting set loses its instances at one call and is gone at the next.
        self.sets.retain(|_, set| {
            if !set.deleting {
                return true;
            }
            let was_empty = set.instances.is_empty();
            set.instances.clear();
            !was_empty
        });
        for set in self.sets.values_mut().filter(|s| !s.deleting && launches) {
            while set.instances.len() < set.capacity as usize {
                self.next += 1;
                set.instances
                    .insert(format!("vm-{:04}", self.next), set.revision.clone());
            }
        }
    }
}

struct Fake {
    cloud: Mutex<Cloud>,
    flaw: Flaw,
}

impl Fake {
    fn new(flaw: Flaw) -> Arc<Self> {
        Arc::new(Self {
            cloud: Mutex::new(Cloud::default()),
            flaw,
        })
    }

    async fn call<T>(&self, f: impl FnOnce(&mut Cloud) -> T) -> T {
        tokio::task::yield_now().await;
        let mut cloud = self.cloud.lock().unwrap();
        cloud.advance(self.flaw != Flaw::NeverLaunches);
        f(&mut cloud)
    }

    fn report(id: &str, set: &Set) -> ScaleSetReport {
        let mut report = ScaleSetReport::new(format!("fake:///sets/{id}"), set.capacity);
        for (name, revision) in &set.instances {
            report = report.with_instance(
                PoolInstance::new(
                    format!("fake:///{name}"),
                    name.clone(),
                    InstanceState::Running,
                )
                .from_revision(ModelRevision::new(revision.clone())),
            );
        }
        report
    }

    async fn find(&self, scope: &PoolScope<Value, Value>) -> Option<ScaleSetReport> {
        let by_id = scope.infra_pool["spec"]["providerID"]
            .as_str()
            .and_then(|p| p.strip_prefix("fake:///sets/"))
            .map(str::to_string);
        let tag = scope.idempotency_key.as_str().to_string();
        let by_key = self.flaw != Flaw::FindsOnlyById;
        self.call(move |cloud| {
            cloud
                .sets
                .iter()
                .find(|(id, set)| match &by_id {
                    Some(wanted) => *id == wanted,
                    None => by_key && set.tag == tag,
                })
                .map(|(id, set)| Self::report(id, set))
        })
        .await
    }
}

#[async_trait]
impl PoolActuator<Value, Value> for Fake {
    type ScaleSet = ();

    async fn exists(
        &self,
        scope: &PoolScope<Value, Value>,
    ) -> Result<Option<Found<(), ScaleSetReport>>, ActuatorError> {
        let found = self.find(scope).await;
        if found.is_none() && self.flaw == Flaw::ExistsCreates {
            self.call(|cloud| {
                cloud.next += 1;
                let id = format!("set-{}", cloud.next);
                cloud.sets.insert(id, Set::default());
            })
            .await;
        }
        Ok(found.map(Found::new))
    }

    async fn create(
        &self,
        scope: &PoolScope<Value, Value>,
        _: &BootstrapData,
    ) -> Result<ScaleSetReport, ActuatorError> {
        if self.flaw != Flaw::NoLookupOnCreate
            && let Some(found) = self.find(scope).await
        {
            return Ok(found);
        }
        let tag = scope.idempotency_key.as_str().to_string();
        let capacity = scope.size.capacity.unwrap_or(1);
        let revision = scope.revision.as_str().to_string();
        let tag_later = self.flaw == Flaw::TagsAfterCreate;
        let first_tag = if tag_later {
            String::new()
        } else {
            tag.clone()
        };
        let (id, report) = self
            .call(move |cloud| {
                cloud.next += 1;
                let id = format!("set-{}", cloud.next);
                let set = Set {
                    tag: first_tag,
                    capacity,
                    revision,
                    ..Set::default()
                };
                let report = Self::report(&id, &set);
                cloud.sets.insert(id.clone(), set);
                (id, report)
            })
            .await;
        if tag_later {
            self.call(move |cloud| {
                if let Some(set) = cloud.sets.get_mut(&id) {
                    set.tag = tag;
                }
            })
            .await;
        }
        Ok(report)
    }

    async fn update(
        &self,
        scope: &PoolScope<Value, Value>,
        found: Found<(), ScaleSetReport>,
        _: Option<BootstrapData>,
    ) -> Result<ScaleSetReport, ActuatorError> {
        let id = found
            .reported
            .provider_id
            .trim_start_matches("fake:///sets/")
            .to_string();
        let remove = scope.size.remove.clone();
        let capacity = scope.size.capacity.unwrap_or(1);
        let revision = scope.revision.as_str().to_string();
        let flaw = self.flaw;
        self.call(move |cloud| {
            let Some(set) = cloud.sets.get_mut(&id) else {
                return Err(ActuatorError::transient_message(
                    "Gone",
                    "the scale set is gone",
                ));
            };
            if flaw == Flaw::IgnoresNamedRemovals {
                while set.instances.len() > capacity as usize {
                    let newest = set.instances.keys().next_back().cloned().unwrap();
                    set.instances.remove(&newest);
                }
            } else {
                set.instances
                    .retain(|name, _| !remove.contains(&format!("fake:///{name}")));
            }
            set.capacity = capacity;
            if flaw != Flaw::KeepsTheFirstModel {
                set.revision = revision;
            }
            Ok(Self::report(&id, set))
        })
        .await
    }

    async fn delete(&self, scope: &PoolScope<Value, Value>) -> Result<(), ActuatorError> {
        let Some(found) = self.find(scope).await else {
            return Ok(());
        };
        let id = found
            .provider_id
            .trim_start_matches("fake:///sets/")
            .to_string();
        let early = self.flaw == Flaw::DeleteReturnsEarly;
        self.call(move |cloud| {
            if let Some(set) = cloud.sets.get_mut(&id) {
                set.deleting = true;
                if early {
                    // Forgets the set's instances: they stay in the cloud, nothing finds them.
                    set.tag = format!("orphaned-{}", set.tag);
                    set.deleting = false;
                    set.capacity = set.instances.len() as u32;
                    return Ok(());
                }
                return Err(ActuatorError::requeue_after(
                    Duration::from_millis(1),
                    "Deleting",
                    "deleting",
                ));
            }
            Ok(())
        })
        .await
    }
}

struct Inventory(Arc<Fake>);

#[async_trait]
impl CloudInventory for Inventory {
    async fn instances(&self) -> Result<BTreeSet<String>, String> {
        let cloud = self.0.cloud.lock().unwrap();
        Ok(cloud
            .sets
            .values()
            .flat_map(|s| s.instances.keys().cloned())
            .collect())
    }

    async fn resources(&self) -> Result<BTreeSet<String>, String> {
        let cloud = self.0.cloud.lock().unwrap();
        Ok(cloud
            .sets
            .iter()
            .flat_map(|(id, s)| std::iter::once(id.clone()).chain(s.instances.keys().cloned()))
            .collect())
    }
}

async fn pools(flaw: Flaw) -> Report {
    let fake = Fake::new(flaw);
    let settings = Settings {
        deadline: Duration::from_secs(2),
        max_wait: Duration::from_millis(5),
        crash_points: 8,
        ..Settings::default()
    };
    PoolSuite::new(
        fake.clone(),
        Arc::new(Inventory(fake)),
        json!({"spec": {"flavor": "small"}}),
        json!({"spec": {}}),
    )
    .settings(settings)
    .run()
    .await
}

#[tokio::test]
async fn a_correct_pool_actuator_conforms_and_every_pool_rule_is_checked() {
    let report = pools(Flaw::None).await;
    report.assert_conforms();
    for rule in [
        POOL_EXISTS_NEVER_CREATES,
        POOL_CREATE_IS_FOUND,
        POOL_CREATE_IS_IDEMPOTENT,
        POOL_CREATE_SURVIVES_CRASHES,
        POOL_HOLDS_ITS_CAPACITY,
        POOL_REMOVES_ONLY_THE_NAMED,
        POOL_LAUNCHES_THE_CURRENT_REVISION,
        POOL_DELETE_RETURNS_ONLY_WHEN_GONE,
        DELETE_IS_IDEMPOTENT,
        NOTHING_LEAKED,
    ] {
        assert!(report.checked.contains(&rule), "{rule} not checked");
    }
}

#[tokio::test]
async fn a_pool_create_that_makes_a_second_scale_set_is_named() {
    let report = pools(Flaw::NoLookupOnCreate).await;
    assert!(report.broke(POOL_CREATE_IS_IDEMPOTENT), "{report:?}");
}

#[tokio::test]
async fn a_scale_in_that_lets_the_cloud_pick_is_named() {
    let report = pools(Flaw::IgnoresNamedRemovals).await;
    assert!(report.broke(POOL_REMOVES_ONLY_THE_NAMED), "{report:?}");
    assert!(!report.broke(POOL_CREATE_IS_IDEMPOTENT));
}

#[tokio::test]
async fn a_model_that_never_moves_to_the_new_revision_is_named() {
    let report = pools(Flaw::KeepsTheFirstModel).await;
    assert!(
        report.broke(POOL_LAUNCHES_THE_CURRENT_REVISION),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_pool_delete_that_returns_before_its_instances_are_gone_is_named() {
    let report = pools(Flaw::DeleteReturnsEarly).await;
    assert!(
        report.broke(POOL_DELETE_RETURNS_ONLY_WHEN_GONE),
        "{report:?}"
    );
    assert!(report.broke(NOTHING_LEAKED));
}

#[tokio::test]
async fn an_exists_that_creates_a_scale_set_is_named() {
    let report = pools(Flaw::ExistsCreates).await;
    assert!(report.broke(POOL_EXISTS_NEVER_CREATES), "{report:?}");
}

#[tokio::test]
async fn an_exists_that_cannot_find_by_key_is_named() {
    let report = pools(Flaw::FindsOnlyById).await;
    assert!(report.broke(POOL_CREATE_IS_FOUND), "{report:?}");
}

#[tokio::test]
async fn a_scale_set_that_never_holds_its_capacity_is_named() {
    let report = pools(Flaw::NeverLaunches).await;
    assert!(report.broke(POOL_HOLDS_ITS_CAPACITY), "{report:?}");
}

#[tokio::test]
async fn a_create_that_tags_after_creating_is_named_by_the_crash_check() {
    let report = pools(Flaw::TagsAfterCreate).await;
    assert!(report.broke(POOL_CREATE_SURVIVES_CRASHES), "{report:?}");
}
