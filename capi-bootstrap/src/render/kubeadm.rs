//! kubeadm's configuration files, in the API version the node's kubeadm expects:
//! `kubeadm.k8s.io/v1beta4` from Kubernetes 1.31 on, `kubeadm.k8s.io/v1beta3` before.
//!
//! Documents are written as JSON (a subset of YAML that kubeadm reads), separated by `---`, so
//! that no value can be misread by a YAML 1.1 parser.

use serde_json::{Map, Value, json};

use super::{KubernetesVersion, RenderInput, Role};
use crate::api::{Arg, ClusterConfiguration, ControlPlaneComponent, Discovery, NodeRegistration};

/// The default TTL of bootstrap tokens created by `kubeadm init` for joining machines.
pub const BOOTSTRAP_TOKEN_TTL: &str = "15m0s";

/// The kubeadm API version for a node of `version`.
pub fn api_version(version: KubernetesVersion) -> &'static str {
    if (version.major, version.minor) >= (1, 31) {
        "kubeadm.k8s.io/v1beta4"
    } else {
        "kubeadm.k8s.io/v1beta3"
    }
}

/// Renders the configuration file for the machine's role.
pub fn render(input: &RenderInput<'_>) -> String {
    let v4 = api_version(input.version).ends_with("v1beta4");
    let documents = match &input.role {
        Role::Init { token } => vec![
            init_configuration(input, token, v4),
            cluster_configuration(input, v4),
        ],
        Role::JoinControlPlane {
            token,
            ca_cert_hashes,
        } => vec![join_configuration(input, token, ca_cert_hashes, true, v4)],
        Role::JoinWorker {
            token,
            ca_cert_hashes,
        } => vec![join_configuration(input, token, ca_cert_hashes, false, v4)],
    };
    let mut out = String::new();
    for document in documents {
        out.push_str("---\n");
        out.push_str(&serde_json::to_string_pretty(&document).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// `extraArgs` as v1beta3's map or v1beta4's list of `{name, value}`.
fn args(args: &[Arg], v4: bool) -> Value {
    if v4 {
        Value::Array(
            args.iter()
                .map(|a| json!({"name": a.name, "value": a.value}))
                .collect(),
        )
    } else {
        Value::Object(
            args.iter()
                .map(|a| (a.name.clone(), Value::String(a.value.clone())))
                .collect(),
        )
    }
}

fn insert_nonempty(map: &mut Map<String, Value>, key: &str, value: Value) {
    let empty = match &value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    };
    if !empty {
        map.insert(key.to_string(), value);
    }
}

/// A control-plane component's static pod settings: `extraArgs`, `extraVolumes`, and (kubeadm
/// v1beta4 only) `extraEnvs`.
fn component(settings: &ControlPlaneComponent, v4: bool) -> Map<String, Value> {
    let mut fields = Map::new();
    insert_nonempty(&mut fields, "extraArgs", args(&settings.extra_args, v4));
    insert_nonempty(&mut fields, "extraVolumes", json!(settings.extra_volumes));
    if v4 {
        insert_nonempty(&mut fields, "extraEnvs", json!(settings.extra_envs));
    }
    fields
}

fn node_registration(registration: Option<&NodeRegistration>, v4: bool) -> Value {
    let mut map = Map::new();
    if let Some(registration) = registration {
        insert_nonempty(&mut map, "name", json!(registration.name));
        insert_nonempty(&mut map, "criSocket", json!(registration.cri_socket));
        insert_nonempty(
            &mut map,
            "kubeletExtraArgs",
            args(&registration.kubelet_extra_args, v4),
        );
        insert_nonempty(
            &mut map,
            "ignorePreflightErrors",
            json!(registration.ignore_preflight_errors),
        );
        // An empty list is meaningful: no taints at all (kubeadm's default taints otherwise).
        if let Some(taints) = &registration.taints {
            map.insert("taints".into(), json!(taints));
        }
        insert_nonempty(
            &mut map,
            "imagePullPolicy",
            json!(registration.image_pull_policy),
        );
        if v4 {
            insert_nonempty(
                &mut map,
                "imagePullSerial",
                json!(registration.image_pull_serial),
            );
        }
    }
    Value::Object(map)
}

fn document(input: &RenderInput<'_>, kind: &str) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("apiVersion".into(), json!(api_version(input.version)));
    map.insert("kind".into(), json!(kind));
    map
}

fn init_configuration(input: &RenderInput<'_>, token: &str, v4: bool) -> Value {
    let init = input
        .spec
        .init_configuration
        .as_deref()
        .cloned()
        .unwrap_or_default();
    let mut map = document(input, "InitConfiguration");
    let mut tokens = vec![json!({
        "token": token,
        "ttl": BOOTSTRAP_TOKEN_TTL,
        "groups": ["system:bootstrappers:kubeadm:default-node-token"],
        "usages": ["signing", "authentication"],
    })];
    for extra in &init.bootstrap_tokens {
        let mut fields = Map::new();
        fields.insert("token".into(), json!(extra.token));
        insert_nonempty(&mut fields, "description", json!(extra.description));
        if let Some(seconds) = extra.ttl_seconds {
            fields.insert("ttl".into(), json!(format!("{seconds}s")));
        }
        insert_nonempty(&mut fields, "expires", json!(extra.expires));
        insert_nonempty(&mut fields, "usages", json!(extra.usages));
        insert_nonempty(&mut fields, "groups", json!(extra.groups));
        tokens.push(Value::Object(fields));
    }
    map.insert("bootstrapTokens".into(), Value::Array(tokens));
    insert_nonempty(
        &mut map,
        "nodeRegistration",
        node_registration(init.node_registration.as_ref(), v4),
    );
    if let Some(endpoint) = &init.local_api_endpoint {
        let mut local = Map::new();
        insert_nonempty(
            &mut local,
            "advertiseAddress",
            json!(endpoint.advertise_address),
        );
        insert_nonempty(&mut local, "bindPort", json!(endpoint.bind_port));
        insert_nonempty(&mut map, "localAPIEndpoint", Value::Object(local));
    }
    insert_nonempty(&mut map, "skipPhases", json!(init.skip_phases));
    insert_nonempty(&mut map, "patches", json!(init.patches));
    if v4 && let Some(timeouts) = &init.timeouts {
        insert_nonempty(&mut map, "timeouts", Value::Object(timeouts.to_kubeadm()));
    }
    Value::Object(map)
}

fn cluster_configuration(input: &RenderInput<'_>, v4: bool) -> Value {
    let config: ClusterConfiguration = input
        .spec
        .cluster_configuration
        .as_deref()
        .cloned()
        .unwrap_or_default();
    let cluster = &input.cluster;
    let mut map = document(input, "ClusterConfiguration");
    map.insert("clusterName".into(), json!(cluster.name));
    map.insert("kubernetesVersion".into(), json!(input.version.to_tag()));
    // The user's endpoint wins over the Cluster's, as upstream's bootstrap provider does it.
    let endpoint = config
        .control_plane_endpoint
        .clone()
        .unwrap_or_else(|| cluster.control_plane_endpoint.clone());
    map.insert("controlPlaneEndpoint".into(), json!(endpoint));
    map.insert(
        "networking".into(),
        json!({
            "podSubnet": cluster.pod_cidrs.join(","),
            "serviceSubnet": cluster.service_cidrs.join(","),
            "dnsDomain": cluster.service_domain,
        }),
    );
    let api_server = config.api_server.clone().unwrap_or_default();
    let mut api = component(
        &ControlPlaneComponent {
            extra_args: api_server.extra_args,
            extra_volumes: api_server.extra_volumes,
            extra_envs: api_server.extra_envs,
        },
        v4,
    );
    insert_nonempty(&mut api, "certSANs", json!(api_server.cert_sans));
    insert_nonempty(&mut map, "apiServer", Value::Object(api));
    for (key, settings) in [
        ("controllerManager", &config.controller_manager),
        ("scheduler", &config.scheduler),
    ] {
        if let Some(settings) = settings {
            insert_nonempty(&mut map, key, Value::Object(component(settings, v4)));
        }
    }
    if let Some(etcd) = &config.etcd {
        let mut fields = Map::new();
        if let Some(local) = &etcd.local {
            let mut settings = Map::new();
            insert_nonempty(
                &mut settings,
                "imageRepository",
                json!(local.image_repository),
            );
            insert_nonempty(&mut settings, "imageTag", json!(local.image_tag));
            insert_nonempty(&mut settings, "dataDir", json!(local.data_dir));
            insert_nonempty(&mut settings, "extraArgs", args(&local.extra_args, v4));
            if v4 {
                insert_nonempty(&mut settings, "extraEnvs", json!(local.extra_envs));
            }
            insert_nonempty(
                &mut settings,
                "serverCertSANs",
                json!(local.server_cert_sans),
            );
            insert_nonempty(&mut settings, "peerCertSANs", json!(local.peer_cert_sans));
            fields.insert("local".into(), Value::Object(settings));
        }
        if let Some(external) = &etcd.external {
            fields.insert("external".into(), json!(external));
        }
        insert_nonempty(&mut map, "etcd", Value::Object(fields));
    }
    if let Some(dns) = &config.dns {
        let mut fields = Map::new();
        insert_nonempty(&mut fields, "imageRepository", json!(dns.image_repository));
        insert_nonempty(&mut fields, "imageTag", json!(dns.image_tag));
        insert_nonempty(&mut map, "dns", Value::Object(fields));
    }
    if v4 {
        insert_nonempty(
            &mut map,
            "encryptionAlgorithm",
            json!(config.encryption_algorithm.map(|a| a.as_str())),
        );
        let days = |d: Option<i32>| d.map(|d| format!("{}h0m0s", i64::from(d) * 24));
        insert_nonempty(
            &mut map,
            "certificateValidityPeriod",
            json!(days(config.certificate_validity_period_days)),
        );
        insert_nonempty(
            &mut map,
            "caCertificateValidityPeriod",
            json!(days(config.ca_certificate_validity_period_days)),
        );
    }
    insert_nonempty(&mut map, "imageRepository", json!(config.image_repository));
    insert_nonempty(&mut map, "certificatesDir", json!(config.certificates_dir));
    insert_nonempty(&mut map, "featureGates", json!(config.feature_gates));
    Value::Object(map)
}

fn join_configuration(
    input: &RenderInput<'_>,
    token: &str,
    ca_cert_hashes: &[String],
    control_plane: bool,
    v4: bool,
) -> Value {
    let join = input
        .spec
        .join_configuration
        .as_deref()
        .cloned()
        .unwrap_or_default();
    let mut map = document(input, "JoinConfiguration");
    insert_nonempty(&mut map, "caCertPath", json!(join.ca_cert_path));
    map.insert(
        "discovery".into(),
        discovery(input, join.discovery.as_ref(), token, ca_cert_hashes),
    );
    insert_nonempty(
        &mut map,
        "nodeRegistration",
        node_registration(join.node_registration.as_ref(), v4),
    );
    if control_plane {
        let mut local = Map::new();
        if let Some(endpoint) = join.control_plane.and_then(|c| c.local_api_endpoint) {
            insert_nonempty(
                &mut local,
                "advertiseAddress",
                json!(endpoint.advertise_address),
            );
            insert_nonempty(&mut local, "bindPort", json!(endpoint.bind_port));
        }
        map.insert("controlPlane".into(), json!({"localAPIEndpoint": local}));
    }
    insert_nonempty(&mut map, "skipPhases", json!(join.skip_phases));
    insert_nonempty(&mut map, "patches", json!(join.patches));
    if v4 && let Some(timeouts) = &join.timeouts {
        insert_nonempty(&mut map, "timeouts", Value::Object(timeouts.to_kubeadm()));
    }
    Value::Object(map)
}

/// `discovery`: what the user set wins, as upstream's bootstrap provider does it; otherwise a
/// bootstrap token (`token`), the cluster's endpoint and the CA's hashes. A `file` discovery
/// replaces the token discovery.
fn discovery(
    input: &RenderInput<'_>,
    set: Option<&Discovery>,
    token: &str,
    ca_cert_hashes: &[String],
) -> Value {
    let mut map = Map::new();
    let set = set.cloned().unwrap_or_default();
    if let Some(file) = &set.file {
        map.insert(
            "file".into(),
            json!({"kubeConfigPath": file.kube_config_path}),
        );
    } else {
        let wanted = set.bootstrap_token.unwrap_or_default();
        let skip_ca = wanted.unsafe_skip_ca_verification.unwrap_or(false);
        let mut bootstrap = Map::new();
        bootstrap.insert(
            "token".into(),
            json!(wanted.token.as_deref().unwrap_or(token)),
        );
        bootstrap.insert(
            "apiServerEndpoint".into(),
            json!(
                wanted
                    .api_server_endpoint
                    .as_deref()
                    .unwrap_or(&input.cluster.control_plane_endpoint)
            ),
        );
        let hashes = if !wanted.ca_cert_hashes.is_empty() {
            wanted.ca_cert_hashes.clone()
        } else if skip_ca {
            Vec::new()
        } else {
            ca_cert_hashes.to_vec()
        };
        insert_nonempty(&mut bootstrap, "caCertHashes", json!(hashes));
        if skip_ca {
            bootstrap.insert("unsafeSkipCAVerification".into(), json!(true));
        }
        map.insert("bootstrapToken".into(), Value::Object(bootstrap));
    }
    insert_nonempty(
        &mut map,
        "tlsBootstrapToken",
        json!(set.tls_bootstrap_token),
    );
    Value::Object(map)
}
