//! `AWSMachineTemplate` capacity, for the cluster autoscaler's scale from zero: `cpu` and
//! `memory` of the instance type (`DescribeInstanceTypes`), `ephemeral-storage` of the root
//! volume when the template sizes it, the architecture the instance type runs (`x86_64` →
//! `amd64`, `arm64`), and Linux.
//!
//! The region and credentials are those of the template's `AWSCluster` (the scope's), so a
//! template needs the `cluster.x-k8s.io/cluster-name` label or a `Cluster` owner, as templates
//! created by a `ClusterClass` topology have. A template of no cluster is an invalid
//! configuration that says so; a template whose cluster has no `AWSCluster` yet waits for it.

use async_trait::async_trait;
use capi_core::infra::Architecture;
use capi_core::{ActuatorError, MachineCapacity, MachineTemplateActuator, TemplateScope, labels};
use kube::ResourceExt;

use crate::api::{AWSCluster, AWSMachineTemplate};
use crate::cloud::InstanceTypeInfo;
use crate::machine::AwsMachineActuator;

#[async_trait]
impl MachineTemplateActuator<AWSMachineTemplate, AWSCluster> for AwsMachineActuator {
    async fn capacity(
        &self,
        scope: &TemplateScope<AWSMachineTemplate, AWSCluster>,
    ) -> Result<MachineCapacity, ActuatorError> {
        let template = &scope.template;
        let Some(aws) = &scope.infra_cluster else {
            return Err(no_aws_cluster(scope));
        };
        let clients = self.connector.connect(aws).await?;
        let spec = &template.spec.template.spec;
        let info = clients
            .compute
            .instance_type(&spec.instance_type)
            .await
            .map_err(|e| clients.error(e))?
            .ok_or_else(|| crate::machine::unknown_instance_type(&spec.instance_type))?;
        let root_gib = spec
            .root_volume
            .as_ref()
            .and_then(|v| u64::try_from(v.size).ok())
            .unwrap_or_default();
        Ok(capacity(&info, root_gib))
    }
}

/// Why a template's capacity cannot be asked of AWS: it names no cluster (the user's to fix), or
/// its cluster has no `AWSCluster` yet (waited for).
fn no_aws_cluster(scope: &TemplateScope<AWSMachineTemplate, AWSCluster>) -> ActuatorError {
    let Some(cluster) = &scope.cluster else {
        return ActuatorError::invalid_configuration(
            "NoCluster",
            format!(
                "the template names no Cluster: label it {}=<cluster> so that AWS can be reached \
                 in that cluster's region with its AWSCluster's identityRef",
                labels::CLUSTER_NAME
            ),
        );
    };
    ActuatorError::transient_message(
        "WaitingForAWSCluster",
        format!(
            "no AWSCluster of cluster {}/{} yet",
            scope.template.namespace().unwrap_or_default(),
            cluster.name_any()
        ),
    )
}

/// A machine's capacity from its instance type and root volume size (0: the AMI's, unknown).
fn capacity(info: &InstanceTypeInfo, root_gib: u64) -> MachineCapacity {
    let mut capacity = MachineCapacity::default()
        .cpus(u64::from(info.vcpus))
        .memory_mib(info.memory_mib)
        .ephemeral_storage_gib(root_gib)
        .operating_system("linux");
    let architecture = ["x86_64", "arm64"]
        .into_iter()
        .find(|wanted| info.architectures.iter().any(|a| a == wanted))
        .and_then(Architecture::from_cloud_name);
    if let Some(architecture) = architecture {
        capacity = capacity.architecture(architecture);
    }
    capacity
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use capi_core::api::Cluster;

    use super::*;
    use crate::cloud::{Clients, MockCompute, MockLoadBalancing, MockNetwork};
    use crate::connector::MockConnector;

    fn actuator(compute: MockCompute) -> AwsMachineActuator {
        let clients = Clients {
            compute: Arc::new(compute),
            network: Arc::new(MockNetwork::new()),
            load_balancing: Arc::new(MockLoadBalancing::new()),
            secrets: Arc::new(crate::cloud::MockSecrets::new()),
            scaling: Arc::new(crate::cloud::MockScaling::new()),
            redaction: Default::default(),
        };
        let mut connector = MockConnector::new();
        connector
            .expect_connect()
            .returning(move |_| Ok(clients.clone()));
        AwsMachineActuator::new(Arc::new(connector))
    }

    /// A template of `cluster`, whose `AWSCluster` is `aws`.
    fn scope(
        cluster: Option<Cluster>,
        aws: Option<AWSCluster>,
    ) -> TemplateScope<AWSMachineTemplate, AWSCluster> {
        let mut template = AWSMachineTemplate::default();
        template.spec.template.spec.instance_type = "m7g.large".into();
        template.spec.template.spec.root_volume = Some(crate::api::Volume {
            size: 80,
            ..Default::default()
        });
        TemplateScope {
            template: Arc::new(template),
            cluster: cluster.map(Arc::new),
            infra_cluster: aws.map(Arc::new),
        }
    }

    fn in_a_cluster() -> TemplateScope<AWSMachineTemplate, AWSCluster> {
        scope(Some(Cluster::default()), Some(AWSCluster::default()))
    }

    #[tokio::test]
    async fn the_instance_type_and_root_volume_become_capacity_and_node_info() {
        let mut compute = MockCompute::new();
        compute
            .expect_instance_type()
            .withf(|name| name == "m7g.large")
            .returning(|name| {
                Ok(Some(InstanceTypeInfo {
                    name: name.into(),
                    vcpus: 2,
                    memory_mib: 8192,
                    architectures: vec!["arm64".into()],
                    instance_storage_gb: None,
                }))
            });
        let got = actuator(compute).capacity(&in_a_cluster()).await.unwrap();
        let quantities: Vec<(&str, &str)> = got
            .capacity
            .iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str()))
            .collect();
        assert_eq!(
            quantities,
            [
                ("cpu", "2"),
                ("ephemeral-storage", "80Gi"),
                ("memory", "8192Mi")
            ]
        );
        assert_eq!(got.node_info.architecture, Some(Architecture::Arm64));
        assert_eq!(got.node_info.operating_system.as_deref(), Some("linux"));
    }

    #[tokio::test]
    async fn an_unknown_instance_type_or_no_cluster_is_the_users_to_fix() {
        let mut compute = MockCompute::new();
        compute.expect_instance_type().returning(|_| Ok(None));
        let error = actuator(compute)
            .capacity(&in_a_cluster())
            .await
            .unwrap_err();
        assert_eq!(error.reason(), "InstanceTypeNotFound");
        let error = actuator(MockCompute::new())
            .capacity(&scope(None, None))
            .await
            .unwrap_err();
        assert_eq!(error.reason(), "NoCluster");
        assert!(error.message().contains(labels::CLUSTER_NAME));
    }

    #[tokio::test]
    async fn a_cluster_without_its_aws_cluster_is_waited_for_without_asking_aws() {
        let mut cluster = Cluster::default();
        cluster.metadata.name = Some("demo".into());
        let error = actuator(MockCompute::new())
            .capacity(&scope(Some(cluster), None))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), capi_core::ActuatorErrorKind::Transient);
        assert_eq!(error.reason(), "WaitingForAWSCluster");
        assert!(error.message().contains("demo"), "{error}");
    }
}
