//! The Secrets and ConfigMaps the SDK writes for a cluster in the management cluster, in the
//! cluster's namespace and owned by it, named `<cluster>-<purpose>` as upstream names them
//! (`util/secret`): the kubeconfig, the PKI and kubeadm's init lock. Nothing else is written under
//! these names, so a controller that cleans up after a cluster deletes exactly these, and needs no
//! right to list a namespace's Secrets.

/// The kubeconfig of the workload cluster's admin (`<cluster>-kubeconfig`, key `value`).
pub const KUBECONFIG: &str = "kubeconfig";

/// The PKI Secrets: the cluster CA, the etcd CA, the front-proxy CA and the service-account key.
pub const PKI: [&str; 4] = ["ca", "etcd", "proxy", "sa"];

/// Every Secret of a cluster: [`KUBECONFIG`] and [`PKI`].
pub const SECRETS: [&str; 5] = [KUBECONFIG, PKI[0], PKI[1], PKI[2], PKI[3]];

/// The ConfigMap that serialises `kubeadm init` among a cluster's first control-plane machines.
pub const INIT_LOCK: &str = "lock";

/// Every ConfigMap of a cluster: [`INIT_LOCK`].
pub const CONFIG_MAPS: [&str; 1] = [INIT_LOCK];

/// The name of the object for `purpose` of cluster `cluster`: `<cluster>-<purpose>`.
pub fn name(cluster: &str, purpose: &str) -> String {
    format!("{cluster}-{purpose}")
}
