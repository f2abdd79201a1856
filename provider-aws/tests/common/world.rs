//! A cluster's network in moto as the cluster actuator would report it, and machines in it: what
//! the machine actuator's tests on moto share.

use std::sync::Arc;

use aws_sdk_ec2::types::Filter;
use aws_sdk_elasticloadbalancingv2::types::ProtocolEnum;
use capi_core::api::{Cluster, Machine};
use capi_core::{BootstrapData, BootstrapFormat, IdempotencyKey, MachineScope};
use provider_aws::api::{AWSCluster, AWSMachine};
use provider_aws::machine::AwsMachineActuator;
use provider_aws::naming::IDEMPOTENCY_KEY_TAG;

use super::{FixedConnector, Moto, provider_clients};

pub const BOOTSTRAP: &str = "#cloud-config\nruncmd:\n- echo hello\n";

/// The bootstrap data every machine here is created with.
pub fn bootstrap() -> BootstrapData {
    BootstrapData::new(BootstrapFormat::CloudConfig, BOOTSTRAP)
}

/// A VPC with a private subnet in each of two zones, the cluster's security groups and an API
/// server target group, as the cluster actuator would report them.
pub struct World {
    pub moto: Moto,
    pub cluster: AWSCluster,
    pub target_group: String,
}

pub async fn world(moto: Moto) -> World {
    let (vpc, subnets) = moto.network().await;
    let mut groups = Vec::new();
    for role in ["controlplane", "node"] {
        let group = moto
            .ec2
            .create_security_group()
            .group_name(format!("demo-{role}"))
            .description(role)
            .vpc_id(&vpc)
            .send()
            .await
            .unwrap();
        groups.push(group.group_id().unwrap().to_string());
    }
    let target_group = moto
        .elb
        .create_target_group()
        .name("demo-tg")
        .protocol(ProtocolEnum::Tcp)
        .port(6443)
        .vpc_id(&vpc)
        .send()
        .await
        .unwrap()
        .target_groups()[0]
        .target_group_arn()
        .unwrap()
        .to_string();
    let cluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSCluster",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {"region": super::REGION, "additionalTags": {"team": "a"}},
        "status": {"networkStatus": {
            "vpc": {"id": vpc},
            "subnets": [
                {"id": "demo-subnet-private-us-east-1a", "resourceID": subnets[0],
                 "availabilityZone": "us-east-1a", "isPublic": false},
                {"id": "demo-subnet-private-us-east-1b", "resourceID": subnets[1],
                 "availabilityZone": "us-east-1b", "isPublic": false}],
            "securityGroups": {"controlplane": {"id": groups[0]}, "node": {"id": groups[1]}},
            "apiServerElb": {"targetGroupArn": target_group}}},
    }))
    .unwrap();
    World {
        moto,
        cluster,
        target_group,
    }
}

impl World {
    pub fn actuator(&self) -> AwsMachineActuator {
        AwsMachineActuator::new(Arc::new(FixedConnector(provider_clients(&self.moto))))
    }

    pub fn scope(
        &self,
        name: &str,
        uid: &str,
        spec: serde_json::Value,
    ) -> MachineScope<AWSMachine, AWSCluster> {
        let mut labels = serde_json::json!({"cluster.x-k8s.io/cluster-name": "demo"});
        if name.contains("control-plane") {
            labels["cluster.x-k8s.io/control-plane"] = serde_json::json!("");
        }
        let infra: AWSMachine = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSMachine",
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": spec,
        }))
        .unwrap();
        let mut machine = Machine::default();
        machine.metadata.uid = Some(uid.into());
        machine.spec.cluster_name = "demo".into();
        machine.spec.failure_domain = Some("us-east-1b".into());
        machine.spec.version = Some("v1.33.1".into());
        MachineScope {
            cluster: Arc::new(Cluster::default()),
            infra_cluster: Some(Arc::new(self.cluster.clone())),
            idempotency_key: IdempotencyKey::for_machine(&machine).unwrap(),
            machine: Arc::new(machine),
            infra_machine: Arc::new(infra),
        }
    }

    /// The user data EC2 keeps for instance `id`, decoded from base64.
    pub async fn user_data(&self, id: &str) -> Vec<u8> {
        use base64::Engine;
        let answer = self
            .moto
            .ec2
            .describe_instance_attribute()
            .instance_id(id)
            .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
            .send()
            .await
            .unwrap();
        let encoded = answer.user_data().and_then(|u| u.value()).unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap()
    }

    /// The live instances carrying `key`.
    pub async fn instances_of(&self, key: &str) -> Vec<aws_sdk_ec2::types::Instance> {
        let answer = self
            .moto
            .ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name(format!("tag:{IDEMPOTENCY_KEY_TAG}"))
                    .values(key)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .values("pending")
                    .values("running")
                    .build(),
            )
            .send()
            .await
            .unwrap();
        answer
            .reservations()
            .iter()
            .flat_map(|r| r.instances().iter().cloned())
            .collect()
    }
}

pub fn recorded(
    mut scope: MachineScope<AWSMachine, AWSCluster>,
    provider_id: &str,
) -> MachineScope<AWSMachine, AWSCluster> {
    let mut infra = (*scope.infra_machine).clone();
    infra.spec.provider_id = Some(provider_id.to_string());
    scope.infra_machine = Arc::new(infra);
    scope
}
