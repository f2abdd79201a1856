//! `cargo xtask release --version X.Y.Z`: each provider's release as a clusterctl repository —
//! `<out>/infrastructure-capirs-<provider>/vX.Y.Z/` with `infrastructure-components.yaml`,
//! `metadata.yaml` and the cluster templates — from [`capi_cli::manifests::release`], the same
//! objects `capictl init` applies. `--scaffold` adds the provider `capictl new provider`
//! generates (`infrastructure-acme/`), written by its own release binary built against the
//! packaged crates.
//!
//! Every release written is checked against clusterctl's provider contract ([`check`]): one
//! Namespace holding every namespaced object, CRDs named as clusterctl computes their names and
//! labelled with the contract `metadata.yaml` names, the manager's container named `manager` and
//! its image a canonical reference (no variable: clusterctl's `--describe` cannot parse one),
//! variables prefixed with the provider's name, cluster-scoped objects named after the namespace
//! (what `clusterctl delete` removes), a ClusterRole upstream's manager aggregates. Then the real
//! clusterctl (v1.14.2, built with the upstream peer) reads each one from the repository
//! ([`check_with_clusterctl`]): `generate provider` with and without its variables processed, and
//! `generate cluster --list-variables` of every template.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use capi_provider::clusterctl::{AGGREGATE_TO_CORE, Metadata, Version};

use crate::command::step;

/// `cargo xtask release`'s command line.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct ReleaseArgs {
    /// The release's version: X.Y.Z or X.Y.Z-PRE.
    #[arg(long)]
    version: String,
    /// The clusterctl repository folder (default: `<target>/clusterctl-repository`).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Also the scaffold's provider, generated, built against the packaged crates and written by
    /// its own release binary (as `cargo xtask scaffold` builds it).
    #[arg(long)]
    scaffold: bool,
}

/// Where releases go unless `--out` says otherwise.
pub(crate) fn default_repository() -> PathBuf {
    crate::command::target_dir().join("clusterctl-repository")
}

/// Writes and checks the releases `args` asks for.
pub(crate) fn run_release(args: ReleaseArgs) -> Result<()> {
    let version: Version = args.version.parse()?;
    let repository = args.out.unwrap_or_else(default_repository);
    let mut providers = write_workspace_providers(&version, &repository)?;
    if args.scaffold {
        step("Packaging the published crates (cargo package --no-verify)");
        crate::package::package(false)?;
        crate::scaffold::check(crate::scaffold::Checks {
            tests: false,
            image: None,
            release: Some((version.clone(), repository.clone())),
        })?;
        providers.push(crate::scaffold::NAME.to_string());
    }
    let upstream = crate::upstream::install()?;
    check_with_clusterctl(&upstream.clusterctl(), &repository, &providers, &version)
}

/// Writes the release of each of the workspace's providers into `repository` and checks it;
/// returns their clusterctl names.
pub(crate) fn write_workspace_providers(
    version: &Version,
    repository: &Path,
) -> Result<Vec<String>> {
    step(&format!(
        "clusterctl repositories of release {version} in {}",
        repository.display()
    ));
    let mut names = Vec::new();
    for provider in capi_cli::manifests::PROVIDERS {
        let folder = capi_cli::manifests::release(provider, version)?.write(repository)?;
        check(&folder).with_context(|| format!("checking {}", folder.display()))?;
        println!("    written and checked: {}", folder.display());
        names.push(capi_cli::manifests::clusterctl_name(provider));
    }
    Ok(names)
}

/// Has the real clusterctl read each of `providers`' release `version` from `repository`, as a
/// user's clusterctl configuration would name it (a `file://` URL; no management cluster, an
/// empty overrides folder, no version check): `generate provider` processes the components
/// (variables at their defaults, the namespace, the image) and `--describe` lists the variables;
/// `generate cluster --list-variables` parses every cluster template. Fails with clusterctl's
/// own message.
pub(crate) fn check_with_clusterctl(
    clusterctl: &Path,
    repository: &Path,
    providers: &[String],
    version: &Version,
) -> Result<()> {
    step(&format!(
        "clusterctl {} reads the releases: generate provider, generate cluster --list-variables",
        capi_testing::upstream::CLUSTER_API_VERSION
    ));
    let home = tempfile::tempdir()?;
    let overrides = home.path().join("overrides");
    std::fs::create_dir_all(&overrides)?;
    let mut config = String::from("providers:\n");
    for name in providers {
        let components = repository
            .join(format!("infrastructure-{name}"))
            .join(version.to_string())
            .join("infrastructure-components.yaml");
        config.push_str(&format!(
            "  - name: {name}\n    type: InfrastructureProvider\n    url: file://{}\n",
            components.display()
        ));
    }
    config.push_str(&format!(
        "overridesFolder: {}\nCLUSTERCTL_DISABLE_VERSIONCHECK: \"true\"\n",
        overrides.display()
    ));
    let config_file = home.path().join("clusterctl.yaml");
    std::fs::write(&config_file, config)?;
    let clusterctl_run = |args: &[&str]| -> Result<String> {
        let mut command = std::process::Command::new(clusterctl);
        command
            .args(args)
            .arg("--config")
            .arg(&config_file)
            // Nothing of the user's own clusterctl configuration or cache.
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join(".config"))
            .env_remove("KUBECONFIG");
        let output = command
            .output()
            .with_context(|| format!("running {}", clusterctl.display()))?;
        if !output.status.success() {
            bail!(
                "clusterctl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    for name in providers {
        let provider = format!("{name}:{version}");
        let rendered = clusterctl_run(&["generate", "provider", "--infrastructure", &provider])?;
        ensure!(
            rendered.contains("kind: Deployment"),
            "clusterctl generate provider {provider} printed no Deployment"
        );
        clusterctl_run(&[
            "generate",
            "provider",
            "--infrastructure",
            &provider,
            "--describe",
        ])?;
        let folder = repository
            .join(format!("infrastructure-{name}"))
            .join(version.to_string());
        let mut flavors = Vec::new();
        for entry in std::fs::read_dir(&folder)? {
            let file = entry?.file_name().to_string_lossy().into_owned();
            if file == "cluster-template.yaml" {
                flavors.push(None);
            } else if let Some(flavor) = file
                .strip_prefix("cluster-template-")
                .and_then(|f| f.strip_suffix(".yaml"))
            {
                flavors.push(Some(flavor.to_string()));
            }
        }
        flavors.sort();
        for flavor in &flavors {
            let mut args = vec![
                "generate",
                "cluster",
                "demo",
                "--target-namespace",
                "demo",
                "--infrastructure",
                &provider,
                "--list-variables",
            ];
            if let Some(flavor) = flavor {
                args.extend(["--flavor", flavor]);
            }
            let listed = clusterctl_run(&args)?;
            ensure!(
                listed.contains("Required Variables") || listed.contains("Optional Variables"),
                "clusterctl generate cluster --infrastructure {provider} {flavor:?} listed nothing"
            );
        }
        println!(
            "    clusterctl read {provider}: components, {} template(s)",
            flavors.len()
        );
    }
    Ok(())
}

/// The kinds clusterctl treats as cluster-scoped (it moves every other object into the target
/// namespace).
const CLUSTER_SCOPED: [&str; 6] = [
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
];

/// Checks a release folder `infrastructure-<name>/v<version>/` against clusterctl's provider
/// contract; the message names the first rule broken.
pub(crate) fn check(folder: &Path) -> Result<()> {
    let version: Version = file_name(folder)?.parse()?;
    let label = file_name(folder.parent().context("a version folder has a parent")?)?;
    let name = label
        .strip_prefix("infrastructure-")
        .context("the provider's folder is named infrastructure-<name>")?;
    let prefix = format!("{}_", name.to_uppercase().replace('-', "_"));

    let metadata: Metadata = serde_saphyr::from_str(&read(&folder.join("metadata.yaml"))?)?;
    ensure!(
        metadata.api_version == "clusterctl.cluster.x-k8s.io/v1alpha3"
            && metadata.kind == "Metadata",
        "metadata.yaml is not clusterctl's Metadata"
    );
    let contract = &metadata
        .series(&version)
        .with_context(|| format!("metadata.yaml lists no series for {version}"))?
        .contract;

    let text = read(&folder.join("infrastructure-components.yaml"))?;
    for reference in text.split("${").skip(1) {
        let variable = reference
            .split(['}', ':', '=', '-'])
            .next()
            .unwrap_or_default();
        ensure!(
            variable.starts_with(&prefix),
            "variable {variable} is not prefixed with {prefix}"
        );
    }
    let objects: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)?;
    let objects: Vec<&serde_json::Value> = objects.iter().filter(|o| !o.is_null()).collect();
    let namespaces: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "Namespace")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    let [namespace] = namespaces[..] else {
        bail!(
            "{} Namespaces; clusterctl needs exactly one",
            namespaces.len()
        );
    };
    let mut manager = false;
    let mut aggregated = false;
    for object in &objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let object_name = object["metadata"]["name"].as_str().unwrap_or_default();
        let what = format!("{kind} {object_name}");
        ensure!(
            object["metadata"]["labels"]["cluster.x-k8s.io/provider"] == label,
            "{what} lacks the provider label {label}"
        );
        if !CLUSTER_SCOPED.contains(&kind) {
            ensure!(
                object["metadata"]["namespace"] == namespace,
                "{what} is not in {namespace}"
            );
        } else if kind != "Namespace" && kind != "CustomResourceDefinition" {
            ensure!(
                object_name.starts_with(&format!("{namespace}-")),
                "{what}: clusterctl delete removes only cluster-scoped objects named {namespace}-…"
            );
        }
        match kind {
            "CustomResourceDefinition" => {
                let spec = &object["spec"];
                let kind_name = spec["names"]["kind"].as_str().unwrap_or_default();
                let expected = format!(
                    "{}.{}",
                    plural(&kind_name.to_lowercase()),
                    spec["group"].as_str().unwrap_or_default()
                );
                ensure!(
                    object_name == expected,
                    "CRD {object_name}: clusterctl expects {expected}"
                );
                ensure!(
                    object["metadata"]["labels"][format!("cluster.x-k8s.io/{contract}")]
                        .is_string(),
                    "CRD {object_name} lacks the contract label cluster.x-k8s.io/{contract}"
                );
            }
            "Deployment" => {
                let containers = object["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                manager |= containers.iter().any(|c| c["name"] == "manager");
                for container in &containers {
                    let image = container["image"].as_str().unwrap_or_default();
                    ensure!(
                        capi_provider::clusterctl::is_canonical_image(image),
                        "{what}: image {image:?} is not a canonical reference (clusterctl refuses it)"
                    );
                }
            }
            "ClusterRole" => {
                aggregated |= object["metadata"]["labels"][AGGREGATE_TO_CORE] == "true";
            }
            _ => {}
        }
    }
    ensure!(manager, "no Deployment runs a container named manager");
    ensure!(
        aggregated,
        "no ClusterRole is aggregated into upstream's core manager ({AGGREGATE_TO_CORE})"
    );
    let templates = std::fs::read_dir(folder)?
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("cluster-template")
        })
        .count();
    ensure!(templates > 0, "no cluster-template*.yaml");
    Ok(())
}

/// The plural clusterctl computes for a lower-cased kind (flect's rules for the endings
/// provider kinds have).
fn plural(singular: &str) -> String {
    if let Some(stem) = singular.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|end| singular.ends_with(end))
    {
        return format!("{singular}es");
    }
    format!("{singular}s")
}

fn file_name(path: &Path) -> Result<&str> {
    path.file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} has no name", path.display()))
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_follow_flect_for_provider_kinds() {
        assert_eq!(
            plural("awsclusterstaticidentity"),
            "awsclusterstaticidentities"
        );
        assert_eq!(plural("openstackmachine"), "openstackmachines");
        assert_eq!(plural("examplegateway"), "examplegateways");
        assert_eq!(plural("examplebox"), "exampleboxes");
    }

    #[test]
    fn the_workspace_releases_meet_the_contract_and_a_broken_one_does_not() -> Result<()> {
        let repository = tempfile::tempdir()?;
        write_workspace_providers(&"0.1.0".parse()?, repository.path())?;
        let folder = repository.path().join("infrastructure-capirs-aws/v0.1.0");
        let components = folder.join("infrastructure-components.yaml");
        let text = read(&components)?;
        std::fs::write(
            &components,
            text.replace("name: manager", "name: controller"),
        )?;
        let error = check(&folder).unwrap_err().to_string();
        assert!(error.contains("manager"), "{error}");
        std::fs::write(
            &components,
            format!("{text}---\n{{apiVersion: v1, kind: Namespace, metadata: {{name: two}}}}\n"),
        )?;
        let error = check(&folder).unwrap_err().to_string();
        assert!(error.contains("2 Namespaces"), "{error}");
        Ok(())
    }
}
