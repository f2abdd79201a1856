//! `capictl generate cluster`: a provider's template, with clusterctl's variables filled from the
//! environment and the command's flags.
//!
//! The templates live in this crate (`templates/<provider>/cluster-template[-<flavor>].yaml`)
//! and are compiled into the binary; `--from FILE` renders any other template, including one
//! written for upstream `clusterctl`.

use std::collections::BTreeMap;

use crate::template::{Template, TemplateError, Variables};

/// A template shipped with the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltIn {
    /// The infrastructure provider (`--infrastructure`).
    pub provider: &'static str,
    /// The flavor (`--flavor`); `None` is the default one.
    pub flavor: Option<&'static str>,
    /// The template text.
    pub text: &'static str,
}

/// Every template shipped with the binary.
pub const BUILT_IN: &[BuiltIn] = &[
    BuiltIn {
        provider: "inmemory",
        flavor: None,
        text: include_str!("../templates/inmemory/cluster-template.yaml"),
    },
    BuiltIn {
        provider: "inmemory",
        flavor: Some("ignition"),
        text: include_str!("../templates/inmemory/cluster-template-ignition.yaml"),
    },
    BuiltIn {
        provider: "inmemory",
        flavor: Some("machinepool"),
        text: include_str!("../templates/inmemory/cluster-template-machinepool.yaml"),
    },
    BuiltIn {
        provider: "openstack",
        flavor: None,
        text: include_str!("../templates/openstack/cluster-template.yaml"),
    },
    BuiltIn {
        provider: "openstack",
        flavor: Some("flatcar"),
        text: include_str!("../templates/openstack/cluster-template-flatcar.yaml"),
    },
    BuiltIn {
        provider: "aws",
        flavor: None,
        text: include_str!("../templates/aws/cluster-template.yaml"),
    },
    BuiltIn {
        provider: "aws",
        flavor: Some("machinepool"),
        text: include_str!("../templates/aws/cluster-template-machinepool.yaml"),
    },
    BuiltIn {
        provider: "aws",
        flavor: Some("static-credentials"),
        text: include_str!("../templates/aws/cluster-template-static-credentials.yaml"),
    },
    BuiltIn {
        provider: "azure",
        flavor: None,
        text: include_str!("../templates/azure/cluster-template.yaml"),
    },
    BuiltIn {
        provider: "azure",
        flavor: Some("machinepool"),
        text: include_str!("../templates/azure/cluster-template-machinepool.yaml"),
    },
    BuiltIn {
        provider: "azure",
        flavor: Some("static-credentials"),
        text: include_str!("../templates/azure/cluster-template-static-credentials.yaml"),
    },
];

/// Why a cluster could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// No template for this provider and flavor.
    #[error("no template for infrastructure {provider:?}{}; available: {available}", flavor.as_ref().map(|f| format!(" flavor {f:?}")).unwrap_or_default())]
    NoTemplate {
        /// The provider asked for.
        provider: String,
        /// The flavor asked for.
        flavor: Option<String>,
        /// What exists, for the message.
        available: String,
    },
    /// The template is malformed or variables are missing.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The `clouds.yaml` given cannot be used; the message says why (never quoting secrets).
    #[error("clouds.yaml: {0}")]
    CloudsYaml(String),
}

/// The built-in template for `provider` and `flavor`.
pub fn built_in(provider: &str, flavor: Option<&str>) -> Result<&'static str, GenerateError> {
    BUILT_IN
        .iter()
        .find(|t| t.provider == provider && t.flavor == flavor)
        .map(|t| t.text)
        .ok_or_else(|| GenerateError::NoTemplate {
            provider: provider.to_string(),
            flavor: flavor.map(str::to_string),
            available: BUILT_IN
                .iter()
                .map(|t| match t.flavor {
                    Some(f) => format!("{} (flavor {f})", t.provider),
                    None => t.provider.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// What the command line sets; each flag wins over the environment variable it stands for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inputs {
    /// `CLUSTER_NAME`.
    pub cluster_name: String,
    /// `NAMESPACE` (`--target-namespace`).
    pub namespace: Option<String>,
    /// `KUBERNETES_VERSION`.
    pub kubernetes_version: Option<String>,
    /// `CONTROL_PLANE_MACHINE_COUNT`.
    pub control_plane_machine_count: Option<u32>,
    /// `WORKER_MACHINE_COUNT`.
    pub worker_machine_count: Option<u32>,
    /// Further variables set by the command (e.g. from `--clouds-yaml`).
    pub extra: BTreeMap<String, String>,
}

impl Inputs {
    fn values(&self) -> BTreeMap<&'static str, String> {
        let mut values = BTreeMap::from([("CLUSTER_NAME", self.cluster_name.clone())]);
        if let Some(v) = &self.namespace {
            values.insert("NAMESPACE", v.clone());
        }
        if let Some(v) = &self.kubernetes_version {
            values.insert("KUBERNETES_VERSION", v.clone());
        }
        if let Some(v) = self.control_plane_machine_count {
            values.insert("CONTROL_PLANE_MACHINE_COUNT", v.to_string());
        }
        if let Some(v) = self.worker_machine_count {
            values.insert("WORKER_MACHINE_COUNT", v.to_string());
        }
        values
    }

    fn lookup(&self, name: &str) -> Option<String> {
        self.values()
            .get(name)
            .cloned()
            .or_else(|| self.extra.get(name).cloned())
    }
}

/// Renders `template` with the flags in `inputs`, then `env` (the process environment in the
/// binary).
pub fn render(
    template: &str,
    inputs: &Inputs,
    env: impl Fn(&str) -> Option<String>,
) -> Result<String, GenerateError> {
    let parsed = Template::parse(template)?;
    Ok(parsed.render(|name| inputs.lookup(name).or_else(|| env(name)))?)
}

/// The variables `--clouds-yaml FILE --cloud NAME` sets, like CAPO's `env.rc`:
/// `OPENSTACK_CLOUD`, `OPENSTACK_CLOUD_YAML_B64` (a `clouds.yaml` holding only that cloud, so that
/// other clouds' credentials never reach the cluster, without its local `cacert` path) and
/// `OPENSTACK_CLOUD_CACERT_B64` (the CA bundle the entry's `cacert` names, read with
/// `read_file`; empty without one).
pub fn openstack_credentials(
    clouds_yaml: &str,
    cloud: &str,
    read_file: impl Fn(&str) -> Result<Vec<u8>, String>,
) -> Result<BTreeMap<String, String>, GenerateError> {
    use base64::Engine;
    let invalid = |why: String| GenerateError::CloudsYaml(why);
    // Parse errors can quote the input, which holds passwords: only say where.
    let parsed: serde_json::Value = serde_saphyr::from_str(clouds_yaml)
        .map_err(|_| invalid("the file is not valid YAML".into()))?;
    let clouds = parsed["clouds"]
        .as_object()
        .ok_or_else(|| invalid("it has no `clouds:` mapping".into()))?;
    let mut entry = clouds.get(cloud).cloned().ok_or_else(|| {
        let names: Vec<&str> = clouds.keys().map(String::as_str).collect();
        invalid(format!(
            "it has no cloud {cloud:?}; it has: {}",
            names.join(", ")
        ))
    })?;
    if !entry["auth"].is_object() {
        return Err(invalid(format!("cloud {cloud:?} has no `auth:` section")));
    }
    let cacert = match entry.as_object_mut().and_then(|e| e.remove("cacert")) {
        Some(serde_json::Value::String(path)) => read_file(&path)
            .map_err(|why| invalid(format!("cloud {cloud:?}: cacert {path}: {why}")))?,
        Some(_) => return Err(invalid(format!("cloud {cloud:?}: cacert is not a path"))),
        None => Vec::new(),
    };
    let single = serde_json::json!({"clouds": {cloud: entry}});
    let yaml = serde_saphyr::to_string(&single)
        .map_err(|_| invalid("cannot write the selected cloud back as YAML".into()))?;
    let b64 = base64::engine::general_purpose::STANDARD;
    Ok(BTreeMap::from([
        ("OPENSTACK_CLOUD".to_string(), cloud.to_string()),
        ("OPENSTACK_CLOUD_YAML_B64".to_string(), b64.encode(yaml)),
        ("OPENSTACK_CLOUD_CACERT_B64".to_string(), b64.encode(cacert)),
    ]))
}

/// What `--list-variables` prints, as clusterctl prints it.
pub fn list_variables(template: &str) -> Result<String, GenerateError> {
    let Variables { required, optional } = Template::parse(template)?.variables();
    let mut out = String::from("Required Variables:\n");
    for name in &required {
        out.push_str(&format!("  - {name}\n"));
    }
    out.push_str("\nOptional Variables:\n");
    let width = optional.keys().map(String::len).max().unwrap_or(0);
    for (name, default) in &optional {
        out.push_str(&format!("  - {name:<width$} (defaults to {default:?})\n"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `template` for cluster `demo` at v1.33.0, every other required variable a placeholder.
    fn render_with_placeholders(template: &BuiltIn) -> String {
        let inputs = Inputs {
            cluster_name: "demo".into(),
            kubernetes_version: Some("v1.33.0".into()),
            ..Inputs::default()
        };
        let required = Template::parse(template.text).unwrap().variables().required;
        render(template.text, &inputs, |name| {
            required.contains(name).then(|| "placeholder".to_string())
        })
        .unwrap()
    }

    #[test]
    fn every_built_in_template_renders_into_valid_yaml_documents() {
        for template in BUILT_IN {
            let text = render_with_placeholders(template);
            assert!(!text.contains("${"), "{text}");
            // Cluster, infrastructure cluster, the control plane's machine template,
            // KubeadmControlPlane, and the workers: a machine template, KubeadmConfigTemplate
            // and MachineDeployment, or a pool, its KubeadmConfig and MachinePool (and a
            // credentials Secret for some).
            let documents = text.split("\n---\n").count();
            assert!(
                documents >= 7,
                "{}: {documents} documents",
                template.provider
            );
            let workers = match template.flavor {
                Some("machinepool") => "name: demo-mp-0",
                _ => "name: demo-md-0",
            };
            assert!(text.contains(workers), "{:?}: {workers}", template.flavor);
            assert!(text.contains("replicas: 3"), "worker default");
        }
    }

    /// `clusterctl move` carries a Secret of the cluster's namespace only when something moved
    /// owns it, when it is named `<cluster>-<purpose>` for one of Cluster API's own purposes
    /// (kubeconfig, ca, etcd, sa, proxy, apiserver-etcd-client), or when it is labelled
    /// `clusterctl.cluster.x-k8s.io/move`. A template's credentials Secret is none of the first
    /// two, so it carries the label: without it the moved cluster's infrastructure would lose its
    /// credentials (CAPZ #6643).
    #[test]
    fn every_secret_of_a_template_is_carried_by_clusterctl_move() {
        let mut secrets = 0;
        for template in BUILT_IN {
            let text = render_with_placeholders(template);
            for document in text.split("\n---\n") {
                let object: serde_json::Value = serde_saphyr::from_str(document).unwrap();
                if object["kind"] != "Secret" {
                    continue;
                }
                secrets += 1;
                let labels = &object["metadata"]["labels"];
                assert_eq!(
                    labels[capi_core::labels::CLUSTERCTL_MOVE],
                    "",
                    "{} {:?}: {document}",
                    template.provider,
                    template.flavor
                );
            }
        }
        assert!(secrets >= 4, "the credentials Secrets of 4 templates");
    }

    /// Upstream: a MachineDeployment must not manage control-plane machines (it knows nothing of
    /// etcd quorum). Every built-in template runs its control plane as a KubeadmControlPlane that
    /// the Cluster references.
    #[test]
    fn every_built_in_template_runs_its_control_plane_as_a_kubeadm_control_plane() {
        for template in BUILT_IN {
            let text = render_with_placeholders(template);
            let documents: Vec<serde_json::Value> = text
                .split("\n---\n")
                .map(|d| serde_saphyr::from_str(d).unwrap())
                .collect();
            let of_kind = |kind: &str| {
                documents
                    .iter()
                    .filter(|d| d["kind"] == kind)
                    .collect::<Vec<_>>()
            };
            let which = format!("{} {:?}", template.provider, template.flavor);
            for kind in ["MachineDeployment", "MachineSet", "Machine"] {
                for object in of_kind(kind) {
                    let labels = if kind == "Machine" {
                        &object["metadata"]["labels"]
                    } else {
                        &object["spec"]["template"]["metadata"]["labels"]
                    };
                    assert!(
                        labels.get("cluster.x-k8s.io/control-plane").is_none(),
                        "{which}: a {kind} runs control-plane machines"
                    );
                }
            }
            let cluster = of_kind("Cluster")[0];
            let reference = &cluster["spec"]["controlPlaneRef"];
            assert_eq!(reference["kind"], "KubeadmControlPlane", "{which}");
            let kcps = of_kind("KubeadmControlPlane");
            assert_eq!(kcps.len(), 1, "{which}");
            assert_eq!(kcps[0]["metadata"]["name"], reference["name"], "{which}");
        }
    }

    #[test]
    fn flags_win_over_the_environment_and_missing_variables_are_named() {
        let template = built_in("inmemory", None).unwrap();
        let inputs = Inputs {
            cluster_name: "demo".into(),
            worker_machine_count: Some(5),
            ..Inputs::default()
        };
        let error = render(template, &inputs, |_| None).unwrap_err().to_string();
        assert!(error.contains("KUBERNETES_VERSION"), "{error}");
        let env = |name: &str| {
            (name == "KUBERNETES_VERSION" || name == "WORKER_MACHINE_COUNT").then(|| {
                if name == "KUBERNETES_VERSION" {
                    "v1.32.1"
                } else {
                    "9"
                }
                .to_string()
            })
        };
        let text = render(template, &inputs, env).unwrap();
        assert!(text.contains("replicas: 5"), "the flag wins");
        assert!(text.contains("version: v1.32.1"));
    }

    #[test]
    fn clouds_yaml_gives_one_cloud_and_its_ca() {
        use base64::Engine;
        let clouds = "clouds:\n  prod:\n    auth: {auth_url: https://keystone:5000/v3, username: u, password: s3cret, project_name: p}\n    region_name: RegionOne\n    cacert: /etc/ca.pem\n  other:\n    auth: {auth_url: https://x, username: o, password: other-secret}\n";
        let vars = openstack_credentials(clouds, "prod", |path| {
            assert_eq!(path, "/etc/ca.pem");
            Ok(b"-----BEGIN CERTIFICATE-----\n".to_vec())
        })
        .unwrap();
        let decode = |key: &str| {
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(&vars[key])
                    .unwrap(),
            )
            .unwrap()
        };
        let yaml = decode("OPENSTACK_CLOUD_YAML_B64");
        assert!(yaml.contains("s3cret") && yaml.contains("RegionOne"));
        assert!(
            !yaml.contains("other-secret"),
            "other clouds stay out: {yaml}"
        );
        assert!(!yaml.contains("/etc/ca.pem"), "the local path stays out");
        assert_eq!(
            decode("OPENSTACK_CLOUD_CACERT_B64"),
            "-----BEGIN CERTIFICATE-----\n"
        );
        assert_eq!(vars["OPENSTACK_CLOUD"], "prod");

        let missing = openstack_credentials(clouds, "staging", |_| Ok(Vec::new()))
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("prod, other") || missing.contains("other, prod"),
            "{missing}"
        );
        let broken = openstack_credentials("clouds: [password: s3cret", "prod", |_| Ok(Vec::new()))
            .unwrap_err()
            .to_string();
        assert!(!broken.contains("s3cret"), "no secret in errors: {broken}");
    }

    #[test]
    fn openstack_templates_render_with_the_credentials() {
        let clouds =
            "clouds:\n  prod:\n    auth: {auth_url: https://k, username: u, password: p}\n";
        for flavor in [None, Some("flatcar")] {
            let inputs = Inputs {
                cluster_name: "demo".into(),
                kubernetes_version: Some("v1.33.0".into()),
                extra: openstack_credentials(clouds, "prod", |_| Ok(Vec::new())).unwrap(),
                ..Inputs::default()
            };
            let env = |name: &str| match name {
                "OPENSTACK_CONTROL_PLANE_MACHINE_FLAVOR" | "OPENSTACK_NODE_MACHINE_FLAVOR" => {
                    Some("m1.medium".to_string())
                }
                "OPENSTACK_IMAGE_NAME" => Some("ubuntu-2404".to_string()),
                "OPENSTACK_SSH_KEY_NAME" => Some("default".to_string()),
                _ => None,
            };
            let text = render(built_in("openstack", flavor).unwrap(), &inputs, env).unwrap();
            assert!(text.contains("cloudName: \"prod\""));
            assert_eq!(text.contains("format: ignition"), flavor.is_some());
        }
    }

    #[test]
    fn unknown_templates_list_what_exists() {
        let error = built_in("nimbus", None).unwrap_err().to_string();
        assert!(error.contains("inmemory (flavor ignition)"), "{error}");
    }

    #[test]
    fn list_variables_reads_like_clusterctl() {
        let listing = list_variables(built_in("inmemory", None).unwrap()).unwrap();
        assert!(
            listing.starts_with("Required Variables:\n  - CLUSTER_NAME\n  - KUBERNETES_VERSION\n")
        );
        assert!(listing.contains("WORKER_MACHINE_COUNT"));
        assert!(listing.contains("(defaults to \"3\")"));
    }
}
