//! `cargo xtask public-api [--check]`: the public API of every published crate, one item per line,
//! in `api/<crate>.txt` — written, or with `--check` compared with what the code has now.
//!
//! A change to what a vendor can name (a type, a field, a function's signature, a trait's
//! methods, an impl) shows in review as a diff of these files, and CI fails until the files are
//! regenerated with the change. The listing is rustdoc's JSON output rendered by the `public-api`
//! crate: blanket and auto-trait impls are left out (they follow from the rest), everything else
//! is in, with all features on.
//!
//! The same rustdoc run is the workspace's documentation check: all features on, its warnings
//! errors (`-D warnings`), so a broken intra-doc link fails it as it would fail `cargo doc`.
//!
//! rustdoc's JSON output is unstable: the stable toolchain produces it with `RUSTC_BOOTSTRAP=1`,
//! in a target directory of its own (`<target>/public-api`, so that the build scripts that watch
//! the variable — proc-macro2's, anyhow's — do not rebuild the main one), and `public-api` reads
//! exactly one format version, the one this toolchain writes. A toolchain that writes another
//! fails with both versions named.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::command::{cargo, run};
use crate::workspace_root;

/// The rustdoc JSON format version the pinned `public-api` crate reads.
const FORMAT_VERSION: u64 = 57;

/// Writes `api/<crate>.txt` for every published crate, or with `check` fails if any differs.
pub(crate) fn run_all(check: bool) -> Result<()> {
    let target = crate::command::target_dir().join("public-api");
    document(&target)?;
    let packages = crate::command::workspace_packages(true)?;
    if packages.is_empty() {
        bail!("`cargo metadata` lists no published package; nothing would be checked");
    }
    let api_dir = workspace_root().join("api");
    for entry in std::fs::read_dir(&api_dir).into_iter().flatten() {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "txt") {
            continue;
        }
        let crate_name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        if let Some(name) = crate_name.filter(|n| !packages.contains(n)) {
            if check {
                bail!(
                    "{} is the API of {name}, which is not a published crate; remove it",
                    path.display()
                );
            }
            std::fs::remove_file(&path)?;
            println!("public-api: removed {}", path.display());
        }
    }
    let mut stale = Vec::new();
    for package in packages {
        let listing = listing(&package, &target)?;
        let path = api_dir.join(format!("{package}.txt"));
        let committed = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
        };
        if committed == listing {
            continue;
        }
        if check {
            print_difference(&package, &committed, &listing);
        } else {
            std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
            std::fs::write(&path, &listing)
                .with_context(|| format!("writing {}", path.display()))?;
            println!("public-api: wrote {}", path.display());
        }
        stale.push(package);
    }
    if check && !stale.is_empty() {
        bail!(
            "the public API of {} differs from api/; if the change is meant, run \
             `cargo xtask public-api` and commit the result",
            stale.join(", ")
        );
    }
    if stale.is_empty() {
        println!("public-api: api/ is up to date");
    }
    Ok(())
}

/// rustdoc's JSON output for every package of the workspace in one cargo run, all features on,
/// its warnings (broken intra-doc links among them) errors. rustdoc's lints run before any
/// output is written, so this is the check `cargo doc -D warnings` would make.
fn document(target: &Path) -> Result<()> {
    let mut rustdoc = cargo(&[
        "doc",
        "--quiet",
        "--workspace",
        "--no-deps",
        "--all-features",
    ]);
    rustdoc
        .env("RUSTC_BOOTSTRAP", "1")
        .env(
            "RUSTDOCFLAGS",
            "-D warnings -Z unstable-options --output-format json",
        )
        .env("CARGO_TARGET_DIR", target);
    run(&mut rustdoc)
}

/// The rendered public API of `package`, one item per line.
fn listing(package: &str, target: &Path) -> Result<String> {
    let json = json_path(target, package);
    let version = format_version(&json)?;
    if version != FORMAT_VERSION {
        bail!(
            "{} is rustdoc JSON format {version}; the pinned `public-api` crate reads format \
             {FORMAT_VERSION} (Rust 1.95's): change the toolchain or the `public-api` version",
            json.display()
        );
    }
    let api = public_api::Builder::from_rustdoc_json(&json)
        .omit_blanket_impls(true)
        .omit_auto_trait_impls(true)
        .build()
        .with_context(|| format!("reading {}", json.display()))?;
    Ok(format!(
        "# The public API of {package} (all features), from `cargo xtask public-api`.\n{api}\n"
    ))
}

fn json_path(target: &Path, package: &str) -> PathBuf {
    target
        .join("doc")
        .join(format!("{}.json", package.replace('-', "_")))
}

fn format_version(json: &Path) -> Result<u64> {
    #[derive(serde::Deserialize)]
    struct Header {
        format_version: u64,
    }
    let text =
        std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let header: Header =
        serde_json::from_str(&text).with_context(|| format!("reading {}", json.display()))?;
    Ok(header.format_version)
}

/// Prints the lines only one side has, as a diff would.
fn print_difference(package: &str, committed: &str, now: &str) {
    let before: std::collections::BTreeSet<&str> = committed.lines().collect();
    let after: std::collections::BTreeSet<&str> = now.lines().collect();
    println!("public-api: {package} differs from api/{package}.txt:");
    for line in before.difference(&after) {
        println!("    - {line}");
    }
    for line in after.difference(&before) {
        println!("    + {line}");
    }
    if before == after {
        println!("    (the same lines, in another order or repeated)");
    }
}

#[cfg(test)]
mod tests {
    use super::json_path;
    use std::path::Path;

    #[test]
    fn the_json_is_named_after_the_crate() {
        assert_eq!(
            json_path(Path::new("/t"), "capi-core"),
            Path::new("/t/doc/capi_core.json")
        );
    }
}
