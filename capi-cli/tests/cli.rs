//! `capictl` as a user runs it, against a real API server: what it prints, what it creates, and
//! the errors it gives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use capi_testing::{TestEnv, manifest};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use serde_json::json;

fn capictl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capictl"))
        .args(args)
        .env_remove("KUBERNETES_VERSION")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "capictl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn generate_names_missing_variables_and_lists_them() {
    let missing = capictl(&["generate", "cluster", "demo"]);
    assert!(!missing.status.success());
    let error = String::from_utf8_lossy(&missing.stderr);
    assert!(error.contains("KUBERNETES_VERSION"), "{error}");

    let listing = stdout(&capictl(&[
        "generate",
        "cluster",
        "demo",
        "--flavor",
        "ignition",
        "--list-variables",
    ]));
    assert!(
        listing.contains("Required Variables:\n  - CLUSTER_NAME\n  - KUBERNETES_VERSION"),
        "{listing}"
    );
    assert!(listing.contains("WORKER_MACHINE_COUNT"));

    let unknown = capictl(&["generate", "cluster", "demo", "--infrastructure", "nimbus"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("available: inmemory"));
}

#[tokio::test]
async fn generated_clusters_apply_and_describe_get_and_delete_work_on_a_real_server() {
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(capi_control_plane::api::crds());
    crds.extend(provider_inmemory::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let kubeconfig = env
        .control_plane()
        .kubeconfig_path()
        .to_str()
        .unwrap()
        .to_string();

    let yaml = stdout(&capictl(&[
        "generate",
        "cluster",
        "demo",
        "--kubernetes-version",
        "v1.33.0",
        "--worker-machine-count",
        "4",
        "--target-namespace",
        &ns,
    ]));
    // The API server accepts every generated object as it is (schemas included, strictly
    // validated: no field of the template is unknown to the CRDs).
    let objects = manifest::parse(&yaml).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("demo.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let applied = stdout(&capictl(&[
        "--kubeconfig",
        &kubeconfig,
        "apply",
        "-f",
        file.to_str().unwrap(),
    ]));
    assert_eq!(applied.lines().count(), objects.len(), "{applied}");
    assert!(
        applied.contains(&format!("Cluster {ns}/demo applied")),
        "{applied}"
    );
    assert!(yaml.contains("replicas: 4"));

    let tree = stdout(&capictl(&[
        "--kubeconfig",
        &kubeconfig,
        "describe",
        "cluster",
        "demo",
        "-n",
        &ns,
    ]));
    for line in [
        "Cluster/demo",
        "├─ClusterInfrastructure - InMemoryCluster/demo",
        "├─ControlPlane - KubeadmControlPlane/demo-control-plane",
        "└─Workers",
        "  └─MachineDeployment/demo-md-0",
    ] {
        assert!(tree.contains(line), "{line:?} missing in\n{tree}");
    }
    assert!(!tree.contains('\x1b'), "NO_COLOR is respected");

    let missing = capictl(&[
        "--kubeconfig",
        &kubeconfig,
        "get",
        "kubeconfig",
        "demo",
        "-n",
        &ns,
    ]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("demo-kubeconfig"));
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "demo-kubeconfig"}, "stringData": {"value": "apiVersion: v1\nkind: Config\n"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client(), &ns)
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    let printed = stdout(&capictl(&[
        "--kubeconfig",
        &kubeconfig,
        "get",
        "kubeconfig",
        "demo",
        "-n",
        &ns,
    ]));
    assert_eq!(printed, "apiVersion: v1\nkind: Config\n");

    // No controllers run here: the Cluster has no finalizer and goes at once.
    let deleted = stdout(&capictl(&[
        "--kubeconfig",
        &kubeconfig,
        "delete",
        "cluster",
        "demo",
        "-n",
        &ns,
        "--wait",
    ]));
    assert!(deleted.contains("are gone"), "{deleted}");
    let again = capictl(&[
        "--kubeconfig",
        &kubeconfig,
        "delete",
        "cluster",
        "demo",
        "-n",
        &ns,
    ]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("does not exist"));
}

#[tokio::test]
async fn init_installs_crds_rbac_and_the_manager_idempotently() {
    let env = TestEnv::start().await.unwrap();
    let kubeconfig = env
        .control_plane()
        .kubeconfig_path()
        .to_str()
        .unwrap()
        .to_string();

    let yaml = stdout(&capictl(&["init", "--dry-run"]));
    for kind in [
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
    ] {
        assert!(yaml.contains(&format!("kind: {kind}")), "{kind} missing");
    }

    let first = stdout(&capictl(&["--kubeconfig", &kubeconfig, "init"]));
    assert!(
        first.contains("applied CustomResourceDefinition machines.cluster.x-k8s.io"),
        "{first}"
    );
    assert!(
        first.contains("applied Deployment capi-inmemory-system/capi-inmemory-manager"),
        "{first}"
    );
    let second = stdout(&capictl(&["--kubeconfig", &kubeconfig, "init"]));
    assert!(
        second.contains("initialised"),
        "a second run succeeds: {second}"
    );

    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(env.client());
    let role = roles.get("capi-inmemory-system-standalone").await.unwrap();
    assert!(!role.rules.unwrap_or_default().is_empty());
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(env.client());
    let binding = bindings.get("capi-inmemory-system-manager").await.unwrap();
    assert_eq!(binding.role_ref.name, "capi-inmemory-system-standalone");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client(), "capi-inmemory-system");
    let deployment = deployments.get("capi-inmemory-manager").await.unwrap();
    let args = deployment.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(
        args.contains(&"--controllers=standalone".to_string()),
        "{args:?}"
    );
    // The CRDs serve: a Cluster can be created right away.
    let cluster: capi_core::api::Cluster = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "x"},
        "spec": {"paused": true}
    }))
    .unwrap();
    Api::<capi_core::api::Cluster>::namespaced(env.client(), "default")
        .create(&Default::default(), &cluster)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_openstack_cluster_from_a_clouds_yaml_applies_to_a_real_server() {
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(capi_control_plane::api::crds());
    crds.extend(provider_openstack::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(
        &clouds,
        "clouds:\n  prod:\n    auth: {auth_url: https://keystone:5000/v3, username: u, password: s3cret, project_name: p}\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_capictl"))
        .args([
            "generate",
            "cluster",
            "os",
            "--infrastructure",
            "openstack",
            "--flavor",
            "flatcar",
            "--clouds-yaml",
            clouds.to_str().unwrap(),
            "--cloud",
            "prod",
            "--kubernetes-version",
            "v1.33.0",
            "--target-namespace",
            &ns,
        ])
        .env("OPENSTACK_CONTROL_PLANE_MACHINE_FLAVOR", "m1.medium")
        .env("OPENSTACK_NODE_MACHINE_FLAVOR", "m1.small")
        .env("OPENSTACK_IMAGE_NAME", "flatcar-stable")
        .env("OPENSTACK_SSH_KEY_NAME", "default")
        .output()
        .unwrap();
    let yaml = stdout(&output);
    let objects = manifest::parse(&yaml).unwrap();
    manifest::create_all(&env.client(), &ns, &objects)
        .await
        .unwrap();
    let secret = Api::<Secret>::namespaced(env.client(), &ns)
        .get("os-cloud-config")
        .await
        .unwrap();
    let stored = String::from_utf8(secret.data.unwrap()["clouds.yaml"].0.clone()).unwrap();
    assert!(
        stored.contains("auth_url") && stored.contains("prod"),
        "{stored}"
    );

    let unknown = Command::new(env!("CARGO_BIN_EXE_capictl"))
        .args([
            "generate",
            "cluster",
            "os",
            "--infrastructure",
            "openstack",
            "--clouds-yaml",
            clouds.to_str().unwrap(),
            "--cloud",
            "staging",
        ])
        .output()
        .unwrap();
    let error = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        error.contains("no cloud \"staging\"; it has: prod"),
        "{error}"
    );
    assert!(!error.contains("s3cret"));
}

/// Strict field validation through the CLI: a misspelled field is refused, the error names it,
/// and nothing of the object is stored (the API server would otherwise drop the field silently).
#[tokio::test]
async fn apply_refuses_a_misspelled_field_and_names_it() {
    let env = TestEnv::start_with_crds(&capi_core::crd::core())
        .await
        .unwrap();
    let ns = env.namespace().await.unwrap();
    let kubeconfig = env
        .control_plane()
        .kubeconfig_path()
        .to_str()
        .unwrap()
        .to_string();
    let manifest = format!(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  name: typo\n  namespace: {ns}\n\
         spec:\n  clusterNetwork:\n    pods:\n      cidrBlocks: [192.168.0.0/16]\n    serviceDomian: cluster.local\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typo.yaml");
    std::fs::write(&file, &manifest).unwrap();
    let refused = capictl(&[
        "--kubeconfig",
        &kubeconfig,
        "apply",
        "-f",
        file.to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    let error = String::from_utf8_lossy(&refused.stderr);
    assert!(error.contains(&format!("Cluster {ns}/typo")), "{error}");
    assert!(
        error.contains(".spec.clusterNetwork.serviceDomian") && error.contains("not declared"),
        "the error names the misspelled field: {error}"
    );
    let clusters: Api<capi_core::api::Cluster> = Api::namespaced(env.client(), &ns);
    assert!(
        clusters.get_opt("typo").await.unwrap().is_none(),
        "nothing stored"
    );

    // Spelled right, the same manifest applies.
    std::fs::write(&file, manifest.replace("serviceDomian", "serviceDomain")).unwrap();
    stdout(&capictl(&[
        "--kubeconfig",
        &kubeconfig,
        "apply",
        "-f",
        file.to_str().unwrap(),
    ]));
    let stored = clusters.get("typo").await.unwrap();
    let network = stored.spec.cluster_network.unwrap();
    assert_eq!(network.service_domain.as_deref(), Some("cluster.local"));

    // An object naming another namespace than `-n` is refused, as kubectl does.
    let elsewhere = capictl(&[
        "--kubeconfig",
        &kubeconfig,
        "apply",
        "-f",
        file.to_str().unwrap(),
        "-n",
        "elsewhere",
    ]);
    assert!(!elsewhere.status.success());
    let error = String::from_utf8_lossy(&elsewhere.stderr);
    assert!(
        error.contains(&format!("names namespace \"{ns}\" but \"elsewhere\"")),
        "{error}"
    );
}

/// On a management cluster whose Cluster API CRDs another installation owns (here: the same CRD
/// created by "clusterctl" without this workspace's label, as upstream's are), `init` leaves them,
/// says whose they are, installs the provider alone and runs no core controllers; `--force`
/// replaces them.
#[tokio::test]
async fn init_leaves_another_installations_crds_unless_forced() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let env = TestEnv::start_with_crds(&[]).await.unwrap();
    let kubeconfig = env
        .control_plane()
        .kubeconfig_path()
        .to_str()
        .unwrap()
        .to_string();
    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    let mut foreign = capi_core::crd::core()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some("clusters.cluster.x-k8s.io"))
        .unwrap();
    let labels = foreign.metadata.labels.get_or_insert_with(Default::default);
    labels.remove(capi_core::labels::INSTALLATION);
    labels.insert("clusterctl.cluster.x-k8s.io".into(), String::new());
    crds.create(
        &kube::api::PostParams {
            field_manager: Some("clusterctl".into()),
            ..Default::default()
        },
        &foreign,
    )
    .await
    .unwrap();

    let out = stdout(&capictl(&["--kubeconfig", &kubeconfig, "init"]));
    assert!(
        out.contains("clusters.cluster.x-k8s.io (owned by clusterctl; provider cluster-api; field managers clusterctl)"),
        "{out}"
    );
    assert!(
        out.contains(
            "applied CustomResourceDefinition inmemorymachines.infrastructure.capi-rs.dev"
        ),
        "{out}"
    );
    assert!(
        !out.contains("applied CustomResourceDefinition clusters.cluster.x-k8s.io"),
        "{out}"
    );
    let kept = crds.get("clusters.cluster.x-k8s.io").await.unwrap();
    assert!(
        !kept.labels().contains_key(capi_core::labels::INSTALLATION),
        "the other installation's CRD was replaced"
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client(), "capi-inmemory-system");
    let args = deployments
        .get("capi-inmemory-manager")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(
        args.iter().any(|a| a == "--controllers=provider"),
        "{args:?}"
    );

    let forced = stdout(&capictl(&["--kubeconfig", &kubeconfig, "init", "--force"]));
    assert!(
        forced.contains("replacing Cluster API CRDs another installation owns"),
        "{forced}"
    );
    let replaced = crds.get("clusters.cluster.x-k8s.io").await.unwrap();
    assert_eq!(
        replaced
            .labels()
            .get(capi_core::labels::INSTALLATION)
            .map(String::as_str),
        Some("capi-rs")
    );
    // The manager now runs every controller, with the rules they need: its binding, whose
    // roleRef cannot change, was replaced.
    let binding = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(env.client())
        .get("capi-inmemory-system-manager")
        .await
        .unwrap();
    assert_eq!(binding.role_ref.name, "capi-inmemory-system-standalone");
}

/// The AWS templates, rendered from CAPA's variables, are accepted by a real API server with
/// strict field validation (every field they set exists in the CRDs), and `init` installs the AWS
/// provider's CRDs and manager.
#[tokio::test]
async fn aws_clusters_from_capas_variables_apply_to_a_real_server() {
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(capi_control_plane::api::crds());
    crds.extend(provider_aws::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    for (name, flavor) in [("aws-a", None), ("aws-b", Some("static-credentials"))] {
        let ns = env.namespace().await.unwrap();
        let mut args = vec![
            "generate",
            "cluster",
            name,
            "--infrastructure",
            "aws",
            "--kubernetes-version",
            "v1.33.1",
            "--target-namespace",
            &ns,
        ];
        if let Some(flavor) = flavor {
            args.extend(["--flavor", flavor]);
        }
        let output = Command::new(env!("CARGO_BIN_EXE_capictl"))
            .args(&args)
            .env("AWS_REGION", "eu-west-1")
            .env("AWS_SSH_KEY_NAME", "default")
            .env("AWS_CONTROL_PLANE_MACHINE_TYPE", "t3.large")
            .env("AWS_NODE_MACHINE_TYPE", "t3.medium")
            .env("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
            .env(
                "AWS_SECRET_ACCESS_KEY",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            )
            .output()
            .unwrap();
        let yaml = stdout(&output);
        let objects = manifest::parse(&yaml).unwrap();
        manifest::create_all(&env.client(), &ns, &objects)
            .await
            .unwrap();
        let cluster = Api::<provider_aws::api::AWSCluster>::namespaced(env.client(), &ns)
            .get(name)
            .await
            .unwrap();
        assert_eq!(cluster.spec.region, "eu-west-1");
        let template = Api::<provider_aws::api::AWSMachineTemplate>::namespaced(env.client(), &ns)
            .get(&format!("{name}-md-0"))
            .await
            .unwrap();
        assert_eq!(template.spec.template.spec.instance_type, "t3.medium");
        let identity = cluster.spec.identity_ref.unwrap();
        match flavor {
            None => {
                assert_eq!(
                    identity.kind,
                    provider_aws::api::AwsIdentityKind::ControllerIdentity
                );
                assert!(!yaml.contains("wJalr"), "no credentials unless asked for");
            }
            Some(_) => {
                assert_eq!(identity.kind, provider_aws::api::AwsIdentityKind::Secret);
                let secret = Api::<Secret>::namespaced(env.client(), &ns)
                    .get(&identity.name)
                    .await
                    .unwrap();
                assert!(secret.data.unwrap().contains_key("SecretAccessKey"));
            }
        }
    }

    let init = stdout(&capictl(&["init", "--infrastructure", "aws", "--dry-run"]));
    assert!(
        init.contains("name: awsclusters.infrastructure.capi-rs.dev"),
        "CRDs"
    );
    assert!(init.contains("name: capi-aws-manager"), "the manager");
    assert!(init.contains("image: ghcr.io/capi-rs/aws-manager:v0.1.0"));
}

/// The Azure templates, rendered from CAPZ's variables, are accepted by a real API server with
/// strict field validation, the credentials only in the flavor that asks for them, and `init`
/// installs the Azure provider's CRDs and manager.
#[tokio::test]
async fn azure_clusters_from_capzs_variables_apply_to_a_real_server() {
    let mut crds = capi_core::crd::core();
    crds.extend(capi_bootstrap::api::crds());
    crds.extend(capi_control_plane::api::crds());
    crds.extend(provider_azure::api::crds());
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    const SECRET: &str = "Qx8Q~abcDEF1234567890ghijKLMNOPqrstuvWXYZ";
    for (name, flavor) in [("azure-a", None), ("azure-b", Some("static-credentials"))] {
        let ns = env.namespace().await.unwrap();
        let mut args = vec![
            "generate",
            "cluster",
            name,
            "--infrastructure",
            "azure",
            "--kubernetes-version",
            "v1.33.1",
            "--target-namespace",
            &ns,
        ];
        if let Some(flavor) = flavor {
            args.extend(["--flavor", flavor]);
        }
        let output = Command::new(env!("CARGO_BIN_EXE_capictl"))
            .args(&args)
            .env(
                "AZURE_SUBSCRIPTION_ID",
                "7b5e7a4c-1d2e-4f3a-9b8c-0d1e2f3a4b5c",
            )
            .env("AZURE_LOCATION", "westeurope")
            .env("AZURE_CONTROL_PLANE_MACHINE_TYPE", "Standard_D2s_v3")
            .env("AZURE_NODE_MACHINE_TYPE", "Standard_D4s_v3")
            .env("AZURE_CLUSTER_IDENTITY_SECRET_NAME", "azure-credentials")
            .env("AZURE_TENANT_ID", "72f988bf-86f1-41af-91ab-2d7cd011db47")
            .env("AZURE_CLIENT_ID", "0b3c6e4a-1f2d-4c5b-8a9e-7d6c5b4a3f2e")
            .env("AZURE_CLIENT_SECRET", SECRET)
            .output()
            .unwrap();
        let yaml = stdout(&output);
        let objects = manifest::parse(&yaml).unwrap();
        manifest::create_all(&env.client(), &ns, &objects)
            .await
            .unwrap();
        let cluster = Api::<provider_azure::api::AzureCluster>::namespaced(env.client(), &ns)
            .get(name)
            .await
            .unwrap();
        assert_eq!(cluster.spec.location, "westeurope");
        assert_eq!(cluster.spec.resource_group.as_deref(), Some(name));
        let template =
            Api::<provider_azure::api::AzureMachineTemplate>::namespaced(env.client(), &ns)
                .get(&format!("{name}-md-0"))
                .await
                .unwrap();
        assert_eq!(template.spec.template.spec.vm_size, "Standard_D4s_v3");
        let identity = cluster.spec.identity_ref.unwrap();
        match flavor {
            None => {
                assert_eq!(identity.name, "azure-credentials");
                assert!(!yaml.contains(SECRET), "no credentials unless asked for");
            }
            Some(_) => {
                let secret = Api::<Secret>::namespaced(env.client(), &ns)
                    .get(&identity.name)
                    .await
                    .unwrap();
                assert!(secret.data.unwrap().contains_key("clientSecret"));
            }
        }
    }

    let init = stdout(&capictl(&[
        "init",
        "--infrastructure",
        "azure",
        "--dry-run",
    ]));
    assert!(
        init.contains("name: azureclusters.infrastructure.capi-rs.dev"),
        "CRDs"
    );
    assert!(init.contains("name: capi-azure-manager"), "the manager");
    assert!(init.contains("image: ghcr.io/capi-rs/azure-manager:v0.1.0"));
}
