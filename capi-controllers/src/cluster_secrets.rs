//! What the management cluster holds of each cluster's Secrets — the `<cluster>-kubeconfig` and
//! the PKI Secrets, which upstream and this workspace label `cluster.x-k8s.io/cluster-name` —
//! known from one metadata-only watch the manager's controllers share: whether a Secret exists
//! and which version it is, without reading it. A Secret's keys never enter the cache.
//!
//! A reader holding something built from a Secret (a workload client from a kubeconfig) uses it
//! as long as the watch shows the same version, and reads the Secret again once it shows another
//! or none; a writer of a cluster's PKI creates what the watch does not show instead of reading
//! first. A Secret without the label is not seen here: readers of it fall back to reading it.

use std::sync::{Arc, OnceLock};

use capi_core::labels;
use capi_runtime::cache::{Informer, Informers};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client};

/// The labelled Secrets of the management cluster (of the manager's namespace, when it has one),
/// by version. Cloning shares the watch; the watch starts at the first question, so that
/// building this needs no runtime.
#[derive(Clone)]
pub struct ClusterSecrets {
    informers: Informers,
    api: Api<PartialObjectMeta<Secret>>,
    informer: Arc<OnceLock<Informer<PartialObjectMeta<Secret>>>>,
}

/// What the watch shows of one Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The watch holds no complete list yet: nothing can be told.
    Unknown,
    /// Not among the labelled Secrets (absent, not created yet as far as the watch has seen, or
    /// without the label).
    Absent,
    /// There, at this version.
    Version {
        /// `metadata.uid`.
        uid: String,
        /// `metadata.resourceVersion`.
        resource_version: String,
    },
}

impl ClusterSecrets {
    /// The cluster Secrets `informers` watch through `client`, in `namespace` or in all of them.
    pub fn new(informers: &Informers, client: Client, namespace: Option<&str>) -> Self {
        let api = match namespace {
            Some(namespace) => Api::namespaced(client, namespace),
            None => Api::all(client),
        };
        Self {
            informers: informers.clone(),
            api,
            informer: Arc::default(),
        }
    }

    /// What the watch shows of Secret `name` in `namespace`. Must be called within a Tokio
    /// runtime (the first call starts the watch).
    pub fn seen(&self, namespace: &str, name: &str) -> Seen {
        let informer = self.informer.get_or_init(|| {
            self.informers.informer(
                self.api.clone(),
                watcher::Config::default().labels(labels::CLUSTER_NAME),
            )
        });
        if !informer.listed() {
            return Seen::Unknown;
        }
        match informer
            .store()
            .get(&ObjectRef::new(name).within(namespace))
        {
            Some(secret) => Seen::Version {
                uid: secret.metadata.uid.clone().unwrap_or_default(),
                resource_version: secret.metadata.resource_version.clone().unwrap_or_default(),
            },
            None => Seen::Absent,
        }
    }

    /// Whether the watch shows Secret `name` in `namespace`; `None` before its first list.
    pub fn exists(&self, namespace: &str, name: &str) -> Option<bool> {
        match self.seen(namespace, name) {
            Seen::Unknown => None,
            Seen::Absent => Some(false),
            Seen::Version { .. } => Some(true),
        }
    }
}

impl std::fmt::Debug for ClusterSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSecrets")
            .field("watching", &self.informer.get().is_some())
            .finish_non_exhaustive()
    }
}
