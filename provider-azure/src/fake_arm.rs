//! A `mockall` [`MockArm`] over a small shared state, for the actuators' unit tests: resources
//! by ID, PUTs answered in a chosen provisioning state with an operation, DELETEs that take
//! effect at once or start an operation, and errors injected per method.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::arm::{
    Accepted, ArmError, Deletion, MockArm, PendingOperation, Poll, ResourceId, ResourceType,
};

/// What the fake holds and does.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Resources by lower-cased ID.
    pub(crate) resources: BTreeMap<String, Value>,
    /// The state a PUT leaves its resource in (`Succeeded` when empty).
    pub(crate) put_state: String,
    /// Only PUTs of this kind get `put_state` (all do when `None`).
    pub(crate) slow_kind: Option<crate::arm::ResourceType>,
    /// Whether a DELETE starts an operation (the resource then stays, `Deleting`).
    pub(crate) slow_delete: bool,
    /// The answer to every poll.
    pub(crate) poll: Option<Poll>,
    /// Errors for the next GET / PUT / DELETE of an ID (lower-cased), or of any ("*").
    pub(crate) errors: BTreeMap<(String, String), ArmError>,
    /// Every call: method and resource name.
    pub(crate) calls: Vec<(String, String)>,
    /// The etag of every conditional PUT.
    pub(crate) if_match: Vec<String>,
    etags: u64,
}

impl State {
    pub(crate) fn insert(&mut self, id: &ResourceId, body: Value) {
        self.resources.insert(id.to_string().to_lowercase(), body);
    }

    pub(crate) fn get(&self, id: &ResourceId) -> Option<&Value> {
        self.resources.get(&id.to_string().to_lowercase())
    }

    pub(crate) fn calls(&self, method: &str) -> Vec<String> {
        self.calls
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// A scale set's next etag (each write of one changes it, as ARM's).
    pub(crate) fn next_etag(&mut self) -> String {
        self.etags += 1;
        format!("\"{}\"", self.etags)
    }

    fn error(&mut self, method: &str, id: &ResourceId) -> Option<ArmError> {
        let key = id.to_string().to_lowercase();
        self.errors
            .remove(&(method.to_string(), key))
            .or_else(|| self.errors.remove(&(method.to_string(), "*".to_string())))
    }
}

/// A PUT: the resource stored in the fake's PUT state (a scale set with a new etag), or the
/// error injected for it.
fn put(st: &mut State, id: &ResourceId, body: &Value) -> Result<Accepted, ArmError> {
    st.calls.push(("PUT".into(), id.name.clone()));
    if let Some(e) = st.error("PUT", id) {
        return Err(e);
    }
    let mut stored = body.clone();
    let slow = st.slow_kind.is_none_or(|k| k == id.kind);
    let state = if st.put_state.is_empty() || !slow {
        "Succeeded".to_string()
    } else {
        st.put_state.clone()
    };
    if !stored["properties"].is_object() {
        stored["properties"] = json!({});
    }
    stored["properties"]["provisioningState"] = json!(state);
    stored["id"] = json!(id.to_string());
    if id.kind == ResourceType::VirtualMachineScaleSet {
        stored["etag"] = json!(st.next_etag());
    }
    st.insert(id, stored.clone());
    Ok(Accepted {
        body: stored,
        operation: (state != "Succeeded").then(|| PendingOperation {
            polling_url: format!("https://arm.test/operations/{}", id.name),
            retry_after: None,
        }),
    })
}

/// A fake and its state.
pub(crate) fn fake() -> (MockArm, Arc<Mutex<State>>) {
    let state = Arc::new(Mutex::new(State::default()));
    let mut arm = MockArm::new();
    let s = state.clone();
    arm.expect_get().returning(move |id| {
        let mut st = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        st.calls.push(("GET".into(), id.name.clone()));
        if let Some(e) = st.error("GET", id) {
            return Err(e);
        }
        Ok(st.get(id).cloned())
    });
    let s = state.clone();
    arm.expect_put().returning(move |id, body| {
        let mut st = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        put(&mut st, id, body)
    });
    let s = state.clone();
    arm.expect_put_if_match().returning(move |id, body, etag| {
        let mut st = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        st.if_match.push(etag.to_string());
        let current = st
            .get(id)
            .and_then(|r| r["etag"].as_str().map(str::to_string));
        if current.as_deref() != Some(etag) {
            st.calls.push(("PUT".into(), id.name.clone()));
            return Err(ArmError::new(
                Some(412),
                "PreconditionFailed",
                format!("the resource's etag is {current:?}, not {etag}"),
            ));
        }
        put(&mut st, id, body)
    });
    let s = state.clone();
    arm.expect_delete().returning(move |id| {
        let mut st = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        st.calls.push(("DELETE".into(), id.name.clone()));
        if let Some(e) = st.error("DELETE", id) {
            return Err(e);
        }
        let key = id.to_string().to_lowercase();
        if !st.resources.contains_key(&key) {
            return Ok(Deletion::Gone);
        }
        if st.slow_delete {
            if let Some(r) = st.resources.get_mut(&key) {
                r["properties"]["provisioningState"] = json!("Deleting");
            }
            return Ok(Deletion::Started(PendingOperation {
                polling_url: format!("https://arm.test/operations/delete-{}", id.name),
                retry_after: None,
            }));
        }
        st.resources.remove(&key);
        Ok(Deletion::Gone)
    });
    let s = state.clone();
    arm.expect_poll().returning(move |_| {
        let st = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(st
            .poll
            .clone()
            .unwrap_or(Poll::InProgress { retry_after: None }))
    });
    let s = state.clone();
    arm.expect_get_expanded().returning(move |id, _| {
        let mut st = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        st.calls.push(("GET+expand".into(), id.name.clone()));
        Ok(st.get(id).cloned())
    });
    let s = state.clone();
    arm.expect_list().returning(move |_, kind, filter| {
        let mut st = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        st.calls.push(("LIST".into(), kind.collection().into()));
        // `'virtualMachineScaleSet/id' eq '<id>'` is the only filter the provider sends.
        let member_of = filter
            .as_deref()
            .and_then(|f| f.rsplit_once(" eq '"))
            .map(|(_, id)| id.trim_end_matches('\'').to_lowercase());
        Ok(st
            .resources
            .iter()
            .filter(|(key, _)| key.contains(&format!("/{}/", kind.collection().to_lowercase())))
            .filter(|(_, body)| {
                member_of.as_ref().is_none_or(|wanted| {
                    body["properties"]["virtualMachineScaleSet"]["id"]
                        .as_str()
                        .is_some_and(|id| id.to_lowercase() == *wanted)
                })
            })
            .map(|(_, body)| body.clone())
            .collect())
    });
    let s = state.clone();
    arm.expect_post().returning(move |id, action, body| {
        let mut st = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        st.calls.push((format!("POST {action}"), id.name.clone()));
        if let Some(e) = st.error("POST", id) {
            return Err(e);
        }
        let names: Vec<String> = body["instanceIds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_str().map(str::to_lowercase))
            .collect();
        let removed: Vec<String> = st
            .resources
            .keys()
            .filter(|k| {
                k.contains("/virtualmachines/")
                    && names.iter().any(|n| k.ends_with(&format!("/{n}")))
            })
            .cloned()
            .collect();
        for key in &removed {
            st.resources.remove(key);
        }
        let etag = st.next_etag();
        if let Some(set) = st.resources.get_mut(&id.to_string().to_lowercase()) {
            let capacity = set["sku"]["capacity"].as_u64().unwrap_or(0);
            set["sku"]["capacity"] = json!(capacity.saturating_sub(removed.len() as u64));
            set["etag"] = json!(etag);
        }
        Ok(Some(PendingOperation {
            polling_url: format!("https://arm.test/operations/post-{}", id.name),
            retry_after: None,
        }))
    });
    (arm, state)
}

/// The subscription of the unit tests' `AzureCluster`.
pub(crate) const SUB: &str = "7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c";

/// The `AzureCluster` `ns/demo` of the actuators' unit tests, in `westeurope`.
pub(crate) fn azure_cluster() -> crate::api::AzureCluster {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AzureCluster",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {"subscriptionID": SUB, "location": "westeurope",
                 "identityRef": {"name": "creds", "kind": "Secret"}},
    }))
    .unwrap_or_default()
}

/// A connector answering every cluster with `arm`.
pub(crate) fn connector(arm: MockArm) -> crate::connector::MockConnector {
    let arm: Arc<dyn crate::arm::Arm> = Arc::new(arm);
    let mut connector = crate::connector::MockConnector::new();
    connector
        .expect_connect()
        .returning(move |_| Ok(arm.clone()));
    connector
}

/// The fake's state, locked (a panicked test's lock too).
pub(crate) fn lock(state: &Arc<Mutex<State>>) -> std::sync::MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
