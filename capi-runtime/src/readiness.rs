//! Readiness of a manager's controllers: ready once every registered controller's cache has been
//! filled by its first list, as controller-runtime's `/readyz` reports.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Shared readiness flags. Cloning shares them.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    controllers: Arc<Mutex<BTreeMap<String, bool>>>,
}

impl Readiness {
    /// Registers a controller as not ready yet.
    pub fn register(&self, controller: &str) {
        self.lock().entry(controller.to_string()).or_insert(false);
    }

    /// Marks a controller ready.
    pub fn mark_ready(&self, controller: &str) {
        self.lock().insert(controller.to_string(), true);
    }

    /// Whether at least one controller is registered and all are ready.
    pub fn is_ready(&self) -> bool {
        let controllers = self.lock();
        !controllers.is_empty() && controllers.values().all(|ready| *ready)
    }

    /// The controllers that are not ready yet.
    pub fn waiting_for(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, ready)| !**ready)
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, bool>> {
        self.controllers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A watch-stream inspector that marks `controller` ready at the end of its first full list.
pub(crate) fn on_initial_list<K>(
    readiness: Option<Readiness>,
    controller: String,
) -> impl FnMut(&Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>) {
    move |event| {
        if let (Some(readiness), Ok(kube::runtime::watcher::Event::InitDone)) = (&readiness, event)
        {
            readiness.mark_ready(&controller);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_controller_is() {
        let readiness = Readiness::default();
        assert!(!readiness.is_ready(), "nothing registered is not ready");
        readiness.register("a");
        readiness.register("b");
        readiness.mark_ready("a");
        assert!(!readiness.is_ready());
        assert_eq!(readiness.waiting_for(), ["b"]);
        readiness.mark_ready("b");
        assert!(readiness.is_ready());
    }
}
