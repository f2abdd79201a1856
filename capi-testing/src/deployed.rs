//! A provider's manager binary run the way it is deployed, for end-to-end tests: as the
//! ServiceAccount of its generated RBAC manifests (so the test fails when the shipped permissions
//! miss something), with a kubeconfig of its own, and JSON logs at debug level for every crate in
//! a file (so that a test can check everything any library logs — for credentials, say).
//!
//! ```no_run
//! # async fn demo(env: &capi_testing::TestEnv) -> Result<(), capi_testing::deployed::DeployedError> {
//! use capi_testing::deployed;
//!
//! let rbac = std::fs::read_to_string("config/aws/rbac.yaml")?;
//! let token =
//!     deployed::service_account_token(&env.client(), &rbac, "capi-aws-system", "capi-aws-manager")
//!         .await?;
//! let dir = tempfile::tempdir()?;
//! let log = dir.path().join("manager.log");
//! let manager = deployed::spawn(
//!     std::path::Path::new("target/debug/aws-manager"),
//!     env.control_plane(),
//!     &token,
//!     dir.path(),
//!     &log,
//!     &["--leader-elect", "capi-aws-system/capi-aws-manager"],
//! )?;
//! # drop(manager); Ok(()) }
//! ```

use std::path::Path;
use std::process::Stdio;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;

use crate::envtest::{ControlPlane, EnvtestError};
use crate::manifest::{self, ManifestError};

/// Why a deployed manager could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum DeployedError {
    /// The RBAC manifests did not parse or apply.
    #[error("the RBAC manifests: {0}")]
    Manifests(#[from] ManifestError),
    /// The API server refused a request.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// A file or the process could not be written or started.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The API server answered a token request without a token.
    #[error("the token request for {0} was answered without a token")]
    NoToken(String),
}

impl From<EnvtestError> for DeployedError {
    fn from(error: EnvtestError) -> Self {
        Self::Manifests(ManifestError::Api(error))
    }
}

/// Applies `rbac_yaml` (the generated ServiceAccount, roles and bindings) in `namespace`,
/// creating the namespace if it does not exist, and returns an hour-long token of
/// `service_account`.
pub async fn service_account_token(
    client: &Client,
    rbac_yaml: &str,
    namespace: &str,
    service_account: &str,
) -> Result<String, DeployedError> {
    let object: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}}))
        .map_err(|e| DeployedError::Io(e.into()))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(refused)) if refused.code == 409 => {}
        Err(error) => return Err(error.into()),
    }
    manifest::create_all(client, namespace, &manifest::parse(rbac_yaml)?).await?;
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .map_err(|e| DeployedError::Io(e.into()))?;
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(service_account, &PostParams::default(), &request)
        .await?
        .status
        .map(|s| s.token)
        .ok_or_else(|| DeployedError::NoToken(format!("{namespace}/{service_account}")))
}

/// A client acting as a namespace's owner: the ServiceAccount `tenant` in `namespace`, bound
/// there (a RoleBinding, nothing cluster-wide) to the Role `role_name` that `role_yaml` defines —
/// `config/tenant-role.yaml` in this workspace — and holding no other right.
pub async fn tenant_client(
    env: &crate::TestEnv,
    namespace: &str,
    role_yaml: &str,
    role_name: &str,
) -> Result<Client, DeployedError> {
    let binding = format!(
        "{role_yaml}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: tenant}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: tenant}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {role_name}}}
subjects: [{{kind: ServiceAccount, name: tenant}}]
"
    );
    let token = service_account_token(&env.client(), &binding, namespace, "tenant").await?;
    let config = env.control_plane().config_with_token(&token).await?;
    Ok(Client::try_from(config)?)
}

/// Starts `binary` as the holder of `token` on `api_server` (a kubeconfig written in `dir`,
/// `KUBECONFIG` pointing at it), with `--http-addr 127.0.0.1:0 --log-format json`, `RUST_LOG=debug`,
/// stdout and stderr into `log`, and `args`. The process is killed when the handle is dropped.
pub fn spawn(
    binary: &Path,
    api_server: &ControlPlane,
    token: &str,
    dir: &Path,
    log: &Path,
    args: &[&str],
) -> Result<tokio::process::Child, DeployedError> {
    let kubeconfig = dir.join("kubeconfig");
    let config = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "manager",
        "clusters": [{"name": "local", "cluster": {
            "server": api_server.url(),
            "certificate-authority": api_server.dir().join("ca.crt")}}],
        "users": [{"name": "manager", "user": {"token": token}}],
        "contexts": [{"name": "manager", "context": {"cluster": "local", "user": "manager"}}],
    });
    std::fs::write(&kubeconfig, config.to_string())?;
    let log = std::fs::File::create(log)?;
    let child = tokio::process::Command::new(binary)
        .args(["--http-addr", "127.0.0.1:0", "--log-format", "json"])
        .args(["--diagnostics-address", "127.0.0.1:0"])
        .args(args)
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()?;
    Ok(child)
}

/// The last `lines` lines of the file at `path` (empty if it cannot be read): a manager's log
/// for a failure message.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The last 30 warnings and errors of the JSON log at `path` (for a failure message).
pub fn warnings(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(r#""level":"WARN""#) || l.contains(r#""level":"ERROR""#))
        .collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The machines of `machines` split into control plane and workers, when there are exactly
/// `control_plane` + `workers` of them and every one is `Running` with a provider ID and not
/// being deleted; otherwise `Err` with each machine's phase.
pub async fn running_machines(
    machines: &kube::Api<capi_core::api::Machine>,
    control_plane: usize,
    workers: usize,
) -> Result<(Vec<capi_core::api::Machine>, Vec<capi_core::api::Machine>), String> {
    use kube::ResourceExt;
    let all = machines
        .list(&kube::api::ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items;
    let phases: Vec<String> = all
        .iter()
        .map(|m| format!("{}: {:?}", m.name_any(), m.phase()))
        .collect();
    let ready = all.iter().all(|m| {
        m.metadata.deletion_timestamp.is_none()
            && m.phase() == Some(capi_core::api::MachinePhase::Running)
            && m.spec.provider_id.is_some()
    });
    let (planes, nodes): (Vec<_>, Vec<_>) = all.into_iter().partition(|m| m.is_control_plane());
    if ready && planes.len() == control_plane && nodes.len() == workers {
        Ok((planes, nodes))
    } else {
        Err(format!("machines: {phases:?}"))
    }
}
