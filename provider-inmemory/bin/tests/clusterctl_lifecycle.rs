//! The real clusterctl v1.14.2 manages this provider's release: `clusterctl init` installs it
//! beside upstream's core, kubeadm bootstrap and kubeadm control plane providers and cert-manager
//! (all from local repositories, see `capi_testing::clusterctl`), `generate cluster` renders every
//! template into objects the API server accepts under strict field validation, `describe
//! cluster` shows the provider's objects and conditions, `move` carries a generated cluster that
//! has become Available (with the feature `real-etcd`: real etcd members behind simulated
//! kubelets) to a second management cluster without touching the cloud, where it is Available
//! again, `upgrade apply` replaces the manager
//! with a cluster untouched, and `delete` removes what upstream documents and keeps what it keeps.
//!
//! There is no kubelet here: `capi_testing::pods` runs every Deployment clusterctl installs as a
//! local process — upstream's managers and cert-manager's from the peer's binaries, this
//! provider's manager from `inmemory-manager` — with its ServiceAccount's token, its Secrets
//! mounted, and its Services' endpoints written, so that the API server reaches upstream's
//! webhooks through their Services with the certificates cert-manager issued and the CA bundles
//! its CA injector wrote. kube-controller-manager runs the namespace, garbage-collection and
//! ClusterRole-aggregation controllers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use capi_provider::clusterctl::Version;
use capi_testing::clusterctl::{
    ClusterctlOutput, InfrastructureRelease, KUBEADM_CLUSTER_KINDS, Management, by_name, by_uid,
    upstream_images,
};
use capi_testing::envtest::ControlPlane;
use capi_testing::upstream::UpstreamAssets;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use serde_json::Value;

/// The provider's name in clusterctl.
const PROVIDER: &str = "capirs-inmemory";
/// The namespace its components install into.
const PROVIDER_NAMESPACE: &str = "capi-inmemory-system";
/// Values for the variables without a default of the other providers' templates (their managers
/// do not run here; their objects only have to be accepted).
const TEMPLATE_VARIABLES: &[(&str, &str)] = &[
    // The Ignition flavors need upstream's kubeadm bootstrap and control plane with this gate.
    ("EXP_KUBEADM_BOOTSTRAP_FORMAT_IGNITION", "true"),
    ("OPENSTACK_CLOUD", "local"),
    ("OPENSTACK_CLOUD_YAML_B64", "Y2xvdWRzOiB7fQo="),
    // clusterctl counts an empty default (`${VAR:=}`) as not set.
    ("OPENSTACK_CLOUD_CACERT_B64", "Cg=="),
    ("AWS_SESSION_TOKEN", "example-session"),
    ("AZURE_SSH_PUBLIC_KEY_B64", "Cg=="),
    ("OPENSTACK_CONTROL_PLANE_MACHINE_FLAVOR", "m1.medium"),
    ("OPENSTACK_NODE_MACHINE_FLAVOR", "m1.small"),
    ("OPENSTACK_IMAGE_NAME", "ubuntu-2404-kube-v1.33.0"),
    ("OPENSTACK_SSH_KEY_NAME", "default"),
    ("AWS_REGION", "eu-west-1"),
    ("AWS_SSH_KEY_NAME", "default"),
    ("AWS_CONTROL_PLANE_MACHINE_TYPE", "t3.large"),
    ("AWS_NODE_MACHINE_TYPE", "t3.medium"),
    ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE"),
    ("AWS_SECRET_ACCESS_KEY", "example-secret"),
    (
        "AZURE_SUBSCRIPTION_ID",
        "00000000-0000-0000-0000-000000000001",
    ),
    ("AZURE_TENANT_ID", "00000000-0000-0000-0000-000000000002"),
    ("AZURE_CLIENT_ID", "00000000-0000-0000-0000-000000000003"),
    ("AZURE_CLIENT_SECRET", "example-secret"),
    ("AZURE_CLUSTER_IDENTITY_SECRET_NAME", "azure-identity"),
    ("AZURE_LOCATION", "westeurope"),
    ("AZURE_CONTROL_PLANE_MACHINE_TYPE", "Standard_D2s_v3"),
    ("AZURE_NODE_MACHINE_TYPE", "Standard_D2s_v3"),
];

/// How long a step may take on 2 busy cores.
const WITHIN: Duration = Duration::from_secs(120);

/// A management cluster initialised by clusterctl, its pods running, with this provider's
/// releases in a repository of its own.
struct InMemory {
    management: Management,
    _releases: tempfile::TempDir,
}

impl std::ops::Deref for InMemory {
    type Target = Management;

    fn deref(&self) -> &Management {
        &self.management
    }
}

impl InMemory {
    /// clusterctl configured with this provider's releases `versions` (and `others` of the
    /// workspace's providers, which run no manager here).
    async fn new(versions: &[&str], others: &[&str]) -> Self {
        Self::with(versions, others, None, |_, _| {}).await
    }

    /// [`InMemory::new`] whose provider's manager uses the cloud at `cloud_url` (default: one
    /// in its own process), each release of it first changed by `edit(version, release)`.
    async fn with(
        versions: &[&str],
        others: &[&str],
        cloud_url: Option<String>,
        edit: impl Fn(&str, &mut capi_provider::clusterctl::Release),
    ) -> Self {
        let assets = UpstreamAssets::locate().expect("cargo xtask upstream install");
        let releases = tempfile::tempdir().unwrap();
        let mut infrastructure = Vec::new();
        for version in versions {
            infrastructure.push(write_release("inmemory", version, releases.path(), |r| {
                edit(version, r)
            }));
        }
        for other in others {
            infrastructure.push(write_release(other, versions[0], releases.path(), |_| {}));
        }
        // clusterctl finds every version beside the newest it is pointed at.
        infrastructure.dedup_by(|a, b| a.name == b.name);
        let images = upstream_images(&assets).with(
            "ghcr.io/capi-rs/inmemory-manager",
            env!("CARGO_BIN_EXE_inmemory-manager"),
            move |pod| {
                let mut flags = vec![
                    format!("--http-addr=0.0.0.0:{}", pod.port("http").unwrap_or(0)),
                    format!(
                        "--diagnostics-address=127.0.0.1:{}",
                        pod.port("metrics").unwrap_or(0)
                    ),
                ];
                if let Some(url) = &cloud_url {
                    flags.push(format!("--cloud-url={url}"));
                }
                flags
            },
        );
        let management = Management::start(&assets, &infrastructure, images, TEMPLATE_VARIABLES)
            .await
            .unwrap();
        Self {
            management,
            _releases: releases,
        }
    }

    /// `clusterctl generate cluster <name> --infrastructure <provider> …` into namespace
    /// `<name>` (created), applied with strict field validation.
    async fn create_cluster(&self, name: &str, workers: &str) {
        let objects = self
            .generate_cluster(
                name,
                &[
                    "--infrastructure",
                    PROVIDER,
                    "--kubernetes-version",
                    "v1.33.0",
                    "--worker-machine-count",
                    workers,
                ],
            )
            .await
            .unwrap();
        self.create_namespace(name).await.unwrap();
        for object in &objects {
            self.apply_strictly(object).await.unwrap();
        }
    }

    /// `clusterctl init --infrastructure capirs-inmemory[:version] --wait-providers`.
    async fn install(&self, version: Option<&str>) -> ClusterctlOutput {
        let infrastructure = match version {
            Some(v) => format!("{PROVIDER}:v{v}"),
            None => PROVIDER.to_string(),
        };
        self.init(&infrastructure).await.unwrap()
    }
}

/// Writes the workspace's release of `provider` at `version` into `repository`, changed by `edit`.
fn write_release(
    provider: &str,
    version: &str,
    repository: &Path,
    edit: impl FnOnce(&mut capi_provider::clusterctl::Release),
) -> InfrastructureRelease {
    let version: Version = version.parse().unwrap();
    let mut release = capi_cli::manifests::release(provider, &version).unwrap();
    edit(&mut release);
    release.write(repository).unwrap();
    InfrastructureRelease {
        name: capi_cli::manifests::clusterctl_name(provider),
        repository: repository.to_path_buf(),
    }
}

/// Waits [`WITHIN`] at most until `check` holds on `management`.
async fn eventually<F, Fut>(what: &str, management: &Management, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    management.eventually(what, WITHIN, check).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_init_installs_the_provider_beside_upstream_and_every_manager_serves() {
    let management = InMemory::new(&["0.1.0"], &[]).await;
    let out = management.install(None).await;
    assert!(out.stderr.contains("Installing cert-manager"), "{out:?}");
    let client = &management.client;

    // clusterctl's inventory records the four providers it installed.
    assert_eq!(
        management.inventory().await.unwrap(),
        [
            "capi-inmemory-system/infrastructure-capirs-inmemory v0.1.0",
            "capi-kubeadm-bootstrap-system/bootstrap-kubeadm v1.14.2",
            "capi-kubeadm-control-plane-system/control-plane-kubeadm v1.14.2",
            "capi-system/cluster-api v1.14.2",
        ]
    );

    // cert-manager (its controller, run here) issued upstream's webhook certificates, and its CA
    // injector wrote their CA into the webhook configurations.
    let secret = Api::<Secret>::namespaced(client.clone(), "capi-system")
        .get("capi-webhook-service-cert")
        .await
        .unwrap();
    assert!(secret.data.unwrap().contains_key("tls.crt"));
    let webhooks = management.api(
        (
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
        ),
        None,
    );
    eventually(
        "the CA injector filled the caBundle",
        &management,
        || async {
            webhooks
                .get("capi-validating-webhook-configuration")
                .await
                .is_ok_and(|v| {
                    v.data["webhooks"][0]["clientConfig"]["caBundle"]
                        .as_str()
                        .is_some_and(|b| !b.is_empty())
                })
        },
    )
    .await;

    // Every manager runs, ready, and none restarted.
    for (namespace, deployment) in [
        ("cert-manager", "cert-manager"),
        ("cert-manager", "cert-manager-cainjector"),
        ("capi-system", "capi-controller-manager"),
        (
            "capi-kubeadm-bootstrap-system",
            "capi-kubeadm-bootstrap-controller-manager",
        ),
        (
            "capi-kubeadm-control-plane-system",
            "capi-kubeadm-control-plane-controller-manager",
        ),
        (PROVIDER_NAMESPACE, "capi-inmemory-manager"),
    ] {
        assert!(
            management
                .pods
                .wait_ready(namespace, deployment, WITHIN)
                .await,
            "{namespace}/{deployment} is not ready\n{}",
            management.pods.log_tails()
        );
    }
    assert!(
        management.pods.pods().iter().all(|p| p.restarts == 0),
        "{:?}\n{}",
        management.pods.pods(),
        management.pods.log_tails()
    );

    // Upstream's webhooks answer through their Service: a Cluster with a topology is refused
    // while ClusterTopology is off, which only upstream's validating webhook says.
    let ns = "webhook-check";
    management.create_namespace(ns).await.unwrap();
    let clusters = management.api(("cluster.x-k8s.io", "v1beta2", "Cluster"), Some(ns));
    let cluster: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "topology", "namespace": ns},
        "spec": {"topology": {"classRef": {"name": "none"}, "version": "v1.33.0"}},
    }))
    .unwrap();
    let refused = clusters
        .create(&Default::default(), &cluster)
        .await
        .expect_err("upstream's webhook refuses a topology without ClusterTopology");
    assert!(
        refused.to_string().contains("ClusterTopology"),
        "refused by the webhook, not by the schema: {refused}"
    );

    // The provider's manager holds its lease in its own namespace, as its ServiceAccount.
    let lease = Api::<Lease>::namespaced(client.clone(), PROVIDER_NAMESPACE);
    eventually(
        "the provider's manager holds its lease",
        &management,
        || async {
            lease
                .get_opt("capi-inmemory-manager")
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec?.holder_identity)
                .is_some()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_generate_cluster_renders_every_template_and_the_api_server_takes_it_strictly() {
    let others = ["openstack", "aws", "azure"];
    let management = InMemory::new(&["0.1.0"], &others).await;
    // The three other providers have no manager here: their CRDs are what this test needs.
    management
        .clusterctl(&[
            "init",
            "--infrastructure",
            "capirs-inmemory,capirs-openstack,capirs-aws,capirs-azure",
        ])
        .await
        .unwrap();
    for deployment in [
        ("capi-system", "capi-controller-manager"),
        (
            "capi-kubeadm-bootstrap-system",
            "capi-kubeadm-bootstrap-controller-manager",
        ),
        (
            "capi-kubeadm-control-plane-system",
            "capi-kubeadm-control-plane-controller-manager",
        ),
    ] {
        assert!(
            management
                .pods
                .wait_ready(deployment.0, deployment.1, WITHIN)
                .await
        );
    }
    for template in capi_cli::generate::BUILT_IN.iter() {
        let provider = capi_cli::manifests::clusterctl_name(template.provider);
        let name = format!(
            "{}-{}",
            template.provider,
            template.flavor.unwrap_or("default")
        );
        let mut args = vec![
            "generate",
            "cluster",
            &name,
            "--infrastructure",
            &provider,
            "--kubernetes-version",
            "v1.33.0",
            "--target-namespace",
            &name,
        ];
        if let Some(flavor) = template.flavor {
            args.extend(["--flavor", flavor]);
        }
        let yaml = management.clusterctl(&args).await.unwrap().stdout;
        management.create_namespace(&name).await.unwrap();
        let objects: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert!(
            kinds.contains(&"Cluster") && kinds.contains(&"KubeadmControlPlane"),
            "{name} rendered {kinds:?}"
        );
        for object in objects.iter().filter(|o| !o.is_null()) {
            management
                .apply_strictly(object)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        // The API server holds what was rendered: the Cluster is there, in its namespace.
        let clusters = management.api(("cluster.x-k8s.io", "v1beta2", "Cluster"), Some(&name));
        assert!(clusters.get_opt(&name).await.unwrap().is_some(), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_describe_cluster_shows_the_providers_objects_with_their_conditions() {
    let management = InMemory::new(&["0.1.0"], &[]).await;
    management.install(None).await;
    let name = "described";
    management.create_cluster(name, "1").await;
    // The provider's controller has judged its cluster object: a Ready condition is there.
    let clusters = management.api(
        (
            provider_inmemory::api::GROUP,
            provider_inmemory::api::VERSION,
            "InMemoryCluster",
        ),
        Some(name),
    );
    eventually(
        "the InMemoryCluster has conditions",
        &management,
        || async {
            clusters
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .is_some_and(|c| {
                    c.data["status"]["conditions"]
                        .as_array()
                        .is_some_and(|a| !a.is_empty())
                })
        },
    )
    .await;
    let out = management
        .clusterctl(&[
            "describe",
            "cluster",
            name,
            "--namespace",
            name,
            "--show-conditions",
            "all",
        ])
        .await
        .unwrap()
        .stdout;
    // Rows read `<Kind> <namespace>/<name>`, each followed by its conditions.
    assert!(out.contains(&format!("Cluster {name}/{name}")), "{out}");
    assert!(
        out.contains(&format!("InMemoryCluster {name}/{name}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("KubeadmControlPlane {name}/")),
        "{out}"
    );
    let infrastructure = out
        .lines()
        .skip_while(|l| !l.contains("InMemoryCluster "))
        .skip(1)
        .take_while(|l| l.starts_with(' ') || l.contains("│ "))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        infrastructure.contains("Ready"),
        "the InMemoryCluster's conditions are listed under it:\n{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_delete_removes_the_provider_and_keeps_its_crds_and_namespace() {
    let management = InMemory::new(&["0.1.0"], &[]).await;
    management.install(None).await;
    let client = &management.client;
    assert!(
        management
            .pods
            .wait_ready(PROVIDER_NAMESPACE, "capi-inmemory-manager", WITHIN)
            .await
    );
    let roles = management.api(("rbac.authorization.k8s.io", "v1", "ClusterRole"), None);
    let provider_roles = || async {
        roles
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(ResourceExt::name_any)
            .filter(|n| n.starts_with(&format!("{PROVIDER_NAMESPACE}-")))
            .collect::<Vec<String>>()
    };
    assert!(
        provider_roles().await.len() >= 3,
        "the components hold the provider's ClusterRoles: {:?}",
        provider_roles().await
    );
    management
        .clusterctl(&["delete", "--infrastructure", PROVIDER])
        .await
        .unwrap();

    // The Deployment and the cluster-scoped RBAC (named <namespace>-…) are gone, so is the
    // inventory's entry; the pod stopped.
    let deployments = Api::<Deployment>::namespaced(client.clone(), PROVIDER_NAMESPACE);
    assert!(
        deployments
            .get_opt("capi-inmemory-manager")
            .await
            .unwrap()
            .is_none()
    );
    let left = provider_roles().await;
    assert!(left.is_empty(), "ClusterRoles left: {left:?}");
    assert!(
        !management
            .inventory()
            .await
            .unwrap()
            .iter()
            .any(|p| p.contains(PROVIDER))
    );
    eventually("the provider's pod stopped", &management, || async {
        !management
            .pods
            .pods()
            .iter()
            .any(|p| p.deployment.starts_with(PROVIDER_NAMESPACE))
    })
    .await;

    // What clusterctl keeps without --include-crd and --include-namespace: the CRDs (and so
    // every object of the provider's kinds) and the namespace.
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in [
        "inmemoryclusters",
        "inmemorymachines",
        "inmemorymachinetemplates",
    ] {
        let name = format!("{crd}.{}", provider_inmemory::api::GROUP);
        assert!(
            crds.get_opt(&name).await.unwrap().is_some(),
            "{name} was kept"
        );
    }
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(PROVIDER_NAMESPACE)
            .await
            .unwrap()
            .is_some()
    );
    // Upstream's providers are untouched.
    assert_eq!(management.inventory().await.unwrap().len(), 3);

    // With both flags, every provider still installed goes with its CRDs and namespace (the
    // namespace controller removes what they hold); this provider's, deleted before without them,
    // stay.
    management
        .clusterctl(&["delete", "--all", "--include-crd", "--include-namespace"])
        .await
        .unwrap();
    let namespaces = Api::<Namespace>::all(client.clone());
    eventually(
        "upstream's providers' namespaces are gone",
        &management,
        || async {
            let mut gone = true;
            for ns in [
                "capi-system",
                "capi-kubeadm-bootstrap-system",
                "capi-kubeadm-control-plane-system",
            ] {
                gone &= namespaces.get_opt(ns).await.ok().flatten().is_none();
            }
            gone
        },
    )
    .await;
    eventually("upstream's CRDs are removed", &management, || async {
        let mut gone = true;
        for crd in [
            "clusters.cluster.x-k8s.io",
            "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
        ] {
            gone &= crds.get_opt(crd).await.ok().flatten().is_none();
        }
        gone
    })
    .await;
    let kept = format!("inmemoryclusters.{}", provider_inmemory::api::GROUP);
    assert!(crds.get_opt(&kept).await.unwrap().is_some());
    assert!(
        namespaces
            .get_opt(PROVIDER_NAMESPACE)
            .await
            .unwrap()
            .is_some()
    );
    assert!(management.inventory().await.unwrap().is_empty());
}

/// The simulated cloud in its own process, so that instances outlive the managers.
struct CloudProcess {
    url: String,
    child: tokio::process::Child,
}

impl Drop for CloudProcess {
    /// SIGTERM first, so that the cloud stops the etcd members it started; SIGKILL (the child's
    /// `kill_on_drop`) if it has not exited within five seconds. Drop cannot await: it blocks
    /// its thread those few seconds at most, at the end of a test.
    #[allow(clippy::disallowed_methods)]
    fn drop(&mut self) {
        let Some(pid) = self.child.id() else {
            return;
        };
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl CloudProcess {
    /// The cloud alone: its instances never become nodes.
    async fn start() -> Self {
        Self::start_with(None).await
    }

    /// The cloud whose running instances register as `Node`s in the workload cluster of
    /// `workload` (its first control-plane instance uploads `kube-system/kubeadm-config`, as
    /// `kubeadm init` does), so that upstream's managers see the control plane initialized and
    /// every Machine's node; with the feature `real-etcd` (as CI runs), each control-plane
    /// instance also runs a real etcd member that the node's simulated kubelet forwards
    /// `etcd-<node>:2379` to, so that upstream's KubeadmControlPlane reaches etcd through the
    /// workload API server's `pods/portforward`, as on a real cloud, and the cluster becomes
    /// Available.
    async fn start_with(workload: Option<&ControlPlane>) -> Self {
        use tokio::io::AsyncBufReadExt;
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_inmemory-cloud"));
        command.args(["--listen", "127.0.0.1:0"]);
        if let Some(workload) = workload {
            command
                .arg("--workload-kubeconfig")
                .arg(workload.kubeconfig_path());
            if cfg!(feature = "real-etcd") {
                command
                    .arg("--etcd")
                    .arg(capi_testing::envtest::Assets::locate().unwrap().etcd);
            }
        }
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = lines.next_line().await.unwrap().unwrap();
        let url = first.strip_prefix("listening on ").unwrap().to_string();
        // Keep reading its output so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { url, child }
    }

    /// What the cloud holds and has done: every instance and load balancer, and its count of
    /// `create_instance` calls.
    async fn inspect(&self) -> provider_inmemory::cloud::Inspection {
        provider_inmemory::cloud::RemoteCloud::new(self.url.clone())
            .inspect()
            .await
            .unwrap()
    }

    /// Every instance of `namespace/cluster`: `id tag`, sorted.
    async fn instances(&self, namespace: &str, cluster: &str) -> Vec<String> {
        use provider_inmemory::cloud::Compute;
        let cloud = provider_inmemory::cloud::RemoteCloud::new(self.url.clone());
        let key = provider_inmemory::cloud::cluster_key(namespace, cluster);
        let mut found: Vec<String> = cloud
            .cluster_instances(&key)
            .await
            .unwrap()
            .into_iter()
            .map(|i| format!("{} {}", i.id, i.tag))
            .collect();
        found.sort();
        found
    }
}

/// `status.instanceState` of InMemoryMachine: the optional field release 0.1.0 of this test
/// does not have and 0.2.0 adds.
const NEW_FIELD: &str = "instanceState";

/// Release 0.1.0 as this test makes it: the workspace's, without [`NEW_FIELD`] in the
/// InMemoryMachine schema (so the API server prunes it while 0.1.0 is installed).
fn without_the_new_field(version: &str, release: &mut capi_provider::clusterctl::Release) {
    if version != "0.1.0" {
        return;
    }
    let crd = release
        .components
        .crds
        .iter_mut()
        .find(|c| c.spec.names.kind == "InMemoryMachine")
        .unwrap();
    for served in &mut crd.spec.versions {
        let schema = served
            .schema
            .as_mut()
            .unwrap()
            .open_api_v3_schema
            .as_mut()
            .unwrap();
        let status = schema
            .properties
            .as_mut()
            .unwrap()
            .get_mut("status")
            .unwrap();
        assert!(
            status
                .properties
                .as_mut()
                .unwrap()
                .remove(NEW_FIELD)
                .is_some()
        );
    }
}

/// The cluster's Machines.
const MACHINE: (&str, &str, &str) = ("cluster.x-k8s.io", "v1beta2", "Machine");
/// The cluster's InMemoryMachines.
const IN_MEMORY_MACHINE: (&str, &str, &str) = (
    provider_inmemory::api::GROUP,
    provider_inmemory::api::VERSION,
    "InMemoryMachine",
);

/// What an upgrade must not change of the cluster `name` (in namespace `name`): its Machines'
/// and InMemoryMachines' UIDs and provider IDs, and its instances in the cloud.
async fn cluster_identities(
    management: &Management,
    cloud: &CloudProcess,
    name: &str,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    (
        management
            .provider_ids(MACHINE, name, by_uid)
            .await
            .unwrap(),
        management
            .provider_ids(IN_MEMORY_MACHINE, name, by_uid)
            .await
            .unwrap(),
        cloud.instances(name, name).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_upgrade_apply_replaces_the_manager_and_leaves_a_running_cluster_untouched() {
    let cloud = CloudProcess::start().await;
    let management = InMemory::with(
        &["0.1.0", "0.2.0"],
        &[],
        Some(cloud.url.clone()),
        without_the_new_field,
    )
    .await;
    management.install(Some("0.1.0")).await;
    assert!(
        management
            .inventory()
            .await
            .unwrap()
            .contains(&"capi-inmemory-system/infrastructure-capirs-inmemory v0.1.0".to_string())
    );

    // A cluster whose control-plane machine has its instance.
    let name = "upgraded";
    management.create_cluster(name, "0").await;
    let group = provider_inmemory::api::GROUP;
    let machines = management.api(
        (group, provider_inmemory::api::VERSION, "InMemoryMachine"),
        Some(name),
    );
    eventually("an InMemoryMachine is provisioned", &management, || async {
        machines.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items
                .iter()
                .any(|m| m.data["status"]["initialization"]["provisioned"] == Value::Bool(true))
        })
    })
    .await;
    let core_machines = management.api(("cluster.x-k8s.io", "v1beta2", "Machine"), Some(name));
    eventually("the Machine has its provider ID", &management, || async {
        core_machines
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| {
                !l.items.is_empty()
                    && l.items
                        .iter()
                        .all(|m| m.data["spec"]["providerID"].is_string())
            })
    })
    .await;
    // 0.1.0's schema has no such field: the API server pruned what the manager wrote.
    let listed = machines.list(&ListParams::default()).await.unwrap();
    assert!(
        listed
            .items
            .iter()
            .all(|m| m.data["status"][NEW_FIELD].is_null())
    );

    let before = cluster_identities(&management, &cloud, name).await;
    assert_eq!(before.2.len(), 1, "one control-plane instance: {before:?}");

    let plan = management
        .clusterctl(&["upgrade", "plan"])
        .await
        .unwrap()
        .stdout;
    assert!(
        plan.lines()
            .any(|l| l.contains("infrastructure-capirs-inmemory") && l.contains("v0.2.0")),
        "{plan}"
    );
    management
        .clusterctl(&[
            "upgrade",
            "apply",
            "--infrastructure",
            &format!("{PROVIDER}:v0.2.0"),
            "--wait-providers",
        ])
        .await
        .unwrap();
    assert!(
        management
            .inventory()
            .await
            .unwrap()
            .contains(&"capi-inmemory-system/infrastructure-capirs-inmemory v0.2.0".to_string())
    );

    // The new manager runs the new image and adopts the cluster: it fills the field 0.2.0
    // added, on the same objects.
    eventually("the 0.2.0 manager runs", &management, || async {
        management
            .pods
            .starts()
            .iter()
            .any(|s| s.starts_with(PROVIDER_NAMESPACE) && s.ends_with(":v0.2.0"))
    })
    .await;
    eventually("the new field is filled", &management, || async {
        machines.list(&ListParams::default()).await.is_ok_and(|l| {
            !l.items.is_empty()
                && l.items
                    .iter()
                    .all(|m| m.data["status"][NEW_FIELD].is_string())
        })
    })
    .await;

    // Nothing was replaced: the same machines with the same provider IDs, the same instance.
    let after = cluster_identities(&management, &cloud, name).await;
    assert_eq!(before, after);
}

/// The provider's kinds a cluster is made of, `(group, version, kind)`.
const PROVIDER_KINDS: &[(&str, &str, &str)] = &[
    (
        provider_inmemory::api::GROUP,
        provider_inmemory::api::VERSION,
        "InMemoryCluster",
    ),
    IN_MEMORY_MACHINE,
    (
        provider_inmemory::api::GROUP,
        provider_inmemory::api::VERSION,
        "InMemoryMachineTemplate",
    ),
];

/// Every kind a cluster is made of.
fn cluster_kinds() -> Vec<(&'static str, &'static str, &'static str)> {
    [KUBEADM_CLUSTER_KINDS, PROVIDER_KINDS].concat()
}

/// The cloud's instances and load balancers by ID, and its `create_instance` calls so far.
async fn cloud_inventory(cloud: &CloudProcess) -> (Vec<String>, Vec<String>, u64) {
    let inspection = cloud.inspect().await;
    let mut instances: Vec<String> = inspection
        .instances
        .iter()
        .map(|i| format!("{} {}", i.id, i.tag))
        .collect();
    instances.sort();
    let mut load_balancers: Vec<String> = inspection
        .load_balancers
        .iter()
        .map(|lb| lb.id.clone())
        .collect();
    load_balancers.sort();
    (instances, load_balancers, inspection.create_calls)
}

/// What a move keeps of the machines of cluster `name` (in namespace `name`): their names and
/// provider IDs (UIDs are new on the target).
async fn moved_identities(management: &Management, name: &str) -> (Vec<String>, Vec<String>) {
    (
        management
            .provider_ids(MACHINE, name, by_name)
            .await
            .unwrap(),
        management
            .provider_ids(IN_MEMORY_MACHINE, name, by_name)
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_move_carries_a_running_cluster_to_another_management_cluster_untouched() {
    // One workload cluster whose nodes the cloud registers, one cloud, two management clusters
    // initialised alike, each running the provider's manager against that cloud.
    let workload = ControlPlane::start().await.unwrap();
    let cloud = CloudProcess::start_with(Some(&workload)).await;
    let source = InMemory::with(&["0.1.0"], &[], Some(cloud.url.clone()), |_, _| {}).await;
    let target = InMemory::with(&["0.1.0"], &[], Some(cloud.url.clone()), |_, _| {}).await;
    source.install(None).await;
    target.install(None).await;

    // A cluster of a control-plane machine and a worker, its kubeconfig the workload cluster's
    // (upstream's control plane keeps a kubeconfig Secret it finds).
    let name = "moved";
    source.create_namespace(name).await.unwrap();
    let kubeconfig: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{name}-kubeconfig"),
                     "labels": {"cluster.x-k8s.io/cluster-name": name}},
        "stringData": {"value": workload.kubeconfig_yaml()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(source.client.clone(), name)
        .create(&Default::default(), &kubeconfig)
        .await
        .unwrap();
    source.create_cluster(name, "1").await;
    eventually(
        "the control plane initialized and both machines with their nodes",
        &source,
        || source.ready_to_move(name, name, 2),
    )
    .await;
    // What clusterctl generated reaches Available as upstream judges it (etcd's health
    // included, which needs the real members).
    if cfg!(feature = "real-etcd") {
        eventually("the Cluster Available", &source, || {
            source.available(name, name)
        })
        .await;
    }

    let infrastructure = (
        provider_inmemory::api::GROUP,
        provider_inmemory::api::VERSION,
    );
    let objects = source.objects(name, &cluster_kinds()).await.unwrap();
    let machines = moved_identities(&source, name).await;
    let before = cloud_inventory(&cloud).await;
    assert_eq!(before.0.len(), 2, "one instance per machine: {before:?}");
    assert_eq!(before.1.len(), 1, "the cluster's load balancer: {before:?}");
    for kind in [
        "InMemoryCluster",
        "InMemoryMachine",
        "InMemoryMachineTemplate",
    ] {
        assert!(
            objects.iter().any(|o| o.starts_with(&format!("{kind} "))),
            "{kind} in {objects:?}"
        );
    }

    // clusterctl pauses the cluster on the source before it moves anything of it.
    let moved = source.move_cluster(&target, name, name).await.unwrap();
    assert!(
        moved.paused_on_source,
        "the Cluster was paused on the source before it was deleted there"
    );

    // The source holds nothing of the cluster; the target holds every object, resumed.
    assert_eq!(
        source.objects(name, &cluster_kinds()).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        target.objects(name, &cluster_kinds()).await.unwrap(),
        objects
    );
    let moved = moved.cluster;
    assert_ne!(moved.data["spec"]["paused"], Value::Bool(true), "{moved:?}");
    assert_eq!(moved_identities(&target, name).await, machines);

    // Status, which the move does not carry, is the target's controllers' again: the provider's
    // objects provisioned and ready, upstream's machines with their nodes.
    let in_memory =
        |kind: &'static str| target.api((infrastructure.0, infrastructure.1, kind), Some(name));
    let ready = |object: &DynamicObject| {
        object.data["status"]["initialization"]["provisioned"] == Value::Bool(true)
            && object.data["status"]["conditions"]
                .as_array()
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
    };
    eventually(
        "the target's provider reports its cluster and machines ready",
        &target,
        || async {
            let clusters = in_memory("InMemoryCluster")
                .list(&ListParams::default())
                .await;
            let machines = in_memory("InMemoryMachine")
                .list(&ListParams::default())
                .await;
            clusters.is_ok_and(|l| l.items.len() == 1 && l.items.iter().all(ready))
                && machines.is_ok_and(|l| l.items.len() == 2 && l.items.iter().all(ready))
        },
    )
    .await;
    eventually("the target's Machines have their nodes", &target, || {
        target.ready_to_move(name, name, 2)
    })
    .await;
    if cfg!(feature = "real-etcd") {
        eventually("the Cluster Available on the target", &target, || {
            target.available(name, name)
        })
        .await;
    }

    // No instance or load balancer was created, deleted or duplicated on the way.
    assert_eq!(cloud_inventory(&cloud).await, before);
}
