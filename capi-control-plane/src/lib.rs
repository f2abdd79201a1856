//! The KubeadmControlPlane provider: a declarative, highly available control plane of machines
//! that run `kubeadm init` (the first) and `kubeadm join --control-plane` (the others), with etcd
//! membership kept equal to the machines. Upstream Cluster API says a MachineDeployment must not
//! run a control plane — it knows nothing of etcd quorum — and this is what runs it instead.
//!
//! - [`api`]: `KubeadmControlPlane` and `KubeadmControlPlaneTemplate`
//!   (`controlplane.cluster.x-k8s.io/v1beta2`), wire-compatible with upstream Cluster API v1.14
//!   field for field; the checks upstream's admission webhook makes are CEL rules of the CRD, so
//!   that a management cluster without webhooks refuses the same objects.
//! - The controller's decisions, as pure functions with their own tests: [`rollout`] (the next
//!   step: initialize, scale up, scale down, wait — one machine at a time, simulated step by step
//!   in golden files under `tests/golden/`), [`scale`] (which failure domain a new machine goes
//!   to, which machine goes first), [`quorum`] (whether etcd keeps its quorum through a membership
//!   change), [`components`] (a node's static pods — API server, controller manager, scheduler,
//!   etcd — and its etcd member judged as the machine's conditions; a machine whose components
//!   are not all healthy holds up every scale and rollout step).
//! - [`controller`]: `KubeadmControlPlanes`, the reconciler that carries those decisions out.
//! - [`etcd`]: the workload cluster's etcd as the controller sees it (members, health, leader;
//!   moving leadership, removing a member) behind the `EtcdAccess` trait a provider registers;
//!   with the feature `etcd-client`, `etcd::client::GrpcEtcd` implements it over etcd's gRPC API.
//!
//! ```
//! use capi_control_plane::api::KubeadmControlPlane;
//!
//! let kcp: KubeadmControlPlane = serde_json::from_value(serde_json::json!({
//!     "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
//!     "kind": "KubeadmControlPlane",
//!     "metadata": {"name": "demo-control-plane", "namespace": "default"},
//!     "spec": {
//!         "replicas": 3,
//!         "version": "v1.34.1",
//!         "machineTemplate": {"spec": {"infrastructureRef": {
//!             "apiGroup": "infrastructure.capi-rs.dev",
//!             "kind": "InMemoryMachineTemplate",
//!             "name": "demo-control-plane",
//!         }}},
//!     },
//! }))?;
//! assert_eq!(kcp.spec.replicas, Some(3));
//! # Ok::<(), serde_json::Error>(())
//! ```

pub mod api;
pub mod components;
pub mod controller;
pub mod etcd;
pub mod quorum;
pub mod remediation;
pub mod rollout;
pub mod scale;
mod workload;
