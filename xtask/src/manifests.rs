//! `cargo xtask crds` also writes the providers' clusterctl components and the standalone
//! manager's RBAC (`config/<provider>/`) from [`capi_cli::manifests`], or checks that the
//! checked-in ones are current.

use anyhow::{Context, Result, bail};

use crate::workspace_root;

/// Writes the manifests, or with `check` fails if the checked-in ones differ.
pub(crate) fn run(check: bool) -> Result<()> {
    for provider in capi_cli::manifests::PROVIDERS {
        write_or_check(provider, check)?;
    }
    Ok(())
}

fn write_or_check(provider: &str, check: bool) -> Result<()> {
    let dir = workspace_root().join("config").join(provider);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut stale = Vec::new();
    for (name, text) in capi_cli::manifests::config_files(provider)? {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).unwrap_or_default() != text {
            stale.push(name);
            if !check {
                std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    match (check, stale.is_empty()) {
        (_, true) => println!("manifests: {} is up to date", dir.display()),
        (true, false) => bail!(
            "stale manifests in {}: {}; run `cargo xtask crds`",
            dir.display(),
            stale.join(", ")
        ),
        (false, false) => println!("manifests: wrote {}", stale.join(", ")),
    }
    Ok(())
}
