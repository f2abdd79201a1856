//! `openstack-manager`: the OpenStack provider's controllers in a `Manager`, talking to the
//! cluster of the current kubeconfig (in a pod: its ServiceAccount).
//!
//! It reconciles `OpenStackCluster`s and `OpenStackMachine`s with credentials from each cluster's
//! `identityRef` Secret (one Keystone session per Secret, shared by every reconcile). The flags
//! every manager shares are [`capi_provider::ManagerArgs`]. `--with-bootstrap` also runs the
//! kubeadm bootstrap provider, which then writes the cloud provider's `cloud.conf` and the cloud's
//! CA bundle into every OpenStack machine's bootstrap data (`--without-cloud-conf` leaves them
//! out, for clusters that configure their cloud provider some other way); `--with-core` runs the
//! core Cluster API controllers: both together are standalone mode, with no Go controller
//! needed. Logs never carry credentials, tokens or bootstrap data. `--help` lists all flags.

use std::sync::Arc;

use anyhow::Result;
use capi_actuator::InfrastructureControllers;
use capi_provider::support::rbac;
use capi_provider::{ManagerArgs, ProviderManager};
use clap::Parser;
use provider_openstack::api::{OpenStackCluster, OpenStackMachine, OpenStackMachineTemplate};
use provider_openstack::cloud_conf::CloudConfFiles;
use provider_openstack::cluster::OpenStackClusterActuator;
use provider_openstack::connector::SecretConnector;
use provider_openstack::machine::OpenStackMachineActuator;

/// The OpenStack provider's manager.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    manager: ManagerArgs,
    /// Leave `cloud.conf` and the CA bundle out of the bootstrap data.
    #[arg(long)]
    without_cloud_conf: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let group = provider_openstack::api::GROUP;
    let rules = rbac::provider(
        group,
        "openstackmachines",
        "openstackclusters",
        "openstackmachinetemplates",
    );
    let mut provider = ProviderManager::new("OpenStack", args.manager)
        .manifests(provider_openstack::api::crds(), rules)
        .body_log_targets(provider_openstack::cloud::SDK_BODY_LOG_TARGETS);
    if !args.without_cloud_conf {
        provider = provider.bootstrap_files(Arc::new(CloudConfFiles));
    }
    provider
        .run(|manager| {
            let connector = Arc::new(SecretConnector::new(manager.client()));
            manager.add_cluster_reconciler::<OpenStackCluster>(Arc::new(
                OpenStackClusterActuator::new(connector.clone()),
            ));
            let machines = Arc::new(OpenStackMachineActuator::new(connector));
            manager
                .add_machine_reconciler::<OpenStackMachine, OpenStackCluster, _>(machines.clone());
            manager.add_machine_template_reconciler::<OpenStackMachineTemplate, OpenStackCluster>(
                machines,
            );
        })
        .await?;
    Ok(())
}
