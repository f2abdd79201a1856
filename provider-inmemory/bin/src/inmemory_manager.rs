//! `inmemory-manager`: the in-memory provider's controllers in a `Manager`, talking to the cluster
//! of the current kubeconfig and to a simulated cloud — in this process, or the `inmemory-cloud`
//! process given by `--cloud-url` (whose state survives this process being killed).
//!
//! The flags every manager shares are [`capi_provider::ManagerArgs`]; `--with-bootstrap`,
//! `--with-core` and `--with-control-plane` together are standalone mode, with no Go controller
//! needed. `--help` lists all.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use capi_actuator::InfrastructureControllers;
use capi_provider::support::rbac;
use capi_provider::{ManagerArgs, ProviderManager};
use clap::Parser;
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::{InMemoryCluster, InMemoryMachinePool, InMemoryMachineTemplate};
use provider_inmemory::cloud::{
    Compute, EtcdClusters, LoadBalancers, RemoteCloud, ScaleSets, SimulatedCloud,
};
use provider_inmemory::etcd::SimulatedEtcdAccess;
use provider_inmemory::pool::InMemoryPoolActuator;

/// jemalloc rather than the system allocator: a manager's heap is many small, long-lived objects
/// (cached Kubernetes objects) replaced at every change from several threads, where glibc's
/// per-thread arenas keep freed memory that jemalloc returns (`cargo xtask bench one-cluster`
/// reports the manager's memory).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The in-memory provider's manager.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    manager: ManagerArgs,
    /// The `inmemory-cloud` process to use (default: a simulated cloud in this process).
    #[arg(long, value_name = "URL")]
    cloud_url: Option<String>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    type Cloud = (
        Arc<dyn Compute>,
        Arc<dyn LoadBalancers>,
        Arc<dyn EtcdClusters>,
        Arc<dyn ScaleSets>,
    );
    let (compute, load_balancers, etcd, scale_sets): Cloud = match args.cloud_url {
        Some(url) => {
            let remote = Arc::new(RemoteCloud::new(url));
            (remote.clone(), remote.clone(), remote.clone(), remote)
        }
        None => {
            let local = Arc::new(SimulatedCloud::default());
            (local.clone(), local.clone(), local.clone(), local)
        }
    };
    let pools = Arc::new(InMemoryPoolActuator::new(
        scale_sets,
        Duration::from_secs(2),
    ));
    let actuator = Arc::new(InMemoryActuator::new(
        compute,
        load_balancers,
        Duration::from_secs(2),
    ));
    let group = provider_inmemory::api::GROUP;
    let mut rules = rbac::provider(
        group,
        "inmemorymachines",
        "inmemoryclusters",
        "inmemorymachinetemplates",
    );
    rules.extend(provider_inmemory::api::pool_rbac());
    ProviderManager::new("in-memory", args.manager)
        .manifests(provider_inmemory::api::crds(), rules)
        .etcd_access(Arc::new(SimulatedEtcdAccess::new(etcd)))
        .run(|manager| {
            manager.add_machine_reconciler(actuator.clone());
            manager.add_machine_template_reconciler::<InMemoryMachineTemplate, InMemoryCluster>(
                actuator.clone(),
            );
            manager.add_machine_pool_reconciler::<InMemoryMachinePool, InMemoryCluster, _>(pools);
            manager.add_cluster_reconciler::<InMemoryCluster>(actuator);
        })
        .await?;
    Ok(())
}
