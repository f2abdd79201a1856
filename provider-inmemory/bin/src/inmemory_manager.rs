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

use anyhow::{Context, Result, bail};
use capi_actuator::ReconcilerOptions;
use capi_actuator::manager::{LeaderElectionConfig, Manager, ManagerConfig};
use capi_actuator::telemetry::{LogFormat, init_logging};
use provider_inmemory::actuator::InMemoryActuator;
use provider_inmemory::api::{InMemoryCluster, InMemoryMachine};
use provider_inmemory::cloud::{Compute, LoadBalancers, RemoteCloud, SimulatedCloud};

struct Args {
    config: ManagerConfig,
    cloud_url: Option<String>,
    log_format: LogFormat,
    with_bootstrap: bool,
    with_core: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args> {
    let mut config = ManagerConfig::default();
    let (mut with_bootstrap, mut with_core) = (false, false);
    let mut options = ReconcilerOptions::default();
    let (mut cloud_url, mut log_format) = (None, LogFormat::Text);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--cloud-url" => cloud_url = Some(value()?),
            "--with-bootstrap" => with_bootstrap = true,
            "--with-core" => with_core = true,
            "--http-addr" => {
                config.http_addr = value()?.parse().context("--http-addr expects HOST:PORT")?
            }
            "--namespace" => options = options.namespace(value()?),
            "--label-selector" => options = options.label_selector(value()?),
            "--concurrency" => {
                options =
                    options.concurrency(value()?.parse().context("--concurrency expects a count")?)
            }
            "--qps" => config.qps = value()?.parse().context("--qps expects a number")?,
            "--burst" => config.burst = value()?.parse().context("--burst expects a count")?,
            "--leader-elect" => {
                let lease = value()?;
                let (namespace, name) = lease
                    .split_once('/')
                    .context("--leader-elect expects NAMESPACE/NAME")?;
                config.leader_election = Some(LeaderElectionConfig::new(namespace, name));
            }
            "--log-format" => {
                log_format = match value()?.as_str() {
                    "json" => LogFormat::Json,
                    "text" => LogFormat::Text,
                    other => bail!("--log-format is text or json, not {other:?}"),
                }
            }
            other => bail!("unknown argument {other:?}; see the crate docs for the flags"),
        }
    }
    config.reconciler = options;
    Ok(Args {
        config,
        cloud_url,
        log_format,
        with_bootstrap,
        with_core,
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    let Args {
        config,
        cloud_url,
        log_format,
        with_bootstrap,
        with_core,
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
