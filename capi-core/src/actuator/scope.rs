//! What an actuator is handed: the objects of one reconcile, the bootstrap data and the
//! idempotency key.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{Cluster, Machine};

/// Everything a machine [`Actuator`](super::Actuator) call may look at.
///
/// The objects are snapshots the loop took at the start of the reconcile from its own watches;
/// an actuator never writes them (the loop records what the actuator returns) and never reads
/// the API server for them.
///
/// During deletion the owning `Machine` and `Cluster` may already be gone. `delete` then receives
/// stand-ins that carry only the `Machine`'s UID (an empty `Cluster`), so it must find the instance
/// by `spec.providerID` of the infrastructure machine or by the idempotency key — which is what the
/// contract asks of it anyway.
#[derive(Debug)]
pub struct MachineScope<M, C> {
    /// The `Cluster` the machine belongs to.
    pub cluster: Arc<Cluster>,
    /// The provider's cluster object (for example an `OpenStackCluster`): the one the
    /// `Cluster`'s `infrastructureRef` names, else the one labelled with the cluster's name, else
    /// the one named like the cluster. Always there for `exists`, `create` and `update` (the loop
    /// waits for it); `delete` is called without it when it is already gone, so that a provider
    /// that needs it to reach its cloud says so ([`MachineScope::infra_cluster`]) and one that
    /// does not can still delete. Read it through [`MachineScope::infra_cluster`].
    pub infra_cluster: Option<Arc<C>>,
    /// The owning Cluster API `Machine`.
    pub machine: Arc<Machine>,
    /// The provider's machine object (for example an `OpenStackMachine`).
    pub infra_machine: Arc<M>,
    /// The durable identity of the instance to create; see [`IdempotencyKey`].
    pub idempotency_key: IdempotencyKey,
}

impl<M: kube::Resource<DynamicType = ()>, C> MachineScope<M, C> {
    /// The name of the machine's cluster: the infrastructure machine's
    /// `cluster.x-k8s.io/cluster-name` label, else the `Machine`'s `spec.clusterName`; an invalid
    /// configuration naming both when neither says.
    pub fn cluster_name(&self) -> Result<String, super::ActuatorError> {
        use kube::ResourceExt;
        self.infra_machine
            .labels()
            .get(crate::labels::CLUSTER_NAME)
            .cloned()
            .filter(|n| !n.is_empty())
            .or_else(|| Some(self.machine.spec.cluster_name.clone()).filter(|n| !n.is_empty()))
            .ok_or_else(|| {
                super::ActuatorError::invalid_configuration(
                    "NoClusterName",
                    format!(
                        "{} {} has no {} label and its Machine no spec.clusterName",
                        M::kind(&()),
                        self.infra_machine.name_any(),
                        crate::labels::CLUSTER_NAME
                    ),
                )
            })
    }

    /// Whether it is a control-plane machine: the `cluster.x-k8s.io/control-plane` label on the
    /// infrastructure machine or on the `Machine`.
    pub fn is_control_plane(&self) -> bool {
        use kube::ResourceExt;
        self.infra_machine
            .labels()
            .contains_key(crate::labels::MACHINE_CONTROL_PLANE)
            || self
                .machine
                .labels()
                .contains_key(crate::labels::MACHINE_CONTROL_PLANE)
    }
}

impl<M, C> MachineScope<M, C>
where
    M: kube::Resource<DynamicType = ()>,
    C: kube::Resource<DynamicType = ()>,
{
    /// The provider's cluster object. Never an error in `exists`, `create` and `update`. In
    /// `delete`, when the object is already gone: [`ActuatorError::RequeueAfter`] with reason
    /// `WaitingForClusterInfrastructure` and a message saying how to end the wait — the
    /// deletion goes on as soon as the object is back, and nothing is left behind unseen.
    ///
    /// [`ActuatorError::RequeueAfter`]: super::ActuatorError::RequeueAfter
    pub fn infra_cluster(&self) -> Result<&Arc<C>, super::ActuatorError> {
        self.infra_cluster.as_ref().ok_or_else(|| {
            use kube::ResourceExt;
            let kind = C::kind(&());
            super::ActuatorError::requeue_after(
                std::time::Duration::from_secs(60),
                "WaitingForClusterInfrastructure",
                format!(
                    "the {kind} of cluster {:?} does not exist, and {} {} is deleted through it: \
                     recreate the {kind}, or delete the instance by hand and remove the \
                     finalizer of {}",
                    self.machine.spec.cluster_name,
                    M::kind(&()),
                    self.infra_machine.name_any(),
                    self.infra_machine.name_any()
                ),
            )
        })
    }
}

impl<M, C> Clone for MachineScope<M, C> {
    fn clone(&self) -> Self {
        Self {
            cluster: Arc::clone(&self.cluster),
            infra_cluster: self.infra_cluster.clone(),
            machine: Arc::clone(&self.machine),
            infra_machine: Arc::clone(&self.infra_machine),
            idempotency_key: self.idempotency_key.clone(),
        }
    }
}

/// Everything a [`ClusterActuator`](super::ClusterActuator) call may look at.
#[derive(Debug)]
pub struct ClusterScope<C> {
    /// The Cluster API `Cluster`.
    pub cluster: Arc<Cluster>,
    /// The provider's cluster object (for example an `OpenStackCluster`).
    pub infra_cluster: Arc<C>,
}

impl<C> Clone for ClusterScope<C> {
    fn clone(&self) -> Self {
        Self {
            cluster: Arc::clone(&self.cluster),
            infra_cluster: self.infra_cluster.clone(),
        }
    }
}

/// The durable identity under which an instance (or a pool's scale set) is created, derived from
/// the owning `Machine`'s (or `MachinePool`'s) UID and recorded on the infrastructure object
/// ([`labels::IDEMPOTENCY_KEY`]).
///
/// Guarantees: the key is the same on every reconcile of the same `Machine` object, across
/// controller restarts and across `clusterctl move` (which gives objects new UIDs but keeps the
/// recorded key), and differs between any two `Machine` objects (including a deleted machine
/// and a new one of the same name). It is at most 64 ASCII characters (`capi-` and lowercase
/// letters, digits and `-`), so it fits AWS `ClientToken`s, OpenStack metadata values and Azure
/// tags unchanged.
///
/// The annotation is on an object a tenant may write. A provider must therefore adopt an
/// instance found under a key only if it also carries the cluster's ownership marks: a key
/// written by hand can then at worst confuse the machines of the writer's own cluster.
///
/// [`labels::IDEMPOTENCY_KEY`]: crate::labels::IDEMPOTENCY_KEY
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

/// The owning object has no UID yet: it was never stored by the API server.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{kind} {name:?} has no metadata.uid; it must be read from the API server before it is reconciled"
)]
pub struct MissingUid {
    kind: &'static str,
    name: String,
}

/// The idempotency key annotation of an infrastructure machine holds something else than a key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "annotation {annotation} holds {value:?}, which is not an idempotency key (`capi-` and up to \
     59 lowercase letters, digits and dashes): restore the value it had, which the machine's \
     instance carries as its idempotency key",
    annotation = crate::labels::IDEMPOTENCY_KEY
)]
pub struct MalformedKey {
    /// The annotation's value (its first 80 characters).
    pub value: String,
}

impl IdempotencyKey {
    /// The key for the instance of `machine`.
    pub fn for_machine(machine: &Machine) -> Result<Self, MissingUid> {
        machine
            .metadata
            .uid
            .as_deref()
            .and_then(Self::from_owner_uid)
            .ok_or_else(|| MissingUid {
                kind: "Machine",
                name: machine.metadata.name.clone().unwrap_or_default(),
            })
    }

    /// The key for the scale set of `pool` (the same shape as a machine's; a `MachinePool`'s UID
    /// and a `Machine`'s never collide).
    pub fn for_machine_pool(pool: &crate::api::MachinePool) -> Result<Self, MissingUid> {
        pool.metadata
            .uid
            .as_deref()
            .and_then(Self::from_owner_uid)
            .ok_or_else(|| MissingUid {
                kind: "MachinePool",
                name: pool.metadata.name.clone().unwrap_or_default(),
            })
    }

    /// The key recorded on an infrastructure machine (`meta`'s [`labels::IDEMPOTENCY_KEY`]
    /// annotation): `None` when there is none, an error when the annotation holds something
    /// else than a key (which names no instance, and must not be replaced by another key: the
    /// instance may carry the one it held before).
    ///
    /// [`labels::IDEMPOTENCY_KEY`]: crate::labels::IDEMPOTENCY_KEY
    pub fn recorded(meta: &ObjectMeta) -> Result<Option<Self>, MalformedKey> {
        let Some(value) = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::labels::IDEMPOTENCY_KEY))
        else {
            return Ok(None);
        };
        let valid = value.strip_prefix("capi-").is_some_and(|rest| {
            !rest.is_empty()
                && value.len() <= 64
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        });
        if valid {
            Ok(Some(Self(value.clone())))
        } else {
            Err(MalformedKey {
                value: value.chars().take(80).collect(),
            })
        }
    }

    /// The key for the instance of the `Machine` with this UID (as found in an owner reference,
    /// for example when the `Machine` itself is already gone). `None` for an empty UID.
    pub fn from_owner_uid(uid: &str) -> Option<Self> {
        (!uid.is_empty()).then(|| Self(format!("capi-{}", truncate_ascii(uid, 59))))
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn truncate_ascii(value: &str, max: usize) -> String {
    value.chars().filter(char::is_ascii).take(max).collect()
}

/// The format of bootstrap data, from the Secret's `format` key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BootstrapFormat {
    /// cloud-init `#cloud-config` (the default when the key is absent).
    #[default]
    CloudConfig,
    /// Ignition JSON.
    Ignition,
}

impl BootstrapFormat {
    /// The value of the Secret's `format` key.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CloudConfig => "cloud-config",
            Self::Ignition => "ignition",
        }
    }
}

/// Bootstrap data (user data) for an instance, decoded from the bootstrap Secret.
///
/// The bytes are secret: `Debug` prints only their length and format, and there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapData {
    format: BootstrapFormat,
    value: Vec<u8>,
}

/// Why a bootstrap Secret could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum BootstrapDataError {
    /// The Secret has no `value` key.
    #[error("bootstrap Secret {secret:?} has no \"value\" key")]
    MissingValue {
        /// The Secret's name.
        secret: String,
    },
    /// The `value` key is empty.
    #[error("bootstrap Secret {secret:?} has an empty \"value\" key")]
    EmptyValue {
        /// The Secret's name.
        secret: String,
    },
    /// The `format` key holds something else than `cloud-config` or `ignition`.
    #[error(
        "bootstrap Secret {secret:?} has format {format:?}; expected \"cloud-config\" or \"ignition\""
    )]
    UnknownFormat {
        /// The Secret's name.
        secret: String,
        /// The format found (not secret).
        format: String,
    },
}

impl BootstrapData {
    /// Bootstrap data of the given format.
    pub fn new(format: BootstrapFormat, value: impl Into<Vec<u8>>) -> Self {
        Self {
            format,
            value: value.into(),
        }
    }

    /// Decodes the bootstrap contract's Secret: key `value` (required, non-empty) and key
    /// `format` (`cloud-config` when absent).
    pub fn from_secret(secret: &Secret) -> Result<Self, BootstrapDataError> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let data = secret.data.as_ref();
        let value =
            data.and_then(|d| d.get("value"))
                .ok_or_else(|| BootstrapDataError::MissingValue {
                    secret: name.clone(),
                })?;
        if value.0.is_empty() {
            return Err(BootstrapDataError::EmptyValue { secret: name });
        }
        let format = match data.and_then(|d| d.get("format")) {
            None => BootstrapFormat::CloudConfig,
            Some(ByteString(raw)) => match raw.as_slice() {
                b"cloud-config" | b"" => BootstrapFormat::CloudConfig,
                b"ignition" => BootstrapFormat::Ignition,
                other => {
                    return Err(BootstrapDataError::UnknownFormat {
                        secret: name,
                        format: String::from_utf8_lossy(other).chars().take(64).collect(),
                    });
                }
            },
        };
        Ok(Self {
            format,
            value: value.0.clone(),
        })
    }

    /// The format.
    pub fn format(&self) -> BootstrapFormat {
        self.format
    }

    /// The raw bytes, to hand to the cloud as user data. Never log them.
    pub fn expose(&self) -> &[u8] {
        &self.value
    }
}

impl fmt::Debug for BootstrapData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapData")
            .field("format", &self.format)
            .field("len", &self.value.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn scope_with(
        infra_labels: &[(&str, &str)],
        machine_labels: &[(&str, &str)],
        cluster_name: &str,
    ) -> MachineScope<Machine, ()> {
        let labels = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        let mut infra = Machine::default();
        infra.metadata.name = Some("infra-0".into());
        infra.metadata.labels = labels(infra_labels);
        let mut machine = Machine::default();
        machine.metadata.uid = Some("uid-1".into());
        machine.metadata.labels = labels(machine_labels);
        machine.spec.cluster_name = cluster_name.into();
        MachineScope {
            cluster: Arc::new(Cluster::default()),
            infra_cluster: None,
            idempotency_key: IdempotencyKey::from_owner_uid("uid-1")
                .unwrap_or_else(|| panic!("a UID")),
            machine: Arc::new(machine),
            infra_machine: Arc::new(infra),
        }
    }

    #[test]
    fn the_cluster_name_is_the_labels_else_the_machines_else_an_error_naming_both() {
        let labelled = scope_with(&[(crate::labels::CLUSTER_NAME, "a")], &[], "b");
        assert_eq!(labelled.cluster_name().ok().as_deref(), Some("a"));
        let from_machine = scope_with(&[], &[], "b");
        assert_eq!(from_machine.cluster_name().ok().as_deref(), Some("b"));
        let neither = scope_with(&[], &[], "").cluster_name().err();
        let message = neither.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("Machine infra-0") && message.contains("spec.clusterName"),
            "{message}"
        );
    }

    #[test]
    fn a_missing_infrastructure_cluster_is_a_wait_that_says_how_to_end_it() {
        let scope = scope_with(&[], &[], "demo");
        let mut scope = MachineScope {
            cluster: scope.cluster,
            infra_cluster: None,
            machine: scope.machine,
            infra_machine: scope.infra_machine,
            idempotency_key: scope.idempotency_key,
        };
        let error = scope
            .infra_cluster()
            .err()
            .map(|e| (e.kind(), e.to_string()));
        let (kind, message) = error.unwrap_or_else(|| panic!("an error"));
        assert_eq!(kind, super::super::ActuatorErrorKind::RequeueAfter);
        assert!(
            message.contains("the Cluster of cluster \"demo\"") && message.contains("finalizer"),
            "{message}"
        );
        scope.infra_cluster = Some(Arc::new(Cluster::default()));
        assert!(scope.infra_cluster().is_ok());
    }

    #[test]
    fn a_control_plane_machine_is_labelled_so_on_either_object() {
        let label = [(crate::labels::MACHINE_CONTROL_PLANE, "")];
        assert!(scope_with(&label, &[], "c").is_control_plane());
        assert!(scope_with(&[], &label, "c").is_control_plane());
        assert!(!scope_with(&[], &[], "c").is_control_plane());
    }

    fn secret(entries: &[(&str, &[u8])]) -> Secret {
        let data: BTreeMap<String, ByteString> = entries
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
            .collect();
        let mut s = Secret {
            data: Some(data),
            ..Secret::default()
        };
        s.metadata.name = Some("m-0-bootstrap".into());
        s
    }

    #[test]
    fn decodes_value_and_defaults_format() {
        let data = BootstrapData::from_secret(&secret(&[("value", b"#cloud-config\n")])).unwrap();
        assert_eq!(data.format(), BootstrapFormat::CloudConfig);
        assert_eq!(data.expose(), b"#cloud-config\n");
        let ign = BootstrapData::from_secret(&secret(&[("value", b"{}"), ("format", b"ignition")]))
            .unwrap();
        assert_eq!(ign.format(), BootstrapFormat::Ignition);
    }

    #[test]
    fn rejects_missing_empty_and_unknown() {
        assert!(matches!(
            BootstrapData::from_secret(&secret(&[])),
            Err(BootstrapDataError::MissingValue { .. })
        ));
        assert!(matches!(
            BootstrapData::from_secret(&secret(&[("value", b"")])),
            Err(BootstrapDataError::EmptyValue { .. })
        ));
        let err = BootstrapData::from_secret(&secret(&[("value", b"x"), ("format", b"kickstart")]))
            .unwrap_err();
        assert!(err.to_string().contains("kickstart"), "{err}");
    }

    #[test]
    fn debug_never_shows_the_bytes() {
        let data = BootstrapData::new(BootstrapFormat::CloudConfig, b"password: hunter2".to_vec());
        let shown = format!("{data:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("len: 17"), "{shown}");
    }

    #[test]
    fn idempotency_key_comes_from_the_uid() {
        let mut machine = Machine::default();
        machine.metadata.name = Some("m-0".into());
        assert!(IdempotencyKey::for_machine(&machine).is_err());
        machine.metadata.uid = Some("7c0f4a8e-2b1d-4b8e-9a55-0d3b7f6e1c2a".into());
        let key = IdempotencyKey::for_machine(&machine).unwrap();
        assert_eq!(key.as_str(), "capi-7c0f4a8e-2b1d-4b8e-9a55-0d3b7f6e1c2a");
        assert!(key.as_str().len() <= 64);
        assert_eq!(key, IdempotencyKey::for_machine(&machine.clone()).unwrap());
    }

    #[test]
    fn a_recorded_key_is_read_back_and_a_malformed_one_is_an_error() {
        let annotated = |value: &str| ObjectMeta {
            annotations: Some(
                [(
                    crate::labels::IDEMPOTENCY_KEY.to_string(),
                    value.to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let recorded = "capi-7c0f4a8e-2b1d-4b8e-9a55-0d3b7f6e1c2a";
        let key = IdempotencyKey::recorded(&annotated(recorded)).unwrap();
        assert_eq!(key.as_ref().map(IdempotencyKey::as_str), Some(recorded));
        assert_eq!(IdempotencyKey::recorded(&ObjectMeta::default()), Ok(None));
        for malformed in [
            "",
            "capi-",
            "7c0f4a8e",
            "capi-UPPER",
            "capi-a b",
            &format!("capi-{}", "a".repeat(60)),
        ] {
            let error = IdempotencyKey::recorded(&annotated(malformed)).unwrap_err();
            assert!(
                error.to_string().contains(crate::labels::IDEMPOTENCY_KEY),
                "{error}"
            );
        }
    }
}
