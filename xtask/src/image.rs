//! `cargo xtask image <provider>...`: an OCI image of each provider's manager, built offline and
//! reproducibly with Debian's `buildah`, written as an OCI archive and smoke-tested.
//!
//! # What an image holds
//!
//! Built `FROM scratch`, the way distroless images are: the release binary as `/manager`, the
//! shared libraries it loads (found with `ldd`, copied from the Debian packages that own them and
//! named with their versions in a label), a CA bundle made of the certificates Debian's
//! `ca-certificates` package ships (not the host's bundle, which may hold local CAs),
//! `/etc/passwd` and `/etc/group` naming the non-root user 65532 the image runs as, its home
//! (owned by it), and an empty `/tmp`. No shell, no package manager.
//!
//! # Guarantees
//!
//! - The four managers are always built together, in one `cargo build --release` of their four
//!   packages, whichever images are asked for: a manager's binary depends on the commit only, not
//!   on which other images a run builds. Their shared crates are compiled once, with the union of
//!   their features (the in-memory manager, which brings its own etcd access, carries the workload
//!   etcd client unused).
//! - The image is staged and built twice, from scratch each time, and the two image IDs must
//!   match: the created time and every file's time are the epoch (`buildah bud --timestamp 0`),
//!   and every file's mode and owner is set explicitly.
//! - The smoke test checks the image's configuration (entrypoint `/manager`, user 65532), that no
//!   shell is among its files, and runs its entrypoint's binary as that user with
//!   `buildah run --isolation chroot … /manager --help` (no container runtime runs here): the
//!   manager must print its flags.
//! - The archive is `<target>/images/<provider>-manager-<version>.oci.tar`, tagged
//!   `capi-rs/<provider>-manager:<version>`; nothing is pushed (no registry is reachable), and
//!   buildah's own store keeps nothing afterwards, whether the build passed or failed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::command::{cargo, output, run, step, succeeds};

/// A provider whose manager has an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Provider {
    /// The in-memory provider (`inmemory-manager`).
    Inmemory,
    /// The OpenStack provider (`openstack-manager`).
    Openstack,
    /// The AWS provider (`aws-manager`).
    Aws,
    /// The Azure provider (`azure-manager`).
    Azure,
}

impl Provider {
    const ALL: [Provider; 4] = [
        Provider::Inmemory,
        Provider::Openstack,
        Provider::Aws,
        Provider::Azure,
    ];

    fn name(self) -> &'static str {
        match self {
            Provider::Inmemory => "inmemory",
            Provider::Openstack => "openstack",
            Provider::Aws => "aws",
            Provider::Azure => "azure",
        }
    }

    fn package(self) -> String {
        format!("provider-{}-bin", self.name())
    }

    fn binary(self) -> String {
        format!("{}-manager", self.name())
    }
}

/// `cargo xtask image`'s command line.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct ImageArgs {
    /// The providers whose images are built (default: all of them).
    #[arg(value_enum)]
    providers: Vec<Provider>,
    /// The image's version tag (default: the workspace's version).
    #[arg(long)]
    version: Option<String>,
}

/// Builds, checks and writes the image of each provider asked for.
pub(crate) fn run_images(args: ImageArgs) -> Result<()> {
    let providers = if args.providers.is_empty() {
        Provider::ALL.to_vec()
    } else {
        args.providers
    };
    let version = args
        .version
        .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string());
    step("Tools: buildah, protoc, CA certificates (Debian's packages)");
    ensure_tools()?;
    step("Building the managers (release, the four together)");
    let packages: Vec<String> = Provider::ALL.iter().map(|p| p.package()).collect();
    let mut build = vec!["build", "--release"];
    for package in &packages {
        build.extend(["-p", package.as_str()]);
    }
    run(&mut cargo(&build))?;
    let release = crate::command::target_dir().join("release");
    let out_dir = crate::command::target_dir().join("images");
    std::fs::create_dir_all(&out_dir)?;
    for provider in providers {
        step(&format!("Image of {}", provider.binary()));
        let archive = build_image(
            provider,
            &release.join(provider.binary()),
            &version,
            &out_dir,
        )?;
        println!("    written: {}", archive.display());
    }
    Ok(())
}

fn ensure_tools() -> Result<()> {
    let mut missing = Vec::new();
    if !succeeds("buildah", &["--version"]) {
        missing.push("buildah");
    }
    if !Path::new(CA_CERTIFICATES).is_dir() {
        missing.push("ca-certificates");
    }
    if missing.is_empty() {
        println!("    buildah and the CA certificates are installed");
    } else {
        crate::test::apt_install(&missing)?;
    }
    // The managers with the workload etcd client are built with protoc.
    crate::test::ensure_protoc()
}

/// Where the image's CA bundle is, as Debian puts it.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The certificates Debian's `ca-certificates` package ships, one PEM file each.
const CA_CERTIFICATES: &str = "/usr/share/ca-certificates/mozilla";
/// The user the image runs as (distroless's `nonroot`).
const USER: u32 = 65532;

fn build_image(
    provider: Provider,
    binary: &Path,
    version: &str,
    out_dir: &Path,
) -> Result<PathBuf> {
    let libraries = shared_libraries(binary)?;
    let certificates = ca_certificates()?;
    let packages = owning_packages(&libraries, &certificates[..1])?;
    let tag = Tag(format!("localhost/capi-rs/{}:{version}", provider.binary()));
    let containerfile = containerfile(provider, version, &packages);
    let mut ids = Vec::new();
    for attempt in ["first", "second"] {
        let stage = out_dir.join(format!("{}-stage-{attempt}", provider.name()));
        stage_rootfs(&stage, binary, &libraries, &certificates)?;
        std::fs::write(stage.join("Containerfile"), &containerfile)?;
        no_shell(&stage)?;
        ids.push(bud(&stage, &tag.0)?);
        std::fs::remove_dir_all(&stage)?;
    }
    if ids[0] != ids[1] {
        bail!(
            "two builds of {} staged from scratch differ: {} and {}",
            tag.0,
            ids[0],
            ids[1]
        );
    }
    println!("    reproducible: both builds are image {}", ids[0]);
    smoke_test(&tag.0)?;
    let archive = out_dir.join(format!("{}-{version}.oci.tar", provider.binary()));
    let _ = std::fs::remove_file(&archive);
    run(std::process::Command::new("buildah").args([
        "push",
        "--quiet",
        &tag.0,
        &format!(
            "oci-archive:{}:capi-rs/{}:{version}",
            archive.display(),
            provider.binary()
        ),
    ]))?;
    Ok(archive)
}

/// An image tag in buildah's store, removed when dropped: the archive is the result, and the
/// store keeps nothing between runs, whether the build passed or not.
struct Tag(String);

impl Drop for Tag {
    fn drop(&mut self) {
        let removed = std::process::Command::new("buildah")
            .args(["rmi", "--force", &self.0])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        if !removed.is_ok_and(|status| status.success()) {
            eprintln!("warning: could not remove {} from buildah's store", self.0);
        }
    }
}

/// The PEM files of Debian's `ca-certificates` package, in name order.
fn ca_certificates() -> Result<Vec<PathBuf>> {
    let mut certificates: Vec<PathBuf> = std::fs::read_dir(CA_CERTIFICATES)
        .with_context(|| format!("reading {CA_CERTIFICATES}"))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    certificates.retain(|path| path.extension().is_some_and(|e| e == "crt"));
    certificates.sort();
    if certificates.is_empty() {
        bail!("no certificates in {CA_CERTIFICATES}");
    }
    Ok(certificates)
}

/// The shared libraries `binary` loads, as absolute paths (the dynamic loader included).
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let listing = output(std::process::Command::new("ldd").arg(binary))?;
    let mut libraries = BTreeSet::new();
    for line in listing.lines() {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)`, `/lib64/ld-linux-x86-64.so.2 (0x…)`,
        // `linux-vdso.so.1 (0x…)` (in the kernel, not a file).
        let path = line
            .split("=>")
            .nth(1)
            .unwrap_or(line)
            .split_whitespace()
            .next()
            .unwrap_or_default();
        if path.starts_with('/') {
            libraries.insert(PathBuf::from(path));
        } else if line.contains("not found") {
            bail!(
                "{} needs a library that is missing: {line}",
                binary.display()
            );
        }
    }
    Ok(libraries.into_iter().collect())
}

/// The Debian packages (`name:arch=version`) the files come from.
fn owning_packages(libraries: &[PathBuf], certificates: &[PathBuf]) -> Result<Vec<String>> {
    let mut packages = BTreeSet::new();
    for path in libraries.iter().chain(certificates) {
        let owner = owner_of(path)?;
        let version =
            output(std::process::Command::new("dpkg-query").args(["-W", "-f=${Version}", &owner]))?;
        packages.insert(format!("{owner}={}", version.trim()));
    }
    Ok(packages.into_iter().collect())
}

/// The package (`name:arch`) `dpkg -S` names for `path` or for the file it links to.
fn owner_of(path: &Path) -> Result<String> {
    let candidates = [
        path.to_path_buf(),
        std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
    ];
    for candidate in candidates {
        let text = candidate.to_string_lossy().into_owned();
        let Ok(found) = output(std::process::Command::new("dpkg").args(["-S", &text])) else {
            continue;
        };
        // `libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6`; diversions are reported on lines of
        // their own (`diversion by … from: …`).
        let owner = found
            .lines()
            .filter(|line| !line.starts_with("diversion "))
            .find_map(|line| line.split_once(": ").map(|(owner, _)| owner.trim()))
            .filter(|owner| !owner.is_empty() && !owner.contains(' '));
        if let Some(owner) = owner {
            return Ok(owner.to_string());
        }
    }
    bail!("no Debian package owns {}", path.display())
}

/// Writes the image's files under `stage/rootfs` (owned by root) and `stage/home` (owned by the
/// image's user), every mode set explicitly.
fn stage_rootfs(
    stage: &Path,
    binary: &Path,
    libraries: &[PathBuf],
    certificates: &[PathBuf],
) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if stage.exists() {
        std::fs::remove_dir_all(stage)?;
    }
    let rootfs = stage.join("rootfs");
    let place = |from: &Path, to: &str, mode: u32| -> Result<()> {
        let target = rootfs.join(to.trim_start_matches('/'));
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // Follows links: the image holds the file under the name the loader asks for.
        std::fs::copy(from, &target)
            .with_context(|| format!("copying {} to {}", from.display(), target.display()))?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
        Ok(())
    };
    place(binary, "/manager", 0o755)?;
    for library in libraries {
        place(library, &library.to_string_lossy(), 0o755)?;
    }
    let mut bundle = Vec::new();
    for certificate in certificates {
        let pem = std::fs::read(certificate)
            .with_context(|| format!("reading {}", certificate.display()))?;
        bundle.extend_from_slice(&pem);
        if !pem.ends_with(b"\n") {
            bundle.push(b'\n');
        }
    }
    let bundle_path = rootfs.join(CA_BUNDLE.trim_start_matches('/'));
    if let Some(dir) = bundle_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&bundle_path, bundle)?;
    std::fs::set_permissions(&bundle_path, std::fs::Permissions::from_mode(0o644))?;
    let etc = rootfs.join("etc");
    std::fs::write(
        etc.join("passwd"),
        format!(
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{USER}:{USER}:nonroot:/home/nonroot:/sbin/nologin\n"
        ),
    )?;
    std::fs::write(etc.join("group"), format!("root:x:0:\nnonroot:x:{USER}:\n"))?;
    for file in ["passwd", "group"] {
        std::fs::set_permissions(etc.join(file), std::fs::Permissions::from_mode(0o644))?;
    }
    let tmp = rootfs.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    // Directories made along the way get one mode; /tmp is everyone's, sticky.
    for entry in walk(&rootfs)? {
        if entry.is_dir() {
            std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))?;
    let home = stage.join("home").join("nonroot");
    std::fs::create_dir_all(&home)?;
    for dir in [stage.join("home"), home] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// Every path under `dir`, depth first.
fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            paths.extend(walk(&path)?);
        }
        paths.push(path);
    }
    Ok(paths)
}

fn containerfile(provider: Provider, version: &str, packages: &[String]) -> String {
    let revision = crate::command::built_commit();
    let source = env!("CARGO_PKG_REPOSITORY");
    format!(
        "FROM scratch\n\
         COPY rootfs/ /\n\
         COPY --chown={USER}:{USER} home/ /home/\n\
         USER {USER}:{USER}\n\
         WORKDIR /\n\
         ENTRYPOINT [\"/manager\"]\n\
         LABEL org.opencontainers.image.title=\"{binary}\" \\\n  \
         org.opencontainers.image.description=\"The {name} Cluster API infrastructure provider's manager (capi-rs)\" \\\n  \
         org.opencontainers.image.version=\"{version}\" \\\n  \
         org.opencontainers.image.revision=\"{revision}\" \\\n  \
         org.opencontainers.image.source=\"{source}\" \\\n  \
         org.opencontainers.image.licenses=\"Apache-2.0\" \\\n  \
         dev.capi-rs.debian-packages=\"{packages}\"\n",
        binary = provider.binary(),
        name = provider.name(),
        packages = packages.join(" "),
    )
}

/// Builds the image in `stage` as `tag`; returns its ID (the digest of its configuration).
fn bud(stage: &Path, tag: &str) -> Result<String> {
    let out = output(
        std::process::Command::new("buildah")
            .current_dir(stage)
            .args([
                "bud",
                "--quiet",
                "--isolation",
                "chroot",
                "--timestamp",
                "0",
                "--format",
                "oci",
                "--layers=false",
                "-t",
                tag,
                "-f",
                "Containerfile",
                ".",
            ]),
    )?;
    let id = out.lines().last().unwrap_or_default().trim().to_string();
    if id.is_empty() {
        bail!("buildah bud printed no image ID for {tag}");
    }
    Ok(id)
}

/// Checks the image's configuration and runs its entrypoint's binary with `--help` as its user.
fn smoke_test(tag: &str) -> Result<()> {
    let inspect = |format: &str| {
        output(
            std::process::Command::new("buildah")
                .args(["inspect", "--type", "image", "--format", format, tag]),
        )
        .map(|text| text.trim().to_string())
    };
    let user = inspect("{{.OCIv1.Config.User}}")?;
    if user != format!("{USER}:{USER}") {
        bail!("{tag} runs as {user:?}, not {USER}:{USER}");
    }
    // Go's rendering of a list of strings (buildah 1.28's templates have no `json`).
    let entrypoint = inspect("{{.OCIv1.Config.Entrypoint}}")?;
    if entrypoint != "[/manager]" {
        bail!("{tag}'s entrypoint is {entrypoint}, not [\"/manager\"]");
    }
    let container = output(std::process::Command::new("buildah").args(["from", "--quiet", tag]))?;
    let container = container.trim().to_string();
    let help = output(std::process::Command::new("buildah").args([
        "run",
        "--isolation",
        "chroot",
        &container,
        "--",
        "/manager",
        "--help",
    ]));
    let _ = output(std::process::Command::new("buildah").args(["rm", &container]));
    let help = help.with_context(|| format!("running `/manager --help` in {tag}"))?;
    if !help.contains("Usage") || !help.contains("--diagnostics-address") {
        bail!("`/manager --help` in {tag} did not print the manager's flags:\n{help}");
    }
    println!("    smoke test: entrypoint /manager answers --help as user {USER}");
    Ok(())
}

/// Fails if a shell or a busybox is among the staged files.
fn no_shell(stage: &Path) -> Result<()> {
    const SHELLS: [&str; 6] = ["sh", "bash", "dash", "ash", "zsh", "busybox"];
    for path in walk(stage)? {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| SHELLS.contains(&n.as_str())) {
            bail!("the image would hold a shell: {}", path.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_containerfile_runs_the_manager_as_nonroot_with_its_labels() {
        let file = containerfile(Provider::Aws, "1.2.3", &["libc6=2.36".to_string()]);
        assert!(file.starts_with("FROM scratch\nCOPY rootfs/ /\n"));
        assert!(file.contains("COPY --chown=65532:65532 home/ /home/\n"));
        assert!(file.contains("USER 65532:65532\n"));
        assert!(file.contains("ENTRYPOINT [\"/manager\"]\n"));
        assert!(file.contains("org.opencontainers.image.version=\"1.2.3\""));
        assert!(file.contains("org.opencontainers.image.title=\"aws-manager\""));
        assert!(file.contains("dev.capi-rs.debian-packages=\"libc6=2.36\""));
    }

    #[test]
    fn each_provider_names_its_package_and_binary() {
        assert_eq!(Provider::Openstack.package(), "provider-openstack-bin");
        assert_eq!(Provider::Openstack.binary(), "openstack-manager");
    }
}

#[cfg(test)]
mod staging {
    use super::*;

    #[test]
    fn a_staged_shell_is_refused() {
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::create_dir_all(dir.path().join("rootfs/bin")).expect("a dir");
        assert!(no_shell(dir.path()).is_ok());
        std::fs::write(dir.path().join("rootfs/bin/sh"), "").expect("a file");
        assert!(no_shell(dir.path()).is_err());
    }
}
