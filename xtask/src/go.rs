//! Building commands from the Go module proxy through the small wrapper main modules in
//! `xtask/go/<name>/` (DESIGN.md §8).
//!
//! Every build runs with the machine's own toolchain (`GOTOOLCHAIN=local`), read-only against the
//! checked-in `go.sum` (`-mod=readonly`: a module whose checksum differs is an error, nothing is
//! re-resolved), without cgo, and with Go's module and build caches under
//! `<cache>/go/{mod,build}` so that a second build on the same machine — a CI run after a session —
//! compiles nothing again.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capi_testing::envtest::cache_root;

use crate::command::output;
use crate::workspace_root;

/// The oldest Go toolchain the wrapper modules build with (their `go` directive).
const MINIMUM_GO_MINOR: u32 = 26;

/// How often a running build reports that it is still going.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// One wrapper main module under `xtask/go/`.
pub(crate) struct GoModule {
    dir: PathBuf,
}

/// A command to build: its package path and the file name to give the binary.
pub(crate) struct Target<'a> {
    pub(crate) package: &'a str,
    pub(crate) binary: &'a str,
}

impl GoModule {
    /// The wrapper module `xtask/go/<name>`.
    pub(crate) fn named(name: &str) -> Self {
        Self {
            dir: workspace_root().join("xtask").join("go").join(name),
        }
    }

    /// The module's directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The version the module's `go.mod` requires of `module`, or its replacement's version when
    /// the module is replaced by another version (read with `go mod edit -json`). An error when
    /// it is not required, or replaced by a directory.
    pub(crate) fn required_version(&self, module: &str) -> Result<String> {
        ensure_toolchain()?;
        let mut command = self.go();
        command.args(["mod", "edit", "-json"]);
        let go_mod: serde_json::Value = serde_json::from_str(&output(&mut command)?)
            .with_context(|| format!("`go mod edit -json` in {}", self.dir.display()))?;
        required_version(&go_mod, module).with_context(|| {
            format!(
                "{} does not pin {module} to a version",
                self.dir.join("go.mod").display()
            )
        })
    }

    /// Builds `targets` into `out_dir` with `ldflags`, printing progress every 30 s: in one
    /// `go build` where their packages' names differ (the packages they share are compiled once,
    /// and the two cores stay busy through each binary's link), one build per clash otherwise. A
    /// binary appears under its name only once it is complete: an interrupted build leaves
    /// nothing that looks built.
    pub(crate) fn build(
        &self,
        targets: &[Target<'_>],
        ldflags: &str,
        out_dir: &Path,
    ) -> Result<()> {
        ensure_toolchain()?;
        let staging = out_dir.join(".partial");
        for batch in batches(targets) {
            // What an interrupted build left, if anything.
            let _ = std::fs::remove_dir_all(&staging);
            std::fs::create_dir_all(&staging)
                .with_context(|| format!("creating {}", staging.display()))?;
            let mut command = self.go();
            command
                .args(["build", "-v", "-ldflags", ldflags, "-o"])
                // A trailing slash: every package's binary goes into the directory.
                .arg(format!("{}/", staging.display()))
                .args(batch.iter().map(|t| t.package));
            let names: Vec<&str> = batch.iter().map(|t| t.binary).collect();
            run_with_progress(&mut command, &names.join(", "))?;
            for target in batch {
                let built = staging.join(package_binary(target.package));
                let binary = out_dir.join(target.binary);
                std::fs::rename(&built, &binary)
                    .with_context(|| format!("moving {} into place", binary.display()))?;
            }
        }
        let _ = std::fs::remove_dir_all(&staging);
        Ok(())
    }

    /// Downloads the module's dependencies into the module cache (verified against `go.sum`) and
    /// returns the directory of `module` there — to read files a module ships (CRDs, templates).
    pub(crate) fn module_dir(&self, module: &str) -> Result<PathBuf> {
        ensure_toolchain()?;
        let mut command = self.go();
        command.args([
            "list",
            "-m",
            "-f",
            "{{if .Replace}}{{.Replace.Dir}}{{else}}{{.Dir}}{{end}}",
            module,
        ]);
        // `go list -m` does not download; `go mod download` of the one module does.
        let mut download = self.go();
        download.args(["mod", "download", module]);
        output(&mut download)?;
        let dir = output(&mut command)?;
        let dir = PathBuf::from(dir.trim());
        if dir.as_os_str().is_empty() || !dir.is_dir() {
            bail!("{module} is not in the module cache after `go mod download`");
        }
        Ok(dir)
    }

    fn go(&self) -> Command {
        let mut command = Command::new("go");
        command.current_dir(&self.dir);
        apply_environment(&mut command);
        command
    }
}

/// Removes the siblings of `current`: what other revisions of a cached build left behind.
pub(crate) fn remove_other_revisions(current: &Path) {
    let Some(parent) = current.parent() else {
        return;
    };
    for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let path = entry.path();
        if path != current && path.is_dir() {
            println!("    removing another revision: {}", path.display());
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// The environment every Go command of this project runs in.
fn apply_environment(command: &mut Command) {
    let go_cache = go_cache_root();
    command
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=readonly")
        .env("GOMODCACHE", go_cache.join("mod"))
        .env("GOCACHE", go_cache.join("build"))
        .env("CGO_ENABLED", "0")
        .env_remove("GOPATH")
        .env_remove("GOWORK");
}

/// `<cache>/go`: Go's module and build caches.
pub(crate) fn go_cache_root() -> PathBuf {
    cache_root().join("go")
}

/// Fails with what to install when `go` is missing or older than the wrapper modules need.
fn ensure_toolchain() -> Result<()> {
    let version = output(Command::new("go").args(["env", "GOVERSION"])).context(
        "the Go toolchain is needed to build the local control plane: install Go 1.26 or newer \
         (https://go.dev/dl) and put its `go` on PATH",
    )?;
    let version = version.trim();
    let minor = version
        .strip_prefix("go1.")
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|minor| minor.parse::<u32>().ok());
    match minor {
        Some(minor) if minor >= MINIMUM_GO_MINOR => Ok(()),
        _ => bail!(
            "`go` on PATH is {version}; the wrapper modules in xtask/go need go1.{MINIMUM_GO_MINOR} \
             or newer (GOTOOLCHAIN=local: no toolchain is downloaded). Put a newer Go first on PATH."
        ),
    }
}

/// Runs a `go build -v`, counting the packages it compiles and printing the count every 30 s;
/// on failure, the error carries the build's last lines.
fn run_with_progress(command: &mut Command, what: &str) -> Result<()> {
    let started = Instant::now();
    println!("    building {what} …");
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting `go build`")?;
    let compiled = Arc::new(AtomicUsize::new(0));
    let stderr = child.stderr.take().context("`go build` has no stderr")?;
    let counter = Arc::clone(&compiled);
    let reader = std::thread::spawn(move || {
        let mut last = std::collections::VecDeque::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            counter.fetch_add(1, Ordering::Relaxed);
            if last.len() == 30 {
                last.pop_front();
            }
            last.push_back(line);
        }
        last.into_iter().collect::<Vec<_>>().join("\n")
    });
    let mut reported = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for `go build`")? {
            break status;
        }
        if reported.elapsed() >= PROGRESS_EVERY {
            reported = Instant::now();
            println!(
                "    … {what}: {} packages compiled, {:.0?}",
                compiled.load(Ordering::Relaxed),
                started.elapsed()
            );
        }
        crate::command::pause(Duration::from_millis(200));
    };
    let tail = reader.join().unwrap_or_default();
    if !status.success() {
        bail!("building {what} failed ({status}):\n{tail}");
    }
    println!("    built {what} ({:.0?})", started.elapsed());
    Ok(())
}

/// `targets` in as few groups as there can be with no two packages of one group giving their
/// binaries the same file name, in order.
fn batches<'t, 'a>(targets: &'t [Target<'a>]) -> Vec<Vec<&'t Target<'a>>> {
    let mut batches: Vec<Vec<&Target<'a>>> = Vec::new();
    for target in targets {
        let name = package_binary(target.package);
        let free = batches
            .iter_mut()
            .find(|batch| batch.iter().all(|t| package_binary(t.package) != name));
        match free {
            Some(batch) => batch.push(target),
            None => batches.push(vec![target]),
        }
    }
    batches
}

/// The file name `go build -o <dir>/` gives a main package's binary: its path's last element,
/// or the one before it when the last is a major version suffix (`…/kustomize/v5`: `kustomize`).
fn package_binary(package: &str) -> &str {
    let mut elements = package.rsplit('/');
    let last = elements.next().unwrap_or(package);
    // Go's rule: `v` and digits, not starting with 0, and not `v1`.
    let digits = last.strip_prefix('v').unwrap_or("");
    let is_major_version = !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit())
        && !digits.starts_with('0')
        && digits != "1";
    match elements.next() {
        Some(before) if is_major_version => before,
        _ => last,
    }
}

/// The version `go_mod` (`go mod edit -json`) requires of `module`, honouring a `replace` of it:
/// the replacement's version, or `None` for a directory replacement.
fn required_version(go_mod: &serde_json::Value, module: &str) -> Option<String> {
    let entries = |key: &str| go_mod[key].as_array().cloned().unwrap_or_default();
    if let Some(replace) = entries("Replace")
        .into_iter()
        .find(|r| r["Old"]["Path"] == module)
    {
        return replace["New"]["Version"].as_str().map(str::to_string);
    }
    entries("Require")
        .into_iter()
        .find(|r| r["Path"] == module)
        .and_then(|r| r["Version"].as_str().map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_whose_binaries_would_clash_are_built_apart() {
        let target = |package| Target {
            package,
            binary: "x",
        };
        let targets = [
            target("sigs.k8s.io/cluster-api/core"),
            target("sigs.k8s.io/cluster-api/bootstrap/kubeadm"),
            target("sigs.k8s.io/cluster-api/controlplane/kubeadm"),
            target("sigs.k8s.io/cluster-api/test/infrastructure/docker"),
        ];
        let packages: Vec<Vec<&str>> = batches(&targets)
            .iter()
            .map(|batch| batch.iter().map(|t| t.package).collect())
            .collect();
        assert_eq!(
            packages,
            [
                vec![
                    "sigs.k8s.io/cluster-api/core",
                    "sigs.k8s.io/cluster-api/bootstrap/kubeadm",
                    "sigs.k8s.io/cluster-api/test/infrastructure/docker",
                ],
                vec!["sigs.k8s.io/cluster-api/controlplane/kubeadm"],
            ]
        );
    }

    #[test]
    fn a_major_version_suffix_does_not_name_the_binary() {
        assert_eq!(
            package_binary("sigs.k8s.io/kustomize/kustomize/v5"),
            "kustomize"
        );
        assert_eq!(package_binary("k8s.io/kubernetes/cmd/kubeadm"), "kubeadm");
        assert_eq!(package_binary("example.com/tools/v"), "v");
        assert_eq!(package_binary("example.com/tools/v1"), "v1");
        assert_eq!(package_binary("example.com/tools/v05"), "v05");
        assert_eq!(package_binary("example.com/tools/v10"), "tools");
        assert_eq!(package_binary("v2"), "v2");
    }

    #[test]
    fn required_versions_come_from_require_and_replace() {
        let go_mod = serde_json::json!({
            "Require": [
                {"Path": "go.etcd.io/etcd/server/v3", "Version": "v3.6.8"},
                {"Path": "k8s.io/kubernetes", "Version": "v1.36.3", "Indirect": true},
                {"Path": "k8s.io/api", "Version": "v0.0.0"},
                {"Path": "example.com/local", "Version": "v1.0.0"},
            ],
            "Replace": [
                {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "k8s.io/api", "Version": "v0.36.3"}},
                {"Old": {"Path": "example.com/local"}, "New": {"Path": "../local"}},
            ],
        });
        let version = |module| required_version(&go_mod, module);
        assert_eq!(
            version("go.etcd.io/etcd/server/v3").as_deref(),
            Some("v3.6.8")
        );
        assert_eq!(version("k8s.io/kubernetes").as_deref(), Some("v1.36.3"));
        assert_eq!(version("k8s.io/api").as_deref(), Some("v0.36.3"));
        assert_eq!(
            version("example.com/local"),
            None,
            "a directory has no version"
        );
        assert_eq!(version("k8s.io/client-go"), None);
    }

    #[test]
    fn the_checked_in_modules_read_with_go_mod_edit() {
        let pinned = GoModule::named("envtest")
            .required_version("k8s.io/api")
            .unwrap_or_else(|e| panic!("{e:#}"));
        assert!(pinned.starts_with("v0."), "{pinned}");
    }
}
