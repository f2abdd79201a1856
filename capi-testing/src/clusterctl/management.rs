//! A management cluster that the real clusterctl initialises: a local control plane with
//! kube-controller-manager (namespace, garbage-collection and ClusterRole-aggregation
//! controllers), a [`PodRunner`] running what clusterctl installs as local processes, and
//! [`Clusterctl`] configured with upstream's providers and the test's infrastructure releases.
//!
//! Besides running clusterctl, [`Management`] answers what a test of clusterctl's lifecycle asks
//! of the cluster: its inventory, whether a Cluster is ready to move or `Available`, and the
//! objects a namespace holds.
//!
//! ```no_run
//! # async fn example(release: capi_testing::clusterctl::InfrastructureRelease) {
//! use capi_testing::clusterctl::{Management, upstream_images};
//! use capi_testing::upstream::UpstreamAssets;
//!
//! let assets = UpstreamAssets::locate().unwrap();
//! let images = upstream_images(&assets); // .with(<the provider's image>, <its binary>, …)
//! let management = Management::start(&assets, &[release], images, &[]).await.unwrap();
//! management.init("capirs-example").await.unwrap();
//! # }
//! ```

use std::path::Path;
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use super::{Clusterctl, ClusterctlError, ClusterctlOutput, InfrastructureRelease};
use crate::envtest::{ControlPlane, EnvtestError};
use crate::pods::{LocalImages, PodError, PodRunner};
use crate::upstream::UpstreamAssets;

/// How long [`Management::init`] lets clusterctl wait for the providers' Deployments.
const PROVIDERS_WITHIN: Duration = Duration::from_secs(180);

/// The field manager of what [`Management::apply_strictly`] writes.
const FIELD_MANAGER: &str = "capi-testing-clusterctl";

/// Why a management cluster could not be set up, or a step on it failed. Its `Debug` is its
/// `Display`, so that a test's `unwrap` shows the managers' logs readably.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum ManagementError {
    /// The local control plane could not start.
    #[error(transparent)]
    ControlPlane(#[from] EnvtestError),
    /// The pod runner could not start.
    #[error(transparent)]
    Pods(#[from] PodError),
    /// clusterctl could not be configured or failed; the managers' logs follow.
    #[error("{source}\n{logs}")]
    Clusterctl {
        /// clusterctl's failure.
        #[source]
        source: ClusterctlError,
        /// The tails of the managers' logs.
        logs: String,
    },
    /// The API server refused or failed a request.
    #[error("{what}: {source}")]
    Api {
        /// What was asked.
        what: String,
        /// The failure.
        #[source]
        source: kube::Error,
    },
    /// What clusterctl printed is not the YAML it should be.
    #[error("{what}: {message}")]
    Output {
        /// What was read.
        what: String,
        /// Why it could not be.
        message: String,
    },
    /// A condition did not hold in time; the managers' logs follow.
    #[error("not within {within:?}: {what}\n{logs}")]
    NotWithin {
        /// What was waited for.
        what: String,
        /// How long.
        within: Duration,
        /// The tails of the managers' logs.
        logs: String,
    },
}

impl std::fmt::Debug for ManagementError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// A management cluster initialised by clusterctl (see the module's docs). Dropping it stops
/// its processes and its control plane.
pub struct Management {
    /// What runs the Deployments clusterctl installs.
    pub pods: PodRunner,
    /// clusterctl, configured for this cluster's providers.
    pub clusterctl: Clusterctl,
    /// An administrator's client.
    pub client: Client,
    control_plane: ControlPlane,
}

impl std::fmt::Debug for Management {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Management")
            .field("kubeconfig", &self.kubeconfig())
            .finish_non_exhaustive()
    }
}

impl Management {
    /// A control plane with kube-controller-manager, a pod runner that runs `images` (upstream's
    /// from [`upstream_images`](super::upstream_images), and the providers' the test adds), and
    /// clusterctl configured with `infrastructure` and `variables`. Nothing is installed yet.
    pub async fn start(
        assets: &UpstreamAssets,
        infrastructure: &[InfrastructureRelease],
        images: LocalImages,
        variables: &[(&str, &str)],
    ) -> Result<Self, ManagementError> {
        let mut control_plane = ControlPlane::start().await?;
        control_plane.start_controller_manager().await?;
        let client = control_plane.client().await?;
        let pods = PodRunner::start(client.clone(), control_plane.kubeconfig_yaml(), images)?;
        let clusterctl = Clusterctl::new(assets, infrastructure, variables).map_err(|source| {
            ManagementError::Clusterctl {
                source,
                logs: String::new(),
            }
        })?;
        Ok(Self {
            pods,
            clusterctl,
            client,
            control_plane,
        })
    }

    /// The administrator's kubeconfig file (`clusterctl move --to-kubeconfig` names it).
    pub fn kubeconfig(&self) -> &Path {
        self.control_plane.kubeconfig_path()
    }

    /// The control plane itself.
    pub fn control_plane(&self) -> &ControlPlane {
        &self.control_plane
    }

    /// `clusterctl <args>` against this cluster: what it printed, or its failure with the
    /// managers' logs.
    pub async fn clusterctl(&self, args: &[&str]) -> Result<ClusterctlOutput, ManagementError> {
        self.clusterctl
            .run(self.kubeconfig(), args)
            .await
            .map_err(|source| ManagementError::Clusterctl {
                source,
                logs: self.pods.log_tails(),
            })
    }

    /// `clusterctl init --infrastructure <infrastructure> --wait-providers`: upstream's core,
    /// kubeadm bootstrap and control plane, cert-manager and `infrastructure` (`name` or
    /// `name:vX.Y.Z`) installed, their Deployments available.
    pub async fn init(&self, infrastructure: &str) -> Result<ClusterctlOutput, ManagementError> {
        let within = PROVIDERS_WITHIN.as_secs().to_string();
        self.clusterctl(&[
            "init",
            "--infrastructure",
            infrastructure,
            "--wait-providers",
            "--wait-provider-timeout",
            &within,
        ])
        .await
    }

    /// The objects `clusterctl generate cluster <name> --target-namespace <name> <args>`
    /// renders (`args`: `--infrastructure`, `--flavor`, counts and versions).
    pub async fn generate_cluster(
        &self,
        name: &str,
        args: &[&str],
    ) -> Result<Vec<Value>, ManagementError> {
        let mut all = vec!["generate", "cluster", name, "--target-namespace", name];
        all.extend_from_slice(args);
        let yaml = self.clusterctl(&all).await?.stdout;
        let objects: Vec<Value> =
            serde_saphyr::from_multiple(&yaml).map_err(|e| ManagementError::Output {
                what: format!("the objects generated for {name}"),
                message: e.to_string(),
            })?;
        Ok(objects.into_iter().filter(|o| !o.is_null()).collect())
    }

    /// Creates the namespace `name` unless it exists.
    pub async fn create_namespace(&self, name: &str) -> Result<(), ManagementError> {
        let namespace = k8s_openapi::api::core::v1::Namespace {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match Api::all(self.client.clone())
            .create(&Default::default(), &namespace)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
            Err(source) => Err(ManagementError::Api {
                what: format!("creating namespace {name}"),
                source,
            }),
        }
    }

    /// Server-side apply of `object` with strict field validation: an unknown or duplicated
    /// field is an error, not a warning.
    pub async fn apply_strictly(&self, object: &Value) -> Result<(), ManagementError> {
        let output = |message: String| ManagementError::Output {
            what: format!("{} {}", object["kind"], object["metadata"]["name"]),
            message,
        };
        let object: DynamicObject =
            serde_json::from_value(object.clone()).map_err(|e| output(e.to_string()))?;
        let types = object
            .types
            .clone()
            .ok_or_else(|| output("an object without apiVersion/kind".into()))?;
        let (group, version) = types
            .api_version
            .split_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &types.kind);
        let what = format!("applying {} {}", types.kind, object.name_any());
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|source| ManagementError::Api {
                what: what.clone(),
                source,
            })?;
        let api: Api<DynamicObject> = if capabilities.scope == kube::discovery::Scope::Namespaced {
            Api::namespaced_with(
                self.client.clone(),
                &object.namespace().unwrap_or_default(),
                &resource,
            )
        } else {
            Api::all_with(self.client.clone(), &resource)
        };
        api.patch(
            &object.name_any(),
            &PatchParams::apply(FIELD_MANAGER).validation_strict(),
            &Patch::Apply(&object),
        )
        .await
        .map(|_| ())
        .map_err(|source| ManagementError::Api { what, source })
    }

    /// Objects of `kind` in `group/version` (core kinds: group `""`), in `namespace` or
    /// everywhere.
    pub fn api(
        &self,
        (group, version, kind): (&str, &str, &str),
        namespace: Option<&str>,
    ) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// Every object of `kind` in `namespace`.
    async fn list(
        &self,
        kind: (&str, &str, &str),
        namespace: &str,
    ) -> Result<Vec<DynamicObject>, ManagementError> {
        self.api(kind, Some(namespace))
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|source| ManagementError::Api {
                what: format!("listing {} in {namespace}", kind.2),
                source,
            })
    }

    /// `clusterctl move --namespace <namespace> --to-kubeconfig <target>`, the source's Cluster
    /// `name` read every 50 ms meanwhile: whether it was seen paused before it was deleted
    /// here (clusterctl pauses a cluster before it moves anything of it), and the moved Cluster
    /// as the target holds it.
    pub async fn move_cluster(
        &self,
        target: &Management,
        namespace: &str,
        name: &str,
    ) -> Result<Moved, ManagementError> {
        let clusters = self.api(CLUSTER, Some(namespace));
        let cluster = name.to_string();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let watch = tokio::spawn(async move {
            let mut paused = false;
            loop {
                match clusters.get_opt(&cluster).await {
                    Ok(Some(c)) => paused |= c.data["spec"]["paused"] == Value::Bool(true),
                    Ok(None) => break,
                    // A failed read is read again.
                    Err(_) => {}
                }
                tokio::select! {
                    _ = &mut stopped => break,
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
            paused
        });
        let to = target.kubeconfig().display().to_string();
        let moved = self
            .clusterctl(&["move", "--namespace", namespace, "--to-kubeconfig", &to])
            .await;
        let _ = stop.send(());
        let paused_on_source = watch.await.unwrap_or(false);
        moved?;
        let cluster = target
            .api(CLUSTER, Some(namespace))
            .get(name)
            .await
            .map_err(|source| ManagementError::Api {
                what: format!("reading the moved Cluster {namespace}/{name}"),
                source,
            })?;
        Ok(Moved {
            paused_on_source,
            cluster,
        })
    }

    /// clusterctl's inventory: `namespace/name version` of every installed provider, sorted;
    /// empty without clusterctl's CRD (`delete --all --include-crd` removes it).
    pub async fn inventory(&self) -> Result<Vec<String>, ManagementError> {
        let providers = self.api(
            ("clusterctl.cluster.x-k8s.io", "v1alpha3", "Provider"),
            None,
        );
        let listed = match providers.list(&ListParams::default()).await {
            Ok(listed) => listed,
            Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(Vec::new()),
            Err(source) => {
                return Err(ManagementError::Api {
                    what: "listing clusterctl's providers".into(),
                    source,
                });
            }
        };
        let mut found: Vec<String> = listed
            .items
            .iter()
            .map(|p| {
                format!(
                    "{}/{} {}",
                    p.namespace().unwrap_or_default(),
                    p.name_any(),
                    p.data["version"].as_str().unwrap_or("?")
                )
            })
            .collect();
        found.sort();
        Ok(found)
    }

    /// `Kind name` of every object of `kinds` (`(group, version, kind)`) in `namespace`, sorted.
    pub async fn objects(
        &self,
        namespace: &str,
        kinds: &[(&str, &str, &str)],
    ) -> Result<Vec<String>, ManagementError> {
        let mut found = Vec::new();
        for kind in kinds {
            let listed = self.list(*kind, namespace).await?;
            found.extend(
                listed
                    .iter()
                    .map(|o| format!("{} {}", kind.2, o.name_any())),
            );
        }
        found.sort();
        Ok(found)
    }

    /// Whether Cluster `namespace/name` has its infrastructure provisioned, its control plane
    /// initialized (field and condition) and `machines` Machines, each with its node: what
    /// `clusterctl move` checks before it moves anything.
    pub async fn ready_to_move(&self, namespace: &str, name: &str, machines: usize) -> bool {
        let Ok(cluster) = self.api(CLUSTER, Some(namespace)).get(name).await else {
            return false;
        };
        let initialization = &cluster.data["status"]["initialization"];
        let initialized = initialization["infrastructureProvisioned"] == Value::Bool(true)
            && initialization["controlPlaneInitialized"] == Value::Bool(true)
            && has_condition(&cluster, "ControlPlaneInitialized");
        let listed = self
            .api(MACHINE, Some(namespace))
            .list(&ListParams::default())
            .await;
        initialized
            && listed.is_ok_and(|l| {
                l.items.len() == machines
                    && l.items
                        .iter()
                        .all(|m| m.data["status"]["nodeRef"]["name"].is_string())
            })
    }

    /// Whether Cluster `namespace/name` is `Available` as upstream's core controller judges it:
    /// infrastructure ready, control plane available (etcd healthy through the workload API
    /// server), workers available, the workload cluster reachable.
    pub async fn available(&self, namespace: &str, name: &str) -> bool {
        self.api(CLUSTER, Some(namespace))
            .get(name)
            .await
            .is_ok_and(|cluster| has_condition(&cluster, "Available"))
    }

    /// Waits until `check` holds, asking every half second, at most `within`.
    pub async fn eventually<F, Fut>(
        &self,
        what: &str,
        within: Duration,
        mut check: F,
    ) -> Result<(), ManagementError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            if check().await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(ManagementError::NotWithin {
            what: what.into(),
            within,
            logs: self.pods.log_tails(),
        })
    }
}

/// What [`Management::move_cluster`] saw.
#[derive(Debug)]
pub struct Moved {
    /// Whether the source's Cluster was seen paused before it was deleted there.
    pub paused_on_source: bool,
    /// The Cluster as the target holds it after the move.
    pub cluster: DynamicObject,
}

/// The kinds of upstream's groups a kubeadm cluster is made of, `(group, version, kind)`, and
/// Secrets: with a provider's own kinds, what [`Management::objects`] lists to compare a
/// cluster's objects before and after a move.
pub const KUBEADM_CLUSTER_KINDS: &[(&str, &str, &str)] = &[
    CLUSTER,
    ("cluster.x-k8s.io", "v1beta2", "MachineDeployment"),
    ("cluster.x-k8s.io", "v1beta2", "MachineSet"),
    MACHINE,
    ("cluster.x-k8s.io", "v1beta2", "MachineHealthCheck"),
    (
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmControlPlane",
    ),
    ("bootstrap.cluster.x-k8s.io", "v1beta2", "KubeadmConfig"),
    (
        "bootstrap.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmConfigTemplate",
    ),
    ("", "v1", "Secret"),
];

/// Cluster API's Cluster.
const CLUSTER: (&str, &str, &str) = ("cluster.x-k8s.io", "v1beta2", "Cluster");
/// Cluster API's Machine.
const MACHINE: (&str, &str, &str) = ("cluster.x-k8s.io", "v1beta2", "Machine");

/// Whether `object` has condition `kind` with status `True`.
pub fn has_condition(object: &DynamicObject, kind: &str) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == kind && c["status"] == "True")
        })
}

impl Management {
    /// `<key> <spec.providerID>` of every object of `kind` in `namespace`, sorted, where `key` is
    /// each object's UID (what an upgrade keeps: [`by_uid`]) or name (what a move keeps:
    /// [`by_name`]); `-` for an object without a provider ID.
    pub async fn provider_ids(
        &self,
        kind: (&str, &str, &str),
        namespace: &str,
        key: fn(&DynamicObject) -> String,
    ) -> Result<Vec<String>, ManagementError> {
        let mut found: Vec<String> = self
            .list(kind, namespace)
            .await?
            .iter()
            .map(|o| {
                format!(
                    "{} {}",
                    key(o),
                    o.data["spec"]["providerID"].as_str().unwrap_or("-")
                )
            })
            .collect();
        found.sort();
        Ok(found)
    }
}

/// An object's UID: what stays of it across an upgrade.
pub fn by_uid(object: &DynamicObject) -> String {
    object.uid().unwrap_or_default()
}

/// An object's name: what stays of it across a move (UIDs are new on the target).
pub fn by_name(object: &DynamicObject) -> String {
    object.name_any()
}
