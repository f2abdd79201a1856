//! `cargo xtask package`: every published crate packaged as `cargo publish` would upload it, and
//! each built from its own `.crate` against the others' (cargo's local registry for a workspace),
//! so that no crate reaches a file outside itself or a crate that is not published. Nothing is
//! uploaded; the `.crate` files are left in `<target>/package/`.
//!
//! Each crate is verified as a user depending on it alone would build it: only its own
//! dependencies' features on (not the workspace's union), at the versions the workspace's
//! `Cargo.lock` holds.

use anyhow::Result;

use crate::command::{cargo, run};

/// Packages and verifies every crate without `publish = false`.
pub(crate) fn run_all() -> Result<()> {
    package(true)
}

/// Packages every crate without `publish = false` into `<target>/package/`, building each from its
/// own `.crate` when `verify`.
pub(crate) fn package(verify: bool) -> Result<()> {
    let mut args = vec!["package", "--workspace", "--allow-dirty"];
    if !verify {
        args.push("--no-verify");
    }
    let unpublished = crate::command::workspace_packages(false)?;
    for name in &unpublished {
        args.extend(["--exclude", name.as_str()]);
    }
    let mut package = cargo(&args);
    // Library crates leave the Kubernetes version to the binary; built alone, they need one.
    package.env("K8S_OPENAPI_ENABLED_VERSION", "1.33");
    run(&mut package)
}
