//! `OpenStackMachineTemplate` capacity: what a machine made from the template has, for the cluster
//! autoscaler's scale from zero — `cpu`, `memory` and `ephemeral-storage` from the Nova flavor,
//! the architecture and operating system from the Glance image's `architecture` and `os_type`
//! properties (Linux when the image does not say, as nearly every Cluster API image is).
//!
//! The cloud is reached with the credentials of the template's cluster (its `OpenStackCluster`'s
//! `identityRef`, from the scope), so a template needs the `cluster.x-k8s.io/cluster-name` label or
//! a `Cluster` owner, as templates created by a `ClusterClass` topology have.

use async_trait::async_trait;
use capi_core::infra::Architecture;
use capi_core::{ActuatorError, MachineCapacity, MachineTemplateActuator, TemplateScope, labels};
use kube::ResourceExt;

use crate::api::{OpenStackCluster, OpenStackMachineTemplate};
use crate::cloud::{Flavor, Image};
use crate::machine::OpenStackMachineActuator;
use crate::resolve;

#[async_trait]
impl MachineTemplateActuator<OpenStackMachineTemplate, OpenStackCluster>
    for OpenStackMachineActuator
{
    /// The template's flavor and image, looked up with the credentials of the scope's
    /// `OpenStackCluster`. A template of no cluster is an invalid configuration that says how to
    /// name one; a cluster whose `OpenStackCluster` does not exist yet is waited for.
    async fn capacity(
        &self,
        scope: &TemplateScope<OpenStackMachineTemplate, OpenStackCluster>,
    ) -> Result<MachineCapacity, ActuatorError> {
        let template = &scope.template;
        let namespace = template.namespace().unwrap_or_default();
        let openstack = match (&scope.cluster, &scope.infra_cluster) {
            (_, Some(openstack)) => openstack,
            (None, None) => {
                return Err(ActuatorError::invalid_configuration(
                    "NoCluster",
                    format!(
                        "the template names no Cluster: label it {}=<cluster> so that the cloud \
                         can be reached with that cluster's OpenStackCluster identityRef",
                        labels::CLUSTER_NAME
                    ),
                ));
            }
            (Some(cluster), None) => {
                return Err(ActuatorError::transient_message(
                    "WaitingForOpenStackCluster",
                    format!(
                        "no OpenStackCluster of cluster {namespace}/{} yet",
                        cluster.name_any()
                    ),
                ));
            }
        };
        let clients = self
            .connector
            .connect(&namespace, &openstack.spec.identity_ref)
            .await?;
        let spec = &template.spec.template.spec;
        let flavor = resolve::flavor(clients.compute.as_ref(), spec).await?;
        let image = resolve::image(clients.images.as_ref(), spec).await?;
        Ok(capacity(&flavor, &image))
    }
}

/// A machine's capacity from its flavor and image.
fn capacity(flavor: &Flavor, image: &Image) -> MachineCapacity {
    let mut capacity = MachineCapacity::default()
        .cpus(u64::from(flavor.vcpus))
        .memory_mib(flavor.ram)
        .ephemeral_storage_gib(flavor.disk)
        .operating_system(
            image
                .os_type
                .as_deref()
                .map(str::to_ascii_lowercase)
                .unwrap_or_else(|| "linux".to_string()),
        );
    if let Some(architecture) = image
        .architecture
        .as_deref()
        .and_then(Architecture::from_cloud_name)
    {
        capacity = capacity.architecture(architecture);
    }
    capacity
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use capi_core::api::Cluster;

    use super::*;
    use crate::cloud::{MockCompute, MockImages, MockLoadBalancing, MockNetworking};
    use crate::connector::{Clients, MockConnector};

    fn actuator(compute: MockCompute, images: MockImages) -> OpenStackMachineActuator {
        let mut connector = MockConnector::new();
        let clients = Clients {
            compute: Arc::new(compute),
            images: Arc::new(images),
            network: Arc::new(MockNetworking::new()),
            load_balancer: Arc::new(MockLoadBalancing::new()),
        };
        connector
            .expect_connect()
            .returning(move |_, _| Ok(clients.clone()));
        OpenStackMachineActuator::new(Arc::new(connector))
    }

    fn scope(
        cluster: Option<Cluster>,
        infra_cluster: Option<OpenStackCluster>,
    ) -> TemplateScope<OpenStackMachineTemplate, OpenStackCluster> {
        let mut template = OpenStackMachineTemplate::default();
        template.spec.template.spec.flavor.id = Some("m1.medium".into());
        template.spec.template.spec.image.id = Some("ubuntu".into());
        TemplateScope {
            template: Arc::new(template),
            cluster: cluster.map(Arc::new),
            infra_cluster: infra_cluster.map(Arc::new),
        }
    }

    #[tokio::test]
    async fn flavor_and_image_properties_become_capacity_and_node_info() {
        let mut compute = MockCompute::new();
        compute.expect_find_flavor().returning(|_| {
            Ok(Some(Flavor {
                id: "f1".into(),
                name: "m1.medium".into(),
                vcpus: 2,
                ram: 4096,
                disk: 40,
            }))
        });
        let mut images = MockImages::new();
        images.expect_find_images().returning(|_, _| {
            Ok(vec![Image {
                id: "i1".into(),
                name: "ubuntu".into(),
                architecture: Some("aarch64".into()),
                os_type: None,
            }])
        });
        let got = actuator(compute, images)
            .capacity(&scope(
                Some(Cluster::default()),
                Some(OpenStackCluster::default()),
            ))
            .await
            .unwrap();
        let quantities: Vec<(&str, &str)> = got
            .capacity
            .iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str()))
            .collect();
        assert_eq!(
            quantities,
            [
                ("cpu", "2"),
                ("ephemeral-storage", "40Gi"),
                ("memory", "4096Mi")
            ]
        );
        assert_eq!(got.node_info.architecture, Some(Architecture::Arm64));
        assert_eq!(got.node_info.operating_system.as_deref(), Some("linux"));
    }

    #[tokio::test]
    async fn a_template_without_a_cluster_says_how_to_name_one() {
        let error = actuator(MockCompute::new(), MockImages::new())
            .capacity(&scope(None, None))
            .await
            .unwrap_err();
        assert_eq!(error.reason(), "NoCluster");
        assert!(error.message().contains(labels::CLUSTER_NAME));
    }

    #[tokio::test]
    async fn a_cluster_without_its_openstack_cluster_yet_is_waited_for() {
        let mut cluster = Cluster::default();
        cluster.metadata.name = Some("demo".into());
        let error = actuator(MockCompute::new(), MockImages::new())
            .capacity(&scope(Some(cluster), None))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), capi_core::ActuatorErrorKind::Transient);
        assert_eq!(error.reason(), "WaitingForOpenStackCluster");
        assert!(error.message().contains("demo"), "{error}");
    }
}
