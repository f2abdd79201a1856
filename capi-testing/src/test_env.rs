//! A control plane with CRDs installed, and a namespace per test.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};

use crate::envtest::{ControlPlane, EnvtestError};

const CRD_TIMEOUT: Duration = Duration::from_secs(30);

/// A running local control plane with CRDs installed.
///
/// Tests share one `TestEnv` per process or start their own; either way each test should work in
/// its own namespace from [`TestEnv::namespace`].
pub struct TestEnv {
    control_plane: ControlPlane,
    client: Client,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("control_plane", &self.control_plane)
            .finish_non_exhaustive()
    }
}

impl TestEnv {
    /// Starts a control plane and installs the core Cluster API CRDs.
    pub async fn start() -> Result<Self, EnvtestError> {
        Self::start_with_crds(&capi_core::crd::core()).await
    }

    /// Starts a control plane and installs the given CRDs (for example the core CRDs plus a
    /// provider's).
    pub async fn start_with_crds(crds: &[CustomResourceDefinition]) -> Result<Self, EnvtestError> {
        let control_plane = ControlPlane::start().await?;
        let client = control_plane.client().await?;
        install_crds(&client, crds).await?;
        Ok(Self {
            control_plane,
            client,
        })
    }

    /// A client authenticated as cluster admin.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The running control plane (URL, kubeconfig, logs).
    pub fn control_plane(&self) -> &ControlPlane {
        &self.control_plane
    }

    /// Creates a new namespace with a unique name and returns the name.
    pub async fn namespace(&self) -> Result<String, EnvtestError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await?;
        Ok(name)
    }
}

/// Creates (or replaces the spec of) each CRD and waits until the API server serves all of them.
pub async fn install_crds(
    client: &Client,
    crds: &[CustomResourceDefinition],
) -> Result<(), EnvtestError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                let mut current = api.get(&name).await?;
                current.spec = crd.spec.clone();
                current.metadata.labels = crd.metadata.labels.clone();
                api.replace(&name, &PostParams::default(), &current).await?;
            }
            Err(other) => return Err(other.into()),
        }
    }
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        match tokio::time::timeout(CRD_TIMEOUT, established).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) | Err(_) => return Err(EnvtestError::CrdNotEstablished { name }),
        }
    }
    Ok(())
}
