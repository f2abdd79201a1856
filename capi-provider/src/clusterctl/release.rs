//! Writing a release into a clusterctl repository folder.

use std::path::{Path, PathBuf};

use super::{Components, ComponentsError, Metadata, Version, VersionError, image_repository};

/// Why a release could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReleaseError {
    /// The version is not `X.Y.Z[-PRE]`.
    #[error(transparent)]
    Version(#[from] VersionError),
    /// The components could not be rendered.
    #[error(transparent)]
    Components(#[from] ComponentsError),
    /// A file of the repository could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An existing `metadata.yaml` of the repository does not parse.
    #[error("{path}: not clusterctl metadata: {message}")]
    Metadata {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// The repository's metadata gives the release's series another contract than this SDK's.
    #[error(
        "{path}: series {major}.{minor} follows contract {listed}, but this release follows {ours}; a new contract needs a new minor version"
    )]
    Contract {
        /// The metadata file that lists the series.
        path: PathBuf,
        /// The series' major version.
        major: u64,
        /// The series' minor version.
        minor: u64,
        /// The contract listed.
        listed: String,
        /// The contract of this SDK's CRDs.
        ours: &'static str,
    },
    /// A template's file name is not one clusterctl looks for.
    #[error(
        "template {0:?}: clusterctl reads cluster-template.yaml, cluster-template-<flavor>.yaml and clusterclass-<name>.yaml"
    )]
    TemplateName(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReleaseError + '_ {
    move |source| ReleaseError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One release of a provider: its components, its version, its cluster templates.
#[derive(Clone, Debug)]
pub struct Release {
    /// The provider's components.
    pub components: Components,
    /// The release's version.
    pub version: Version,
    /// The templates (file name, content): `cluster-template*.yaml`, `clusterclass-*.yaml`.
    pub templates: Vec<(String, String)>,
}

impl Release {
    /// A release of `components` at `version`, without templates yet.
    pub fn new(components: Components, version: Version) -> Self {
        Self {
            components,
            version,
            templates: Vec::new(),
        }
    }

    /// With every `cluster-template*.yaml` and `clusterclass*.yaml` of `folder` (none when the
    /// folder does not exist); other files are left alone.
    pub fn templates_from(mut self, folder: &Path) -> Result<Self, ReleaseError> {
        let entries = match std::fs::read_dir(folder) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(self),
            Err(e) => return Err(io(folder)(e)),
        };
        for entry in entries {
            let path = entry.map_err(io(folder))?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if is_template_name(name) {
                let text = std::fs::read_to_string(&path).map_err(io(&path))?;
                self.templates.push((name.to_string(), text));
            }
        }
        self.templates.sort();
        Ok(self)
    }

    /// Writes `<repository>/infrastructure-<name>/v<version>/`: `infrastructure-components.yaml`,
    /// `metadata.yaml` and the templates, replacing an earlier write of the same version. The
    /// metadata lists every release series of the provider's versions already in the repository
    /// and this one's (clusterctl reads the newest version's only); a newer version already there
    /// gets this series added to its metadata too. Returns the version's folder.
    pub fn write(&self, repository: &Path) -> Result<PathBuf, ReleaseError> {
        for (name, _) in &self.templates {
            if !is_template_name(name) {
                return Err(ReleaseError::TemplateName(name.clone()));
            }
        }
        let provider = repository.join(self.components.manifest_label());
        let existing = versions(&provider)?;
        let mut metadata = Metadata::new();
        for (_, folder) in &existing {
            if let Some(found) = read_metadata(folder)? {
                if let Some(series) = found.series(&self.version)
                    && series.contract != capi_core::labels::CONTRACT
                {
                    return Err(ReleaseError::Contract {
                        path: folder.join("metadata.yaml"),
                        major: series.major,
                        minor: series.minor,
                        listed: series.contract.clone(),
                        ours: capi_core::labels::CONTRACT,
                    });
                }
                metadata = metadata.merge(&found);
            }
        }
        let metadata = metadata.with_release(&self.version);
        let folder = provider.join(self.version.to_string());
        match std::fs::remove_dir_all(&folder) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&folder)(e)),
            _ => {}
        }
        std::fs::create_dir_all(&folder).map_err(io(&folder))?;
        write(
            &folder.join("infrastructure-components.yaml"),
            &self.components_yaml()?,
        )?;
        write_metadata(&folder, &metadata)?;
        for (name, text) in &self.templates {
            write(&folder.join(name), text)?;
        }
        for (_, newer) in existing.iter().filter(|(v, _)| *v > self.version) {
            let found = read_metadata(newer)?.unwrap_or_else(Metadata::new);
            if found.series(&self.version).is_none() {
                write_metadata(newer, &found.merge(&metadata))?;
            }
        }
        Ok(folder)
    }

    /// The components file: a header naming the provider, the version and every variable with
    /// its default, then the objects.
    fn components_yaml(&self) -> Result<String, ReleaseError> {
        let components = &self.components;
        let mut out = format!(
            "# clusterctl components of the {} infrastructure provider, {}.\n# Variables:\n",
            components.name, self.version
        );
        let listed = components.variables();
        for variable in &listed {
            out.push_str(&format!(
                "#   {} (default {:?}): {}\n",
                variable.name, variable.default, variable.description
            ));
        }
        // Those the provider's own flags read.
        for arg in &components.args {
            for reference in arg.split("${").skip(1) {
                let name: String = reference
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && !listed.iter().any(|v| v.name == name) {
                    out.push_str(&format!("#   {name}: in the manager's argument {arg:?}\n"));
                }
            }
        }
        out.push_str(&components.to_yaml()?);
        Ok(out)
    }
}

fn is_template_name(name: &str) -> bool {
    name.ends_with(".yaml")
        && (name == "cluster-template.yaml"
            || name.starts_with("cluster-template-")
            || name.starts_with("clusterclass-"))
}

fn write(path: &Path, text: &str) -> Result<(), ReleaseError> {
    std::fs::write(path, text).map_err(io(path))
}

fn write_metadata(folder: &Path, metadata: &Metadata) -> Result<(), ReleaseError> {
    let path = folder.join("metadata.yaml");
    let text = serde_saphyr::to_string(metadata).map_err(ComponentsError::Yaml)?;
    write(&path, &text)
}

/// The version folders of a provider's repository, oldest first.
fn versions(provider: &Path) -> Result<Vec<(Version, PathBuf)>, ReleaseError> {
    let entries = match std::fs::read_dir(provider) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(provider)(e)),
    };
    let mut versions = Vec::new();
    for entry in entries {
        let path = entry.map_err(io(provider))?.path();
        let version = path
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| n.starts_with('v'))
            .and_then(|n| n.parse::<Version>().ok());
        if let Some(version) = version.filter(|_| path.is_dir()) {
            versions.push((version, path));
        }
    }
    versions.sort();
    Ok(versions)
}

fn read_metadata(folder: &Path) -> Result<Option<Metadata>, ReleaseError> {
    let path = folder.join("metadata.yaml");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    serde_saphyr::from_str(&text)
        .map(Some)
        .map_err(|e| ReleaseError::Metadata {
            path,
            message: e.to_string(),
        })
}

/// The flags of a provider's `release` binary: `--version X.Y.Z [--out DIR] [--templates DIR]
/// [--image REF]`.
#[derive(Clone, Debug, clap::Args)]
pub struct ReleaseArgs {
    /// The release's version, X.Y.Z or X.Y.Z-PRE.
    #[arg(long)]
    pub version: String,
    /// The clusterctl repository folder to write `infrastructure-<name>/v<version>/` into.
    #[arg(long, value_name = "DIR", default_value = "release")]
    pub out: PathBuf,
    /// The folder holding the cluster templates (`cluster-template*.yaml`).
    #[arg(long, value_name = "DIR", default_value = "templates")]
    pub templates: PathBuf,
    /// The manager's image (default: the components' image repository, tagged `v<version>`).
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,
}

impl ReleaseArgs {
    /// Writes the release these flags describe, of `components`; returns its folder.
    pub fn write(&self, mut components: Components) -> Result<PathBuf, ReleaseError> {
        let version: Version = self.version.parse()?;
        components.image = match &self.image {
            Some(image) => image.clone(),
            None => format!("{}:{version}", image_repository(&components.image)),
        };
        Release::new(components, version)
            .templates_from(&self.templates)?
            .write(&self.out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn components() -> Components {
        Components::new("my-cloud", Vec::new(), Vec::new()).unwrap()
    }

    #[test]
    fn image_tags_and_digests_are_replaced_but_registry_ports_kept() {
        assert_eq!(
            image_repository("my-cloud-manager:latest"),
            "my-cloud-manager"
        );
        assert_eq!(
            image_repository("registry.local:5000/team/manager"),
            "registry.local:5000/team/manager"
        );
        assert_eq!(
            image_repository("registry.local:5000/manager:v1@sha256:abc"),
            "registry.local:5000/manager"
        );
    }

    #[test]
    fn a_release_folder_holds_components_metadata_and_templates_and_metadata_keeps_every_series() {
        let repository = tempfile::tempdir().unwrap();
        let templates = tempfile::tempdir().unwrap();
        std::fs::write(
            templates.path().join("cluster-template.yaml"),
            "kind: Cluster\n",
        )
        .unwrap();
        std::fs::write(
            templates.path().join("cluster-template-ha.yaml"),
            "kind: Cluster\n",
        )
        .unwrap();
        std::fs::write(templates.path().join("notes.md"), "not a template").unwrap();
        let args = |version: &str| ReleaseArgs {
            version: version.into(),
            out: repository.path().into(),
            templates: templates.path().into(),
            image: None,
        };
        let newer = args("0.2.0").write(components()).unwrap();
        assert_eq!(
            newer,
            repository.path().join("infrastructure-my-cloud/v0.2.0")
        );
        let mut files: Vec<String> = std::fs::read_dir(&newer)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(
            files,
            [
                "cluster-template-ha.yaml",
                "cluster-template.yaml",
                "infrastructure-components.yaml",
                "metadata.yaml"
            ]
        );
        let text = std::fs::read_to_string(newer.join("infrastructure-components.yaml")).unwrap();
        assert!(
            text.contains("image: localhost/my-cloud-manager:v0.2.0\n"),
            "{text}"
        );
        // An older series written afterwards joins the newer version's metadata too.
        args("0.1.0").write(components()).unwrap();
        for folder in ["v0.1.0", "v0.2.0"] {
            let path = repository
                .path()
                .join("infrastructure-my-cloud")
                .join(folder);
            let metadata = read_metadata(&path).unwrap().unwrap();
            let series: Vec<(u64, u64)> = metadata
                .release_series
                .iter()
                .map(|s| (s.major, s.minor))
                .collect();
            assert_eq!(series, [(0, 1), (0, 2)], "{folder}");
            assert_eq!(metadata.api_version, "clusterctl.cluster.x-k8s.io/v1alpha3");
        }
    }

    #[test]
    fn a_series_listed_with_another_contract_is_refused() {
        let repository = tempfile::tempdir().unwrap();
        let folder = repository.path().join("infrastructure-my-cloud/v0.1.0");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join("metadata.yaml"),
            "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 0, minor: 1, contract: v1beta1}\n",
        )
        .unwrap();
        let release = Release::new(components(), "0.1.1".parse().unwrap());
        let error = release.write(repository.path()).unwrap_err();
        assert!(
            matches!(&error, ReleaseError::Contract { listed, .. } if listed == "v1beta1"),
            "{error}"
        );
        let mut with_flag = components();
        with_flag.args.push("--zone=${MY_CLOUD_ZONE:=a}".into());
        let written = Release::new(with_flag, "0.2.0".parse().unwrap())
            .write(repository.path())
            .unwrap();
        let text = std::fs::read_to_string(written.join("infrastructure-components.yaml")).unwrap();
        assert!(
            text.contains("#   MY_CLOUD_ZONE: in the manager's argument"),
            "{text}"
        );
    }

    #[test]
    fn bad_versions_and_template_names_are_refused_before_anything_is_written() {
        let repository = tempfile::tempdir().unwrap();
        let bad = ReleaseArgs {
            version: "1.0".into(),
            out: repository.path().into(),
            templates: repository.path().join("none"),
            image: None,
        };
        assert!(matches!(
            bad.write(components()),
            Err(ReleaseError::Version(_))
        ));
        let mut release = Release::new(components(), "1.0.0".parse().unwrap());
        release
            .templates
            .push(("cluster.yaml".into(), String::new()));
        let error = release.write(repository.path()).unwrap_err();
        assert!(matches!(error, ReleaseError::TemplateName(_)), "{error}");
        assert_eq!(std::fs::read_dir(repository.path()).unwrap().count(), 0);
    }
}
