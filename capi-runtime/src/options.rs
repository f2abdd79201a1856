//! Settings every reconciler of the loop shares.

use kube::Client;
use kube::runtime::watcher;

use crate::retry::RetryPolicy;

/// How a reconciler runs: which objects it sees, how many it reconciles at once, how it retries.
#[derive(Clone, Debug, PartialEq)]
pub struct ReconcilerOptions {
    /// Retry spacing; see [`RetryPolicy`].
    pub retry: RetryPolicy,
    /// At most this many objects are reconciled at once. Default 16, one number for every
    /// kind: upstream ships 50–100 for its core kinds and 10 for CAPO's and CAPA's
    /// infrastructure kinds (whose clouds rate-limit); a reconcile here awaits without holding a
    /// thread, and 16 in flight per kind already keep a family's request budget (100/s, see
    /// `ManagerConfig::qps`) busy, so more mostly adds requests waiting for their turn.
    pub concurrency: u16,
    /// Only objects in this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Only objects matching this label selector.
    pub label_selector: Option<String>,
}

impl Default for ReconcilerOptions {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            concurrency: 16,
            namespace: None,
            label_selector: None,
        }
    }
}

impl ReconcilerOptions {
    /// Sets the retry policy.
    pub fn retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// At most this many objects at once (at least 1).
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

    /// The watch configuration for the reconciled kind.
    pub(crate) fn watch_config(&self) -> watcher::Config {
        match &self.label_selector {
            Some(selector) => watcher::Config::default().labels(selector),
            None => watcher::Config::default(),
        }
    }

    /// An API for a namespaced kind within the configured namespace.
    pub(crate) fn api<K>(&self, client: &Client) -> kube::Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        match &self.namespace {
            Some(ns) => kube::Api::namespaced(client.clone(), ns),
            None => kube::Api::all(client.clone()),
        }
    }
}
