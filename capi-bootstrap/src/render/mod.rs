//! One rendering model, two outputs.
//!
//! [`plan`] turns a `KubeadmConfigSpec`, the machine's role and the cluster's facts into a
//! [`BootstrapPlan`]: files (kubeadm's configuration among them), users, NTP and the commands to
//! run. [`cloud_init::render`] and [`ignition::render`] write that plan as cloud-config or as
//! Ignition v3.3; both carry exactly the same files, users and commands.
//!
//! ```
//! use capi_bootstrap::api::KubeadmConfigSpec;
//! use capi_bootstrap::render::{self, ClusterFacts, KubernetesVersion, RenderInput, Role};
//!
//! let spec = KubeadmConfigSpec::default();
//! let input = RenderInput {
//!     spec: &spec,
//!     role: Role::JoinWorker { token: "abcdef.0123456789abcdef".into(), ca_cert_hashes: vec!["sha256:00".into()] },
//!     version: KubernetesVersion::parse("v1.30.2").unwrap(),
//!     cluster: ClusterFacts::new("demo", "10.0.0.10:6443"),
//!     resolved_files: vec![],
//!     extra_files: vec![],
//! };
//! let plan = render::plan(&input).unwrap();
//! let cloud_config = render::cloud_init::render(&plan);
//! assert!(cloud_config.starts_with("#cloud-config\n"));
//! assert!(cloud_config.contains("kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml"));
//! ```

pub mod cloud_init;
pub mod ignition;
pub mod kubeadm;

use base64::Engine;

use crate::api::{Encoding, File, KubeadmConfigSpec, Ntp, User};

/// Why bootstrap data cannot be rendered. Each is a configuration a user must fix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenderError {
    /// The machine's version is not a Kubernetes version.
    #[error("{0:?} is not a Kubernetes version like v1.30.2")]
    InvalidVersion(String),
    /// A file's permissions are not an octal mode.
    #[error("file {path}: permissions {permissions:?} are not an octal mode like 0640")]
    InvalidPermissions {
        /// The file.
        path: String,
        /// What was given.
        permissions: String,
    },
    /// A file's content does not decode with its encoding.
    #[error("file {path}: content is not valid {encoding}")]
    InvalidEncoding {
        /// The file.
        path: String,
        /// The declared encoding.
        encoding: &'static str,
    },
    /// A file refers to a Secret key that the caller did not resolve.
    #[error("file {path}: contentFrom secret {secret}/{key} was not resolved")]
    UnresolvedContent {
        /// The file.
        path: String,
        /// The Secret.
        secret: String,
        /// The key.
        key: String,
    },
    /// A user's name is not a login name (see [`is_login_name`]), or its `sudo` rule is more than
    /// one line: refused, since both become a path and a line in `/etc/sudoers.d`.
    #[error("users[{index}]: {reason}")]
    InvalidUser {
        /// The user's index in `users`.
        index: usize,
        /// What is wrong (never quotes the value).
        reason: &'static str,
    },
    /// `ignition.containerLinuxConfig.additionalConfig` is not an Ignition JSON fragment.
    #[error("ignition.containerLinuxConfig.additionalConfig is not Ignition JSON: {0}")]
    InvalidAdditionalConfig(String),
    /// A field is set that this renderer cannot carry out (for this format): refused rather than
    /// dropped.
    #[error("{field} is not supported{context}; {hint}")]
    Unsupported {
        /// The field's path in the spec.
        field: String,
        /// When it is not supported, e.g. ` with format ignition` (may be empty).
        context: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
}

/// A Kubernetes version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubernetesVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl KubernetesVersion {
    /// Parses `v1.30.2` or `1.30.2` (a pre-release or build suffix is ignored).
    pub fn parse(version: &str) -> Result<Self, RenderError> {
        let invalid = || RenderError::InvalidVersion(version.to_string());
        let core = version.strip_prefix('v').unwrap_or(version);
        let core = core.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core
            .split('.')
            .map(|p| p.parse::<u32>().map_err(|_| invalid()));
        let (Some(major), Some(minor), Some(patch), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        Ok(Self {
            major: major?,
            minor: minor?,
            patch: patch?,
        })
    }

    /// `v<major>.<minor>.<patch>`.
    pub fn to_tag(self) -> String {
        format!("v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What this machine does with kubeadm. Its `Debug` never shows the bootstrap token.
#[derive(Clone, PartialEq, Eq)]
pub enum Role {
    /// The first control-plane machine: `kubeadm init`, creating `token` for the others.
    Init {
        /// The bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`) to create for joining machines.
        token: String,
    },
    /// Another control-plane machine: `kubeadm join --control-plane`.
    JoinControlPlane {
        /// The bootstrap token.
        token: String,
        /// `sha256:<hex>` pins of the cluster CA's public key.
        ca_cert_hashes: Vec<String>,
    },
    /// A worker: `kubeadm join`.
    JoinWorker {
        /// The bootstrap token.
        token: String,
        /// `sha256:<hex>` pins of the cluster CA's public key.
        ca_cert_hashes: Vec<String>,
    },
}

impl std::fmt::Debug for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A bootstrap token lets anyone join the cluster.
        let (name, hashes) = match self {
            Self::Init { .. } => ("Init", None),
            Self::JoinControlPlane { ca_cert_hashes, .. } => {
                ("JoinControlPlane", Some(ca_cert_hashes))
            }
            Self::JoinWorker { ca_cert_hashes, .. } => ("JoinWorker", Some(ca_cert_hashes)),
        };
        let mut out = f.debug_struct(name);
        out.field("token", &"<redacted>");
        if let Some(hashes) = hashes {
            out.field("ca_cert_hashes", hashes);
        }
        out.finish()
    }
}

/// What the renderer needs to know about the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterFacts {
    /// The cluster's name.
    pub name: String,
    /// `host:port` of the control plane.
    pub control_plane_endpoint: String,
    /// Pod CIDRs.
    pub pod_cidrs: Vec<String>,
    /// Service CIDRs.
    pub service_cidrs: Vec<String>,
    /// The service DNS domain.
    pub service_domain: String,
}

impl ClusterFacts {
    /// Facts with upstream's defaults for networking (`192.168.0.0/16`, `10.96.0.0/12`,
    /// `cluster.local`).
    pub fn new(name: impl Into<String>, control_plane_endpoint: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            control_plane_endpoint: control_plane_endpoint.into(),
            pod_cidrs: vec!["192.168.0.0/16".into()],
            service_cidrs: vec!["10.96.0.0/12".into()],
            service_domain: "cluster.local".into(),
        }
    }
}

/// Everything one rendering needs. Its `Debug` shows neither the bootstrap token nor the
/// resolved Secret contents (nor the extra files' contents).
#[derive(Clone)]
pub struct RenderInput<'a> {
    /// The config.
    pub spec: &'a KubeadmConfigSpec,
    /// The machine's role.
    pub role: Role,
    /// The machine's Kubernetes version.
    pub version: KubernetesVersion,
    /// The cluster.
    pub cluster: ClusterFacts,
    /// The content of `files[].contentFrom` keys, by `(secret, key)`, as read by the caller.
    pub resolved_files: Vec<((String, String), Vec<u8>)>,
    /// Files a provider adds (for example a cloud provider configuration or a CA bundle); they
    /// are written after the user's files.
    pub extra_files: Vec<PlanFile>,
}

impl std::fmt::Debug for RenderInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let resolved: Vec<String> = self
            .resolved_files
            .iter()
            .map(|((secret, key), content)| format!("{secret}/{key}: <{} bytes>", content.len()))
            .collect();
        // The spec is left out: its inline file contents can hold keys.
        f.debug_struct("RenderInput")
            .field("role", &self.role)
            .field("version", &self.version)
            .field("cluster", &self.cluster)
            .field("resolved_files", &resolved)
            .field("extra_files", &self.extra_files)
            .finish_non_exhaustive()
    }
}

/// A file of the plan, with decoded content.
#[derive(Clone, PartialEq, Eq)]
pub struct PlanFile {
    /// The absolute path.
    pub path: String,
    /// The owning user.
    pub user: String,
    /// The owning group.
    pub group: String,
    /// The mode, e.g. `0o640`.
    pub mode: u32,
    /// The content.
    pub content: Vec<u8>,
    /// Append instead of replacing.
    pub append: bool,
    /// `content` is gzip-compressed; the node decompresses it when writing.
    pub gzip: bool,
}

impl std::fmt::Debug for PlanFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // File contents can hold keys and tokens.
        f.debug_struct("PlanFile")
            .field("path", &self.path)
            .field("mode", &format_args!("{:o}", self.mode))
            .field("len", &self.content.len())
            .finish_non_exhaustive()
    }
}

impl PlanFile {
    /// A root-owned file.
    pub fn new(path: impl Into<String>, mode: u32, content: impl Into<Vec<u8>>) -> Self {
        Self {
            path: path.into(),
            user: "root".into(),
            group: "root".into(),
            mode,
            content: content.into(),
            append: false,
            gzip: false,
        }
    }
}

/// The rendering model: what both formats write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapPlan {
    /// Files, in order.
    pub files: Vec<PlanFile>,
    /// Users.
    pub users: Vec<User>,
    /// NTP, if enabled.
    pub ntp: Option<Ntp>,
    /// Shell commands, in order: pre-kubeadm, kubeadm, post-kubeadm.
    pub commands: Vec<String>,
    /// Commands run early in every boot (`bootCommands`; cloud-config only).
    pub boot_commands: Vec<String>,
    /// Partitions and file systems (`diskSetup`; cloud-config only).
    pub disk_setup: Option<crate::api::DiskSetup>,
    /// Mount lines (`mounts`; cloud-config only).
    pub mounts: Vec<Vec<String>>,
    /// Extra Ignition (`additionalConfig`), already parsed.
    pub additional_ignition: Option<serde_json::Value>,
}

/// Where kubeadm's configuration is written on the node.
pub const KUBEADM_INIT_CONFIG: &str = "/run/kubeadm/kubeadm.yaml";
/// Where kubeadm's join configuration is written on the node.
pub const KUBEADM_JOIN_CONFIG: &str = "/run/kubeadm/kubeadm-join-config.yaml";
/// Written when bootstrap succeeded, as upstream's sentinel file.
pub const BOOTSTRAP_SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";

/// Builds the plan.
pub fn plan(input: &RenderInput<'_>) -> Result<BootstrapPlan, RenderError> {
    let spec = input.spec;
    let mut files = Vec::with_capacity(spec.files.len() + input.extra_files.len() + 1);
    for (i, file) in spec.files.iter().enumerate() {
        if file.content_format == Some(crate::api::ContentFormat::Template) {
            return Err(RenderError::Unsupported {
                field: format!("files[{i}].contentFormat: Template"),
                context: "",
                hint: "write the content out (contentFormat Raw) or generate it in preKubeadmCommands",
            });
        }
        files.push(plan_file(file, &input.resolved_files)?);
    }
    files.extend(input.extra_files.iter().cloned());

    let verbosity = spec
        .verbosity
        .map(|v| format!(" --v={v}"))
        .unwrap_or_default();
    let (config_path, subcommand) = match &input.role {
        Role::Init { .. } => (KUBEADM_INIT_CONFIG, "init"),
        Role::JoinControlPlane { .. } | Role::JoinWorker { .. } => (KUBEADM_JOIN_CONFIG, "join"),
    };
    // The sentinel is written only if kubeadm succeeded, as upstream does.
    let command = format!(
        "kubeadm {subcommand} --config {config_path}{verbosity} && mkdir -p /run/cluster-api && echo success > {BOOTSTRAP_SENTINEL}"
    );
    files.push(PlanFile::new(config_path, 0o640, kubeadm::render(input)));

    let mut commands = spec.pre_kubeadm_commands.clone();
    commands.push(command);
    commands.extend(spec.post_kubeadm_commands.iter().cloned());

    let additional_ignition = spec
        .ignition
        .as_ref()
        .and_then(|i| i.container_linux_config.as_ref())
        .and_then(|c| c.additional_config.as_deref())
        .filter(|c| !c.trim().is_empty())
        .map(|c| {
            serde_json::from_str(c).map_err(|e| RenderError::InvalidAdditionalConfig(e.to_string()))
        })
        .transpose()?;

    if spec
        .join_configuration
        .as_ref()
        .and_then(|j| j.discovery.as_ref())
        .and_then(|d| d.file.as_ref())
        .is_some_and(|f| f.kube_config.is_some())
    {
        return Err(RenderError::Unsupported {
            field: "joinConfiguration.discovery.file.kubeConfig".into(),
            context: "",
            hint: "write the kubeconfig with files[] and point kubeConfigPath at it",
        });
    }
    if let Some(disks) = &spec.disk_setup {
        for (i, partition) in disks.partitions.iter().enumerate() {
            let table = partition
                .table_type
                .unwrap_or(crate::api::PartitionTableType::Mbr);
            for (j, part) in partition.disk_layout.iter().enumerate() {
                if let Some(name) = &part.partition_type
                    && partition_type_code(name, table).is_none()
                {
                    return Err(RenderError::Unsupported {
                        field: format!(
                            "diskSetup.partitions[{i}].diskLayout[{j}].partitionType: {name}"
                        ),
                        context: " by cloud-init on this partition table",
                        hint: "cloud-init takes numeric partition types only: use Linux, LinuxSwap, NTFS (or Fat32 on gpt, LinuxExtended on mbr), or partition in bootCommands",
                    });
                }
            }
        }
    }
    let mut users = Vec::with_capacity(spec.users.len());
    for (i, user) in spec.users.iter().enumerate() {
        users.push(plan_user(i, user, &input.resolved_files)?);
    }
    Ok(BootstrapPlan {
        files,
        users,
        ntp: spec
            .ntp
            .clone()
            .filter(|n| n.enabled.unwrap_or(true) && !n.servers.is_empty()),
        commands,
        boot_commands: spec.boot_commands.clone(),
        disk_setup: spec.disk_setup.clone(),
        mounts: spec.mounts.clone(),
        additional_ignition,
    })
}

/// A user of the plan: `passwdFrom` resolved into `passwd` (a password hash).
fn plan_user(
    index: usize,
    user: &User,
    resolved: &[((String, String), Vec<u8>)],
) -> Result<User, RenderError> {
    if user.inactive == Some(true) {
        return Err(RenderError::Unsupported {
            field: format!("users[{index}].inactive"),
            context: "",
            hint: "lock the account with lockPassword and no sshAuthorizedKeys instead",
        });
    }
    if !is_login_name(&user.name) {
        return Err(RenderError::InvalidUser {
            index,
            reason: "name is not a login name: at most 32 of A-Z, a-z, 0-9, '_', '-' and '.', \
                     starting with a letter or '_', optionally ending in '$'",
        });
    }
    if user
        .sudo
        .as_deref()
        .is_some_and(|rule| rule.contains(['\n', '\r', '\0']))
    {
        return Err(RenderError::InvalidUser {
            index,
            reason: "sudo is more than one line",
        });
    }
    let mut user = user.clone();
    if let Some(from) = user.passwd_from.take() {
        let secret = from.secret;
        let hash = resolved
            .iter()
            .find(|((name, key), _)| *name == secret.name && *key == secret.key)
            .and_then(|(_, bytes)| String::from_utf8(bytes.clone()).ok())
            .ok_or_else(|| RenderError::UnresolvedContent {
                path: format!("users[{index}].passwdFrom"),
                secret: secret.name.clone(),
                key: secret.key.clone(),
            })?;
        user.passwd = Some(hash.trim_end().to_string());
    }
    Ok(user)
}

/// Whether `name` is a login name as shadow-utils' `useradd` accepts it
/// (`[A-Za-z_][A-Za-z0-9_.-]*[$]?`, at most 32 characters): nothing that could leave
/// `/etc/sudoers.d/<name>` or add a line to it.
pub fn is_login_name(name: &str) -> bool {
    let body = name.strip_suffix('$').unwrap_or(name);
    let mut chars = body.chars();
    name.len() <= 32
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn plan_file(
    file: &File,
    resolved: &[((String, String), Vec<u8>)],
) -> Result<PlanFile, RenderError> {
    let raw = match (&file.content, &file.content_from) {
        (_, Some(from)) => resolved
            .iter()
            .find(|((secret, key), _)| *secret == from.secret.name && *key == from.secret.key)
            .map(|(_, bytes)| bytes.clone())
            .ok_or_else(|| RenderError::UnresolvedContent {
                path: file.path.clone(),
                secret: from.secret.name.clone(),
                key: from.secret.key.clone(),
            })?,
        (Some(content), None) => content.clone().into_bytes(),
        (None, None) => Vec::new(),
    };
    let content = match file.encoding {
        None | Some(Encoding::Gzip) => raw,
        Some(Encoding::Base64) | Some(Encoding::GzipBase64) => {
            let compact: Vec<u8> = raw
                .into_iter()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map_err(|_| RenderError::InvalidEncoding {
                    path: file.path.clone(),
                    encoding: "base64",
                })?
        }
    };
    // Gzip content stays compressed: both formats can carry it (cloud-init `gzip`, Ignition
    // `compression: gzip`); the renderers mark it.
    let (user, group) = match file.owner.as_deref() {
        Some(owner) => match owner.split_once(':') {
            Some((user, group)) => (user.to_string(), group.to_string()),
            None => (owner.to_string(), owner.to_string()),
        },
        None => ("root".to_string(), "root".to_string()),
    };
    let mode = match file.permissions.as_deref() {
        None => 0o644,
        Some(permissions) => u32::from_str_radix(permissions, 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .ok_or_else(|| RenderError::InvalidPermissions {
                path: file.path.clone(),
                permissions: permissions.to_string(),
            })?,
    };
    let gzip = matches!(
        file.encoding,
        Some(Encoding::Gzip) | Some(Encoding::GzipBase64)
    );
    Ok(PlanFile {
        path: file.path.clone(),
        user,
        group,
        mode,
        content,
        append: file.append.unwrap_or(false),
        gzip,
    })
}

/// The numeric partition type cloud-init hands to `sfdisk` (mbr, hexadecimal digits read as a
/// code) or `sgdisk` (gpt) for one of upstream's type names. `None`: cloud-init cannot express it
/// (its schema takes integers only: no GUIDs, no codes with hexadecimal letters).
pub(crate) fn partition_type_code(
    name: &str,
    table: crate::api::PartitionTableType,
) -> Option<u32> {
    use crate::api::PartitionTableType::{Gpt, Mbr};
    match (name, table) {
        ("Linux", Mbr) => Some(83),
        ("Linux", Gpt) => Some(8300),
        ("LinuxSwap", Mbr) => Some(82),
        ("LinuxSwap", Gpt) => Some(8200),
        ("NTFS", Mbr) => Some(7),
        ("NTFS" | "Fat32", Gpt) => Some(700),
        ("LinuxExtended", Mbr) => Some(85),
        _ => None,
    }
}

#[cfg(test)]
mod debug_tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_tokens_or_secret_contents() {
        let token = "abcdef.0123456789abcdef".to_string();
        let spec = KubeadmConfigSpec::default();
        let input = RenderInput {
            spec: &spec,
            role: Role::JoinWorker {
                token: token.clone(),
                ca_cert_hashes: vec!["sha256:00".into()],
            },
            version: KubernetesVersion {
                major: 1,
                minor: 33,
                patch: 0,
            },
            cluster: ClusterFacts::new("demo", "10.0.0.1:6443"),
            resolved_files: vec![(("s".into(), "key".into()), b"PRIVATE-KEY".to_vec())],
            extra_files: vec![],
        };
        let shown = format!(
            "{input:?} {:?}",
            Role::Init {
                token: token.clone()
            }
        );
        assert!(!shown.contains(&token), "{shown}");
        assert!(!shown.contains("PRIVATE-KEY"), "{shown}");
        assert!(
            shown.contains("sha256:00") && shown.contains("s/key: <11 bytes>"),
            "{shown}"
        );
    }
}

#[cfg(test)]
mod user_tests {
    use super::*;

    fn plan_with(user: User) -> Result<BootstrapPlan, RenderError> {
        let spec = KubeadmConfigSpec {
            users: vec![user],
            ..Default::default()
        };
        plan(&RenderInput {
            spec: &spec,
            role: Role::Init {
                token: "abcdef.0123456789abcdef".into(),
            },
            version: KubernetesVersion {
                major: 1,
                minor: 33,
                patch: 0,
            },
            cluster: ClusterFacts::new("demo", "10.0.0.1:6443"),
            resolved_files: vec![],
            extra_files: vec![],
        })
    }

    fn user(name: &str, sudo: Option<&str>) -> User {
        User {
            name: name.into(),
            sudo: sudo.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn login_names_are_as_useradd_takes_them() {
        for good in [
            "capi",
            "_svc",
            "ops-1",
            "a.b",
            "machine$",
            "Admin",
            &"a".repeat(32),
        ] {
            assert!(is_login_name(good), "{good}");
        }
        for bad in [
            "",
            "../../etc/cron.d/x",
            "root\nALL",
            "1user",
            "-x",
            "a b",
            "a/b",
            &"a".repeat(33),
        ] {
            assert!(!is_login_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_user_name_that_would_leave_sudoers_d_is_refused_without_quoting_it() {
        let error = plan_with(user(
            "../../etc/cron.d/evil",
            Some("ALL=(ALL) NOPASSWD:ALL"),
        ))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            error.starts_with("users[0]: name is not a login name"),
            "{error}"
        );
        assert!(!error.contains("cron"), "{error}");
        let error = plan_with(user(
            "ops",
            Some("ALL=(ALL) ALL\nevil ALL=(ALL) NOPASSWD:ALL"),
        ))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert_eq!(error, "users[0]: sudo is more than one line");
        assert!(plan_with(user("ops", Some("ALL=(ALL) NOPASSWD:ALL"))).is_ok());
    }
}
