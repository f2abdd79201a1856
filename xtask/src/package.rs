//! `cargo xtask package`: every published crate packaged as `cargo publish` would upload it, and
//! each built from its own `.crate` against the others' (cargo's local registry for a workspace),
//! so that no crate reaches a file outside itself or a crate that is not published. Nothing is
//! uploaded; the `.crate` files are left in `<target>/package/`.
//!
//! Each crate is verified as a user depending on it alone would build it: only its own
//! dependencies' features on (not the workspace's union), at the versions the workspace's
//! `Cargo.lock` holds.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};

use crate::command::{cargo, output, run};

/// Packages and verifies every crate without `publish = false`.
pub(crate) fn run_all() -> Result<()> {
    package(true)
}

/// Packages every crate without `publish = false` into `<target>/package/`, and builds each from
/// its own `.crate` when `verify`.
///
/// Cargo takes a registry crate, once unpacked and built, to stay as it was for its name and
/// version: it unpacks it once, with the archive's fixed timestamps, and keeps what it built.
/// Ours change between runs at the same version, so the verification builds in a target
/// directory of its own (`<target>/package-verify`, its third-party crates kept between runs),
/// from which the artifacts and unpacked sources of every crate whose `.crate` changed since the
/// last verification are removed first.
pub(crate) fn package(verify: bool) -> Result<()> {
    let mut args = vec!["package", "--workspace", "--allow-dirty"];
    let unpublished = crate::command::workspace_packages(false)?;
    for name in &unpublished {
        args.extend(["--exclude", name.as_str()]);
    }
    let mut unverified = args.clone();
    unverified.push("--no-verify");
    // Library crates leave the Kubernetes version to the binary; built alone, they need one.
    run(cargo(&unverified).env("K8S_OPENAPI_ENABLED_VERSION", "1.33"))?;
    if !verify {
        return Ok(());
    }
    let verify_dir = crate::command::target_dir().join("package-verify");
    let stamp = verify_dir.join("verified.sha256");
    let verified = std::fs::read_to_string(&stamp).unwrap_or_default();
    let packaged = packaged()?;
    let lines: Vec<String> = packaged
        .iter()
        .map(|p| format!("{} {}", p.checksum, p.name))
        .collect();
    let changed: Vec<String> = packaged
        .iter()
        .zip(&lines)
        .filter(|(_, line)| !verified.lines().any(|l| l == line.as_str()))
        .map(|(p, _)| p.name.clone())
        .collect();
    forget_unpacked(&changed)?;
    forget_built(&verify_dir, &changed)?;
    let _ = std::fs::remove_file(&stamp);
    let verify_dir_text = verify_dir.display().to_string();
    args.extend(["--target-dir", verify_dir_text.as_str()]);
    run(cargo(&args).env("K8S_OPENAPI_ENABLED_VERSION", "1.33"))?;
    std::fs::write(&stamp, lines.join("\n"))?;
    Ok(())
}

/// A packaged crate of the workspace.
pub(crate) struct Packaged {
    /// The crate's name.
    pub(crate) name: String,
    /// Its `.crate` file.
    pub(crate) file: PathBuf,
    /// The file's SHA-256.
    pub(crate) checksum: String,
}

/// The `.crate` of every published crate, as the last `cargo package` wrote it.
pub(crate) fn packaged() -> Result<Vec<Packaged>> {
    let dir = crate::command::target_dir().join("package");
    let suffix = format!("-{}.crate", env!("CARGO_PKG_VERSION"));
    let mut packaged = Vec::new();
    for name in crate::command::workspace_packages(true)? {
        let file = dir.join(format!("{name}{suffix}"));
        if !file.is_file() {
            bail!("no {}: package the crates first", file.display());
        }
        let checksum = sha256(&file)?;
        packaged.push(Packaged {
            name,
            file,
            checksum,
        });
    }
    Ok(packaged)
}

/// The SHA-256 of `file`, in hex.
pub(crate) fn sha256(file: &Path) -> Result<String> {
    let out = output(Command::new("sha256sum").arg(file))?;
    let sum = out.split_whitespace().next().unwrap_or_default();
    if sum.len() != 64 {
        bail!("sha256sum printed no checksum for {}", file.display());
    }
    Ok(sum.to_string())
}

/// Removes the fingerprints of `crates` (`<name>-<16 hex digits>` under `.fingerprint`) from
/// the target directory `dir`, so that cargo builds them again.
pub(crate) fn forget_built(dir: &Path, crates: &[String]) -> Result<()> {
    let Ok(profiles) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for profile in profiles.flatten() {
        let Ok(fingerprints) = std::fs::read_dir(profile.path().join(".fingerprint")) else {
            continue;
        };
        for fingerprint in fingerprints.flatten() {
            let file_name = fingerprint.file_name();
            let file_name = file_name.to_string_lossy();
            let ours = crates.iter().any(|name| {
                file_name
                    .strip_prefix(name.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|hash| {
                        hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit())
                    })
            });
            if ours {
                std::fs::remove_dir_all(fingerprint.path()).map_err(|error| {
                    anyhow::anyhow!("removing {}: {error}", fingerprint.path().display())
                })?;
            }
        }
    }
    Ok(())
}
/// Removes what cargo unpacked of `crates` from the local registry of an earlier verification
/// (`$CARGO_HOME/registry/src/<registry>/<name>-<version>/`, in any registry but crates.io's).
/// Cargo unpacks a registry crate once per name and version, trusting it never changes; ours do
/// between runs at the same version, and a verification would otherwise build a crate against
/// its dependencies' sources of an earlier run.
fn forget_unpacked(crates: &[String]) -> Result<()> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".cargo"))
        });
    let Some(sources) = cargo_home.map(|home| home.join("registry").join("src")) else {
        return Ok(());
    };
    let Ok(registries) = std::fs::read_dir(&sources) else {
        return Ok(());
    };
    let version = env!("CARGO_PKG_VERSION");
    for registry in registries.flatten() {
        if registry
            .file_name()
            .to_string_lossy()
            .starts_with("index.crates.io-")
        {
            continue;
        }
        for name in crates {
            let unpacked = registry.path().join(format!("{name}-{version}"));
            if unpacked.is_dir() {
                std::fs::remove_dir_all(&unpacked)
                    .map_err(|error| anyhow::anyhow!("removing {}: {error}", unpacked.display()))?;
            }
        }
    }
    Ok(())
}
