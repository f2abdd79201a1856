//! Azure's own models as a test oracle: `arm_models/checker.py` run by the Python of the venv
//! `cargo xtask azure-models` installs (its path in `CAPI_RS_AZURE_MODELS_PYTHON`; `cargo xtask
//! test` sets it), which judges an ARM request or response body by the official Python SDK's
//! model of it — unknown properties, read-only ones sent, required ones missing, wrong types,
//! values outside an enum — and says where.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

/// The variable naming the venv's Python.
pub const PYTHON_ENV: &str = "CAPI_RS_AZURE_MODELS_PYTHON";

/// Which way a body travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client to ARM: no unknown or read-only properties, the writable required ones present.
    Request,
    /// ARM to client: no unknown properties, the required ones present.
    Response,
}

/// A running checker; stopped when dropped.
pub struct ModelChecker {
    io: Mutex<(ChildStdin, Lines<BufReader<ChildStdout>>)>,
    _child: Child,
    checked: AtomicU64,
}

impl ModelChecker {
    /// Starts the checker, or fails saying how to install Azure's models.
    pub fn start() -> Self {
        let python = std::env::var(PYTHON_ENV).unwrap_or_else(|_| {
            panic!(
                "{PYTHON_ENV} is not set: these tests check ARM bodies against Azure's Python \
                 SDK models. `cargo xtask test` installs them; alone, run `cargo xtask \
                 azure-models` and export the variable it prints"
            )
        });
        // This crate's, or its parent's (the provider's, for the manager binary's tests).
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let script = [manifest, manifest.parent().unwrap_or(manifest)]
            .into_iter()
            .map(|dir| dir.join("tests/arm_models/checker.py"))
            .find(|path| path.exists())
            .unwrap_or_else(|| manifest.join("tests/arm_models/checker.py"));
        let mut child = Command::new(&python)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {python} {}: {e}", script.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        Self {
            io: Mutex::new((stdin, BufReader::new(stdout).lines())),
            _child: child,
            checked: AtomicU64::new(0),
        }
    }

    /// Judges `body` as model `model` (`compute:VirtualMachine`, `network:LoadBalancer`,
    /// `resource:ResourceGroup`, ...): `Err` with each problem as `<path>: why`.
    pub async fn check(
        &self,
        model: &str,
        direction: Direction,
        body: &Value,
    ) -> Result<(), Vec<String>> {
        let direction = match direction {
            Direction::Request => "request",
            Direction::Response => "response",
        };
        let message = json!({"model": model, "direction": direction, "body": body});
        let mut io = self.io.lock().await;
        let (stdin, stdout) = &mut *io;
        let sent = async {
            stdin.write_all(format!("{message}\n").as_bytes()).await?;
            stdin.flush().await?;
            stdout.next_line().await
        };
        let line = match sent.await {
            Ok(Some(line)) => line,
            Ok(None) => return Err(vec!["the checker exited".into()]),
            Err(e) => return Err(vec![format!("the checker: {e}")]),
        };
        self.checked.fetch_add(1, Ordering::Relaxed);
        let answer: Value = serde_json::from_str(&line)
            .map_err(|e| vec![format!("the checker answered {line:?}: {e}")])?;
        if answer["ok"] == json!(true) {
            return Ok(());
        }
        Err(answer["problems"]
            .as_array()
            .map(|p| {
                p.iter()
                    .map(|p| p.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default())
    }

    /// How many bodies were judged.
    pub fn checked(&self) -> u64 {
        self.checked.load(Ordering::Relaxed)
    }
}
