//! `capictl`: generate, inspect and delete Cluster API clusters.
//!
//! ```text
//! capictl generate cluster NAME [--infrastructure inmemory] [--flavor F] [--from FILE]
//!                               [--kubernetes-version V] [--control-plane-machine-count N]
//!                               [--worker-machine-count N] [--target-namespace NS] [--list-variables]
//!                               [--clouds-yaml FILE --cloud NAME]
//! capictl init [--infrastructure inmemory|openstack|aws|azure] [--dry-run] [--force]
//! capictl apply -f FILE|- [-n NS]
//! capictl describe cluster NAME [-n NS] [--show-conditions]
//! capictl get kubeconfig NAME [-n NS]
//! capictl delete cluster NAME [-n NS] [--wait]
//! capictl move NAME [-n NS] --to-kubeconfig FILE
//! capictl new provider NAME --group GROUP [--path DIR]
//! capictl image BINARY [--name REF] [--version V] [--description D] [--source URL]
//!                       [--revision R] [--licenses SPDX] [--out DIR]
//! ```
//!
//! Commands that talk to a management cluster use `--kubeconfig`, else `$KUBECONFIG` or
//! `~/.kube/config`. Colours follow `NO_COLOR` and whether the output is a terminal.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use capi_cli::describe::{self, Style};
use capi_cli::generate::{self, Inputs};
use capi_core::api::Cluster;
use clap::{Args, Parser, Subcommand};
use k8s_openapi::api::core::v1::Secret;
use kube::api::DeleteParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

#[derive(Parser)]
#[command(
    name = "capictl",
    version,
    about = "Generate, inspect and delete Cluster API clusters"
)]
struct Cli {
    /// The management cluster's kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install the CRDs, RBAC and the provider manager into the management cluster (idempotent).
    Init {
        /// The infrastructure provider to install.
        #[arg(long, default_value = "inmemory")]
        infrastructure: String,
        /// Print the YAML instead of applying it.
        #[arg(long)]
        dry_run: bool,
        /// Replace Cluster API's own CRDs even when another installation (upstream Cluster API
        /// installed by clusterctl, say) owns them. Without it, `init` installs only the
        /// infrastructure provider beside that installation.
        #[arg(long)]
        force: bool,
    },
    /// Apply manifests (server-side apply, strict field validation: an unknown or misspelled field
    /// is an error naming it).
    Apply {
        /// The manifest file, `-` for standard input.
        #[arg(long, short = 'f')]
        filename: std::path::PathBuf,
        /// The namespace of namespaced objects that name none.
        #[arg(long, short = 'n')]
        namespace: Option<String>,
    },
    /// Render a cluster template.
    Generate {
        #[command(subcommand)]
        what: GenerateWhat,
    },
    /// Show a cluster and everything it owns as a tree.
    Describe {
        #[command(subcommand)]
        what: DescribeWhat,
    },
    /// Print something a cluster has.
    Get {
        #[command(subcommand)]
        what: GetWhat,
    },
    /// Move a cluster's objects to another management cluster (resumable).
    Move {
        /// The cluster's name.
        name: String,
        /// The cluster's namespace.
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        /// The target management cluster's kubeconfig.
        #[arg(long)]
        to_kubeconfig: std::path::PathBuf,
    },
    /// Delete a cluster.
    Delete {
        #[command(subcommand)]
        what: DeleteWhat,
    },
    /// Generate a new project.
    New {
        #[command(subcommand)]
        what: NewWhat,
    },
    /// Build a manager's OCI image with buildah (FROM scratch, user 65532, no shell), check that
    /// two builds are equal and that it runs, and write it as an OCI archive.
    Image(ImageArgs),
}

#[derive(Subcommand)]
enum NewWhat {
    /// A new infrastructure provider's cargo project: its kinds, actuators over a fake cloud,
    /// mock, conformance and local control plane tests, the manager binary and a README.
    Provider {
        /// The provider's name (lowercase, e.g. `acme`): the crate `<name>-provider`, the binary
        /// `<name>-manager`, the kinds `<Name>Cluster` …, the provider IDs `<name>:///<id>`.
        name: String,
        /// The API group of the provider's kinds, e.g. `infrastructure.acme.example`.
        #[arg(long)]
        group: String,
        /// Where to write the project (default: `./<name>-provider`); must not exist or be empty.
        #[arg(long)]
        path: Option<std::path::PathBuf>,
    },
}

#[derive(Args)]
struct ImageArgs {
    /// The manager's binary (a release build, e.g. `target/release/acme-manager`).
    binary: std::path::PathBuf,
    /// The image's reference without its tag, e.g. `ghcr.io/acme/acme-manager` (the binary's
    /// name by default); its last segment names the archive and the title label.
    #[arg(long)]
    name: Option<String>,
    /// The image's version label; its tag is `v<version>` (a version starting with a digit gets
    /// the `v` upstream's tags have).
    #[arg(long, default_value = "0.1.0")]
    version: String,
    /// The `org.opencontainers.image.description` label.
    #[arg(long)]
    description: Option<String>,
    /// The `org.opencontainers.image.source` label (the project's repository).
    #[arg(long)]
    source: Option<String>,
    /// The `org.opencontainers.image.revision` label (the commit built).
    #[arg(long)]
    revision: Option<String>,
    /// The `org.opencontainers.image.licenses` label (an SPDX expression).
    #[arg(long)]
    licenses: Option<String>,
    /// Where the OCI archive is written.
    #[arg(long, default_value = "target/images")]
    out: std::path::PathBuf,
}

#[derive(Subcommand)]
enum GenerateWhat {
    /// Render the cluster template of a provider (or `--from FILE`).
    Cluster(GenerateCluster),
}

#[derive(Args)]
struct GenerateCluster {
    /// The cluster's name (CLUSTER_NAME).
    name: String,
    /// The infrastructure provider whose template to use.
    #[arg(long, default_value = "inmemory")]
    infrastructure: String,
    /// The template flavor (`cluster-template-<flavor>.yaml`).
    #[arg(long)]
    flavor: Option<String>,
    /// A template file instead of the built-in one.
    #[arg(long)]
    from: Option<std::path::PathBuf>,
    /// KUBERNETES_VERSION.
    #[arg(long)]
    kubernetes_version: Option<String>,
    /// CONTROL_PLANE_MACHINE_COUNT.
    #[arg(long)]
    control_plane_machine_count: Option<u32>,
    /// WORKER_MACHINE_COUNT.
    #[arg(long)]
    worker_machine_count: Option<u32>,
    /// NAMESPACE.
    #[arg(long, short = 'n')]
    target_namespace: Option<String>,
    /// Print the template's variables instead of rendering it.
    #[arg(long)]
    list_variables: bool,
    /// OpenStack: a clouds.yaml whose cloud `--cloud` fills the credentials Secret and CA.
    #[arg(long, requires = "cloud")]
    clouds_yaml: Option<std::path::PathBuf>,
    /// OpenStack: the cloud of `--clouds-yaml` to use.
    #[arg(long)]
    cloud: Option<String>,
}

#[derive(Subcommand)]
enum DescribeWhat {
    /// Show the cluster tree.
    Cluster {
        /// The cluster's name.
        name: String,
        /// The cluster's namespace.
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        /// Also list every condition of every object.
        #[arg(long)]
        show_conditions: bool,
    },
}

#[derive(Subcommand)]
enum GetWhat {
    /// Print the workload cluster's kubeconfig (the `<name>-kubeconfig` Secret).
    Kubeconfig {
        /// The cluster's name.
        name: String,
        /// The cluster's namespace.
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
    },
}

#[derive(Subcommand)]
enum DeleteWhat {
    /// Delete the cluster and everything it owns.
    Cluster {
        /// The cluster's name.
        name: String,
        /// The cluster's namespace.
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        /// Wait until everything is gone, showing what is left.
        #[arg(long)]
        wait: bool,
    },
}

async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?
        }
        None => Config::infer()
            .await
            .context("no kubeconfig: pass --kubeconfig or set KUBECONFIG")?,
    };
    Ok(Client::try_from(config)?)
}

/// A progress bar on a terminal (hidden otherwise; callers print plain lines then).
fn progress_bar(len: Option<u64>) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = match len {
        Some(len) => indicatif::ProgressBar::new(len).with_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        ),
        None => indicatif::ProgressBar::new_spinner(),
    };
    bar.enable_steady_tick(Duration::from_millis(120));
    Some(bar)
}

fn color() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One line per cause, no backtrace: this is for users.
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Init {
            infrastructure,
            dry_run,
            force,
        } => {
            let mut objects =
                capi_cli::init::objects(&infrastructure, capi_provider::Controllers::Standalone)?;
            if dry_run {
                print!("{}", capi_cli::init::to_yaml(&objects)?);
                return Ok(());
            }
            let client = client(cli.kubeconfig.as_deref()).await?;
            let plan = capi_cli::init::Plan::read(&client, &objects).await?;
            if !plan.foreign.is_empty() {
                if force {
                    println!(
                        "replacing Cluster API CRDs another installation owns (--force):\n{}",
                        plan.describe()
                    );
                } else {
                    println!(
                        "Cluster API's own CRDs belong to another installation; leaving them and \
                         installing only the {infrastructure} provider, whose manager runs beside \
                         that installation's controllers (use --force to replace them):\n{}",
                        plan.describe()
                    );
                    objects = plan.leave_foreign(&infrastructure)?;
                }
            }
            let bar = progress_bar(Some(objects.len() as u64));
            let total = objects.len();
            let mut done = 0;
            capi_cli::init::apply(&client, &objects, |what| {
                done += 1;
                match &bar {
                    Some(bar) => {
                        bar.set_message(format!("applied {what}"));
                        bar.inc(1);
                    }
                    None => println!("[{done:>2}/{total}] applied {what}"),
                }
            })
            .await?;
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            println!("management cluster initialised with the {infrastructure} provider");
        }
        Command::Apply {
            filename,
            namespace,
        } => {
            let text = if filename.as_os_str() == "-" {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                    .context("reading the manifest from standard input")?;
                text
            } else {
                std::fs::read_to_string(&filename)
                    .with_context(|| format!("reading {}", filename.display()))?
            };
            let objects = capi_cli::apply::parse(&text)
                .with_context(|| format!("reading {}", filename.display()))?;
            let client = client(cli.kubeconfig.as_deref()).await?;
            capi_cli::apply::apply(&client, &objects, namespace.as_deref(), |what| {
                println!("{what} applied");
            })
            .await?;
        }
        Command::Generate {
            what: GenerateWhat::Cluster(args),
        } => {
            let text = match &args.from {
                Some(path) => std::fs::read_to_string(path)
                    .with_context(|| format!("reading template {}", path.display()))?,
                None => {
                    generate::built_in(&args.infrastructure, args.flavor.as_deref())?.to_string()
                }
            };
            if args.list_variables {
                print!("{}", generate::list_variables(&text)?);
                return Ok(());
            }
            let extra = match (&args.clouds_yaml, &args.cloud) {
                (Some(path), Some(cloud)) => {
                    let text = std::fs::read_to_string(path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    generate::openstack_credentials(&text, cloud, |ca| {
                        std::fs::read(ca).map_err(|e| e.to_string())
                    })?
                }
                _ => Default::default(),
            };
            let inputs = Inputs {
                cluster_name: args.name,
                namespace: args.target_namespace,
                kubernetes_version: args.kubernetes_version,
                control_plane_machine_count: args.control_plane_machine_count,
                worker_machine_count: args.worker_machine_count,
                extra,
            };
            print!(
                "{}",
                generate::render(&text, &inputs, |n| std::env::var(n).ok())?
            );
        }
        Command::Describe {
            what:
                DescribeWhat::Cluster {
                    name,
                    namespace,
                    show_conditions,
                },
        } => {
            let client = client(cli.kubeconfig.as_deref()).await?;
            let tree = describe::tree(&client, &namespace, &name)
                .await
                .with_context(|| format!("reading cluster {namespace}/{name}"))?;
            let style = Style {
                color: color(),
                show_conditions,
            };
            print!("{}", describe::render(&tree, jiff::Timestamp::now(), style));
        }
        Command::Get {
            what: GetWhat::Kubeconfig { name, namespace },
        } => {
            let client = client(cli.kubeconfig.as_deref()).await?;
            let secret_name = format!("{name}-kubeconfig");
            let secret = Api::<Secret>::namespaced(client, &namespace)
                .get_opt(&secret_name)
                .await?
                .with_context(|| format!("Secret {namespace}/{secret_name} does not exist (yet): the bootstrap provider writes it once the cluster's PKI exists"))?;
            let value = secret
                .data
                .as_ref()
                .and_then(|d| d.get("value"))
                .with_context(|| {
                    format!("Secret {namespace}/{secret_name} has no key \"value\"")
                })?;
            print!("{}", String::from_utf8_lossy(&value.0));
        }
        Command::Move {
            name,
            namespace,
            to_kubeconfig,
        } => {
            let source = client(cli.kubeconfig.as_deref()).await?;
            let target = client(Some(&to_kubeconfig)).await?;
            let moved =
                capi_cli::move_cluster::move_cluster(&source, &target, &namespace, &name, |line| {
                    println!("  {line}");
                })
                .await
                .context("the move stopped; run the same command again to resume it")?;
            println!("moved cluster {namespace}/{name} ({moved} objects)");
        }
        Command::New {
            what: NewWhat::Provider { name, group, path },
        } => {
            let scaffold = capi_cli::scaffold::ProviderScaffold::new(&name, &group)?;
            let dir = path.unwrap_or_else(|| scaffold.crate_name().into());
            let written = scaffold.write(&dir)?;
            if !capi_cli::scaffold::ProviderScaffold::format(&dir) {
                eprintln!("note: `cargo fmt` did not run; the project is left as generated");
            }
            println!(
                "wrote {} files of the {} provider to {}",
                written.len(),
                scaffold.kind_prefix(),
                dir.display()
            );
            println!(
                "next: cd {} && cargo test   (README.md says what to fill in)",
                dir.display()
            );
        }
        Command::Image(args) => {
            let name = match args.name {
                Some(name) => name,
                None => args
                    .binary
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .context("the binary's path names no file")?,
            };
            let title = name.rsplit('/').next().unwrap_or(&name).to_string();
            if capi_provider::clusterctl::image_repository(&name) != name {
                bail!(
                    "--name {name} carries a tag or digest: give the reference alone and the tag with --version"
                );
            }
            let spec = capi_cli::image::ImageSpec {
                binary: args.binary,
                description: args
                    .description
                    .unwrap_or_else(|| format!("{title}: a Cluster API provider's manager")),
                reference: name,
                name: title,
                version: args.version,
                source: args.source,
                revision: args.revision,
                licenses: args.licenses,
            };
            let archive = capi_cli::image::build(&spec, &args.out)?;
            println!("written: {}", archive.display());
        }
        Command::Delete {
            what:
                DeleteWhat::Cluster {
                    name,
                    namespace,
                    wait,
                },
        } => {
            let client = client(cli.kubeconfig.as_deref()).await?;
            let clusters: Api<Cluster> = Api::namespaced(client.clone(), &namespace);
            if clusters.get_opt(&name).await?.is_none() {
                bail!("cluster {namespace}/{name} does not exist");
            }
            clusters.delete(&name, &DeleteParams::background()).await?;
            println!("cluster {namespace}/{name} is being deleted");
            if wait {
                let bar = progress_bar(None);
                let mut last = String::new();
                while clusters.get_opt(&name).await?.is_some() {
                    let tree = describe::tree(&client, &namespace, &name).await;
                    let left = match tree {
                        Ok(tree) => count(&tree).saturating_sub(1),
                        Err(_) => 0,
                    };
                    let line = format!("waiting: {left} objects left besides the Cluster");
                    match &bar {
                        Some(bar) => bar.set_message(line.clone()),
                        None if line != last => println!("  {line}"),
                        None => {}
                    }
                    last = line;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                if let Some(bar) = bar {
                    bar.finish_and_clear();
                }
                println!("cluster {namespace}/{name} and everything it owned are gone");
            }
        }
    }
    Ok(())
}

/// Objects in a tree (groups not counted).
fn count(node: &describe::TreeNode) -> usize {
    usize::from(!node.ready.is_empty()) + node.children.iter().map(count).sum::<usize>()
}
