//! Provisioning etcd and kube-apiserver for the local control plane (DESIGN.md §8).
//!
//! Neither binary ships in a registry this project can reach, so:
//! - etcd comes from Debian's `etcd-server` package;
//! - kube-apiserver is built once from Debian's `kubernetes` source package (bookworm), with the
//!   vendored `modern-go/reflect2` replaced by Debian's 1.0.2 (1.0.1 crashes under Go ≥ 1.18) and
//!   the vendored OpenAPI type validator fixed (see [`patch_zero_value_check`]), and cached under
//!   `<cache>/envtest/<revision>/` so that later runs start in seconds.
//!
//! `KUBEBUILDER_ASSETS`, when set, wins: nothing is installed or built.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use capi_testing::envtest::{
    ASSETS_REVISION, Assets, KUBE_APISERVER_VERSION, KUBEBUILDER_ASSETS, cache_root,
    default_assets_dir,
};

use crate::command::{as_root, output, run, step, succeeds};

const DEB_SRC_FILE: &str = "/etc/apt/sources.list.d/capi-rs-bookworm-src.sources";
const BUILD_PACKAGES: &[&str] = &[
    "dpkg-dev",
    "golang-go",
    "rsync",
    "jq",
    "golang-github-modern-go-reflect2-dev",
    "etcd-server",
];
const REFLECT2_DEBIAN: &str = "/usr/share/gocode/src/github.com/modern-go/reflect2";

/// Makes sure etcd and kube-apiserver are available and returns their directory.
pub(crate) fn ensure() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(KUBEBUILDER_ASSETS).filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        Assets::in_dir(&dir)
            .with_context(|| format!("{KUBEBUILDER_ASSETS} is set to {}", dir.display()))?;
        println!("envtest: using {KUBEBUILDER_ASSETS}={}", dir.display());
        return Ok(dir);
    }
    let dir = default_assets_dir();
    if Assets::in_dir(&dir).is_ok() {
        println!("envtest: using cached binaries in {}", dir.display());
        return Ok(dir);
    }
    step(&format!(
        "Provisioning etcd and kube-apiserver {ASSETS_REVISION} into {} (once, about 6 minutes; later runs reuse it)",
        dir.display()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    install_build_packages()?;
    install_binary(Path::new("/usr/bin/etcd"), &dir.join("etcd"))?;
    let built = build_kube_apiserver()?;
    install_binary(&built, &dir.join("kube-apiserver"))?;
    let version = output(Command::new(dir.join("kube-apiserver")).arg("--version"))?;
    println!("    built {}", version.trim());
    if !version.contains(KUBE_APISERVER_VERSION) {
        bail!("the built kube-apiserver reports {version:?}, expected {KUBE_APISERVER_VERSION}");
    }
    let _ = std::fs::remove_dir_all(build_root());
    remove_stale_revisions(&dir);
    Assets::in_dir(&dir)?;
    Ok(dir)
}

/// Removes binaries cached by older build recipes (siblings of the current revision's directory).
fn remove_stale_revisions(current: &Path) {
    let Some(parent) = current.parent() else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path != current && path.is_dir() {
            println!(
                "    removing binaries of an older recipe: {}",
                path.display()
            );
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

fn build_root() -> PathBuf {
    cache_root().join("build").join("kubernetes")
}

fn install_build_packages() -> Result<()> {
    step("Installing Debian packages for the build (deb-src entry, Go, etcd)");
    if !Path::new(DEB_SRC_FILE).exists() {
        let sources = "Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n\
                       Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n";
        let mut tee = as_root("tee");
        tee.arg(DEB_SRC_FILE)
            .stdout(std::process::Stdio::null())
            .stdin(std::process::Stdio::piped());
        let mut child = tee.spawn().context("writing the deb-src entry")?;
        if let Some(stdin) = child.stdin.as_mut() {
            std::io::Write::write_all(stdin, sources.as_bytes())?;
        }
        drop(child.stdin.take());
        if !child.wait()?.success() {
            bail!("could not write {DEB_SRC_FILE}");
        }
    }
    run(as_root("apt-get").args(["update", "-q"]))?;
    run(as_root("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(BUILD_PACKAGES)
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    Ok(())
}

/// Builds kube-apiserver from Debian's source package; returns the path of the binary.
fn build_kube_apiserver() -> Result<PathBuf> {
    let root = build_root();
    if root.exists() {
        std::fs::remove_dir_all(&root)
            .with_context(|| format!("removing the stale build in {}", root.display()))?;
    }
    std::fs::create_dir_all(&root)?;

    step("Fetching Debian's kubernetes source package");
    run(Command::new("apt-get")
        .args(["source", "--download-only", "-q", "kubernetes"])
        .current_dir(&root))?;
    let dsc = std::fs::read_dir(&root)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "dsc"))
        .context("apt-get source did not download a .dsc file")?;
    run(Command::new("dpkg-source")
        .arg("-x")
        .arg(&dsc)
        .arg("src")
        .current_dir(&root))?;
    let src = root.join("src");

    step("Replacing the vendored modern-go/reflect2 1.0.1 with Debian's 1.0.2");
    let vendored = src.join("vendor/github.com/modern-go/reflect2");
    std::fs::remove_dir_all(&vendored)
        .with_context(|| format!("removing {}", vendored.display()))?;
    copy_dir(Path::new(REFLECT2_DEBIAN), &vendored)?;
    for entry in std::fs::read_dir(&vendored)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name == "go.mod" || name == "go.sum" || name.ends_with("_test.go") {
            std::fs::remove_file(&path)?;
        }
    }

    patch_zero_value_check(&src)?;

    step("Building kube-apiserver (make WHAT=cmd/kube-apiserver)");
    let gopath = src.join(".go");
    let link_parent = gopath.join("src/k8s.io");
    std::fs::create_dir_all(&link_parent)?;
    let link = link_parent.join("kubernetes");
    std::os::unix::fs::symlink(&src, &link).context("linking the source tree into GOPATH")?;
    run(Command::new("make")
        .arg("WHAT=cmd/kube-apiserver")
        .current_dir(&link)
        .env("GOPATH", &gopath)
        .env("GOCACHE", root.join("gocache"))
        .env("CGO_ENABLED", "0")
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local"))?;
    let binary = src.join("_output/bin/kube-apiserver");
    if !binary.is_file() {
        bail!("the build finished but {} is missing", binary.display());
    }
    Ok(binary)
}

/// The OpenAPI validators vendored by Kubernetes 1.20 treat a value as JSON `null` when
/// `reflect.DeepEqual(reflect.Zero(T), reflect.ValueOf(v))` holds. Under Go ≥ 1.18 the runtime
/// boxes every empty string at the same address as the zero value, so that comparison becomes true
/// for `""`, and the API server rejects every empty string in a custom resource
/// (`must be of type string: "null"`) — empty condition messages, `control-plane: ""` labels in
/// templates. Upstream Kubernetes later reduced the check to `data == nil`; so do we.
fn patch_zero_value_check(src: &Path) -> Result<()> {
    step("Patching the vendored OpenAPI type validator (empty strings are not null)");
    const BROKEN: &str = "if data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {";
    const FIXED: &str = "if data == nil {";
    for file in [
        "vendor/github.com/go-openapi/validate/type.go",
        "vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go",
    ] {
        let path = src.join(file);
        let content = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        if content.matches(BROKEN).count() != 1 {
            bail!(
                "{} does not contain the expected zero-value check; the source package changed",
                path.display()
            );
        }
        std::fs::write(&path, content.replace(BROKEN, FIXED))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("    patched {file}");
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    if !succeeds("cp", &["--version"]) {
        bail!("`cp` is not available");
    }
    run(Command::new("cp").arg("-r").arg(from).arg(to))
}

/// Copies a binary into place atomically (write beside, then rename).
fn install_binary(from: &Path, to: &Path) -> Result<()> {
    if !from.is_file() {
        bail!("{} is missing", from.display());
    }
    let partial = to.with_extension("partial");
    std::fs::copy(from, &partial)
        .with_context(|| format!("copying {} to {}", from.display(), partial.display()))?;
    std::fs::rename(&partial, to).with_context(|| format!("moving {} into place", to.display()))?;
    Ok(())
}
