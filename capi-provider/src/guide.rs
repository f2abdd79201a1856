//! # The provider author's guide
//!
//! From `cargo new` to a provider running beside upstream Cluster API: what to write, what each
//! contract field means, how to report status, and how to test — with mocks, against a real API
//! server, and with the conformance suite. Every example on this page is compiled (and, where it
//! needs no cluster or cloud, run) by `cargo test --doc`. The complete provider these steps add up
//! to is `capi_examples::toy` (`examples/src/toy` and `examples/toy_provider.rs`).
//!
//! ## 1. The crate
//!
//! ```text
//! cargo new --bin mycloud-provider
//! cargo add capi-core capi-actuator capi-provider kube k8s-openapi schemars serde serde_json \
//!     async-trait tokio clap anyhow
//! cargo add --dev capi-testing mockall
//! ```
//!
//! (While the SDK's crates are not on crates.io, `cargo add --git` or `--path` them.) Enable one
//! `k8s-openapi` version feature in the binary (for example `v1_33`), `kube`'s
//! `derive`, `client` and `runtime` features, and `capi-core`'s `mock` feature in
//! dev-dependencies for `MockActuator`.
//!
//! ## 2. The kinds
//!
//! A provider owns three kinds in its own API group (`infrastructure.<vendor>`), all namespaced:
//!
//! | kind | embeds | the SDK reads and writes |
//! |---|---|---|
//! | `XxxCluster` | [`InfraClusterStatus`](capi_core::infra::InfraClusterStatus) as its status | `spec.controlPlaneEndpoint`, `status.initialization.provisioned`, `status.failureDomains`, `status.conditions` |
//! | `XxxMachine` | [`InfraMachineStatus`](capi_core::infra::InfraMachineStatus) | `spec.providerID`, `status.initialization.provisioned`, `status.addresses`, `status.failureDomain`, `status.conditions` |
//! | `XxxMachineTemplate` | [`MachineTemplateStatus`](capi_core::infra::MachineTemplateStatus) | `status.capacity`, `status.nodeInfo`, `status.conditions` |
//!
//! and, for `ClusterClass`, an `XxxClusterTemplate` (`spec.template.spec` is an `XxxClusterSpec`).
//! What the fields mean:
//!
//! - `spec.providerID` — the ID the cloud's node controller sets on the `Node`
//!   (`mycloud:///<id>`); the core Machine controller finds the node by it. Written once, by the
//!   loop, before anything else, from what `create` returned.
//! - `status.initialization.provisioned` — the instance (or cluster infrastructure) is ready;
//!   set once, never unset.
//! - `status.addresses`, `status.failureDomain` — copied to the `Machine`.
//! - `spec.controlPlaneEndpoint` — where the API server of the workload cluster listens (the load
//!   balancer); copied to the `Cluster`.
//! - `status.failureDomains` — where machines may be placed; the control plane spreads over them.
//! - `status.capacity`, `status.nodeInfo` — what a machine made from the template has, read by the
//!   cluster autoscaler to scale a node group from zero.
//! - the CRD label `cluster.x-k8s.io/v1beta2: <version>` — how Cluster API finds the version that
//!   implements the contract ([`capi_core::crd::with_contract_version`]).
//! - the label `cluster.x-k8s.io/cluster-name` on every object of a cluster — how each object is
//!   found from its cluster (Cluster API sets it on what it creates).
//!
//! A machine kind, as `kube` derives it:
//!
//! ```
//! use capi_core::infra::{InfraMachine, InfraMachineStatus};
//! use kube::CustomResource;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! /// A virtual machine of My Cloud.
//! #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! #[kube(group = "infrastructure.mycloud.example", version = "v1alpha1", kind = "MyMachine")]
//! #[kube(namespaced, status = "InfraMachineStatus")]
//! pub struct MyMachineSpec {
//!     /// Set by the controller.
//!     #[serde(rename = "providerID", default, skip_serializing_if = "Option::is_none")]
//!     pub provider_id: Option<String>,
//!     /// The instance type.
//!     pub instance_type: String,
//! }
//!
//! impl InfraMachine for MyMachine {
//!     fn provider_id(&self) -> Option<&str> {
//!         self.spec.provider_id.as_deref()
//!     }
//!     fn infra_status(&self) -> Option<&InfraMachineStatus> {
//!         self.status.as_ref()
//!     }
//! }
//!
//! let crd = capi_core::crd::with_contract_version(
//!     <MyMachine as kube::CustomResourceExt>::crd(),
//!     "v1alpha1",
//! );
//! let labels = crd.metadata.labels.unwrap_or_default();
//! assert_eq!(labels["cluster.x-k8s.io/v1beta2"], "v1alpha1");
//! ```
//!
//! ## 3. The actuators
//!
//! Three traits, one per kind; the SDK's loop does everything else (owners, finalizers, pause,
//! waiting for the cluster infrastructure and the bootstrap data, status writes, conditions,
//! events, backoff). Every call receives a scope with the objects the loop read from its own
//! watches — the `Cluster`, your `XxxCluster` (where your region, network and credentials
//! reference live), the `Machine` and your `XxxMachine` — so an actuator talks to its cloud and
//! to nothing else. What each call must guarantee is in [`capi_core::actuator`]; in short:
//!
//! - [`Actuator::exists`](capi_core::Actuator::exists) finds the instance — by `spec.providerID`
//!   once recorded, else by the [`IdempotencyKey`](capi_core::IdempotencyKey) `create` tagged it
//!   with — and never creates anything. It returns a [`Found`](capi_core::Found): what the loop
//!   records, and your own record of the instance (`type Instance`: what the cloud answered);
//! - [`Actuator::create`](capi_core::Actuator::create) receives the bootstrap data, looks for an
//!   instance with the key first and tags the instance with it *in the same call that creates
//!   it*, so that a retry after a lost response or a crash finds it;
//! - [`Actuator::update`](capi_core::Actuator::update) receives what `exists` found in the same
//!   reconcile (no second lookup, nothing to remember between calls), converges what the cloud can
//!   change in place and reports the rest as [`ImmutableChange`](capi_core::ImmutableChange)s
//!   (the machine then says a rollout is needed);
//! - [`Actuator::delete`](capi_core::Actuator::delete) returns `Ok` only when the instance and
//!   everything it owns is gone, [`ActuatorError::RequeueAfter`](capi_core::ActuatorError) while
//!   it goes;
//! - [`ClusterActuator`](capi_core::ClusterActuator) does the same for the cluster's
//!   infrastructure, and [`MachineTemplateActuator`](capi_core::MachineTemplateActuator)
//!   describes what a template's machines have.
//!
//! Errors say what the loop should do: `RequeueAfter` (in progress), `Transient` (back off and
//! retry), `InvalidConfiguration` (the user must change something: reported in `Ready=False`).
//! Messages reach conditions and events: build them from IDs and the cloud's error codes, never
//! from request bodies, credentials or bootstrap data.
//!
//! ## 4. Reporting status
//!
//! Beyond the contract, a provider reports its own status fields (the cloud's IDs a user needs to
//! debug), its own conditions, the failure domain the instance landed in and a terminal failure:
//!
//! ```
//! use capi_core::condition::{ConditionStatus, DesiredCondition};
//! use capi_core::{InstanceState, MachineInstance, ProviderStatus};
//! use serde::Serialize;
//!
//! #[derive(Serialize)]
//! #[serde(rename_all = "camelCase")]
//! struct MyMachineStatus<'a> {
//!     #[serde(rename = "instanceID")]
//!     instance_id: &'a str,
//!     instance_state: &'a str,
//! }
//!
//! let status = ProviderStatus::from_typed(&MyMachineStatus {
//!     instance_id: "i-0b7c",
//!     instance_state: "running",
//! })
//! .unwrap();
//! let instance = MachineInstance::new("mycloud:///i-0b7c", vec![], InstanceState::Running)
//!     .in_failure_domain("zone-a")
//!     .with_provider_status(status)
//!     .with_condition(DesiredCondition::new(
//!         "VolumesAttached",
//!         ConditionStatus::True,
//!         "Attached",
//!     ));
//! assert_eq!(instance.failure_domain.as_deref(), Some("zone-a"));
//!
//! // A terminal failure: Ready=False with this reason and message, and a warning event.
//! let failed = InstanceState::Failed {
//!     reason: "OutOfCapacity".into(),
//!     message: "no capacity for m7.large in zone-a".into(),
//! };
//! # let _ = failed;
//! ```
//!
//! The loop merges the fields into the object's `status` with the same change-only merge patch as
//! the contract's, so an unchanged reconcile writes nothing. Declare the fields in the status type
//! of the CRD (beside the flattened contract status) and add printer columns for them.
//!
//! ## 5. The binary, beside upstream Cluster API
//!
//! [`ProviderManager`](crate::ProviderManager) gives every provider the same flags (`--help`),
//! logging, health, metrics, leader election and `--print-manifests`:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # async fn run<M: capi_core::infra::InfraMachine, C: capi_core::infra::InfraCluster, T: capi_core::infra::InfraMachineTemplate>(
//! #     machines: Arc<impl capi_core::Actuator<M, C> + 'static>,
//! #     clusters: Arc<dyn capi_core::ClusterActuator<C>>,
//! #     templates: Arc<dyn capi_core::MachineTemplateActuator<T, C>>,
//! #     crds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
//! # ) -> Result<(), capi_provider::ProviderError> {
//! use capi_actuator::InfrastructureControllers;
//! use capi_provider::support::rbac;
//! use capi_provider::{ManagerArgs, ProviderManager};
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Args {
//!     #[command(flatten)]
//!     manager: ManagerArgs,
//! }
//!
//! let group = "infrastructure.mycloud.example";
//! let rules = rbac::provider(group, "mymachines", "myclusters", "mymachinetemplates");
//! ProviderManager::new("mycloud", Args::parse().manager)
//!     .manifests(crds, rules)
//!     .run(|manager| {
//!         manager.add_cluster_reconciler::<C>(clusters);
//!         manager.add_machine_reconciler(machines);
//!         manager.add_machine_template_reconciler::<T, C>(templates);
//!     })
//!     .await
//! # }
//! ```
//!
//! Beside upstream Cluster API (its core, kubeadm bootstrap and control plane managers installed
//! by `clusterctl init`), run it as it is: `mycloud-provider --leader-elect <namespace>/<name>
//! --print-manifests | kubectl apply -f -` installs the CRDs, the ClusterRole and the Role that
//! grants the Lease in `<namespace>` only (bind the ClusterRole with a ClusterRoleBinding and the
//! Role with a RoleBinding in `<namespace>` to the manager's ServiceAccount), then the manager
//! runs with the same `--leader-elect`. Upstream's controllers reach the
//! provider's kinds through the contract label and set the Cluster as owner of the templates;
//! upstream's manifests name the kinds in `infrastructureRef`s as for any provider. Without
//! upstream, `--controllers standalone` runs this SDK's own controllers in the same process
//! (and `--print-manifests` adds their rules).
//!
//! For clusterctl, [`crate::clusterctl`] writes the provider's release — components with the
//! CRDs, the RBAC and the hardened Deployment, metadata, cluster templates — into a clusterctl
//! repository: `clusterctl init --infrastructure mycloud` then installs all of it.
//!
//! For `clusterctl move`, name the cloud resources after your `XxxCluster`'s namespace and name
//! (a move keeps them; UIDs are new on the target) and tag each instance with the scope's
//! idempotency key, which the loop records on the infrastructure machine before anything is
//! created ([`capi_core::labels::IDEMPOTENCY_KEY`]) so that it is the same on the target (the
//! annotation is a tenant's to write: adopt an instance found under a key only if it carries the
//! cluster's ownership tags and the machine's name); and
//! label what no ownership from the Cluster
//! reaches: identity CRDs with [`capi_core::crd::moved_with_what_it_owns`], credentials Secrets of
//! the cluster's namespace (in your templates) with
//! [`capi_core::labels::CLUSTERCTL_MOVE`]. A Secret in your manager's namespace that a
//! cluster-scoped identity names moves only when that identity owns it: set the owner reference
//! when the identity is used (as the AWS provider does for `AWSClusterStaticIdentity`), with
//! `patch` on Secrets granted in that namespace only
//! ([`crate::clusterctl::Components::namespace_rules`]).
//!
//! ## 6. Testing
//!
//! **The actuator's decisions, with mocks.** Put the cloud behind a narrow trait and mock it with
//! `mockall`; or mock an actuator to test code that drives one:
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use capi_core::api::{Cluster, Machine};
//! use capi_core::{
//!     Actuator, BootstrapData, BootstrapFormat, IdempotencyKey, InstanceState, MachineInstance,
//!     MachineScope,
//! };
//! use capi_core::MockActuator;
//!
//! let mut actuator = MockActuator::<(), ()>::new();
//! actuator.expect_exists().returning(|_| Ok(None));
//! actuator.expect_create().times(1).returning(|scope, _bootstrap| {
//!     let id = format!("mycloud:///{}", scope.idempotency_key);
//!     Ok(MachineInstance::new(id, vec![], InstanceState::Provisioning))
//! });
//! let mut machine = Machine::default();
//! machine.metadata.uid = Some("6a1c".into());
//! let scope = MachineScope {
//!     cluster: Arc::new(Cluster::default()),
//!     infra_cluster: Some(Arc::new(())),
//!     idempotency_key: IdempotencyKey::for_machine(&machine).unwrap(),
//!     machine: Arc::new(machine),
//!     infra_machine: Arc::new(()),
//! };
//! let bootstrap = BootstrapData::new(BootstrapFormat::CloudConfig, "#cloud-config\n");
//! assert!(actuator.exists(&scope).await.unwrap().is_none());
//! let created = actuator.create(&scope, &bootstrap).await.unwrap();
//! assert!(created.provider_id.starts_with("mycloud:///capi-"));
//! # });
//! ```
//!
//! **The loop, against a real API server.** `capi_testing::TestEnv` starts a private etcd and
//! kube-apiserver (built once by `cargo xtask envtest`), installs CRDs and hands out a namespace:
//! run a `Manager` with the actuators and `capi_controllers::CoreControllers` on it, apply
//! manifests and wait for `Running` machines (see `examples/tests/toy_provider.rs`).
//!
//! ```no_run
//! # async fn demo(my_crds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>) -> Result<(), Box<dyn std::error::Error>> {
//! let mut crds = capi_core::crd::core();
//! crds.extend(my_crds);
//! let env = capi_testing::TestEnv::start_with_crds(&crds).await?;
//! let namespace = env.namespace().await?;
//! let client = env.client();
//! # let _ = (namespace, client);
//! # Ok(()) }
//! ```
//!
//! **The contract, with the conformance suite.** `capi_testing::conformance` drives the
//! actuators over the provider's own cloud (real or fake) the way crashes, lost responses and
//! retries drive them, and names every rule broken: `exists` that creates, a second instance after
//! a lost response or a crash at any await point of `create`, `delete` that returns before the
//! instance is gone, anything left behind. It needs a `CloudInventory` — two listings:
//!
//! ```no_run
//! # use std::collections::BTreeSet;
//! # use std::sync::Arc;
//! # async fn demo(
//! #     machines: Arc<impl capi_core::Actuator<serde_json::Value, serde_json::Value> + 'static>,
//! #     clusters: Arc<dyn capi_core::ClusterActuator<serde_json::Value>>,
//! # ) {
//! use capi_testing::conformance::{CloudInventory, ClusterSuite, MachineSuite};
//!
//! struct MyCloud;
//!
//! #[async_trait::async_trait]
//! impl CloudInventory for MyCloud {
//!     async fn instances(&self) -> Result<BTreeSet<String>, String> {
//!         Ok(BTreeSet::new()) // every VM of the test project
//!     }
//!     async fn resources(&self) -> Result<BTreeSet<String>, String> {
//!         Ok(BTreeSet::new()) // VMs, NICs, disks, load balancers, networks
//!     }
//! }
//!
//! let cloud = Arc::new(MyCloud);
//! let infra_machine = serde_json::json!({"spec": {"instanceType": "small"}});
//! let infra_cluster = serde_json::json!({"spec": {"region": "eu-1"}});
//! let machine_suite = MachineSuite::new(machines, cloud.clone(), infra_machine, infra_cluster.clone());
//! let report = ClusterSuite::new(clusters, cloud, infra_cluster)
//!     .run_with(|_| machine_suite.run())
//!     .await;
//! report.assert_conforms();
//! # }
//! ```
//!
//! The in-memory and OpenStack reference providers run it in CI (`provider-inmemory/tests/
//! conformance.rs`, `provider-openstack/tests/conformance.rs`, the latter against a real local
//! OpenStack).
