//! Properties of the rendering model: whatever the content, both formats carry it byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use capi_bootstrap::api::{File, KubeadmConfigSpec};
use capi_bootstrap::render::{
    self, ClusterFacts, KubernetesVersion, RenderError, RenderInput, Role,
};
use proptest::prelude::*;

fn render_file(content: &str, permissions: &str) -> Result<render::BootstrapPlan, RenderError> {
    let spec = KubeadmConfigSpec {
        files: vec![File {
            path: "/etc/test".into(),
            permissions: Some(permissions.into()),
            content: Some(content.into()),
            ..File::default()
        }],
        ..KubeadmConfigSpec::default()
    };
    render::plan(&RenderInput {
        spec: &spec,
        role: Role::Init {
            token: "abcdef.0123456789abcdef".into(),
        },
        version: KubernetesVersion::parse("v1.31.0").unwrap(),
        cluster: ClusterFacts::new("demo", "10.0.0.1:6443"),
        resolved_files: vec![],
        extra_files: vec![],
    })
}

fn cloud_config_content(cloud_config: &str) -> Vec<u8> {
    let document: serde_json::Value =
        serde_saphyr::from_str(cloud_config.strip_prefix("#cloud-config\n").unwrap()).unwrap();
    let file = &document["write_files"][0];
    let content = file["content"].as_str().unwrap_or_default();
    match file["encoding"].as_str() {
        Some("b64") => base64::engine::general_purpose::STANDARD
            .decode(content)
            .unwrap(),
        _ => content.as_bytes().to_vec(),
    }
}

fn ignition_content(ignition: &str) -> Vec<u8> {
    let document: serde_json::Value = serde_json::from_str(ignition).unwrap();
    let source = document["storage"]["files"][0]["contents"]["source"]
        .as_str()
        .unwrap();
    base64::engine::general_purpose::STANDARD
        .decode(source.strip_prefix("data:;base64,").unwrap())
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_content_survives_both_formats(content in "(\\PC|[\n\t\r ])*", mode in 0u32..0o1000) {
        let plan = render_file(&content, &format!("{mode:04o}")).unwrap();
        prop_assert_eq!(plan.files[0].mode, mode);
        let cloud_config = render::cloud_init::render(&plan);
        prop_assert_eq!(cloud_config_content(&cloud_config), content.as_bytes().to_vec(), "cloud-config:\n{}", cloud_config);
        let ignition = render::ignition::render(&plan).unwrap();
        prop_assert_eq!(ignition_content(&ignition), content.as_bytes().to_vec());
    }

    #[test]
    fn yaml_1_1_lookalikes_stay_strings(word in prop_oneof![Just("yes"), Just("no"), Just("on"), Just("off"), Just("0640"), Just("1e3"), Just("~"), Just("null")]) {
        let spec = KubeadmConfigSpec { pre_kubeadm_commands: vec![word.to_string()], ..KubeadmConfigSpec::default() };
        let plan = render::plan(&RenderInput {
            spec: &spec,
            role: Role::Init { token: "abcdef.0123456789abcdef".into() },
            version: KubernetesVersion::parse("v1.30.0").unwrap(),
            cluster: ClusterFacts::new("demo", "10.0.0.1:6443"),
            resolved_files: vec![],
            extra_files: vec![],
        }).unwrap();
        let cloud_config = render::cloud_init::render(&plan);
        prop_assert!(cloud_config.contains(&format!("  - \"{word}\"\n")), "{}", cloud_config);
    }
}

#[test]
fn bad_permissions_and_encodings_are_errors_a_user_can_fix() {
    assert!(matches!(
        render_file("x", "0999"),
        Err(RenderError::InvalidPermissions { .. })
    ));
    let spec = KubeadmConfigSpec {
        files: vec![File {
            path: "/etc/b".into(),
            encoding: Some(capi_bootstrap::api::Encoding::Base64),
            content: Some("not base64!".into()),
            ..File::default()
        }],
        ..KubeadmConfigSpec::default()
    };
    let input = RenderInput {
        spec: &spec,
        role: Role::Init {
            token: "abcdef.0123456789abcdef".into(),
        },
        version: KubernetesVersion::parse("v1.30.0").unwrap(),
        cluster: ClusterFacts::new("demo", "10.0.0.1:6443"),
        resolved_files: vec![],
        extra_files: vec![],
    };
    let error = render::plan(&input).unwrap_err();
    assert_eq!(
        error.to_string(),
        "file /etc/b: content is not valid base64"
    );
}

#[test]
fn kubeadm_api_version_follows_the_kubernetes_version() {
    use render::kubeadm::api_version;
    assert_eq!(
        api_version(KubernetesVersion::parse("v1.30.9").unwrap()),
        "kubeadm.k8s.io/v1beta3"
    );
    assert_eq!(
        api_version(KubernetesVersion::parse("v1.31.0").unwrap()),
        "kubeadm.k8s.io/v1beta4"
    );
    assert_eq!(
        api_version(KubernetesVersion::parse("1.32.1-rc.0").unwrap()),
        "kubeadm.k8s.io/v1beta4"
    );
    assert!(KubernetesVersion::parse("latest").is_err());
    assert!(KubernetesVersion::parse("v1.30").is_err());
}

fn plan_for(
    spec: &KubeadmConfigSpec,
    role: Role,
    resolved: Vec<((String, String), Vec<u8>)>,
) -> Result<render::BootstrapPlan, RenderError> {
    render::plan(&RenderInput {
        spec,
        role,
        version: KubernetesVersion::parse("v1.31.0").unwrap(),
        cluster: ClusterFacts::new("demo", "10.0.0.1:6443"),
        resolved_files: resolved,
        extra_files: vec![],
    })
}

fn join() -> Role {
    Role::JoinWorker {
        token: "abcdef.0123456789abcdef".into(),
        ca_cert_hashes: vec!["sha256:00".into()],
    }
}

fn kubeadm_document(plan: &render::BootstrapPlan) -> serde_json::Value {
    let file = plan
        .files
        .iter()
        .find(|f| f.path == render::KUBEADM_JOIN_CONFIG || f.path == render::KUBEADM_INIT_CONFIG)
        .unwrap();
    let text = String::from_utf8(file.content.clone()).unwrap();
    serde_json::from_str(
        text.trim_start_matches("---\n")
            .split("\n---\n")
            .next()
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn a_password_hash_from_a_secret_reaches_the_user_and_inactive_users_are_refused() {
    use capi_bootstrap::api::{PasswdSource, SecretFileSource, User};
    let spec = KubeadmConfigSpec {
        users: vec![User {
            name: "ops".into(),
            passwd_from: Some(PasswdSource {
                secret: SecretFileSource {
                    name: "ops-password".into(),
                    key: "hash".into(),
                },
            }),
            ..User::default()
        }],
        ..KubeadmConfigSpec::default()
    };
    let missing = plan_for(&spec, join(), vec![]).unwrap_err();
    assert!(
        matches!(missing, RenderError::UnresolvedContent { .. }),
        "{missing}"
    );
    let resolved = vec![(
        ("ops-password".to_string(), "hash".to_string()),
        b"$6$rounds=4096$salt$hash\n".to_vec(),
    )];
    let plan = plan_for(&spec, join(), resolved).unwrap();
    assert_eq!(
        plan.users[0].passwd.as_deref(),
        Some("$6$rounds=4096$salt$hash")
    );
    let cloud_config = render::cloud_init::render(&plan);
    assert!(
        cloud_config.contains("passwd: \"$6$rounds=4096$salt$hash\""),
        "{cloud_config}"
    );
    assert!(
        !format!("{:?}", plan.users[0]).contains("salt"),
        "a password hash never reaches Debug output"
    );

    let mut inactive = spec.clone();
    inactive.users[0].passwd_from = None;
    inactive.users[0].inactive = Some(true);
    let error = plan_for(&inactive, join(), vec![]).unwrap_err().to_string();
    assert!(
        error.starts_with("users[0].inactive is not supported"),
        "{error}"
    );
}

#[test]
fn what_the_user_set_for_discovery_and_taints_wins() {
    use capi_bootstrap::api::{
        BootstrapTokenDiscovery, Discovery, JoinConfiguration, NodeRegistration,
    };
    let spec = KubeadmConfigSpec {
        join_configuration: Some(Box::new(JoinConfiguration {
            node_registration: Some(NodeRegistration {
                taints: Some(Vec::new()),
                ..NodeRegistration::default()
            }),
            discovery: Some(Discovery {
                bootstrap_token: Some(BootstrapTokenDiscovery {
                    api_server_endpoint: Some("lb.demo.example:6443".into()),
                    ..BootstrapTokenDiscovery::default()
                }),
                tls_bootstrap_token: Some("tlsboo.0123456789abcdef".into()),
                ..Discovery::default()
            }),
            ..JoinConfiguration::default()
        })),
        ..KubeadmConfigSpec::default()
    };
    let document = kubeadm_document(&plan_for(&spec, join(), vec![]).unwrap());
    let discovery = &document["discovery"];
    assert_eq!(
        discovery["bootstrapToken"]["apiServerEndpoint"],
        "lb.demo.example:6443"
    );
    assert_eq!(
        discovery["bootstrapToken"]["token"],
        "abcdef.0123456789abcdef"
    );
    assert_eq!(discovery["bootstrapToken"]["caCertHashes"][0], "sha256:00");
    assert_eq!(discovery["tlsBootstrapToken"], "tlsboo.0123456789abcdef");
    assert_eq!(
        document["nodeRegistration"]["taints"],
        serde_json::json!([]),
        "an empty list of taints means none, not kubeadm's default"
    );
}
