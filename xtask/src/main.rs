//! Developer automation for the capi-rs workspace: `cargo xtask <command>` (`--help` on each).
//!
//! - `envtest`: provision etcd, kube-apiserver and kubeadm for tests (honours `KUBEBUILDER_ASSETS`;
//!   otherwise builds them from the Go module proxy once per version and caches them).
//! - `crds [--check]`: write (or check) the generated CRD YAML in `crds/` and the manifests in
//!   `config/`.
//! - `openstack <install|start|stop>`: a loopback-only OpenStack for the OpenStack provider's
//!   integration tests (`start` prints the `clouds.yaml` variable to export).
//! - `moto <install|start|stop>`: moto's AWS API simulator on loopback for the AWS provider's
//!   integration tests (`start` prints the endpoint variable to export).
//! - `azure-models`: Azure's API models (its official Python SDKs) in a venv, which the Azure
//!   provider's tests check every ARM request and response against (prints the variable to
//!   export).
//! - `upstream <install|start|stop>`: upstream Cluster API v1.14 (core, kubeadm bootstrap and
//!   control plane, CAPD's in-memory backend) built from the Go module proxy and run as a peer on
//!   a local control plane (`start` prints the `KUBECONFIG`).
//! - `image [provider]...`: each manager's OCI image (buildah, `FROM scratch`, non-root), built
//!   twice to show it is reproducible, smoke-tested and written under `<target>/images/`.
//! - `release --version X.Y.Z [--out DIR] [--scaffold]`: each provider's clusterctl repository
//!   (components, metadata, templates), checked against clusterctl's provider contract.
//! - `package`: package every published crate and build each from its own `.crate`.
//! - `public-api [--check]`: write (or check) the public API of every published crate in `api/`.
//! - `test`: everything CI checks — provisioning, fmt, CRDs, clippy, docs and the public API,
//!   packaging, unit, integration and doc tests.
//! - `quickstart [--keep-running]`: start a local control plane, install the CRDs, apply the sample
//!   cluster and show it.
//! - `bench [scenario]... [flags]`: scale scenarios on the in-memory provider, printed and written
//!   as JSON to `benches/results/` (see `bench/mod.rs`).
//! - `chaos [flags]`: a cluster built through cloud faults, 409s, manager SIGKILLs and an API
//!   server restart, then deleted; fails unless no instance was duplicated or leaked and nothing
//!   was left behind (see `chaos/mod.rs`).

mod azure_models;
mod bench;
mod chaos;
mod command;
mod crds;
mod envtest;
mod go;
mod image;
mod manifests;
mod moto;
mod openstack;
mod package;
mod public_api;
mod quickstart;
mod release;
mod scaffold;
mod test;
mod upstream;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// Developer automation for the capi-rs workspace.
#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Provision etcd, kube-apiserver and kubeadm for tests (KUBEBUILDER_ASSETS wins; otherwise
    /// built from the Go module proxy once per version and cached).
    Envtest,
    /// Write the generated CRD YAML and manifests (or check that they are current).
    Crds {
        /// Fail if a checked-in file differs instead of writing it.
        #[arg(long)]
        check: bool,
    },
    /// A loopback-only OpenStack for the OpenStack provider's integration tests.
    Openstack {
        #[command(subcommand)]
        action: openstack::Action,
    },
    /// moto's AWS API simulator on loopback, for the AWS provider's integration tests.
    Moto {
        #[command(subcommand)]
        action: moto::Action,
    },
    /// Azure's API models (its official Python SDKs) in a venv, for the Azure provider's tests.
    AzureModels,
    /// Upstream Cluster API v1.14 (core, kubeadm bootstrap and control plane, CAPD's in-memory
    /// backend) built from the Go module proxy and run as a peer on a local control plane.
    Upstream {
        #[command(subcommand)]
        action: upstream::Action,
    },
    /// Build each provider manager's OCI image offline and reproducibly with buildah, smoke-test
    /// it and write it as an OCI archive under the target directory.
    Image(image::ImageArgs),
    /// Package every published crate and build each from its own `.crate` (nothing is uploaded).
    Package,
    /// Generate a provider with `capictl new provider` outside the repository, and build and
    /// test it against the packaged crates from a local registry (`--image`: and its image).
    Scaffold(scaffold::ScaffoldArgs),
    /// Write each provider's release (and with --scaffold the scaffold's) as a clusterctl
    /// repository, checked against clusterctl's provider contract.
    Release(release::ReleaseArgs),
    /// Write the public API of every published crate to `api/<crate>.txt` (or check it).
    PublicApi {
        /// Fail if the public API differs from api/ instead of writing it.
        #[arg(long)]
        check: bool,
    },
    /// Everything CI checks: provisioning, fmt, CRDs, clippy, docs, unit, integration and doc
    /// tests.
    Test,
    /// Start a local control plane, install the CRDs, apply the sample cluster and show it.
    Quickstart {
        /// Keep the control plane and the manager running after the cluster is shown.
        #[arg(long)]
        keep_running: bool,
    },
    /// Scale scenarios on the in-memory provider, printed and written as JSON to benches/results.
    Bench(bench::BenchArgs),
    /// A cluster built through cloud faults, 409s, manager SIGKILLs and an API server restart,
    /// then deleted; fails unless nothing was duplicated, leaked or left behind.
    Chaos(chaos::ChaosArgs),
}

fn main() -> Result<()> {
    let Cli { task } = Cli::parse();
    // The arguments after the task's name, recorded with bench and chaos results.
    let raw = || std::env::args().skip(2).collect::<Vec<_>>();
    match task {
        Task::Envtest => {
            let dir = envtest::ensure()?;
            println!("KUBEBUILDER_ASSETS={}", dir.display());
            Ok(())
        }
        Task::Crds { check } => crds::run(check),
        Task::Openstack { action } => openstack::command(action),
        Task::Moto { action } => moto::command(action),
        Task::AzureModels => {
            let python = azure_models::install()?;
            println!("export {}={}", azure_models::PYTHON_ENV, python.display());
            Ok(())
        }
        Task::Upstream { action } => upstream::command(action),
        Task::Image(args) => image::run_images(args),
        Task::Package => package::run_all(),
        Task::Scaffold(args) => scaffold::run_scaffold(args),
        Task::Release(args) => release::run_release(args),
        Task::PublicApi { check } => public_api::run_all(check),
        Task::Test => test::run_all(),
        Task::Quickstart { keep_running } => quickstart::run(keep_running),
        Task::Bench(args) => bench::run_bench(bench::Options::new(args, raw())),
        Task::Chaos(args) => chaos::run_chaos(chaos::Options::new(args, raw())),
    }
}

/// The workspace root (the parent of this crate's manifest directory).
fn workspace_root() -> PathBuf {
    // `cargo run` (the `cargo xtask` alias) names the manifest of the checkout it runs in; the
    // path compiled in is only a fallback, since clones sharing one target directory share one
    // xtask binary, built in whichever clone built it last.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or(manifest_dir)
}
