//! Lists the Cluster API Machines of the cluster in the current kubeconfig (all namespaces), with
//! phase, provider ID and readiness.
//!
//! Try it against the local control plane: `cargo xtask quickstart --keep-running`, then
//! `KUBECONFIG=<printed path> cargo run -p capi-examples --example list_machines`.

use capi_core::api::Machine;
use capi_core::condition;
use kube::{Api, Client};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    let machines: Api<Machine> = Api::all(client);
    for machine in machines.list(&Default::default()).await? {
        let status = machine.status.clone().unwrap_or_default();
        println!(
            "{}/{}\tcluster={}\tphase={:?}\tproviderID={}\tready={}",
            machine.metadata.namespace.as_deref().unwrap_or_default(),
            machine.metadata.name.as_deref().unwrap_or_default(),
            machine.spec.cluster_name,
            status.phase,
            machine.spec.provider_id.as_deref().unwrap_or("<none>"),
            condition::is_true(&status.conditions, condition::READY),
        );
    }
    Ok(())
}
