//! The suite against a correct actuator and against deliberately broken ones: each breaks the
//! rule it should, by name.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use capi_core::api::ApiEndpoint;
use capi_core::{
    Actuator, ActuatorError, BootstrapData, ClusterActuator, ClusterInfrastructure, ClusterScope,
    Found, InstanceState, MachineInstance, MachineScope, UpdateOutcome,
};
use serde_json::{Value, json};

use super::*;

/// What a broken actuator gets wrong.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Flaw {
    None,
    /// `create` does not look for an instance made by an earlier attempt.
    NoLookupOnCreate,
    /// `exists` creates what it does not find.
    ExistsCreates,
    /// `delete` returns `Ok` as soon as the deletion started.
    DeleteReturnsEarly,
    /// `delete` forgets the instance's port.
    LeaksPort,
    /// `create` tags the instance with the key only after creating it, in a second call.
    TagsAfterCreate,
    /// `create` makes many calls before it creates anything.
    Slow,
}

#[derive(Default)]
struct Cloud {
    /// Instance ID → (tag, deleting).
    instances: BTreeMap<String, (String, bool)>,
    ports: BTreeSet<String>,
    balancers: BTreeSet<String>,
    next: u32,
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

    /// One cloud API call: an await point.
    async fn call<T>(&self, f: impl FnOnce(&mut Cloud) -> T) -> T {
        tokio::task::yield_now().await;
        f(&mut self.cloud.lock().unwrap())
    }

    async fn find(&self, scope: &MachineScope<Value, Value>) -> Option<MachineInstance> {
        let by_id = scope.infra_machine["spec"]["providerID"]
            .as_str()
            .and_then(|p| p.strip_prefix("fake:///"))
            .map(str::to_string);
        let tag = scope.idempotency_key.as_str().to_string();
        self.call(move |cloud| {
            cloud
                .instances
                .iter()
                .find(|(id, (t, _))| by_id.as_ref().map_or(*t == tag, |wanted| *id == wanted))
                .map(|(id, _)| {
                    MachineInstance::new(format!("fake:///{id}"), vec![], InstanceState::Running)
                })
        })
        .await
    }

    async fn make(&self, scope: &MachineScope<Value, Value>) -> MachineInstance {
        if self.flaw == Flaw::Slow {
            for _ in 0..40 {
                self.call(|_| ()).await;
            }
        }
        let tag = scope.idempotency_key.as_str().to_string();
        let untagged = self.flaw == Flaw::TagsAfterCreate;
        let id = self
            .call(|cloud| {
                cloud.next += 1;
                let id = format!("i-{}", cloud.next);
                let first_tag = if untagged { String::new() } else { tag.clone() };
                cloud.instances.insert(id.clone(), (first_tag, false));
                cloud.ports.insert(format!("port-of-{id}"));
                id
            })
            .await;
        if untagged {
            let id = id.clone();
            self.call(move |cloud| {
                if let Some(entry) = cloud.instances.get_mut(&id) {
                    entry.0 = tag;
                }
            })
            .await;
        }
        MachineInstance::new(format!("fake:///{id}"), vec![], InstanceState::Running)
    }
}

#[async_trait]
impl Actuator<Value, Value> for Fake {
    type Instance = ();

    async fn exists(
        &self,
        scope: &MachineScope<Value, Value>,
    ) -> Result<Option<Found<()>>, ActuatorError> {
        let found = self.find(scope).await;
        if found.is_none() && self.flaw == Flaw::ExistsCreates {
            return Ok(Some(Found::new(self.make(scope).await)));
        }
        Ok(found.map(Found::new))
    }

    async fn create(
        &self,
        scope: &MachineScope<Value, Value>,
        _: &BootstrapData,
    ) -> Result<MachineInstance, ActuatorError> {
        if self.flaw != Flaw::NoLookupOnCreate
            && let Some(found) = self.find(scope).await
        {
            return Ok(found);
        }
        Ok(self.make(scope).await)
    }

    async fn update(
        &self,
        _: &MachineScope<Value, Value>,
        found: Found<()>,
    ) -> Result<UpdateOutcome, ActuatorError> {
        Ok(UpdateOutcome {
            instance: found.reported,
            immutable_changes: vec![],
        })
    }

    async fn delete(&self, scope: &MachineScope<Value, Value>) -> Result<(), ActuatorError> {
        let Some(found) = self.find(scope).await else {
            return Ok(());
        };
        let id = found.provider_id.trim_start_matches("fake:///").to_string();
        let flaw = self.flaw;
        let gone = self
            .call(move |cloud| {
                let Some(entry) = cloud.instances.get_mut(&id) else {
                    return true;
                };
                if !entry.1 {
                    entry.1 = true;
                    return false;
                }
                cloud.instances.remove(&id);
                if flaw != Flaw::LeaksPort {
                    cloud.ports.remove(&format!("port-of-{id}"));
                }
                true
            })
            .await;
        if gone || self.flaw == Flaw::DeleteReturnsEarly {
            Ok(())
        } else {
            Err(ActuatorError::requeue_after(
                Duration::from_millis(1),
                "Deleting",
                "the instance is being deleted",
            ))
        }
    }
}

#[async_trait]
impl ClusterActuator<Value> for Fake {
    async fn reconcile(
        &self,
        _: &ClusterScope<Value>,
    ) -> Result<ClusterInfrastructure, ActuatorError> {
        let no_lookup = self.flaw == Flaw::NoLookupOnCreate;
        let id = self
            .call(move |cloud| {
                if no_lookup || cloud.balancers.is_empty() {
                    cloud.next += 1;
                    cloud.balancers.insert(format!("lb-{}", cloud.next));
                }
                cloud.balancers.iter().next().cloned().unwrap_or_default()
            })
            .await;
        Ok(ClusterInfrastructure {
            control_plane_endpoint: Some(ApiEndpoint {
                host: format!("{id}.example"),
                port: 6443,
            }),
            provisioned: true,
            ..ClusterInfrastructure::default()
        })
    }

    async fn delete(&self, _: &ClusterScope<Value>) -> Result<(), ActuatorError> {
        let flaw = self.flaw;
        self.call(move |cloud| {
            if flaw != Flaw::LeaksPort {
                cloud.balancers.clear();
            }
        })
        .await;
        Ok(())
    }
}

#[async_trait]
impl CloudInventory for Fake {
    async fn instances(&self) -> Result<BTreeSet<String>, String> {
        Ok(self
            .cloud
            .lock()
            .unwrap()
            .instances
            .keys()
            .cloned()
            .collect())
    }

    async fn resources(&self) -> Result<BTreeSet<String>, String> {
        let cloud = self.cloud.lock().unwrap();
        Ok(cloud
            .instances
            .keys()
            .chain(&cloud.ports)
            .chain(&cloud.balancers)
            .cloned()
            .collect())
    }
}

fn settings() -> Settings {
    Settings {
        deadline: Duration::from_secs(1),
        max_wait: Duration::from_millis(5),
        ..Settings::default()
    }
}

async fn machines(flaw: Flaw) -> Report {
    let fake = Fake::new(flaw);
    MachineSuite::new(
        fake.clone(),
        fake,
        json!({"spec": {"size": "small"}}),
        json!({"spec": {}}),
    )
    .settings(settings())
    .run()
    .await
}

async fn clusters(flaw: Flaw) -> Report {
    let fake = Fake::new(flaw);
    ClusterSuite::new(fake.clone(), fake, json!({"spec": {}}))
        .settings(settings())
        .run()
        .await
}

#[tokio::test]
async fn a_correct_actuator_conforms_and_every_rule_is_checked() {
    let report = machines(Flaw::None).await;
    report.assert_conforms();
    for rule in [
        EXISTS_NEVER_CREATES,
        CREATE_IS_FOUND,
        CREATE_IS_IDEMPOTENT,
        CREATE_SURVIVES_CRASHES,
        UPDATE_KEEPS_THE_INSTANCE,
        DELETE_RETURNS_ONLY_WHEN_GONE,
        DELETE_IS_IDEMPOTENT,
        NOTHING_LEAKED,
    ] {
        assert!(report.checked.contains(&rule), "{rule} was not checked");
    }
    let report = clusters(Flaw::None).await;
    report.assert_conforms();
    assert!(report.checked.contains(&CLUSTER_RECONCILE_IS_IDEMPOTENT));
    assert!(
        report
            .checked
            .contains(&CLUSTER_DELETE_RETURNS_ONLY_WHEN_GONE)
    );
}

#[tokio::test]
async fn a_create_that_makes_a_second_instance_after_a_lost_response_is_named() {
    let report = machines(Flaw::NoLookupOnCreate).await;
    assert!(report.broke(CREATE_IS_IDEMPOTENT), "{report:?}");
    let text = report.violations[0].to_string();
    assert!(text.contains("create-is-idempotent"), "{text}");
    assert!(
        clusters(Flaw::NoLookupOnCreate)
            .await
            .broke(CLUSTER_RECONCILE_IS_IDEMPOTENT)
    );
}

#[tokio::test]
async fn an_exists_that_creates_is_named() {
    assert!(
        machines(Flaw::ExistsCreates)
            .await
            .broke(EXISTS_NEVER_CREATES)
    );
}

#[tokio::test]
async fn a_delete_that_returns_before_the_instance_is_gone_is_named() {
    assert!(
        machines(Flaw::DeleteReturnsEarly)
            .await
            .broke(DELETE_RETURNS_ONLY_WHEN_GONE)
    );
}

#[tokio::test]
async fn a_leaked_port_or_load_balancer_is_named() {
    let report = machines(Flaw::LeaksPort).await;
    assert!(report.broke(NOTHING_LEAKED), "{report:?}");
    assert!(!report.broke(DELETE_RETURNS_ONLY_WHEN_GONE), "{report:?}");
    assert!(
        clusters(Flaw::LeaksPort)
            .await
            .broke(CLUSTER_DELETE_RETURNS_ONLY_WHEN_GONE)
    );
}

#[tokio::test]
async fn a_create_that_tags_after_creating_survives_lost_responses_but_not_crashes() {
    let report = machines(Flaw::TagsAfterCreate).await;
    assert!(!report.broke(CREATE_IS_IDEMPOTENT), "{report:?}");
    assert!(report.broke(CREATE_SURVIVES_CRASHES), "{report:?}");
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.detail.contains("stopped after")),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_create_longer_than_the_crash_points_is_noted_not_passed_silently() {
    let fake = Fake::new(Flaw::Slow);
    let report = MachineSuite::new(fake.clone(), fake, json!({"spec": {}}), json!({"spec": {}}))
        .settings(Settings {
            crash_points: 4,
            ..settings()
        })
        .run()
        .await;
    report.assert_conforms();
    assert_eq!(report.notes.len(), 1, "{report:?}");
    assert!(report.notes[0].contains("crash_points"), "{report:?}");
    assert!(machines(Flaw::None).await.notes.is_empty());
}
