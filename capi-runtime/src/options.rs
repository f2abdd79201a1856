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
    /// Only objects labelled `cluster.x-k8s.io/watch-filter` with this value (upstream's
    /// `--watch-filter`), on top of `label_selector`.
    pub watch_filter: Option<String>,
}

impl Default for ReconcilerOptions {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            concurrency: 16,
            namespace: None,
            label_selector: None,
            watch_filter: None,
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

    /// Only objects labelled [`WATCH_FILTER`](capi_core::labels::WATCH_FILTER) with `value`, as
    /// upstream's managers with `--watch-filter`: the objects of the reconciled kind without it
    /// never trigger a reconcile, and a trigger through a related object finds nothing to
    /// reconcile. An empty value filters nothing (upstream's default). The objects a controller
    /// creates carry the label when their template does (a MachineDeployment's
    /// `spec.template.metadata.labels`, a KubeadmControlPlane's
    /// `spec.machineTemplate.metadata.labels`), as upstream.
    pub fn watch_filter(mut self, value: impl Into<String>) -> Self {
        let value = value.into();
        self.watch_filter = (!value.is_empty()).then_some(value);
        self
    }

    /// The label selector of the reconciled kind's watch: `label_selector` and the watch filter.
    pub(crate) fn selector(&self) -> Option<String> {
        let filter = self
            .watch_filter
            .as_ref()
            .map(|value| format!("{}={value}", capi_core::labels::WATCH_FILTER));
        match (&self.label_selector, filter) {
            (Some(selector), Some(filter)) => Some(format!("{selector},{filter}")),
            (Some(selector), None) => Some(selector.clone()),
            (None, filter) => filter,
        }
    }

    /// The watch configuration for the reconciled kind.
    pub(crate) fn watch_config(&self) -> watcher::Config {
        match self.selector() {
            Some(selector) => watcher::Config::default().labels(&selector),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_filter_selects_its_label_beside_the_selector() {
        let none = ReconcilerOptions::default();
        assert_eq!(none.selector(), None);
        assert_eq!(
            none.clone().watch_filter("").selector(),
            None,
            "empty: no filter"
        );
        let filtered = none.clone().watch_filter("team-a");
        assert_eq!(
            filtered.selector().as_deref(),
            Some("cluster.x-k8s.io/watch-filter=team-a")
        );
        assert_eq!(
            filtered.label_selector("tier=gold").selector().as_deref(),
            Some("tier=gold,cluster.x-k8s.io/watch-filter=team-a")
        );
        assert_eq!(
            none.label_selector("tier=gold")
                .watch_config()
                .label_selector
                .as_deref(),
            Some("tier=gold")
        );
    }
}
