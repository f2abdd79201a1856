//! The OpenStack provider against a real OpenStack on loopback (`cargo xtask openstack start`, which
//! `cargo xtask test` runs): Keystone, Nova (fake driver), Glance, Neutron (ML2 `test` driver) and
//! Octavia (noop drivers) from Debian's packages.
//!
//! These tests need `CAPI_RS_OPENSTACK_CLOUDS_YAML` (set by the xtask); without it they fail and say
//! how to start the cloud, rather than pass without testing anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use capi_core::api::{Cluster, Machine};
use capi_core::{
    Actuator, ActuatorError, BootstrapData, BootstrapFormat, ClusterActuator, ClusterScope, Found,
    IdempotencyKey, InstanceState, MachineInstance, MachineScope,
};
use provider_openstack::api::{OpenStackCluster, OpenStackMachine};
use provider_openstack::cloud::{Compute, Images, LoadBalancing, Networking, PortCreate, Session};
use provider_openstack::cluster::OpenStackClusterActuator;
use provider_openstack::machine::{OpenStackMachineActuator, ServerRecord};
use provider_openstack::naming::ClusterNames;

use common::{LocalConnector, session};

#[tokio::test]
async fn a_session_authenticates_and_reaches_every_service() {
    let session = session().await;
    let public = session
        .networks(&[("name".into(), "public".into())])
        .await
        .unwrap();
    assert_eq!(public.len(), 1, "{public:?}");
    assert!(public[0].external);
    let image = session
        .find_images("capi-rs-test-image", &[])
        .await
        .unwrap();
    assert_eq!(image.len(), 1);
    let flavor = session.find_flavor("m1.small").await.unwrap().unwrap();
    assert_eq!(flavor.name, "m1.small");
    // By ID as well as by name.
    let again = session.find_flavor(&flavor.id).await.unwrap().unwrap();
    assert_eq!(again.id, flavor.id);
    assert!(
        session
            .servers_named("no-such-server")
            .await
            .unwrap()
            .is_empty()
    );
}

/// A connector that hands out the local cloud's session, whatever the identityRef says.
fn openstack_cluster(namespace: &str, name: &str, spec: serde_json::Value) -> OpenStackCluster {
    let mut cluster: OpenStackCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackCluster",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec,
    }))
    .unwrap();
    cluster.metadata.uid = Some(format!("uid-{name}"));
    cluster
}

fn cluster_scope(infra: OpenStackCluster) -> ClusterScope<OpenStackCluster> {
    let mut cluster = Cluster::default();
    cluster.metadata.name = infra.metadata.name.clone();
    cluster.metadata.namespace = infra.metadata.namespace.clone();
    ClusterScope {
        cluster: Arc::new(cluster),
        infra_cluster: Arc::new(infra),
    }
}

/// Calls `step` until it stops asking to be requeued (as the loop would), at most `limit`.
async fn until_done<T, F, Fut>(limit: Duration, mut step: F) -> Result<T, ActuatorError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ActuatorError>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match step().await {
            Err(ActuatorError::RequeueAfter { after, .. }) if Instant::now() < deadline => {
                tokio::time::sleep(after.min(Duration::from_secs(1))).await;
            }
            other => return other,
        }
    }
}

/// What Neutron and Octavia hold that carries `tag` or the cluster's names.
async fn leftovers(session: &Session, names: &ClusterNames) -> Vec<String> {
    let mut left = Vec::new();
    let tag = vec![("tags".to_string(), names.tag())];
    for n in session.networks(&tag).await.unwrap() {
        left.push(format!("network {}", n.name));
    }
    for s in session.subnets(&tag).await.unwrap() {
        left.push(format!("subnet {}", s.name));
    }
    for r in session.routers(&tag).await.unwrap() {
        left.push(format!("router {}", r.name));
    }
    for g in session.security_groups(&tag).await.unwrap() {
        left.push(format!("security group {}", g.name));
    }
    for p in session.ports(&tag).await.unwrap() {
        left.push(format!("port {}", p.name));
    }
    for lb in session
        .load_balancers_named(&names.load_balancer())
        .await
        .unwrap()
    {
        left.push(format!(
            "load balancer {} {}",
            lb.name, lb.provisioning_status
        ));
    }
    for s in session.servers_tagged(&names.tag()).await.unwrap() {
        left.push(format!("server {}", s.name));
    }
    left
}

/// Managed network, subnet, router, security groups and an Octavia load balancer (listener, pool,
/// monitor) come up in order; a second reconcile changes nothing; deletion leaves nothing in
/// Neutron or Octavia. The API server floating IP is off here: the noop Octavia's VIP port does
/// not exist in Neutron (the floating IP path is covered by the mock tests in `cluster.rs`).
#[tokio::test]
async fn cluster_infrastructure_is_created_in_order_and_deleted_without_leftovers() {
    let session = session().await;
    let actuator = OpenStackClusterActuator::new(Arc::new(LocalConnector(session.clone())));
    let scope = cluster_scope(openstack_cluster(
        "infra-test",
        "alpha",
        serde_json::json!({
            "identityRef": {"name": "local-cloud", "cloudName": "local"},
            "managedSubnets": [{"cidr": "10.61.0.0/24", "dnsNameservers": ["10.61.0.2"]}],
            "managedSecurityGroups": {"allowAllInClusterTraffic": false},
            "apiServer": {"enableFloatingIP": false, "managedLoadBalancer": {"enabled": true}},
            "controlPlaneAvailabilityZones": ["nova"],
        }),
    ));
    let names = ClusterNames::new("infra-test", "alpha");
    let infra = until_done(Duration::from_secs(120), || actuator.reconcile(&scope))
        .await
        .unwrap();
    assert!(infra.provisioned);
    let endpoint = infra.control_plane_endpoint.unwrap();
    assert_eq!(endpoint.port, 6443);
    assert_eq!(infra.failure_domains[0].name, "nova");

    let network = session
        .networks(&[("name".into(), names.network())])
        .await
        .unwrap();
    assert_eq!(network.len(), 1);
    assert!(network[0].tags.contains(&names.tag()));
    let router = session
        .routers(&[("name".into(), names.router())])
        .await
        .unwrap();
    assert_eq!(router.len(), 1);
    let groups = session
        .security_groups(&[("tags".into(), names.tag())])
        .await
        .unwrap();
    assert_eq!(groups.len(), 2);
    let cp = groups
        .iter()
        .find(|g| g.name == names.control_plane_group())
        .unwrap();
    assert!(
        cp.security_group_rules
            .iter()
            .any(|r| r.port_range_min == Some(6443))
    );
    assert!(
        cp.security_group_rules
            .iter()
            .any(|r| r.port_range_min == Some(2379))
    );
    let lb = session
        .load_balancers_named(&names.load_balancer())
        .await
        .unwrap();
    assert_eq!(lb.len(), 1);
    assert!(lb[0].is_active());
    // The endpoint is the VIP (the noop network driver makes one up outside the subnet).
    assert_eq!(endpoint.host, lb[0].vip_address);
    assert_eq!(session.listeners(&lb[0].id).await.unwrap().len(), 1);
    let pools = session.pools(&lb[0].id).await.unwrap();
    assert_eq!(pools.len(), 1);
    assert_eq!(session.monitors(&pools[0].id).await.unwrap().len(), 1);

    // Idempotent: a second pass finds everything and creates nothing.
    let again = actuator.reconcile(&scope).await.unwrap();
    assert_eq!(again.control_plane_endpoint.unwrap(), endpoint);
    assert_eq!(
        session
            .security_groups(&[("tags".into(), names.tag())])
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        session
            .load_balancers_named(&names.load_balancer())
            .await
            .unwrap()
            .len(),
        1
    );

    // A port someone left on the cluster network does not block the delete.
    session
        .create_port(&PortCreate {
            name: "stray".into(),
            network_id: network[0].id.clone(),
            ..PortCreate::default()
        })
        .await
        .unwrap();
    until_done(Duration::from_secs(120), || actuator.delete(&scope))
        .await
        .unwrap();
    assert_eq!(leftovers(&session, &names).await, Vec::<String>::new());
    assert!(
        session
            .networks(&[("name".into(), names.network())])
            .await
            .unwrap()
            .is_empty()
    );
}

fn machine_scope(
    infra_cluster: &OpenStackCluster,
    cluster: &str,
    name: &str,
    control_plane: bool,
    spec: serde_json::Value,
) -> MachineScope<OpenStackMachine, OpenStackCluster> {
    let namespace = infra_cluster.metadata.namespace.as_deref().unwrap();
    let mut labels = serde_json::json!({ "cluster.x-k8s.io/cluster-name": cluster });
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = "".into();
    }
    let infra: OpenStackMachine = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackMachine",
        "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec,
    }))
    .unwrap();
    let mut machine = Machine::default();
    machine.metadata.name = Some(name.into());
    machine.metadata.uid = Some(format!("{name}-uid-{}", std::process::id()));
    MachineScope {
        cluster: Arc::new(Cluster::default()),
        infra_cluster: Some(Arc::new(infra_cluster.clone())),
        idempotency_key: IdempotencyKey::for_machine(&machine).unwrap(),
        machine: Arc::new(machine),
        infra_machine: Arc::new(infra),
    }
}

/// The bootstrap data every machine boots with.
fn bootstrap() -> BootstrapData {
    BootstrapData::new(
        BootstrapFormat::CloudConfig,
        b"#cloud-config\nruncmd: [kubeadm join]\n".to_vec(),
    )
}

/// Calls `exists` until it finds the machine's server running (as the loop would).
async fn until_running(
    actuator: &OpenStackMachineActuator,
    scope: &MachineScope<OpenStackMachine, OpenStackCluster>,
) -> Found<ServerRecord> {
    until_done(Duration::from_secs(120), || async {
        let found = actuator.exists(scope).await?.unwrap();
        match &found.reported.state {
            InstanceState::Running => Ok(found),
            InstanceState::Provisioning => Err(ActuatorError::requeue_after(
                Duration::from_secs(1),
                "Booting",
                "BUILD",
            )),
            InstanceState::Failed { message, .. } => panic!("server failed: {message}"),
        }
    })
    .await
    .unwrap()
}

/// With the provider ID recorded, as the loop does after `create`.
fn recorded(
    scope: &MachineScope<OpenStackMachine, OpenStackCluster>,
    instance: &MachineInstance,
) -> MachineScope<OpenStackMachine, OpenStackCluster> {
    let mut infra = (*scope.infra_machine).clone();
    infra.spec.provider_id = Some(instance.provider_id.clone());
    MachineScope {
        infra_machine: Arc::new(infra),
        ..scope.clone()
    }
}

/// Three control-plane machines join the Octavia pool once ACTIVE; a worker gets its allowed
/// address pairs; a create retried after a "crash" finds the first server; deleting a machine
/// removes its pool membership, server and ports; the cluster then deletes without leftovers.
#[tokio::test]
async fn machines_boot_join_the_pool_and_leave_nothing_behind() {
    let session = session().await;
    let connector = Arc::new(LocalConnector(session.clone()));
    let infra_cluster = openstack_cluster(
        "machine-test",
        "beta",
        serde_json::json!({
            "identityRef": {"name": "local-cloud", "cloudName": "local"},
            "managedSubnets": [{"cidr": "10.62.0.0/24"}],
            "managedSecurityGroups": {"allowAllInClusterTraffic": true},
            "apiServer": {"enableFloatingIP": false, "managedLoadBalancer": {"enabled": true}},
        }),
    );
    let names = ClusterNames::new("machine-test", "beta");
    let cluster_actuator = OpenStackClusterActuator::new(connector.clone());
    let cluster_scope = cluster_scope(infra_cluster.clone());
    until_done(Duration::from_secs(120), || {
        cluster_actuator.reconcile(&cluster_scope)
    })
    .await
    .unwrap();
    let actuator = OpenStackMachineActuator::new(connector);
    let bootstrap = bootstrap();
    let spec = serde_json::json!({
        "flavor": {"filter": {"name": "m1.small"}},
        "image": {"filter": {"name": "capi-rs-test-image"}},
    });

    // Control plane: create, wait for ACTIVE, join the pool (as the loop would drive it).
    let mut control_plane = Vec::new();
    for i in 0..3 {
        let scope = machine_scope(
            &infra_cluster,
            "beta",
            &format!("beta-cp-{i}"),
            true,
            spec.clone(),
        );
        assert!(actuator.exists(&scope).await.unwrap().is_none());
        let created = actuator.create(&scope, &bootstrap).await.unwrap();
        assert!(created.provider_id.starts_with("openstack:///"));
        control_plane.push(recorded(&scope, &created));
    }
    for scope in &control_plane {
        let running = until_running(&actuator, scope).await;
        assert!(
            running
                .reported
                .addresses
                .iter()
                .any(|a| a.address.starts_with("10.62.0.")),
            "{running:?}"
        );
        until_done(Duration::from_secs(60), || {
            actuator.update(scope, running.clone())
        })
        .await
        .unwrap();
    }
    let lb = &session
        .load_balancers_named(&names.load_balancer())
        .await
        .unwrap()[0];
    let pool = &session.pools(&lb.id).await.unwrap()[0];
    let wait_members = |n: usize| {
        let session = session.clone();
        let pool = pool.id.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let members = session.members(&pool).await.unwrap();
                if members.len() == n || Instant::now() > deadline {
                    return members;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let mut members: Vec<String> = wait_members(3).await.into_iter().map(|m| m.name).collect();
    members.sort();
    assert_eq!(members, ["beta-cp-0", "beta-cp-1", "beta-cp-2"]);

    // A worker with allowed address pairs (its pod CIDR routed through Neutron, no overlay).
    let worker = machine_scope(
        &infra_cluster,
        "beta",
        "beta-md-0",
        false,
        serde_json::json!({
            "flavor": {"filter": {"name": "m1.small"}},
            "image": {"filter": {"name": "capi-rs-test-image"}},
            "ports": [{"allowedAddressPairs": [{"ipAddress": "192.168.7.0/24"}]}],
        }),
    );
    let first = actuator.create(&worker, &bootstrap).await.unwrap();
    // The controller crashed before recording the provider ID: the retried create finds the same
    // server instead of booting a second one.
    let retried = actuator.create(&worker, &bootstrap).await.unwrap();
    assert_eq!(first.provider_id, retried.provider_id);
    assert_eq!(session.servers_named("beta-md-0").await.unwrap().len(), 1);
    let ports = session
        .ports(&[("name".into(), "beta-md-0-0".into())])
        .await
        .unwrap();
    assert_eq!(ports.len(), 1);

    // Another team's machine (its own namespace and cluster) names this server in
    // spec.providerID: never adopted, updated or deleted.
    let elsewhere = openstack_cluster(
        "team-b",
        "beta",
        serde_json::json!({"identityRef": {"name": "local-cloud", "cloudName": "local"}}),
    );
    let hijack = machine_scope(&elsewhere, "beta", "team-b-md-0", false, spec.clone());
    let hijack = recorded(&hijack, &first);
    let refused = actuator.exists(&hijack).await.unwrap_err();
    assert_eq!(refused.reason(), "ServerNotOwned", "{refused}");
    let refused = actuator.delete(&hijack).await.unwrap_err();
    assert_eq!(refused.reason(), "ServerNotOwned", "{refused}");
    // Not even under this machine's idempotency key, which the annotation a tenant writes may
    // name: the server carries another cluster's tag.
    let mut forged = recorded(
        &machine_scope(&elsewhere, "beta", "team-b-md-0", false, spec.clone()),
        &first,
    );
    forged.idempotency_key = worker.idempotency_key.clone();
    for refused in [
        actuator.exists(&forged).await.map(|_| ()).unwrap_err(),
        actuator.delete(&forged).await.unwrap_err(),
    ] {
        assert_eq!(refused.reason(), "ServerNotOwned", "{refused}");
        assert!(refused.to_string().contains("cluster's tag"), "{refused}");
    }
    assert_eq!(
        session.servers_named("beta-md-0").await.unwrap().len(),
        1,
        "the server of the other team is still there"
    );
    assert_eq!(
        ports[0].allowed_address_pairs[0].ip_address,
        "192.168.7.0/24"
    );
    let worker_group = session
        .security_groups(&[("name".into(), names.worker_group())])
        .await
        .unwrap();
    assert_eq!(ports[0].security_groups, vec![worker_group[0].id.clone()]);

    // Immutable changes are reported, never applied: none for the spec it was made from; another
    // flavor and one more port for an edited spec, and the new port is not created.
    let worker = recorded(&worker, &first);
    let first = until_running(&actuator, &worker).await;
    let unchanged = until_done(Duration::from_secs(60), || {
        actuator.update(&worker, first.clone())
    })
    .await
    .unwrap();
    assert_eq!(unchanged.immutable_changes, vec![]);
    let mut edited = (*worker.infra_machine).clone();
    edited.spec.flavor =
        serde_json::from_value(serde_json::json!({"filter": {"name": "m1.medium"}})).unwrap();
    edited
        .spec
        .ports
        .push(serde_json::from_value(serde_json::json!({"nameSuffix": "extra"})).unwrap());
    let edited = MachineScope {
        infra_machine: Arc::new(edited),
        ..worker.clone()
    };
    let outcome = until_done(Duration::from_secs(60), || {
        actuator.update(&edited, first.clone())
    })
    .await
    .unwrap();
    let changed: Vec<(&str, &str, &str)> = outcome
        .immutable_changes
        .iter()
        .map(|c| (c.field.as_str(), c.current.as_str(), c.desired.as_str()))
        .collect();
    assert_eq!(
        changed,
        [
            ("spec.flavor", "m1.small", "m1.medium"),
            ("spec.ports", "beta-md-0-0", "beta-md-0-0,beta-md-0-extra"),
        ]
    );
    assert!(
        session
            .ports(&[("name".into(), "beta-md-0-extra".into())])
            .await
            .unwrap()
            .is_empty()
    );

    // Deleting the worker removes its server and its ports.
    until_done(Duration::from_secs(120), || actuator.delete(&worker))
        .await
        .unwrap();
    assert!(session.servers_named("beta-md-0").await.unwrap().is_empty());
    assert!(
        session
            .ports(&[("name".into(), "beta-md-0-0".into())])
            .await
            .unwrap()
            .is_empty()
    );

    // A control-plane machine leaves the pool before its server goes.
    until_done(Duration::from_secs(120), || {
        actuator.delete(&control_plane[0])
    })
    .await
    .unwrap();
    let mut members: Vec<String> = wait_members(2).await.into_iter().map(|m| m.name).collect();
    members.sort();
    assert_eq!(members, ["beta-cp-1", "beta-cp-2"]);

    // The cluster waits for its machines, then goes without leftovers.
    let waiting = cluster_actuator.delete(&cluster_scope).await.unwrap_err();
    assert!(waiting.message().contains("beta-cp-1"), "{waiting}");
    for scope in &control_plane[1..] {
        until_done(Duration::from_secs(120), || actuator.delete(scope))
            .await
            .unwrap();
    }
    until_done(Duration::from_secs(120), || {
        cluster_actuator.delete(&cluster_scope)
    })
    .await
    .unwrap();
    assert_eq!(leftovers(&session, &names).await, Vec::<String>::new());
}
