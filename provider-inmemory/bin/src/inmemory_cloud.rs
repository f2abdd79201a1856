//! `inmemory-cloud`: the simulated cloud as its own process, so that its state survives the
//! managers that are killed and restarted against it (quickstart, benchmarks, chaos tests).
//!
//! ```text
//! inmemory-cloud [--listen 127.0.0.1:0] [--boot-time-ms N] [--delete-time-ms N] [--call-latency-ms N]
//!                [--jitter F] [--max-instances N] [--error-rate F] [--lost-create-response-rate F]
//!                [--seed N] [--list-lag-ms N] [--workload-kubeconfig FILE]
//!                [--workload-endpoints HOST:PORT] [--etcd FILE]
//! ```
//!
//! Prints `listening on http://ADDR` on the first line of standard output once it accepts requests.
//! With `--workload-kubeconfig`, every running instance is registered as a `Node` there; with
//! `--workload-endpoints` too, each cluster gets its own API endpoint over that API server
//! (`provider_inmemory::endpoints`: `http://ADDR/clusters/<namespace>/<name>`), announced on the
//! second line as `workload endpoints on http://ADDR`. With `--etcd FILE` too (feature
//! `real-etcd`), each control-plane instance runs a real etcd member (the binary `FILE`, serving
//! TLS from the etcd CA in its bootstrap data) and each node a kubelet endpoint on its loopback
//! address forwarding `etcd-<node>:2379`, so that a KubeadmControlPlane (upstream's too) reaches
//! etcd through the workload API server's `pods/portforward` as on a real cloud
//! (`provider_inmemory::cloud::EtcdProcesses`, `provider_inmemory::kubelet`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use provider_inmemory::cloud::{CloudConfig, CloudServer, Faults, SimulatedCloud};
use provider_inmemory::endpoints::WorkloadEndpoints;
use provider_inmemory::nodes::NodeRegistrar;

struct Args {
    listen: SocketAddr,
    config: CloudConfig,
    workload_kubeconfig: Option<String>,
    workload_endpoints: Option<SocketAddr>,
    /// The etcd binary of `--etcd` (read only with the feature `real-etcd`).
    #[cfg_attr(not(feature = "real-etcd"), allow(dead_code))]
    etcd: Option<std::path::PathBuf>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args> {
    let mut parsed = Args {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        config: CloudConfig::default(),
        workload_kubeconfig: None,
        workload_endpoints: None,
        etcd: None,
    };
    let mut faults = Faults::default();
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        let ms = |v: String| -> Result<Duration> {
            Ok(Duration::from_millis(
                v.parse().context("expected milliseconds")?,
            ))
        };
        let rate = |v: String| -> Result<f64> {
            let r: f64 = v.parse().context("expected a number")?;
            if !(0.0..=1.0).contains(&r) {
                bail!("{r} is not a probability between 0 and 1");
            }
            Ok(r)
        };
        match flag.as_str() {
            "--listen" => parsed.listen = value()?.parse().context("--listen expects HOST:PORT")?,
            "--boot-time-ms" => parsed.config.boot_time = ms(value()?)?,
            "--delete-time-ms" => parsed.config.delete_time = ms(value()?)?,
            "--call-latency-ms" => parsed.config.call_latency = ms(value()?)?,
            "--list-lag-ms" => parsed.config.list_lag = ms(value()?)?,
            "--jitter" => parsed.config.jitter = rate(value()?)?,
            "--max-instances" => {
                parsed.config.max_instances = Some(
                    value()?
                        .parse()
                        .context("--max-instances expects a count")?,
                )
            }
            "--error-rate" => faults.error_rate = rate(value()?)?,
            "--lost-create-response-rate" => faults.lost_create_response_rate = rate(value()?)?,
            "--seed" => {
                parsed.config.seed = Some(value()?.parse().context("--seed expects a number")?)
            }
            "--workload-kubeconfig" => parsed.workload_kubeconfig = Some(value()?),
            "--workload-endpoints" => {
                parsed.workload_endpoints = Some(
                    value()?
                        .parse()
                        .context("--workload-endpoints expects HOST:PORT")?,
                )
            }
            "--etcd" if cfg!(feature = "real-etcd") => parsed.etcd = Some(value()?.into()),
            "--etcd" => bail!("--etcd needs inmemory-cloud built with the feature real-etcd"),
            other => bail!("unknown argument {other:?}; see the crate docs for the flags"),
        }
    }
    parsed.config.faults = faults;
    if parsed.etcd.is_some() {
        if parsed.workload_kubeconfig.is_none() {
            bail!(
                "--etcd needs --workload-kubeconfig: the API server that forwards to the members"
            );
        }
        // Each node's kubelet endpoint listens on the node's own address.
        parsed.config.loopback_addresses = true;
    }
    if parsed.workload_endpoints.is_some() && parsed.workload_kubeconfig.is_none() {
        bail!("--workload-endpoints needs --workload-kubeconfig: the API server they forward to");
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let args = parse(std::env::args().skip(1))?;
    let cloud = Arc::new(SimulatedCloud::new(args.config));
    let server = CloudServer::start(Arc::clone(&cloud), args.listen)
        .await
        .context("binding the listen address")?;
    let mut endpoints = None;
    // The etcd members, stopped (their processes killed) when this is dropped at exit.
    #[cfg(feature = "real-etcd")]
    let mut members = None;
    if let Some(path) = args.workload_kubeconfig {
        let yaml = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        if let Some(addr) = args.workload_endpoints {
            // A 429 or 503 is the caller's answer: the proxy passes it on, never retries it.
            let mut forwarding = config.clone();
            forwarding.default_retry = false;
            endpoints = Some(
                WorkloadEndpoints::start(kube::Client::try_from(forwarding)?, addr)
                    .await
                    .context("binding the workload endpoints' address")?,
            );
        }
        let registrar = NodeRegistrar::new(kube::Client::try_from(config)?, cloud.clone());
        #[cfg(feature = "real-etcd")]
        let registrar = match &args.etcd {
            Some(binary) => {
                let started = provider_inmemory::cloud::EtcdProcesses::start(&cloud, binary);
                let registrar = registrar.with_kubelets(started.port_forward_targets());
                members = Some(started);
                registrar
            }
            None => registrar,
        };
        tokio::spawn(registrar.run(Duration::from_millis(200)));
    }
    // SIGINT or SIGTERM: a clean exit, which stops the etcd members (handled from before the
    // address is announced).
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    println!("listening on {}", server.url());
    if let Some(endpoints) = &endpoints {
        println!("workload endpoints on {}", endpoints.url());
    }
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted?,
        _ = terminate.recv() => {}
    }
    #[cfg(feature = "real-etcd")]
    drop(members);
    Ok(())
}
