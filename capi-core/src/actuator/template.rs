//! The machine template hook: what a machine made from a template will have, for the cluster
//! autoscaler's scale from zero.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::ActuatorError;
use crate::api::Cluster;
use crate::infra::{Architecture, NodeInfo};

/// Describes the machines a provider's template makes, as the cloud tells (flavor, instance type,
/// VM size and image). The SDK calls it for every template and records the answer in the
/// template's `status.capacity` and `status.nodeInfo`.
///
/// `T` is the provider's template kind (for example `OpenStackMachineTemplate`) and `C` its
/// cluster kind (for example `OpenStackCluster`). The call must
/// not create or change anything. An unknown flavor or image is
/// [`ActuatorError::InvalidConfiguration`] (reported in `Ready=False`, retried when the template
/// changes and slowly otherwise); a cloud failure is [`ActuatorError::Transient`].
#[cfg_attr(any(test, feature = "mock"), mockall::automock)]
#[async_trait]
pub trait MachineTemplateActuator<T: Send + Sync + 'static, C: Send + Sync + 'static>:
    Send + Sync
{
    /// What a machine made from `scope.template` has.
    async fn capacity(&self, scope: &TemplateScope<T, C>)
    -> Result<MachineCapacity, ActuatorError>;
}

/// Everything a [`MachineTemplateActuator`] call may look at, read by the loop from the
/// manager's own watches.
#[derive(Debug)]
pub struct TemplateScope<T, C> {
    /// The provider's template.
    pub template: Arc<T>,
    /// The `Cluster` the template belongs to — named by its `cluster.x-k8s.io/cluster-name`
    /// label, else its `Cluster` owner — when there is one.
    pub cluster: Option<Arc<Cluster>>,
    /// The provider's cluster object of that `Cluster` (where a provider finds the cluster's
    /// region and credentials), when there is one. A template of a ClusterClass belongs to no
    /// cluster: then `None`, and the provider answers from what the template says alone.
    pub infra_cluster: Option<Arc<C>>,
}

impl<T, C> Clone for TemplateScope<T, C> {
    fn clone(&self) -> Self {
        Self {
            template: Arc::clone(&self.template),
            cluster: self.cluster.clone(),
            infra_cluster: self.infra_cluster.clone(),
        }
    }
}

/// What a machine made from a template has: resources and node information.
///
/// ```
/// use capi_core::MachineCapacity;
/// use capi_core::infra::Architecture;
///
/// let capacity = MachineCapacity::default()
///     .cpus(4)
///     .memory_mib(8192)
///     .ephemeral_storage_gib(40)
///     .architecture(Architecture::Amd64)
///     .operating_system("linux");
/// assert_eq!(capacity.capacity["memory"].0, "8192Mi");
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineCapacity {
    /// Resources by name (`cpu`, `memory`, `ephemeral-storage`, extended resources).
    pub capacity: BTreeMap<String, Quantity>,
    /// Architecture and operating system.
    pub node_info: NodeInfo,
}

impl MachineCapacity {
    /// Sets resource `name` to `quantity` (a Kubernetes quantity: `4`, `8Gi`, `500m`).
    pub fn resource(mut self, name: impl Into<String>, quantity: impl Into<String>) -> Self {
        self.capacity.insert(name.into(), Quantity(quantity.into()));
        self
    }

    /// Sets `cpu` to `n` cores.
    pub fn cpus(self, n: u64) -> Self {
        self.resource("cpu", n.to_string())
    }

    /// Sets `memory` to `mib` mebibytes.
    pub fn memory_mib(self, mib: u64) -> Self {
        self.resource("memory", format!("{mib}Mi"))
    }

    /// Sets `ephemeral-storage` to `gib` gibibytes (the root disk); nothing when 0 (a flavor
    /// whose root disk is a volume sized elsewhere).
    pub fn ephemeral_storage_gib(self, gib: u64) -> Self {
        if gib == 0 {
            return self;
        }
        self.resource("ephemeral-storage", format!("{gib}Gi"))
    }

    /// Sets the architecture.
    pub fn architecture(mut self, architecture: Architecture) -> Self {
        self.node_info.architecture = Some(architecture);
        self
    }

    /// Sets the operating system (`linux` or `windows`).
    pub fn operating_system(mut self, os: impl Into<String>) -> Self {
        self.node_info.operating_system = Some(os.into());
        self
    }
}
