//! Developer automation for the capi-rs workspace: `cargo xtask <command>`.
//!
//! - `envtest`: provision etcd, kube-apiserver and kubeadm for tests (honours `KUBEBUILDER_ASSETS`;
//!   otherwise builds them from the Go module proxy once per version and caches them).
//! - `crds [--check]`: write (or check) the generated CRD YAML in `crds/`.
//! - `openstack <install|start|stop>`: a loopback-only OpenStack for the OpenStack provider's
//!   integration tests (`start` prints the `clouds.yaml` variable to export).
//! - `upstream <install|start|stop>`: upstream Cluster API v1.14 (core, kubeadm bootstrap and
//!   control plane, CAPD's in-memory backend) built from the Go module proxy and run as a peer on
//!   a local control plane (`start` prints the `KUBECONFIG`).
//! - `test`: everything CI checks — provisioning, fmt, CRDs, clippy, unit, integration and doc tests.
//! - `quickstart [--keep-running]`: start a local control plane, install the CRDs, apply the sample
//!   cluster and show it.
//! - `bench [scenario]... [flags]`: scale scenarios on the in-memory provider, printed and written
//!   as JSON to `benches/results/` (see `bench/mod.rs`).
//! - `chaos [flags]`: a cluster built through cloud faults, 409s, manager SIGKILLs and an API
//!   server restart, then deleted; fails unless no instance was duplicated or leaked and nothing
//!   was left behind (see `chaos/mod.rs`).

mod bench;
mod chaos;
mod command;
mod crds;
mod envtest;
mod go;
mod manifests;
mod openstack;
mod quickstart;
mod test;
mod upstream;

use std::path::PathBuf;

use anyhow::{Result, bail};

const USAGE: &str = "usage: cargo xtask <envtest | crds [--check] | openstack <install|start|stop> | upstream <install|start|stop> | test | quickstart [--keep-running] | bench [all|one-cluster|clusters|latency] [--machines N] [--clusters N] [--boot-ms MS] [--idle-seconds S] [--qps F] [--burst N] [--concurrency N] [--out DIR] | chaos [--machines N] [--error-rate F] [--conflict-rate F] [--kills N] [--out DIR]>";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        bail!("{USAGE}");
    };
    let flag = |name: &str| rest.iter().any(|a| a == name);
    if flag("--help") || flag("-h") {
        println!("{USAGE}");
        return Ok(());
    }
    if command == "openstack" {
        return openstack::command(rest.first().map(String::as_str));
    }
    if command == "upstream" {
        return upstream::command(
            rest.first().map(String::as_str),
            rest.get(1..).unwrap_or(&[]),
        );
    }
    if command == "chaos" {
        return chaos::run_chaos(chaos::Options::parse(rest)?);
    }
    if command == "bench" {
        return bench::run_bench(bench::Options::parse(rest)?);
    }
    if let Some(unknown) = rest
        .iter()
        .find(|a| !matches!(a.as_str(), "--check" | "--keep-running"))
    {
        bail!("unknown argument {unknown:?}\n{USAGE}");
    }
    match command.as_str() {
        "envtest" => {
            let dir = envtest::ensure()?;
            println!("KUBEBUILDER_ASSETS={}", dir.display());
            Ok(())
        }
        "crds" => crds::run(flag("--check")),
        "test" => test::run_all(),
        "quickstart" => quickstart::run(flag("--keep-running")),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown command {other:?}\n{USAGE}"),
    }
}

/// The workspace root (the parent of this crate's manifest directory).
fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or(manifest_dir)
}
