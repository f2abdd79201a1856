//! `cargo xtask test`: every check CI runs, in order of cost.

use std::process::Command;

use anyhow::Result;
use capi_testing::envtest::KUBEBUILDER_ASSETS;

use crate::command::{Phases, run, succeeds};

pub(crate) fn run_all() -> Result<()> {
    let mut phases = Phases::new();
    let cargo_in_root = crate::command::cargo;

    phases.step("Formatting (cargo fmt --check)");
    run(&mut cargo_in_root(&["fmt", "--all", "--check"]))?;

    // Debian packages and PyPI: mostly downloads and unpacking, beside the builds below (their
    // output interleaves with the builds' progress lines).
    phases.step(
        "In the background: the bootstrap validators, protoc, the local OpenStack's packages, moto \
         and Azure's models",
    );
    let installs = std::thread::spawn(install_test_peers);

    phases.step("Tools: rustfmt, clippy, cargo-nextest");
    ensure_tools()?;

    phases.step("Local control plane binaries (etcd, kube-apiserver, kubeadm)");
    let assets = crate::envtest::ensure()?;

    phases.step(
        "Upstream Cluster API peer (core, kubeadm bootstrap and control plane, CAPD in-memory)",
    );
    let upstream = crate::upstream::install()?;
    let with_assets = |mut command: Command| {
        command.env(KUBEBUILDER_ASSETS, &assets);
        command
    };

    phases.step("Waiting for the background installs");
    let azure_models = installs
        .join()
        .map_err(|_| anyhow::anyhow!("the background installs panicked"))??;

    // Its services start while the workspace compiles (about 90 s, much of it waiting on them);
    // if a step below fails, the guard waits for it and stops it.
    let openstack = Background::spawn(crate::openstack::start);

    phases.step("Generated CRDs are up to date");
    crate::crds::run(true)?;

    phases.step("Lints (cargo clippy -D warnings)");
    run(&mut cargo_in_root(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]))?;

    // One rustdoc run for both: its lints (broken intra-doc links among them) run whatever the
    // output format, and the JSON is what the public API is read from.
    phases.step(
        "API docs without broken links, and the published crates' public API is the committed one \
         (rustdoc -D warnings, api/)",
    );
    crate::public_api::run_all(true)?;

    phases.step("Doc tests");
    run(&mut with_assets(cargo_in_root(&[
        "test",
        "--doc",
        "--workspace",
        "--all-features",
    ])))?;

    // Built from their packages below, all at once: cargo's own verification builds each crate
    // alone, with only its own features, which rebuilt the shared crates once per feature set
    // (757 s of a warm run; `cargo xtask package` still verifies that way).
    phases.step("Every published crate packages (cargo package --no-verify)");
    crate::package::package(false)?;

    phases.step(
        "Every published crate builds from its own package, and a provider from `capictl new \
         provider`, outside the repository, on the packaged crates from a local registry: fmt, \
         clippy, its tests (cargo xtask scaffold)",
    );
    let version: capi_provider::clusterctl::Version = "0.1.0".parse()?;
    let repository = crate::command::target_dir().join("scaffold-target/clusterctl-repository");
    crate::scaffold::check(crate::scaffold::Checks {
        tests: true,
        image: None,
        release: Some((version.clone(), repository.clone())),
    })?;

    phases.step(
        "clusterctl releases of every provider and the scaffold's, read by the real clusterctl \
         (cargo xtask release)",
    );
    let mut providers = crate::release::write_workspace_providers(&version, &repository)?;
    providers.push(crate::scaffold::NAME.to_string());
    crate::release::check_with_clusterctl(
        &upstream.clusterctl(),
        &repository,
        &providers,
        &version,
    )?;

    phases.step("Waiting for the local OpenStack for the OpenStack provider's tests");
    let openstack = openstack.wait()?;
    phases.step("Starting moto_server for the AWS provider's tests");
    let moto = crate::moto::start()?;

    // Last, so that its summary line closes the run.
    phases.step("Unit and integration tests (cargo nextest)");
    // The integration tests spend much of their time waiting on API servers and timers: with one
    // test per core the cores sat idle 40 % of the time, with three tests on two cores 20 %
    // (a quarter less time).
    let threads = test_threads().to_string();
    let mut nextest = with_assets(cargo_in_root(&[
        "nextest",
        "run",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--no-fail-fast",
        "--test-threads",
        &threads,
    ]));
    nextest.env(crate::openstack::CLOUDS_YAML_ENV, openstack.clouds_yaml());
    nextest.env(crate::moto::ENDPOINT_ENV, moto.endpoint());
    nextest.env(crate::azure_models::PYTHON_ENV, &azure_models);
    let tests = run(&mut nextest);
    drop(moto);
    drop(openstack);
    tests?;

    println!("\nAll checks passed.");
    Ok(())
}

/// Tests at once: one and a half per core (the heavy ones still run one at a time, as
/// `.config/nextest.toml` groups them).
fn test_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    (cores * 3).div_ceil(2)
}

/// Work on a thread of its own whose result is wanted later. Dropped without [`Background::wait`]
/// (a step failed first), it waits for the work and drops its result, so that what it started is
/// stopped by its own guard rather than left running.
struct Background<T>(Option<std::thread::JoinHandle<Result<T>>>);

impl<T: Send + 'static> Background<T> {
    fn spawn(work: impl FnOnce() -> Result<T> + Send + 'static) -> Self {
        Self(Some(std::thread::spawn(work)))
    }

    fn wait(mut self) -> Result<T> {
        let Some(handle) = self.0.take() else {
            anyhow::bail!("the background work was already waited for");
        };
        handle
            .join()
            .map_err(|_| anyhow::anyhow!("the background work panicked"))?
    }
}

impl<T> Drop for Background<T> {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            drop(handle.join());
        }
    }
}

/// What the tests run against besides the local control plane and the upstream peer: the
/// bootstrap validators, protoc, the local OpenStack's packages, moto and Azure's models (whose
/// Python the Azure tests are pointed at, returned). Each says what it does as it goes.
fn install_test_peers() -> Result<std::path::PathBuf> {
    println!("    [background] bootstrap validators (cloud-init, ignition-validate)");
    ensure_validators()?;
    println!(
        "    [background] protoc for the etcd client (Debian's protobuf-compiler, libprotobuf-dev)"
    );
    ensure_protoc()?;
    println!(
        "    [background] the local OpenStack's packages (Keystone, Nova, Neutron, Octavia, Glance)"
    );
    crate::openstack::install()?;
    println!(
        "    [background] moto {} (the AWS API simulator, from PyPI) in a venv",
        crate::moto::VERSION
    );
    crate::moto::install()?;
    println!("    [background] Azure's API models (its official Python SDKs, from PyPI)");
    let models = crate::azure_models::install()?;
    println!("    [background] done");
    Ok(models)
}

/// The real validators the bootstrap tests run: Debian's `cloud-init` and `ignition` packages.
fn ensure_validators() -> Result<()> {
    let missing =
        !succeeds("cloud-init", &["--version"]) || !succeeds("ignition-validate", &["--version"]);
    if missing {
        apt_install(&["cloud-init", "ignition"])?;
    } else {
        println!("    cloud-init and ignition-validate are installed");
    }
    Ok(())
}

/// The features `etcd-client` (capi-control-plane) and `real-etcd` (provider-inmemory) build the
/// `etcd-client` crate, whose build script compiles etcd's protobuf definitions with `protoc` and
/// needs the well-known types of `libprotobuf-dev`.
pub(crate) fn ensure_protoc() -> Result<()> {
    let well_known_types = std::path::Path::new("/usr/include/google/protobuf/empty.proto");
    if succeeds("protoc", &["--version"]) && well_known_types.is_file() {
        println!("    protoc and the protobuf well-known types are installed");
        return Ok(());
    }
    apt_install(&["protobuf-compiler", "libprotobuf-dev"])
}

/// Installs Debian `packages` (as root, through sudo when needed), without recommends.
pub(crate) fn apt_install(packages: &[&str]) -> Result<()> {
    run(crate::command::as_root("apt-get").args(["update", "-q"]))?;
    run(crate::command::as_root("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

fn ensure_tools() -> Result<()> {
    let cargo_succeeds =
        |args: &[&str]| crate::command::quietly_succeeds(&mut crate::command::cargo(args));
    for component in ["rustfmt", "clippy"] {
        let probe = if component == "rustfmt" {
            "fmt"
        } else {
            "clippy"
        };
        if !cargo_succeeds(&[probe, "--version"]) {
            run(Command::new("rustup").args(["component", "add", component]))?;
        }
    }
    if !cargo_succeeds(&["nextest", "--version"]) {
        // A debug build: it orchestrates, the tests do the work; an optimised one takes minutes
        // longer to build cold.
        run(&mut crate::command::cargo(&[
            "install",
            "cargo-nextest",
            "--locked",
            "--debug",
        ]))?;
    }
    Ok(())
}
