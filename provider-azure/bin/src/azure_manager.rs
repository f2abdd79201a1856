//! `azure-manager`: the Azure provider's controllers in a `Manager`, talking to the cluster of
//! the current kubeconfig (in a pod: its ServiceAccount).
//!
//! It reconciles `AzureCluster`s and `AzureMachine`s in each cluster's subscription, with the
//! service principal of its `identityRef` Secret, against its Azure cloud's Resource Manager and
//! Microsoft Entra ID — or the endpoints given here (a sovereign cloud's private endpoints, or a
//! test server), trusting the extra CA given. Every request is https; tokens and credentials
//! never appear in logs. The flags every manager shares are [`capi_provider::ManagerArgs`];
//! `--with-bootstrap`, `--with-core` and `--with-control-plane` add the kubeadm bootstrap
//! provider, the core Cluster API controllers and KubeadmControlPlane (standalone mode).
//! `--help` lists all flags.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use capi_actuator::InfrastructureControllers;
use capi_provider::support::rbac;
use capi_provider::{ManagerArgs, ProviderManager};
use clap::Parser;
use provider_azure::api::{AzureCluster, AzureMachinePool};
use provider_azure::cluster::AzureClusterActuator;
use provider_azure::connector::{Endpoints, SecretConnector};
use provider_azure::machine::AzureMachineActuator;
use provider_azure::pool::AzurePoolActuator;

/// The Azure provider's manager.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    manager: ManagerArgs,
    /// The Resource Manager every cluster's requests go to, instead of its Azure cloud's (an
    /// https URL).
    #[arg(long, env = "CAPI_RS_AZURE_RESOURCE_MANAGER_URL")]
    azure_resource_manager_url: Option<String>,
    /// The Microsoft Entra ID authority tokens come from, instead of the cluster's Azure
    /// cloud's (an https URL).
    #[arg(long, env = "CAPI_RS_AZURE_AUTHORITY_HOST")]
    azure_authority_host: Option<String>,
    /// A PEM file of further CA certificates to trust for Azure's endpoints.
    #[arg(long, env = "CAPI_RS_AZURE_CA_FILE")]
    azure_ca_file: Option<std::path::PathBuf>,
}

fn http_client(ca_file: Option<&std::path::Path>) -> Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .https_only(true)
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(90));
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let certificates = reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("{} holds no PEM certificate", path.display()))?;
        builder = builder.tls_certs_merge(certificates);
    }
    builder.build().context("building the HTTPS client")
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let mut rules = rbac::provider(
        provider_azure::api::GROUP,
        "azuremachines",
        "azureclusters",
        "azuremachinetemplates",
    );
    rules.extend(provider_azure::connector::rbac());
    rules.extend(provider_azure::api::pool_rbac());
    let http = http_client(args.azure_ca_file.as_deref())?;
    let endpoints = Endpoints {
        resource_manager: args.azure_resource_manager_url,
        authority_host: args.azure_authority_host,
    };
    ProviderManager::new("Azure", args.manager)
        .manifests(provider_azure::api::crds(), rules)
        .run(move |manager| {
            let connector =
                Arc::new(SecretConnector::new(manager.client(), http).with_endpoints(endpoints));
            manager.add_cluster_reconciler::<AzureCluster>(Arc::new(AzureClusterActuator::new(
                connector.clone(),
            )));
            manager.add_machine_reconciler(Arc::new(AzureMachineActuator::new(connector.clone())));
            let pools = Arc::new(AzurePoolActuator::new(connector));
            manager.add_machine_pool_reconciler::<AzureMachinePool, AzureCluster, _>(pools);
        })
        .await?;
    Ok(())
}
