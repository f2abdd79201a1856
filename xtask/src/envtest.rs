//! Provisioning the local control plane's binaries (DESIGN.md §8): `kube-apiserver`, `etcd` and
//! `kubeadm`, built from the Go module proxy through the wrapper module `xtask/go/envtest` (which
//! pins `k8s.io/kubernetes`, its staging modules and etcd), plus `kubeadm-v1.30` from
//! `xtask/go/kubeadm-v1.30` (the validator of kubeadm v1beta3 documents), cached under
//! `<cache>/envtest/<ASSETS_REVISION>/`; older revisions are removed.
//!
//! `KUBEBUILDER_ASSETS`, when set, wins for etcd and kube-apiserver (setup-envtest's binaries work
//! unchanged); the kubeadms, which setup-envtest does not ship, are still built into the cache for
//! the bootstrap validators.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use capi_testing::envtest::{
    Assets, ETCD_VERSION, KUBEADM_V1BETA3_BINARY, KUBEADM_V1BETA3_VERSION, KUBEBUILDER_ASSETS,
    KUBERNETES_VERSION, default_assets_dir, kubernetes_minor,
};

use crate::command::{output, step};
use crate::go::{GoModule, Target};

/// The wrapper modules' names under `xtask/go/`.
const MODULE: &str = "envtest";
const KUBEADM_V1BETA3_MODULE: &str = "kubeadm-v1.30";

/// Makes sure etcd, kube-apiserver, kube-controller-manager (the clusterctl lifecycle tests') and
/// both kubeadms (the bootstrap tests' validators) are available; returns the directory holding etcd and kube-apiserver (what `KUBEBUILDER_ASSETS`
/// should be).
pub(crate) fn ensure() -> Result<PathBuf> {
    provision(true)
}

/// Makes sure etcd and kube-apiserver are available — what a local control plane runs, and all
/// the quickstart, the benchmarks and the chaos run need; returns their directory.
pub(crate) fn ensure_control_plane() -> Result<PathBuf> {
    provision(false)
}

fn provision(with_validators: bool) -> Result<PathBuf> {
    let cached = default_assets_dir();
    let chosen = std::env::var_os(KUBEBUILDER_ASSETS)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from);
    let mut targets = Vec::new();
    // With the user's etcd and kube-apiserver, only the kubeadms (which setup-envtest does not
    // ship) are built.
    match &chosen {
        Some(dir) => check_user_assets(dir)?,
        None => targets.extend(control_plane_targets()),
    }
    if with_validators {
        targets.push(kubeadm_target());
        targets.push(controller_manager_target());
    }
    build_missing(MODULE, KUBERNETES_VERSION, &cached, &targets)?;
    if with_validators {
        build_missing(
            KUBEADM_V1BETA3_MODULE,
            KUBEADM_V1BETA3_VERSION,
            &cached,
            &[kubeadm_v1beta3_target()],
        )?;
    }
    let dir = chosen.unwrap_or(cached);
    Assets::in_dir(&dir)?;
    Ok(dir)
}

/// `$KUBEBUILDER_ASSETS` must hold a kube-apiserver upstream Cluster API v1.14 supports.
fn check_user_assets(dir: &Path) -> Result<()> {
    let assets = Assets::in_dir(dir)
        .with_context(|| format!("{KUBEBUILDER_ASSETS} is set to {}", dir.display()))?;
    let version = output(Command::new(&assets.kube_apiserver).arg("--version"))?;
    let version = version.trim().trim_start_matches("Kubernetes ").to_string();
    if kubernetes_minor(&version).is_none_or(|minor| minor < 33) {
        bail!(
            "{KUBEBUILDER_ASSETS}={} holds kube-apiserver {version}; this project needs a \
             version upstream Cluster API v1.14 supports (v1.33 or newer; the tests are written \
             for {KUBERNETES_VERSION}). Unset it to build {KUBERNETES_VERSION}.",
            dir.display()
        );
    }
    println!(
        "envtest: using {KUBEBUILDER_ASSETS}={} (kube-apiserver {version})",
        dir.display()
    );
    Ok(())
}

fn kubeadm_v1beta3_target() -> Target<'static> {
    Target {
        package: "k8s.io/kubernetes/cmd/kubeadm",
        binary: KUBEADM_V1BETA3_BINARY,
    }
}

fn controller_manager_target() -> Target<'static> {
    Target {
        package: "k8s.io/kubernetes/cmd/kube-controller-manager",
        binary: "kube-controller-manager",
    }
}

fn kubeadm_target() -> Target<'static> {
    Target {
        package: "k8s.io/kubernetes/cmd/kubeadm",
        binary: "kubeadm",
    }
}

fn control_plane_targets() -> [Target<'static>; 2] {
    [
        Target {
            package: "capi-rs.local/envtest/etcd",
            binary: "etcd",
        },
        Target {
            package: "k8s.io/kubernetes/cmd/kube-apiserver",
            binary: "kube-apiserver",
        },
    ]
}

/// Builds, from the wrapper module `module` (pinning Kubernetes `kubernetes`), those of `targets`
/// that `dir` does not hold yet, then checks what they report.
fn build_missing(module: &str, kubernetes: &str, dir: &Path, targets: &[Target<'_>]) -> Result<()> {
    if targets.is_empty() {
        return Ok(());
    }
    let missing: Vec<&Target<'_>> = targets
        .iter()
        .filter(|t| !up_to_date(dir, t, kubernetes))
        .collect();
    if missing.is_empty() {
        println!(
            "envtest: using cached {} in {}",
            targets
                .iter()
                .map(|t| t.binary)
                .collect::<Vec<_>>()
                .join(", "),
            dir.display()
        );
        return Ok(());
    }
    let name = module;
    let module = GoModule::named(module);
    check_pins(&module, kubernetes, name == MODULE)?;
    let names: Vec<&str> = missing.iter().map(|t| t.binary).collect();
    step(&format!(
        "Building {} (Kubernetes {kubernetes}{}) from the Go module proxy into {} — once per \
         version; with Go's caches cold about 6 minutes on 2 cores for all of them",
        names.join(", "),
        if name == MODULE {
            format!(", etcd {ETCD_VERSION}")
        } else {
            String::new()
        },
        dir.display()
    ));
    let to_build: Vec<Target<'_>> = missing
        .into_iter()
        .map(|t| Target {
            package: t.package,
            binary: t.binary,
        })
        .collect();
    module.build(&to_build, &version_ldflags(kubernetes), dir)?;
    crate::go::remove_other_revisions(dir);
    for name in names {
        let reported = output(Command::new(dir.join(name)).arg("--version"))
            .or_else(|_| output(Command::new(dir.join(name)).arg("version")))?;
        println!(
            "    {name}: {}",
            reported.lines().next().unwrap_or("").trim()
        );
    }
    let apiserver = dir.join("kube-apiserver");
    if name == MODULE && apiserver.is_file() {
        let reported = output(Command::new(&apiserver).arg("--version"))?;
        if !reported.contains(KUBERNETES_VERSION) {
            bail!("the built kube-apiserver reports {reported:?}, expected {KUBERNETES_VERSION}");
        }
    }
    Ok(())
}

/// Whether `dir` holds the target's binary, and — for a kubeadm, whose release may change while
/// the directory's revision stays — of the release `kubernetes`.
fn up_to_date(dir: &Path, target: &Target<'_>, kubernetes: &str) -> bool {
    let binary = dir.join(target.binary);
    if !binary.is_file() {
        return false;
    }
    if !target.binary.starts_with("kubeadm") {
        return true;
    }
    output(Command::new(&binary).args(["version", "-o", "short"]))
        .is_ok_and(|reported| reported.trim() == kubernetes)
}

/// The wrapper module and the constants the harness reports must name the same releases.
fn check_pins(module: &GoModule, kubernetes: &str, with_etcd: bool) -> Result<()> {
    let etcd = with_etcd.then_some(("go.etcd.io/etcd/server/v3", ETCD_VERSION));
    for (name, expected) in std::iter::once(("k8s.io/kubernetes", kubernetes)).chain(etcd) {
        let pinned = module.required_version(name)?;
        if pinned != expected {
            bail!(
                "{} pins {name} {pinned} but capi_testing::envtest says {expected}; change both \
                 (and ASSETS_REVISION) together",
                module.dir().join("go.mod").display()
            );
        }
    }
    Ok(())
}

/// What `kube-apiserver --version` and `kubeadm version` report: the release, as Kubernetes' own
/// build stamps it (a module build otherwise says `v0.0.0-master`).
fn version_ldflags(release: &str) -> String {
    let package = "k8s.io/component-base/version";
    let (major, minor) = release
        .trim_start_matches('v')
        .split_once('.')
        .map(|(major, rest)| (major, rest.split('.').next().unwrap_or("")))
        .unwrap_or(("", ""));
    format!(
        "-s -w -X {package}.gitVersion={release} -X {package}.gitMajor={major} \
         -X {package}.gitMinor={minor} -X {package}.gitTreeState=clean"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_testing::envtest::ASSETS_REVISION;

    #[test]
    fn the_wrapper_modules_pin_the_versions_the_harness_reports() {
        check_pins(&GoModule::named(MODULE), KUBERNETES_VERSION, true)
            .unwrap_or_else(|e| panic!("{e:#}"));
        check_pins(
            &GoModule::named(KUBEADM_V1BETA3_MODULE),
            KUBEADM_V1BETA3_VERSION,
            false,
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
        assert!(ASSETS_REVISION.starts_with(KUBERNETES_VERSION));
    }

    #[test]
    fn version_stamp_names_major_and_minor() {
        let flags = version_ldflags("v1.30.14");
        assert!(flags.contains("gitVersion=v1.30.14 "));
        assert!(flags.contains("gitMajor=1 "));
        assert!(flags.contains("gitMinor=30 "));
    }
}
