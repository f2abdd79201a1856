//! Running etcd and kube-apiserver as child processes.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::pki::ControlPlanePki;
use super::{Assets, EnvtestError};

const START_TIMEOUT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(100);

/// A running etcd + kube-apiserver pair on free loopback ports, with an admin token.
///
/// Guarantees: the processes and their data directory are removed when the value is dropped; if
/// the owning process dies without dropping it (a panic with `panic = "abort"`, SIGKILL), a
/// watchdog process removes them within about a second.
pub struct ControlPlane {
    // Fields drop in order: the API server goes before etcd, the scratch directory last.
    // Held only so that it is killed (dropped) with the servers.
    _watchdog: Option<Process>,
    apiserver: Process,
    etcd: Process,
    url: String,
    kubeconfig: String,
    kubeconfig_path: PathBuf,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("url", &self.url)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl ControlPlane {
    /// Starts a control plane from the binaries [`Assets::locate`] finds.
    pub async fn start() -> Result<Self, EnvtestError> {
        Self::start_with(&Assets::locate()?).await
    }

    /// Starts a control plane from the given binaries. Retries twice when a port picked as free
    /// was taken by someone else in the meantime.
    pub async fn start_with(assets: &Assets) -> Result<Self, EnvtestError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once(assets).await {
                Err(EnvtestError::Exited { ref tail, .. })
                    if attempt < 3 && tail.contains("address already in use") =>
                {
                    continue;
                }
                other => return other,
            }
        }
    }

    async fn start_once(assets: &Assets) -> Result<Self, EnvtestError> {
        let dir = scratch_dir()?;
        let root = dir.path().to_path_buf();
        let pki = ControlPlanePki::generate()?;
        let token = random_token()?;
        let files = [
            ("ca.crt", pki.ca_pem.as_str()),
            ("apiserver.crt", pki.serving_cert_pem.as_str()),
            ("apiserver.key", pki.serving_key_pem.as_str()),
            ("sa.key", pki.service_account_key_pem.as_str()),
            ("sa.pub", pki.service_account_public_pem.as_str()),
        ];
        for (name, content) in files {
            write(&root.join(name), content)?;
        }
        write(
            &root.join("tokens.csv"),
            &format!("{token},admin,admin,\"system:masters\"\n"),
        )?;

        let [etcd_port, peer_port, api_port] = free_ports()?;
        let mut etcd = Process::spawn(
            Command::new(&assets.etcd)
                .arg(format!("--data-dir={}", root.join("etcd").display()))
                .arg("--name=default")
                .arg(format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"))
                .arg(format!(
                    "--advertise-client-urls=http://127.0.0.1:{etcd_port}"
                ))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"
                ))
                .arg(format!(
                    "--initial-cluster=default=http://127.0.0.1:{peer_port}"
                ))
                .arg("--log-level=warn"),
            &root,
            "etcd",
        )?;
        wait_for_port(&mut etcd, etcd_port).await?;

        let mut apiserver = Process::spawn(
            Command::new(&assets.kube_apiserver)
                .arg(format!("--etcd-servers=http://127.0.0.1:{etcd_port}"))
                .arg("--bind-address=127.0.0.1")
                .arg("--advertise-address=127.0.0.1")
                .arg(format!("--secure-port={api_port}"))
                .arg(format!("--cert-dir={}", root.join("certs").display()))
                .arg(format!(
                    "--tls-cert-file={}",
                    root.join("apiserver.crt").display()
                ))
                .arg(format!(
                    "--tls-private-key-file={}",
                    root.join("apiserver.key").display()
                ))
                .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
                .arg(format!(
                    "--service-account-key-file={}",
                    root.join("sa.pub").display()
                ))
                .arg(format!(
                    "--service-account-signing-key-file={}",
                    root.join("sa.key").display()
                ))
                .arg(format!(
                    "--token-auth-file={}",
                    root.join("tokens.csv").display()
                ))
                .arg("--authorization-mode=RBAC")
                .arg("--service-cluster-ip-range=10.0.0.0/24")
                .arg("--allow-privileged=true")
                .arg("--disable-admission-plugins=ServiceAccount")
                .arg("--profiling=false"),
            &root,
            "kube-apiserver",
        )?;
        let watchdog = spawn_watchdog(&root, &[&etcd, &apiserver]).ok();

        let url = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = kubeconfig_yaml(&url, &root.join("ca.crt"), &token);
        let kubeconfig_path = root.join("kubeconfig");
        write(&kubeconfig_path, &kubeconfig)?;
        wait_for_readyz(&mut apiserver, &mut etcd, &kubeconfig).await?;
        Ok(Self {
            _watchdog: watchdog,
            apiserver,
            etcd,
            url,
            kubeconfig,
            kubeconfig_path,
            dir,
        })
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A kubeconfig (admin token, CA file) for the API server, as YAML. It contains a bearer token:
    /// do not log it.
    pub fn kubeconfig_yaml(&self) -> &str {
        &self.kubeconfig
    }

    /// Where the kubeconfig is written; valid while the control plane runs.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The directory with the certificates, logs and etcd data.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The client configuration for the API server (admin token, CA), e.g. to build a client with
    /// extra layers.
    pub async fn config(&self) -> Result<Config, EnvtestError> {
        let kubeconfig = Kubeconfig::from_yaml(&self.kubeconfig)?;
        Ok(Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
    }

    /// A new client for the API server, authenticated as a member of `system:masters`.
    pub async fn client(&self) -> Result<Client, EnvtestError> {
        client_from_kubeconfig(&self.kubeconfig).await
    }

    /// Whether both processes are still running.
    pub fn is_running(&mut self) -> bool {
        self.apiserver.check().is_ok() && self.etcd.check().is_ok()
    }
}

/// A child process that is killed when dropped.
struct Process {
    child: Child,
    binary: &'static str,
    log: PathBuf,
}

impl Process {
    fn spawn(
        command: &mut Command,
        dir: &Path,
        binary: &'static str,
    ) -> Result<Self, EnvtestError> {
        let log = dir.join(format!("{binary}.log"));
        let out =
            File::create(&log).map_err(EnvtestError::io(format!("creating {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(EnvtestError::io(format!("opening {}", log.display())))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(EnvtestError::io(format!("starting {binary}")))?;
        Ok(Self { child, binary, log })
    }

    /// `Err` if the process has exited, with its log's tail.
    fn check(&mut self) -> Result<(), EnvtestError> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(EnvtestError::Exited {
                binary: self.binary,
                status: status.to_string(),
                tail: tail(&self.log),
                log: self.log.clone(),
            }),
            _ => Ok(()),
        }
    }

    fn not_ready(&self) -> EnvtestError {
        EnvtestError::NotReady {
            binary: self.binary,
            seconds: START_TIMEOUT.as_secs(),
            tail: tail(&self.log),
            log: self.log.clone(),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn wait_for_port(process: &mut Process, port: u16) -> Result<(), EnvtestError> {
    let started = Instant::now();
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    loop {
        process.check()?;
        if TcpStream::connect_timeout(&address, POLL).is_ok() {
            return Ok(());
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(process.not_ready());
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn wait_for_readyz(
    apiserver: &mut Process,
    etcd: &mut Process,
    kubeconfig: &str,
) -> Result<(), EnvtestError> {
    let started = Instant::now();
    let client = client_from_kubeconfig(kubeconfig).await?;
    loop {
        apiserver.check()?;
        etcd.check()?;
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .map_err(|e| EnvtestError::Io {
                action: "building the readiness request".into(),
                source: std::io::Error::other(e),
            })?;
        if let Ok(body) = client.request_text(request).await
            && body.trim() == "ok"
        {
            return Ok(());
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(apiserver.not_ready());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Builds a client from kubeconfig YAML.
pub(crate) async fn client_from_kubeconfig(yaml: &str) -> Result<Client, EnvtestError> {
    let kubeconfig = Kubeconfig::from_yaml(yaml)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

fn kubeconfig_yaml(url: &str, ca: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: envtest\n  cluster:\n    server: {url}\n    \
         certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: envtest\n  \
         context:\n    cluster: envtest\n    user: admin\n    namespace: default\ncurrent-context: envtest\n",
        ca = ca.display()
    )
}

/// A scratch directory, on tmpfs when the machine has one: etcd fsyncs every write.
fn scratch_dir() -> Result<tempfile::TempDir, EnvtestError> {
    let shm = Path::new("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix("capi-envtest-");
    let dir = if shm.is_dir() {
        builder.tempdir_in(shm).or_else(|_| builder.tempdir())
    } else {
        builder.tempdir()
    };
    dir.map_err(EnvtestError::io(
        "creating the control plane's scratch directory",
    ))
}

fn write(path: &Path, content: &str) -> Result<(), EnvtestError> {
    std::fs::write(path, content).map_err(EnvtestError::io(format!("writing {}", path.display())))
}

/// A shell that outlives us only to clean up after a crash: it polls our PID and, once we are
/// gone, kills the servers and removes the scratch directory.
fn spawn_watchdog(dir: &Path, processes: &[&Process]) -> Result<Process, EnvtestError> {
    let pids: Vec<String> = processes.iter().map(|p| p.child.id().to_string()).collect();
    Process::spawn(
        Command::new("sh")
            .arg("-c")
            .arg(r#"while kill -0 "$1" 2>/dev/null; do sleep 1; done; kill -9 $3 2>/dev/null; rm -rf "$2""#)
            .arg("capi-envtest-watchdog")
            .arg(std::process::id().to_string())
            .arg(dir)
            .arg(pids.join(" ")),
        dir,
        "watchdog",
    )
}

fn free_ports() -> Result<[u16; 3], EnvtestError> {
    // Hold all three listeners at once so that the kernel hands out three different ports.
    let listeners = (0..3)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(EnvtestError::io("finding free loopback ports"))?;
    let mut ports = [0; 3];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener
            .local_addr()
            .map_err(EnvtestError::io("reading a bound port"))?
            .port();
    }
    Ok(ports)
}

fn random_token() -> Result<String, EnvtestError> {
    use std::io::Read;
    let mut bytes = [0u8; 24];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(EnvtestError::io("reading /dev/urandom"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn tail(log: &Path) -> String {
    let content = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = content.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
