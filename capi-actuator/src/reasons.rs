//! Condition and event reasons the loop writes. They are part of the API: users and alerts match
//! on them.

/// Reconciliation is paused.
pub const PAUSED: &str = "Paused";
/// Reconciliation is not paused.
pub const NOT_PAUSED: &str = "NotPaused";
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
/// The instance matches the spec.
pub const UP_TO_DATE: &str = "UpToDate";
/// Immutable fields of the spec differ from the instance.
pub const IMMUTABLE_FIELDS_CHANGED: &str = "ImmutableFieldsChanged";
/// The cluster infrastructure is being provisioned.
pub const INFRASTRUCTURE_PROVISIONING: &str = "InfrastructureProvisioning";
/// The cluster infrastructure is provisioned.
pub const INFRASTRUCTURE_READY: &str = "InfrastructureReady";
/// The cluster infrastructure was deleted (event).
pub const INFRASTRUCTURE_DELETED: &str = "InfrastructureDeleted";
/// Deletion waits for the cluster's machines to go first.
pub const WAITING_FOR_MACHINES_DELETION: &str = "WaitingForMachinesDeletion";
/// The bootstrap data Secret exists.
pub const DATA_SECRET_AVAILABLE: &str = "DataSecretAvailable";
/// Bootstrap data was rendered (event).
pub const DATA_SECRET_CREATED: &str = "DataSecretCreated";
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
