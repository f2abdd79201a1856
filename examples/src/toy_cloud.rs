//! The toy cloud the example provider (`toy`) drives: resources in memory, behind its narrow
//! [`ToyApi`] — the part a real provider gets from its cloud's SDK.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::toy::ToyApi;

/// The toy cloud: resources (ID → tag) in memory.
#[derive(Default)]
pub struct ToyCloud(Mutex<(u64, BTreeMap<String, String>)>);

impl ToyCloud {
    /// The IDs of the resources that exist.
    pub fn resources(&self) -> Vec<String> {
        self.0
            .lock()
            .map_or(vec![], |r| r.1.keys().cloned().collect())
    }
    fn with<T>(
        &self,
        f: impl FnOnce(&mut (u64, BTreeMap<String, String>)) -> T,
    ) -> Result<T, String> {
        self.0
            .lock()
            .map(|mut r| f(&mut r))
            .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl ToyApi for ToyCloud {
    async fn find(&self, tag: &str) -> Result<Option<String>, String> {
        self.with(|r| {
            r.1.iter()
                .find(|(_, t)| *t == tag)
                .map(|(id, _)| id.clone())
        })
    }
    async fn get(&self, id: &str) -> Result<bool, String> {
        self.with(|r| r.1.contains_key(id))
    }
    async fn create(&self, tag: &str, kind: &str) -> Result<String, String> {
        self.with(|(next, resources)| {
            *next += 1;
            let id = format!("{kind}-{next}");
            resources.insert(id.clone(), tag.to_string());
            id
        })
    }
    async fn delete(&self, id: &str) -> Result<(), String> {
        self.with(|r| drop(r.1.remove(id)))
    }
}
