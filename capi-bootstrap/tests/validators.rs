//! Every rendered variant against the real validators (`cloud-init schema`, `ignition-validate`,
//! and `kubeadm config validate` for the kubeadm documents inside them) and against its checked-in
//! golden file. `UPDATE_GOLDEN=1 cargo test -p capi-bootstrap` rewrites
//! the golden files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use capi_bootstrap::api::{
    Arg, BootstrapToken, ClusterConfiguration, ControlPlaneComponent, DiskSetup,
    EncryptionAlgorithm, EnvVar, Etcd, ExternalEtcd, File, Filesystem, HostPathMount,
    InitConfiguration, JoinConfiguration, JoinControlPlane, KubeadmConfigSpec, LocalApiEndpoint,
    LocalEtcd, NodeRegistration, Ntp, Partition, PartitionSpec, PartitionTableType, Patches,
    PullPolicy, SecretFileSource, Timeouts, User,
};
use capi_bootstrap::render::{self, ClusterFacts, KubernetesVersion, PlanFile, RenderInput, Role};

const TOKEN: &str = "abcdef.0123456789abcdef";
const CA_HASH: &str = "sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";

/// A config using every supported feature: files (inline, from a Secret, base64), users, NTP,
/// commands, extra args.
fn full_spec() -> KubeadmConfigSpec {
    let kubelet = NodeRegistration {
        name: Some("node-0".into()),
        kubelet_extra_args: vec![Arg {
            name: "cloud-provider".into(),
            value: "external".into(),
        }],
        taints: Some(Vec::new()),
        image_pull_policy: Some(PullPolicy::IfNotPresent),
        ..NodeRegistration::default()
    };
    KubeadmConfigSpec {
        cluster_configuration: Some(Box::new(ClusterConfiguration {
            api_server: Some(capi_bootstrap::api::ApiServer {
                extra_args: vec![Arg {
                    name: "cloud-config".into(),
                    value: "/etc/kubernetes/cloud.conf".into(),
                }],
                extra_volumes: vec![HostPathMount {
                    name: "cloud-config".into(),
                    host_path: "/etc/kubernetes/cloud.conf".into(),
                    mount_path: "/etc/kubernetes/cloud.conf".into(),
                    read_only: Some(true),
                    path_type: Some("File".into()),
                }],
                extra_envs: vec![EnvVar {
                    name: "HTTPS_PROXY".into(),
                    value: Some("http://proxy.demo.example:3128".into()),
                    value_from: None,
                }],
                cert_sans: vec!["api.demo.example".into()],
            }),
            controller_manager: Some(ControlPlaneComponent {
                extra_args: vec![Arg {
                    name: "cloud-provider".into(),
                    value: "external".into(),
                }],
                ..ControlPlaneComponent::default()
            }),
            etcd: Some(Etcd {
                local: Some(LocalEtcd {
                    server_cert_sans: vec!["etcd.demo.example".into()],
                    peer_cert_sans: vec!["etcd-peer.demo.example".into()],
                    ..LocalEtcd::default()
                }),
                external: None,
            }),
            certificate_validity_period_days: Some(365),
            ca_certificate_validity_period_days: Some(3650),
            encryption_algorithm: Some(EncryptionAlgorithm::EcdsaP256),
            ..ClusterConfiguration::default()
        })),
        init_configuration: Some(Box::new(InitConfiguration {
            node_registration: Some(kubelet.clone()),
            bootstrap_tokens: vec![BootstrapToken {
                token: "ops001.0123456789abcdef".into(),
                description: Some("for the operators' own joins".into()),
                ttl_seconds: Some(3600),
                usages: vec!["authentication".into(), "signing".into()],
                groups: vec!["system:bootstrappers:kubeadm:default-node-token".into()],
                ..BootstrapToken::default()
            }],
            patches: Some(Patches {
                directory: Some("/etc/kubernetes/patches".into()),
            }),
            timeouts: Some(Timeouts {
                control_plane_component_health_check_seconds: Some(300),
                ..Timeouts::default()
            }),
            ..Default::default()
        })),
        join_configuration: Some(Box::new(JoinConfiguration {
            node_registration: Some(kubelet),
            ca_cert_path: Some("/etc/kubernetes/pki/ca.crt".into()),
            timeouts: Some(Timeouts {
                discovery_seconds: Some(600),
                ..Timeouts::default()
            }),
            control_plane: Some(JoinControlPlane {
                local_api_endpoint: Some(LocalApiEndpoint {
                    advertise_address: None,
                    bind_port: Some(6443),
                }),
            }),
            ..Default::default()
        })),
        files: vec![
            File {
                path: "/etc/kubernetes/cloud.conf".into(),
                owner: Some("root:root".into()),
                permissions: Some("0600".into()),
                content: Some(
                    "[Global]\nauth-url=https://keystone.example:5000/v3\nyes = on\n".into(),
                ),
                ..File::default()
            },
            File {
                path: "/etc/certs/cacert".into(),
                permissions: Some("0644".into()),
                content_from: Some(capi_bootstrap::api::FileSource {
                    secret: SecretFileSource {
                        name: "cloud-ca".into(),
                        key: "ca.crt".into(),
                    },
                }),
                ..File::default()
            },
            File {
                path: "/etc/sysctl.d/99-kubernetes.conf".into(),
                encoding: Some(capi_bootstrap::api::Encoding::Base64),
                content: Some("bmV0LmlwdjQuaXBfZm9yd2FyZCA9IDEK".into()),
                ..File::default()
            },
        ],
        users: vec![User {
            name: "capi".into(),
            groups: Some("wheel, docker".into()),
            shell: Some("/bin/bash".into()),
            sudo: Some("ALL=(ALL) NOPASSWD:ALL".into()),
            ssh_authorized_keys: vec![
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHvq1 capi@example".into(),
            ],
            ..User::default()
        }],
        ntp: Some(Ntp {
            servers: vec!["0.pool.ntp.org".into(), "1.pool.ntp.org".into()],
            enabled: Some(true),
        }),
        pre_kubeadm_commands: vec!["swapoff -a".into(), "echo 'yes' > /tmp/quoted".into()],
        post_kubeadm_commands: vec!["echo bootstrap done".into()],
        boot_commands: vec!["echo early boot > /run/early".into()],
        disk_setup: Some(DiskSetup {
            partitions: vec![Partition {
                device: "/dev/vdb".into(),
                disk_layout: vec![
                    PartitionSpec {
                        percentage: 70,
                        partition_type: Some("Linux".into()),
                    },
                    PartitionSpec {
                        percentage: 30,
                        partition_type: Some("LinuxSwap".into()),
                    },
                ],
                table_type: Some(PartitionTableType::Gpt),
                overwrite: Some(false),
                ..Partition::default()
            }],
            filesystems: vec![Filesystem {
                device: "/dev/vdb".into(),
                filesystem: "ext4".into(),
                label: Some("etcd_disk".into()),
                partition: Some("auto".into()),
                extra_opts: vec!["-E".into(), "lazy_itable_init=1".into()],
                ..Filesystem::default()
            }],
        }),
        mounts: vec![vec!["LABEL=etcd_disk".into(), "/var/lib/etcddisk".into()]],
        verbosity: Some(5),
        ..KubeadmConfigSpec::default()
    }
}

/// `full_spec` without what only cloud-config carries (boot commands, disks, mounts).
fn ignition_spec() -> KubeadmConfigSpec {
    KubeadmConfigSpec {
        boot_commands: Vec::new(),
        disk_setup: None,
        mounts: Vec::new(),
        ..full_spec()
    }
}

fn input<'a>(spec: &'a KubeadmConfigSpec, role: Role, version: &str) -> RenderInput<'a> {
    RenderInput {
        spec,
        role,
        version: KubernetesVersion::parse(version).unwrap(),
        cluster: ClusterFacts::new("demo", "10.0.0.10:6443"),
        resolved_files: vec![(
            ("cloud-ca".into(), "ca.crt".into()),
            b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec(),
        )],
        extra_files: vec![PlanFile::new(
            "/etc/provider/extra.conf",
            0o644,
            "provided by the infrastructure provider\n",
        )],
    }
}

fn roles() -> Vec<(&'static str, Role)> {
    vec![
        (
            "init",
            Role::Init {
                token: TOKEN.into(),
            },
        ),
        (
            "join-control-plane",
            Role::JoinControlPlane {
                token: TOKEN.into(),
                ca_cert_hashes: vec![CA_HASH.into()],
            },
        ),
        (
            "join-worker",
            Role::JoinWorker {
                token: TOKEN.into(),
                ca_cert_hashes: vec![CA_HASH.into()],
            },
        ),
    ]
}

/// The kubeadm API each Kubernetes version gets: v1beta3 before v1.31, v1beta4 from v1.31 on (the
/// newest rendered at the release the local control plane and `kubeadm` are built from).
const VERSIONS: [(&str, &str); 2] = [
    ("v1beta3", "v1.30.2"),
    ("v1beta4", capi_testing::envtest::KUBERNETES_VERSION),
];

fn golden(name: &str, actual: &str) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    capi_testing::golden::check(dir.join(name), actual);
}

fn run_validator(program: &str, args: &[&str], file: &Path) -> (bool, String, String) {
    let output = Command::new(program).args(args).arg(file).output().unwrap_or_else(|e| {
        panic!("cannot run {program} ({e}); `cargo xtask test` installs it (Debian packages cloud-init, ignition)")
    });
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn every_cloud_config_variant_passes_cloud_init_schema() {
    let spec = full_spec();
    let dir = tempfile::tempdir().unwrap();
    for (api, version) in VERSIONS {
        for (role_name, role) in roles() {
            let plan = render::plan(&input(&spec, role, version)).unwrap();
            let rendered = render::cloud_init::render(&plan);
            let name = format!("cloud-config-{role_name}-{api}.yaml");
            golden(&name, &rendered);
            let path = dir.path().join(&name);
            std::fs::write(&path, &rendered).unwrap();
            let (ok, stdout, stderr) =
                run_validator("cloud-init", &["schema", "--config-file"], &path);
            assert!(
                ok && stderr.trim().is_empty(),
                "{name}: cloud-init schema failed\nstdout: {stdout}\nstderr: {stderr}"
            );
        }
    }
}

#[test]
fn every_ignition_variant_passes_ignition_validate() {
    let mut spec = ignition_spec();
    spec.ignition = Some(capi_bootstrap::api::IgnitionSpec {
        container_linux_config: Some(capi_bootstrap::api::ContainerLinuxConfig {
            additional_config: Some(
                r#"{"systemd": {"units": [{"name": "containerd.service", "enabled": true}]}}"#
                    .into(),
            ),
            strict: None,
        }),
    });
    let dir = tempfile::tempdir().unwrap();
    for (api, version) in VERSIONS {
        for (role_name, role) in roles() {
            let plan = render::plan(&input(&spec, role, version)).unwrap();
            let rendered = render::ignition::render(&plan).unwrap();
            let name = format!("ignition-{role_name}-{api}.json");
            golden(&name, &rendered);
            let path = dir.path().join(&name);
            std::fs::write(&path, &rendered).unwrap();
            let (ok, stdout, stderr) = run_validator("ignition-validate", &[], &path);
            assert!(
                ok && stdout.trim().is_empty() && stderr.trim().is_empty(),
                "{name}: ignition-validate failed\nstdout: {stdout}\nstderr: {stderr}"
            );
        }
    }
}

#[test]
fn both_formats_carry_the_same_files_and_commands() {
    let spec = ignition_spec();
    let plan = render::plan(&input(&spec, roles().remove(0).1, "v1.31.1")).unwrap();
    let cloud_config = render::cloud_init::render(&plan);
    let ignition: serde_json::Value =
        serde_json::from_str(&render::ignition::render(&plan).unwrap()).unwrap();
    let ignition_paths: Vec<&str> = ignition["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    for file in &plan.files {
        assert!(
            cloud_config.contains(&format!("path: \"{}\"", file.path)),
            "{} missing in cloud-config",
            file.path
        );
        assert!(
            ignition_paths.contains(&file.path.as_str()),
            "{} missing in Ignition",
            file.path
        );
    }
    assert!(
        plan.commands
            .iter()
            .any(|c| c.starts_with("kubeadm init --config /run/kubeadm/kubeadm.yaml --v=5"))
    );
    assert_eq!(
        plan.commands.first().map(String::as_str),
        Some("swapoff -a"),
        "pre-kubeadm commands run first"
    );
}

/// `kubeadm config validate` accepts the kubeadm document of every variant the golden files hold —
/// the same plan they render, byte for byte — judged by the kubeadm of the document's Kubernetes
/// minor (`cargo xtask envtest` builds kubeadm v1.36 for v1beta4 and v1.30 for v1beta3: kubeadm
/// judges only control-plane versions of its own minor and the one before).
#[test]
fn every_kubeadm_document_passes_kubeadm_config_validate() {
    let spec = full_spec();
    let dir = tempfile::tempdir().unwrap();
    for (api, version) in VERSIONS {
        let minor = capi_testing::envtest::kubernetes_minor(version).unwrap();
        let kubeadm = capi_testing::envtest::kubeadm_for(minor).unwrap_or_else(|| {
            panic!("no kubeadm for {version}; `cargo xtask envtest` builds them")
        });
        for (role_name, role) in roles() {
            let plan = render::plan(&input(&spec, role, version)).unwrap();
            let document = plan
                .files
                .iter()
                .find(|f| {
                    f.path == render::KUBEADM_INIT_CONFIG || f.path == render::KUBEADM_JOIN_CONFIG
                })
                .unwrap_or_else(|| panic!("{role_name}-{api}: no kubeadm document rendered"));
            let text = String::from_utf8(document.content.clone()).unwrap();
            assert!(text.contains(&format!("kubeadm.k8s.io/{api}")), "{text}");
            let path = dir.path().join(format!("kubeadm-{role_name}-{api}.yaml"));
            std::fs::write(&path, &text).unwrap();
            let output = Command::new(&kubeadm)
                .args(["config", "validate", "--config"])
                .arg(&path)
                .output()
                .unwrap_or_else(|e| panic!("cannot run {} ({e})", kubeadm.display()));
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                output.status.success(),
                "{role_name}-{api}: {} config validate failed\n{text}\nstdout: {stdout}\nstderr: {stderr}",
                kubeadm.display()
            );
        }
    }
}

/// A control plane on an external etcd: the first machine's ClusterConfiguration names the
/// external members (and no stacked etcd), and kubeadm of both API versions accepts it.
#[test]
fn an_external_etcd_is_rendered_and_passes_kubeadm_config_validate() {
    let mut spec = full_spec();
    if let Some(config) = spec.cluster_configuration.as_mut() {
        config.etcd = Some(Etcd {
            local: None,
            external: Some(ExternalEtcd {
                endpoints: vec![
                    "https://10.0.0.10:2379".into(),
                    "https://10.0.0.11:2379".into(),
                ],
                ca_file: "/etc/kubernetes/pki/etcd/ca.crt".into(),
                cert_file: "/etc/kubernetes/pki/apiserver-etcd-client.crt".into(),
                key_file: "/etc/kubernetes/pki/apiserver-etcd-client.key".into(),
            }),
        });
    }
    let dir = tempfile::tempdir().unwrap();
    for (api, version) in VERSIONS {
        let minor = capi_testing::envtest::kubernetes_minor(version).unwrap();
        let kubeadm = capi_testing::envtest::kubeadm_for(minor).unwrap_or_else(|| {
            panic!("no kubeadm for {version}; `cargo xtask envtest` builds them")
        });
        let (_, init) = roles().remove(0);
        let plan = render::plan(&input(&spec, init, version)).unwrap();
        let document = plan
            .files
            .iter()
            .find(|f| f.path == render::KUBEADM_INIT_CONFIG)
            .unwrap();
        let text = String::from_utf8(document.content.clone()).unwrap();
        assert!(text.contains("\"external\""), "{text}");
        assert!(text.contains("https://10.0.0.11:2379"), "{text}");
        assert!(!text.contains("\"local\""), "{text}");
        let path = dir.path().join(format!("kubeadm-external-etcd-{api}.yaml"));
        std::fs::write(&path, &text).unwrap();
        let output = Command::new(&kubeadm)
            .args(["config", "validate", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{api}: kubeadm config validate refused the external etcd\n{text}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// What Ignition cannot carry is refused with the field and what to do instead, never dropped.
#[test]
fn ignition_refuses_boot_commands_disks_and_mounts_by_name() {
    for (field, spec) in [
        (
            "bootCommands",
            KubeadmConfigSpec {
                disk_setup: None,
                mounts: Vec::new(),
                ..full_spec()
            },
        ),
        (
            "diskSetup",
            KubeadmConfigSpec {
                boot_commands: Vec::new(),
                mounts: Vec::new(),
                ..full_spec()
            },
        ),
        (
            "mounts",
            KubeadmConfigSpec {
                boot_commands: Vec::new(),
                disk_setup: None,
                ..full_spec()
            },
        ),
    ] {
        let plan = render::plan(&input(&spec, roles().remove(0).1, "v1.31.1")).unwrap();
        let error = render::ignition::render(&plan).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("{field} is not supported with format ignition")),
            "{error}"
        );
    }
}
