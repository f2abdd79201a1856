//! Every branch of the cluster loop's decision, with a mock actuator and no API server.

use std::sync::Arc;
use std::time::Duration;

use capi_core::api::{ApiEndpoint, Cluster, FailureDomain};
use capi_core::condition::{self, ConditionStatus};
use capi_core::infra::{InfraCluster, InfraClusterStatus};
use capi_core::{ActuatorError, ClusterInfrastructure, MockClusterActuator};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::decide::{INFRA_CLUSTER_FINALIZER, Snapshot, decide};
use capi_runtime::plan::{FinalizerChange, Next};
use capi_runtime::reasons;

#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "infrastructure.test.io",
    version = "v1alpha1",
    kind = "TestCluster",
    namespaced,
    status = "InfraClusterStatus"
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TestClusterSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    control_plane_endpoint: Option<ApiEndpoint>,
}

impl InfraCluster for TestCluster {
    fn control_plane_endpoint(&self) -> Option<&ApiEndpoint> {
        self.spec.control_plane_endpoint.as_ref()
    }
    fn infra_status(&self) -> Option<&InfraClusterStatus> {
        self.status.as_ref()
    }
}

const POLL: Duration = Duration::from_secs(5);

fn infra(deleting: bool) -> TestCluster {
    let mut infra = TestCluster::new("demo", TestClusterSpec::default());
    infra.metadata.generation = Some(1);
    infra.metadata.finalizers = Some(vec![INFRA_CLUSTER_FINALIZER.into()]);
    infra.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        name: "demo".into(),
        uid: "c-uid".into(),
        ..OwnerReference::default()
    }]);
    if deleting {
        infra.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    }
    infra
}

fn snapshot(infra: TestCluster) -> Snapshot<TestCluster> {
    let mut cluster = Cluster::default();
    cluster.metadata.name = Some("demo".into());
    cluster.metadata.uid = Some("c-uid".into());
    Snapshot {
        infra: Arc::new(infra),
        owner_uid: Some("c-uid".into()),
        cluster: Some(Arc::new(cluster)),
        remaining_machines: 0,
        invalid_at_generation: None,
    }
}

fn untouched() -> MockClusterActuator<TestCluster> {
    let mut actuator = MockClusterActuator::new();
    actuator.expect_reconcile().never();
    actuator.expect_delete().never();
    actuator
}

#[tokio::test]
async fn provisioned_infrastructure_records_endpoint_and_failure_domains() {
    let mut actuator = MockClusterActuator::new();
    actuator.expect_reconcile().times(1).returning(|_| {
        Ok(ClusterInfrastructure {
            control_plane_endpoint: Some(ApiEndpoint {
                host: "192.0.2.10".into(),
                port: 6443,
            }),
            failure_domains: vec![FailureDomain {
                name: "zone-a".into(),
                control_plane: Some(true),
                attributes: Default::default(),
            }],
            provisioned: true,
            ..Default::default()
        })
    });
    let plan = decide(&actuator, snapshot(infra(false)), POLL).await;
    assert_eq!(
        plan.record.control_plane_endpoint.as_ref().map(|e| e.port),
        Some(6443)
    );
    assert_eq!(plan.record.failure_domains.as_ref().map(Vec::len), Some(1));
    assert!(plan.record.provisioned);
    assert!(
        plan.conditions
            .iter()
            .any(|c| c.type_ == condition::READY && c.status == ConditionStatus::True)
    );
}

#[tokio::test]
async fn an_incomplete_endpoint_is_not_recorded_and_provisioning_polls() {
    let mut actuator = MockClusterActuator::new();
    actuator.expect_reconcile().returning(|_| {
        Ok(ClusterInfrastructure {
            control_plane_endpoint: Some(ApiEndpoint {
                host: String::new(),
                port: 6443,
            }),
            failure_domains: vec![],
            provisioned: false,
            ..Default::default()
        })
    });
    let plan = decide(&actuator, snapshot(infra(false)), POLL).await;
    assert!(plan.record.control_plane_endpoint.is_none());
    assert!(!plan.record.provisioned);
    assert!(matches!(plan.next, Next::Requeue(d) if d == POLL));
}

#[tokio::test]
async fn adds_the_finalizer_first_and_waits_for_an_owner() {
    let mut without = infra(false);
    without.metadata.finalizers = None;
    let plan = decide(&untouched(), snapshot(without), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Add);

    let mut orphan = snapshot(infra(false));
    orphan.cluster = None;
    orphan.owner_uid = None;
    let plan = decide(&untouched(), orphan, POLL).await;
    assert!(matches!(plan.next, Next::AwaitChange));
}

#[tokio::test]
async fn pause_stops_everything() {
    let mut snap = snapshot(infra(true));
    let mut paused = Cluster::default();
    paused.spec.paused = Some(true);
    snap.cluster = Some(Arc::new(paused));
    let plan = decide(&untouched(), snap, POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Keep);
}

#[tokio::test]
async fn deletion_waits_for_machines_then_deletes() {
    let mut snap = snapshot(infra(true));
    snap.remaining_machines = 3;
    let plan = decide(&untouched(), snap, POLL).await;
    assert!(
        plan.conditions
            .iter()
            .any(|c| c.reason == reasons::WAITING_FOR_MACHINES_DELETION && c.message.contains('3'))
    );
    assert_eq!(plan.finalizer, FinalizerChange::Keep);

    let mut actuator = MockClusterActuator::new();
    actuator.expect_delete().times(1).returning(|_| {
        Err(ActuatorError::requeue_after(
            Duration::from_secs(2),
            "DeletingLoadBalancer",
            "load balancer still deleting",
        ))
    });
    let plan = decide(&actuator, snapshot(infra(true)), POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Keep);
    assert!(matches!(plan.next, Next::Requeue(d) if d == Duration::from_secs(2)));

    let mut actuator = MockClusterActuator::new();
    actuator.expect_delete().times(1).returning(|scope| {
        assert_eq!(scope.cluster.metadata.uid.as_deref(), Some("c-uid"));
        Ok(())
    });
    let mut gone = snapshot(infra(true));
    gone.cluster = None;
    let plan = decide(&actuator, gone, POLL).await;
    assert_eq!(plan.finalizer, FinalizerChange::Remove);
}

#[tokio::test]
async fn errors_follow_their_kind() {
    let mut actuator = MockClusterActuator::new();
    actuator.expect_reconcile().returning(|_| {
        Err(ActuatorError::transient_message(
            "CloudAPIError",
            "HTTP 502",
        ))
    });
    let plan = decide(&actuator, snapshot(infra(false)), POLL).await;
    assert!(matches!(plan.next, Next::Failed(_)));

    let mut actuator = MockClusterActuator::new();
    actuator.expect_reconcile().times(1).returning(|_| {
        Err(ActuatorError::invalid_configuration(
            "NetworkNotFound",
            "network \"ext\" does not exist",
        ))
    });
    let plan = decide(&actuator, snapshot(infra(false)), POLL).await;
    assert!(matches!(plan.next, Next::InvalidConfiguration));
    let mut again = snapshot(infra(false));
    again.invalid_at_generation = Some(1);
    let plan = decide(&untouched(), again, POLL).await;
    assert!(
        matches!(plan.next, Next::InvalidConfiguration),
        "still invalid: the memo stays, and expires to ask the cloud again"
    );
}
