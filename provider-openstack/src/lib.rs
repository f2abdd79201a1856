//! The OpenStack infrastructure provider: `OpenStackCluster`, `OpenStackMachine` and
//! `OpenStackMachineTemplate` reconciled through Keystone, Nova, Neutron and Octavia.
//!
//! - [`api`]: the kinds and their CRDs (group `infrastructure.capi-rs.dev`, CAPO-shaped fields,
//!   validation in the schema);
//! - [`credentials`]: one cloud of the `clouds.yaml` Secret an `identityRef` names (password or
//!   application credential, region, interface, CA bundle), never shown in logs or errors;
//! - [`cloud`]: the services behind narrow traits (mockable with feature `mock`) and one shared,
//!   token-caching `openstack_sdk` session per credentials Secret;
//! - [`connector`]: from an object's `identityRef` to its clients;
//! - [`naming`]: the deterministic names, descriptions and tags that let every resource be found
//!   again after a crash;
//! - [`cluster`]: the [`ClusterActuator`](capi_core::ClusterActuator) (network → subnet → router →
//!   security groups → load balancer → floating IP, and back);
//! - [`machine`]: the [`Actuator`](capi_core::Actuator) (ports, server, pool membership) and the
//!   [`MachineTemplateActuator`](capi_core::MachineTemplateActuator) (flavor and image as
//!   capacity, in [`template`]);
//! - [`cloud_conf`]: the bootstrap hook adding the cloud provider's `cloud.conf` and the CA bundle
//!   to every machine's bootstrap data.
//!
//! The `openstack-manager` binary (package `provider-openstack-bin`) runs them in a `Manager`.
//!
//! No `MachinePool` kind: OpenStack's compute API has no scale-set resource (Nova runs servers one
//! by one), and upstream's provider (CAPO) offers no MachinePool either. Groups of OpenStack
//! servers are MachineDeployments.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! use std::sync::Arc;
//! use provider_openstack::cluster::OpenStackClusterActuator;
//! use provider_openstack::connector::SecretConnector;
//! use provider_openstack::machine::OpenStackMachineActuator;
//!
//! let connector = Arc::new(SecretConnector::new(client));
//! let clusters = OpenStackClusterActuator::new(connector.clone());
//! let machines = OpenStackMachineActuator::new(connector);
//! // Hand them to capi_actuator's Manager (add_cluster_reconciler, add_machine_reconciler and
//! // add_machine_template_reconciler): every call finds its OpenStackCluster in its scope.
//! # }
//! ```

pub mod api;
pub mod auth_url;
pub mod cloud;
pub mod cloud_conf;
pub mod cluster;
pub mod connector;
pub mod credentials;
pub mod machine;
pub mod naming;
mod resolve;
pub mod template;
