//! `openstack-manager`: the OpenStack provider's controllers in a `Manager`, talking to the
//! cluster of the current kubeconfig (in a pod: its ServiceAccount).
//!
//! ```text
//! openstack-manager [--http-addr 0.0.0.0:8080] [--namespace NS] [--label-selector SEL]
//!                   [--concurrency N] [--qps F] [--burst N] [--leader-elect NAMESPACE/NAME]
//!                   [--log-format text|json] [--with-bootstrap] [--with-core]
//!                   [--without-cloud-conf]
//! ```
//!
//! It reconciles `OpenStackCluster`s and `OpenStackMachine`s with credentials from each cluster's
//! `identityRef` Secret (one Keystone session per Secret, shared by every reconcile).
//! `--with-bootstrap` also runs the kubeadm bootstrap reconciler, which then writes the cloud
//! provider's `cloud.conf` and the cloud's CA bundle into every OpenStack machine's bootstrap data
//! (`--without-cloud-conf` leaves them out, for clusters that configure their cloud provider some
//! other way); `--with-core` runs the core Cluster API controllers: both together are standalone
//! mode, with no Go controller needed. Logs never carry credentials, tokens or bootstrap data.

use std::sync::Arc;

use anyhow::Result;
use capi_actuator::bootstrap::BootstrapSettings;
use capi_actuator::manager::Manager;
use capi_actuator::manager::flags::{FlagError, ManagerFlags};
use capi_actuator::telemetry::init_logging;
use provider_openstack::api::{OpenStackCluster, OpenStackMachine};
use provider_openstack::cloud_conf::CloudConfFiles;
use provider_openstack::cluster::OpenStackClusterActuator;
use provider_openstack::connector::SecretConnector;
use provider_openstack::machine::{ApiClusterLookup, OpenStackMachineActuator};

struct Args {
    flags: ManagerFlags,
    cloud_conf: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args> {
    let mut flags = ManagerFlags::default();
    let mut cloud_conf = true;
    while let Some(flag) = args.next() {
        if flags.accept(&flag, &mut args)? {
            continue;
        }
        match flag.as_str() {
            "--without-cloud-conf" => cloud_conf = false,
            _ => return Err(FlagError::Unknown(flag).into()),
        }
    }
    Ok(Args { flags, cloud_conf })
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
        cloud_conf,
    } = parse(std::env::args().skip(1))?;
    init_logging(log_format).map_err(|e| anyhow::anyhow!(e))?;
    let mut manager = Manager::new(kube::Config::infer().await?, config).await?;
    let client = manager.client();
    let connector = Arc::new(SecretConnector::new(client.clone()));
    manager.add_cluster_reconciler::<OpenStackCluster>(Arc::new(OpenStackClusterActuator::new(
        connector.clone(),
    )));
    manager.add_machine_reconciler::<OpenStackMachine>(Arc::new(OpenStackMachineActuator::new(
        connector,
        Arc::new(ApiClusterLookup(client)),
    )));
    if with_bootstrap {
        let mut settings = BootstrapSettings::default();
        if cloud_conf {
            settings.extra_files.push(Arc::new(CloudConfFiles));
        }
        manager.add_bootstrap_reconciler(settings);
    }
    if with_core {
        manager.add_core_controllers(Default::default());
    }
    tracing::info!(http = %manager.http_addr()?, "OpenStack provider manager starting");
    manager.run().await?;
    Ok(())
}
