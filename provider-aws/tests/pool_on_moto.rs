//! The `AWSMachinePool` actuator on its SDK adapters against real `moto_server` (no proxy): the
//! conformance suite's pool rules, and one pool's whole life — an Auto Scaling group created
//! once, grown, shrunk by exactly the instances named, rolled to a new instance type through a
//! launch template of its own (old instances keep theirs until removed), a rotated join token
//! reaching new instances through a template of its own without outdating any, and deletion
//! leaving no group,
//! instance, template or secret. moto changes states instantly, so nothing here waits; what it
//! does differently from AWS is pinned in `moto_behaviour.rs`.
#![cfg(feature = "sdk")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_core::api::{Cluster, MachinePool};
use capi_core::{
    BootstrapData, BootstrapFormat, Found, IdempotencyKey, ModelRevision, PoolActuator, PoolScope,
    PoolSize, ScaleSetReport,
};
use capi_testing::conformance::{CloudInventory, PoolSuite, Settings};
use common::proxy::{Chaos, FaultProxy};
use common::world::{World, world};
use common::{FixedConnector, Moto, fresh_account, provider_clients};
use provider_aws::api::{AWSCluster, AWSMachinePool};
use provider_aws::pool::AwsPoolActuator;

const CLUSTER: &str = "ns/demo";

/// Everything of the cluster in the test's moto account: live instances, groups, launch
/// templates and bootstrap data secrets.
struct Inventory(Moto);

#[async_trait]
impl CloudInventory for Inventory {
    async fn instances(&self) -> Result<BTreeSet<String>, String> {
        common::census::live_instances(&self.0.ec2, CLUSTER).await
    }

    async fn resources(&self) -> Result<BTreeSet<String>, String> {
        let mut all: BTreeSet<String> = self
            .instances()
            .await?
            .into_iter()
            .map(|id| format!("instance/{id}"))
            .collect();
        let groups = self
            .0
            .autoscaling
            .describe_auto_scaling_groups()
            .send()
            .await
            .map_err(|e| e.to_string())?;
        all.extend(
            groups
                .auto_scaling_groups()
                .iter()
                .filter_map(|g| g.auto_scaling_group_name())
                .map(|name| format!("asg/{name}")),
        );
        let templates = self
            .0
            .ec2
            .describe_launch_templates()
            .send()
            .await
            .map_err(|e| e.to_string())?;
        all.extend(
            templates
                .launch_templates()
                .iter()
                .filter_map(|t| t.launch_template_id())
                .map(|id| format!("lt/{id}")),
        );
        let secrets = self
            .0
            .secrets
            .list_secrets()
            .send()
            .await
            .map_err(|e| e.to_string())?;
        all.extend(
            secrets
                .secret_list()
                .iter()
                .filter_map(|s| s.name())
                .map(|name| format!("secret/{name}")),
        );
        Ok(all)
    }
}

fn infra_pool(image: &str, instance_type: &str) -> AWSMachinePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "AWSMachinePool",
        "metadata": {"name": "workers", "namespace": "ns",
                     "labels": {"cluster.x-k8s.io/cluster-name": "demo"}},
        "spec": {"minSize": 0, "maxSize": 10,
                 "additionalTags": {"cost-center": "42"},
                 "awsLaunchTemplate": {"instanceType": instance_type, "ami": {"id": image}}},
    }))
    .unwrap()
}

fn cluster() -> Cluster {
    let mut cluster = Cluster::default();
    cluster.metadata.name = Some("demo".into());
    cluster.metadata.namespace = Some("ns".into());
    cluster
}

#[tokio::test]
async fn aws_pools_conform_on_moto() {
    let world = world(Moto::new()).await;
    let image = world.moto.any_image().await;
    let actuator = Arc::new(AwsPoolActuator::new(Arc::new(FixedConnector(
        provider_clients(&world.moto),
    ))));
    let inventory = Arc::new(Inventory(Moto::in_account(&world.moto.account)));
    let report = PoolSuite::new(
        actuator,
        inventory.clone(),
        infra_pool(&image, "t3.medium"),
        world.cluster.clone(),
    )
    .cluster(cluster())
    .settings(Settings {
        deadline: Duration::from_secs(120),
        max_wait: Duration::from_millis(200),
        crash_points: 8,
        poll_gap: Duration::from_millis(20),
        restart_delay: Duration::from_millis(50),
    })
    .run()
    .await;
    report.assert_conforms();
    for note in &report.notes {
        println!("conformance note: {note}");
    }
    assert!(report.checked.len() >= 10, "{:?}", report.checked);
    assert!(
        inventory.resources().await.unwrap().is_empty(),
        "nothing is left: {:?}",
        inventory.resources().await
    );
}

/// One pool's scopes, as the pool loop would hand them.
struct Pool<'a> {
    world: &'a World,
    actuator: AwsPoolActuator,
    machine_pool: Arc<MachinePool>,
    infra: AWSMachinePool,
}

impl Pool<'_> {
    fn scope(
        &self,
        capacity: u32,
        remove: &[&str],
        revision: &str,
    ) -> PoolScope<AWSMachinePool, AWSCluster> {
        PoolScope {
            cluster: Arc::new(cluster()),
            infra_cluster: Some(Arc::new(self.world.cluster.clone())),
            machine_pool: Arc::clone(&self.machine_pool),
            infra_pool: Arc::new(self.infra.clone()),
            idempotency_key: IdempotencyKey::for_machine_pool(&self.machine_pool).unwrap(),
            size: PoolSize {
                capacity: Some(capacity),
                remove: remove.iter().map(|id| (*id).to_string()).collect(),
            },
            revision: ModelRevision::new(revision),
        }
    }

    /// One pass of the loop: `exists`, then `update` or `create`; records the provider ID and
    /// the provider's status fields.
    async fn pass(
        &mut self,
        scope: &PoolScope<AWSMachinePool, AWSCluster>,
        bootstrap: &BootstrapData,
    ) -> ScaleSetReport {
        let report = match self.actuator.exists(scope).await.unwrap() {
            Some(found) => {
                let Found { reported, instance } = found;
                self.actuator
                    .update(
                        scope,
                        Found::with(reported, instance),
                        Some(bootstrap.clone()),
                    )
                    .await
                    .unwrap()
            }
            None => self.actuator.create(scope, bootstrap).await.unwrap(),
        };
        self.infra.spec.provider_id = Some(report.provider_id.clone());
        let mut infra = serde_json::to_value(&self.infra).unwrap();
        for (field, value) in report.provider_status.fields() {
            infra["status"][field] = value.clone();
        }
        self.infra = serde_json::from_value(infra).unwrap();
        report
    }

    async fn template_count(&self) -> usize {
        self.world
            .moto
            .ec2
            .describe_launch_templates()
            .send()
            .await
            .unwrap()
            .launch_templates()
            .len()
    }

    async fn secret_values(&self) -> Vec<Vec<u8>> {
        let listed = self.world.moto.secrets.list_secrets().send().await.unwrap();
        let mut values = Vec::new();
        for secret in listed.secret_list() {
            let value = self
                .world
                .moto
                .secrets
                .get_secret_value()
                .secret_id(secret.name().unwrap())
                .send()
                .await
                .unwrap();
            values.push(value.secret_binary().unwrap().as_ref().to_vec());
        }
        values
    }
}

/// A pool of `workers` in `world`, its `MachinePool` of UID `uid`.
fn pool<'a>(world: &'a World, image: &str, uid: &str) -> Pool<'a> {
    let mut machine_pool = MachinePool::default();
    machine_pool.metadata.uid = Some(uid.into());
    machine_pool.metadata.name = Some("workers".into());
    machine_pool.spec.cluster_name = "demo".into();
    machine_pool.spec.template.spec.version = Some("v1.33.1".into());
    Pool {
        world,
        actuator: AwsPoolActuator::new(Arc::new(FixedConnector(provider_clients(&world.moto)))),
        machine_pool: Arc::new(machine_pool),
        infra: infra_pool(image, "t3.medium"),
    }
}

fn revisions(report: &ScaleSetReport) -> Vec<String> {
    let mut revisions: Vec<String> = report
        .instances
        .iter()
        .map(|i| {
            i.revision
                .as_ref()
                .map(|r| r.to_string())
                .unwrap_or_default()
        })
        .collect();
    revisions.sort();
    revisions
}

fn gunzip(data: &[u8]) -> String {
    use std::io::Read;
    let mut text = String::new();
    flate2::read::GzDecoder::new(data)
        .read_to_string(&mut text)
        .unwrap();
    text
}

#[tokio::test]
async fn a_pool_scales_rolls_rotates_its_token_and_leaves_nothing() {
    let world = world(Moto::new()).await;
    let image = world.moto.any_image().await;
    let mut pool = pool(&world, &image, "pool-uid-life");
    let token = |t: &str| {
        BootstrapData::new(
            BootstrapFormat::CloudConfig,
            format!("#cloud-config\nruncmd:\n- kubeadm join --token {t}\n"),
        )
    };

    // Created once at one instance; a second pass finds it.
    let created = pool
        .pass(&pool.scope(1, &[], "r-1"), &token("aaaaaa.1"))
        .await;
    assert!(
        created.provider_id.contains(":autoScalingGroupName/capi-"),
        "{}",
        created.provider_id
    );
    let again = pool
        .pass(&pool.scope(1, &[], "r-1"), &token("aaaaaa.1"))
        .await;
    assert_eq!(again.provider_id, created.provider_id);
    assert_eq!(again.instances.len(), 1);
    let groups = world
        .moto
        .autoscaling
        .describe_auto_scaling_groups()
        .send()
        .await
        .unwrap();
    assert_eq!(groups.auto_scaling_groups().len(), 1, "one group per pool");
    let group = &groups.auto_scaling_groups()[0];
    let suspended: BTreeSet<&str> = group
        .suspended_processes()
        .iter()
        .filter_map(|p| p.process_name())
        .collect();
    assert_eq!(
        suspended,
        BTreeSet::from(["AZRebalance", "ReplaceUnhealthy"])
    );

    // Grown to five, every instance tagged as the pool's and of revision r-1.
    let grown = pool
        .pass(&pool.scope(5, &[], "r-1"), &token("aaaaaa.1"))
        .await;
    assert_eq!(grown.instances.len(), 5);
    assert_eq!(revisions(&grown), vec!["r-1"; 5]);
    let key = IdempotencyKey::for_machine_pool(&pool.machine_pool)
        .unwrap()
        .to_string();
    let tagged = world.instances_of(&key).await;
    assert_eq!(tagged.len(), 5);
    for instance in &tagged {
        let tags: std::collections::BTreeMap<&str, &str> = instance
            .tags()
            .iter()
            .map(|t| (t.key().unwrap(), t.value().unwrap()))
            .collect();
        for (k, v) in [
            ("cost-center", "42"),
            ("team", "a"),
            ("MachinePoolName", "ns/workers"),
            ("capi-rs.dev/cluster", "ns/demo"),
            ("kubernetes.io/cluster/demo", "owned"),
            ("capi-rs.dev/model-revision", "r-1"),
        ] {
            assert_eq!(tags.get(k), Some(&v), "tag {k}: {tags:?}");
        }
    }

    // Shrunk by exactly the three named instances.
    let named: Vec<String> = grown.provider_ids()[..3]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let named_refs: Vec<&str> = named.iter().map(String::as_str).collect();
    let shrunk = pool
        .pass(&pool.scope(2, &named_refs, "r-1"), &token("aaaaaa.1"))
        .await;
    let left: BTreeSet<&str> = shrunk.provider_ids().into_iter().collect();
    let kept: BTreeSet<&str> = grown.provider_ids()[3..].iter().copied().collect();
    assert_eq!(left, kept, "only the named instances left");
    assert_eq!(shrunk.capacity, 2);

    // A rotated token: a template of the same revision with a secret of its own holding the
    // new data, the running instances not outdated; the old template stays while an instance
    // launched from it lately may still be fetching its data.
    assert_eq!(pool.template_count().await, 1);
    let rotated = pool
        .pass(&pool.scope(2, &[], "r-1"), &token("bbbbbb.2"))
        .await;
    assert_eq!(revisions(&rotated), vec!["r-1"; 2]);
    assert_eq!(pool.template_count().await, 2);
    let values: Vec<String> = pool
        .secret_values()
        .await
        .iter()
        .map(|v| gunzip(v))
        .collect();
    assert_eq!(values.len(), 2);
    assert!(values.iter().any(|v| v.contains("bbbbbb.2")), "{values:?}");

    // Rolled to a new instance type: a surge instance of r-2 from a template of its own, then
    // the old ones removed; the r-1 templates and their secrets go once no instance needs them.
    pool.infra = infra_pool(&image, "t3.large");
    let surged = pool
        .pass(&pool.scope(3, &[], "r-2"), &token("bbbbbb.2"))
        .await;
    assert_eq!(revisions(&surged), ["r-1", "r-1", "r-2"]);
    assert_eq!(
        pool.template_count().await,
        2,
        "the r-1 template is still in use"
    );
    let old: Vec<String> = surged
        .instances
        .iter()
        .filter(|i| i.revision.as_ref().map(|r| r.as_str()) == Some("r-1"))
        .map(|i| i.provider_id.clone())
        .collect();
    let old_refs: Vec<&str> = old.iter().map(String::as_str).collect();
    let rolled = pool
        .pass(&pool.scope(2, &old_refs, "r-2"), &token("bbbbbb.2"))
        .await;
    assert_eq!(revisions(&rolled), ["r-2", "r-2"]);
    let new_types: BTreeSet<String> = world
        .instances_of(&key)
        .await
        .iter()
        .filter_map(|i| i.instance_type().map(|t| t.as_str().to_string()))
        .collect();
    assert_eq!(new_types, BTreeSet::from(["t3.large".to_string()]));
    assert_eq!(pool.template_count().await, 1, "the r-1 templates are gone");
    assert_eq!(pool.secret_values().await.len(), 1, "and its secret");

    // Deleted: nothing of the pool is left.
    let scope = pool.scope(0, &[], "r-2");
    let mut attempts = 0;
    while let Err(error) = pool.actuator.delete(&scope).await {
        attempts += 1;
        assert!(attempts < 10, "still deleting: {error}");
    }
    let inventory = Inventory(Moto::in_account(&world.moto.account));
    assert!(inventory.instances().await.unwrap().is_empty());
    let left: Vec<String> = inventory
        .resources()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| !r.starts_with("instance/"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(
        pool.actuator
            .exists(&scope)
            .await
            .unwrap()
            .map(|f| f.reported),
        None
    );
}

/// EC2 describes an instance only a while after Auto Scaling launched it (eventual consistency,
/// here the proxy's lag). Until then the instance is of the revision of the template Auto Scaling
/// says it was launched from, as the pool's status records it — not of an unknown revision,
/// which the loop would take for an outdated instance and surge to replace.
#[tokio::test]
async fn an_instance_ec2_does_not_describe_yet_is_of_its_templates_revision() {
    let proxy = FaultProxy::start().await;
    let world = world(Moto::at(&proxy.url, &fresh_account())).await;
    let image = world.moto.any_image().await;
    let mut pool = pool(&world, &image, "pool-uid-lag");
    let bootstrap = common::world::bootstrap();
    pool.pass(&pool.scope(1, &[], "r-1"), &bootstrap).await;

    // From now on EC2 does not describe an instance it has not shown before.
    proxy.faults.lock().unwrap().chaos = Some(Chaos::new(1, 0.0, 0.0, Duration::from_secs(3600)));
    let grown = pool.pass(&pool.scope(4, &[], "r-1"), &bootstrap).await;
    assert_eq!(grown.instances.len(), 4);
    assert_eq!(revisions(&grown), vec!["r-1"; 4]);
    let found = pool
        .actuator
        .exists(&pool.scope(4, &[], "r-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(revisions(&found.reported), vec!["r-1"; 4]);
    let hidden = proxy
        .faults
        .lock()
        .unwrap()
        .chaos
        .as_ref()
        .map(|c| c.injected.hidden_instances);
    assert!(
        hidden.is_some_and(|n| n > 0),
        "EC2 described every instance: {hidden:?}"
    );
}
