//! `aws-manager`: the AWS provider's controllers in a `Manager`, talking to the cluster of the
//! current kubeconfig (in a pod: its ServiceAccount).
//!
//! It reconciles `AWSCluster`s, `AWSMachine`s, `AWSMachineTemplate`s and `AWSMachinePool`s in each
//! cluster's region,
//! with the credentials of the identity its `identityRef` names, if that identity admits the
//! cluster's namespace ([`provider_aws::api::identity`]; without `identityRef`, the controller
//! identity `default`: the manager's own credentials, the AWS SDK's default chain). All calls to a region share
//! one budget (`--aws-api-rate`, `--aws-api-burst`), whatever the number of clusters. The flags
//! every manager shares are [`capi_provider::ManagerArgs`]; `--with-bootstrap` and `--with-core`
//! add the kubeadm bootstrap provider and the core Cluster API controllers (standalone mode).
//! Logs never carry credentials or bootstrap data: the SDK's DEBUG and TRACE events, which print
//! the request's identity, signed requests and bodies, are dropped whatever `RUST_LOG` says. `--help` lists all flags.

use std::sync::Arc;

use anyhow::Result;
use capi_actuator::InfrastructureControllers;
use capi_provider::support::rbac;
use capi_provider::{ManagerArgs, ProviderManager};
use clap::Parser;
use provider_aws::api::{AWSCluster, AWSMachine, AWSMachinePool, AWSMachineTemplate};
use provider_aws::cluster::AwsClusterActuator;
use provider_aws::connector::SecretConnector;
use provider_aws::machine::AwsMachineActuator;
use provider_aws::pool::AwsPoolActuator;
use provider_aws::throttle::{Budgets, DEFAULT_BURST, DEFAULT_RATE};

/// The AWS provider's manager.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    manager: ManagerArgs,
    /// Send every AWS call to this URL instead of AWS's regional endpoints (a VPC endpoint, or a
    /// local stand-in such as moto).
    #[arg(long, env = "CAPI_RS_AWS_ENDPOINT_URL")]
    aws_endpoint_url: Option<String>,
    /// The namespace of the Secrets `AWSClusterStaticIdentity`s name: the manager's own (the
    /// shipped Deployment sets `POD_NAMESPACE` to it).
    #[arg(long, env = "POD_NAMESPACE", default_value = provider_aws::connector::DEFAULT_IDENTITY_NAMESPACE)]
    identity_namespace: String,
    /// AWS calls per second per region, on average, shared by every reconcile.
    #[arg(long, default_value_t = DEFAULT_RATE)]
    aws_api_rate: f64,
    /// AWS calls per region at once before the rate applies.
    #[arg(long, default_value_t = DEFAULT_BURST)]
    aws_api_burst: u32,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let mut rules = rbac::provider(
        provider_aws::api::GROUP,
        "awsmachines",
        "awsclusters",
        "awsmachinetemplates",
    );
    rules.extend(provider_aws::api::pool_rbac());
    rules.extend(provider_aws::connector::rbac());
    let budgets = Budgets::new(args.aws_api_rate, args.aws_api_burst);
    let endpoint = args.aws_endpoint_url;
    let identity_namespace = args.identity_namespace;
    ProviderManager::new("AWS", args.manager)
        .manifests(provider_aws::api::crds(), rules)
        .namespace_rules(provider_aws::connector::identity_namespace_rbac())
        .body_log_targets(provider_aws::cloud::SDK_LOG_TARGETS)
        .run(move |manager| {
            let client = manager.client();
            let mut connector = SecretConnector::new(client)
                .with_budgets(budgets)
                .with_identity_namespace(identity_namespace);
            if let Some(url) = endpoint {
                connector = connector.with_endpoint_url(url);
            }
            let connector = Arc::new(connector);
            manager.add_cluster_reconciler::<AWSCluster>(Arc::new(AwsClusterActuator::new(
                connector.clone(),
            )));
            let pools = Arc::new(AwsPoolActuator::new(connector.clone()));
            manager.add_machine_pool_reconciler::<AWSMachinePool, AWSCluster, _>(pools);
            let machines = Arc::new(AwsMachineActuator::new(connector));
            manager.add_machine_reconciler::<AWSMachine, AWSCluster, _>(machines.clone());
            manager.add_machine_template_reconciler::<AWSMachineTemplate, AWSCluster>(machines);
        })
        .await?;
    Ok(())
}
