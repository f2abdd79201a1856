//! The providers' deployment manifests, generated from code so that they cannot drift:
//! `rbac.yaml` (ServiceAccount, a least-privilege ClusterRole from [`capi_actuator::rbac`] and
//! [`capi_runtime::rbac`] and its binding, the leader-election Role in the manager's namespace and
//! its binding), `manager.yaml` (Namespace, Deployment of the manager in standalone mode with leader
//! election) and `metadata.yaml` (clusterctl provider metadata), for the in-memory provider
//! ([`inmemory`]), the OpenStack provider ([`openstack`]), the AWS provider ([`aws`]) and the
//! Azure provider ([`azure`]). `cargo xtask crds` writes them to `config/<provider>/`;
//! `capictl init --infrastructure <provider>` applies them.

/// Why the manifests could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// YAML serialisation failed.
    #[error("rendering YAML: {0}")]
    Yaml(#[from] serde_saphyr::SerializeError),
    /// JSON conversion failed.
    #[error("rendering JSON: {0}")]
    Json(#[source] serde_json::Error),
}

use capi_actuator::rbac;
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::json;

/// The group of this workspace's provider kinds.
const INFRA_GROUP: &str = "infrastructure.capi-rs.dev";

/// One provider's manager: where it runs, as whom, with which image, flags and rules.
#[derive(Clone, Debug)]
pub struct ProviderManifests {
    /// The folder under `config/` the files go to.
    pub folder: &'static str,
    /// The namespace the manager runs in.
    pub namespace: &'static str,
    /// The ServiceAccount, ClusterRole, ClusterRoleBinding, Role, RoleBinding and Deployment name.
    pub name: &'static str,
    /// The container image.
    pub image: &'static str,
    /// The manager's arguments (leader election and JSON logs are added).
    pub args: Vec<&'static str>,
    /// Every rule the manager needs.
    pub rules: Vec<PolicyRule>,
}

/// The rules of a standalone manager of one provider: its machine, cluster and machine template
/// kinds, the bootstrap reconciler and the core controllers.
fn standalone_rules(plural: &str) -> Vec<PolicyRule> {
    let machines = format!("{plural}machines");
    let clusters = format!("{plural}clusters");
    let templates = format!("{plural}machinetemplates");
    let mut rules = rbac::provider(INFRA_GROUP, &machines, &clusters, &templates);
    rules.extend(capi_bootstrap::controller::rbac());
    rules.extend(capi_controllers::rbac(
        INFRA_GROUP,
        &[machines.as_str(), clusters.as_str(), templates.as_str()],
    ));
    rules
}

/// The in-memory provider's manager (`inmemory-manager`, standalone mode, with the
/// KubeadmControlPlane controller reaching the simulated cloud's etcd).
pub fn inmemory() -> ProviderManifests {
    let mut rules = standalone_rules("inmemory");
    rules.extend(capi_control_plane::controller::rbac(
        INFRA_GROUP,
        &["inmemorymachines", "inmemorymachinetemplates"],
    ));
    ProviderManifests {
        folder: "inmemory",
        namespace: "capi-inmemory-system",
        name: "capi-inmemory-manager",
        image: "capi-rs/inmemory-manager:dev",
        args: vec!["--with-bootstrap", "--with-core", "--with-control-plane"],
        rules,
    }
}

/// The OpenStack provider's manager (`openstack-manager`, standalone mode, with the
/// KubeadmControlPlane controller reaching each cluster's etcd through its workload API server).
/// Besides the rules of every standalone manager it reads the `identityRef` Secrets (already
/// granted by the bootstrap rules, which read and write Secrets).
pub fn openstack() -> ProviderManifests {
    let mut rules = standalone_rules("openstack");
    rules.extend(capi_control_plane::controller::rbac(
        INFRA_GROUP,
        &["openstackmachines", "openstackmachinetemplates"],
    ));
    ProviderManifests {
        folder: "openstack",
        namespace: "capi-openstack-system",
        name: "capi-openstack-manager",
        image: "capi-rs/openstack-manager:dev",
        args: vec!["--with-bootstrap", "--with-core", "--with-control-plane"],
        rules,
    }
}

/// The AWS provider's manager (`aws-manager`, standalone mode, with the KubeadmControlPlane
/// controller reaching each cluster's etcd through its workload API server). It reads the
/// identities `identityRef`s name and the namespaces their selectors need, and Secrets (granted
/// by the bootstrap rules, which read and write Secrets); the controller identity stands for the
/// manager's own credentials (the AWS SDK's default chain: give the pod a web identity, or the
/// variables `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` from a Secret of its namespace).
pub fn aws() -> ProviderManifests {
    let mut rules = standalone_rules("aws");
    rules.extend(provider_aws::connector::rbac());
    rules.extend(capi_control_plane::controller::rbac(
        INFRA_GROUP,
        &["awsmachines", "awsmachinetemplates"],
    ));
    ProviderManifests {
        folder: "aws",
        namespace: "capi-aws-system",
        name: "capi-aws-manager",
        image: "capi-rs/aws-manager:dev",
        args: vec!["--with-bootstrap", "--with-core", "--with-control-plane"],
        rules,
    }
}

/// The Azure provider's manager (`azure-manager`, standalone mode, with the KubeadmControlPlane
/// controller). It reads the `AzureClusterIdentity`s `identityRef`s name, the namespaces their
/// selectors need, and Secrets (a service principal's `tenantID`, `clientID` and `clientSecret`;
/// granted by the bootstrap rules, which read and write Secrets).
pub fn azure() -> ProviderManifests {
    let mut rules = standalone_rules("azure");
    rules.extend(provider_azure::connector::rbac());
    rules.extend(capi_control_plane::controller::rbac(
        INFRA_GROUP,
        &["azuremachines", "azuremachinetemplates"],
    ));
    ProviderManifests {
        folder: "azure",
        namespace: "capi-azure-system",
        name: "capi-azure-manager",
        image: "capi-rs/azure-manager:dev",
        args: vec!["--with-bootstrap", "--with-core", "--with-control-plane"],
        rules,
    }
}

/// The manager's pod, hardened as upstream's managers are: not root, no privilege escalation, no
/// capability, the runtime's default seccomp profile, a read-only root file system (`/tmp` is an
/// `emptyDir`), its ServiceAccount token mounted because the manager talks to the API server, and
/// resource requests with a memory limit (no CPU limit, which would throttle bursts of reconciles).
fn pod_spec(name: &str, image: &str, args: Vec<String>) -> serde_json::Value {
    json!({
        "serviceAccountName": name,
        "automountServiceAccountToken": true,
        "terminationGracePeriodSeconds": 10,
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "manager",
            "image": image,
            "args": args,
            "env": [{"name": "POD_NAMESPACE",
                     "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
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
    })
}

fn documents(values: &[serde_json::Value]) -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::from("# Generated by `cargo xtask crds`; do not edit.\n");
    for value in values {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(value)?);
    }
    Ok(out)
}

impl ProviderManifests {
    /// The manager's objects per file: `rbac.yaml`, `manager.yaml`, `metadata.yaml`.
    fn documents(&self) -> Result<Vec<(&'static str, Vec<serde_json::Value>)>, ManifestError> {
        let (namespace, name) = (self.namespace, self.name);
        let mut role =
            serde_json::to_value(capi_runtime::rbac::cluster_role(name, self.rules.clone()))
                .map_err(ManifestError::Json)?;
        role["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
        role["kind"] = json!("ClusterRole");
        let mut election = serde_json::to_value(capi_runtime::rbac::role(
            namespace,
            name,
            capi_runtime::rbac::leader_election(),
        ))
        .map_err(ManifestError::Json)?;
        election["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
        election["kind"] = json!("Role");
        let reader = format!("{name}-metrics-reader");
        let mut metrics_reader = serde_json::to_value(capi_runtime::rbac::cluster_role(
            &reader,
            vec![capi_runtime::rbac::metrics_reader()],
        ))
        .map_err(ManifestError::Json)?;
        metrics_reader["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
        metrics_reader["kind"] = json!("ClusterRole");
        let rbac_objects = vec![
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": name, "namespace": namespace}}),
            role,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": name},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                   "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}),
            election,
            metrics_reader,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": name, "namespace": namespace},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                   "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}),
        ];
        let mut args: Vec<String> = self.args.iter().map(|a| a.to_string()).collect();
        args.extend([
            "--leader-elect".into(),
            format!("{namespace}/{name}"),
            "--log-format".into(),
            "json".into(),
        ]);
        let manager_objects = vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                            "template": {"metadata": {"labels": {"app": name}},
                                         "spec": pod_spec(name, self.image, args)}}}),
        ];
        let metadata_objects = vec![json!({
            "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "kind": "Metadata",
            "releaseSeries": [{"major": 0, "minor": 1, "contract": "v1beta2"}],
        })];
        Ok(vec![
            ("rbac.yaml", rbac_objects),
            ("manager.yaml", manager_objects),
            ("metadata.yaml", metadata_objects),
        ])
    }

    /// The manifest files (name, YAML).
    pub fn files(&self) -> Result<Vec<(&'static str, String)>, ManifestError> {
        self.documents()?
            .into_iter()
            .map(|(name, objects)| Ok((name, documents(&objects)?)))
            .collect()
    }

    /// The objects `capictl init` installs (RBAC, Namespace, Deployment; not the clusterctl
    /// metadata, which is no API object), Namespace first.
    pub fn objects(&self) -> Result<Vec<serde_json::Value>, ManifestError> {
        let mut objects: Vec<serde_json::Value> = self
            .documents()?
            .into_iter()
            .filter(|(name, _)| *name != "metadata.yaml")
            .flat_map(|(_, objects)| objects)
            .collect();
        objects.sort_by_key(|o| o["kind"] != "Namespace");
        Ok(objects)
    }
}

/// Every provider whose manifests `cargo xtask crds` writes.
pub fn all() -> Vec<ProviderManifests> {
    vec![inmemory(), openstack(), aws(), azure()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_manager_runs_hardened() {
        for provider in all() {
            let objects = provider.objects().unwrap();
            let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
            let pod = &deployment["spec"]["template"]["spec"];
            assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
            assert_eq!(
                pod["securityContext"]["seccompProfile"]["type"],
                "RuntimeDefault"
            );
            let container = &pod["containers"][0];
            assert_eq!(container["name"], "manager");
            let security = &container["securityContext"];
            assert_eq!(security["allowPrivilegeEscalation"], false);
            assert_eq!(security["readOnlyRootFilesystem"], true);
            assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
            assert!(container["resources"]["requests"]["memory"].is_string());
            assert!(container["resources"]["limits"]["memory"].is_string());
        }
    }

    #[test]
    fn the_lease_is_granted_in_the_managers_namespace_only() {
        for provider in all() {
            let objects = provider.objects().unwrap();
            let cluster_role = objects.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
            let text = cluster_role["rules"].to_string();
            assert!(!text.contains("leases"), "{}", provider.folder);
            assert!(!text.contains("\"*\""), "{}: no wildcard", provider.folder);
            let role = objects.iter().find(|o| o["kind"] == "Role").unwrap();
            assert_eq!(role["metadata"]["namespace"], provider.namespace);
            assert_eq!(role["rules"][0]["resources"], json!(["leases"]));
            let binding = objects.iter().find(|o| o["kind"] == "RoleBinding").unwrap();
            assert_eq!(binding["roleRef"]["kind"], "Role");
        }
    }
}
