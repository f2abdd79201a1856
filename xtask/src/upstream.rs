//! `cargo xtask upstream install|start|stop`: upstream Cluster API as a peer (DESIGN.md §8).
//!
//! - `install` builds the core manager, the kubeadm bootstrap and control plane managers, CAPD
//!   (with its in-memory backend), clusterctl and kustomize from the Go module proxy through the
//!   wrapper module `xtask/go/upstream`, and cert-manager's controller and CA injector through
//!   `xtask/go/cert-manager`; copies upstream's own configuration (CRDs, webhook manifests),
//!   CAPD's templates and cert-manager's CRDs from the Go module cache; and writes clusterctl
//!   repositories of upstream's providers and cert-manager ([`capi_testing::clusterctl`]) — into
//!   [`default_upstream_dir`]; nothing of upstream's is committed. Older revisions are removed.
//! - `start` starts a local control plane with upstream's CRDs and webhooks and the four managers
//!   (see [`capi_testing::upstream`] for what is on and off), in a background process, and prints
//!   the `KUBECONFIG` to use. One peer at a time: upstream's in-memory backend listens on fixed
//!   ports.
//! - `stop` stops it: the managers, the control plane and their directories are removed (the
//!   background process's log stays in `<cache>/upstream-run/serve.log`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capi_testing::clusterctl::{
    CERT_MANAGER_BINARIES, CERT_MANAGER_VERSION, UPSTREAM_PROVIDERS, cert_manager_components,
    cert_manager_components_path, development_image,
};
use capi_testing::envtest::{Assets, ControlPlane, KUBEBUILDER_ASSETS, cache_root};
use capi_testing::upstream::{
    CLUSTER_API_VERSION, CLUSTERCTL, COMPONENTS, TEMPLATES, UpstreamAssets, UpstreamPeer,
    default_upstream_dir,
};

use crate::command::{run, step};
use crate::go::{GoModule, Target};

/// The wrapper module's name under `xtask/go/`.
const MODULE: &str = "upstream";

/// How long `start` waits for the peer: longer than the harness's own worst case (the control
/// plane, then each manager's readiness).
const START_TIMEOUT: Duration = Duration::from_secs(900);

/// How long a started `serve` waits for `start` to adopt it before it stops on its own (an
/// interrupted `start` must not leave an orphan holding the peer's fixed ports).
const ADOPTION_TIMEOUT: Duration = Duration::from_secs(30);

/// `cargo xtask upstream <action>`.
/// What `cargo xtask upstream` does.
#[derive(Clone, Debug, clap::Subcommand)]
pub(crate) enum Action {
    /// Build what is missing of the peer (Go module proxy; cached by version).
    Install,
    /// Install, then start a local control plane with the peer on it, in the background; prints
    /// the KUBECONFIG to use.
    Start,
    /// Stop the peer and its control plane.
    Stop,
    /// The background process `start` runs (not for users).
    #[command(hide = true)]
    Serve {
        /// The state file `start` wrote.
        state: PathBuf,
    },
}

pub(crate) fn command(action: Action) -> Result<()> {
    match action {
        Action::Install => install().map(|_| ()),
        Action::Start => start(),
        Action::Stop => stop(),
        Action::Serve { state } => serve(state),
    }
}

/// Builds what is missing of the peer and returns its installation.
pub(crate) fn install() -> Result<UpstreamAssets> {
    let dir = default_upstream_dir();
    if let Ok(assets) = UpstreamAssets::in_dir(&dir) {
        println!(
            "upstream: Cluster API {CLUSTER_API_VERSION} installed in {}",
            dir.display()
        );
        return Ok(assets);
    }
    let module = GoModule::named(MODULE);
    let pinned = module.required_version("sigs.k8s.io/cluster-api")?;
    if pinned != CLUSTER_API_VERSION {
        bail!(
            "{} pins sigs.k8s.io/cluster-api {pinned} but capi_testing::upstream says \
             {CLUSTER_API_VERSION}; change both (and UPSTREAM_REVISION) together",
            module.dir().join("go.mod").display()
        );
    }
    let bin = dir.join("bin");
    let missing: Vec<Target<'_>> = COMPONENTS
        .iter()
        .map(|c| (c.name, c.package))
        .chain([CLUSTERCTL, KUSTOMIZE])
        .filter(|(name, _)| !bin.join(name).is_file())
        .map(|(binary, package)| Target { package, binary })
        .collect();
    step(&format!(
        "Building upstream Cluster API {CLUSTER_API_VERSION} ({}) from the Go module proxy into {} \
         — once per version; with Go's caches cold about 3 minutes on 2 cores after the local \
         control plane's build (they share the k8s.io modules)",
        missing
            .iter()
            .map(|t| t.binary)
            .collect::<Vec<_>>()
            .join(", "),
        dir.display()
    ));
    let version = "sigs.k8s.io/cluster-api/version";
    let ldflags = format!(
        "-s -w -X {version}.gitVersion={CLUSTER_API_VERSION} -X {version}.gitTreeState=clean"
    );
    module.build(&missing, &ldflags, &bin)?;

    step(
        "Copying upstream's CRDs, webhook manifests and in-memory templates from the module cache",
    );
    // Three of the managers share a module: look each module up once.
    let mut module_dirs = std::collections::BTreeMap::new();
    for component in &COMPONENTS {
        if !module_dirs.contains_key(component.module) {
            module_dirs.insert(component.module, module.module_dir(component.module)?);
        }
        let source = module_dirs[component.module].join(component.config);
        replace_dir(&source, &dir.join("config").join(component.name))?;
        println!("    {} ← {}", component.name, source.display());
        if component.name == "capd" {
            replace_dir(
                &module_dirs[component.module].join(TEMPLATES),
                &dir.join("templates"),
            )?;
        }
    }
    install_cert_manager(&bin, &dir)?;
    write_clusterctl_repositories(&dir, &module)?;
    crate::go::remove_other_revisions(&dir);
    Ok(UpstreamAssets::in_dir(&dir)?)
}

/// kustomize, which renders upstream's components as upstream's release does: its binary's name
/// under `<dir>/bin`, and its main package.
const KUSTOMIZE: (&str, &str) = ("kustomize", "sigs.k8s.io/kustomize/kustomize/v5");

/// The wrapper module of cert-manager's controller and CA injector under `xtask/go/`.
const CERT_MANAGER_MODULE: &str = "cert-manager";

/// Builds cert-manager's controller and CA injector and copies its CRDs from the module cache into
/// `<dir>/config/cert-manager/crds`.
fn install_cert_manager(bin: &Path, dir: &Path) -> Result<()> {
    let module = GoModule::named(CERT_MANAGER_MODULE);
    let pinned = module.required_version("github.com/cert-manager/cert-manager")?;
    if pinned != CERT_MANAGER_VERSION {
        bail!(
            "{} pins cert-manager {pinned} but capi_testing::clusterctl says \
             {CERT_MANAGER_VERSION}; change both (and UPSTREAM_REVISION) together",
            module.dir().join("go.mod").display()
        );
    }
    let packages = [
        "capi-rs.local/cert-manager/controller",
        "capi-rs.local/cert-manager/cainjector",
    ];
    let missing: Vec<Target<'_>> = packages
        .into_iter()
        .zip(CERT_MANAGER_BINARIES)
        .filter(|(_, binary)| !bin.join(binary).is_file())
        .map(|(package, binary)| Target { package, binary })
        .collect();
    if !missing.is_empty() {
        step(&format!(
            "Building cert-manager {CERT_MANAGER_VERSION}'s controller and CA injector from the Go \
             module proxy into {} — once per version; about 2 minutes on 2 cores",
            bin.display()
        ));
        module.build(&missing, "-s -w", bin)?;
    }
    let source = module
        .module_dir("github.com/cert-manager/cert-manager")?
        .join("deploy")
        .join("crds");
    replace_dir(
        &source,
        &dir.join("config").join("cert-manager").join("crds"),
    )?;
    Ok(())
}

/// Writes the clusterctl repositories of upstream's providers (their `config/default` rendered by
/// kustomize, with the release's image names, beside upstream's `metadata.yaml`) and of
/// cert-manager into `<dir>/clusterctl` (see [`capi_testing::clusterctl`]).
fn write_clusterctl_repositories(dir: &Path, module: &GoModule) -> Result<()> {
    step("Rendering upstream's and cert-manager's components into clusterctl repositories");
    let metadata = module
        .module_dir("sigs.k8s.io/cluster-api")?
        .join("metadata.yaml");
    let kustomize = dir.join("bin").join(KUSTOMIZE.0);
    for (provider, component) in UPSTREAM_PROVIDERS.iter().zip(COMPONENTS.iter()) {
        let rendered = crate::command::output(
            Command::new(&kustomize)
                .arg("build")
                .arg(dir.join("config").join(component.name).join("default")),
        )?;
        let development = development_image(provider);
        if !rendered.contains(&development) {
            bail!(
                "kustomize's rendering of {}'s config/default does not name {development}; \
                 upstream changed its image names",
                component.name
            );
        }
        let released = rendered.replace(&development, &provider.release_image());
        let path = provider.components_path(dir);
        let folder = path.parent().context("a components file has a folder")?;
        std::fs::create_dir_all(folder)?;
        std::fs::write(&path, released)?;
        // The module cache's files are read-only: write a copy, never copy the mode.
        std::fs::write(folder.join("metadata.yaml"), std::fs::read(&metadata)?)?;
        println!("    {}", path.display());
    }
    let cert_manager =
        cert_manager_components(&dir.join("config").join("cert-manager").join("crds"))?;
    let path = cert_manager_components_path(dir);
    std::fs::create_dir_all(path.parent().context("a components file has a folder")?)?;
    std::fs::write(&path, cert_manager)?;
    println!("    {}", path.display());
    Ok(())
}

/// Where a started peer records itself.
fn state_file() -> PathBuf {
    cache_root().join("upstream-run").join("state.json")
}

fn start() -> Result<()> {
    let state = state_file();
    if let Some(pid) = running_peer(&state) {
        bail!(
            "a peer is already running (process {pid}, see {}); `cargo xtask upstream stop` first",
            state.display()
        );
    }
    // A state file whose process is gone (a reboot, a crash) is stale.
    let _ = std::fs::remove_file(&state);
    let assets_dir = crate::envtest::ensure_control_plane()?;
    install()?;
    step("Starting a local control plane with upstream Cluster API's four managers");
    let run_dir = state.parent().context("state file has no parent")?;
    std::fs::create_dir_all(run_dir)?;
    let log = run_dir.join("serve.log");
    let out = std::fs::File::create(&log)?;
    let pending = state.with_extension("pending");
    let _ = std::fs::remove_file(&pending);
    let mut child = {
        use std::os::unix::process::CommandExt;
        Command::new(std::env::current_exe()?)
            .args(["upstream", "serve"])
            .arg(&pending)
            .env(KUBEBUILDER_ASSETS, &assets_dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            // Its own process group: the peer outlives this command and the terminal's signals.
            .process_group(0)
            .spawn()
            .context("starting the peer's background process")?
    };
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            bail!(
                "the peer stopped during start-up ({status}); its log {}:\n{}",
                log.display(),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        if pending.exists() {
            // `serve` writes the pending file atomically (write, then rename), so it is whole.
            std::fs::rename(&pending, &state)?;
            break;
        }
        if started.elapsed() > START_TIMEOUT {
            let _ = child.kill();
            bail!(
                "the peer was not up after {START_TIMEOUT:?}; its log is {}",
                log.display()
            );
        }
        crate::command::pause(Duration::from_millis(200));
    }
    let recorded: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state)?)?;
    println!(
        "    upstream Cluster API {CLUSTER_API_VERSION} is running ({:.0?}); managers' logs in {}",
        started.elapsed(),
        recorded["peerDir"].as_str().unwrap_or("?")
    );
    println!(
        "    templates: {}",
        default_upstream_dir().join("templates").display()
    );
    println!(
        "\nexport KUBECONFIG={}",
        recorded["kubeconfig"].as_str().unwrap_or("?")
    );
    println!("# stop with: cargo xtask upstream stop");
    Ok(())
}

/// The background process: runs the control plane and the peer until the state file is removed.
fn serve(pending: PathBuf) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut control_plane = ControlPlane::start_with(&Assets::locate()?).await?;
        let mut peer = UpstreamPeer::start(&control_plane, &UpstreamAssets::locate()?).await?;
        let record = serde_json::json!({
            "pid": std::process::id(),
            "kubeconfig": control_plane.kubeconfig_path(),
            "apiServer": control_plane.url(),
            "peerDir": peer.dir(),
            "managerPids": peer.pids(),
        });
        let written = pending.with_extension("partial");
        std::fs::write(&written, serde_json::to_vec_pretty(&record)?)?;
        std::fs::rename(&written, &pending)?;
        println!("serving; remove {} to stop", state_file().display());
        // `start` renames the pending file to the state file; `stop` removes it. Stop also when
        // nobody adopts this process, or when a manager or the control plane has died.
        let state = state_file();
        let waiting_since = std::time::Instant::now();
        let outcome = loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if pending.exists() && waiting_since.elapsed() > ADOPTION_TIMEOUT {
                let _ = std::fs::remove_file(&pending);
                break Err(anyhow::anyhow!("`start` did not adopt this peer; stopping"));
            }
            if !pending.exists() && !state.exists() {
                break Ok(());
            }
            if let Err(error) = peer.check() {
                break Err(anyhow::anyhow!("an upstream manager stopped: {error}"));
            }
            if !control_plane.is_running() {
                break Err(anyhow::anyhow!("the control plane stopped"));
            }
        };
        if outcome.is_err() {
            let _ = std::fs::remove_file(&state);
        }
        drop(peer);
        drop(control_plane);
        outcome
    })
}

/// The process ID of the peer the state file records, if that process is still the peer's
/// `serve` (a stale file after a reboot may name an unrelated process).
fn running_peer(state: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(state).ok()?;
    let recorded: serde_json::Value = serde_json::from_str(&text).ok()?;
    let pid = u32::try_from(recorded["pid"].as_u64()?).ok()?;
    is_serve(pid).then_some(pid)
}

/// Whether process `pid` is an `xtask upstream serve`.
fn is_serve(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        args.windows(2)
            .any(|pair| pair[0] == b"upstream" && pair[1] == b"serve")
    })
}

fn stop() -> Result<()> {
    let state = state_file();
    // An unadopted peer (an interrupted `start`) stops on its own once its pending file is gone.
    let _ = std::fs::remove_file(state.with_extension("pending"));
    let pid = running_peer(&state);
    let _ = std::fs::remove_file(&state);
    let Some(pid) = pid else {
        println!("upstream: no peer is running");
        return Ok(());
    };
    let alive = || is_serve(pid);
    let started = Instant::now();
    while alive() && started.elapsed() < Duration::from_secs(60) {
        crate::command::pause(Duration::from_millis(200));
    }
    if alive() {
        // Its watchdogs stop the servers and remove their directories once it is gone.
        run(Command::new("kill").args(["-9", &pid.to_string()]))?;
    }
    println!("upstream: stopped ({:.1?})", started.elapsed());
    Ok(())
}

/// Replaces `to` with a copy of the directory `from`.
fn replace_dir(from: &Path, to: &Path) -> Result<()> {
    if !from.is_dir() {
        bail!("{} is not in the module cache", from.display());
    }
    if to.exists() {
        std::fs::remove_dir_all(to).with_context(|| format!("removing {}", to.display()))?;
    }
    copy_dir(from, to)
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
            // The module cache is read-only; let the owner replace the copy on the next install.
            use std::os::unix::fs::PermissionsExt;
            let mut permissions = std::fs::metadata(&target)?.permissions();
            permissions.set_mode(permissions.mode() | 0o200);
            std::fs::set_permissions(&target, permissions)?;
        }
    }
    Ok(())
}
