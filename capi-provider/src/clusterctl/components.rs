//! `infrastructure-components.yaml`: a provider's objects, as clusterctl installs them.

use capi_runtime::ReconcilerOptions;
use capi_runtime::manager::ManagerConfig;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::{AGGREGATE_TO_CONTROL_PLANE, AGGREGATE_TO_CORE, PROVIDER_LABEL};
use crate::Controllers;

/// Why the components could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ComponentsError {
    /// The provider name is not what clusterctl accepts.
    #[error(
        "provider name {0:?}: clusterctl needs a DNS-1123 label (lower-case letters, digits and '-', starting with a letter), and its label infrastructure-<name> at most 63 characters: at most 48"
    )]
    Name(String),
    /// A CRD could not be converted.
    #[error("rendering CRD {name}: {source}")]
    Crd {
        /// The CRD's name.
        name: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// YAML serialisation failed.
    #[error("rendering YAML: {0}")]
    Yaml(#[source] serde_saphyr::SerializeError),
    /// The image is not a canonical reference with a registry, which clusterctl requires.
    #[error(
        "image {0:?}: clusterctl needs a canonical reference with its registry, e.g. registry.example.com/my-cloud-manager:v0.1.0"
    )]
    Image(String),
    /// A CRD holds `${` or `$$`, which clusterctl would read as a variable or an escape.
    #[error(
        "CRD {0} holds `${{` or `$$` (in a description or pattern): clusterctl would substitute it; reword it"
    )]
    Dollar(String),
}

/// A `${VAR}` of the components: what it sets and its default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variable {
    /// The variable's name, prefixed with the provider's (`MY_CLOUD_LOG_LEVEL`).
    pub name: String,
    /// The value when the variable is not set.
    pub default: String,
    /// What it sets.
    pub description: &'static str,
}

/// One provider's components; [`Components::objects`] renders them. Every field is public so a
/// provider can adjust what [`Components::new`] chose.
#[derive(Clone, Debug)]
pub struct Components {
    /// The provider's name in clusterctl (`clusterctl init --infrastructure <name>`), a DNS-1123
    /// label of at most 48 characters; its manifest label is `infrastructure-<name>`, its
    /// variables start with it.
    pub name: String,
    /// The namespace the manager runs in. Cluster-scoped objects are named `<namespace>-…`, which
    /// is what `clusterctl delete` removes when the provider is installed there; installed
    /// elsewhere (clusterctl's `--target-namespace`), they keep this name and stay behind.
    pub namespace: String,
    /// The manager's ServiceAccount, Deployment, Role and Lease name.
    pub manager: String,
    /// The manager's image: a canonical reference with its registry
    /// (`registry.example.com/my-cloud-manager:v0.1.0`), as clusterctl requires. It is no
    /// variable — clusterctl's `--describe` cannot parse one; users move images to their own
    /// registry with clusterctl's `images:` setting.
    pub image: String,
    /// The provider's CRDs (carrying the contract label, see `capi_core::crd`).
    pub crds: Vec<CustomResourceDefinition>,
    /// The rules of the provider's own controllers (`capi_actuator::rbac::provider` and what its
    /// cloud code reads).
    pub rules: Vec<PolicyRule>,
    /// Rules in the manager's own namespace only, beside its Lease's (the Role there): what the
    /// provider does to objects of that namespace, such as marking the Secrets its cluster-scoped
    /// identities name as owned by them. Empty from [`Components::new`].
    pub namespace_rules: Vec<PolicyRule>,
    /// More manager arguments, after the shared ones (they may hold `${VAR}`s).
    pub args: Vec<String>,
}

impl Components {
    /// The components of provider `name`: namespace `<name>-system`, manager `<name>-manager`,
    /// image `localhost/<name>-manager:latest` (set [`Components::image`] to the released one).
    pub fn new(
        name: &str,
        crds: Vec<CustomResourceDefinition>,
        rules: Vec<PolicyRule>,
    ) -> Result<Self, ComponentsError> {
        if !is_dns_label(name) {
            return Err(ComponentsError::Name(name.to_string()));
        }
        Ok(Self {
            name: name.to_string(),
            namespace: format!("{name}-system"),
            manager: format!("{name}-manager"),
            image: format!("localhost/{name}-manager:latest"),
            crds,
            rules,
            namespace_rules: Vec::new(),
            args: Vec::new(),
        })
    }

    /// clusterctl's manifest label: `infrastructure-<name>`.
    pub fn manifest_label(&self) -> String {
        format!("infrastructure-{}", self.name)
    }

    /// The full name of the variable `suffix`: `<NAME>_<suffix>` (`my-cloud`, `LOG_LEVEL` →
    /// `MY_CLOUD_LOG_LEVEL`).
    pub fn variable(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.name.to_uppercase().replace('-', "_"))
    }

    /// Every variable the components read, with its default: which controllers run
    /// ([`Controllers`]: `provider` beside upstream's managers, `standalone` with this SDK's
    /// core, kubeadm bootstrap and control plane controllers and the rules they need), the log
    /// filter, and the manager's concurrency and API limits.
    pub fn variables(&self) -> Vec<Variable> {
        let config = ManagerConfig::default();
        [
            (
                "CONTROLLERS",
                Controllers::default().as_str().to_string(),
                "which controllers run: provider (beside upstream Cluster API) or standalone (also the core, kubeadm bootstrap and KubeadmControlPlane controllers)",
            ),
            (
                "LOG_LEVEL",
                "info".to_string(),
                "the log filter (RUST_LOG): a level, or target=level pairs",
            ),
            (
                "CONCURRENCY",
                ReconcilerOptions::default().concurrency.to_string(),
                "at most this many objects of each kind reconciled at once",
            ),
            (
                "QPS",
                config.qps.to_string(),
                "average API requests per second of each family of controllers",
            ),
            (
                "BURST",
                config.burst.to_string(),
                "API requests allowed at once above the average",
            ),
        ]
        .into_iter()
        .map(|(suffix, default, description)| Variable {
            name: self.variable(suffix),
            default,
            description,
        })
        .collect()
    }

    /// `${<NAME>_<suffix>:=<default>}`.
    fn reference(&self, suffix: &str) -> String {
        let name = self.variable(suffix);
        let default = self
            .variables()
            .into_iter()
            .find(|v| v.name == name)
            .map(|v| v.default)
            .unwrap_or_default();
        format!("${{{name}:={default}}}")
    }

    /// The objects, Namespace first, then CRDs, RBAC and the Deployment; values an operator
    /// chooses are `${VAR:=default}` references. Every object carries the provider label.
    pub fn objects(&self) -> Result<Vec<Value>, ComponentsError> {
        if !is_canonical_image(&self.image) {
            return Err(ComponentsError::Image(self.image.clone()));
        }
        let namespace = self.namespace.as_str();
        let mut objects = vec![json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {
                // The manager's pod meets the restricted Pod Security Standard; nothing in its
                // namespace may do less.
                "pod-security.kubernetes.io/enforce": "restricted",
            }},
        })];
        for crd in &self.crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let mut value = serde_json::to_value(crd).map_err(|source| ComponentsError::Crd {
                name: name.clone(),
                source,
            })?;
            let text = value.to_string();
            if text.contains("${") || text.contains("$$") {
                return Err(ComponentsError::Dollar(name));
            }
            if let Some(fields) = value.as_object_mut() {
                fields.remove("status");
            }
            objects.push(value);
        }
        objects.extend(self.rbac());
        objects.push(self.deployment());
        let label = self.manifest_label();
        for object in &mut objects {
            object["metadata"]["labels"][PROVIDER_LABEL] = json!(label);
        }
        Ok(objects)
    }

    /// The objects as one YAML stream, each document after `---`. A value that is a variable
    /// alone is quoted, so that whatever it is set to stays a string (clusterctl reads YAML 1.1,
    /// where `off` or `no` would be booleans).
    pub fn to_yaml(&self) -> Result<String, ComponentsError> {
        let mut out = String::new();
        for object in self.objects()? {
            out.push_str("---\n");
            let text = serde_saphyr::to_string(&object).map_err(ComponentsError::Yaml)?;
            for line in text.lines() {
                out.push_str(&quote_lone_variable(line));
                out.push('\n');
            }
        }
        Ok(out)
    }

    /// The ServiceAccount; two ClusterRoles, `<namespace>-provider` (the provider's own rules)
    /// and `<namespace>-standalone` (also the core, bootstrap and control plane controllers'),
    /// bound by `<NAME>_CONTROLLERS`; the ClusterRole upstream's managers aggregate; the
    /// `/metrics` reader; the Role in the manager's namespace only (its Lease, and
    /// [`Components::namespace_rules`]).
    fn rbac(&self) -> Vec<Value> {
        let (namespace, manager) = (self.namespace.as_str(), self.manager.as_str());
        let rbac = "rbac.authorization.k8s.io/v1";
        let mut standalone = self.rules.clone();
        standalone.extend(crate::controller_rules(&self.crds, true, true, true));
        // What upstream's core and KubeadmControlPlane managers do with the contract's kinds:
        // create machines from templates, clone cluster templates, patch owner references and
        // finalizers, delete.
        let mut upstream_access = Vec::new();
        let every = [
            "create", "delete", "get", "list", "patch", "update", "watch",
        ];
        for (group, plurals) in
            crate::plurals_by_group(&self.crds, &["Cluster", "Machine", "MachineTemplate"])
        {
            upstream_access.push(capi_runtime::rbac::rule(group, &plurals, &every));
        }
        for (group, plurals) in crate::plurals_by_group(&self.crds, &["ClusterTemplate"]) {
            let verbs = ["get", "list", "patch", "update", "watch"];
            upstream_access.push(capi_runtime::rbac::rule(group, &plurals, &verbs));
        }
        let cluster_role = |name: String, rules: Vec<PolicyRule>, labels: Value| {
            json!({"apiVersion": rbac, "kind": "ClusterRole",
                   "metadata": {"name": name, "labels": labels}, "rules": rules})
        };
        let subject = json!([{"kind": "ServiceAccount", "name": manager, "namespace": namespace}]);
        let mut own_namespace = capi_runtime::rbac::leader_election();
        own_namespace.extend(self.namespace_rules.iter().cloned());
        vec![
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": manager, "namespace": namespace}}),
            cluster_role(
                format!("{namespace}-provider"),
                self.rules.clone(),
                json!({}),
            ),
            cluster_role(format!("{namespace}-standalone"), standalone, json!({})),
            json!({"apiVersion": rbac, "kind": "ClusterRoleBinding",
                   "metadata": {"name": format!("{namespace}-manager")},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": format!("{namespace}-{}", self.reference("CONTROLLERS"))},
                   "subjects": subject}),
            cluster_role(
                format!("{namespace}-upstream-access"),
                upstream_access,
                json!({AGGREGATE_TO_CORE: "true", AGGREGATE_TO_CONTROL_PLANE: "true"}),
            ),
            cluster_role(
                format!("{namespace}-metrics-reader"),
                vec![capi_runtime::rbac::metrics_reader()],
                json!({}),
            ),
            json!({"apiVersion": rbac, "kind": "Role",
                   "metadata": {"name": manager, "namespace": namespace},
                   "rules": own_namespace}),
            json!({"apiVersion": rbac, "kind": "RoleBinding",
                   "metadata": {"name": manager, "namespace": namespace},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": manager},
                   "subjects": subject}),
        ]
    }

    /// The manager's Deployment, hardened as upstream's managers are: not root, no privilege
    /// escalation, no capability, the runtime's default seccomp profile, a read-only root file
    /// system (`/tmp` is an `emptyDir`), its ServiceAccount token mounted because the manager
    /// talks to the API server, `/metrics` behind authorization, resource requests with a memory
    /// limit (no CPU limit, which would throttle bursts of reconciles). Its Lease is in the pod's
    /// own namespace, wherever clusterctl installs it.
    fn deployment(&self) -> Value {
        let (namespace, manager) = (self.namespace.as_str(), self.manager.as_str());
        let mut args = vec![
            format!("--controllers={}", self.reference("CONTROLLERS")),
            format!("--leader-elect={manager}"),
            "--log-format=json".to_string(),
            format!("--concurrency={}", self.reference("CONCURRENCY")),
            format!("--qps={}", self.reference("QPS")),
            format!("--burst={}", self.reference("BURST")),
        ];
        args.extend(self.args.iter().cloned());
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": manager, "namespace": namespace, "labels": {"app": manager}},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": manager}},
                        "template": {"metadata": {"labels": {"app": manager}}, "spec": {
            "serviceAccountName": manager,
            "automountServiceAccountToken": true,
            "terminationGracePeriodSeconds": 10,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "manager",
                "image": self.image,
                "args": args,
                "env": [
                    {"name": "POD_NAMESPACE",
                     "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "RUST_LOG", "value": self.reference("LOG_LEVEL")},
                ],
                "ports": [{"name": "http", "containerPort": 8080},
                          {"name": "metrics", "containerPort": 8443}],
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}},
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "privileged": false,
                    "readOnlyRootFilesystem": true,
                    "runAsUser": 65532,
                    "runAsGroup": 65532,
                    "capabilities": {"drop": ["ALL"]},
                },
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"memory": "1Gi"},
                },
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        }}}})
    }
}

/// `key: ${VAR:=d}` or `- ${VAR:=d}` as `key: "${VAR:=d}"`; any other line as it is.
fn quote_lone_variable(line: &str) -> std::borrow::Cow<'_, str> {
    let indent = line.len() - line.trim_start().len();
    let item = indent
        + if line[indent..].starts_with("- ") {
            2
        } else {
            0
        };
    let value_at = match line[item..].find(": ") {
        Some(at) => Some(item + at + 2),
        None => (item > indent).then_some(item),
    };
    match value_at.map(|at| line.split_at(at)) {
        Some((key, value))
            if value.starts_with("${")
                && value.ends_with('}')
                && value[2..].find('}') == Some(value.len() - 3)
                && !value.contains(['"', '\\']) =>
        {
            format!("{key}\"{value}\"").into()
        }
        _ => line.into(),
    }
}

/// An image reference without its tag or digest (a colon before the last `/` is a registry's
/// port, kept).
pub fn image_repository(image: &str) -> &str {
    let image = image.split_once('@').map_or(image, |(name, _)| name);
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => name,
        _ => image,
    }
}

/// Whether `image` is a canonical reference, as clusterctl parses them: a registry (a name with
/// `.` or `:`, or `localhost`), a lower-case path, an optional tag or digest, and no variable.
pub fn is_canonical_image(image: &str) -> bool {
    let name = image_repository(image);
    let tag = image[name.len()..].split('@').next().unwrap_or_default();
    if let Some(tag) = tag.strip_prefix(':')
        && (tag.is_empty()
            || !tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)))
    {
        return false;
    }
    let Some((registry, path)) = name.split_once('/') else {
        return false;
    };
    (registry.contains(['.', ':']) || registry == "localhost")
        && !path.is_empty()
        && path.split('/').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        })
}

/// A DNS-1123 label that starts with a letter (clusterctl's provider names), short enough for the
/// label value `infrastructure-<name>` (63).
fn is_dns_label(name: &str) -> bool {
    name.len() <= 48
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

#[cfg(test)]
mod tests;
