//! `cargo xtask image <provider>...`: an OCI image of each provider's manager, built offline and
//! reproducibly with Debian's `buildah`, written as an OCI archive and smoke-tested.
//!
//! What an image holds and what is guaranteed of it is [`capi_cli::image`]'s (the builder
//! `capictl image` runs for a vendor's own manager). This command adds: the four managers are
//! always built together, in one `cargo build --release` of their four packages (or, with
//! `--build debug`, taken from the test build CI ran, dev-dependency features and all), whichever
//! images are asked for, so that a manager's binary depends on the commit only, not on which other
//! images a run builds (their shared crates are compiled once, with the union of their features:
//! the in-memory manager, which brings its own etcd access, carries the workload etcd client
//! unused). The archives are `<target>/images/<provider>-manager-<version>.oci.tar`, holding
//! `ghcr.io/capi-rs/<provider>-manager:v<version>`, the image `capictl init` and `cargo xtask release`
//! name.

use std::path::Path;

use anyhow::Result;
use capi_cli::image::ImageSpec;

use crate::command::{cargo, run, step};

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
    /// The managers' build: `release`, as shipped, or `debug`, the binaries `cargo xtask test`
    /// ran its tests against (the build `cargo nextest run --workspace --all-targets
    /// --all-features` makes: nothing to compile after the tests), for checking the image
    /// machinery in CI.
    #[arg(long, value_enum, default_value_t = crate::bench::rig::Build::Release)]
    build: crate::bench::rig::Build,
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
    let packages: Vec<String> = Provider::ALL.iter().map(|p| p.package()).collect();
    let (build, profile) = match args.build {
        crate::bench::rig::Build::Release => {
            step("Building the managers (release, the four together)");
            let mut build = vec!["build", "--release"];
            for package in &packages {
                build.extend(["-p", package.as_str()]);
            }
            (build, "release")
        }
        crate::bench::rig::Build::Debug => {
            step("The managers the tests ran (debug; built already by cargo xtask test)");
            (crate::bench::rig::Build::DEBUG_AS_TESTED.to_vec(), "debug")
        }
    };
    run(&mut cargo(&build))?;
    let built = crate::command::target_dir().join(profile);
    let out_dir = crate::command::target_dir().join("images");
    std::fs::create_dir_all(&out_dir)?;
    for provider in providers {
        step(&format!("Image of {}", provider.binary()));
        let spec = spec(provider, &built.join(provider.binary()), &version);
        let archive = capi_cli::image::build(&spec, &out_dir)?;
        println!("    written: {}", archive.display());
    }
    Ok(())
}

/// Installs buildah and the CA certificates (Debian's packages) when missing, and protoc.
pub(crate) fn ensure_tools() -> Result<()> {
    let missing = capi_cli::image::missing_tools();
    if missing.is_empty() {
        println!("    buildah and the CA certificates are installed");
    } else {
        crate::test::apt_install(&missing)?;
    }
    // The managers with the workload etcd client are built with protoc.
    crate::test::ensure_protoc()
}

/// What the image of `provider`'s manager is, built from `binary`.
fn spec(provider: Provider, binary: &Path, version: &str) -> ImageSpec {
    ImageSpec {
        binary: binary.to_path_buf(),
        name: provider.binary(),
        reference: format!("ghcr.io/capi-rs/{}", provider.binary()),
        version: version.to_string(),
        description: format!(
            "The {} Cluster API infrastructure provider's manager (capi-rs)",
            provider.name()
        ),
        source: Some(env!("CARGO_PKG_REPOSITORY").to_string()),
        revision: Some(crate::command::built_commit().to_string()),
        licenses: Some("Apache-2.0".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_provider_names_its_package_binary_and_image() {
        assert_eq!(Provider::Openstack.package(), "provider-openstack-bin");
        assert_eq!(Provider::Openstack.binary(), "openstack-manager");
        let spec = spec(Provider::Aws, Path::new("/x/aws-manager"), "1.2.3");
        assert_eq!(spec.reference, "ghcr.io/capi-rs/aws-manager");
        assert_eq!(spec.name, "aws-manager");
    }
}
