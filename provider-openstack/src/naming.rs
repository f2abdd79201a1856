//! Deterministic names and markers of everything the provider creates, so that every object can be
//! found again after a crash without having been recorded anywhere.
//!
//! Names start with `capi-rs-<namespace>-<cluster>`; descriptions carry the owner
//! (`capi-rs cluster <namespace>/<cluster>` or `capi-rs machine <uid>`), so an object of the same name
//! made by someone else is never adopted or deleted.

/// The server metadata key holding the machine's idempotency key.
pub const MACHINE_KEY_METADATA: &str = "capi-rs-machine";

/// The names of one cluster's infrastructure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNames {
    /// `capi-rs-<namespace>-<cluster>`: the network, subnet and router name and the tag on every
    /// resource of the cluster.
    pub base: String,
    /// The description written on every cluster resource.
    pub description: String,
}

impl ClusterNames {
    /// Names for the cluster `name` in `namespace`.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            base: format!("capi-rs-{namespace}-{name}"),
            description: format!("capi-rs cluster {namespace}/{name}"),
        }
    }
    /// The managed network.
    pub fn network(&self) -> String {
        self.base.clone()
    }
    /// The `index`th managed subnet.
    pub fn subnet(&self, index: usize) -> String {
        if index == 0 {
            self.base.clone()
        } else {
            format!("{}-{index}", self.base)
        }
    }
    /// The router.
    pub fn router(&self) -> String {
        self.base.clone()
    }
    /// The control-plane security group.
    pub fn control_plane_group(&self) -> String {
        format!("{}-controlplane", self.base)
    }
    /// The worker security group.
    pub fn worker_group(&self) -> String {
        format!("{}-worker", self.base)
    }
    /// The API server load balancer (listener, pool and monitor share the name).
    pub fn load_balancer(&self) -> String {
        format!("{}-kubeapi", self.base)
    }
    /// The description of the API server's floating IP.
    pub fn api_floating_ip_description(&self) -> String {
        format!("{} kubeapi", self.description)
    }
    /// The tag on every resource of the cluster.
    pub fn tag(&self) -> String {
        // Neutron and Nova tags are at most 60 characters; the base is unique enough to cut.
        self.base.chars().take(60).collect()
    }
}

/// The description of a machine's ports: it names the machine's idempotency key, so a port of the
/// same name created by anyone else is never adopted or deleted.
pub fn machine_port_description(key: &str) -> String {
    format!("capi-rs machine {key}")
}

/// The prefix of the tag a machine's first port carries from the moment the provider asks Nova
/// for the machine's server: `capi-rs-server-requested-at:<unix seconds>`.
const SERVER_REQUESTED_AT: &str = "capi-rs-server-requested-at:";

/// The tag saying a server was asked for at `unix_seconds` (38 characters at most, within
/// Neutron's 60).
pub fn server_requested_tag(unix_seconds: u64) -> String {
    format!("{SERVER_REQUESTED_AT}{unix_seconds}")
}

/// When a server was last asked for, by the latest of `tags`' server-requested tags; `None` when
/// none carries one (a tag that does not parse is not one).
pub fn server_requested_at<'a>(tags: impl IntoIterator<Item = &'a String>) -> Option<u64> {
    tags.into_iter()
        .filter_map(|tag| tag.strip_prefix(SERVER_REQUESTED_AT)?.parse().ok())
        .max()
}

/// Whether `tag` is a server-requested tag (replaced, never accumulated).
pub fn is_server_requested_tag(tag: &str) -> bool {
    tag.starts_with(SERVER_REQUESTED_AT)
}

/// The name of a machine's `index`th port (`<machine>-<suffix>` when the spec names it).
pub fn machine_port(machine: &str, index: usize, suffix: Option<&str>) -> String {
    match suffix {
        Some(suffix) => format!("{machine}-{suffix}"),
        None => format!("{machine}-{index}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_derived_from_namespace_and_cluster() {
        let names = ClusterNames::new("team-a", "demo");
        assert_eq!(names.network(), "capi-rs-team-a-demo");
        assert_eq!(names.subnet(1), "capi-rs-team-a-demo-1");
        assert_eq!(
            names.control_plane_group(),
            "capi-rs-team-a-demo-controlplane"
        );
        assert_eq!(names.load_balancer(), "capi-rs-team-a-demo-kubeapi");
        assert_eq!(machine_port("m-0", 0, None), "m-0-0");
        assert_eq!(machine_port("m-0", 1, Some("storage")), "m-0-storage");
    }

    #[test]
    fn tags_fit_neutron() {
        let names = ClusterNames::new(&"n".repeat(63), &"c".repeat(63));
        assert_eq!(names.tag().len(), 60);
        assert!(server_requested_tag(u64::MAX).len() <= 60);
    }

    #[test]
    fn the_latest_server_request_is_read_back_and_other_tags_are_not_one() {
        let tags = [
            "capi-rs-team-a-demo".to_string(),
            server_requested_tag(1_700_000_000),
            server_requested_tag(1_800_000_000),
            "capi-rs-server-requested-at:soon".to_string(),
        ];
        assert_eq!(server_requested_at(&tags), Some(1_800_000_000));
        assert_eq!(server_requested_at(&tags[..1]), None);
        assert!(is_server_requested_tag(&tags[3]));
        assert!(!is_server_requested_tag(&tags[0]));
    }
}
