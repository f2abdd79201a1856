//! A loopback-only OpenStack for the OpenStack provider's integration tests.
//!
//! `xtask/openstack/local-openstack.sh` does the work (Debian's Zed packages: Keystone, Placement,
//! Nova with the fake driver, Glance, Neutron with the ML2 `test` driver, Octavia with noop drivers,
//! private PostgreSQL, MariaDB and RabbitMQ); this module picks free loopback ports for it, runs it
//! as root, and hands the tests the `clouds.yaml` it writes through [`CLOUDS_YAML_ENV`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::command::{as_root, run, step};
use crate::workspace_root;

/// Where the running instance lives (PostgreSQL and RabbitMQ must be able to enter it, so not
/// under a private home directory).
pub(crate) const BASE: &str = "/tmp/capi-rs-openstack";

/// The variable the provider's integration tests read: the path of a `clouds.yaml` whose cloud
/// `local` is the test cloud.
pub(crate) const CLOUDS_YAML_ENV: &str = "CAPI_RS_OPENSTACK_CLOUDS_YAML";

const PORT_NAMES: &[&str] = &[
    "KEYSTONE_PORT",
    "PLACEMENT_PORT",
    "NOVA_PORT",
    "GLANCE_PORT",
    "NEUTRON_PORT",
    "OCTAVIA_PORT",
    "RABBIT_PORT",
    "RABBIT_DIST_PORT",
    "EPMD_PORT",
    "PG_PORT",
    "MYSQL_PORT",
];

fn script() -> PathBuf {
    workspace_root().join("xtask/openstack/local-openstack.sh")
}

fn script_command(action: &str) -> Command {
    let mut command = as_root("bash");
    command.arg(script()).arg(action).env("BASE", BASE);
    command
}

/// Installs the packages (once; about 4 minutes).
pub(crate) fn install() -> Result<()> {
    run(&mut script_command("install"))
}

/// A started local OpenStack; stopped when dropped, so a failing test run leaves nothing behind.
pub(crate) struct LocalOpenStack {
    clouds_yaml: PathBuf,
}

impl LocalOpenStack {
    /// The `clouds.yaml` (cloud `local`, admin of project `admin`).
    pub(crate) fn clouds_yaml(&self) -> &Path {
        &self.clouds_yaml
    }
}

impl Drop for LocalOpenStack {
    fn drop(&mut self) {
        step("Stopping the local OpenStack");
        if let Err(error) = stop() {
            eprintln!("warning: {error:#}");
        }
    }
}

/// Starts a fresh instance on free loopback ports (a leftover one is stopped first).
pub(crate) fn start() -> Result<LocalOpenStack> {
    if Path::new(BASE).exists() {
        println!("    a previous instance is in {BASE}; stopping it first");
        stop()?;
    }
    let ports = crate::command::free_ports(PORT_NAMES.len())?;
    let mut command = script_command("start");
    for (name, port) in PORT_NAMES.iter().zip(&ports) {
        command.env(name, port.to_string());
    }
    let started = Instant::now();
    let guard = LocalOpenStack {
        clouds_yaml: Path::new(BASE).join("clouds.yaml"),
    };
    run(&mut command).context("the local OpenStack did not start; its logs are shown above")?;
    if !Path::new(BASE).join("ready").exists() {
        bail!("the local OpenStack start script ended without marking {BASE}/ready");
    }
    println!(
        "    local OpenStack ready in {:.0?}; {CLOUDS_YAML_ENV}={}",
        started.elapsed(),
        guard.clouds_yaml.display()
    );
    Ok(guard)
}

/// Stops the instance in [`BASE`] (if any) and removes its files.
pub(crate) fn stop() -> Result<()> {
    run(&mut script_command("stop"))
}

/// `cargo xtask openstack <install|start|stop>`.
/// What `cargo xtask openstack` does.
#[derive(Clone, Debug, clap::Subcommand)]
pub(crate) enum Action {
    /// Install the Debian packages and Python venv of the local OpenStack.
    Install,
    /// Install, then start it in the background; prints the `clouds.yaml` variable to export.
    Start,
    /// Stop it.
    Stop,
}

pub(crate) fn command(action: Action) -> Result<()> {
    match action {
        Action::Install => install(),
        Action::Start => {
            install()?;
            let instance = start()?;
            println!(
                "export {CLOUDS_YAML_ENV}={}\n(stop it with `cargo xtask openstack stop`)",
                instance.clouds_yaml().display()
            );
            std::mem::forget(instance);
            Ok(())
        }
        Action::Stop => stop(),
    }
}
