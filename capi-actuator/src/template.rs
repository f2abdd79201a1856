//! The infrastructure machine template reconciler: drives a [`MachineTemplateActuator`] for a
//! provider's machine template kind and publishes what a machine made from each template has —
//! `status.capacity` and `status.nodeInfo`, which the cluster autoscaler reads to scale a node
//! group from zero — with `Ready` saying whether the cloud's description could be read.
//!
//! Per template: find its `Cluster` (the `cluster.x-k8s.io/cluster-name` label, else a `Cluster`
//! owner); honour pause; ask the actuator; write status only when it changed. A cloud failure
//! keeps the last known capacity (still the best guess for the autoscaler), an invalid
//! configuration clears it; either says why in `Ready=False`.
//! An unknown flavor or image is looked at again every resync period, since the cloud may gain it
//! without the template changing; the resync also notices a flavor redefined in the cloud.

use std::sync::Arc;

use capi_core::api::Cluster;
use capi_core::condition::{self, ConditionStatus};
use capi_core::infra::{InfraCluster, InfraMachineTemplate, MachineTemplateStatus};
use capi_core::{MachineCapacity, MachineTemplateActuator, TemplateScope, labels};
use capi_runtime::controller::{Action, Config as ControllerConfig, Controller};
use futures::Future;
use kube::{Api, Client, ResourceExt};

use capi_runtime::cache::lookup::Cached;
use capi_runtime::plan::Next;
use capi_runtime::reasons;
use capi_runtime::write;
use capi_runtime::{Context, ReconcileError, Reconciler, back_off, drain};

/// The reconciler of one infrastructure machine template kind `T` of cluster kind `C`.
pub type InfraMachineTemplateReconciler<T, C> = Reconciler<T, dyn MachineTemplateActuator<T, C>>;

/// What one template reconcile records besides conditions: the actuator's answer, if it gave one.
#[derive(Debug, Default)]
struct TemplateRecord {
    capacity: Option<MachineCapacity>,
}

type Plan = capi_runtime::plan::Plan<TemplateRecord>;

/// Where a template reconcile reads its `Cluster` and the provider's cluster object from: the
/// manager's watches, the API server for what they have not seen yet.
struct Clusters<C: InfraCluster> {
    clusters: Cached<Cluster>,
    infra_clusters: Cached<C>,
}

/// Runs `reconciler` until `shutdown` completes; in-flight reconciles finish first.
pub async fn run<T: InfraMachineTemplate, C: InfraCluster>(
    reconciler: InfraMachineTemplateReconciler<T, C>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (trigger, reader) = reconciler.trigger();
    reconciler.offer_as_referenced();
    let clusters = Arc::new(Clusters {
        clusters: Cached::of(
            reconciler.informer::<Cluster>(),
            reconciler.client().clone(),
        ),
        infra_clusters: Cached::of(reconciler.informer::<C>(), reconciler.client().clone()),
    });
    let concurrency = reconciler.concurrency();
    let context = reconciler.into_context(|inner, _, _| inner);
    let results = Controller::for_stream(trigger, reader)
        .trigger_backoff(capi_runtime::retry::WatchBackoff::default())
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(
            move |template, context| reconcile::<T, C>(template, context, Arc::clone(&clusters)),
            back_off::<T, dyn MachineTemplateActuator<T, C>>,
            context,
        );
    drain(results).await;
}

#[tracing::instrument(skip_all, fields(kind = %T::kind(&()), namespace = %template.namespace().unwrap_or_default(), name = %template.name_any()))]
async fn reconcile<T: InfraMachineTemplate, C: InfraCluster>(
    template: Arc<T>,
    context: Arc<Context<dyn MachineTemplateActuator<T, C>>>,
    clusters: Arc<Clusters<C>>,
) -> Result<Action, ReconcileError> {
    context
        .reconcile(
            template.as_ref(),
            reconcile_once(&template, &context, &clusters),
        )
        .await
}

async fn reconcile_once<T: InfraMachineTemplate, C: InfraCluster>(
    template: &Arc<T>,
    context: &Context<dyn MachineTemplateActuator<T, C>>,
    clusters: &Clusters<C>,
) -> Result<Next, ReconcileError> {
    if template.meta().deletion_timestamp.is_some() {
        return Ok(Next::AwaitChange);
    }
    let scope = observe(clusters, Arc::clone(template)).await?;
    let plan = decide(context.state.as_ref(), scope, context.retry.policy.poll).await;
    record(&context.client, template.as_ref(), &plan).await?;
    write::publish(&context.recorder, template.as_ref(), &plan.events).await;
    Ok(plan.next)
}

/// The template's scope: its `Cluster` — named by its cluster-name label, else its `Cluster`
/// owner — and that cluster's provider object, when there are.
async fn observe<T: InfraMachineTemplate, C: InfraCluster>(
    clusters: &Clusters<C>,
    template: Arc<T>,
) -> Result<TemplateScope<T, C>, kube::Error> {
    let namespace = template.namespace().unwrap_or_default();
    let owner = template
        .owner_references()
        .iter()
        .find(|r| r.kind == "Cluster" && r.api_version.starts_with("cluster.x-k8s.io/"));
    let name = match (labels::cluster_name(template.meta()), owner) {
        (Some(name), _) => Some(name.to_string()),
        (None, Some(owner)) => Some(owner.name.clone()),
        (None, None) => None,
    };
    let Some(name) = name else {
        return Ok(TemplateScope {
            template,
            cluster: None,
            infra_cluster: None,
        });
    };
    let cluster = clusters.clusters.get(&namespace, &name).await?;
    let infra_cluster = crate::machine::infra_cluster(
        &clusters.infra_clusters,
        &namespace,
        &name,
        cluster.as_deref(),
    )
    .await?;
    Ok(TemplateScope {
        template,
        cluster,
        infra_cluster,
    })
}

async fn decide<T: InfraMachineTemplate, C: Send + Sync + 'static>(
    actuator: &dyn MachineTemplateActuator<T, C>,
    scope: TemplateScope<T, C>,
    poll: std::time::Duration,
) -> Plan {
    let mut plan = Plan::new(scope.template.meta().generation);
    let paused = labels::has_paused_annotation(scope.template.meta())
        || scope.cluster.as_ref().is_some_and(|c| c.is_paused());
    if plan.paused(paused) {
        // No watch reports the cluster's pause ending: look again.
        plan.next = Next::Requeue(poll);
        return plan;
    }
    match actuator.capacity(&scope).await {
        Ok(capacity) => {
            plan.record.capacity = Some(capacity);
            plan.condition(
                condition::READY,
                ConditionStatus::True,
                reasons::CAPACITY_REPORTED,
                "",
            );
            plan.next = Next::Resync;
            plan
        }
        Err(error) => {
            let mut plan = plan.actuator_error(error);
            if matches!(plan.next, Next::InvalidConfiguration) {
                // The template cannot make machines: it has no capacity to tell (a cloud failure
                // keeps the last known one). It rarely changes; the cloud may gain the flavor or
                // image instead.
                plan.record.capacity = Some(MachineCapacity::default());
                plan.next = Next::Resync;
            }
            plan
        }
    }
}

/// The status after applying `plan` to `current`; timestamps of unchanged conditions are kept.
fn desired_status(current: &MachineTemplateStatus, plan: &Plan) -> MachineTemplateStatus {
    let mut desired = current.clone();
    for wanted in &plan.conditions {
        condition::set(&mut desired.conditions, wanted.clone());
    }
    if let Some(reported) = &plan.record.capacity {
        desired.capacity = reported.capacity.clone();
        desired.node_info = Some(reported.node_info.clone()).filter(|info| !info.is_empty());
    }
    desired
}

/// Writes the plan's status if it changed, as the diff from the status read: resources the
/// cloud no longer reports, and a `nodeInfo` it no longer gives, are removed.
async fn record<T: InfraMachineTemplate>(
    client: &Client,
    template: &T,
    plan: &Plan,
) -> Result<(), kube::Error> {
    let current = template.template_status().cloned().unwrap_or_default();
    let desired = desired_status(&current, plan);
    let api: Api<T> = Api::namespaced(client.clone(), &template.namespace().unwrap_or_default());
    write::patch_status_if_changed(&api, &template.name_any(), Some(&current), &desired).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_core::infra::{Architecture, NodeInfo};
    use capi_core::{ActuatorError, MockMachineTemplateActuator};
    use std::time::Duration;

    #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
    struct Template {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    }

    impl kube::Resource for Template {
        type DynamicType = ();
        type Scope = k8s_openapi::NamespaceResourceScope;
        fn kind(_: &()) -> std::borrow::Cow<'_, str> {
            "ExampleMachineTemplate".into()
        }
        fn group(_: &()) -> std::borrow::Cow<'_, str> {
            "infrastructure.example.com".into()
        }
        fn version(_: &()) -> std::borrow::Cow<'_, str> {
            "v1".into()
        }
        fn plural(_: &()) -> std::borrow::Cow<'_, str> {
            "examplemachinetemplates".into()
        }
        fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            &self.metadata
        }
        fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            &mut self.metadata
        }
    }

    impl InfraMachineTemplate for Template {
        fn template_status(&self) -> Option<&MachineTemplateStatus> {
            None
        }
    }

    fn template() -> Arc<Template> {
        let metadata = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            generation: Some(2),
            ..Default::default()
        };
        Arc::new(Template { metadata })
    }

    fn scope() -> TemplateScope<Template, ()> {
        TemplateScope {
            template: template(),
            cluster: None,
            infra_cluster: None,
        }
    }

    #[tokio::test]
    async fn a_reported_capacity_replaces_the_old_one_and_sets_ready() {
        let mut actuator = MockMachineTemplateActuator::<Template, ()>::new();
        actuator.expect_capacity().times(1).returning(|_| {
            Ok(MachineCapacity::default()
                .cpus(2)
                .memory_mib(4096)
                .architecture(Architecture::Arm64))
        });
        let plan = decide(&actuator, scope(), Duration::from_secs(1)).await;
        assert!(matches!(plan.next, Next::Resync));
        let mut current = MachineTemplateStatus::default();
        current.capacity.insert(
            "nvidia.com/gpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
        );
        let desired = desired_status(&current, &plan);
        assert_eq!(
            desired.capacity.keys().collect::<Vec<_>>(),
            ["cpu", "memory"],
            "a resource no longer reported is dropped"
        );
        assert_eq!(
            desired.node_info.and_then(|i| i.architecture),
            Some(Architecture::Arm64)
        );
        assert!(condition::is_true(&desired.conditions, condition::READY));
    }

    #[tokio::test]
    async fn an_unknown_flavor_clears_the_capacity_and_is_looked_at_again() {
        let mut actuator = MockMachineTemplateActuator::<Template, ()>::new();
        actuator.expect_capacity().times(1).returning(|_| {
            Err(ActuatorError::invalid_configuration(
                "FlavorNotFound",
                "flavor m1.huge does not exist",
            ))
        });
        let plan = decide(&actuator, scope(), Duration::from_secs(1)).await;
        assert!(
            matches!(plan.next, Next::Resync),
            "never latched until the template changes"
        );
        let current = MachineTemplateStatus {
            node_info: Some(NodeInfo {
                architecture: Some(Architecture::Amd64),
                operating_system: None,
            }),
            ..Default::default()
        };
        let desired = desired_status(&current, &plan);
        assert_eq!(desired.node_info, None);
        let ready = desired
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "FlavorNotFound")
        );
        assert!(ready.message.contains("m1.huge"));
    }

    #[tokio::test]
    async fn a_cloud_failure_keeps_the_last_capacity() {
        let mut actuator = MockMachineTemplateActuator::<Template, ()>::new();
        actuator.expect_capacity().times(1).returning(|_| {
            Err(ActuatorError::transient_message(
                "CloudAPIError",
                "Nova answered 503",
            ))
        });
        let plan = decide(&actuator, scope(), Duration::from_secs(1)).await;
        assert!(matches!(plan.next, Next::Failed(_)));
        let current = MachineTemplateStatus {
            node_info: Some(NodeInfo {
                architecture: Some(Architecture::Amd64),
                operating_system: None,
            }),
            ..Default::default()
        };
        assert_eq!(desired_status(&current, &plan).node_info, current.node_info);
    }

    #[tokio::test]
    async fn a_paused_cluster_is_left_alone() {
        let actuator = MockMachineTemplateActuator::<Template, ()>::new();
        let mut cluster = Cluster::default();
        cluster.spec.paused = Some(true);
        let scope = TemplateScope {
            cluster: Some(Arc::new(cluster)),
            ..scope()
        };
        let plan = decide(&actuator, scope, Duration::from_secs(1)).await;
        assert!(plan.record.capacity.is_none());
        assert!(matches!(plan.next, Next::Requeue(_)));
    }
}
