//! Every name and tag the provider gives what it creates in AWS, in one place: the tags are how
//! each resource is found again (after a restart, a lost response, or on deletion), so they must
//! never change for an existing cluster.
//!
//! Each resource carries CAPA's tags — `sigs.k8s.io/cluster-api-provider-aws/cluster/<name>=owned`,
//! `sigs.k8s.io/cluster-api-provider-aws/role=<role>`, `Name` — so that CAPA users and tools
//! recognise it, and `capi-rs.dev/cluster=<namespace>/<name>`: CAPA's tag names the cluster
//! without its namespace, and two clusters of one name in different namespaces must never
//! adopt (or delete) each other's resources. The provider's own tags are applied after the
//! user's `additionalTags`, which may not use their prefixes anyway (the schema refuses them):
//! a user tag can never hide a resource from its cluster (CAPA #4629 leaked instances when a
//! user's `Name` replaced the provider's).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::api::SecurityGroupRole;

/// The prefix of CAPA's ownership tag; the cluster's name follows.
pub const CAPA_CLUSTER_TAG_PREFIX: &str = "sigs.k8s.io/cluster-api-provider-aws/cluster/";
/// CAPA's role tag.
pub const ROLE_TAG: &str = "sigs.k8s.io/cluster-api-provider-aws/role";
/// The value of the ownership tags on what the provider created (and deletes).
pub const OWNED: &str = "owned";
/// The cluster a resource belongs to, as `<namespace>/<name>`.
pub const CLUSTER_TAG: &str = "capi-rs.dev/cluster";
/// An instance's idempotency key (`capi-<Machine UID>`), by which it is found before any
/// `RunInstances` and after a lost response.
pub const IDEMPOTENCY_KEY_TAG: &str = "capi-rs.dev/idempotency-key";
/// Which planned subnet a created subnet is (`public-<zone>`, or the spec's `id`).
pub const SUBNET_TAG: &str = "capi-rs.dev/subnet";
/// The tag the Kubernetes cloud provider finds a cluster's subnets, instances and load balancers
/// by; the cluster's name follows.
pub const KUBERNETES_CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";
/// An instance's Machine, as `<namespace>/<name>` (CAPA's tag).
pub const MACHINE_NAME_TAG: &str = "MachineName";
/// The name AWS's console shows.
pub const NAME_TAG: &str = "Name";
/// On public subnets: where internet-facing load balancers go.
pub const ELB_ROLE_TAG: &str = "kubernetes.io/role/elb";
/// On private subnets: where internal load balancers go.
pub const INTERNAL_ELB_ROLE_TAG: &str = "kubernetes.io/role/internal-elb";

/// What a resource is for (CAPA's role tag values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The VPC, gateways, route tables and NAT addresses.
    Common,
    /// A public subnet.
    Public,
    /// A private subnet.
    Private,
    /// The API server's load balancer and target group.
    ApiServer,
    /// A control-plane instance.
    ControlPlane,
    /// A worker instance.
    Node,
    /// A security group.
    SecurityGroup(SecurityGroupRole),
}

impl Role {
    /// The role tag's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Common => "common",
            Self::Public => "public",
            Self::Private => "private",
            Self::ApiServer => "apiserver",
            Self::ControlPlane => "control-plane",
            Self::Node => "node",
            Self::SecurityGroup(role) => role.as_str(),
        }
    }
}

/// Public or private, in names.
fn visibility(public: bool) -> &'static str {
    if public { "public" } else { "private" }
}

/// The longest name ELBv2 takes for a load balancer or a target group.
pub const MAX_ELB_NAME: usize = 32;

/// The names and tags of one cluster's resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNaming {
    namespace: String,
    name: String,
}

impl ClusterNaming {
    /// The naming of the cluster `name` in `namespace`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// CAPA's ownership tag key of this cluster.
    pub fn capa_cluster_tag(&self) -> String {
        format!("{CAPA_CLUSTER_TAG_PREFIX}{}", self.name)
    }

    /// The Kubernetes cloud provider's tag key of this cluster.
    pub fn kubernetes_cluster_tag(&self) -> String {
        format!("{KUBERNETES_CLUSTER_TAG_PREFIX}{}", self.name)
    }

    /// `<namespace>/<name>`: the value of [`CLUSTER_TAG`].
    pub fn qualified(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The tags by which the provider recognises a resource as this cluster's: both must be
    /// present (CAPA's alone would take another namespace's cluster of the same name for this).
    pub fn ownership(&self) -> [(String, String); 2] {
        [
            (self.capa_cluster_tag(), OWNED.to_string()),
            (CLUSTER_TAG.to_string(), self.qualified()),
        ]
    }

    /// Whether `tags` mark a resource as this cluster's (see [`Self::ownership`]).
    pub fn owns<'a>(&self, tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
        let wanted = self.ownership();
        let mut found = [false; 2];
        for (key, value) in tags {
            for (i, (k, v)) in wanted.iter().enumerate() {
                if key == k && value == v {
                    found[i] = true;
                }
            }
        }
        found.iter().all(|f| *f)
    }

    /// The tags of a resource of this cluster with `role` and `name`: the user's `additional`
    /// first, then `Name`, the role and the ownership tags, which no user tag can replace.
    pub fn tags(
        &self,
        role: Role,
        name: &str,
        additional: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut tags = additional.clone();
        tags.insert(NAME_TAG.to_string(), name.to_string());
        tags.insert(ROLE_TAG.to_string(), role.as_str().to_string());
        tags.extend(self.ownership());
        tags
    }

    /// The VPC's name.
    pub fn vpc(&self) -> String {
        format!("{}-vpc", self.name)
    }

    /// The internet gateway's name.
    pub fn internet_gateway(&self) -> String {
        format!("{}-igw", self.name)
    }

    /// A NAT gateway's name.
    pub fn nat_gateway(&self) -> String {
        format!("{}-nat", self.name)
    }

    /// The name of a NAT gateway's elastic IP.
    pub fn nat_address(&self) -> String {
        format!("{}-eip-{}", self.name, Role::Common.as_str())
    }

    /// A created subnet's name.
    pub fn subnet(&self, public: bool, zone: &str) -> String {
        format!("{}-subnet-{}-{zone}", self.name, visibility(public))
    }

    /// A route table's name.
    pub fn route_table(&self, public: bool, zone: &str) -> String {
        format!("{}-rt-{}-{zone}", self.name, visibility(public))
    }

    /// A security group's name (`<cluster>-<role>`; EC2 refuses group names starting with
    /// `sg-`, so such a cluster's get CAPA's `@` in front).
    pub fn security_group(&self, role: SecurityGroupRole) -> String {
        let name = format!("{}-{}", self.name, role.as_str());
        if name.starts_with("sg-") {
            format!("@{name}")
        } else {
            name
        }
    }

    /// The API server load balancer's name when the spec names none: CAPA's
    /// `<cluster>-apiserver` (dots made dashes) when it fits in 32 characters, otherwise 28
    /// characters of a hash of `<namespace>/<name>` and `-k8s`.
    pub fn load_balancer(&self) -> String {
        let standard = format!(
            "{}-{}",
            self.name.replace('.', "-"),
            Role::ApiServer.as_str()
        );
        if standard.len() <= MAX_ELB_NAME {
            standard
        } else {
            format!("{}-k8s", self.short_hash(28))
        }
    }

    /// The API server target group's name: unique per namespace and cluster within 32
    /// characters.
    pub fn target_group(&self) -> String {
        format!("{}-tg", self.short_hash(29))
    }

    /// `length` base-36 characters of a SHA-256 of `<namespace>/<name>` (one character per byte
    /// of the digest, as CAPA shortens names).
    fn short_hash(&self, length: usize) -> String {
        const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        Sha256::digest(self.qualified().as_bytes())
            .iter()
            .take(length)
            .map(|byte| char::from(DIGITS[usize::from(*byte) % DIGITS.len()]))
            .collect()
    }
}

/// CAPA's role of an instance.
pub fn instance_role(control_plane: bool) -> Role {
    if control_plane {
        Role::ControlPlane
    } else {
        Role::Node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_capa() {
        let demo = ClusterNaming::new("default", "demo");
        assert_eq!(demo.vpc(), "demo-vpc");
        assert_eq!(demo.internet_gateway(), "demo-igw");
        assert_eq!(demo.nat_gateway(), "demo-nat");
        assert_eq!(demo.nat_address(), "demo-eip-common");
        assert_eq!(
            demo.subnet(true, "eu-west-1a"),
            "demo-subnet-public-eu-west-1a"
        );
        assert_eq!(
            demo.route_table(false, "eu-west-1b"),
            "demo-rt-private-eu-west-1b"
        );
        assert_eq!(
            demo.security_group(SecurityGroupRole::ControlPlane),
            "demo-controlplane"
        );
        assert_eq!(demo.load_balancer(), "demo-apiserver");
        assert_eq!(
            ClusterNaming::new("ns", "sg-cluster").security_group(SecurityGroupRole::Node),
            "@sg-cluster-node"
        );
        assert_eq!(
            ClusterNaming::new("ns", "a.b").load_balancer(),
            "a-b-apiserver"
        );
    }

    #[test]
    fn long_names_are_hashed_within_elbs_limit_and_differ_by_namespace() {
        let long = "a-cluster-with-a-rather-long-name";
        let one = ClusterNaming::new("team-a", long);
        let other = ClusterNaming::new("team-b", long);
        for name in [
            one.load_balancer(),
            other.load_balancer(),
            one.target_group(),
            other.target_group(),
        ] {
            assert!(name.len() <= MAX_ELB_NAME, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
        }
        assert_ne!(one.load_balancer(), other.load_balancer());
        assert_ne!(one.target_group(), other.target_group());
        assert_eq!(one.load_balancer(), one.load_balancer(), "stable");
        assert!(one.load_balancer().ends_with("-k8s"));
    }

    #[test]
    fn the_providers_tags_win_over_the_users() {
        let demo = ClusterNaming::new("default", "demo");
        let additional = BTreeMap::from([
            ("Name".to_string(), "mine".to_string()),
            ("team".to_string(), "a".to_string()),
        ]);
        let tags = demo.tags(Role::Common, "demo-vpc", &additional);
        assert_eq!(tags.get("Name").map(String::as_str), Some("demo-vpc"));
        assert_eq!(tags.get("team").map(String::as_str), Some("a"));
        assert_eq!(tags.get(ROLE_TAG).map(String::as_str), Some("common"));
        assert!(demo.owns(tags.iter().map(|(k, v)| (k.as_str(), v.as_str()))));
    }

    #[test]
    fn a_cluster_of_the_same_name_elsewhere_does_not_own_it() {
        let here = ClusterNaming::new("team-a", "demo");
        let there = ClusterNaming::new("team-b", "demo");
        let tags = here.tags(Role::Node, "demo-md-0-abc", &BTreeMap::new());
        let pairs = || tags.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        assert!(here.owns(pairs()));
        assert!(!there.owns(pairs()), "CAPA's tag alone names no namespace");
        let capa_only = [(here.capa_cluster_tag(), OWNED.to_string())];
        assert!(!here.owns(capa_only.iter().map(|(k, v)| (k.as_str(), v.as_str()))));
    }
}
