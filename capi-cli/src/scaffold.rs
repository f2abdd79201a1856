//! `capictl new provider`: a new infrastructure provider's cargo project, outside this
//! repository, that builds and passes its tests as generated.
//!
//! The project depends on the published `capi` crate (the version of this `capictl`) and holds
//! the four kinds of its API group (cluster, cluster template, machine, machine template), the
//! actuators over a narrow cloud trait with an in-memory fake cloud, mock unit tests, the
//! conformance suite, an integration test that brings a cluster to Running on a local control
//! plane with the core controllers, the manager binary and a README. What the vendor fills in is
//! marked `VENDOR:`; no generated path that a test runs is left unimplemented.
//!
//! ```
//! use capi_cli::scaffold::ProviderScaffold;
//!
//! let scaffold = ProviderScaffold::new("acme", "infrastructure.acme.example")?;
//! let files = scaffold.files();
//! let actuator = files.iter().find(|f| f.path == "src/actuator.rs").unwrap();
//! assert!(actuator.contents.contains("impl Actuator<api::AcmeMachine, api::AcmeCluster> for AcmeProvider"));
//! # Ok::<(), capi_cli::scaffold::ScaffoldError>(())
//! ```

use std::path::{Path, PathBuf};

/// Why a project cannot be generated.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The provider's name is not a lowercase DNS label starting with a letter.
    #[error(
        "provider name {0:?} must be lowercase letters, digits and '-', start with a letter, \
         end with a letter or digit, and be at most 40 characters (it names the crate, the \
         binary and the provider ID scheme)"
    )]
    InvalidName(String),
    /// The name would make the crate `capi-provider`, which is the SDK's own.
    #[error("provider name {0:?} would name the crate capi-provider, one of the SDK's own crates")]
    ReservedName(String),
    /// The API group is not a lowercase DNS subdomain with at least two labels, short enough for
    /// the CRDs' names, outside Kubernetes' own groups.
    #[error(
        "API group {0:?} must be a lowercase DNS subdomain of at least two labels and at most \
         196 characters (the CRDs are named <plural>.<group>), outside k8s.io and \
         kubernetes.io, such as infrastructure.example.com"
    )]
    InvalidGroup(String),
    /// The target directory exists and is not empty: nothing is overwritten.
    #[error("{0} exists and is not empty; choose another --path (nothing was written)")]
    NotEmpty(PathBuf),
    /// Writing a file failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// One file of the generated project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratedFile {
    /// The path relative to the project's root, `/`-separated.
    pub path: &'static str,
    /// The file's contents.
    pub contents: String,
}

/// The templates, by the path each is written to.
const TEMPLATES: [(&str, &str); 13] = [
    (
        "Cargo.toml",
        include_str!("../templates/provider/Cargo.toml.tmpl"),
    ),
    (
        "README.md",
        include_str!("../templates/provider/README.md.tmpl"),
    ),
    (
        ".gitignore",
        include_str!("../templates/provider/gitignore.tmpl"),
    ),
    (
        "src/lib.rs",
        include_str!("../templates/provider/src/lib.rs.tmpl"),
    ),
    (
        "src/api.rs",
        include_str!("../templates/provider/src/api.rs.tmpl"),
    ),
    (
        "src/cloud.rs",
        include_str!("../templates/provider/src/cloud.rs.tmpl"),
    ),
    (
        "src/actuator.rs",
        include_str!("../templates/provider/src/actuator.rs.tmpl"),
    ),
    (
        "src/actuator/tests.rs",
        include_str!("../templates/provider/src/actuator/tests.rs.tmpl"),
    ),
    (
        "src/main.rs",
        include_str!("../templates/provider/src/main.rs.tmpl"),
    ),
    (
        "src/bin/release.rs",
        include_str!("../templates/provider/src/bin/release.rs.tmpl"),
    ),
    (
        "templates/cluster-template.yaml",
        include_str!("../templates/provider/templates/cluster-template.yaml.tmpl"),
    ),
    (
        "tests/conformance.rs",
        include_str!("../templates/provider/tests/conformance.rs.tmpl"),
    ),
    (
        "tests/cluster.rs",
        include_str!("../templates/provider/tests/cluster.rs.tmpl"),
    ),
];

/// A provider project to generate: its name and API group, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderScaffold {
    name: String,
    group: String,
}

impl ProviderScaffold {
    /// A provider called `name` (e.g. `acme`: crate `acme-provider`, binary `acme-manager`,
    /// kinds `AcmeCluster` …, provider IDs `acme:///<id>`) owning API group `group`.
    pub fn new(name: &str, group: &str) -> Result<Self, ScaffoldError> {
        let label = |s: &str| {
            let bytes = s.as_bytes();
            !s.is_empty()
                && s.len() <= 63
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
                && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        };
        let starts_with_letter = name.as_bytes().first().is_some_and(u8::is_ascii_lowercase);
        if !label(name) || !starts_with_letter || name.len() > 40 {
            return Err(ScaffoldError::InvalidName(name.to_string()));
        }
        if name == "capi" {
            return Err(ScaffoldError::ReservedName(name.to_string()));
        }
        let labels: Vec<&str> = group.split('.').collect();
        // Kubernetes reserves its own groups for approved APIs; the longest CRD name is
        // `<name without dashes>machinetemplates.<group>`, at most 56 + 1 + 196 characters.
        let reserved = ["k8s.io", "kubernetes.io"]
            .iter()
            .any(|own| group == *own || group.ends_with(&format!(".{own}")));
        if group.len() > 196 || labels.len() < 2 || !labels.iter().all(|l| label(l)) || reserved {
            return Err(ScaffoldError::InvalidGroup(group.to_string()));
        }
        Ok(Self {
            name: name.to_string(),
            group: group.to_string(),
        })
    }

    /// The kinds' prefix: the name in CamelCase (`acme-cloud` → `AcmeCloud`).
    pub fn kind_prefix(&self) -> String {
        self.name
            .split('-')
            .map(|word| {
                let mut chars = word.chars();
                chars.next().map_or_else(String::new, |first| {
                    first.to_ascii_uppercase().to_string() + chars.as_str()
                })
            })
            .collect()
    }

    /// The generated crate's name (`<name>-provider`).
    pub fn crate_name(&self) -> String {
        format!("{}-provider", self.name)
    }

    /// The manager binary's name (`<name>-manager`).
    pub fn binary_name(&self) -> String {
        format!("{}-manager", self.name)
    }

    /// Every file of the project, rendered.
    pub fn files(&self) -> Vec<GeneratedFile> {
        let kind = self.kind_prefix();
        let values = [
            ("{{Name}}", kind.clone()),
            ("{{name}}", self.name.clone()),
            ("{{group}}", self.group.clone()),
            ("{{crate}}", self.crate_name().replace('-', "_")),
            ("{{plural}}", kind.to_ascii_lowercase()),
            ("{{capi_version}}", env!("CARGO_PKG_VERSION").to_string()),
        ];
        TEMPLATES
            .iter()
            .map(|(path, template)| {
                let contents = values
                    .iter()
                    .fold(template.to_string(), |text, (key, value)| {
                        text.replace(key, value)
                    });
                GeneratedFile { path, contents }
            })
            .collect()
    }

    /// Formats the project in `dir` with `cargo fmt` (where lines break depends on the names);
    /// returns whether it ran. Without rustfmt the project builds as written.
    pub fn format(dir: &Path) -> bool {
        std::process::Command::new("cargo")
            .arg("fmt")
            .arg("--manifest-path")
            .arg(dir.join("Cargo.toml"))
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Writes the project into `dir`, which must not exist or be empty; returns the files
    /// written. Nothing is overwritten.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, ScaffoldError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ScaffoldError::Write { path, source }
        };
        if dir.exists() {
            let mut entries = std::fs::read_dir(dir).map_err(io(dir))?;
            if entries.next().is_some() {
                return Err(ScaffoldError::NotEmpty(dir.to_path_buf()));
            }
        }
        let mut written = Vec::new();
        for file in self.files() {
            let path = dir.join(file.path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::write(&path, &file.contents).map_err(io(&path))?;
            written.push(path);
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_become_kinds_crates_binaries_and_provider_ids() {
        let scaffold = ProviderScaffold::new("acme-cloud", "infrastructure.acme.example").unwrap();
        assert_eq!(scaffold.kind_prefix(), "AcmeCloud");
        assert_eq!(scaffold.crate_name(), "acme-cloud-provider");
        assert_eq!(scaffold.binary_name(), "acme-cloud-manager");
        let files = scaffold.files();
        let text = |path: &str| &files.iter().find(|f| f.path == path).unwrap().contents;
        assert!(text("Cargo.toml").contains("name = \"acme-cloud-provider\""));
        assert!(text("Cargo.toml").contains("name = \"acme-cloud-manager\""));
        assert!(
            text("src/main.rs").contains("use acme_cloud_provider::actuator::AcmeCloudProvider;")
        );
        assert!(text("src/api.rs").contains("kind = \"AcmeCloudMachineTemplate\""));
        assert!(text("src/api.rs").contains("\"acmecloudmachines\""));
        assert!(
            text("src/api.rs").contains("pub const GROUP: &str = \"infrastructure.acme.example\";")
        );
        assert!(text("src/actuator.rs").contains("\"acme-cloud:///\""));
        assert!(text("Cargo.toml").contains(&format!("capi = \"{}\"", env!("CARGO_PKG_VERSION"))));
    }

    #[test]
    fn every_placeholder_is_filled() {
        let files = ProviderScaffold::new("acme", "infra.acme.io")
            .unwrap()
            .files();
        assert_eq!(files.len(), TEMPLATES.len());
        for file in files {
            // `{{` is a Rust format string's escaped brace; a placeholder is `{{word}}`.
            let left = regex_free_placeholder(&file.contents);
            assert_eq!(left, None, "{} keeps a placeholder", file.path);
        }
    }

    fn regex_free_placeholder(text: &str) -> Option<String> {
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            let after = &rest[start + 2..];
            let word: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !word.is_empty() && after[word.len()..].starts_with("}}") {
                return Some(word);
            }
            rest = after;
        }
        None
    }

    #[test]
    fn the_cluster_template_needs_only_clusterctls_own_variables_and_parses() {
        let scaffold = ProviderScaffold::new("acme", "infrastructure.acme.example").unwrap();
        let file = scaffold
            .files()
            .into_iter()
            .find(|f| f.path == "templates/cluster-template.yaml")
            .unwrap();
        let template = crate::template::Template::parse(&file.contents).unwrap();
        let required: Vec<String> = template.variables().required.into_iter().collect();
        assert_eq!(required, ["CLUSTER_NAME", "KUBERNETES_VERSION"]);
        let rendered = template
            .render(|name| Some(format!("x-{}", name.to_lowercase())))
            .unwrap();
        let objects = crate::apply::parse(&rendered).unwrap();
        let kinds: Vec<String> = objects
            .iter()
            .filter_map(|o| o.types.as_ref().map(|t| t.kind.clone()))
            .collect();
        assert!(kinds.contains(&"AcmeCluster".to_string()), "{kinds:?}");
        assert!(
            kinds.contains(&"AcmeMachineTemplate".to_string()),
            "{kinds:?}"
        );
    }

    #[test]
    fn bad_names_and_groups_are_refused_with_what_to_do() {
        for name in [
            "",
            "Acme",
            "1acme",
            "acme-",
            "acme_cloud",
            "a.b",
            &"a".repeat(41),
        ] {
            let error = ProviderScaffold::new(name, "infrastructure.acme.example").unwrap_err();
            assert!(matches!(error, ScaffoldError::InvalidName(_)), "{name:?}");
        }
        let error = ProviderScaffold::new("capi", "infrastructure.acme.example").unwrap_err();
        assert!(matches!(error, ScaffoldError::ReservedName(_)));
        for group in [
            "acme",
            "Infrastructure.acme.example",
            "infra..example",
            "-x.example",
        ] {
            let error = ProviderScaffold::new("acme", group).unwrap_err();
            assert!(
                error.to_string().contains("infrastructure.example.com"),
                "{group:?}"
            );
        }
    }

    #[test]
    fn a_non_empty_directory_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "mine").unwrap();
        let scaffold = ProviderScaffold::new("acme", "infrastructure.acme.example").unwrap();
        let error = scaffold.write(dir.path()).unwrap_err();
        assert!(matches!(error, ScaffoldError::NotEmpty(_)));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        let target = dir.path().join("acme-provider");
        let written = scaffold.write(&target).unwrap();
        assert_eq!(written.len(), TEMPLATES.len());
        assert!(target.join("src/actuator/tests.rs").is_file());
    }
}
