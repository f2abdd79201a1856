//! `cargo xtask quickstart`: the README's main job.
//!
//! Today: provision and start the local control plane, install the core CRDs, apply the sample
//! cluster from `config/samples/`, and show what the API server stores, as `kubectl get` would.
//! The samples refer to upstream's Docker provider, which does not exist here, so they are stored
//! and validated, not reconciled; the output says so. (Running a cluster end to end with the
//! in-memory provider and the core controllers is the CLI issue's quickstart.)

use std::time::Instant;

use anyhow::{Context, Result};
use capi_testing::envtest::{Assets, ControlPlane};
use capi_testing::{install_crds, manifest, table};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use crate::command::step;
use crate::workspace_root;

const NAMESPACE: &str = "quickstart";
const SAMPLES: &[&str] = &[
    "cluster.yaml",
    "machine.yaml",
    "machinedeployment.yaml",
    "machineset.yaml",
    "machinehealthcheck.yaml",
];

pub(crate) fn run(keep_running: bool) -> Result<()> {
    step("Local control plane binaries (etcd, kube-apiserver)");
    let assets_dir = crate::envtest::ensure()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        step("Starting etcd + kube-apiserver on loopback");
        let started = Instant::now();
        let control_plane = ControlPlane::start_with(&Assets::in_dir(&assets_dir)?).await?;
        println!("    API server {} ready in {:.1?}", control_plane.url(), started.elapsed());
        let client = control_plane.client().await?;

        step("Installing the Cluster API CRDs (cluster.x-k8s.io/v1beta2)");
        let crds = capi_core::crd::core();
        install_crds(&client, &crds).await?;
        for crd in &crds {
            println!("    {}", crd.metadata.name.as_deref().unwrap_or_default());
        }

        step(&format!("Applying the sample cluster from config/samples/ into namespace {NAMESPACE:?}"));
        let namespace = Namespace { metadata: ObjectMeta { name: Some(NAMESPACE.into()), ..ObjectMeta::default() }, ..Namespace::default() };
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await?;
        for sample in SAMPLES {
            let path = workspace_root().join("config/samples").join(sample);
            let yaml = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let objects = manifest::parse(&yaml).with_context(|| format!("parsing {}", path.display()))?;
            for created in manifest::create_all(&client, NAMESPACE, &objects).await.with_context(|| format!("applying {}", path.display()))? {
                let kind = created.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("object");
                println!("    {kind}/{} created", created.metadata.name.as_deref().unwrap_or_default());
            }
        }

        step("What the API server stores (kubectl get)");
        for crd in &crds {
            let plural = &crd.spec.names.plural;
            let listing = table::get_table(&client, capi_core::api::GROUP, capi_core::api::VERSION, plural, Some(NAMESPACE)).await?;
            println!("\n$ kubectl get {plural} -n {NAMESPACE}\n{listing}");
        }
        println!(
            "These upstream samples (Docker provider) are validated and stored by a real kube-apiserver, not reconciled. \
             The core controllers, the bootstrap reconciler and the in-memory provider exist (see the README; \
             `inmemory-manager --with-bootstrap --with-core` runs them); the end-to-end quickstart comes with the CLI."
        );

        if keep_running {
            println!(
                "\nThe control plane keeps running. Use it with:\n    export KUBECONFIG={}\nPress Ctrl-C to stop.",
                control_plane.kubeconfig_path().display()
            );
            tokio::signal::ctrl_c().await?;
        }
        drop(control_plane);
        println!("\nQuickstart finished; the local control plane is stopped.");
        Ok(())
    })
}
