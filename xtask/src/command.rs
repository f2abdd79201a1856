//! Running external commands with visible progress.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// Prints a step header, as every long step of the xtasks does.
pub(crate) fn step(message: &str) {
    println!("\n==> {message}");
}

/// Steps that are timed: each [`Phases::step`] prints its header and ends the step before it;
/// when the phases are dropped — at the end of the run, or when a step fails — one line per step
/// gives its seconds, so that where a run's time went is read off its own output.
pub(crate) struct Phases {
    started: Instant,
    done: Vec<(String, f64)>,
    current: Option<(String, Instant)>,
}

impl Phases {
    /// No step yet; the total counts from now.
    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            done: Vec::new(),
            current: None,
        }
    }

    /// Ends the current step and starts one named `name`, printing its header.
    pub(crate) fn step(&mut self, name: &str) {
        self.end_current();
        step(name);
        self.current = Some((name.to_string(), Instant::now()));
    }

    fn end_current(&mut self) {
        if let Some((name, started)) = self.current.take() {
            self.done.push((name, started.elapsed().as_secs_f64()));
        }
    }
}

impl Drop for Phases {
    fn drop(&mut self) {
        self.end_current();
        println!("\n==> Time per phase");
        for (name, seconds) in &self.done {
            let name: String = name.chars().take(90).collect();
            println!("    {seconds:>7.1} s  {name}");
        }
        println!(
            "    {:>7.1} s  in all",
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// A `cargo` command in the workspace root, as a user would type it.
///
/// `cargo xtask` runs this process through `cargo run`, which adds the variables it gives a
/// running binary (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, …). Build scripts that watch them
/// (ring's, through `rerun-if-env-changed`) would see them change between a cargo started here and
/// one started from a shell, and rebuild — with everything that depends on them — at each switch.
/// They are removed, so a build started here reuses what one started from a shell made.
pub(crate) fn cargo(args: &[&str]) -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(program);
    command.args(args).current_dir(crate::workspace_root());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_run) {
            command.env_remove(&name);
        }
    }
    command
}

/// The cargo target directory: `$CARGO_TARGET_DIR`, else the workspace's `target/`.
pub(crate) fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"))
}

/// Whether `name` is one of the variables `cargo run` sets for the binary it runs.
fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(
            name,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
        )
}

/// Runs `command` with inherited output; fails with the command line if it fails.
pub(crate) fn run(command: &mut Command) -> Result<()> {
    let shown = describe(command);
    println!("    $ {shown}");
    let started = Instant::now();
    let status = command
        .status()
        .with_context(|| format!("cannot start `{shown}`"))?;
    if !status.success() {
        bail!(
            "`{shown}` failed ({status}) after {:.0?}",
            started.elapsed()
        );
    }
    println!("    ok ({:.1?})", started.elapsed());
    Ok(())
}

/// Runs `command` and returns its standard output; fails with its standard error if it fails.
pub(crate) fn output(command: &mut Command) -> Result<String> {
    let shown = describe(command);
    let out = command
        .output()
        .with_context(|| format!("cannot start `{shown}`"))?;
    if !out.status.success() {
        bail!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `program args…` runs and exits 0 (used to probe for installed tools).
pub(crate) fn succeeds(program: &str, args: &[&str]) -> bool {
    quietly_succeeds(Command::new(program).args(args))
}

/// Whether `command` runs and exits 0, its output discarded.
pub(crate) fn quietly_succeeds(command: &mut Command) -> bool {
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The workspace's own packages as `cargo metadata --no-deps` describes them.
pub(crate) fn workspace_metadata() -> Result<serde_json::Value> {
    let metadata = output(&mut cargo(&[
        "metadata",
        "--no-deps",
        "--format-version",
        "1",
    ]))?;
    serde_json::from_str(&metadata).context("reading `cargo metadata`")
}

/// The names of the workspace's packages, sorted, that are published (`published`: those
/// without `publish = false`) or not.
pub(crate) fn workspace_packages(published: bool) -> Result<Vec<String>> {
    let metadata = workspace_metadata()?;
    let mut names: Vec<String> = metadata["packages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        // `publish = false` is an empty list of registries; absent is every registry.
        .filter(|package| package["publish"].is_null() == published)
        .filter_map(|package| package["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    Ok(names)
}

/// A command run as root: directly when we are root, through `sudo` otherwise.
pub(crate) fn as_root(program: &str) -> Command {
    if is_root() {
        Command::new(program)
    } else {
        let mut command = Command::new("sudo");
        command.arg(program);
        command
    }
}

fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_ok_and(|uid| uid.trim() == "0")
}

fn describe(command: &Command) -> String {
    std::iter::once(command.get_program().to_string_lossy().into_owned())
        .chain(command.get_args().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sleeps the current thread: for the synchronous waits of the xtasks (a build, a background
/// process), which run outside any async runtime.
#[allow(clippy::disallowed_methods)] // not on a runtime worker: these callers are synchronous
pub(crate) fn pause(duration: std::time::Duration) {
    std::thread::sleep(duration);
}

/// The workspace's commit when this process first asked (see [`git_commit`]): a bench captures it
/// before it builds, so that its results name what was built even if the tree changes while it
/// runs (a 10 000-machine run takes most of an hour).
pub(crate) fn built_commit() -> &'static str {
    static COMMIT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    COMMIT.get_or_init(git_commit)
}

/// The workspace's current commit (short hash, `+dirty` when the tree has changes), or
/// `unknown` outside a git checkout.
pub(crate) fn git_commit() -> String {
    let root = crate::workspace_root();
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(&root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(commit) if !commit.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{commit}+dirty")
            } else {
                commit
            }
        }
        _ => "unknown".to_string(),
    }
}

/// `n` distinct loopback ports that were free a moment ago.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| {
            std::net::TcpListener::bind(("127.0.0.1", 0)).context("binding a free loopback port")
        })
        .collect::<Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::set_by_cargo_run;

    #[test]
    fn only_what_cargo_run_adds_is_removed() {
        for name in [
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "OUT_DIR",
        ] {
            assert!(set_by_cargo_run(name), "{name}");
        }
        for name in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "PATH",
        ] {
            assert!(!set_by_cargo_run(name), "{name}");
        }
    }
}
