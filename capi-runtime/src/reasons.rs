//! Condition and event reasons the loop writes. They are part of the API: users and alerts match
//! on them.

/// Reconciliation is paused.
pub const PAUSED: &str = "Paused";
/// Reconciliation is not paused.
pub const NOT_PAUSED: &str = "NotPaused";

/// The `Paused` condition every controller writes: `True`/[`PAUSED`] "reconciliation is paused",
/// or `False`/[`NOT_PAUSED`].
pub fn paused_condition(
    paused: bool,
    generation: Option<i64>,
) -> capi_core::condition::DesiredCondition {
    use capi_core::condition::{ConditionStatus, DesiredCondition, PAUSED as TYPE};
    let desired = if paused {
        DesiredCondition::new(TYPE, ConditionStatus::True, PAUSED)
            .message("reconciliation is paused")
    } else {
        DesiredCondition::new(TYPE, ConditionStatus::False, NOT_PAUSED)
    };
    desired.observed_generation(generation)
}

/// A `MachineSet`/`MachineDeployment` selector is malformed or does not select the labels of
/// its own template, so machines made from it would not belong to it; nothing is created until
/// the spec is fixed.
pub const INVALID_SELECTOR: &str = "InvalidSelector";

/// No `Machine` owns the infrastructure machine yet.
pub const WAITING_FOR_OWNER: &str = "WaitingForOwner";
/// The `Cluster` does not exist (yet).
pub const WAITING_FOR_CLUSTER: &str = "WaitingForCluster";
/// The cluster infrastructure is not provisioned yet.
pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
/// The bootstrap data Secret is not set or does not exist yet.
pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
/// The bootstrap data Secret cannot be used.
pub const BOOTSTRAP_DATA_INVALID: &str = "BootstrapDataInvalid";
/// The instance exists and is booting.
pub const INSTANCE_PROVISIONING: &str = "InstanceProvisioning";
/// The instance runs.
pub const INSTANCE_RUNNING: &str = "InstanceRunning";
/// The cloud reports the instance in a terminal error state.
pub const INSTANCE_FAILED: &str = "InstanceFailed";
/// The recorded instance no longer exists in the cloud.
pub const INSTANCE_NOT_FOUND: &str = "InstanceNotFound";
/// An instance was created (event).
pub const INSTANCE_CREATED: &str = "InstanceCreated";
/// The instance was deleted (event).
pub const INSTANCE_DELETED: &str = "InstanceDeleted";
/// The spec cannot work as it is (event).
pub const INVALID_CONFIGURATION: &str = "InvalidConfiguration";
/// An infrastructure machine's idempotency key annotation (`capi-rs.dev/idempotency-key`) holds
/// something else than a key: nothing is created, updated or deleted until it holds one again.
pub const INVALID_IDEMPOTENCY_KEY: &str = "InvalidIdempotencyKey";
/// The instance matches the spec.
pub const UP_TO_DATE: &str = "UpToDate";
/// Immutable fields of the spec differ from the instance.
pub const IMMUTABLE_FIELDS_CHANGED: &str = "ImmutableFieldsChanged";
/// The cluster infrastructure is being provisioned.
pub const INFRASTRUCTURE_PROVISIONING: &str = "InfrastructureProvisioning";
/// The cluster infrastructure is provisioned.
pub const INFRASTRUCTURE_READY: &str = "InfrastructureReady";
/// A machine template's capacity and node information were read from the cloud.
pub const CAPACITY_REPORTED: &str = "CapacityReported";
/// The cluster infrastructure was deleted (event).
pub const INFRASTRUCTURE_DELETED: &str = "InfrastructureDeleted";
/// Deletion waits for the cluster's machines to go first.
pub const WAITING_FOR_MACHINES_DELETION: &str = "WaitingForMachinesDeletion";
/// The bootstrap data Secret exists.
pub const DATA_SECRET_AVAILABLE: &str = "DataSecretAvailable";
/// Bootstrap data was rendered (event).
pub const DATA_SECRET_CREATED: &str = "DataSecretCreated";
/// A bootstrap config's data Secret name is taken by another config's Secret, or the Secret went
/// while it was being read.
pub const DATA_SECRET_CONFLICT: &str = "DataSecretConflict";
/// Joining waits for `kubeadm init` on the first control-plane machine.
pub const WAITING_FOR_CONTROL_PLANE_INITIALIZATION: &str = "WaitingForControlPlaneInitialization";
/// The Machine has no (valid) Kubernetes version.
pub const VERSION_MISSING: &str = "VersionMissing";
/// A `files[].contentFrom` Secret key does not exist yet.
pub const WAITING_FOR_FILE_SECRET: &str = "WaitingForFileSecret";
/// The cluster PKI is being created or is incomplete.
pub const WAITING_FOR_PKI: &str = "WaitingForPKI";
/// The stored cluster PKI cannot be read.
pub const PKI_INVALID: &str = "PKIInvalid";
/// The workload cluster cannot be reached through `<cluster>-kubeconfig`.
pub const WAITING_FOR_WORKLOAD_CLUSTER: &str = "WaitingForWorkloadCluster";
/// A provider's bootstrap file hook failed.
pub const WAITING_FOR_PROVIDER_FILES: &str = "WaitingForProviderFiles";

// Core controllers (standalone mode).

/// The object is not being deleted.
pub const NOT_DELETING: &str = "NotDeleting";
/// The object is being deleted.
pub const DELETING: &str = "Deleting";
/// A MachineHealthCheck found the machine unhealthy.
pub const HEALTH_CHECK_FAILED: &str = "HealthCheckFailed";
/// The machine's infrastructure is not provisioned yet.
pub const WAITING_FOR_INFRASTRUCTURE: &str = "WaitingForInfrastructure";
/// The machine has no ready node yet.
pub const WAITING_FOR_NODE: &str = "WaitingForNode";
/// A machine's node is ready but one of its `spec.readinessGates` does not hold.
pub const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";
/// Bootstrap data, infrastructure and node are ready.
pub const MACHINE_READY: &str = "Ready";
/// Ready for at least `minReadySeconds`.
pub const MACHINE_AVAILABLE: &str = "Available";
/// Ready for less than `minReadySeconds`.
pub const WAITING_FOR_MIN_READY: &str = "WaitingForMinReadySeconds";
/// The machine is not ready.
pub const MACHINE_NOT_READY: &str = "NotReady";
/// A referenced object (infrastructure, bootstrap config, control plane) does not exist yet.
pub const REFERENCE_NOT_FOUND: &str = "ReferenceNotFound";
/// A referenced kind is not served: its provider's CRDs are not installed.
pub const REFERENCE_KIND_UNKNOWN: &str = "ReferenceKindUnknown";
/// The bootstrap data Secret is known.
pub const BOOTSTRAP_DATA_READY: &str = "DataSecretAvailable";
/// The infrastructure reports itself provisioned.
pub const PROVISIONED: &str = "Provisioned";
/// The node exists and reports `Ready=True`.
pub const NODE_READY: &str = "NodeReady";
/// The node exists but is not ready.
pub const NODE_NOT_READY: &str = "NodeNotReady";
/// The machine's node no longer exists.
pub const NODE_NOT_FOUND: &str = "NodeNotFound";
/// The node is being drained before the machine goes.
pub const DRAINING_NODE: &str = "DrainingNode";
/// Deletion waits for a pre-drain hook annotation to be removed.
pub const WAITING_FOR_PRE_DRAIN_HOOK: &str = "WaitingForPreDrainHook";
/// Deletion waits for a pre-terminate hook annotation to be removed.
pub const WAITING_FOR_PRE_TERMINATE_HOOK: &str = "WaitingForPreTerminateHook";
/// Draining took longer than allowed; the machine goes anyway (event).
pub const DRAIN_TIMEOUT: &str = "NodeDrainTimeout";
/// Deletion waits for the infrastructure and bootstrap objects to go.
pub const WAITING_FOR_INFRASTRUCTURE_DELETION: &str = "WaitingForInfrastructureDeletion";
/// The node could not be deleted within the allowed time; the machine goes anyway (event).
pub const NODE_DELETION_FAILED: &str = "NodeDeletionFailed";
/// A machine was created by a MachineSet (event).
pub const MACHINE_CREATED: &str = "SuccessfulCreate";
/// A machine was deleted by a MachineSet (event).
pub const MACHINE_DELETED: &str = "SuccessfulDelete";
/// A MachineSet was created or scaled by a MachineDeployment (event).
pub const MACHINE_SET_SCALED: &str = "SuccessfulScale";
/// A selector or template cannot work.
pub const INVALID_SPEC: &str = "InvalidSpec";
/// The cluster's infrastructure or control plane is provisioning.
pub const PROVISIONING: &str = "Provisioning";
/// Remediation is allowed.
pub const REMEDIATION_ALLOWED: &str = "RemediationAllowed";
/// Too many unhealthy machines: remediation stopped.
pub const TOO_MANY_UNHEALTHY: &str = "TooManyUnhealthy";
/// The machine passed its health checks.
pub const HEALTHY: &str = "Healthy";
/// A MachineHealthCheck handed an unhealthy machine to its owner for remediation (event on the
/// machine; upstream's reason).
pub const MACHINE_MARKED_UNHEALTHY: &str = "MachineMarkedUnhealthy";
/// A MachineHealthCheck found unhealthy machines but `triggerIf` stops their remediation
/// (warning event on the check; upstream's reason).
pub const REMEDIATION_RESTRICTED: &str = "RemediationRestricted";
/// The machine waits for its owner to replace it.
pub const WAITING_FOR_REMEDIATION: &str = "WaitingForRemediation";
/// The machine was made from an older template of its MachineDeployment.
pub const NEEDS_ROLLOUT: &str = "NeedsRollout";

/// A field is stored but this workspace's standalone controllers do not act on it (a Cluster's
/// `spec.topology`): the condition's message names the field and what to run instead.
pub const TOPOLOGY_NOT_SUPPORTED: &str = "TopologyNotSupported";

/// A machine pool's scale set was created (event).
pub const SCALE_SET_CREATED: &str = "ScaleSetCreated";
/// A machine pool's scale set and its instances were deleted (event).
pub const SCALE_SET_DELETED: &str = "ScaleSetDeleted";
/// A machine pool's scale set holds as many up-to-date, running instances as asked.
pub const SCALE_SET_READY: &str = "ScaleSetReady";
/// A machine pool's scale set has fewer instances than asked.
pub const SCALING_UP: &str = "ScalingUp";
/// A machine pool's scale set has more instances than asked; the surplus is being drained and
/// removed.
pub const SCALING_DOWN: &str = "ScalingDown";
/// A machine pool's instances are being replaced by instances of its current model.
pub const ROLLING_OUT: &str = "RollingOut";
