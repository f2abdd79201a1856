//! The `inmemory-cloud` binary: a separate process whose state a `RemoteCloud` client reads and
//! changes over HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;

use provider_inmemory::cloud::{
    CloudError, Compute, Faults, InstanceRequest, LoadBalancers, RemoteCloud,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

fn request(tag: &str, flavor: &str) -> InstanceRequest {
    InstanceRequest {
        tag: tag.into(),
        flavor: flavor.into(),
        zone: Some("zone-b".into()),
        user_data_len: 12,
        user_data: None,
        etcd_cluster: None,
        client_token: None,
        cluster: None,
    }
}

#[tokio::test]
async fn the_cloud_process_serves_its_api_and_keeps_state_between_clients() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_inmemory-cloud"))
        .args(["--listen", "127.0.0.1:0", "--max-instances", "2"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let url = first
        .strip_prefix("listening on ")
        .expect("announces its address")
        .to_string();

    let cloud = RemoteCloud::new(&url);
    let mut in_cluster = request("capi-a b/1", "small");
    in_cluster.cluster = Some("ns.c 1".into());
    let created = cloud.create_instance(in_cluster).await.unwrap();
    assert_eq!(
        cloud
            .cluster_instances("ns.c 1")
            .await
            .unwrap()
            .iter()
            .map(|i| &i.id)
            .collect::<Vec<_>>(),
        [&created.id],
        "a cluster lists its instances"
    );
    assert!(cloud.cluster_instances("ns.c").await.unwrap().is_empty());
    assert_eq!(
        cloud
            .get_instance(&created.id)
            .await
            .unwrap()
            .as_ref()
            .map(|i| &i.id),
        Some(&created.id)
    );
    assert_eq!(
        cloud.find_instances("capi-a b/1").await.unwrap().len(),
        1,
        "tags survive URL encoding"
    );
    assert_eq!(cloud.get_instance("i-missing").await.unwrap(), None);

    // Errors arrive typed.
    assert_eq!(
        cloud.create_instance(request("x", "huge")).await,
        Err(CloudError::UnknownFlavor {
            flavor: "huge".into()
        })
    );
    cloud.create_instance(request("b", "small")).await.unwrap();
    assert_eq!(
        cloud.create_instance(request("c", "small")).await,
        Err(CloudError::QuotaExceeded { limit: 2 })
    );
    cloud
        .set_faults(&Faults {
            error_rate: 1.0,
            ..Faults::default()
        })
        .await
        .unwrap();
    assert!(matches!(
        cloud.find_instances("b").await,
        Err(CloudError::Injected { .. })
    ));
    cloud.set_faults(&Faults::default()).await.unwrap();

    // Another client (a restarted manager) sees the same state.
    let other = RemoteCloud::new(&url);
    let lb = other.create_load_balancer("capi-cluster-1").await.unwrap();
    let seen = cloud.inspect().await.unwrap();
    assert_eq!(seen.instances.len(), 2);
    assert_eq!(seen.load_balancers, vec![lb]);
    assert_eq!(seen.max_created_per_tag, 1);
    other.delete_instance(&created.id).await.unwrap();
    assert_eq!(cloud.inspect().await.unwrap().instances.len(), 1);

    child.kill().await.unwrap();
    assert!(matches!(
        RemoteCloud::new(&url).find_instances("b").await,
        Err(CloudError::Unreachable { .. })
    ));
}

#[tokio::test]
async fn workload_endpoints_without_a_workload_api_server_are_refused_clearly() {
    let output = Command::new(env!("CARGO_BIN_EXE_inmemory-cloud"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--workload-endpoints",
            "127.0.0.1:0",
        ])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--workload-endpoints needs --workload-kubeconfig"),
        "{stderr}"
    );
}
