//! `cargo xtask crds`: the checked-in CRD YAML, generated from the Rust types.

use anyhow::{Context, Result, bail};

use crate::workspace_root;

/// Writes every generated CRD folder (`crds/core`, `crds/bootstrap`, `crds/control-plane`,
/// `crds/inmemory`, `crds/openstack`, `crds/aws`, `crds/azure`) and the providers' manifests
/// (`config/`), or with `check` fails if any differs from what the code generates.
pub(crate) fn run(check: bool) -> Result<()> {
    let sets = [
        ("core", capi_core::crd::core()),
        ("bootstrap", capi_bootstrap::api::crds()),
        ("control-plane", capi_control_plane::api::crds()),
        ("inmemory", provider_inmemory::api::crds()),
        ("openstack", provider_openstack::api::crds()),
        ("aws", provider_aws::api::crds()),
        ("azure", provider_azure::api::crds()),
    ];
    for (folder, crds) in sets {
        sync_folder(folder, &capi_core::crd::render(&crds)?, check)?;
    }
    crate::manifests::run(check)
}

fn sync_folder(folder: &str, rendered: &[capi_core::crd::RenderedCrd], check: bool) -> Result<()> {
    let dir = workspace_root().join("crds").join(folder);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut stale = capi_core::crd::stale_files(&dir, rendered);
    if !check {
        for crd in rendered.iter().filter(|c| stale.contains(&c.file_name)) {
            let path = dir.join(&crd.file_name);
            std::fs::write(&path, &crd.yaml)
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    let expected: Vec<&str> = rendered.iter().map(|c| c.file_name.as_str()).collect();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.ends_with(".yaml") && !expected.contains(&name.as_str()) {
            stale.push(name);
            if !check {
                std::fs::remove_file(&path)?;
            }
        }
    }
    match (check, stale.is_empty()) {
        (_, true) => println!(
            "crds: {} files in {} are up to date",
            rendered.len(),
            dir.display()
        ),
        (true, false) => bail!(
            "stale CRDs in {}: {}; run `cargo xtask crds`",
            dir.display(),
            stale.join(", ")
        ),
        (false, false) => println!("crds: wrote {}", stale.join(", ")),
    }
    Ok(())
}
