//! `moto_server` on loopback for the AWS provider's integration tests: moto (the AWS API
//! simulator, from PyPI) in a Python venv of its own under the cache, started on a free port.
//!
//! The tests read its endpoint from [`ENDPOINT_ENV`] and never reset it (a reset would wipe the
//! state of tests running beside them): each test works in an AWS account of its own (moto keys
//! its state by the account in `x-moto-account-id`).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use capi_testing::envtest::cache_root;

use crate::command::{run, step, succeeds};

/// The moto release the tests are written against (its known gaps are pinned by the provider's
/// `moto_behaviour` test).
pub(crate) const VERSION: &str = "5.2.5";

/// The variable the AWS provider's integration tests read: moto's endpoint URL.
pub(crate) const ENDPOINT_ENV: &str = "CAPI_RS_MOTO_ENDPOINT";

/// The venv of [`VERSION`].
fn venv() -> PathBuf {
    cache_root().join("moto").join(VERSION).join("venv")
}

/// Where a server started by `cargo xtask moto start` records its process and endpoint.
fn state_file() -> PathBuf {
    cache_root().join("moto").join("running")
}

/// Installs moto [`VERSION`] with its server extra into its venv (once; Debian's `python3-venv`
/// first when Python cannot make a venv).
pub(crate) fn install() -> Result<()> {
    let venv = venv();
    let marker = venv.join("installed");
    if marker.is_file() {
        println!("    moto {VERSION} is installed in {}", venv.display());
        return Ok(());
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
    run(Command::new(&pip).args(["install", "--quiet", "--upgrade", "pip"]))?;
    run(Command::new(&pip).args(["install", "--quiet", &format!("moto[server]=={VERSION}")]))?;
    std::fs::write(&marker, VERSION).with_context(|| format!("writing {}", marker.display()))?;
    println!("    moto {VERSION} installed in {}", venv.display());
    Ok(())
}

/// A running `moto_server`; killed when dropped, so a failing test run leaves nothing behind.
pub(crate) struct Moto {
    child: Child,
    endpoint: String,
}

impl Moto {
    /// `http://127.0.0.1:<port>`.
    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `moto_server` on a free loopback port and waits until it answers (its log goes to
/// `<cache>/moto/server.log`).
pub(crate) fn start() -> Result<Moto> {
    let port = crate::command::free_ports(1)?
        .into_iter()
        .next()
        .context("finding a free loopback port")?;
    let dir = cache_root().join("moto");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let log_path = dir.join("server.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let child = Command::new(venv().join("bin").join("moto_server"))
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting moto_server (run `cargo xtask moto install` first)")?;
    let mut moto = Moto {
        child,
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    let started = Instant::now();
    while !answers(port) {
        if let Some(status) = moto.child.try_wait()? {
            bail!(
                "moto_server exited ({status}) before answering; see {}",
                log_path.display()
            );
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!(
                "moto_server did not answer on port {port} within 60 s; see {}",
                log_path.display()
            );
        }
        crate::command::pause(Duration::from_millis(200));
    }
    println!(
        "    moto_server {VERSION} ready in {:.1?}; {ENDPOINT_ENV}={}",
        started.elapsed(),
        moto.endpoint
    );
    Ok(moto)
}

/// Whether moto's own API (`/moto-api/`) answers 200 on `port`.
fn answers(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}

/// What `cargo xtask moto` does.
#[derive(Clone, Debug, clap::Subcommand)]
pub(crate) enum Action {
    /// Install moto into its venv under the cache.
    Install,
    /// Install, then start `moto_server` in the background; prints the variable to export.
    Start,
    /// Stop the server `start` left running.
    Stop,
}

/// `cargo xtask moto <install|start|stop>`.
pub(crate) fn command(action: Action) -> Result<()> {
    match action {
        Action::Install => install(),
        Action::Start => {
            stop()?;
            install()?;
            step("Starting moto_server");
            let moto = start()?;
            std::fs::write(
                state_file(),
                format!("{} {}", moto.child.id(), moto.endpoint()),
            )?;
            println!(
                "export {ENDPOINT_ENV}={}\n(stop it with `cargo xtask moto stop`)",
                moto.endpoint()
            );
            std::mem::forget(moto);
            Ok(())
        }
        Action::Stop => stop(),
    }
}

/// Stops the server recorded in the state file, if any.
fn stop() -> Result<()> {
    let path = state_file();
    let Ok(state) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    if let Some(pid) = state.split_whitespace().next() {
        // Gone already is fine.
        let _ = Command::new("kill").arg(pid).status();
        println!("    stopped moto_server (pid {pid})");
    }
    remove(&path)
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(error).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}
