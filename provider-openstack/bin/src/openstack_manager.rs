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
//! needed. `--allowed-auth-url-hosts` restricts where credentials may send the manager
//! ([`provider_openstack::auth_url`]). Logs never carry credentials, tokens or bootstrap data.
//! `--help` lists all flags.

use std::sync::Arc;

use anyhow::Result;
use capi_actuator::InfrastructureControllers;
use capi_provider::support::rbac;
use capi_provider::{ManagerArgs, ProviderManager};
use clap::Parser;
use provider_openstack::api::{OpenStackCluster, OpenStackMachine, OpenStackMachineTemplate};
use provider_openstack::auth_url::AuthUrlPolicy;
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
    /// The Keystone hosts a credentials Secret's `auth_url` may name, comma separated
    /// (`keystone.example.com`, `keystone.example.com:5000`, `*.example.com`; `http://host` to
    /// allow plain HTTP): on a management cluster shared by several teams, the manager then never
    /// sends a request where a tenant points it. Unset: any host.
    #[arg(long, value_delimiter = ',', value_name = "HOSTS")]
    allowed_auth_url_hosts: Option<Vec<String>>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let auth_urls = match &args.allowed_auth_url_hosts {
        Some(hosts) => AuthUrlPolicy::only(hosts)
            .map_err(|e| anyhow::anyhow!("--allowed-auth-url-hosts: {e}"))?,
        None => AuthUrlPolicy::any(),
    };
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
            let connector =
                Arc::new(SecretConnector::new(manager.client()).with_auth_url_policy(auth_urls));
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
