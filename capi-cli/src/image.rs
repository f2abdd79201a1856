//! `capictl image`: an OCI image of a provider's manager, built offline and reproducibly with
//! Debian's `buildah`, smoke-tested, and written as an OCI archive. `cargo xtask image` builds
//! this workspace's four managers with it; a generated provider project (`capictl new provider`)
//! builds its own.
//!
//! # What an image holds
//!
//! Built `FROM scratch`, the way distroless images are: the binary as `/manager`, the shared
//! libraries it loads (found with `ldd`, copied from the Debian packages that own them and named
//! with their versions in a label), a CA bundle made of the certificates Debian's
//! `ca-certificates` package ships (not the host's bundle, which may hold local CAs),
//! `/etc/passwd` and `/etc/group` naming the non-root user 65532 the image runs as, its home
//! (owned by it), and an empty `/tmp`. No shell, no package manager.
//!
//! # Guarantees
//!
//! - The image is staged and built twice, from scratch each time, and the two image IDs must
//!   match: the created time and every file's time are the epoch (`buildah bud --timestamp 0`),
//!   and every file's mode and owner is set explicitly.
//! - The smoke test checks the image's configuration (entrypoint `/manager`, user 65532), that no
//!   shell is among its files, and runs its entrypoint's binary as that user with
//!   `buildah run --isolation chroot … /manager --help` (no container runtime is needed): the
//!   manager must print the flags of [`capi_provider::ManagerArgs`](https://docs.rs/capi-provider).
//! - The archive is `<out>/<name>-<version>.oci.tar`, holding the image as
//!   `<reference>:<tag>` ([`ImageSpec::tag`]: `v0.1.0` for version `0.1.0`, as upstream tags its
//!   images and clusterctl releases name them); nothing is pushed, and buildah's own store keeps nothing
//!   afterwards, whether the build passed or failed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// What to build an image of, and how to label it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageSpec {
    /// The manager's binary (a release build, as shipped).
    pub binary: PathBuf,
    /// The image's name, e.g. `acme-manager`: the archive's file name and the title label (no
    /// `/`).
    pub name: String,
    /// The image reference without its tag, e.g. `example.com/acme/acme-manager`.
    pub reference: String,
    /// The version: the version label, and the tag ([`ImageSpec::tag`]).
    pub version: String,
    /// The description label.
    pub description: String,
    /// The source label (the project's repository), if known.
    pub source: Option<String>,
    /// The revision label (the commit built), if known.
    pub revision: Option<String>,
    /// The licenses label (an SPDX expression), if known.
    pub licenses: Option<String>,
}

impl ImageSpec {
    /// The image's tag: the version with a leading `v` when it starts with a digit (`0.1.0` →
    /// `v0.1.0`), else the version as given.
    pub fn tag(&self) -> String {
        if self.version.starts_with(|c: char| c.is_ascii_digit()) {
            format!("v{}", self.version)
        } else {
            self.version.clone()
        }
    }
}

/// The tools [`build`] needs that are not installed, as Debian package names (`buildah`,
/// `ca-certificates`); empty when it can run.
pub fn missing_tools() -> Vec<&'static str> {
    let mut missing = Vec::new();
    let buildah = std::process::Command::new("buildah")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    if !buildah.is_ok_and(|status| status.success()) {
        missing.push("buildah");
    }
    if !Path::new(CA_CERTIFICATES).is_dir() {
        missing.push("ca-certificates");
    }
    missing
}

/// Builds the image of `spec` twice, checks that both builds are equal and that it runs, and
/// writes it to `out_dir`; returns the archive's path.
pub fn build(spec: &ImageSpec, out_dir: &Path) -> Result<PathBuf> {
    if !spec.binary.is_file() {
        bail!(
            "{} is not a file: build the manager first",
            spec.binary.display()
        );
    }
    let missing = missing_tools();
    if !missing.is_empty() {
        bail!(
            "building an image needs Debian's {} (apt-get install {})",
            missing.join(" and "),
            missing.join(" ")
        );
    }
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let libraries = shared_libraries(&spec.binary)?;
    let certificates = ca_certificates()?;
    let packages = owning_packages(&libraries, &certificates[..1])?;
    let tag = Tag(format!("localhost/{}:{}", spec.reference, spec.tag()));
    let containerfile = containerfile(spec, &packages);
    let mut ids = Vec::new();
    for attempt in ["first", "second"] {
        let stage = out_dir.join(format!("{}-stage-{attempt}", spec.name));
        stage_rootfs(&stage, &spec.binary, &libraries, &certificates)?;
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
    let archive = out_dir.join(format!("{}-{}.oci.tar", spec.name, spec.version));
    let _ = std::fs::remove_file(&archive);
    output(std::process::Command::new("buildah").args([
        "push",
        "--quiet",
        &tag.0,
        &format!(
            "oci-archive:{}:{}:{}",
            archive.display(),
            spec.reference,
            spec.tag()
        ),
    ]))?;
    Ok(archive)
}

/// Runs `command` and returns its standard output; fails with its standard error if it fails.
fn output(command: &mut std::process::Command) -> Result<String> {
    let shown = format!("{command:?}");
    let out = command
        .output()
        .with_context(|| format!("cannot start {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The Containerfile of the staged image.
fn containerfile(spec: &ImageSpec, packages: &[String]) -> String {
    let mut labels = vec![
        ("org.opencontainers.image.title", spec.name.clone()),
        (
            "org.opencontainers.image.description",
            spec.description.clone(),
        ),
        ("org.opencontainers.image.version", spec.version.clone()),
    ];
    let optional = [
        ("org.opencontainers.image.revision", &spec.revision),
        ("org.opencontainers.image.source", &spec.source),
        ("org.opencontainers.image.licenses", &spec.licenses),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            labels.push((key, value.clone()));
        }
    }
    labels.push(("dev.capi-rs.debian-packages", packages.join(" ")));
    let labels: Vec<String> = labels
        .into_iter()
        .map(|(key, value)| format!("{key}={}", quoted(&value)))
        .collect();
    format!(
        "FROM scratch\n\
         COPY rootfs/ /\n\
         COPY --chown={USER}:{USER} home/ /home/\n\
         USER {USER}:{USER}\n\
         WORKDIR /\n\
         ENTRYPOINT [\"/manager\"]\n\
         LABEL {}\n",
        labels.join(" \\\n  ")
    )
}

/// `value` as a Containerfile's double-quoted string, taken literally (no variable is expanded).
fn quoted(value: &str) -> String {
    let escaped = value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('$', "\\$")
        .replace('\n', " ");
    format!("\"{escaped}\"")
}

/// Where the image's CA bundle is, as Debian puts it.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The certificates Debian's `ca-certificates` package ships, one PEM file each.
const CA_CERTIFICATES: &str = "/usr/share/ca-certificates/mozilla";
/// The user the image runs as (distroless's `nonroot`).
const USER: u32 = 65532;

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
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn spec() -> ImageSpec {
        ImageSpec {
            binary: PathBuf::from("/bin/true"),
            name: "aws-manager".into(),
            reference: "capi-rs/aws-manager".into(),
            version: "1.2.3".into(),
            description: "The \"AWS\" manager for $HOME".into(),
            source: Some("https://github.com/capi-rs/capi-rs".into()),
            revision: None,
            licenses: Some("Apache-2.0".into()),
        }
    }

    #[test]
    fn the_containerfile_runs_the_manager_as_nonroot_with_its_labels() {
        let file = containerfile(&spec(), &["libc6=2.36".to_string()]);
        assert!(file.starts_with("FROM scratch\nCOPY rootfs/ /\n"));
        assert!(file.contains("COPY --chown=65532:65532 home/ /home/\n"));
        assert!(file.contains("USER 65532:65532\n"));
        assert!(file.contains("ENTRYPOINT [\"/manager\"]\n"));
        assert!(file.contains("org.opencontainers.image.version=\"1.2.3\""));
        assert!(file.contains("org.opencontainers.image.title=\"aws-manager\""));
        assert!(file.contains(
            "org.opencontainers.image.description=\"The \\\"AWS\\\" manager for \\$HOME\""
        ));
        assert!(file.contains("dev.capi-rs.debian-packages=\"libc6=2.36\""));
        assert!(
            !file.contains("image.revision"),
            "no revision label when none is known"
        );
    }

    #[test]
    fn the_tag_is_the_version_with_upstreams_v() {
        assert_eq!(spec().tag(), "v1.2.3");
        let named = ImageSpec {
            version: "dev".into(),
            ..spec()
        };
        assert_eq!(named.tag(), "dev");
    }

    #[test]
    fn a_staged_shell_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("rootfs/bin")).unwrap();
        assert!(no_shell(dir.path()).is_ok());
        std::fs::write(dir.path().join("rootfs/bin/sh"), "").unwrap();
        assert!(no_shell(dir.path()).is_err());
    }

    #[test]
    fn a_missing_binary_is_named() {
        let mut spec = spec();
        spec.binary = PathBuf::from("/nonexistent/acme-manager");
        let dir = tempfile::tempdir().unwrap();
        let error = build(&spec, dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("/nonexistent/acme-manager is not a file"),
            "{error}"
        );
    }
}
