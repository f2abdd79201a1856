//! The toy provider's manager (`capi_examples::toy`), beside upstream Cluster API or on its own
//! (`--with-core --with-bootstrap`); `--print-manifests` prints its CRDs and ClusterRole.

use std::sync::Arc;

use capi_actuator::InfrastructureControllers;
use capi_examples::toy::{Toy, ToyCluster, ToyMachine, ToyMachineTemplate, crds, rbac};
use capi_examples::toy_cloud::ToyCloud;
use capi_provider::{ManagerArgs, ProviderManager};

/// toy-manager: the toy cloud's Cluster API infrastructure provider.
#[derive(clap::Parser)]
struct Args {
    #[command(flatten)]
    manager: ManagerArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let toy = Arc::new(Toy(Arc::new(ToyCloud::default())));
    ProviderManager::new("toy", args.manager)
        .manifests(crds(), rbac())
        .run(|manager| {
            manager.add_cluster_reconciler::<ToyCluster>(toy.clone());
            manager.add_machine_reconciler::<ToyMachine, ToyCluster, Toy>(toy.clone());
            manager.add_machine_template_reconciler::<ToyMachineTemplate, ToyCluster>(toy);
        })
        .await?;
    Ok(())
}
