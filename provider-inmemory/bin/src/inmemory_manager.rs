//! `inmemory-manager`: the in-memory provider's controllers in a `Manager`, talking to the cluster
//! of the current kubeconfig and to a simulated cloud — in this process, or the `inmemory-cloud`
//! process given by `--cloud-url` (whose state survives this process being killed).
//!
//! ```text
//! inmemory-manager [--cloud-url http://127.0.0.1:PORT] [--http-addr 0.0.0.0:8080] [--namespace NS]
//!                  [--label-selector SEL] [--concurrency N] [--qps F] [--burst N]
//!                  [--leader-elect NAMESPACE/NAME] [--log-format text|json] [--with-bootstrap]
//!                  [--with-core]
//! ```
//!
//! `--with-bootstrap` also runs the kubeadm bootstrap reconciler, `--with-core` the core Cluster
//! API controllers (Cluster, Machine, MachineSet, MachineDeployment, MachineHealthCheck): both
//! together are standalone mode, with no Go controller needed.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use capi_actuator::manager::Manager;
use capi_actuator::manager::flags::{FlagError, ManagerFlags};
use capi_actuator::telemetry::init_logging;
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::{InMemoryCluster, InMemoryMachine};
use provider_inmemory::cloud::{Compute, LoadBalancers, RemoteCloud, SimulatedCloud};

struct Args {
    flags: ManagerFlags,
    cloud_url: Option<String>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args> {
    let mut flags = ManagerFlags::default();
    let mut cloud_url = None;
    while let Some(flag) = args.next() {
        if flags.accept(&flag, &mut args)? {
            continue;
        }
        match flag.as_str() {
            "--cloud-url" => cloud_url = Some(args.next().context("--cloud-url needs a value")?),
            _ => return Err(FlagError::Unknown(flag).into()),
        }
    }
    Ok(Args { flags, cloud_url })
}

#[tokio::main]
async fn main() -> Result<()> {
    let Args {
        flags:
            ManagerFlags {
                config,
                log_format,
                with_bootstrap,
                with_core,
            },
        cloud_url,
    } = parse(std::env::args().skip(1))?;
    init_logging(log_format).map_err(|e| anyhow::anyhow!(e))?;
    let (compute, load_balancers): (Arc<dyn Compute>, Arc<dyn LoadBalancers>) = match cloud_url {
        Some(url) => {
            let remote = Arc::new(RemoteCloud::new(url));
            (remote.clone(), remote)
        }
        None => {
            let local = Arc::new(SimulatedCloud::default());
            (local.clone(), local)
        }
    };
    let actuator = Arc::new(InMemoryActuator::new(
        compute,
        load_balancers,
        Duration::from_secs(2),
    ));
    let mut manager = Manager::new(kube::Config::infer().await?, config).await?;
    manager.add_machine_reconciler::<InMemoryMachine>(actuator.clone());
    manager.add_cluster_reconciler::<InMemoryCluster>(actuator);
    if with_bootstrap {
        manager.add_bootstrap_reconciler(Default::default());
    }
    if with_core {
        manager.add_core_controllers(Default::default());
    }
    tracing::info!(http = %manager.http_addr()?, "in-memory provider manager starting");
    manager.run().await?;
    Ok(())
}
