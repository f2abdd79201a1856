//! Well-known labels, annotations and finalizers of Cluster API.
//!
//! The values are upstream's; a controller built with this SDK and an upstream Go controller
//! recognise each other's marks.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Label on every object of a cluster: the `Cluster`'s name.
pub const CLUSTER_NAME: &str = "cluster.x-k8s.io/cluster-name";
/// Label on machines created by a `MachineSet`: the set's name.
pub const MACHINE_SET_NAME: &str = "cluster.x-k8s.io/set-name";
/// Label on machines and sets created for a `MachineDeployment`: the deployment's name.
pub const MACHINE_DEPLOYMENT_NAME: &str = "cluster.x-k8s.io/deployment-name";
/// Label on the infrastructure machines and `Machine`s of a `MachinePool`: the pool's name as a
/// label value ([`label_value`]).
pub const MACHINE_POOL_NAME: &str = "cluster.x-k8s.io/pool-name";
/// Label (empty value) on control-plane machines.
pub const MACHINE_CONTROL_PLANE: &str = "cluster.x-k8s.io/control-plane";
/// Label on control-plane machines: the control plane object's name.
pub const MACHINE_CONTROL_PLANE_NAME: &str = "cluster.x-k8s.io/control-plane-name";
/// On a CRD of upstream Cluster API's groups that this workspace generated: which installation it
/// belongs to (value [`THIS_INSTALLATION`]). Upstream's CRDs do not carry it.
pub const INSTALLATION: &str = "capi-rs.dev/installation";
/// The value of [`INSTALLATION`] on this workspace's CRDs.
pub const THIS_INSTALLATION: &str = "capi-rs";
/// Label on CRDs: which provider ships them (`cluster-api` for the core kinds).
pub const PROVIDER: &str = "cluster.x-k8s.io/provider";
/// Label on a Secret that a cluster's controllers must watch (kubeconfig, CA …).
pub const WATCH: &str = "cluster.x-k8s.io/watch";
/// Label whose value picks the manager that reconciles an object: a manager started with
/// `--watch-filter VALUE` reconciles only objects carrying `cluster.x-k8s.io/watch-filter: VALUE`
/// (upstream's `WatchLabel`), so several managers can share one management cluster.
pub const WATCH_FILTER: &str = "cluster.x-k8s.io/watch-filter";
/// On an object (or a CRD: every object of its kind), `clusterctl move` carries it to the target
/// management cluster even when no ownership reaches it from a Cluster (credentials Secrets).
pub const CLUSTERCTL_MOVE: &str = "clusterctl.cluster.x-k8s.io/move";
/// On an object (or a CRD: every object of its kind), `clusterctl move` carries it and every
/// object it owns through owner references, directly or not (identities). A cluster-scoped
/// object is created on the target only if absent there and kept on the source.
pub const CLUSTERCTL_MOVE_HIERARCHY: &str = "clusterctl.cluster.x-k8s.io/move-hierarchy";

/// Annotation on an infrastructure machine: the idempotency key its instance is created under
/// (`capi-<Machine UID>`), written by the infrastructure loop with its finalizer, before anything
/// is created. `clusterctl move` keeps annotations and names but gives every object a new UID:
/// the recorded key is how the target's controllers recognise the instances the source created.
/// (This workspace's own; upstream has no such mark.)
pub const IDEMPOTENCY_KEY: &str = "capi-rs.dev/idempotency-key";

/// Annotation that pauses reconciliation of the object it is on (any value).
pub const PAUSED: &str = "cluster.x-k8s.io/paused";
/// Annotation that makes a machine the first to go when its set scales down.
pub const DELETE_MACHINE: &str = "cluster.x-k8s.io/delete-machine";
/// Annotation that asks the owner of a machine to remediate (replace) it.
pub const REMEDIATE_MACHINE: &str = "cluster.x-k8s.io/remediate-machine";
/// Prefix of the annotations that hold a Machine's deletion before its node is drained: while any
/// annotation with this prefix is on a deleting Machine, nothing of it is torn down. Whoever set
/// it (a control plane provider, an operator) removes it when its work is done.
pub const PRE_DRAIN_HOOK_PREFIX: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io";
/// Prefix of the annotations that hold a Machine's deletion after its node was drained and before
/// its infrastructure goes (KubeadmControlPlane removes the machine's etcd member here).
pub const PRE_TERMINATE_HOOK_PREFIX: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io";

/// The deletion hooks with `prefix` on `meta`, by annotation key.
pub fn deletion_hooks<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    prefix: &'a str,
) -> impl Iterator<Item = &'a str> + 'a {
    meta.annotations
        .iter()
        .flatten()
        .map(|(key, _)| key.as_str())
        .filter(move |key| key.starts_with(prefix))
}

/// Annotation on a `MachineSet`: `"true"` stops it from creating machines (it still deletes
/// them). A MachineDeployment rolling out with `OnDelete` sets it on its old sets, so a machine a
/// user deletes is replaced from the new set, never from the old one; every other set it owns
/// carries `"false"`.
pub const DISABLE_MACHINE_CREATE: &str = "cluster.x-k8s.io/disable-machine-create";

/// Annotation on a `MachineDeployment` or `MachineSet`: the smallest size the cluster autoscaler
/// may scale it to. With [`AUTOSCALER_MAX_SIZE`] it hands `spec.replicas` to the autoscaler: an
/// object without `spec.replicas` is given one inside the range (the minimum when new), as
/// upstream's admission defaulting does.
pub const AUTOSCALER_MIN_SIZE: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";

/// Annotation on a `MachineDeployment` or `MachineSet`: the largest size the cluster autoscaler
/// may scale it to. See [`AUTOSCALER_MIN_SIZE`].
pub const AUTOSCALER_MAX_SIZE: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";

/// Annotation on a `MachineDeployment` and its sets: the rollout revision.
pub const REVISION: &str = "machinedeployment.clusters.x-k8s.io/revision";

/// Finalizer the core controllers put on a `Machine`.
pub const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";
/// Finalizer the core controllers put on a `Cluster`.
pub const CLUSTER_FINALIZER: &str = "cluster.cluster.x-k8s.io";

/// The prefix of the label that states which version of a kind implements a contract:
/// `cluster.x-k8s.io/<contract>: <version>[_<version>…]` on a provider's CRD.
pub const CONTRACT_LABEL_PREFIX: &str = "cluster.x-k8s.io/";

/// The contract this SDK implements.
pub const CONTRACT: &str = "v1beta2";

/// The contract label key for [`CONTRACT`]: `cluster.x-k8s.io/v1beta2`.
pub fn contract_label_key() -> String {
    format!("{CONTRACT_LABEL_PREFIX}{CONTRACT}")
}

/// Annotation on a `MachinePool` (or a `MachineDeployment`) whose size an autoscaler sets: the
/// controllers then never write `spec.replicas`, and a pool's phase while it changes size is
/// `Scaling`.
pub const REPLICAS_MANAGED_BY: &str = "cluster.x-k8s.io/replicas-managed-by";

/// Whether an autoscaler manages the object's size: [`REPLICAS_MANAGED_BY`] is present with any
/// value but `false` (an empty value counts, as upstream counts it).
pub fn replicas_managed_externally(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(REPLICAS_MANAGED_BY))
        .is_some_and(|value| value != "false")
}

/// Whether `value` is a label value Kubernetes takes: empty, or at most 63 characters of letters,
/// digits, `-`, `_` and `.`, beginning and ending with a letter or digit.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && value
                .as_bytes()
                .first()
                .is_some_and(u8::is_ascii_alphanumeric)
            && value
                .as_bytes()
                .last()
                .is_some_and(u8::is_ascii_alphanumeric))
}

/// `name` as a label value, as upstream formats the values of [`MACHINE_POOL_NAME`]: unchanged
/// when it is a valid label value (at most 63 characters of letters, digits, `-`, `_` and `.`,
/// beginning and ending with a letter or digit), else `hash_<FNV-32a of name, URL-safe base64
/// without padding>_z`. Upstream's controllers and this SDK's find a pool's objects by the same
/// value.
pub fn label_value(name: &str) -> std::borrow::Cow<'_, str> {
    let valid = is_label_value(name);
    if valid {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut hash: u32 = 0x811c_9dc5;
    for byte in name.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    std::borrow::Cow::Owned(format!("hash_{}_z", url_safe_base64(&hash.to_be_bytes())))
}

/// URL-safe base64 (RFC 4648 §5) without padding.
fn url_safe_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let word = chunk
            .iter()
            .enumerate()
            .fold(0u32, |word, (i, b)| word | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            let index = (word >> (18 - 6 * i)) & 0x3f;
            out.push(char::from(ALPHABET[index as usize]));
        }
    }
    out
}

/// Whether the object carries the [`PAUSED`] annotation (with any value).
pub fn has_paused_annotation(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(PAUSED))
}

/// The [`CLUSTER_NAME`] label's value, if present and not empty.
pub fn cluster_name(meta: &ObjectMeta) -> Option<&str> {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(CLUSTER_NAME))
        .map(String::as_str)
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paused_annotation_counts_with_any_value() {
        let mut meta = ObjectMeta::default();
        assert!(!has_paused_annotation(&meta));
        meta.annotations = Some([(PAUSED.to_string(), String::new())].into());
        assert!(has_paused_annotation(&meta));
    }

    #[test]
    fn cluster_name_ignores_empty_label() {
        let mut meta = ObjectMeta {
            labels: Some([(CLUSTER_NAME.to_string(), String::new())].into()),
            ..ObjectMeta::default()
        };
        assert_eq!(cluster_name(&meta), None);
        meta.labels = Some([(CLUSTER_NAME.to_string(), "demo".to_string())].into());
        assert_eq!(cluster_name(&meta), Some("demo"));
    }

    #[test]
    fn pool_names_are_formatted_as_upstream_formats_them() {
        assert_eq!(label_value("workers-a"), "workers-a");
        assert_eq!(label_value(""), "");
        // As Go's `format.MustFormatValue` (upstream's) formats them.
        assert_eq!(label_value(&"p".repeat(64)), "hash_X-hqxQ_z");
        assert_eq!(label_value("-starts-with-a-dash"), "hash_paCNnQ_z");
        assert_eq!(label_value("pool_"), "hash_e6bVVA_z");
        // FNV-32a of "a" is 0xe40c292c.
        assert_eq!(url_safe_base64(&0xe40c_292c_u32.to_be_bytes()), "5AwpLA");
        assert_eq!(url_safe_base64(b"foob"), "Zm9vYg");
        assert_eq!(url_safe_base64(b"\xfb\xff"), "-_8");
    }

    #[test]
    fn an_autoscaler_manages_replicas_unless_the_annotation_says_false() {
        let mut meta = ObjectMeta::default();
        assert!(!replicas_managed_externally(&meta));
        for (value, managed) in [("", true), ("cluster-autoscaler", true), ("false", false)] {
            meta.annotations = Some([(REPLICAS_MANAGED_BY.to_string(), value.to_string())].into());
            assert_eq!(replicas_managed_externally(&meta), managed, "{value:?}");
        }
    }

    #[test]
    fn contract_label_key_is_upstreams() {
        assert_eq!(contract_label_key(), "cluster.x-k8s.io/v1beta2");
    }
}
