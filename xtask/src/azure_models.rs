//! Azure's own API models for the Azure provider's tests: the official Python management SDKs
//! (`azure-mgmt-compute`, `-network`, `-resource`, from PyPI) in a venv of their own under the
//! cache, which `provider-azure/tests/arm_models/checker.py` checks every ARM request and response
//! against. The tests find its Python in [`PYTHON_ENV`].

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use capi_testing::envtest::cache_root;

use crate::command::{run, succeeds};

/// The pinned packages: each model is that of one ARM api-version (compute's virtual machines
/// `2026-04-01` and disks `2026-03-02`, network `2026-03-01`, resource groups `2025-04-01`),
/// the versions the provider speaks. Their dependencies are pinned too, so a run is repeatable.
pub(crate) const PACKAGES: [&str; 7] = [
    "azure-mgmt-compute==39.0.0",
    "azure-mgmt-network==33.1.0",
    "azure-mgmt-resource==26.0.0",
    "azure-mgmt-core==1.6.0",
    "azure-core==1.41.0",
    "isodate==0.7.2",
    "typing-extensions==4.15.0",
];

/// The variable the Azure provider's tests read: the venv's Python.
pub(crate) const PYTHON_ENV: &str = "CAPI_RS_AZURE_MODELS_PYTHON";

/// The venv, keyed by the pinned packages.
fn venv() -> PathBuf {
    let key: u64 = PACKAGES
        .iter()
        .flat_map(|p| p.bytes())
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    cache_root()
        .join("azure-models")
        .join(format!("{key:016x}"))
        .join("venv")
}

/// The venv's Python, installing the packages first (once; Debian's `python3-venv` first when
/// Python cannot make a venv).
pub(crate) fn install() -> Result<PathBuf> {
    let venv = venv();
    let python = venv.join("bin").join("python");
    let marker = venv.join("installed");
    if marker.is_file() {
        println!("    Azure's models are installed in {}", venv.display());
        return Ok(python);
    }
    if !succeeds("python3", &["-c", "import ensurepip, venv"]) {
        crate::test::apt_install(&["python3-venv"])?;
    }
    if let Some(parent) = venv.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv)
            .with_context(|| format!("removing the unfinished venv {}", venv.display()))?;
    }
    run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    let pip = venv.join("bin").join("pip");
    run(Command::new(&pip)
        .args(["install", "--quiet", "--no-deps"])
        .args(PACKAGES))?;
    std::fs::write(&marker, PACKAGES.join("\n"))
        .with_context(|| format!("writing {}", marker.display()))?;
    println!("    Azure's models installed in {}", venv.display());
    Ok(python)
}
