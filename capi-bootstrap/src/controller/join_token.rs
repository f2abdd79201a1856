//! Join tokens in the workload cluster: created with a joining machine's data, extended until
//! the machine joins, deleted (best effort) when its data is dropped. The workload client is
//! built from the `<cluster>-kubeconfig` Secret (through
//! [`capi_runtime::kubeconfig::workload_config`], which a tenant's kubeconfig cannot turn into a
//! command run or a file read by the manager) and rebuilt after a failed call.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::reconcile::{Failure, Owners};
use crate::tokens;
use capi_core::api::Cluster;
use capi_runtime::reasons;

/// A client of the workload cluster, from the `<cluster>-kubeconfig` Secret (built once a
/// minute, see [`Owners::workloads`]).
async fn workload_client(
    owners: &Owners,
    secrets: &Api<Secret>,
    cluster: &Cluster,
) -> Result<Client, Failure> {
    let key = cluster.uid().unwrap_or_default();
    if let Some(client) = owners.workloads.get(&key) {
        return Ok(Client::clone(&client));
    }
    let client = build_workload_client(secrets, &cluster.name_any()).await?;
    Ok(Client::clone(&owners.workloads.put(key, client)))
}

async fn build_workload_client(secrets: &Api<Secret>, cluster: &str) -> Result<Client, Failure> {
    let waiting =
        |message: String| Failure::Waiting(reasons::WAITING_FOR_WORKLOAD_CLUSTER, message);
    let kubeconfig = secrets
        .get_opt(&format!("{cluster}-kubeconfig"))
        .await?
        .and_then(|s| s.data)
        .and_then(|d| d.get("value").cloned())
        .and_then(|v| String::from_utf8(v.0).ok())
        .ok_or_else(|| waiting(format!("Secret {cluster}-kubeconfig has no value")))?;
    // Only what a control plane writes is followed; errors name fields, never values.
    let config = capi_runtime::kubeconfig::workload_config(&kubeconfig)
        .await
        .map_err(|e| waiting(format!("Secret {cluster}-kubeconfig: {e}")))?;
    Client::try_from(config).map_err(|_| {
        waiting(format!(
            "Secret {cluster}-kubeconfig: no client can be built from it"
        ))
    })
}

/// Creates the bootstrap-token Secret in the workload cluster.
pub(super) async fn create_join_token(
    owners: &Owners,
    secrets: &Api<Secret>,
    cluster: &Cluster,
    token: &str,
    ttl: std::time::Duration,
) -> Result<(), Failure> {
    let waiting =
        |message: String| Failure::Waiting(reasons::WAITING_FOR_WORKLOAD_CLUSTER, message);
    let workload = workload_client(owners, secrets, cluster).await?;
    let secret = tokens::token_secret(token, ttl, jiff::Timestamp::now())
        .ok_or_else(|| waiting("invalid token".into()))?;
    let created = Api::<Secret>::namespaced(workload, tokens::NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await;
    if let Err(e) = created {
        // The next attempt builds its client afresh (the kubeconfig may have changed).
        owners.workloads.remove(&cluster.uid().unwrap_or_default());
        return Err(waiting(format!(
            "creating the bootstrap token in the workload cluster: {e}"
        )));
    }
    Ok(())
}

/// Deletes join token `id` from the workload cluster, best effort: one this pass made for data it
/// then did not keep. A token left behind expires at the end of its TTL all the same.
pub(super) async fn delete_join_token(
    owners: &Owners,
    secrets: &Api<Secret>,
    cluster: &Cluster,
    id: &str,
) {
    let Ok(workload) = workload_client(owners, secrets, cluster).await else {
        return;
    };
    let deleted = Api::<Secret>::namespaced(workload, tokens::NAMESPACE)
        .delete(
            &format!("bootstrap-token-{id}"),
            &kube::api::DeleteParams::default(),
        )
        .await;
    if let Err(error) = deleted {
        tracing::debug!(%error, "could not delete an unused join token");
    }
}

/// Moves the expiration of token `id` in the workload cluster to `ttl` from now.
pub(super) async fn refresh_join_token(
    owners: &Owners,
    secrets: &Api<Secret>,
    cluster: &Cluster,
    id: &str,
    ttl: std::time::Duration,
) -> Result<(), Failure> {
    let waiting =
        |message: String| Failure::Waiting(reasons::WAITING_FOR_WORKLOAD_CLUSTER, message);
    let workload = workload_client(owners, secrets, cluster).await?;
    let expiration = tokens::expiration(ttl, jiff::Timestamp::now())
        .ok_or_else(|| waiting("token TTL out of range".into()))?;
    let patch = json!({"data": {"expiration": ByteString(expiration.into_bytes())}});
    let extended = Api::<Secret>::namespaced(workload, tokens::NAMESPACE)
        .patch(
            &format!("bootstrap-token-{id}"),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await;
    match extended {
        Ok(_) => Ok(()),
        // Gone (expired and cleaned up, or deleted): there is nothing to extend. A machine that
        // has not joined by now needs replacing, which its health check or a user decides.
        Err(kube::Error::Api(status)) if status.is_not_found() => {
            tracing::debug!(token = id, "the join token to extend is gone");
            Ok(())
        }
        Err(e) => {
            owners.workloads.remove(&cluster.uid().unwrap_or_default());
            Err(waiting(format!("refreshing the bootstrap token: {e}")))
        }
    }
}
